package diagnose

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// checkBaselineSignals: every tracked signal is recorded by the signals
// group, and none of them (or what they read of that group) reads a range
// of recorded series, so that its value at a minute depends on the minute
// data alone and not on how long the engine has run.
func (e *Engine) checkBaselineSignals() error {
	if e.base == nil {
		return nil
	}
	if e.signalsGroup == nil {
		return errors.New("diagnose baseline: no signals group")
	}
	recorded := map[string]bool{}
	for _, r := range e.signalsGroup.Rules() {
		if rr, ok := r.(*rules.RecordingRule); ok {
			recorded[rr.Name()] = true
		}
	}
	for _, n := range e.base.names {
		if !recorded[n] {
			return fmt.Errorf("diagnose baseline.signals: %q is not one of the canonical signals", n)
		}
	}
	for _, it := range e.bootstrapItems() {
		bad := false
		parser.Inspect(it.r.Query(), func(n parser.Node, _ []parser.Node) error {
			if ms, ok := n.(*parser.MatrixSelector); ok {
				if vs, ok := ms.VectorSelector.(*parser.VectorSelector); ok && recorded[vs.Name] {
					bad = true
				}
			}
			if _, ok := n.(*parser.SubqueryExpr); ok {
				bad = true
			}
			return nil
		})
		if bad {
			return fmt.Errorf("diagnose baseline.signals: %s reads a range of recorded series: its value would depend on where evaluation started", it.r.Name())
		}
	}
	return nil
}

// bootstrapItems are the signals group's rules that record a tracked
// signal, and the rules of the group those read, in group order.
func (e *Engine) bootstrapItems() []passItem {
	need := map[string]bool{}
	for _, n := range e.base.names {
		need[n] = true
	}
	rs := e.signalsGroup.Rules()
	keep := make([]bool, len(rs))
	for i := len(rs) - 1; i >= 0; i-- {
		if !need[rs[i].Name()] {
			continue
		}
		keep[i] = true
		parser.Inspect(rs[i].Query(), func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				need[vs.Name] = true
			}
			return nil
		})
	}
	var out []passItem
	for i, r := range rs {
		if keep[i] {
			out = append(out, passItem{e.signalsGroup, r})
		}
	}
	return out
}

// tracking is the tracker live evaluation uses: nil without baselines, and
// while their history is read back beside it (Engine.beside), when the
// read-back owns the tracker and the minutes have no baselines.
func (e *Engine) tracking() *tracker {
	if e.beside {
		return nil
	}
	return e.base
}

// baselineMinute runs the baseline step at minute tm from the signals the
// scratch store holds at tm, writing the baseline series to it (and, live,
// back to the store).
func (e *Engine) baselineMinute(tm int64) {
	if e.base.started && tm <= e.base.done {
		return
	}
	e.base.minute(tm, e.signalValues(e.scratch, tm), e.baselineSinks()...)
}

// baselineRange is the fast path's baseline step over [from, to].
func (e *Engine) baselineRange(sc *scratch, from, to int64) {
	for t := from; t <= to; t += minute.Milliseconds() {
		if e.base.started && t <= e.base.done {
			continue
		}
		e.base.minute(t, e.signalValues(sc, t), e.baselineSinks()...)
	}
}

func (e *Engine) signalValues(sc *scratch, t int64) map[string][]sampleAt {
	vals := make(map[string][]sampleAt, len(e.base.names))
	for _, n := range e.base.names {
		vals[n] = sc.valuesAt(n, t)
	}
	return vals
}

func (e *Engine) baselineSinks() []baselineSink {
	if e.baselineTarget() == nil {
		return []baselineSink{e.scratch}
	}
	return []baselineSink{e.scratch, writeBackSink{e}}
}

// baselineTarget is where the baseline series are written back (live): the
// minute tier's direct series when Options.Baselines is set, else
// WriteBack; nil in replay.
func (e *Engine) baselineTarget() storage.AppendableV2 {
	if e.o.Baselines != nil {
		return e.o.Baselines
	}
	return e.o.WriteBack
}

