package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/diagnose/diagtest"
)

func TestQuietWindow(t *testing.T) {
	at := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		now       string
		hour      int
		from, til string
	}{
		{"2026-03-02T10:20:00Z", 4, "2026-03-03T04:00:00Z", "2026-03-03T04:55:00Z"},  // later today is past: tomorrow
		{"2026-03-02T02:20:00Z", 4, "2026-03-02T04:00:00Z", "2026-03-02T04:55:00Z"},  // later today
		{"2026-03-02T04:30:00Z", 4, "2026-03-02T04:30:00Z", "2026-03-02T04:55:00Z"},  // inside the hour, fits
		{"2026-03-02T04:56:00Z", 4, "2026-03-03T04:00:00Z", "2026-03-03T04:55:00Z"},  // inside, no longer fits
		{"2026-03-02T23:10:00Z", 23, "2026-03-02T23:10:00Z", "2026-03-02T23:55:00Z"}, // last hour of the day
		{"2026-03-02T10:20:00Z", -1, "2026-03-02T10:20:00Z", "2026-03-02T11:20:00Z"}, // no history: now
	} {
		from, til := QuietWindow(at(c.now), c.hour, 5*time.Minute)
		if !from.Equal(at(c.from)) || !til.Equal(at(c.til)) {
			t.Errorf("QuietWindow(%s, %d) = %s..%s, want %s..%s", c.now, c.hour, from, til, c.from, c.til)
		}
	}
}

type fixedTraffic struct{ hour, days int }

func (f fixedTraffic) QuietHour(context.Context, string, time.Time) (int, int, error) {
	return f.hour, f.days, nil
}

// TestProfilerHook: a firing diagnosis on a pod becomes one profile request
// in the model's quiet hour, as does one on a serving instance without a pod;
// no pod nor serving instance (a GPU), a model with a tight latency
// objective, and a second diagnosis on the same pod or instance within
// min_interval are skipped and counted; a resolved or low-confidence
// diagnosis asks for nothing.
func TestProfilerHook(t *testing.T) {
	var mu sync.Mutex
	var got []ProfileRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req ProfileRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("agent: %v", err)
		}
		mu.Lock()
		got = append(got, req)
		mu.Unlock()
	}))
	defer srv.Close()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	slo := diagnose.DefaultConfig().SLO
	slo.Models = map[string]diagnose.SLO{"fast-model": {TPOTP99: model.Duration(40 * time.Millisecond)}}
	now := time.Date(2026, 3, 2, 10, 20, 0, 0, time.UTC)
	p := NewProfiler(diagnose.ProfilerConfig{URL: srv.URL, Tool: "nsys", MinConfidence: 0.6, Causes: []string{"under_batched_gpu", "power_cap"}},
		slo, fixedTraffic{hour: 3, days: 7}, m, diagtest.QuietLogger(), time.Millisecond, func() time.Time { return now })
	defer p.Stop()

	onPod := func(id, cause, pod, mdl string, conf float64) diagnose.Diagnosis {
		return diagnose.Diagnosis{ID: id, Cause: cause, State: diagnose.StateFiring, Confidence: conf,
			Entities: diagnose.Entities{Model: mdl, Namespace: "inference", Pod: pod, Host: "gpu-node-1", GPU: "2"}}
	}
	resolved := onPod("d-resolved", "under_batched_gpu", "p9", "llama", 0.9)
	resolved.State = diagnose.StateResolved
	p.Update(diagnose.Update{T: now, Changed: []diagnose.Diagnosis{
		onPod("d-1", "under_batched_gpu", "p1", "llama", 0.8),
		onPod("d-low", "under_batched_gpu", "p2", "llama", 0.3),       // below min_confidence
		onPod("d-other", "kv_cache_eviction_storm", "p3", "llama", 1), // cause not listed
		firing("d-nopod", 0.9), // power_cap on a GPU, no pod
		onPod("d-fast", "under_batched_gpu", "p4", "fast-model", 0.9), // TPOT objective 40ms
		resolved,
	}})
	p.Update(diagnose.Update{T: now.Add(time.Hour), Changed: []diagnose.Diagnosis{
		onPod("d-1", "under_batched_gpu", "p1", "llama", 0.9),  // same diagnosis: once
		onPod("d-2", "under_batched_gpu", "p1", "llama", 0.9),  // same pod within 24h
		onPod("d-3", "under_batched_gpu", "p5", "llama", 0.95), // another pod
		// Outside Kubernetes: the serving instance; twice within 24h: once.
		{ID: "d-bare", Cause: "under_batched_gpu", State: diagnose.StateFiring, Confidence: 0.9,
			Entities: diagnose.Entities{Model: "llama", Instance: "gpu-node-3:8000", Host: "gpu-node-3"}},
		{ID: "d-bare2", Cause: "under_batched_gpu", State: diagnose.StateFiring, Confidence: 0.9,
			Entities: diagnose.Entities{Model: "llama", Instance: "gpu-node-3:8000", Host: "gpu-node-3"}},
	}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		// The sender counts a request once its answer is read, after the
		// agent has it: Stop before that would lose the count (seen
		// once in make test).
		sent := testutil.ToFloat64(m.sent.WithLabelValues("profiler"))
		if n >= 3 && sent >= 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	p.Stop()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 3 {
		t.Fatalf("agent got %d requests, want 3 (d-1, d-3, d-bare): %+v", len(got), got)
	}
	ids := map[string]ProfileRequest{}
	for _, r := range got {
		ids[r.DiagnosisID] = r
	}
	r, ok := ids["d-1"]
	if !ok || ids["d-3"].Pod != "p5" {
		t.Fatalf("requests for %v, want d-1 and d-3", ids)
	}
	wantFrom := time.Date(2026, 3, 3, 3, 0, 0, 0, time.UTC)
	if r.Pod != "p1" || r.Namespace != "inference" || r.Tool != "nsys" || r.DurationSeconds != 300 ||
		!r.NotBefore.Equal(wantFrom) || !r.NotAfter.Equal(wantFrom.Add(55*time.Minute)) || r.QuietHourUTC != 3 || r.QuietHourDays != 7 ||
		r.Diagnosis.ID != "d-1" {
		t.Errorf("request = %+v", r)
	}
	if b := ids["d-bare"]; b.Pod != "" || b.Instance != "gpu-node-3:8000" {
		t.Errorf("request outside Kubernetes = %+v", b)
	}
	for reason, want := range map[string]float64{"no_pod": 1, "latency_slo": 1, "min_interval": 2} {
		if v := testutil.ToFloat64(m.skipped.WithLabelValues(reason)); v != want {
			t.Errorf("skipped{reason=%q} = %v, want %v", reason, v, want)
		}
	}
	if v := testutil.ToFloat64(m.sent.WithLabelValues("profiler")); v != 3 {
		t.Errorf("sent{kind=profiler} = %v, want 3", v)
	}
}

// TestProfilerConfigValidate: a window outside 1m..10m, an unknown cause and
// a bad URL are errors that name the hook.
func TestProfilerConfigValidate(t *testing.T) {
	for _, p := range []diagnose.ProfilerConfig{
		{URL: "http://agent:8080/profile", Duration: model.Duration(30 * time.Minute)},
		{URL: "http://agent:8080/profile", Causes: []string{"slow_gpu"}},
		{URL: "agent:8080"},
	} {
		cfg := diagnose.DefaultConfig()
		cfg.Hooks.Profilers = []diagnose.ProfilerConfig{p}
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%+v: no error", p)
			continue
		}
		t.Log(err)
	}
	cfg := diagnose.DefaultConfig()
	cfg.Hooks.Profilers = []diagnose.ProfilerConfig{{URL: "http://agent:8080/profile", Duration: model.Duration(10 * time.Minute)}}
	if err := cfg.Validate(); err != nil {
		t.Errorf("valid profiler hook: %v", err)
	}
}

