package remotewrite

import (
	"bytes"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// TestSeriesCacheGuardsCollisions: an entry is returned only for the label
// set it was stored with, so two series whose hashes collide never share a
// reference (whether looked up alone or with a request's series, probeAll);
// and seriesLabels hands out a copy, not its scratch buffer, for a series the
// cache does not know.
func TestSeriesCacheGuardsCollisions(t *testing.T) {
	c := newSeriesCache(64, nil)
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
		if res := h.write(r.Context(), version1, req, &st); res.samples != 1 {
			t.Fatalf("request %d wrote %d samples: %s", i, res.samples, res.message(1000))
		}
	}
	for i, p := range st.probes[:cap(st.probes)] {
		if !p.entry.lset.IsEmpty() {
			t.Fatalf("probe %d still holds %v after the request", i, p.entry.lset)
		}
	}
}

// TestLabelKeys: the series cache's keys, encoded straight from label
// views, are the bytes and the hash of the labels.Labels the views make
// (empty values left out), at the lengths where the encoding of a length
// changes; so a cached series is found and the TSDB's hash is ours.
func TestLabelKeys(t *testing.T) {
	if !labelKeysMatch() {
		t.Fatal("labelKeysMatch is false with the default labels implementation: probeAll takes the slow path")
	}
	for _, n := range []int{0, 1, 127, 128, 254, 255, 256, 70000} {
		v := strings.Repeat("v", n)
		views := []Label{{"__name__", "m"}, {"a", v}, {strings.Repeat("n", n+1), "x"}, {"z", ""}}
		var sb labels.ScratchBuilder
		for _, l := range views {
			if l.Value != "" {
				sb.Add(l.Name, l.Value)
			}
		}
		want := sb.Labels()
		key := appendLabelKey([]byte("prefix"), views)
		if got := key[len("prefix"):]; !bytes.Equal(got, want.Bytes(nil)) || xxhash.Sum64(got) != want.Hash() {
			t.Fatalf("length %d: key %q, want the bytes %q of %v", n, got, want.Bytes(nil), want)
		}
	}
}

// TestGenTable: a generation's table finds every entry put into it, with
// hashes that start their probes in the same slot and wrap around the
// table's end, through its growth, with an entry replaced; and misses what
// was never put.
func TestGenTable(t *testing.T) {
	var tab genTable
	const n = 5000
	hash := func(i int) uint64 {
		if i%3 == 0 {
			return math.MaxUint64 - uint64(i) // probes start at the last slot
		}
		return uint64(i) * 0x9E3779B97F4A7C15
	}
	for i := range n {
		tab.put(hash(i), cacheEntry{ref: storage.SeriesRef(i + 1)})
	}
	tab.put(hash(7), cacheEntry{ref: 99999})
	if tab.n != n || 4*tab.n > 3*len(tab.slots) {
		t.Fatalf("%d entries in %d slots, want %d at most three quarters full", tab.n, len(tab.slots), n)
	}
	for i := range n {
		want := storage.SeriesRef(i + 1)
		if i == 7 {
			want = 99999
		}
		if e, ok := tab.get(hash(i)); !ok || e.ref != want {
			t.Fatalf("entry %d: %v, %v; want ref %d", i, e, ok, want)
		}
	}
	if e, ok := tab.get(12345); ok {
		t.Fatalf("a hash never put found %v", e)
	}
	var empty genTable
	if _, ok := empty.get(hash(1)); ok {
		t.Fatal("an empty table found an entry")
	}
}

// rotate looks up n series in order, as a fleet sends them once per scrape
// interval, putting each one missed; it returns the hits.
func rotate(c *seriesCache, from, n int) int {
	hits := 0
	for i := from; i < from+n; i++ {
		ls := labels.FromStrings("__name__", "up", "instance", strconv.Itoa(i))
		h := ls.Hash()
		if e, ok := c.get(h, ls); ok && e.ref == storage.SeriesRef(i+1) {
			hits++
			continue
		}
		c.put(h, ls, storage.SeriesRef(i+1))
	}
	return hits
}

// TestSeriesCacheFollowsFleet: a fleet larger than the cache's smallest
// generation, sent in rotation, hits on every series once the cache is sized
// to the storage's series count; a fixed generation smaller than the fleet
// hits on none (each series evicted before it comes back). The bound holds
// whatever the storage says, and the cache shrinks when the storage does.
func TestSeriesCacheFollowsFleet(t *testing.T) {
	const fleet = 2 * minCachePerGen
	fixed := newSeriesCache(fleet/3, nil)
	rotate(fixed, 0, fleet)
	if hits := rotate(fixed, 0, fleet); hits != 0 {
		t.Fatalf("fixed generation of %d, rotation of %d: %d hits; want 0 (evicted before they come back)", fleet/3, fleet, hits)
	}

	storageSeries := 0
	c := newSeriesCache(1<<22, func() int { return storageSeries })
	for i := range fleet { // the head grows as the series arrive
		storageSeries = i + 1
		ls := labels.FromStrings("__name__", "up", "instance", strconv.Itoa(i))
		c.put(ls.Hash(), ls, storage.SeriesRef(i+1))
	}
	if hits := rotate(c, 0, fleet); hits != fleet {
		t.Fatalf("sized to the fleet: %d hits of %d", hits, fleet)
	}
	held, capacity := c.stats()
	if held != fleet || capacity < fleet || capacity > fleet+fleet/4 {
		t.Fatalf("held %d, capacity %d; want %d held, capacity the fleet plus about an eighth", held, capacity, fleet)
	}

	bounded := newSeriesCache(minCachePerGen, func() int { return 10 * fleet })
	rotate(bounded, 0, fleet)
	if held, capacity := bounded.stats(); capacity != minCachePerGen || held > 2*minCachePerGen {
		t.Fatalf("storage far over the bound: held %d, capacity %d; want capacity %d, at most two generations", held, capacity, minCachePerGen)
	}

	// The fleet was replaced and the head dropped its old series: the
	// new series fill the generation, and the next one is small again.
	storageSeries = 1000
	rotate(c, fleet, fleet)
	if held, capacity := c.stats(); capacity != minCachePerGen || held > 2*minCachePerGen {
		t.Fatalf("after the storage shrank: held %d, capacity %d; want capacity %d", held, capacity, minCachePerGen)
	}
}