// writeBackSink writes the baseline series back to the store (live), at
// T+WriteBackDelay like the ALERTS series: the median and sigma series and
// strata:baseline:k, and the z-scores when configured. With
// Options.Baselines they go to the minute tier alone (docs/diagnosis.md,
// "Baseline series").
type writeBackSink struct{ e *Engine }

// writeBackBatch is how many baseline samples one write-back commit holds.
// A minute's baselines in one commit (three series per tracked series,
// 29,000 at 50,000 active series) held every new series' WAL record and
// the appender's buffers at once when the engine first wrote them: about
// 40 MB at the engine's start. The write-back was never atomic (a rejected
// sample is only logged), so smaller commits change nothing else. The
// raw WAL keeps a compression buffer the size of the largest record it
// ever wrote: 4,096 new baseline series made one of 1.5 MB, kept for good
// (the paced 50,000-series benchmark's remote-write requests need 1 MB);
// 1,000 make records no larger than a request's.
const writeBackBatch = 1000

// zscores: the z-scores are written back only with
// diagnose.baseline.write_back_zscore.
func (w writeBackSink) zscores() bool { return w.e.cfg.Baseline.WriteBackZScore }

func (w writeBackSink) appendDirect(t int64, hs []*scratchHandle, vs []float64) {
	ts := t + w.e.o.WriteBackDelay.Milliseconds()
	for lo := 0; lo < len(hs); lo += writeBackBatch {
		hi := min(lo+writeBackBatch, len(hs))
		app := w.e.baselineTarget().AppenderV2(context.Background())
		for i := lo; i < hi; i++ {
			if _, err := app.Append(0, hs[i].lbls, 0, ts, vs[i], nil, nil, storage.AppendV2Options{}); err != nil {
				w.e.logger.Debug("write-back baseline sample rejected", "series", hs[i].lbls.String(), "err", err)
			}
		}
		if err := app.Commit(); err != nil {
			w.e.logger.Warn("write back baseline series", "err", err)
		}
	}
}

// bootstrap reads the tracked signals' history back from the minute tier
// before the first evaluated minute tm: from the start of the hour
// history + level-shift hours before tm's hour, up to tm. The signals are
// evaluated as range queries (the fast path's, into a scratch store of
// their own) a chunk at a time (at most six hours, fewer where the series
// they read would make a chunk hold more than chunkWindows windows), and
// every minute goes through the tracker as evaluation would have sent it.
// Live start and replay both do this, so every baseline is the same
// whichever minute a run starts at.
//
// With Options.Baselines, the baselines of the minutes whose write-back
// time is past the minute tier's last partition are written again: the
// open hours' direct windows are lost with the process (the pipeline's
// spill is not read after a restart), and these are the same values the
// live engine wrote, since the tracker computes them from the same
// minutes.
func (e *Engine) bootstrap(ctx context.Context, tm int64) error {
	rb := e.boot
	if rb == nil || rb.tm != tm {
		rb = e.newReadBack(tm)
		e.boot = rb
	} else {
		e.logger.Info("resuming the baselines' read-back where it failed", "from", fmtMs(rb.from), "at", fmtMs(rb.next), "to", fmtMs(rb.to))
	}
	logged := time.Now()
	for rb.next <= rb.to {
		c := rb.next
		if time.Since(logged) >= bootstrapLogEvery {
			// Hours at fleet scale (docs/diagnosis.md, "Memory of the
			// read-back"): say how far it is.
			e.logger.Info("reading the baselines back from the minute tier", "from", fmtMs(rb.from), "at", fmtMs(c), "to", fmtMs(rb.to),
				"chunk", rb.chunk, "took", time.Since(rb.t0).Round(time.Second), "left about", rb.left(c, e.o.Minute.Partitions()))
			logged = time.Now()
		}
		end := min(c+rb.chunk.Milliseconds()-minute.Milliseconds(), rb.to)
		// A failed chunk leaves what compute materialised of it in tmp
		// (written again, the same, when the chunk is read again) and its
		// last minute's series in p.prev, which the next attempt's stale
		// markers must not see.
		prev := maps.Clone(rb.p.prev)
		next, err := e.readBackChunk(ctx, rb, c, end)
		if err != nil {
			rb.p.prev = prev
			return err
		}
		rb.next, rb.chunk = end+minute.Milliseconds(), next
	}
	e.base.booted = true
	e.boot = nil
	if rb.minutes > 0 {
		e.logger.Info("baselines read back from the minute tier", "from", fmtMs(rb.from),
			"minutes", rb.minutes, "written again", rb.rewritten, "series", e.base.len(), "took", time.Since(rb.t0).Round(time.Millisecond))
	}
	return nil
}

