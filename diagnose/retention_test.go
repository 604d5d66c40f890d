package diagnose

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/sim"
)

func TestScratchKeep(t *testing.T) {
	recorded := map[string]bool{"r:a": true, "r:b": true, "r:c": true}
	parse := func(qs ...string) []parser.Expr {
		var out []parser.Expr
		for _, q := range qs {
			e, err := newParser().ParseExpr(q)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, e)
		}
		return out
	}
	const lookback, ret = 5 * time.Minute, 3 * time.Hour
	ms := func(d time.Duration) int64 { return d.Milliseconds() }
	for _, c := range []struct {
		name  string
		exprs []parser.Expr
		want  map[string]time.Duration // keep by name
	}{
		{"ranges, offsets and subqueries", parse(`max_over_time(r:a[2h])`, `r:b offset 10m`, `max_over_time(rate(r:c[5m])[30m:1m])`, `data_metric[6h]`),
			map[string]time.Duration{"r:a": 2*time.Hour + 6*time.Minute, "r:b": 16 * time.Minute, "r:c": 41 * time.Minute, "data_metric": 6 * time.Minute, "other": 6 * time.Minute}},
		{"the longest read wins", parse(`r:a`, `avg_over_time(r:a[15m])`),
			map[string]time.Duration{"r:a": 21 * time.Minute, "r:b": 6 * time.Minute}},
		{"never beyond the retention", parse(`max_over_time(r:a[5h])`),
			map[string]time.Duration{"r:a": ret}},
		{"a regular expression on recorded names keeps everything", parse(`{__name__=~"r:.*"}`),
			map[string]time.Duration{"r:a": ret, "r:b": ret}},
		{"a regular expression on other names does not", parse(`{__name__=~"data_.*"}[1h]`, `r:a`),
			map[string]time.Duration{"r:a": 6 * time.Minute, "r:b": 6 * time.Minute}},
		{"a selector without a name keeps everything", parse(`{pod="x"}`),
			map[string]time.Duration{"r:a": ret}},
		{"an @ modifier keeps everything", parse(`r:a @ 100`),
			map[string]time.Duration{"r:b": ret}},
		{"an @ modifier on a subquery keeps everything", parse(`max_over_time(r:a[10m:1m] @ 100)`),
			map[string]time.Duration{"r:b": ret}},
		{"an unparsable evidence query keeps everything", []parser.Expr{nil},
			map[string]time.Duration{"r:b": ret}},
	} {
		t.Run(c.name, func(t *testing.T) {
			k := newScratchKeep(c.exprs, recorded, lookback, ret)
			for n, want := range c.want {
				if got := k.keepFor(n); got != ms(want) {
					t.Errorf("%s kept %s, want %s", n, time.Duration(got)*time.Millisecond, want)
				}
			}
		})
	}
}