// TestSeriesCacheMetrics: the handler counts each series' lookup as a hit
// or a miss and exposes the cache's size.
func TestSeriesCacheMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	na := &nopAppendable{}
	cfg := DefaultConfig()
	cfg.StorageSeries = func() int { return int(na.next.Load()) }
	h, err := NewHandler(cfg, na, nil, nil, reg, func() time.Time { return base })
	if err != nil {
		t.Fatal(err)
	}
	req := &Request{Series: []Series{
		{Labels: []Label{{"__name__", "up"}, {"job", "a"}}, Samples: []Sample{{Value: 1, Timestamp: base.UnixMilli()}}},
		{Labels: []Label{{"__name__", "up"}, {"job", "b"}}, Samples: []Sample{{Value: 1, Timestamp: base.UnixMilli()}}},
	}}
	var st writeState
	r := httptest.NewRequest(http.MethodPost, "/api/v1/write", http.NoBody)
	for range 3 {
		if res := h.write(r.Context(), version1, req, &st); res.samples != 2 {
			t.Fatalf("wrote %d samples: %s", res.samples, res.message(1000))
		}
	}
	if hit, miss := testutil.ToFloat64(h.m.cacheHits), testutil.ToFloat64(h.m.cacheMisses); hit != 4 || miss != 2 {
		t.Fatalf("lookups: %v hits, %v misses; want 4 and 2", hit, miss)
	}
	got, err := testutil.GatherAndCount(reg, "strata_remotewrite_series_cache_series", "strata_remotewrite_series_cache_capacity_series")
	if err != nil || got != 2 {
		t.Fatalf("cache gauges: %d, %v", got, err)
	}
	if held, _ := h.cache.stats(); held != 2 {
		t.Fatalf("cache holds %d series, want 2", held)
	}
}

// TestProbeChunks: a request of more series than a probe chunk takes (with
// an invalid series inside one chunk and a chunk cut short) is looked up
// whole: every series is a miss the first time, a hit with its own
// reference the second, and the counts are the request's.
func TestProbeChunks(t *testing.T) {
	na := &nopAppendable{}
	cfg := DefaultConfig()
	cfg.StorageSeries = func() int { return int(na.next.Load()) }
	h, err := NewHandler(cfg, na, nil, nil, prometheus.NewRegistry(), func() time.Time { return base })
	if err != nil {
		t.Fatal(err)
	}
	n := 2*probeChunkSeries + 77
	req := &Request{}
	for i := range n {
		req.Series = append(req.Series, Series{
			Labels:  []Label{{"__name__", "up"}, {"instance", strconv.Itoa(i)}, {"job", "a"}},
			Samples: []Sample{{Value: 1, Timestamp: base.UnixMilli()}},
		})
	}
	bad := probeChunkSeries + 3
	req.Series[bad].Err = errBadRef
	var st writeState
	r := httptest.NewRequest(http.MethodPost, "/api/v1/write", http.NoBody)
	if res := h.write(r.Context(), version1, req, &st); res.samples != n-1 {
		t.Fatalf("first request wrote %d samples, want %d: %s", res.samples, n-1, res.message(1000))
	}
	if hit, miss := testutil.ToFloat64(h.m.cacheHits), testutil.ToFloat64(h.m.cacheMisses); hit != 0 || miss != float64(n-1) {
		t.Fatalf("first request: %v hits, %v misses; want 0 and %d", hit, miss, n-1)
	}
	h.probeAll(req.Series, &st)
	for i := range req.Series {
		ls, ref, _, cached := h.seriesLabels(i, req.Series[i].Labels, &st)
		if i == bad {
			if cached {
				t.Fatalf("series %d (invalid) found in the cache", i)
			}
			continue
		}
		want := labels.FromStrings("__name__", "up", "instance", strconv.Itoa(i), "job", "a")
		if !cached || ref == 0 || !labels.Equal(ls, want) {
			t.Fatalf("series %d: %v ref %d cached %v; want %v from the cache", i, ls, ref, cached, want)
		}
		if e, ok := h.cache.get(want.Hash(), want); !ok || e.ref != ref {
			t.Fatalf("series %d: reference %d, the cache holds %v %v", i, ref, e, ok)
		}
	}
	if hit := testutil.ToFloat64(h.m.cacheHits); hit != float64(n-1) {
		t.Fatalf("second lookup: %v hits, want %d", hit, n-1)
	}
}
