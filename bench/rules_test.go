package bench

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/dcgmbridge/rulegen"
	"github.com/strata-dev/strata/internal/rulestale"
	"github.com/strata-dev/strata/query"
	"github.com/strata-dev/strata/tiers"
)

// pacedRaw is a raw tier holding what a paced run of series series sends in
// secs seconds, one sample every interval seconds (the bench's own fleet:
// DCGM GPUs, vLLM engines with their histograms, eBPF hosts), and the time
// of its last sample.
func pacedRaw(tb testing.TB, series, secs, interval int) (*tiers.Raw, time.Time) {
	tb.Helper()
	g, err := newGenerator(LoadConfig{Series: series, Mix: DefaultMix(), Seed: 1})
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(tb.TempDir()), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := raw.Close(); err != nil {
			tb.Error(err)
		}
	})
	t0 := time.Unix(1_800_000_000, 0)
	for s := 0; s <= secs; s += interval {
		app := raw.Appender(context.Background())
		ts := t0.Add(time.Duration(s) * time.Second).UnixMilli()
		for _, u := range g.units {
			u.advance(float64(interval))
			i := u.first
			for _, gr := range u.groups {
				for _, v := range gr.vals {
					if _, err := app.Append(0, g.series[i].lset, ts, v); err != nil {
						tb.Fatal(err)
					}
					i++
				}
			}
		}
		if err := app.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
	return raw, t0.Add(time.Duration(secs/interval*interval) * time.Second)
}

// BenchmarkCanonicalRulesPaced is one evaluation of the canonical rule group
// as `strata serve` runs it (internal forms pinned in the engine's parser,
// the shared subexpressions' memo, the stale-marker tracker, results appended
// to the raw tier) over the paced bench's fleet: 50,000 series with 3
// minutes of 1 Hz samples, and 500,000 series with 5 minutes of samples
// every 15 s (the paced run that issue 13's figures come from). It is what
// each evaluation allocates in those runs (docs/bench.md, "the canonical
// rules' garbage"). The bytes of the rules that allocate most are reported
// per evaluation (B/eval-<rule>); cpu-ns/op is the process's CPU time;
// held-B/eval is the most the live heap stood above its level before an
// evaluation, read after each rule (what the evaluation keeps while it runs).
func BenchmarkCanonicalRulesPaced(b *testing.B) {
	for _, c := range []struct {
		series, secs, interval int
	}{{50000, 180, 1}, {500000, 300, 15}} {
		b.Run(fmt.Sprintf("series=%d/interval=%ds", c.series, c.interval), func(b *testing.B) {
			benchCanonicalRules(b, c.series, c.secs, c.interval)
		})
	}
}

func benchCanonicalRules(b *testing.B, series, secs, interval int) {
	raw, at := pacedRaw(b, series, secs, interval)
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		b.Fatal(err)
	}
	rs, err := rulegen.RecordingRules(cat, rulegen.DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	pinned := query.NewPinnedExprs(parser.NewParser(parser.Options{}))
	forms := rulegen.NewInternalForms()
	forms.PinIn(pinned)
	exprs := make([]string, len(rs))
	names := map[string]string{}
	for i, r := range rs {
		exprs[i] = r.Query().String()
		names[exprs[i]] = r.Name()
	}
	if err := forms.Set(parser.NewParser(parser.Options{}), exprs); err != nil {
		b.Fatal(err)
	}
	engine := promql.NewEngine(promql.EngineOpts{MaxSamples: 50_000_000, Timeout: time.Minute, LookbackDelta: 5 * time.Minute, Parser: pinned})
	stale := rulestale.New()
	qf := stale.QueryFunc(forms.QueryFunc(engine, raw, 5*time.Minute))
	// Each rule's allocation, measured around its query (runtime.ReadMemStats
	// stops the world: only in the first evaluations, not the timed ones),
	// and what the evaluation holds between its rules: the live heap after
	// each rule's query (a collection first), above the live heap before
	// the evaluation. That is what a collection landing in the middle of
	// an evaluation finds live besides the steady heap (the memo's results,
	// the results not yet appended), and what the heap goal rises by.
	perRule := map[string]uint64{}
	measure := true
	var before, held uint64
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	wq := func(ctx context.Context, qs string, t time.Time) (promql.Vector, error) {
		if !measure {
			return qf(ctx, qs, t)
		}
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		v, err := qf(ctx, qs, t)
		runtime.ReadMemStats(&m1)
		perRule[names[qs]] += m1.TotalAlloc - m0.TotalAlloc
		if h := live(); h > before {
			held = max(held, h-before)
		}
		return v, err
	}
	reg := prometheus.NewRegistry()
	g := rules.NewGroup(rules.GroupOptions{Name: "strata_canonical", File: "canonical.rules.yml", Interval: 15 * time.Second, Rules: rs, Opts: &rules.ManagerOptions{
		QueryFunc: wq, AppendableV2: stale.Appendable(raw), Queryable: raw, Context: context.Background(),
		Logger: slog.New(slog.DiscardHandler), Registerer: reg, Metrics: stale.Metrics(reg),
	}})
	iter := stale.EvalIterationFunc(forms.EvalIterationFunc)
	const measured = 3
	for range measured {
		// The last evaluation's: the first also creates the rules' series.
		before, held = live(), 0
		iter(context.Background(), g, at)
	}
	for _, r := range g.Rules() {
		if err := r.LastError(); err != nil {
			b.Fatalf("rule %s: %v", r.Name(), err)
		}
	}
	measure = false
	type ruleBytes struct {
		name  string
		bytes uint64
	}
	var top []ruleBytes
	for name, n := range perRule {
		top = append(top, ruleBytes{name, n / measured})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].bytes > top[j].bytes })
	b.ReportAllocs()
	var ru0 syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru0); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		iter(context.Background(), g, at)
	}
	var ru1 syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru1); err != nil {
		b.Fatal(err)
	}
	cpu := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()) - time.Duration(ru0.Utime.Nano()+ru0.Stime.Nano())
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(held), "held-B/eval")
	for _, rb := range top[:min(len(top), 8)] {
		b.ReportMetric(float64(rb.bytes), "B/eval-"+rb.name)
	}
}
