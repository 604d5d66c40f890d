package downsample

import (
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// seriesState is what the tee keeps per series: its labels, its newest
// sample and, while the series is dense, a window builder kept aside in
// seriesTable.builders: 56 bytes a slot, and 92 more for the builder and
// its owner (docs/rollups.md, "Memory"). A sparse series' windows are
// computed from raw by their readers (spillset.go), so it gives its
// builder up when it becomes sparse: at 15 s, a whole fleet and every
// series the diagnosis engine writes back (BenchmarkTeeBytesPerSeries).
//
// lset and id are set when the slot is assigned and not changed while any
// open hour's spill refers to the slot, so readers of the spill read them
// without teeState.mu (see Pipeline.spillMu). Every other field is guarded by
// teeState.mu.
type seriesState struct {
	lset labels.Labels // shared with the raw tier when it can tell them (seriesLabeler)
	id   int64         // tiers.SeriesID(lset): the partition order

	ref   storage.SeriesRef
	lastT int64 // newest sample folded (float or stale marker); math.MinInt64: none
	// lastHour is the newest hour this series has windows in, in hours
	// since the epoch (hourIndex), math.MinInt32 when none.
	lastHour int32
	// bld is the series' builder in seriesTable.builders plus one (the
	// newest window with in-order samples); 0 once the series is sparse.
	bld     uint32
	kind    Kind
	emitted bool // the open window, as it is, has been handed to the spill
	tainted bool // the open window misses an out-of-order sample: never emitted, recomputed
	listed  bool // in teeState.dirty, its minutes to recompute in teeState.dirtyRanges
	// sparse: the series' samples come Config.SparseInterval or more
	// apart, and its windows are not spilled but recomputed from raw by
	// their readers (spillset.go). Never cleared while the slot is held.
	sparse bool
	// direct: written to the minute tier only (direct.go), never sparse,
	// not in the reference index.
	direct bool
}

// sawWindow notes that the series has a window starting at start.
func (st *seriesState) sawWindow(start int64) {
	st.lastHour = max(st.lastHour, hourIndex(start))
}

// hasWindowsFrom tells whether the series has windows in the hour starting
// at h or later.
func (st *seriesState) hasWindowsFrom(h int64) bool {
	return int64(st.lastHour)*HourRes >= h
}

// hourIndex returns the hour t falls in, in hours since the epoch, within
// the int32 range: about 245,000 years either side of 1970.
func hourIndex(t int64) int32 {
	h := timegrid.Floor(t, HourRes) / HourRes
	return int32(min(max(h, math.MinInt32+1), math.MaxInt32))
}

// seriesStateBytes and builderBytes are the sizes of a slot and of a
// dense series' builder with its owner, for strata_downsample_tee_bytes.
const (
	seriesStateBytes = int64(unsafe.Sizeof(seriesState{}))
	builderBytes     = int64(unsafe.Sizeof(builderPage{}) / slotPageSize)
)

const (
	slotPageBits = 10
	slotPageSize = 1 << slotPageBits
)

type slotPage [slotPageSize]seriesState

// builderPage holds builders and the slot of each.
type builderPage struct {
	b     [slotPageSize]builder
	owner [slotPageSize]uint32
}

// seriesTable holds the tee's series in slots: pages that never move, so
// that a slot's address is stable, and a free list that reuses the slots of
// forgotten series. Guarded by teeState.mu, except that pages may be loaded
// by readers of the spill (lset and id only).
type seriesTable struct {
	pages atomic.Pointer[[]*slotPage]
	n     uint32   // slots ever assigned
	free  []uint32 // slots of forgotten series
	byRef refIndex

	// builders are the dense series' window builders, the first nb of
	// the pages' in use: one given up is replaced by the last, so that
	// the pages are as many as the dense series need, not as many as the
	// series that were ever new (every series starts dense). Guarded by
	// teeState.mu.
	builders []*builderPage
	nb       uint32
}

// at returns slot s, which must have been assigned.
func (t *seriesTable) at(s uint32) *seriesState {
	return &(*t.pages.Load())[s>>slotPageBits][s&(slotPageSize-1)]
}

// live returns how many slots hold a series.
func (t *seriesTable) live() int { return int(t.n) - len(t.free) }

// assign returns a new slot for the series lset (ref in the raw tier).
func (t *seriesTable) assign(ref storage.SeriesRef, lset labels.Labels, kind Kind) uint32 {
	s := t.assignSlot(ref, lset, kind)
	t.byRef.set(ref, s)
	return s
}

// assignSlot returns a new slot for the series lset with a builder, not in
// the reference index.
func (t *seriesTable) assignSlot(ref storage.SeriesRef, lset labels.Labels, kind Kind) uint32 {
	var s uint32
	if n := len(t.free); n > 0 {
		s, t.free = t.free[n-1], t.free[:n-1]
	} else {
		s = t.n
		t.n++
		var pages []*slotPage
		if p := t.pages.Load(); p != nil {
			pages = *p
		}
		if int(s>>slotPageBits) == len(pages) {
			// A new slice: readers holding the old one keep a valid view.
			grown := make([]*slotPage, len(pages)+1)
			copy(grown, pages)
			grown[len(pages)] = new(slotPage)
			t.pages.Store(&grown)
		}
	}
	st := t.at(s)
	*st = seriesState{
		lset: lset, id: tiers.SeriesID(lset), ref: ref, kind: kind,
		lastT: math.MinInt64, lastHour: math.MinInt32,
	}
	t.newBuilder(s, st)
	return s
}

// release forgets slot s: its series left the tee.
func (t *seriesTable) release(s uint32) {
	st := t.at(s)
	t.dropBuilder(st)
	if !st.direct {
		t.byRef.del(st.ref)
	}
	*st = seriesState{}
	t.free = append(t.free, s)
}

// builder returns st's window builder, nil when st is sparse.
func (t *seriesTable) builder(st *seriesState) *builder {
	if st.bld == 0 {
		return nil
	}
	i := st.bld - 1
	return &t.builders[i>>slotPageBits].b[i&(slotPageSize-1)]
}

// newBuilder gives slot s, at st, an empty builder of minute windows.
func (t *seriesTable) newBuilder(s uint32, st *seriesState) {
	i := t.nb
	t.nb++
	if int(i>>slotPageBits) == len(t.builders) {
		t.builders = append(t.builders, new(builderPage))
	}
	p := t.builders[i>>slotPageBits]
	p.b[i&(slotPageSize-1)] = newBuilder(MinuteRes, st.kind)
	p.owner[i&(slotPageSize-1)] = s
	st.bld = i + 1
}

// dropBuilder gives st's builder up, if it has one: the last builder in
// use takes its place. A builder is only ever reached through its slot,
// so no pointer to the moved one is held.
func (t *seriesTable) dropBuilder(st *seriesState) {
	if st.bld == 0 {
		return
	}
	i, last := st.bld-1, t.nb-1
	st.bld = 0
	lp := t.builders[last>>slotPageBits]
	if i != last {
		p := t.builders[i>>slotPageBits]
		owner := lp.owner[last&(slotPageSize-1)]
		p.b[i&(slotPageSize-1)] = lp.b[last&(slotPageSize-1)]
		p.owner[i&(slotPageSize-1)] = owner
		t.at(owner).bld = i + 1
	}
	lp.b[last&(slotPageSize-1)] = builder{}
	t.nb = last
	if last&(slotPageSize-1) == 0 {
		t.builders[len(t.builders)-1] = nil
		t.builders = t.builders[:len(t.builders)-1]
	}
}

// refIndex maps the raw tier's series references to slots. The TSDB numbers
// its series 1, 2, 3... so the map is a paged array indexed by reference, a
// load and a bounds check per sample rather than a hash lookup; pages whose
// series all left are dropped from the front. References that do not fit
// (another storage's, far apart) go to a map.
type refIndex struct {
	base  uint64     // reference of pages[0][0], a multiple of refPageSize
	pages []*refPage // nil: no series in that page
	far   map[storage.SeriesRef]uint32
}

const (
	refPageBits = 12
	refPageSize = 1 << refPageBits
	// maxRefPages bounds the paged array (64 MiB of page pointers would be
	// 2^33 references); references beyond it go to the map.
	maxRefPages = 1 << 20
)

type refPage struct {
	slots [refPageSize]uint32 // slot+1; 0: none
	used  int
}

func (x *refIndex) get(ref storage.SeriesRef) (uint32, bool) {
	if i := uint64(ref) - x.base; uint64(ref) >= x.base && i>>refPageBits < uint64(len(x.pages)) {
		if p := x.pages[i>>refPageBits]; p != nil {
			s := p.slots[i&(refPageSize-1)]
			return s - 1, s != 0
		}
		return 0, false
	}
	s, ok := x.far[ref]
	return s, ok
}

func (x *refIndex) set(ref storage.SeriesRef, s uint32) {
	r := uint64(ref)
	if len(x.pages) == 0 && len(x.far) == 0 {
		x.base = r &^ (refPageSize - 1)
	}
	if r >= x.base && (r-x.base)>>refPageBits < maxRefPages {
		i := (r - x.base) >> refPageBits
		for uint64(len(x.pages)) <= i {
			x.pages = append(x.pages, nil)
		}
		p := x.pages[i]
		if p == nil {
			p = new(refPage)
			x.pages[i] = p
		}
		if p.slots[r&(refPageSize-1)] == 0 {
			p.used++
		}
		p.slots[r&(refPageSize-1)] = s + 1
		return
	}
	if x.far == nil {
		x.far = map[storage.SeriesRef]uint32{}
	}
	x.far[ref] = s
}

func (x *refIndex) del(ref storage.SeriesRef) {
	r := uint64(ref)
	if r >= x.base && (r-x.base)>>refPageBits < uint64(len(x.pages)) {
		i := (r - x.base) >> refPageBits
		p := x.pages[i]
		if p == nil || p.slots[r&(refPageSize-1)] == 0 {
			return
		}
		p.slots[r&(refPageSize-1)] = 0
		if p.used--; p.used == 0 {
			x.pages[i] = nil
		}
		// Drop empty pages at the front: references only grow, so the
		// array follows the live ones.
		k := 0
		for k < len(x.pages) && x.pages[k] == nil {
			k++
		}
		if k > 0 {
			x.pages = x.pages[k:]
			x.base += uint64(k) << refPageBits
		}
		return
	}
	delete(x.far, ref)
}

// bytes estimates the index's memory.
func (x *refIndex) bytes() int64 {
	n := int64(cap(x.pages)) * 8
	for _, p := range x.pages {
		if p != nil {
			n += int64(unsafe.Sizeof(refPage{}))
		}
	}
	return n + int64(len(x.far))*24
}
