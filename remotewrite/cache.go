package remotewrite

import (
	"bytes"
	"math/bits"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
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
//
// A generation holds as many series as the storage does (fleet), plus an
// eighth, within [minPerGen, maxPerGen]: a fleet whose series arrive in
// rotation (every series once per scrape interval, in the same order) finds
// them all only when a generation holds the whole fleet; with a fixed
// generation smaller than the fleet, every series was evicted before it came
// back and no lookup hit. The size is decided when a generation fills, so
// the cache follows the head up and, after the head drops series, down.
type seriesCache struct {
	shards [cacheShards]cacheShard
	policy cachePolicy
}

const cacheShards = 16

// cachePolicy sizes the generations; shared by the shards.
type cachePolicy struct {
	minPerGen, maxPerGen int        // per shard
	fleet                func() int // series in the storage; nil: minPerGen
}

// perShard returns a generation's capacity per shard for the storage's
// current series count.
func (p *cachePolicy) perShard() int {
	if p.fleet == nil {
		return p.minPerGen
	}
	n := p.fleet()
	want := (n + n/8) / cacheShards
	return min(max(want, p.minPerGen), p.maxPerGen)
}

type cacheShard struct {
	mu        sync.Mutex
	max       int
	policy    *cachePolicy
	cur, prev genTable
}

type cacheEntry struct {
	lset labels.Labels
	ref  storage.SeriesRef
}

// genTable is one generation of a cache shard: a hash table of entries by
// the hash of their labels, open addressing with linear probing, at most
// three quarters full. A slot of the table holds the hash and the entry
// together (32 bytes), so a lookup reads one cache line where a Go map reads
// its control word and then its slot, two memory reads the processor waits
// for at 100,000 series (docs/bench.md, issue 13, sixth pass). A slot with
// reference 0 is empty: the cache holds appended series only, whose
// references are not 0.
type genTable struct {
	slots []cacheSlot
	n     int // slots in use
}

type cacheSlot struct {
	hash uint64
	cacheEntry
}

// newGenTable returns a table with room for capacity entries before it
// grows.
func newGenTable(capacity int) genTable {
	return genTable{slots: make([]cacheSlot, max(capacity+capacity/3+1, 8))}
}

// home returns the slot where hash's probe starts: the hash scaled to the
// table's length (its high bits; the low bits chose the shard).
func (t *genTable) home(hash uint64) int {
	hi, _ := bits.Mul64(hash, uint64(len(t.slots)))
	return int(hi)
}

func (t *genTable) get(hash uint64) (cacheEntry, bool) {
	if t.n == 0 {
		return cacheEntry{}, false
	}
	i := t.home(hash)
	for range len(t.slots) {
		s := &t.slots[i]
		if s.ref == 0 {
			break
		}
		if s.hash == hash {
			return s.cacheEntry, true
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
	return cacheEntry{}, false
}

// put stores e under hash, replacing the entry there, and grows the table
// past three quarters full.
func (t *genTable) put(hash uint64, e cacheEntry) {
	if 4*(t.n+1) > 3*len(t.slots) {
		grown := genTable{slots: make([]cacheSlot, max(2*len(t.slots), 8))}
		for _, s := range t.slots {
			if s.ref != 0 {
				grown.put(s.hash, s.cacheEntry)
			}
		}
		*t = grown
	}
	i := t.home(hash)
	for range len(t.slots) {
		s := &t.slots[i]
		if s.ref == 0 {
			*s = cacheSlot{hash: hash, cacheEntry: e}
			t.n++
			return
		}
		if s.hash == hash {
			s.cacheEntry = e
			return
		}
		if i++; i == len(t.slots) {
			i = 0
		}
	}
}

// minCachePerGen is the smallest generation whatever the fleet: a small
// store's cache never turns over for want of room.
const minCachePerGen = 1 << 16

// newSeriesCache returns a cache whose generations hold at most maxSeries
// series each (two generations: up to twice that in all), sized to fleet's
// answer, at least min(maxSeries, minCachePerGen); with nil fleet every
// generation holds maxSeries.
func newSeriesCache(maxSeries int, fleet func() int) *seriesCache {
	c := &seriesCache{}
	maxPer := max(maxSeries/cacheShards, 1)
	minPer := maxPer
	if fleet != nil {
		minPer = min(max(minCachePerGen/cacheShards, 1), maxPer)
	}
	c.policy = cachePolicy{minPerGen: minPer, maxPerGen: maxPer, fleet: fleet}
	for i := range c.shards {
		// The first generation grows as series arrive (a table sized to
		// maxPerGen up front would be most of the cache's bound).
		c.shards[i] = cacheShard{max: c.policy.perShard(), policy: &c.policy}
	}
	return c
}

func (c *seriesCache) shard(hash uint64) *cacheShard { return &c.shards[hash%cacheShards] }

// get returns the entry cached for the label set ls with hash ls.Hash().
func (c *seriesCache) get(hash uint64, ls labels.Labels) (cacheEntry, bool) {
	sh := c.shard(hash)
	sh.mu.Lock()
	e, ok := sh.getLocked(hash)
	sh.mu.Unlock()
	// Equal guards against hash collisions; with the default label
	// implementation it is one comparison of two flat strings.
	if !ok || !labels.Equal(e.lset, ls) {
		return cacheEntry{}, false
	}
	return e, true
}

// getLocked returns the entry of hash, promoting it from the previous
// generation: it is still in use. Called with sh.mu held.
func (sh *cacheShard) getLocked(hash uint64) (cacheEntry, bool) {
	e, ok := sh.cur.get(hash)
	if !ok {
		if e, ok = sh.prev.get(hash); ok {
			sh.putLocked(hash, e)
		}
	}
	return e, ok
}

func (c *seriesCache) put(hash uint64, lset labels.Labels, ref storage.SeriesRef) {
	sh := c.shard(hash)
	sh.mu.Lock()
	sh.putLocked(hash, cacheEntry{lset: lset, ref: ref})
	sh.mu.Unlock()
}

func (sh *cacheShard) putLocked(hash uint64, e cacheEntry) {
	if sh.cur.n >= sh.max {
		// Full: grow the generation when the fleet has grown, else start
		// a new one.
		if sh.max = sh.policy.perShard(); sh.cur.n >= sh.max {
			sh.prev, sh.cur = sh.cur, newGenTable(sh.max)
		}
	}
	sh.cur.put(hash, e)
}

// stats returns the series held (both generations) and a generation's
// capacity, over all shards.
func (c *seriesCache) stats() (held, capacity int) {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		held += sh.cur.n + sh.prev.n
		capacity += sh.max
		sh.mu.Unlock()
	}
	return held, capacity
}

// probe is one series' lookup in the series cache, made for all series of
// a request before any is appended (see probeAll).
type probe struct {
	hash     uint64
	off, end int // the series' encoded labels in writeState.keys (its chunk's)
	entry    cacheEntry
	hit      bool
}

// probeAll looks up every series of a request in the cache at once, filling
// st.probes (one per series, in request order), probeChunkSeries series at a
// time: within a chunk the label sets are encoded and hashed first, then
// looked up shard by shard, one lock per shard instead of one per series,
// and compared with the cached label sets last.
//
// Why in three passes: at 100,000 series the cache's table and label sets
// do not fit in the processor's caches, so a lookup is a few memory reads
// the processor waits for. Looked up one series at a time, between locks,
// each wait comes after the last one; a tight loop of independent lookups
// under one lock lets the processor issue several at once.
//
// Why in chunks: the encoded label sets are kept for the comparison, about
// 300 bytes a series; a whole request's (600 KB at 2,000 series) were a
// fifth of a pooled request state, made again with it whenever the
// collector had dropped the state. A chunk's are 150 KB, and 32 series a
// shard still share a lock. (Encoding them again for the comparison, or
// walking the cached set's encoding against the views, instead of keeping
// them, cost 30% more CPU per series in BenchmarkWrite.)
func (h *Handler) probeAll(series []Series, st *writeState) {
	st.probes = slices.Grow(st.probes[:0], len(series))[:len(series)]
	hits, looked := 0, 0
	for lo := 0; lo < len(series); lo += probeChunkSeries {
		hi := min(lo+probeChunkSeries, len(series))
		n, k := h.probeChunk(series[lo:hi], st.probes[lo:hi], st)
		hits += n
		looked += k
	}
	h.m.cacheHits.Add(float64(hits))
	h.m.cacheMisses.Add(float64(looked - hits))
}

// probeChunkSeries is how many series a probe pass takes at once (see
// probeAll).
const probeChunkSeries = 512

// probeChunk fills probes for series (as many) and returns how many were
// found and how many looked up.
func (h *Handler) probeChunk(series []Series, probes []probe, st *writeState) (hits, looked int) {
	st.keys = st.keys[:0]
	var start [cacheShards + 1]int
	for i := range series {
		s := &series[i]
		p := &probes[i]
		*p = probe{}
		if s.Err != nil {
			continue
		}
		p.off = len(st.keys)
		if h.directKeys {
			st.keys = appendLabelKey(st.keys, s.Labels)
			p.hash = xxhash.Sum64(st.keys[p.off:])
		} else {
			p.hash = st.encode(s.Labels).Hash()
			st.scratch = st.key.Bytes(st.scratch[:0])
			st.keys = append(st.keys, st.scratch...)
		}
		p.end = len(st.keys)
		start[p.hash%cacheShards+1]++
	}
	// Series grouped by shard, in request order within each shard.
	for sh := 1; sh <= cacheShards; sh++ {
		start[sh] += start[sh-1]
	}
	next := start
	st.order = slices.Grow(st.order[:0], len(series))[:start[cacheShards]]
	for i := range series {
		if series[i].Err == nil {
			sh := probes[i].hash % cacheShards
			st.order[next[sh]] = int32(i)
			next[sh]++
		}
	}
	for sh := range h.cache.shards {
		idx := st.order[start[sh]:start[sh+1]]
		if len(idx) == 0 {
			continue
		}
		c := &h.cache.shards[sh]
		c.mu.Lock()
		for _, i := range idx {
			p := &probes[i]
			p.entry, p.hit = c.getLocked(p.hash)
		}
		c.mu.Unlock()
	}
	// The label comparison guards against hash collisions.
	for i := range probes {
		p := &probes[i]
		if p.hit {
			st.scratch = p.entry.lset.Bytes(st.scratch)
			p.hit = bytes.Equal(st.scratch, st.keys[p.off:p.end])
		}
		if p.hit {
			hits++
		}
	}
	return hits, start[cacheShards]
}

// appendLabelKey appends the encoding of label views (sorted, empty values
// left out) to dst: the bytes of the labels.Labels they make with the default
// (stringlabels) implementation, each name and value preceded by its length,
// one byte below 255, else 255 and three bytes little-endian. So their
// xxhash is that label set's Hash and they equal its Bytes, which probeAll
// compares with the cached set's; written in one forward pass, without the
// ScratchBuilder's list of views and its copy. labelKeysMatch tells whether
// the labels implementation built in is that one.
//
// A name or value of 16 MiB or more (the implementation's limit) gets a
// wrong length here, so its series misses the cache and its validation
// rejects it.
func appendLabelKey(dst []byte, views []Label) []byte {
	for _, l := range views {
		if l.Value == "" {
			continue
		}
		dst = appendKeyString(dst, l.Name)
		dst = appendKeyString(dst, l.Value)
	}
	return dst
}

func appendKeyString(dst []byte, s string) []byte {
	if n := len(s); n < 255 {
		dst = append(dst, byte(n))
	} else {
		dst = append(dst, 255, byte(n), byte(n>>8), byte(n>>16))
	}
	return append(dst, s...)
}

// labelKeysMatch reports whether appendLabelKey encodes label sets as the
// labels package built in does (its default, stringlabels), with short and
// long values; with another implementation (the slicelabels or dedupelabels
// build tags) probeAll encodes through a labels.ScratchBuilder instead.
func labelKeysMatch() bool {
	long := strings.Repeat("v", 300)
	views := []Label{{Name: "__name__", Value: "up"}, {Name: "empty", Value: ""}, {Name: "long", Value: long}}
	ls := labels.FromStrings("__name__", "up", "long", long)
	key := appendLabelKey(nil, views)
	return bytes.Equal(key, ls.Bytes(nil)) && xxhash.Sum64(key) == ls.Hash()
}

// encode encodes label views (sorted, empty values left out) into st.key, a
// view of st.sb's reusable buffer, valid until the next encode.
func (st *writeState) encode(views []Label) labels.Labels {
	st.sb.Reset()
	for _, l := range views {
		if l.Value != "" {
			st.sb.Add(l.Name, l.Value)
		}
	}
	st.sb.Overwrite(&st.key)
	return st.key
}

// seriesLabels returns the label set, its hash and the known reference of
// series i of the request (sorted): from the cache when probeAll found it
// (cached is then true), else a copy out of the request buffer with ref 0.
// Only a series the cache does not know is copied, because the TSDB and the
// tee keep its labels.
func (h *Handler) seriesLabels(i int, views []Label, st *writeState) (ls labels.Labels, ref storage.SeriesRef, hash uint64, cached bool) {
	if h.cache == nil {
		return st.encode(views).Copy(), 0, 0, false
	}
	p := &st.probes[i]
	if p.hit {
		return p.entry.lset, p.entry.ref, p.hash, true
	}
	return st.encode(views).Copy(), 0, p.hash, false
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
