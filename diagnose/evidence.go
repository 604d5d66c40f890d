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
	return fp
}
