package downsample

import (
	"context"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/seriesset"
	"github.com/strata-dev/strata/tiers"
)

// Direct series are written to the minute tier without the raw tier: the
// diagnosis engine's baselines (strata:baseline:median, ...), one sample a
// minute, whose minute window is that sample exactly. Kept in the raw head
// they cost a head series each (about 700 bytes: the series, its chunk,
// its postings) for a sample a minute; here they cost a tee slot and a
// window builder (docs/diagnosis.md, "Baseline series").
//
// A direct series' window is handed to the spill as soon as its sample
// (or the stale marker after it) is folded, not when the watermark passes
// its minute: its writer writes each minute once, in order, so the window
// is final when written, and readers (VisitDirectWindows) see it after the
// next tick rather than a lateness later. Its windows go to blocks of
// their own (spillBlock.direct), so that the readers of the other series
// skip them by the blocks' time range, and readers of direct series read
// only those. A sample of a direct series older than its newest is
// dropped (counted in strata_downsample_out_of_order_samples_total): there
// is no raw copy to recompute the minute from. After a restart the spill
// is gone and its writer writes the minutes again (the diagnosis engine's
// start-up read-back, diagnose/bootstrap.go); windows of an hour already
// written to the minute tier are dropped, like any sample later than its
// hour's flush.

// Direct returns an appendable that writes float samples to the minute
// tier only, as direct series (above). Histograms are refused. Samples are
// folded at Commit; Rollback forgets them.
func (p *Pipeline) Direct() storage.AppendableV2 {
	p.enableTee()
	return directAppendable{p}
}

type directAppendable struct{ p *Pipeline }

func (a directAppendable) AppenderV2(context.Context) storage.AppenderV2 {
	return &directAppender{p: a.p}
}

type directAppender struct {
	p     *Pipeline
	batch *[]teeSample // ref unused: direct series have no raw reference
}

// errDirectHistogram: direct series are minute windows of float samples.
var errDirectHistogram = storage.ErrNativeHistogramsDisabled

// Append remembers a float sample until Commit. The labels are kept without
// a copy, as the tee keeps the raw tier's: the caller must not modify them.
func (a *directAppender) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	if h != nil || fh != nil {
		return 0, errDirectHistogram
	}
	if a.batch == nil {
		a.batch = a.p.tap.getBatch()
	}
	*a.batch = append(*a.batch, teeSample{lset: ls, t: t, v: v})
	return 0, nil
}

// Commit folds the samples into their series' windows. A writer that
// writes many minutes between two ticks (the diagnosis engine's start-up
// read-back writes again what a crash lost: an hour or more of every
// baseline) spills them itself once the pending windows are more than one
// per series and directPendingSlack, so that they are not all held until
// the tick.
func (a *directAppender) Commit() error {
	if a.batch == nil {
		return nil
	}
	a.p.observeDirect(*a.batch)
	a.p.tap.putBatch(a.batch)
	a.batch = nil
	a.p.tap.mu.Lock()
	over := len(a.p.tap.pending) > int(a.p.tap.series.nb)+directPendingSlack
	a.p.tap.mu.Unlock()
	if over {
		return a.p.spillPending()
	}
	return nil
}

// directPendingSlack is how many windows past one per dense series the
// tee's pending buffer may hold before a direct commit spills them: 4.7 MB.
const directPendingSlack = 1 << 16

// spillPending moves the pending windows to the spills between two ticks.
func (p *Pipeline) spillPending() error {
	p.tickMu.Lock()
	defer p.tickMu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.tap.mu.Lock()
	pending := p.tap.pending
	p.tap.pending = nil
	p.tap.mu.Unlock()
	err := p.spillEntries(pending)
	clear(pending)
	p.tap.mu.Lock()
	if p.tap.pending == nil {
		p.tap.pending = pending[:0]
	}
	p.tap.mu.Unlock()
	return err
}

// Rollback forgets the samples.
func (a *directAppender) Rollback() error {
	if a.batch != nil {
		a.p.tap.putBatch(a.batch)
		a.batch = nil
	}
	return nil
}

// observeDirect folds committed samples of direct series.
func (p *Pipeline) observeDirect(batch []teeSample) {
	var floats, ooo int
	p.tap.mu.Lock()
	for i := range batch {
		x := &batch[i]
		s, ok := p.tap.direct.get(&p.tap.series, x.lset)
		if !ok {
			s = p.tap.series.assignDirect(x.lset, p.cfg.KindOf.Of(x.lset))
			p.tap.direct.set(x.lset.Hash(), s)
		}
		p.tap.directMax = max(p.tap.directMax, x.t)
		switch p.foldDirect(s, p.tap.series.at(s), x.t, x.v) {
		case foldedFloat:
			floats++
		case outOfOrder:
			ooo++
		}
	}
	p.tap.mu.Unlock()
	if ooo > 0 {
		p.m.outOfOrder.Add(float64(ooo))
	}
	p.m.samples.Add(float64(floats))
}