// readBack is a read-back in progress (bootstrap). An attempt that fails
// keeps it, and the next attempt for the same minute goes on from the chunk
// that failed rather than from the first minute: at fleet scale the
// read-back takes hours, and a range query may fail (the query engine's
// timeout, on a loaded machine) where the next attempt would not.
type readBack struct {
	tm, from, to int64
	next         int64         // the first minute not read back yet
	chunk        time.Duration // the next chunk's length
	rewriteFrom  int64
	items        []passItem
	ms           []*labels.Matcher
	tmp          *scratch
	p            *precomputed
	minutes      int
	rewritten    int
	t0           time.Time
}

// left estimates how long the read-back has left at minute c, at the pace
// of the minutes with data it has read since it started: those the minute
// tier's partitions parts cover. A minute without data takes next to
// nothing to read back: a history with hours missing (a fleet down, a
// store younger than its history) would otherwise be estimated as long as
// a full one. The open hours after the last partition are not counted: an
// hour or two of the history.
func (rb *readBack) left(c int64, parts []tiers.PartitionInfo) time.Duration {
	done, ahead := dataSpan(parts, rb.from, c), dataSpan(parts, c, rb.to+minute.Milliseconds())
	if done <= 0 {
		return 0 // no pace to go by yet
	}
	return time.Duration(float64(time.Since(rb.t0)) * float64(ahead) / float64(done)).Round(time.Minute)
}

// dataSpan is how much of [from, to) the partitions parts cover, in
// milliseconds.
func dataSpan(parts []tiers.PartitionInfo, from, to int64) int64 {
	n := int64(0)
	for _, p := range parts {
		n += max(0, min(p.End, to)-max(p.Start, from))
	}
	return n
}

// newReadBack plans the read-back before minute tm.
func (e *Engine) newReadBack(tm int64) *readBack {
	rb := &readBack{tm: tm, to: tm - minute.Milliseconds(), chunk: firstChunk, items: e.bootstrapItems(),
		tmp: newScratch(), p: newPrecomputed(), t0: time.Now()}
	rb.from = floorDiv(tm, hourMs)*hourMs - e.base.readBack().Milliseconds()
	var exprs []parser.Expr
	for _, it := range rb.items {
		exprs = append(exprs, it.r.Query())
	}
	if reads := readSetExprs(exprs, map[string]bool{}); reads != nil {
		rb.ms = []*labels.Matcher{reads}
	}
	// Nothing to read before the minute tier's first partition.
	if first, _, ok := e.o.Minute.Bounds(); ok {
		rb.from = max(rb.from, floorDiv(first, hourMs)*hourMs)
	}
	// A tracker that has read back already goes on from its last minute
	// (Run moved the warm-up to the live edge: readBackToLive).
	if e.base.started {
		rb.from = max(rb.from, e.base.done+minute.Milliseconds())
	}
	rb.rewriteFrom = e.rewriteFrom()
	// A checkpoint after the history's start spares the minutes before it:
	// one at or before the first minute to write again if there is one,
	// else the baselines of the minutes between are not written again
	// (a gap in the stored baseline series, where the minute tier ends
	// hours before the checkpoint: better than hours of read-back).
	if ck := e.base.ckpt; ck != nil && !e.base.started {
		if c, ok := ck.restore(e.base, rb.from, tm, rb.rewriteFrom); ok {
			e.logger.Info("baselines restored from their checkpoint", "before", fmtMs(c), "series", e.base.len(),
				"history from", fmtMs(rb.from), "took", time.Since(rb.t0).Round(time.Millisecond))
			if c > rb.rewriteFrom {
				e.logger.Warn("the baselines of minutes before their checkpoint are not written again", "from", fmtMs(rb.rewriteFrom), "to", fmtMs(c))
			}
			rb.from = c
		}
	}
	rb.next = rb.from
	return rb
}

