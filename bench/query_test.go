package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestMeasureDashboardsInterleaves: every execution of a panel runs on each
// target in turn, the first target rotating, each over its own range end,
// and each target's report gets its own latencies.
func TestMeasureDashboardsInterleaves(t *testing.T) {
	var (
		mu    sync.Mutex
		order []string
		ticks int // target a's CPU: one tick (10 ms) per query it serves
	)
	// A fake /proc for target a, whose CPU time grows by one tick per query.
	procRoot := t.TempDir()
	const pid = 4242
	if err := os.MkdirAll(filepath.Join(procRoot, strconv.Itoa(pid)), 0o755); err != nil {
		t.Fatal(err)
	}
	writeProc := func() {
		dir := filepath.Join(procRoot, strconv.Itoa(pid))
		stat := fmt.Sprintf("%d (server) S 1 1 1 0 -1 0 0 0 0 0 %d 0 0 0 20 0 1 0", pid, ticks)
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Error(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte("VmHWM:\t2048 kB\nVmRSS:\t1024 kB\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
	writeProc()
	serve := func(name string, end time.Time) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := r.ParseForm(); err != nil {
				t.Error(err)
			}
			if got := r.Form.Get("end"); got != strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', -1, 64) && got != end.Format(time.RFC3339Nano) {
				t.Errorf("%s: query ends at %s, want %s", name, got, end)
			}
			mu.Lock()
			order = append(order, name)
			if name == "a" {
				ticks++
				writeProc()
			}
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}`))
		}))
	}
	endA, endB := time.UnixMilli(1_700_000_000_000), time.UnixMilli(1_700_000_100_000)
	a, b := serve("a", endA), serve("b", endB)
	defer a.Close()
	defer b.Close()
	queries := []DashboardQuery{{Name: "up", Expr: "up"}, {Name: "two", Expr: "sum(up)"}}
	ranges := []time.Duration{time.Hour, 24 * time.Hour}
	lat, errs, err := MeasureDashboards(context.Background(), []DashboardTarget{{Name: "a", URL: a.URL, End: endA, PID: pid, ProcRoot: procRoot}, {Name: "b", URL: b.URL, End: endB}},
		queries, ranges, 3, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	execs := len(queries) * len(ranges) * 3
	if len(order) != 2*execs {
		t.Fatalf("%d queries, want %d", len(order), 2*execs)
	}
	for k := range execs {
		first, second := order[2*k], order[2*k+1]
		want := []string{"a", "b"}[k%2]
		if first != want || second == first {
			t.Fatalf("execution %d ran %s then %s; want %s first, then the other: %v", k, first, second, want, order)
		}
	}
	for i := range lat {
		if len(errs[i]) != 0 {
			t.Errorf("target %d: errors %v", i, errs[i])
		}
		if len(lat[i]) != len(ranges) {
			t.Fatalf("target %d: %d ranges", i, len(lat[i]))
		}
		for _, rl := range lat[i] {
			if rl.Executions != len(queries)*3 || rl.Errors != 0 || len(rl.PerQuery) != len(queries) || rl.P50Seconds <= 0 {
				t.Errorf("target %d range %s: %+v", i, rl.Range, rl)
			}
			// a's CPU: one 10 ms tick per query; b has no PID.
			if want := []float64{0.01, 0}[i]; math.Abs(rl.CPUPerQuerySeconds-want) > 1e-9 {
				t.Errorf("target %d range %s: CPU per query %g, want %g", i, rl.Range, rl.CPUPerQuerySeconds, want)
			}
		}
	}

	// The report takes the interleaved latencies as its dashboard.
	rep := Report{Name: "a", Runs: []RunResult{
		{Load: LoadResult{LastTimestamp: 1}, Queries: []RangeLatency{{Range: "1h", P50Seconds: 9, P99Seconds: 9, Executions: 1}}},
		{Load: LoadResult{LastTimestamp: endA.UnixMilli()}},
	}}
	if end, ok := rep.DashboardEnd(); !ok || !end.Equal(endA) {
		t.Fatalf("dashboard end %v, want %v", end, endA)
	}
	rep.SetDashboard(lat[0], errs[0], []string{"a", "b"})
	if rep.Runs[0].Queries != nil || len(rep.Summary.QueryLatency) != len(ranges) {
		t.Fatalf("summary %+v, first run's queries %v", rep.Summary.QueryLatency, rep.Runs[0].Queries)
	}
	if got, want := rep.Summary.QueryLatency[0].P50Seconds.Median, lat[0][0].P50Seconds; got != want || got == 9 {
		t.Fatalf("summary p50 %g, want the interleaved %g", got, want)
	}
	if got := rep.Summary.QueryLatency[0].CPUPerQuerySeconds; got.N != 1 || math.Abs(got.Median-0.01) > 1e-9 {
		t.Fatalf("summary CPU per query %+v, want 10 ms", got)
	}
}
