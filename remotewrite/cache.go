package remotewrite

import (
	"sync"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// seriesCache maps the label set of a series seen before to its stable
// labels.Labels and TSDB series reference, so a known series costs a hash of
// its labels and a map lookup, is appended by reference (the TSDB does not
// hash its labels again), and needs no label set of its own (an allocation
// per series per request).
//
// A reference can go stale when the TSDB drops the series from its head; the
// head then falls back to the label set we pass along, which is why the cache
// keeps labels and not only references. The cache is bounded by two
// generations: when the current one is full the previous one is dropped, so
// series not seen for a generation are forgotten. It is sharded to keep
// concurrent requests from contending on one lock.
type seriesCache struct {
	shards [cacheShards]cacheShard
}

const cacheShards = 16

type cacheShard struct {
	mu        sync.Mutex
	max       int
	cur, prev map[uint64]cacheEntry
}

type cacheEntry struct {
	lset labels.Labels
	ref  storage.SeriesRef
}

func newSeriesCache(size int) *seriesCache {
	c := &seriesCache{}
	per := max(size/cacheShards/2, 1)
	for i := range c.shards {
		c.shards[i] = cacheShard{max: per, cur: make(map[uint64]cacheEntry)}
	}
	return c
}

func (c *seriesCache) shard(hash uint64) *cacheShard { return &c.shards[hash%cacheShards] }

// get returns the entry cached for the label set ls with hash ls.Hash().
func (c *seriesCache) get(hash uint64, ls labels.Labels) (cacheEntry, bool) {
	sh := c.shard(hash)
	sh.mu.Lock()
	e, ok := sh.cur[hash]
	if !ok && sh.prev != nil {
		if e, ok = sh.prev[hash]; ok {
			sh.putLocked(hash, e) // promote: it is still in use
		}
	}
	sh.mu.Unlock()
	// Equal guards against hash collisions; with the default label
	// implementation it is one comparison of two flat strings.
	if !ok || !labels.Equal(e.lset, ls) {
		return cacheEntry{}, false
	}
	return e, true
}

func (c *seriesCache) put(hash uint64, lset labels.Labels, ref storage.SeriesRef) {
	sh := c.shard(hash)
	sh.mu.Lock()
	sh.putLocked(hash, cacheEntry{lset: lset, ref: ref})
	sh.mu.Unlock()
}

func (sh *cacheShard) putLocked(hash uint64, e cacheEntry) {
	if len(sh.cur) >= sh.max {
		sh.prev, sh.cur = sh.cur, make(map[uint64]cacheEntry, sh.max)
	}
	sh.cur[hash] = e
}

// seriesLabels returns the label set, its hash and the known reference of a
// sorted series: from the cache when possible (cached is then true), else a
// copy out of the request buffer with ref 0.
//
// The label set is first encoded into st's reusable buffer (no allocation),
// hashed in one pass over that flat encoding and compared with the cached
// one in one more: the per-label hashing and comparison this replaces cost
// more than the TSDB's own append. Only a series the cache does not know is
// copied, because the TSDB and the tee keep its labels.
func (h *Handler) seriesLabels(views []Label, st *writeState) (ls labels.Labels, ref storage.SeriesRef, hash uint64, cached bool) {
	st.sb.Reset()
	for _, l := range views {
		if l.Value != "" {
			st.sb.Add(l.Name, l.Value)
		}
	}
	st.sb.Overwrite(&st.key)
	if h.cache == nil {
		return st.key.Copy(), 0, 0, false
	}
	hash = st.key.Hash()
	if e, ok := h.cache.get(hash, st.key); ok {
		return e.lset, e.ref, hash, true
	}
	return st.key.Copy(), 0, hash, false
}

// stableLabels returns the head's own copy of a series' labels when the
// appender can tell it, so the cache shares memory with the TSDB instead of
// holding a second copy of every label set.
func (h *Handler) stableLabels(app storage.AppenderV2, ls labels.Labels, hash uint64, ref storage.SeriesRef) labels.Labels {
	g, ok := app.(storage.GetRef)
	if !ok {
		return ls
	}
	if r, hl := g.GetRef(ls, hash); r == ref && !hl.IsEmpty() {
		return hl
	}
	return ls
}