// TestQueryTraffic: three days of a request rate that dips at 04:00 UTC give
// hour 4 from the store through PromQL.
func TestQueryTraffic(t *testing.T) {
	db, err := tsdb.Open(t.TempDir(), nil, nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	end := time.Date(2026, 3, 5, 0, 0, 0, 0, time.UTC)
	app := db.Appender(context.Background())
	ls := labels.FromStrings("__name__", "strata:requests:rate", "model_name", "llama", "pod", "p1")
	other := labels.FromStrings("__name__", "strata:requests:rate", "model_name", "other", "pod", "p2")
	for ts := end.Add(-72 * time.Hour); ts.Before(end); ts = ts.Add(time.Minute) {
		v := 10.0
		if ts.Hour() == 4 {
			v = 2
		}
		if _, err := app.Append(0, ls, ts.UnixMilli(), v); err != nil {
			t.Fatal(err)
		}
		// Another model, quiet at 13:00, must not count.
		w := 10.0
		if ts.Hour() == 13 {
			w = 0
		}
		if _, err := app.Append(0, other, ts.UnixMilli(), w); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	eng := promql.NewEngine(promql.EngineOpts{MaxSamples: 1e7, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
	q := QueryTraffic{Engine: eng, Queryable: db, Days: 7}
	hour, days, err := q.QuietHour(context.Background(), "llama", end)
	if err != nil {
		t.Fatal(err)
	}
	if hour != 4 || days != 3 {
		t.Errorf("QuietHour = hour %d over %d days, want 4 over 3", hour, days)
	}
	if hour, days, err := q.QuietHour(context.Background(), "absent", end); err != nil || hour != -1 || days != 0 {
		t.Errorf("QuietHour(absent) = %d, %d, %v; want -1, 0, nil", hour, days, err)
	}
}
