package diagnose

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
)

// appendable is where rule results go: always the scratch store, and in
// live mode the ALERTS series also to the write-back appendable, shifted by
// WriteBackDelay.
func (e *Engine) appendable() storage.AppendableV2 {
	if e.o.WriteBack == nil {
		return e.scratch
	}
	return teeAppendable{e: e}
}

type teeAppendable struct{ e *Engine }

func (t teeAppendable) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return &teeAppender{s: t.e.scratch.AppenderV2(ctx), e: t.e, ctx: ctx}
}

type teeAppender struct {
	s   storage.AppenderV2
	w   storage.AppenderV2 // opened on the first written-back sample
	e   *Engine
	ctx context.Context
}

func writtenBack(ls labels.Labels) bool {
	n := ls.Get(model.MetricNameLabel)
	return n == "ALERTS" || n == "ALERTS_FOR_STATE"
}

func (a *teeAppender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, o storage.AppendV2Options) (storage.SeriesRef, error) {
	if writtenBack(ls) {
		if a.w == nil {
			a.w = a.e.o.WriteBack.AppenderV2(a.ctx)
		}
		// Rejections (a lagging engine writes older than the raw tier
		// accepts) never fail the rule: the scratch store has the sample.
		if _, err := a.w.Append(0, ls, 0, t+a.e.o.WriteBackDelay.Milliseconds(), v, nil, nil, storage.AppendV2Options{}); err != nil {
			a.e.logger.Debug("write-back sample rejected", "series", ls.String(), "err", err)
		}
	}
	return a.s.Append(ref, ls, st, t, v, h, fh, o)
}

func (a *teeAppender) Commit() error {
	err := a.s.Commit()
	if a.w != nil {
		if werr := a.w.Commit(); werr != nil {
			a.e.logger.Warn("write back ALERTS series", "err", werr)
		}
	}
	return err
}

func (a *teeAppender) Rollback() error {
	err := a.s.Rollback()
	if a.w != nil {
		err = errors.Join(err, a.w.Rollback())
	}
	return err
}

// BaselineSeriesNames are the metric names of the baseline series the
// engine writes back (live): with Options.Baselines they are in the minute
// tier only, and the query path serves them from there
// (tiers.WithMinuteOnlyNames).
func BaselineSeriesNames() []string {
	return []string{BaselineMedianSeries, BaselineSigmaSeries, BaselineKSeries, AnomalyZScoreSeries}
}

// writeDiagnoses appends strata_diagnosis{...} = confidence for every open
// diagnosis at t+WriteBackDelay, and a stale marker for each that resolved.
func (e *Engine) writeDiagnoses(t time.Time, open, changed []Diagnosis) {
	var resolved []Diagnosis
	for _, d := range changed {
		if d.State == StateResolved {
			resolved = append(resolved, d)
		}
	}
	if len(open) == 0 && len(resolved) == 0 {
		return
	}
	app := e.o.WriteBack.AppenderV2(context.Background())
	ts := t.Add(e.o.WriteBackDelay).UnixMilli()
	stale := math.Float64frombits(value.StaleNaN)
	for _, d := range append(open, resolved...) {
		b := labels.NewBuilder(labels.EmptyLabels())
		b.Set(model.MetricNameLabel, DiagnosisSeries)
		b.Set("id", d.ID)
		b.Set("cause", d.Cause)
		b.Set("severity", d.Severity)
		b.Set("dimension", d.Dimension)
		for k, v := range d.Entities.Map() {
			b.Set(k, v)
		}
		v := d.Confidence
		if d.State == StateResolved {
			v = stale
		}
		if _, err := app.Append(0, b.Labels(), 0, ts, v, nil, nil, storage.AppendV2Options{}); err != nil {
			e.logger.Debug("write-back diagnosis rejected", "id", d.ID, "err", err)
		}
	}
	if err := app.Commit(); err != nil {
		e.logger.Warn("write back strata_diagnosis series", "err", err)
	}
}
