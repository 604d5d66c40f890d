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
// when a transaction commits, hands its float samples to the pipeline. The
// open hour's minute windows are then computed from these samples instead
// of re-reading raw every minute, which is what keeps the rollup's CPU cost
// a fraction of ingest's (docs/rollups.md, "Cost"). Appenders it returns
// implement storage.ExemplarAppenderV2 when next's do.
//
// With the tee, a minute partition is written from the in-memory windows;
// only an hour that received samples after its minute was computed (counted
// in strata_downsample_late_samples_total) is re-read from raw first. So
// every writer of the raw tier must append through the tee: samples that
// bypass it would be missing from the minute tier. (strata serve hands the
// tee to every writer: remote write, scrapes and rule results.)
//
// Call Tee once, before appends start; minutes before the raw tier's newest
// sample at that moment are computed from raw.
func (p *Pipeline) Tee(next storage.AppendableV2) storage.AppendableV2 {
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	if !p.tap.enabled {
		p.tap.enabled = true
		p.tap.from = math.MinInt64
		if _, rawMax, ok := p.src.Bounds(); ok {
			p.tap.from = timegrid.Floor(rawMax, MinuteRes) + MinuteRes
		}
		p.tap.series = map[storage.SeriesRef]*teeSeries{}
		p.tap.late = map[int64]struct{}{}
	}
	return teeAppendable{next: next, p: p}
}

// teeState holds the samples of the minutes not computed yet, per series.
type teeState struct {
	mu      sync.Mutex
	enabled bool
	from    int64 // first minute the tee covers; earlier minutes are read from raw
	drained int64 // minutes before this were computed: later samples for them are late
	series  map[storage.SeriesRef]*teeSeries
	// late holds the hours that received samples after their minute was
	// computed: their partition is re-read from raw at flush.
	late    map[int64]struct{}
	batches sync.Pool // *[]teeSample, reused across transactions
}

type teeSeries struct {
	lset     labels.Labels
	kind     Kind     // Config.KindOf(lset), looked up once per series
	pending  []sample // samples of minutes not computed yet, in arrival order
	lastSeen int64
}

type sample struct {
	t int64
	v float64
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
	if ex, ok := inner.(storage.ExemplarAppenderV2); ok {
		return &teeExemplarAppender{teeAppender: t, ex: ex}
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

// observe records committed samples. Samples for minutes already computed
// are counted late: the flush-time re-read of raw puts them in the partition.
func (p *Pipeline) observe(batch []teeSample) {
	if len(batch) == 0 {
		return
	}
	late := 0
	p.tap.mu.Lock()
	for _, x := range batch {
		s := p.tap.series[x.ref]
		if s == nil {
			s = &teeSeries{lset: x.lset.Copy(), kind: p.cfg.KindOf.Of(x.lset)}
			p.tap.series[x.ref] = s
		}
		if x.t < p.tap.drained {
			late++
			p.tap.late[timegrid.Floor(x.t, HourRes)] = struct{}{}
			continue
		}
		s.pending = append(s.pending, sample{x.t, x.v})
		s.lastSeen = max(s.lastSeen, x.t)
	}
	p.tap.mu.Unlock()
	if late > 0 {
		p.m.late.Add(float64(late))
	}
}

// teeCovers reports whether minutes starting at from can be computed from
// the tee.
func (p *Pipeline) teeCovers(from int64) bool {
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	return p.tap.enabled && from >= p.tap.from
}

// drainTee computes the minute windows of [from, to) from the tee's pending
// samples and calls fn for each series that has some, dropping the samples
// it consumed. Series idle for an hour are forgotten.
func (p *Pipeline) drainTee(from, to int64, fn func(lset labels.Labels, ws []tiers.Window)) Stats {
	var (
		st Stats
		ws []tiers.Window
	)
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	p.tap.drained = max(p.tap.drained, to)
	for ref, s := range p.tap.series {
		if len(s.pending) == 0 {
			if s.lastSeen < to-HourRes {
				delete(p.tap.series, ref)
			}
			continue
		}
		if !slices.IsSortedFunc(s.pending, cmpSample) {
			slices.SortStableFunc(s.pending, cmpSample) // out-of-order samples within the lateness
		}
		// The TSDB accepts an identical repeat of a series' newest sample
		// as a no-op; the tee saw it twice.
		s.pending = slices.CompactFunc(s.pending, func(a, b sample) bool { return a.t == b.t })
		b := builder{res: MinuteRes, kind: s.kind}
		ws = ws[:0]
		i := 0
		for ; i < len(s.pending) && s.pending[i].t < to; i++ {
			x := s.pending[i]
			if x.t < from {
				continue // older than the range: only possible for a series created late
			}
			if isStale(x.v) {
				st.Stale++
			} else {
				st.Floats++
			}
			if w, ok := b.add(x.t, x.v); ok {
				ws = append(ws, w)
			}
		}
		if i < len(s.pending) && isStale(s.pending[i].v) {
			b.add(s.pending[i].t, s.pending[i].v) // a stale marker right after the range
		}
		if b.open {
			ws = append(ws, b.finish())
		}
		s.pending = slices.Delete(s.pending, 0, i)
		if len(ws) > 0 {
			fn(s.lset, ws)
		}
	}
	return st
}

func cmpSample(a, b sample) int {
	switch {
	case a.t < b.t:
		return -1
	case a.t > b.t:
		return 1
	}
	return 0
}

func isStale(v float64) bool { return value.IsStaleNaN(v) }

// flushFromMemory reports whether hour h's partition may be written from
// its in-memory windows: the tee fed them and no sample arrived late for h.
// It forgets h's late mark.
func (p *Pipeline) flushFromMemory(h int64) bool {
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	_, late := p.tap.late[h]
	delete(p.tap.late, h)
	return p.tap.enabled && !late
}

// forceReread makes hour h's flush re-read raw, whether or not the tee fed it.
func (p *Pipeline) forceReread(h int64) {
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	if p.tap.late == nil {
		p.tap.late = map[int64]struct{}{}
	}
	p.tap.late[h] = struct{}{}
}
