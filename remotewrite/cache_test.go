package remotewrite

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

// TestSeriesCacheGuardsCollisions: an entry is returned only for the label
// set it was stored with, so two series whose hashes collide never share a
// reference (whether looked up alone or with a request's series, probeAll);
// and seriesLabels hands out a copy, not its scratch buffer, for a series the
// cache does not know.
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
	first := []Series{{Labels: []Label{{"__name__", "up"}, {"empty", ""}, {"job", "a"}}}}
	h.probeAll(first, &st)
	ls, ref, hash, cached := h.seriesLabels(0, first[0].Labels, &st)
	if cached || ref != 0 || hash != a.Hash() || !labels.Equal(ls, a) {
		t.Fatalf("new series: %v ref %d hash %x cached %v; want %v uncached with hash %x", ls, ref, hash, cached, a, a.Hash())
	}
	h.cache.put(hash, ls, 9)
	// b stored under c's hash: a probe for c finds the entry and must
	// still refuse it.
	cl := labels.FromStrings("__name__", "up", "job", "c")
	h.cache.put(cl.Hash(), b, 11)
	second := []Series{
		{Labels: []Label{{"__name__", "up"}, {"job", "b"}}},
		{Labels: []Label{{"__name__", "up"}, {"job", "c"}}},
		{Labels: []Label{{"__name__", "up"}, {"job", "x"}}, Err: errBadRef},
		{Labels: []Label{{"__name__", "up"}, {"job", "a"}}},
	}
	h.probeAll(second, &st)
	if _, _, _, cached := h.seriesLabels(0, second[0].Labels, &st); cached {
		t.Fatal("job=b found in the cache")
	}
	if got, _, _, cached := h.seriesLabels(1, second[1].Labels, &st); cached || !labels.Equal(got, cl) {
		t.Fatalf("job=c: %v cached %v; want a miss with its own labels (the entry under its hash is b's)", got, cached)
	}
	if !labels.Equal(ls, a) {
		t.Fatalf("labels of a new series changed to %v when the scratch buffer was reused", ls)
	}
	if got, ref, _, cached := h.seriesLabels(3, second[3].Labels, &st); !cached || ref != 9 || !labels.Equal(got, a) {
		t.Fatalf("known series: %v ref %d cached %v; want %v ref 9 from the cache", got, ref, cached, a)
	}
}

// TestWriteForgetsProbes: after a request, the pooled write state holds no
// label set of the series cache, which would keep series the head dropped
// alive for as long as the state stays in the pool.
func TestWriteForgetsProbes(t *testing.T) {
	h, err := NewHandler(DefaultConfig(), &nopAppendable{}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Series: []Series{{Labels: []Label{{"__name__", "up"}, {"job", "a"}}, Samples: []Sample{{Value: 1, Timestamp: base.UnixMilli()}}}}}
	var st writeState
	h.now = func() time.Time { return base }
	r := httptest.NewRequest(http.MethodPost, "/api/v1/write", http.NoBody)
	for i := range 2 { // the second request finds the series in the cache
		if res := h.write(r, version1, req, &st); res.samples != 1 {
			t.Fatalf("request %d wrote %d samples: %s", i, res.samples, res.message(1000))
		}
	}
	for i, p := range st.probes[:cap(st.probes)] {
		if !p.entry.lset.IsEmpty() {
			t.Fatalf("probe %d still holds %v after the request", i, p.entry.lset)
		}
	}
}
