package diagnose

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/sim"
)

// fingerprintBySelect is the fingerprint as the engine read it before
// Engine.fingerprints, one scratch select an incident: the reference the
// one pass must equal.
func fingerprintBySelect(ctx context.Context, e *Engine, ent Entities, t time.Time) Fingerprint {
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
	deviationsOf(e, &fp, ent, tm)
	return fp
}

// deviationsOf is Engine.deviations as it was, for one entity: the
// reference of fingerprintBySelect.
func deviationsOf(e *Engine, fp *Fingerprint, ent Entities, tm int64) {
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

// fingerprintHosts are host names that are regular-expression syntax, or
// prefixes of each other, or hold colons themselves.
var fingerprintHosts = []string{
	"h", "h1", "h10", "h.1", "hx1", "h+1", "hh1", "h[1]", "(h)", "h|1", "h*", "^h$", `h\1`, "h:1", "h:1:2", "10.0.0.1", "10.0.0.10", "node-a", "node-a.b",
}

// fingerprintFleet is a scratch store of units pods, GPUs and hosts (a
// third each) with the engine's signal series at minute t: several
// samples each, some whose last sample is stale or NaN, before the
// lookback, after t or off the minute; series of the same name on two
// GPUs of a pod; component-labelled, SLO and non-signal series. It returns
// the store and every entity of the fleet, with some that match nothing
// and one that names none.
func fingerprintFleet(tb testing.TB, rng *rand.Rand, units int, t time.Time) (*scratch, []Entities) {
	tb.Helper()
	sc := newScratch()
	tm := t.UnixMilli()
	app := sc.AppenderV2(context.Background())
	add := func(l labels.Labels) {
		// Up to the minute after t; the last sample in range is t's, or
		// one before, or none.
		var ts []int64
		switch rng.IntN(8) {
		case 0:
			ts = []int64{tm - 7*60_000, tm - 6*60_000} // before the lookback
		case 1:
			ts = []int64{tm - 2*60_000, tm - 90_000, tm + 60_000} // irregular, one after t
		case 2:
			ts = []int64{tm - 60_000} // t's missing
		default:
			ts = []int64{tm - 2*60_000, tm - 60_000, tm}
		}
		for i, at := range ts {
			v := math.Round(rng.Float64()*1000) / 8
			if i == len(ts)-1 {
				switch rng.IntN(10) {
				case 0:
					v = math.Float64frombits(value.StaleNaN)
				case 1:
					v = math.NaN()
				}
			}
			if _, err := app.Append(0, l, 0, at, v, nil, nil, storage.AppendV2Options{}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	names := []string{"strata:gpu_sm_active:ratio", "strata:ttft_seconds:p99", "strata:kv_cache_usage:ratio", AnomalyZScoreSeries, BaselineMedianSeries}
	var ents []Entities
	for u := range units {
		switch u % 3 {
		case 0: // a pod on two GPUs
			pod := fmt.Sprintf("vllm-%d", u/3)
			if u%9 == 0 {
				pod = fmt.Sprintf("vllm-%d.x", u/3) // a regular expression's dot
			}
			for g := range 2 {
				uuid := fmt.Sprintf("GPU-%d-%d", u, g)
				for _, n := range names {
					add(labels.FromStrings(model.MetricNameLabel, n, "UUID", uuid, "pod", pod))
				}
			}
			add(labels.FromStrings(model.MetricNameLabel, "strata:slo:ttft:burn_rate", "pod", pod))
			add(labels.FromStrings(model.MetricNameLabel, "vllm:num_requests_running", "pod", pod))
			ents = append(ents, Entities{Pod: pod, UUID: "GPU-ignored"})
		case 1: // a GPU
			uuid := fmt.Sprintf("GPU-%d", u)
			for _, n := range names {
				add(labels.FromStrings(model.MetricNameLabel, n, "UUID", uuid, "gpu", "0", "instance", "g:9400"))
			}
			add(labels.FromStrings(model.MetricNameLabel, "strata:", "UUID", uuid))
			ents = append(ents, Entities{UUID: uuid, GPU: "0"})
		case 2: // a host: its instances with and without a port
			h := fingerprintHosts[(u/3)%len(fingerprintHosts)]
			if u/3 >= len(fingerprintHosts) {
				h += fmt.Sprint(u / 3)
			}
			for _, inst := range []string{h, h + ":9100", h + ":9100:x", h + "0:9100", "x" + h} {
				for _, c := range []string{"queue", "network"} {
					add(labels.FromStrings(model.MetricNameLabel, "strata:residual:ratio", "component", c, "instance", inst))
				}
				add(labels.FromStrings(model.MetricNameLabel, "strata:network_latency_seconds:p99", "instance", inst))
			}
			add(labels.FromStrings(model.MetricNameLabel, "stratax:other", "instance", h))
			ents = append(ents, Entities{Host: h})
		}
	}
	if err := app.Commit(); err != nil {
		tb.Fatal(err)
	}
	ents = append(ents, Entities{Pod: "nobody"}, Entities{Host: "g"}, Entities{Host: "h."}, Entities{Model: "m"}, ents[0])
	return sc, ents
}

// TestFingerprintsMatchSelect: the fingerprints of many incidents opened at
// once, read in one pass, are those each incident's own select read, to
// the bit.
func TestFingerprintsMatchSelect(t *testing.T) {
	at := simStart.Add(3 * time.Hour)
	for seed := range uint64(4) {
		sc, ents := fingerprintFleet(t, rand.New(rand.NewPCG(seed, 1)), 3*len(fingerprintHosts)+12, at)
		e := &Engine{scratch: sc, lookback: 5 * time.Minute}
		got := e.fingerprints(ents, at)
		if len(got) != len(ents) {
			t.Fatalf("%d fingerprints for %d entities", len(got), len(ents))
		}
		signals := 0
		for i, ent := range ents {
			want := fingerprintBySelect(context.Background(), e, ent, at)
			signals += len(want.Signals)
			if !equalSignals(got[i].Signals, want.Signals) {
				t.Errorf("seed %d: %+v: %v, want %v", seed, ent, got[i].Signals, want.Signals)
			}
		}
		if signals < 2*len(ents) {
			t.Fatalf("seed %d: %d signals in all: the fleet reads too little to compare", seed, signals)
		}
	}
}

func equalSignals(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || math.Float64bits(v) != math.Float64bits(w) {
			return false
		}
	}
	return true
}

// BenchmarkFingerprints is the cost of the fingerprints of a minute's new
// incidents over a scratch store of many strata:* series, about a third of them
// tracked (their entities are matched; they have no baseline, so no
// deviation is read): how=select is the select and the tracked series'
// scan an incident the engine ran before (fingerprintBySelect), how=pass
// the one pass of each it runs now.
func BenchmarkFingerprints(b *testing.B) {
	at := simStart.Add(3 * time.Hour)
	for _, units := range []int{3_000, 12_000} {
		sc, ents := fingerprintFleet(b, rand.New(rand.NewPCG(1, 1)), units, at)
		series, _ := sc.samples()
		tr := &tracker{names: []string{"strata:gpu_sm_active:ratio", "strata:ttft_seconds:p99", "strata:network_latency_seconds:p99"}, byMetric: map[string][]*bseries{}}
		for _, n := range tr.names {
			for _, s := range sc.byName[n] {
				tr.byMetric[n] = append(tr.byMetric[n], &bseries{metric: n, lbls: s.lbls})
			}
		}
		e := &Engine{scratch: sc, lookback: 5 * time.Minute, base: tr}
		for _, n := range []int{1, 10, 50} {
			opened := make([]Entities, n) // spread over the kinds of entity
			for i := range opened {
				opened[i] = ents[i*len(ents)/n]
			}
			b.Run(fmt.Sprintf("series=%d/incidents=%d/how=select", series, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					for _, ent := range opened {
						fingerprintBySelect(context.Background(), e, ent, at)
					}
				}
			})
			b.Run(fmt.Sprintf("series=%d/incidents=%d/how=pass", series, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					e.fingerprints(opened, at)
				}
			})
		}
	}
}

// TestFingerprintsMatchSelectTracked: over a seasonal engine's own scratch
// store and tracker, the fingerprints of every entity its tracked series
// name (each pod, GPU and host, and each host alone), read at once, are
// those each one's select and deviations read: signals, deviations and
// dimensions.
func TestFingerprintsMatchSelectTracked(t *testing.T) {
	cfg := sim.Config{Seed: 3, Start: simStart, Nodes: 1, GPUsPerNode: 4}
	end := simStart.Add(15 * time.Minute)
	cfg.Faults = sim.GenerateFaults(cfg, simStart.Add(5*time.Minute), end, 3, 5)
	e, err := New(modeConfig(BaselineSeasonal), Options{Minute: simHistory(t, cfg, end), Registerer: prometheus.NewRegistry(), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	at := simStart.Add(time.Minute)
	for ; at.Before(end.Add(-time.Minute)); at = at.Add(time.Minute) {
		if err := e.EvalMinute(context.Background(), at); err != nil {
			t.Fatal(err)
		}
	}
	at = at.Add(-time.Minute)
	var ents []Entities
	for _, list := range e.base.byMetric {
		for _, s := range list {
			se := entitiesOf(s.lbls)
			ents = append(ents, se, Entities{Host: se.Host})
		}
	}
	got := e.fingerprints(ents, at)
	deviations := 0
	for i, ent := range ents {
		want := fingerprintBySelect(context.Background(), e, ent, at)
		deviations += len(want.Deviations)
		if !equalSignals(got[i].Signals, want.Signals) || !equalSignals(got[i].Deviations, want.Deviations) || !equalSignals(got[i].Dimensions, want.Dimensions) {
			t.Fatalf("%+v: %+v, want %+v", ent, got[i], want)
		}
	}
	if deviations < len(ents) {
		t.Fatalf("%d deviations for %d entities: the engine tracks too little to compare", deviations, len(ents))
	}
}
