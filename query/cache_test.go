package query

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// rawCacheSource is a CacheSource over a raw tier alone, as tiers.Stitched
// is over a store whose rollup tiers hold nothing; derived_baseline stands
// for the diagnosis engine's minute-only series.
type rawCacheSource struct {
	raw     *tiers.Raw
	rawFrom int64
}

func (s *rawCacheSource) Generation() uint64  { return s.raw.Generation() }
func (s *rawCacheSource) RawFrom(int64) int64 { return s.rawFrom }
func (s *rawCacheSource) Derived(ms []*labels.Matcher) bool {
	for _, m := range ms {
		if m.Name == "__name__" && m.Matches("derived_baseline") {
			return true
		}
	}
	return false
}

// cacheTest is a raw tier fed in real time by a fake clock, the plain
// engine over it and a cache engine over the splitting one.
type cacheTest struct {
	t      *testing.T
	raw    *tiers.Raw
	src    *rawCacheSource
	plain  promql.QueryEngine
	cache  *cacheEngine
	clock  *int64 // the fake clock (ms), the raw tier's and the cache's
	fed    int64  // samples are appended up to here
	scrape int64
}

const cacheTestFreshness = 5 * time.Minute

func newCacheTest(t *testing.T, maxBytes int64) *cacheTest {
	t.Helper()
	raw := openTestRaw(t)
	var now int64
	raw.TrackLateAppends(cacheTestFreshness, func() time.Time { return time.UnixMilli(now) })
	cfg := DefaultConfig()
	cfg.ResultsCacheSize = maxBytes
	cfg.ResultsCacheFreshness = cacheTestFreshness
	api, err := New(cfg, raw, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	ct := &cacheTest{t: t, raw: raw, src: &rawCacheSource{raw: raw, rawFrom: math.MinInt64}, plain: api.engine, fed: t0 - testStep, scrape: testStep}
	ct.clock = &now
	now = t0
	ct.cache = newCacheEngine(api.split, parser.NewParser(cfg.parserOptions()), ct.src, cfg, prometheus.NewRegistry())
	ct.cache.now = func() time.Time { return time.UnixMilli(*ct.clock) }
	return ct
}

// advance moves the clock by d and appends, in time order, every sample
// due up to lag before the new now (a sender behind by less than the
// freshness, whose samples are not late): x{i} counters, g gauges, h
// classic histogram buckets, and the minute-only stand-in derived_baseline.
func (ct *cacheTest) advance(d, lag time.Duration) {
	ct.t.Helper()
	*ct.clock += d.Milliseconds()
	app := ct.raw.Appender(context.Background())
	for ts := ct.fed + ct.scrape; ts <= *ct.clock-lag.Milliseconds(); ts += ct.scrape {
		i := float64((ts - t0) / ct.scrape)
		for k := range 3 {
			ks := strconv.Itoa(k)
			ct.append(app, labels.FromStrings("__name__", "x", "i", ks), ts, i*float64(k+1))
			ct.append(app, labels.FromStrings("__name__", "g", "i", ks), ts, math.Sin(i/10+float64(k)))
		}
		for _, le := range []string{"0.1", "1", "+Inf"} {
			f, _ := strconv.ParseFloat(le, 64)
			ct.append(app, labels.FromStrings("__name__", "h_bucket", "le", le), ts, i*math.Min(f+1, 3))
		}
		ct.append(app, labels.FromStrings("__name__", "derived_baseline"), ts, i)
		ct.fed = ts
	}
	if err := app.Commit(); err != nil {
		ct.t.Fatal(err)
	}
}

func (ct *cacheTest) append(app storage.Appender, l labels.Labels, ts int64, v float64) {
	ct.t.Helper()
	if _, err := app.Append(0, l, ts, v); err != nil {
		ct.t.Fatal(err)
	}
}

// late appends a new x series holding one sample at ts, behind the
// freshness horizon: it changes steps the cache may hold.
func (ct *cacheTest) late(name string, ts int64) {
	ct.t.Helper()
	app := ct.raw.Appender(context.Background())
	ct.append(app, labels.FromStrings("__name__", "x", "i", name), ts, 1e6)
	if err := app.Commit(); err != nil {
		ct.t.Fatal(err)
	}
}

// both runs qs over [start, end] on the plain engine and through the cache
// and fails the test unless they answer the same.
func (ct *cacheTest) both(qs string, start, end time.Time, step time.Duration) {
	ct.t.Helper()
	run := func(e promql.QueryEngine) string {
		qry, err := e.NewRangeQuery(context.Background(), ct.raw, nil, qs, start, end, step)
		if err != nil {
			ct.t.Fatalf("%s: %v", qs, err)
		}
		defer qry.Close()
		res := qry.Exec(context.Background())
		if res.Err != nil {
			ct.t.Fatalf("%s: %v", qs, res.Err)
		}
		return res.String() + "\n" + annotationsString(res)
	}
	want := run(ct.plain)
	if got := run(ct.cache); got != want {
		ct.t.Errorf("now %s, %s over [%s, %s] step %s: cached answer differs\ngot  %.400s\nwant %.400s",
			time.UnixMilli(*ct.clock).UTC().Format(time.TimeOnly), qs, start.Sub(time.UnixMilli(t0)), end.Sub(time.UnixMilli(t0)), step, got, want)
	}
}

func annotationsString(res *promql.Result) string {
	s := ""
	for _, err := range res.Warnings {
		s += err.Error() + "\n"
	}
	return s
}

// TestResultsCacheMatchesEngine: a dashboard refreshed as time passes,
// with late samples arriving now and then, gets the plain engine's answers
// step for step, while most steps come from the cache.
func TestResultsCacheMatchesEngine(t *testing.T) {
	ct := newCacheTest(t, 32<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	ct.advance(90*time.Minute, 0)
	queries := []string{
		"x",
		"rate(x[5m])",
		"sum by (i) (rate(x[2m]))",
		"x offset -3m", // reads ahead of its step
		"x offset 10m",
		"max_over_time(g[10m:1m])",
		"histogram_quantile(0.9, sum by (le) (rate(h_bucket[5m])))",
		"timestamp(g) - time()",
		"topk(2, g)",
		"g @ " + strconv.FormatInt((t0+30*60_000)/1000, 10), // bypassed
		"derived_baseline", // bypassed
		"rate(g[5m])",      // an info annotation: never stored
	}
	steps := []time.Duration{15 * time.Second, time.Minute, 7 * time.Second}
	for round := range 40 {
		ct.advance(time.Duration(rng.IntN(90)+1)*time.Second, time.Duration(rng.IntN(240))*time.Second)
		if round%7 == 3 {
			// A sample behind the horizon, in a new series every selector
			// of x sees.
			ct.late(strconv.Itoa(100+round), *ct.clock-cacheTestFreshness.Milliseconds()-int64(rng.IntN(1_200_000)))
		}
		for _, step := range steps {
			end := time.UnixMilli(*ct.clock - int64(rng.IntN(30_000)))
			if round%2 == 0 { // Grafana aligns the range to the step
				end = end.Truncate(step)
			} else { // the API takes float seconds: microseconds
				end = end.Add(time.Duration(rng.IntN(1000)) * time.Microsecond)
			}
			for _, qs := range queries {
				ct.both(qs, end.Add(-time.Hour), end, step)
			}
		}
	}
	c := ct.cache
	served := testutil.ToFloat64(c.stepsServed)
	partial, hits := testutil.ToFloat64(c.partial), testutil.ToFloat64(c.hits)
	if served == 0 || partial == 0 {
		t.Errorf("the cache answered %v steps (%v partial, %v hits): it should answer most", served, partial, hits)
	}
	t.Logf("steps from the cache %v, partial %v, hits %v, misses %v, bypassed %v", served, partial, hits,
		testutil.ToFloat64(c.misses), testutil.ToFloat64(c.bypassed))
}

// TestResultsCacheLateSample: a sample appended behind the horizon after a
// query was cached is in the next answer.
func TestResultsCacheLateSample(t *testing.T) {
	ct := newCacheTest(t, 32<<20)
	ct.advance(time.Hour, 0)
	start, end := time.UnixMilli(*ct.clock-30*60_000), time.UnixMilli(*ct.clock)
	ct.both("sum(x)", start, end, 15*time.Second)
	ct.both("sum(x)", start, end, 15*time.Second)
	if testutil.ToFloat64(ct.cache.hits)+testutil.ToFloat64(ct.cache.partial) == 0 {
		t.Fatal("the second query did not use the cache")
	}
	ct.late("late", start.UnixMilli()+10*60_000)
	ct.both("sum(x)", start, end, 15*time.Second)
	// A refused sample (out of order in an existing series) changes
	// nothing and is not counted.
	gen := ct.src.Generation()
	app := ct.raw.Appender(context.Background())
	if _, err := app.Append(0, labels.FromStrings("__name__", "x", "i", "0"), start.UnixMilli(), 5); err == nil {
		t.Fatal("an out-of-order sample was accepted")
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if ct.src.Generation() != gen {
		t.Error("a refused sample changed the generation")
	}
}

// TestResultsCacheBypass: what the cache must not hold.
func TestResultsCacheBypass(t *testing.T) {
	ct := newCacheTest(t, 32<<20)
	ct.advance(time.Hour, 0)
	start, end := *ct.clock-30*60_000, *ct.clock
	for _, tc := range []struct {
		qs        string
		cacheable bool
	}{
		{"rate(x[5m])", true},
		{"x @ start()", false},
		{"x @ 1700000000", false},
		{"max_over_time(x[10m:1m] @ end())", false},
		{"derived_baseline", false},
		{"sum({__name__=~\"derived.*|x\"})", false},
		{"x{i=\"0\"} + on() group_left derived_baseline", false},
		{"vector(1)", true},
		{"not a query(", false},
	} {
		_, ok := ct.cache.plan(nil, tc.qs, time.UnixMilli(start), time.UnixMilli(end), 15*time.Second)
		if ok != tc.cacheable {
			t.Errorf("%s: cacheable %v, want %v", tc.qs, ok, tc.cacheable)
		}
	}
	// Data before RawFrom is served by a rollup tier: not cached.
	ct.src.rawFrom = start
	if _, ok := ct.cache.plan(nil, "x", time.UnixMilli(start), time.UnixMilli(end), 15*time.Second); ok {
		t.Error("a query reading before RawFrom was cacheable")
	}
	if _, ok := ct.cache.plan(nil, "x", time.UnixMilli(start+5*60_000), time.UnixMilli(end), 15*time.Second); !ok {
		t.Error("a query reading from RawFrom on was not cacheable")
	}
	// The API's float seconds: the engine drops what is below a
	// millisecond, and so does the cache.
	if _, ok := ct.cache.plan(nil, "x", time.UnixMilli(start+5*60_000).Add(123456*time.Nanosecond), time.UnixMilli(end).Add(999*time.Microsecond), 15*time.Second); !ok {
		t.Error("a range of microseconds was not cacheable")
	}
	// A step of fractional milliseconds is the engine's business.
	if _, ok := ct.cache.plan(nil, "x", time.UnixMilli(start), time.UnixMilli(end), 1500*time.Microsecond); ok {
		t.Error("a step of 1.5 ms was cacheable")
	}
}

// TestResultsCacheBounded: the cache holds at most its size, dropping the
// least recently used answers, and never an answer with annotations.
func TestResultsCacheBounded(t *testing.T) {
	ct := newCacheTest(t, 64<<10)
	ct.advance(2*time.Hour, 0)
	end := *ct.clock
	for k := range 40 {
		ct.both("x + "+strconv.Itoa(k), time.UnixMilli(end-time.Hour.Milliseconds()), time.UnixMilli(end), 15*time.Second)
	}
	c := ct.cache
	c.mu.Lock()
	bytes, n := c.bytes, len(c.entries)
	c.mu.Unlock()
	if bytes > 64<<10 || n == 0 || n >= 40 {
		t.Errorf("the cache holds %d answers in %d bytes, want some but not all 40 within %d", n, bytes, 64<<10)
	}
	if got := testutil.ToFloat64(c.size); got != float64(bytes) {
		t.Errorf("strata_query_results_cache_bytes %v, want %d", got, bytes)
	}
	ct.both("rate(g[5m])", time.UnixMilli(end-time.Hour.Milliseconds()), time.UnixMilli(end), 15*time.Second)
	c.mu.Lock()
	_, annotated := c.entries[cacheKey{qs: "rate(g[5m])", step: 15_000, phase: ((end % 15_000) + 15_000) % 15_000, lookback: 5 * time.Minute}]
	c.mu.Unlock()
	if annotated {
		t.Error("an answer with an info annotation was cached")
	}
}

// TestResultsCacheConcurrent: refreshes of the same panels from several
// clients at once, while samples arrive and one comes late, all get the
// plain engine's answers (the race detector watches the cache's entries).
func TestResultsCacheConcurrent(t *testing.T) {
	ct := newCacheTest(t, 256<<10)
	ct.advance(time.Hour, 0)
	queries := []string{"sum(rate(x[5m]))", "max by (i) (g)", "x"}
	for round := range 5 {
		end := time.UnixMilli(*ct.clock)
		var wg sync.WaitGroup
		errs := make(chan string, 4*len(queries))
		for c := range 4 {
			wg.Go(func() {
				for _, qs := range queries {
					run := func(e promql.QueryEngine) string {
						qry, err := e.NewRangeQuery(context.Background(), ct.raw, nil, qs, end.Add(-time.Hour), end, 15*time.Second)
						if err != nil {
							return err.Error()
						}
						defer qry.Close()
						return qry.Exec(context.Background()).String()
					}
					if got, want := run(ct.cache), run(ct.plain); got != want {
						errs <- fmt.Sprintf("round %d, client %d, %s: cached answer differs", round, c, qs)
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Error(e)
		}
		// The clock and the samples move between rounds only: the plain
		// engine and the cache must see the same data.
		ct.advance(20*time.Second, 0)
		if round == 2 {
			ct.late("concurrent", *ct.clock-10*60_000)
		}
	}
	if testutil.ToFloat64(ct.cache.partial)+testutil.ToFloat64(ct.cache.hits) == 0 {
		t.Error("no answer came from the cache")
	}
}
