package rulegen

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestInternalFormMatchesExported evaluates the canonical rules in the
// exported form (label_replace chains over plain storage, as a Prometheus
// loading the rule file does) and in the internal form `strata serve` runs
// (PushDownRenames over RenamingQueryable) on the same mixed fleet, at
// several evaluation times, and requires the same recorded series, labels,
// values and timestamps.
func TestInternalFormMatchesExported(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func() Config
		want []string // recorded on this fleet
	}{
		{"join by pod", DefaultConfig, []string{"strata:serving_gpu_sm_active:ratio"}},
		{"join by host and gpu", func() Config {
			c := DefaultConfig()
			c.Joins = JoinByHostGPU()
			return c
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg()
			cfg.RateWindow = time.Minute
			var got [2]map[string]string
			for i, internal := range []bool{false, true} {
				e := newEvalEnv(t)
				e.internal = internal
				e.appendFleet(mixedFleet(t, e, 4000))
				for _, ts := range fleetTimes {
					e.evalRules(cfg, ts)
				}
				got[i] = e.recorded()
			}
			exported, internal := got[0], got[1]
			if len(exported) < 200 {
				t.Fatalf("only %d recorded samples: the fleet does not exercise the rules", len(exported))
			}
			for _, name := range append([]string{"strata:gpu_sm_active:ratio", "strata:gpu_memory_bandwidth_active:ratio", "strata:ttft_seconds:p99", "strata:kv_cache_usage:ratio"}, tc.want...) {
				if !slices.ContainsFunc(slices.Collect(maps.Keys(exported)), func(k string) bool { return strings.HasPrefix(k, name+" ") }) {
					t.Errorf("no %s recorded", name)
				}
			}
			if tc.name == "join by pod" {
				// Each cycle's vLLM pod serves on the GPUs of its first node,
				// whose labels are spelt as dcgmVariants[cycle]: every
				// spelling of the pod attribution joins.
				for i, v := range dcgmVariants {
					pod := fmt.Sprintf(`pod="vllm-llama31-8b-6d9f7c5b8-x2kqp-%04d"`, 8*i)
					if !slices.ContainsFunc(slices.Collect(maps.Keys(exported)), func(k string) bool {
						return strings.HasPrefix(k, "strata:serving_gpu_sm_active:ratio") && strings.Contains(k, pod)
					}) {
						t.Errorf("dcgm-exporter spelt %q: its GPUs joined no serving pod", v.name)
					}
				}
			}
			sameRecorded(t, exported, internal)
		})
	}
}

// sameRecorded requires the internal form to have recorded exactly the
// samples the exported form did.
func sameRecorded(t *testing.T, exported, internal map[string]string) {
	t.Helper()
	for k, v := range exported {
		if w, ok := internal[k]; !ok {
			t.Errorf("internal form lacks %s", k)
		} else if w != v {
			t.Errorf("%s: exported %s, internal %s", k, v, w)
		}
	}
	for k := range internal {
		if _, ok := exported[k]; !ok {
			t.Errorf("internal form records %s, exported does not", k)
		}
	}
}

// TestSharedNativeHistograms: p50 and p99 of a native histogram read one
// shared aggregation of float histograms from the evaluation's memo; the
// quantiles must be the exported form's.
func TestSharedNativeHistograms(t *testing.T) {
	var got [2]map[string]string
	for i, internal := range []bool{false, true} {
		e := newEvalEnv(t)
		e.internal = internal
		appendNHCB(t, e, "vllm_v1_t0_healthy.prom", t0)
		appendNHCB(t, e, "vllm_v1_t1_kv_storm.prom", t1)
		e.evalRules(DefaultConfig(), t1)
		got[i] = e.recorded()
	}
	for _, name := range []string{"strata:ttft_seconds:p50", "strata:ttft_seconds:p99"} {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(got[0])), func(k string) bool { return strings.HasPrefix(k, name+" ") }) {
			t.Errorf("no %s recorded", name)
		}
	}
	sameRecorded(t, got[0], got[1])
}

// recorded returns every canonical sample in the raw tier from the first of
// fleetTimes to the last, keyed by series and timestamp, with the value's
// bits.
func (e *evalEnv) recorded() map[string]string {
	e.t.Helper()
	return e.recordedBetween(fleetTimes[0], fleetTimes[len(fleetTimes)-1])
}

// recordedBetween is recorded from from to to.
func (e *evalEnv) recordedBetween(from, to time.Time) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	q, err := e.raw.Querier(from.UnixMilli(), to.UnixMilli())
	if err != nil {
		e.t.Fatal(err)
	}
	defer q.Close()
	set := q.Select(e.t.Context(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "strata:.+"))
	for set.Next() {
		s := set.At()
		it := s.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			out[fmt.Sprintf("%s %s@%d", s.Labels().Get(model.MetricNameLabel), s.Labels(), ts)] = fmt.Sprintf("%x", math.Float64bits(v))
		}
		if err := it.Err(); err != nil {
			e.t.Fatal(err)
		}
	}
	if err := set.Err(); err != nil {
		e.t.Fatal(err)
	}
	return out
}