// foldDirect adds a sample to direct slot s's builder and hands the window
// it changed to the spill at once. Called with tap.mu held.
func (p *Pipeline) foldDirect(s uint32, st *seriesState, t int64, v float64) foldResult {
	b := p.tap.series.builder(st)
	switch {
	case t == st.lastT:
		return foldedOther
	case t < st.lastT:
		return outOfOrder
	}
	st.lastT = t
	if value.IsStaleNaN(v) {
		if b.open && !b.stale && t-b.lastT() <= StaleLookahead {
			b.stale = true
			p.emit(s, st, b.current())
		}
		return foldedOther
	}
	if b.open && t >= b.start+MinuteRes {
		b.open = false // emitted when its sample came
	}
	b.add(t, v)
	p.emit(s, st, b.current())
	return foldedFloat
}

// directIndex finds a direct series' slot by its labels: by label hash,
// with the rare second series of a hash in a map of its own.
type directIndex struct {
	byHash     map[uint64]uint32
	collisions map[uint64][]uint32
}

func (x *directIndex) get(t *seriesTable, lset labels.Labels) (uint32, bool) {
	h := lset.Hash()
	s, ok := x.byHash[h]
	if !ok {
		return 0, false
	}
	if labels.Equal(t.at(s).lset, lset) {
		return s, true
	}
	for _, s := range x.collisions[h] {
		if labels.Equal(t.at(s).lset, lset) {
			return s, true
		}
	}
	return 0, false
}

func (x *directIndex) set(h uint64, s uint32) {
	if x.byHash == nil {
		x.byHash = map[uint64]uint32{}
	}
	if _, taken := x.byHash[h]; !taken {
		x.byHash[h] = s
		return
	}
	if x.collisions == nil {
		x.collisions = map[uint64][]uint32{}
	}
	x.collisions[h] = append(x.collisions[h], s)
}

func (x *directIndex) del(h uint64, s uint32) {
	if x.byHash[h] == s {
		if c := x.collisions[h]; len(c) > 0 {
			x.byHash[h] = c[len(c)-1]
			x.dropCollision(h, len(c)-1)
			return
		}
		delete(x.byHash, h)
		return
	}
	for i, c := range x.collisions[h] {
		if c == s {
			x.dropCollision(h, i)
			return
		}
	}
}

func (x *directIndex) dropCollision(h uint64, i int) {
	c := x.collisions[h]
	c[i] = c[len(c)-1]
	if c = c[:len(c)-1]; len(c) == 0 {
		delete(x.collisions, h)
		return
	}
	x.collisions[h] = c
}

// bytes estimates the index's memory: a map entry is about 16 bytes of key
// and value and 8 of overhead at Go's load factor.
func (x *directIndex) bytes() int64 { return int64(len(x.byHash))*24 + int64(len(x.collisions))*48 }

// assignDirect returns a new slot for the direct series lset: dense, and
// not in the raw reference index.
func (t *seriesTable) assignDirect(lset labels.Labels, kind Kind) uint32 {
	s := t.assignSlot(0, lset, kind)
	t.at(s).direct = true
	return s
}

// DirectWindows returns the minute windows of the direct series that are
// not yet in a partition, as a tiers.OpenWindowSource: every window
// spilled so far, ahead of the mark too (see Direct).
func (p *Pipeline) DirectWindows() tiers.OpenWindowSource { return directWindows{p} }

type directWindows struct{ p *Pipeline }

// VisitOpenWindows implements tiers.OpenWindowSource over the direct
// series' blocks only. It is safe for concurrent use with the pipeline.
func (d directWindows) VisitOpenWindows(mint, maxt int64, sink tiers.OpenWindowSink, matchers ...*labels.Matcher) {
	p := d.p
	p.spillMu.RLock()
	defer p.spillMu.RUnlock()
	out := spilledSeries{sink: sink}
	p.visitBlocks(mint, maxt, func(b *spillBlock) bool { return b.direct }, func(key *spillKey) (int64, bool) {
		if !seriesset.MatchAll(key.lset, matchers) {
			return 0, false
		}
		from, ok := sink.Want(key.lset)
		if !ok || from > maxt {
			return 0, false
		}
		return max(from, mint), true
	}, out.add, out.done)
}