// readBackChunk reads back the minutes [c, end] and returns how long the
// next chunk is, sized by the series this one read.
func (e *Engine) readBackChunk(ctx context.Context, rb *readBack, c, end int64) (time.Duration, error) {
	snap, err := e.view.SnapshotFor(ctx, c-e.need, end, e.reach.reads(c), rb.ms...)
	if err != nil {
		return 0, err
	}
	if err := rb.p.compute(ctx, e, pass{items: rb.items, q: mergeQueryable{snap, rb.tmp}, sc: rb.tmp}, c, end); err != nil {
		return 0, err
	}
	if !rb.p.ready {
		return 0, fmt.Errorf("a signal's range query over %s..%s failed: %w", fmtMs(c), fmtMs(end), rb.p.notReady)
	}
	for t := c; t <= end; t += minute.Milliseconds() {
		if t >= rb.rewriteFrom {
			e.base.minute(t, e.signalValues(rb.tmp, t), writeBackSink{e})
			rb.rewritten++
		} else {
			e.base.minute(t, e.signalValues(rb.tmp, t))
		}
		rb.minutes++
	}
	rb.tmp.truncate(end - e.lookback.Milliseconds())
	return e.nextChunk(snap.Series()), nil
}

// bootstrapLogEvery is how often a long read-back logs its progress.
const bootstrapLogEvery = time.Minute

// fmtMs formats a Unix millisecond time as RFC 3339, UTC.
func fmtMs(t int64) string { return time.UnixMilli(t).UTC().Format(time.RFC3339) }

// rewriteFrom is the first minute whose baselines bootstrap writes again:
// the first whose write-back time (T+WriteBackDelay) is past the minute
// tier's last partition. MaxInt64 without Options.Baselines (the raw tier's
// WAL keeps what WriteBack was given).
func (e *Engine) rewriteFrom() int64 {
	if e.o.Baselines == nil {
		return math.MaxInt64
	}
	_, end, ok := e.o.Minute.Bounds()
	if !ok {
		return math.MinInt64
	}
	return end - e.o.WriteBackDelay.Milliseconds()
}

// readSetExprs is a matcher of the metric names exprs read of the minute
// data (names in recorded excluded); nil when a selector has no name.
func readSetExprs(exprs []parser.Expr, recorded map[string]bool) *labels.Matcher {
	var alts []string
	seen := map[string]bool{}
	all := false
	for _, expr := range exprs {
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			vs, ok := n.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			named := false
			for _, m := range vs.LabelMatchers {
				if m.Name != model.MetricNameLabel {
					continue
				}
				switch m.Type {
				case labels.MatchEqual:
					named = true
					if !recorded[m.Value] && !seen[m.Value] {
						seen[m.Value] = true
						alts = append(alts, regexp.QuoteMeta(m.Value))
					}
				case labels.MatchRegexp:
					named = true
					if !seen["~"+m.Value] {
						seen["~"+m.Value] = true
						alts = append(alts, "(?:"+m.Value+")")
					}
				}
			}
			all = all || !named
			return nil
		})
	}
	if all || len(alts) == 0 {
		return nil
	}
	slices.Sort(alts)
	m, err := labels.NewMatcher(labels.MatchRegexp, model.MetricNameLabel, strings.Join(alts, "|"))
	if err != nil {
		return nil
	}
	return m
}
