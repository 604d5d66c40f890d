package remotewrite

import (
	"sync"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// seriesCache maps the label set of a series seen before to its stable
// labels.Labels and TSDB series reference, so a known series costs a hash of
// its label views and a map lookup instead of building a label set (an
// allocation per series per request) and hashing it again inside the TSDB.
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

// get returns the entry for views if it is cached; views must be sorted.
func (c *seriesCache) get(hash uint64, views []Label) (cacheEntry, bool) {
	sh := c.shard(hash)
	sh.mu.Lock()
	e, ok := sh.cur[hash]
	if !ok && sh.prev != nil {
		if e, ok = sh.prev[hash]; ok {
			sh.putLocked(hash, e) // promote: it is still in use
		}
	}
	sh.mu.Unlock()
	if !ok || !sameLabels(e.lset, views) {
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

// hashLabels hashes sorted label views, skipping empty values as the label
// set built from them does. It does not allocate.
func hashLabels(views []Label) uint64 {
	var d xxhash.Digest
	d.Reset()
	sep := []byte{0xff}
	for _, l := range views {
		if l.Value == "" {
			continue
		}
		_, _ = d.WriteString(l.Name)
		_, _ = d.Write(sep)
		_, _ = d.WriteString(l.Value)
		_, _ = d.Write(sep)
	}
	return d.Sum64()
}

// sameLabels compares a label set with sorted views (empty values skipped),
// guarding the cache against hash collisions.
func sameLabels(lset labels.Labels, views []Label) bool {
	i := 0
	same := true
	lset.Range(func(l labels.Label) {
		if !same {
			return
		}
		for i < len(views) && views[i].Value == "" {
			i++
		}
		if i >= len(views) || views[i].Name != l.Name || views[i].Value != l.Value {
			same = false
			return
		}
		i++
	})
	for i < len(views) && views[i].Value == "" {
		i++
	}
	return same && i == len(views)
}

// seriesLabels returns the label set and known reference of a validated,
// sorted series: from the cache when possible, else built (copied out of the
// request buffer) with ref 0.
func (h *Handler) seriesLabels(views []Label, sb *labels.ScratchBuilder) (ls labels.Labels, ref storage.SeriesRef, hash uint64, cached bool) {
	if h.cache != nil {
		hash = hashLabels(views)
		if e, ok := h.cache.get(hash, views); ok {
			return e.lset, e.ref, hash, true
		}
	}
	sb.Reset()
	for _, l := range views {
		if l.Value != "" {
			sb.Add(l.Name, l.Value)
		}
	}
	return sb.Labels(), 0, hash, false
}

// stableLabels returns the head's own copy of a series' labels when the
// appender can tell it, so the cache shares memory with the TSDB instead of
// holding a second copy of every label set.
func (h *Handler) stableLabels(app storage.AppenderV2, ls labels.Labels, ref storage.SeriesRef) labels.Labels {
	g, ok := app.(storage.GetRef)
	if !ok {
		return ls
	}
	if r, hl := g.GetRef(ls, ls.Hash()); r == ref && !hl.IsEmpty() {
		return hl
	}
	return ls
}
