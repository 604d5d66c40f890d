package downsample

import (
	"context"
	"math"
	"slices"
	"sync"

	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// Tee returns a storage.AppendableV2 that appends to next (the raw tier) and,
// when a transaction commits, folds its float samples into the open minute
// windows: one window builder per series, whatever its sample rate. The
// minute windows are then computed as samples arrive instead of re-reading
// raw every minute, which is what keeps the rollup's CPU cost a fraction of
// ingest's (docs/rollups.md, "Cost"), and no raw sample is held for the
// lateness window. Appenders it returns implement
// storage.ExemplarAppenderV2 and storage.GetRef when next's do.
//
// A sample a series' builder cannot take in order (out of order within the
// lateness, or before the tee was installed) marks the minutes it can change
// for a recompute from raw, for that series only, once they are final. A
// sample that arrives after its minute was final but in order for its series
// (a sender lagging by more than the lateness) is folded as usual and
// replaces the window already computed (counted in
// strata_downsample_late_samples_total).
//
// So every writer of the raw tier must append through the tee: samples that
// bypass it would be missing from the minute tier. (strata serve hands the
// tee to every writer: remote write, scrapes and rule results.)
//
// Call Tee once, before appends start; minutes before the raw tier's newest
// sample at that moment are computed from raw.
func (p *Pipeline) Tee(next storage.AppendableV2) storage.AppendableV2 {
	p.enableTee()
	return teeAppendable{next: next, p: p}
}

// enableTee starts the tee's minutes after the raw tier's newest sample.
func (p *Pipeline) enableTee() {
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	if !p.tap.enabled {
		p.tap.enabled = true
		p.tap.from = math.MinInt64
		if _, rawMax, ok := p.src.Bounds(); ok {
			p.tap.from = timegrid.Floor(rawMax, MinuteRes) + MinuteRes
		}
	}
}

// teeState is the tee's side of the pipeline.
type teeState struct {
	mu      sync.Mutex
	enabled bool
	from    int64 // first minute the tee covers; earlier minutes are read from raw
	drained int64 // minutes before this are final: later samples for them are late
	series  seriesTable
	// pending holds the windows emitted since the last tick, in emission
	// order: the tick moves them to the spill.
	pending []spillEntry
	dirty   []uint32 // slots with minutes to recompute from raw
	// dirtyRanges holds, for each slot in dirty, the first and last minute
	// start to recompute from raw, because a sample came out of order: rare,
	// so not a field of every slot.
	dirtyRanges map[uint32]minuteRange
	direct      directIndex // the direct series' slots (direct.go)
	directMax   int64       // the newest direct sample's time (Config.DirectGrace)
	// readHold is the earliest window start the reader holding the open
	// hours (HoldReads) will read; holding says one does.
	readHold int64
	holding  bool
	batches  sync.Pool
	// matched is how many entries the last spill set built for matchers
	// had: the next one's size (spillSet).
	matched int
}

type teeSample struct {
	ref  storage.SeriesRef
	lset labels.Labels // the caller's, valid until Commit returns
	t    int64
	v    float64
}

type teeAppendable struct {
	next storage.AppendableV2
	p    *Pipeline
}

func (a teeAppendable) AppenderV2(ctx context.Context) storage.AppenderV2 {
	inner := a.next.AppenderV2(ctx)
	t := &teeAppender{AppenderV2: inner, p: a.p}
	ex, isEx := inner.(storage.ExemplarAppenderV2)
	gr, isRef := inner.(storage.GetRef)
	switch {
	case isEx && isRef:
		return &teeFullAppender{teeAppender: t, ex: ex, gr: gr}
	case isEx:
		return &teeExemplarAppender{teeAppender: t, ex: ex}
	case isRef:
		return &teeRefAppender{teeAppender: t, gr: gr}
	}
	return t
}

type teeAppender struct {
	storage.AppenderV2
	p     *Pipeline
	batch *[]teeSample // from p.tap.batches, returned at Commit or Rollback
}

// Append appends to the raw tier and remembers float samples until Commit.
// The labels are kept until Commit without a copy: like the TSDB, which keeps
// the labels of a new series, the tee needs them to stay unmodified.
func (a *teeAppender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, opts storage.AppendV2Options) (storage.SeriesRef, error) {
	r, err := a.AppenderV2.Append(ref, ls, st, t, v, h, fh, opts)
	if err != nil || h != nil || fh != nil || r == 0 {
		return r, err
	}
	if a.batch == nil {
		a.batch = a.p.tap.getBatch()
	}
	*a.batch = append(*a.batch, teeSample{ref: r, lset: ls, t: t, v: v})
	return r, nil
}

// Commit commits to the raw tier and, on success, hands the samples over.
func (a *teeAppender) Commit() error {
	// Shared with other commits, exclusive of the tick's watermark read
	// (Pipeline.commitMu): the raw tier's newest time never counts samples
	// that are not folded yet.
	a.p.commitMu.RLock()
	defer a.p.commitMu.RUnlock()
	err := a.AppenderV2.Commit()
	if a.batch != nil {
		if err == nil {
			a.p.observe(*a.batch)
		}
		a.p.tap.putBatch(a.batch)
		a.batch = nil
	}
	return err
}

// Rollback rolls back the raw tier's transaction and forgets its samples.
func (a *teeAppender) Rollback() error {
	if a.batch != nil {
		a.p.tap.putBatch(a.batch)
		a.batch = nil
	}
	return a.AppenderV2.Rollback()
}

func (t *teeState) getBatch() *[]teeSample {
	if b, ok := t.batches.Get().(*[]teeSample); ok {
		return b
	}
	return &[]teeSample{}
}

func (t *teeState) putBatch(b *[]teeSample) {
	clear(*b) // drop label references
	*b = (*b)[:0]
	t.batches.Put(b)
}

type teeExemplarAppender struct {
	*teeAppender
	ex storage.ExemplarAppenderV2
}

// AppendExemplars forwards to the raw tier: exemplars are not rolled up.
func (a *teeExemplarAppender) AppendExemplars(ref storage.SeriesRef, ls labels.Labels, es []exemplar.Exemplar) (storage.SeriesRef, error) {
	return a.ex.AppendExemplars(ref, ls, es)
}

type teeRefAppender struct {
	*teeAppender
	gr storage.GetRef
}

// GetRef forwards to the raw tier: a caller that caches references (the
// remote-write receiver) then shares the raw tier's labels.
func (a *teeRefAppender) GetRef(lset labels.Labels, hash uint64) (storage.SeriesRef, labels.Labels) {
	return a.gr.GetRef(lset, hash)
}

type teeFullAppender struct {
	*teeAppender
	ex storage.ExemplarAppenderV2
	gr storage.GetRef
}

// AppendExemplars forwards to the raw tier: exemplars are not rolled up.
func (a *teeFullAppender) AppendExemplars(ref storage.SeriesRef, ls labels.Labels, es []exemplar.Exemplar) (storage.SeriesRef, error) {
	return a.ex.AppendExemplars(ref, ls, es)
}

// GetRef forwards to the raw tier.
func (a *teeFullAppender) GetRef(lset labels.Labels, hash uint64) (storage.SeriesRef, labels.Labels) {
	return a.gr.GetRef(lset, hash)
}

// seriesLabeler is implemented by a Source that can tell the labels it
// holds for a series reference (*tiers.Raw): the tee then shares them
// instead of keeping a copy.
type seriesLabeler interface {
	SeriesLabels(ref storage.SeriesRef) (labels.Labels, bool)
}

// observe folds committed samples into their series' windows.
func (p *Pipeline) observe(batch []teeSample) {
	if len(batch) == 0 {
		return
	}
	var late, floats, ooo int
	p.tap.mu.Lock()
	for i := range batch {
		x := &batch[i]
		s, ok := p.tap.series.byRef.get(x.ref)
		if !ok {
			s = p.tap.series.assign(x.ref, p.labelsOf(x.ref, x.lset), p.cfg.KindOf.Of(x.lset))
		}
		if x.t < p.tap.drained {
			late++
		}
		switch p.fold(s, p.tap.series.at(s), x.t, x.v) {
		case foldedFloat:
			floats++
		case outOfOrder:
			ooo++
		}
	}
	p.tap.mu.Unlock()
	if late > 0 {
		p.m.late.Add(float64(late))
	}
	if ooo > 0 {
		p.m.outOfOrder.Add(float64(ooo))
	}
	p.m.samples.Add(float64(floats))
}

// labelsOf returns the labels to keep for a new series: the raw tier's own
// when it can tell them, else a copy of the caller's.
func (p *Pipeline) labelsOf(ref storage.SeriesRef, lset labels.Labels) labels.Labels {
	if sl, ok := p.src.(seriesLabeler); ok {
		if l, ok := sl.SeriesLabels(ref); ok && labels.Equal(l, lset) {
			return l
		}
	}
	return lset.Copy()
}

type foldResult uint8

const (
	foldedFloat foldResult = iota
	foldedOther            // a stale marker or an identical repeat
	outOfOrder             // marked for a recompute
)

// fold adds a committed sample to slot s's builder. Called with tap.mu held.
func (p *Pipeline) fold(s uint32, st *seriesState, t int64, v float64) foldResult {
	b := p.tap.series.builder(st)
	if b == nil {
		return p.foldSparse(st, t, v)
	}
	switch {
	case t < p.tap.from:
		// A minute before the tee: computed from raw, maybe already.
		p.markDirty(s, st, timegrid.Floor(t-StaleLookahead, MinuteRes), timegrid.Floor(t, MinuteRes))
		return outOfOrder
	case t == st.lastT:
		// The TSDB takes an identical repeat of a series' newest sample
		// as a no-op (and refuses a different value): nothing to fold.
		return foldedOther
	case t < st.lastT:
		// Out of order: it can change its own minute's window, and the
		// Stale of a window whose last sample is at most StaleLookahead
		// before it.
		p.markDirty(s, st, timegrid.Floor(t-StaleLookahead, MinuteRes), timegrid.Floor(t, MinuteRes))
		if b.open && timegrid.Floor(t, MinuteRes) == b.start {
			st.tainted = true
		}
		return outOfOrder
	}
	st.lastT = t
	if value.IsStaleNaN(v) {
		// A stale marker right after the window's last sample marks it.
		if b.open && !b.stale && t-b.lastT() <= StaleLookahead {
			b.stale = true
			p.changed(s, st, b)
		}
		return foldedOther
	}
	if b.open && t >= b.start+MinuteRes {
		if p.sparseAfter > 0 && !st.sparse && sparseRate(b, t, p.sparseAfter) {
			st.sparse = true
		}
		if !st.emitted && !st.tainted {
			p.emit(s, st, b.current())
		}
		b.open, st.tainted = false, false
		if st.sparse {
			// Its readers compute its windows from raw from now on.
			p.tap.series.dropBuilder(st)
			st.sawWindow(timegrid.Floor(t, MinuteRes))
			return foldedFloat
		}
	}
	b.add(t, v)
	p.changed(s, st, b)
	return foldedFloat
}

// foldSparse takes a committed sample of a sparse series. Its windows are
// computed from raw by their readers, out-of-order and late samples
// included, so the tee keeps no builder for it: only its newest sample,
// for the order of the next, and the hour it has windows in, for the
// readers' spill set.
func (p *Pipeline) foldSparse(st *seriesState, t int64, v float64) foldResult {
	switch {
	case t < p.tap.from || t < st.lastT:
		return outOfOrder
	case t == st.lastT:
		return foldedOther
	}
	st.lastT = t
	if value.IsStaleNaN(v) {
		return foldedOther
	}
	st.sawWindow(timegrid.Floor(t, MinuteRes))
	return foldedFloat
}

// changed notes that slot s's open window (in b) changed since it was
// emitted.
func (p *Pipeline) changed(s uint32, st *seriesState, b *builder) {
	st.emitted = false
	if st.tainted {
		// It misses an out-of-order sample: recomputed from raw, again
		// if it was already.
		start := b.start
		p.markDirty(s, st, start, start)
	}
}

// emit hands a window of slot s to the next tick's spill.
func (p *Pipeline) emit(s uint32, st *seriesState, w tiers.Window) {
	st.emitted = true
	st.sawWindow(w.Start)
	if st.sparse {
		return // its readers recompute it from raw (spillset.go)
	}
	if n := len(p.tap.pending); n == cap(p.tap.pending) {
		// Every dense series emits a window at each minute boundary:
		// room for one each at once, not append's quarter more than the
		// last growth, which the reused buffer would keep. Not one for
		// every series: a sparse one emits none, and a 15 s fleet's
		// dense windows (Strata's self-scrape) made room for the whole
		// fleet, 43 MB at 600,000 series.
		p.tap.pending = slices.Grow(p.tap.pending, max(int(p.tap.series.nb)-n, n/8, 64))
	}
	p.tap.pending = append(p.tap.pending, newSpillEntry(s, w))
}

// minuteRange is the minutes [from, to] (starts) of a slot to recompute
// from raw.
type minuteRange struct{ from, to int64 }

// markDirty marks the minutes [from, to] (starts) of slot s for a recompute
// from raw.
func (p *Pipeline) markDirty(s uint32, st *seriesState, from, to int64) {
	if r, ok := p.tap.dirtyRanges[s]; ok {
		from, to = min(r.from, from), max(r.to, to)
	}
	if p.tap.dirtyRanges == nil {
		p.tap.dirtyRanges = map[uint32]minuteRange{}
	}
	p.tap.dirtyRanges[s] = minuteRange{from, to}
	if !st.listed {
		st.listed = true
		p.tap.dirty = append(p.tap.dirty, s)
	}
}
