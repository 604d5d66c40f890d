package diagnose

import (
	"context"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// evalScalar evaluates an evidence query at t and returns its first
// sample's value (the query names one entity, so there is one).
func (e *Engine) evalScalar(ctx context.Context, qs string, t time.Time) (float64, bool) {
	if qs == "" {
		return 0, false
	}
	v, err := e.queryFunc(ctx, qs, t)
	if err != nil || len(v) == 0 || math.IsNaN(v[0].F) {
		return 0, false
	}
	return v[0].F, true
}

// fingerprint reads the engine's recorded canonical signals of entity ent
// at t: the latest value of every strata:* series of its pod or GPU.
func (e *Engine) fingerprint(ctx context.Context, ent Entities, t time.Time) Fingerprint {
	fp := Fingerprint{Signals: map[string]float64{}}
	var ms []*labels.Matcher
	switch {
	case ent.Pod != "":
		ms = []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "pod", ent.Pod)}
	case ent.UUID != "":
		ms = []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "UUID", ent.UUID)}
	case ent.Host != "":
		ms = []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "instance", regexp.QuoteMeta(ent.Host)+"(:.*)?")}
	default:
		return fp
	}
	ms = append(ms, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "strata:.+"))
	tm := t.UnixMilli()
	q, err := e.scratch.Querier(tm-e.lookback.Milliseconds(), tm)
	if err != nil {
		return fp
	}
	defer func() { _ = q.Close() }()
	set := q.Select(ctx, false, &storage.SelectHints{Start: tm - e.lookback.Milliseconds(), End: tm}, ms...)
	for set.Next() {
		s := set.At()
		it := s.Iterator(nil)
		var last float64
		ok := false
		for it.Next() != 0 {
			_, last = it.At()
			ok = !math.IsNaN(last)
		}
		if !ok {
			continue
		}
		name := s.Labels().Get(model.MetricNameLabel)
		if c := s.Labels().Get("component"); c != "" {
			name += "{component=" + c + "}"
		}
		if strings.HasPrefix(name, "strata:slo:") {
			continue
		}
		fp.Signals[name] = last
	}
	e.deviations(&fp, ent, tm)
	return fp
}

// deviations fills the fingerprint's robust deviations: each tracked
// signal's z-score on the entity at minute tm (the largest in size when
// the entity has several series of it, e.g. a pod on two GPUs), and per
// dimension the largest |z| among its signals.
func (e *Engine) deviations(fp *Fingerprint, ent Entities, tm int64) {
	if e.base == nil {
		return
	}
	for _, n := range e.base.names {
		for _, s := range e.base.lookup(n, ent) {
			_, _, z, _, ok := e.scratch.baselineAt(s, tm)
			if !ok {
				continue
			}
			if fp.Deviations == nil {
				fp.Deviations, fp.Dimensions = map[string]float64{}, map[string]float64{}
			}
			z = math.Round(z*1000) / 1000
			if old, ok := fp.Deviations[n]; !ok || math.Abs(z) > math.Abs(old) {
				fp.Deviations[n] = z
			}
			if dim := s.lbls.Get("strata_cause"); dim != "" && math.Abs(z) > fp.Dimensions[dim] {
				fp.Dimensions[dim] = math.Abs(z)
			}
		}
	}
}

// baselineOf returns the baseline of metric on entity ent at minute tm
// that puts v furthest from normal in the direction of op (the series of
// the entity with a baseline; several for a pod on several GPUs).
func (e *Engine) baselineOf(metric string, ent Entities, op string, v float64, tm int64) (evidenceBase, bool) {
	if e.base == nil {
		return evidenceBase{}, false
	}
	var best evidenceBase
	var bestLbls labels.Labels
	bestDev := math.Inf(-1)
	for _, s := range e.base.lookup(metric, ent) {
		med, sig, _, src, ok := e.scratch.baselineAt(s, tm)
		if !ok {
			continue
		}
		b := evidenceBase{med: med, sig: sig, src: src, ok: true}
		// Ties go to the smaller label set: the tracker's order of series
		// differs between replay's fast path and live evaluation.
		if dev := b.deviation(op, v); dev > bestDev || dev == bestDev && labels.Compare(s.lbls, bestLbls) < 0 {
			best, bestDev, bestLbls = b, dev, s.lbls
		}
	}
	return best, best.ok
}
