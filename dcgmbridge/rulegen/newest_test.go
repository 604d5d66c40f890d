package rulegen

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/tsdbutil"
)

// newestFleet appends, from start on for span, series of every kind an
// instant selector meets: 1 Hz, every 15 s and every 90 s (longer than
// NewestWindow: read over the whole lookback), one that stops 2 and one 6
// minutes before the end, one ended by a stale marker, one whose only
// sample in the newest minute is a stale marker followed by a value, native
// histograms at 1 Hz and every 90 s, and a 1 Hz series with a gap of 3
// minutes. Series of one kind differ by their "i" label.
func newestFleet(t testing.TB, e *evalEnv, start time.Time, span time.Duration, perKind int) {
	t.Helper()
	end := start.Add(span)
	app := e.raw.Appender(context.Background())
	stale := math.Float64frombits(value.StaleNaN)
	floats := func(kind string, step time.Duration, from, to time.Time, i int, skip func(time.Time) bool) {
		lset := labels.FromStrings("__name__", "m_"+kind, "kind", kind, "i", fmt.Sprint(i), "host", fmt.Sprint("h", i%3))
		for ts := from; ts.Before(to); ts = ts.Add(step) {
			if skip != nil && skip(ts) {
				continue
			}
			if _, err := app.Append(0, lset, ts.UnixMilli(), float64(ts.Unix()%97)+float64(i)/10); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range perKind {
		floats("hz", time.Second, start, end, i, nil)
		floats("s15", 15*time.Second, start.Add(time.Duration(i)*time.Second), end, i, nil)
		floats("s90", 90*time.Second, start.Add(time.Duration(i)*time.Second), end, i, nil)
		floats("stop2", time.Second, start, end.Add(-2*time.Minute), i, nil)
		floats("stop6", time.Second, start, end.Add(-6*time.Minute), i, nil)
		floats("gap", time.Second, start, end, i, func(ts time.Time) bool {
			return ts.After(end.Add(-4*time.Minute)) && ts.Before(end.Add(-time.Minute))
		})
		floats("stale", time.Second, start, end.Add(-3*time.Minute), i, nil)
		floats("restart", time.Second, start, end.Add(-90*time.Second), i, nil)
		for _, k := range []struct {
			kind string
			at   time.Time
			v    float64
		}{{"stale", end.Add(-3 * time.Minute), stale}, {"restart", end.Add(-40 * time.Second), stale}, {"restart", end.Add(-10 * time.Second), 42}} {
			lset := labels.FromStrings("__name__", "m_"+k.kind, "kind", k.kind, "i", fmt.Sprint(i), "host", fmt.Sprint("h", i%3))
			if _, err := app.Append(0, lset, k.at.UnixMilli(), k.v); err != nil {
				t.Fatal(err)
			}
		}
		for _, h := range []struct {
			kind string
			step time.Duration
		}{{"hist", time.Second}, {"hist90", 90 * time.Second}} {
			lset := labels.FromStrings("__name__", "m_"+h.kind, "kind", h.kind, "i", fmt.Sprint(i), "host", fmt.Sprint("h", i%3))
			n := 0
			for ts := start; ts.Before(end); ts = ts.Add(h.step) {
				if _, err := app.AppendHistogram(0, lset, ts.UnixMilli(), tsdbutil.GenerateTestHistogram(int64(n+i)), nil); err != nil {
					t.Fatal(err)
				}
				n++
			}
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestNewestFirstSameAnswer: instant queries over newestFirst answer what
// they answer over the storage itself, bit for bit, at evaluation times
// inside and around the fleet's samples, for every kind of series, and
// range selectors and range queries pass through.
func TestNewestFirstSameAnswer(t *testing.T) {
	e := newEvalEnv(t)
	span := 12 * time.Minute
	newestFleet(t, e, t0, span, 4)
	end := t0.Add(span)
	queries := []string{
		`{kind=~".+"}`,
		`m_hz`, `m_s15`, `m_s90`, `m_stop2`, `m_stop6`, `m_gap`, `m_stale`, `m_restart`, `m_hist`, `m_hist90`,
		`sum by (host) ({kind=~"hz|s90|gap"})`,
		`timestamp({kind=~".+"})`,
		`m_hz offset 2m`, `m_s90 offset 30s`,
		`rate(m_hz[2m])`, `max_over_time(m_s15[3m])`, `m_hz - on (i) m_s90`,
		`max_over_time(m_hz[3m:10s])`,
	}
	var times []time.Time
	for d := -time.Minute; d <= 7*time.Minute; d += 37 * time.Second {
		times = append(times, end.Add(-time.Minute).Add(d))
	}
	times = append(times, end, end.Add(-time.Millisecond), end.Add(5*time.Minute-time.Millisecond), end.Add(5*time.Minute))
	newest := newestFirst(e.raw, 5*time.Minute, NewestWindow)
	for _, qs := range queries {
		for _, ts := range times {
			want := instant(t, e.engine, e.raw, qs, ts)
			got := instant(t, e.engine, newest, qs, ts)
			if want != got {
				t.Errorf("%s at %s:\n got  %s\n want %s", qs, ts.Sub(end), got, want)
			}
		}
	}
	// A range query: every step reads through newestFirst's passthrough.
	for _, qs := range []string{`m_s90`, `sum by (host) (m_gap)`} {
		rq := func(q storage.Queryable) string {
			qry, err := e.engine.NewRangeQuery(context.Background(), q, nil, qs, end.Add(-10*time.Minute), end.Add(time.Minute), 15*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer qry.Close()
			res := qry.Exec(context.Background())
			if res.Err != nil {
				t.Fatal(res.Err)
			}
			return res.Value.String()
		}
		if want, got := rq(e.raw), rq(newest); want != got {
			t.Errorf("range %s:\n got  %s\n want %s", qs, got, want)
		}
	}
}

// instant evaluates qs at ts over q and prints the result with every
// value's bits.
func instant(t testing.TB, engine *promql.Engine, q storage.Queryable, qs string, ts time.Time) string {
	t.Helper()
	qry, err := engine.NewInstantQuery(context.Background(), q, nil, qs, ts)
	if err != nil {
		t.Fatal(err)
	}
	defer qry.Close()
	res := qry.Exec(context.Background())
	if res.Err != nil {
		t.Fatalf("%s: %v", qs, res.Err)
	}
	v, err := res.Vector()
	if err != nil {
		t.Fatal(err)
	}
	out := ""
	for _, s := range v {
		out += fmt.Sprintf("%s@%d=%x", s.Metric, s.T, math.Float64bits(s.F))
		if s.H != nil {
			out += " " + s.H.String()
		}
		out += "; "
	}
	return out
}

// BenchmarkNewestFirst is an instant `avg by (host)` over 2,000 series at
// 1 Hz, at 15 s and at 90 s (the newest minute holds no sample of most:
// both selects, then the whole lookback), 6 minutes of samples, read
// directly and through newestFirst. cpu-ns/op is the process's CPU time per
// query.
func BenchmarkNewestFirst(b *testing.B) {
	for _, kind := range []string{"hz", "s15", "s90"} {
		e := newEvalEnv(b)
		span := 6 * time.Minute
		app := e.raw.Appender(context.Background())
		step := map[string]time.Duration{"hz": time.Second, "s15": 15 * time.Second, "s90": 90 * time.Second}[kind]
		for i := range 2000 {
			lset := labels.FromStrings("__name__", "m", "i", fmt.Sprint(i), "host", fmt.Sprint("h", i%50))
			for ts := t0.Add(time.Duration(i%15) * time.Second); ts.Before(t0.Add(span)); ts = ts.Add(step) {
				if _, err := app.Append(0, lset, ts.UnixMilli(), float64(ts.Unix()%1000)); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := app.Commit(); err != nil {
			b.Fatal(err)
		}
		for _, v := range []struct {
			name string
			q    storage.Queryable
		}{{"whole", e.raw}, {"newest", newestFirst(e.raw, 5*time.Minute, NewestWindow)}} {
			b.Run(kind+"/"+v.name, func(b *testing.B) {
				b.ReportAllocs()
				cpu0 := cpuTime(b)
				for b.Loop() {
					instant(b, e.engine, v.q, `avg by (host) (m)`, t0.Add(span))
				}
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