func TestScratchTruncateByName(t *testing.T) {
	s := newScratch()
	app := s.AppenderV2(context.Background())
	for _, n := range []string{"long", "short"} {
		for m := range int64(10) {
			if _, err := app.Append(0, podSeries(n, "m").Copy(), 0, m*60_000, float64(m), nil, nil, storage.AppendV2Options{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	gen := s.gen
	s.truncateBy(func(string) int64 { return 3 * 60_000 })
	if n, samples := s.samples(); n != 2 || samples != 14 {
		t.Fatalf("%d series, %d samples after dropping three minutes, want 2, 14", n, samples)
	}
	if s.gen != gen {
		t.Error("generation changed though no series was forgotten")
	}
	s.truncateBy(func(string) int64 { return 20 * 60_000 })
	if n, samples := s.samples(); n != 0 || samples != 0 || len(s.series) != 0 || len(s.byName) != 0 {
		t.Fatalf("%d series, %d samples, maps %d/%d after dropping everything", n, samples, len(s.series), len(s.byName))
	}
	if s.gen == gen {
		t.Error("generation unchanged though series were forgotten")
	}
}

// TestScratchKeepEqualsFullRetention: keeping each of the engine's series
// only as long as the rules read it back gives exactly what keeping every
// series for scratch_retention gives: the value of every series the
// engine records, at every minute, and the diagnoses (instant evaluation,
// which reads the scratch store minute by minute, over more than the
// retention).
func TestScratchKeepEqualsFullRetention(t *testing.T) {
	if testing.Short() {
		t.Skip("replays four hours twice")
	}
	minute, end := fourHours(t,
		sim.FaultSpec{Kind: sim.KindThermalThrottle, Node: 0, GPU: gpu(0), At: faultAt, Duration: 30 * time.Minute},
		sim.FaultSpec{Kind: sim.KindKVCacheStorm, Node: 0, GPU: gpu(2), At: faultAt + 20*time.Minute, Duration: 40 * time.Minute},
	)
	run := func(full bool) (diagnoses []byte, recorded []string) {
		e, err := New(DefaultConfig(), Options{Minute: minute, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if !full && e.keep.all {
			t.Fatal("the default pack keeps every series for the whole retention")
		}
		e.keep.all = full
		e.o.Sinks = []Sink{sinkFunc(func(u Update) {
			recorded = append(recorded, recordedAt(e.scratch, u.T.UnixMilli()))
		})}
		ds, err := e.replay(context.Background(), simStart.Add(2*time.Hour), end, false)
		if err != nil {
			t.Fatal(err)
		}
		n, samples := e.scratch.samples()
		t.Logf("full retention %v: %d series, %d samples held at the end", full, n, samples)
		b, _ := json.MarshalIndent(ds, "", " ")
		return b, recorded
	}
	kept, keptRec := run(false)
	full, fullRec := run(true)
	if len(keptRec) != len(fullRec) {
		t.Fatalf("%d and %d minutes evaluated", len(keptRec), len(fullRec))
	}
	for i := range fullRec {
		if keptRec[i] != fullRec[i] {
			t.Fatalf("minute %d: the engine's series differ:\nper name:\n%s\nfull:\n%s", i, keptRec[i], fullRec[i])
		}
	}
	if string(kept) != string(full) {
		t.Fatalf("per-name retention and full retention differ:\nper name:\n%s\nfull:\n%s", kept, full)
	}
	if len(full) < 100 {
		t.Fatalf("nothing diagnosed: %s", full)
	}
}

type sinkFunc func(Update)

func (f sinkFunc) Update(u Update) { f(u) }

// recordedAt lists every series of the scratch store with its value at
// exactly t, sorted.
func recordedAt(s *scratch, t int64) string {
	s.mu.RLock()
	var names []string
	for n := range s.byName {
		names = append(names, n)
	}
	s.mu.RUnlock()
	var lines []string
	for _, n := range names {
		for _, v := range s.valuesAt(n, t) {
			lines = append(lines, fmt.Sprintf("%s %v", v.lbls, v.v))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestScratchKeepDefaultPack: what the default pack keeps of its own
// series (docs/diagnosis.md, "Data").
func TestScratchKeepDefaultPack(t *testing.T) {
	minute, _ := openTiers(t, t.TempDir())
	e, err := New(DefaultConfig(), Options{Minute: minute, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]time.Duration{
		"strata:gpu_sm_clock_mhz":       2*time.Hour + 6*time.Minute,
		"strata:prefix_cache_hit:ratio": 2*time.Hour + 6*time.Minute,
		"strata:anomaly:zscore:avg3m":   21 * time.Minute,
		AnomalyZScoreSeries:             9 * time.Minute,
		BaselineMedianSeries:            6 * time.Minute,
		BaselineSigmaSeries:             6 * time.Minute,
	} {
		if got := time.Duration(e.keep.keepFor(name)) * time.Millisecond; got != want {
			t.Errorf("%s kept %s, want %s", name, got, want)
		}
	}
}
