package diagnose

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
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

// fingerprints reads the fingerprint of each of ents at t: the latest
// value of every strata:* series of its pod (a pod label), GPU (a UUID
// label), serving target without a pod (its instance label) or host (an
// instance label of the host, with or without a port), SLO series left
// out, a series with a component label named with it; of several series
// of one name (a pod on two GPUs), the last in label order. All of a
// minute's new incidents share one pass over the scratch store: a select
// each walked every strata:* series (about 2 of the engine's 10 CPU-s a
// minute at 500,000 series, with tens of incidents opening).
func (e *Engine) fingerprints(ents []Entities, t time.Time) []Fingerprint {
	tm := t.UnixMilli()
	fps := make([]Fingerprint, len(ents))
	found := make([][]sampleAt, len(ents))
	want := map[entityKey][]int{}
	by := map[string]bool{} // the label names of want's keys: only those are read
	keyed := make([]bool, len(ents))
	for i, ent := range ents {
		fps[i].Signals = map[string]float64{}
		if k, ok := fingerprintKey(ent); ok {
			want[k] = append(want[k], i)
			by[k.name], keyed[i] = true, true
		}
	}
	if len(want) > 0 {
		pods, uuids, hosts := by["pod"], by["UUID"], by["instance"]
		var of []int
		var lbls labels.Labels
		take := func(v float64) {
			for _, i := range of {
				found[i] = append(found[i], sampleAt{lbls, v})
			}
		}
		e.scratch.eachLatest(tm-e.lookback.Milliseconds(), tm, fingerprinted, func(l labels.Labels) func(float64) {
			of, lbls = of[:0], l
			if pods {
				of = append(of, want[entityKey{"pod", l.Get("pod")}]...)
			}
			if uuids {
				of = append(of, want[entityKey{"UUID", l.Get("UUID")}]...)
			}
			// The host of instance "h:9400" is h; a host's name may hold
			// colons itself, so every prefix before one is a candidate.
			if hosts {
				inst := l.Get("instance")
				of = append(of, want[entityKey{"instance", inst}]...)
				for j := range len(inst) {
					if inst[j] == ':' {
						of = append(of, want[entityKey{"instance", inst[:j]}]...)
					}
				}
			}
			if len(of) == 0 {
				return nil
			}
			return take
		})
	}
	for i := range ents {
		slices.SortFunc(found[i], func(a, b sampleAt) int { return labels.Compare(a.lbls, b.lbls) })
		for _, s := range found[i] {
			name := s.lbls.Get(model.MetricNameLabel)
			if c := s.lbls.Get("component"); c != "" {
				name += "{component=" + c + "}"
			}
			fps[i].Signals[name] = s.v
		}
	}
	if len(want) > 0 {
		e.deviations(fps, ents, keyed, tm)
	}
	return fps
}

// entityKey is the label (and its value) that selects an entity's series
// for its fingerprint; for a host, the instance label's value up to its
// port.
type entityKey struct{ name, value string }

// fingerprintKey is the label that selects ent's series: its pod, else its
// GPU, else (a serving target without a pod label) its instance, else its
// host; false for an entity with none of them.
func fingerprintKey(ent Entities) (entityKey, bool) {
	switch {
	case ent.Pod != "":
		return entityKey{"pod", ent.Pod}, true
	case ent.UUID != "":
		return entityKey{"UUID", ent.UUID}, true
	case ent.ReplicaKey() != "":
		// A serving target without a pod label: its own instance, not
		// every exporter of its host.
		return entityKey{"instance", ent.Instance}, true
	case ent.Host != "":
		return entityKey{"instance", ent.Host}, true
	}
	return entityKey{}, false
}

// fingerprinted reports whether a fingerprint reads the series named
// name: the engine's recorded signals (strata:*), but its SLO series.
func fingerprinted(name string) bool {
	return len(name) > len("strata:") && strings.HasPrefix(name, "strata:") && !strings.HasPrefix(name, "strata:slo:")
}

// deviations fills the fingerprints' robust deviations: each tracked
// signal's z-score on the entity at minute tm (the largest in size when
// the entity has several series of it, e.g. a pod on two GPUs), and per
// dimension the largest |z| among its signals. keyed says which entities
// have a fingerprint key (the others get none). One pass over the tracked
// series serves every entity: a series' entities are read once, not once
// an incident (91,000 tracked series at 500,000 series of 15 s).
func (e *Engine) deviations(fps []Fingerprint, ents []Entities, keyed []bool, tm int64) {
	base := e.tracking()
	if base == nil {
		return
	}
	for _, n := range base.names {
		for _, s := range base.byMetric[n] {
			se := entitiesOf(s.lbls)
			read, ok := false, false
			var z float64
			for i, ent := range ents {
				if !keyed[i] || !seriesOnEntity(se, ent) {
					continue
				}
				if !read {
					_, _, z, _, ok = e.scratch.baselineAt(s, tm)
					z, read = math.Round(z*1000)/1000, true
				}
				if !ok {
					break
				}
				fp := &fps[i]
				if fp.Deviations == nil {
					fp.Deviations, fp.Dimensions = map[string]float64{}, map[string]float64{}
				}
				if old, ok := fp.Deviations[n]; !ok || math.Abs(z) > math.Abs(old) {
					fp.Deviations[n] = z
				}
				if dim := s.lbls.Get("strata_cause"); dim != "" && math.Abs(z) > fp.Dimensions[dim] {
					fp.Dimensions[dim] = math.Abs(z)
				}
			}
		}
	}
}

// baselineOf returns the baseline of metric on entity ent at minute tm
// that puts v furthest from normal in the direction of op (the series of
// the entity with a baseline; several for a pod on several GPUs).
func (e *Engine) baselineOf(metric string, ent Entities, op string, v float64, tm int64) (evidenceBase, bool) {
	base := e.tracking()
	if base == nil {
		return evidenceBase{}, false
	}
	var best evidenceBase
	var bestLbls labels.Labels
	bestDev := math.Inf(-1)
	for _, s := range base.lookup(metric, ent) {
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
