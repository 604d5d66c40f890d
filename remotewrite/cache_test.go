package remotewrite

import (
	"testing"

	"github.com/prometheus/prometheus/model/labels"
)

// TestSeriesCacheGuardsCollisions: an entry is returned only for the label
// set it was stored with, so two series whose hashes collide never share a
// reference; and seriesLabels hands out a copy, not its scratch buffer, for a
// series the cache does not know.
func TestSeriesCacheGuardsCollisions(t *testing.T) {
	c := newSeriesCache(64)
	a := labels.FromStrings("__name__", "up", "job", "a")
	b := labels.FromStrings("__name__", "up", "job", "b")
	c.put(42, a, 7)
	if e, ok := c.get(42, a); !ok || e.ref != 7 {
		t.Fatalf("get(a) = %v, %v; want ref 7", e, ok)
	}
	if e, ok := c.get(42, b); ok {
		t.Fatalf("get(b) with a's hash = %v; want a miss", e)
	}

	h, err := NewHandler(DefaultConfig(), &nopAppendable{}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var st writeState
	ls, ref, hash, cached := h.seriesLabels([]Label{{"__name__", "up"}, {"empty", ""}, {"job", "a"}}, &st)
	if cached || ref != 0 || hash != a.Hash() || !labels.Equal(ls, a) {
		t.Fatalf("new series: %v ref %d hash %x cached %v; want %v uncached with hash %x", ls, ref, hash, cached, a, a.Hash())
	}
	h.cache.put(hash, ls, 9)
	if _, _, _, cached := h.seriesLabels([]Label{{"__name__", "up"}, {"job", "b"}}, &st); cached {
		t.Fatal("job=b found in the cache")
	}
	if !labels.Equal(ls, a) {
		t.Fatalf("labels of a new series changed to %v when the scratch buffer was reused", ls)
	}
	if got, ref, _, cached := h.seriesLabels([]Label{{"__name__", "up"}, {"job", "a"}}, &st); !cached || ref != 9 || !labels.Equal(got, a) {
		t.Fatalf("known series: %v ref %d cached %v; want %v ref 9 from the cache", got, ref, cached, a)
	}
}
