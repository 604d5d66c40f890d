package diagnose

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"unsafe"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestScratchSelectByName: a select with a regular expression on the name
// (the canonical rules' selectors of several spellings of one metric) finds
// exactly the series of the names it matches, as one without a name matcher
// finds every series its other matchers accept.
func TestScratchSelectByName(t *testing.T) {
	sc := newScratch()
	app := sc.AppenderV2(context.Background())
	for _, l := range []labels.Labels{
		labels.FromStrings(model.MetricNameLabel, "a", "pod", "p"),
		labels.FromStrings(model.MetricNameLabel, "ab", "pod", "q"),
		labels.FromStrings(model.MetricNameLabel, "b", "pod", "p"),
	} {
		if _, err := app.Append(0, l, 0, 60_000, 1, nil, nil, storage.AppendV2Options{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	q, err := sc.Querier(0, 120_000)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ms   []*labels.Matcher
		want []string
	}{
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "a|b")}, []string{`{__name__="a", pod="p"}`, `{__name__="b", pod="p"}`}},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "a.*"), labels.MustNewMatcher(labels.MatchEqual, "pod", "q")}, []string{`{__name__="ab", pod="q"}`}},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchNotEqual, model.MetricNameLabel, "a")}, []string{`{__name__="ab", pod="q"}`, `{__name__="b", pod="p"}`}},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "pod", "p")}, []string{`{__name__="a", pod="p"}`, `{__name__="b", pod="p"}`}},
		{[]*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, "c|d")}, nil},
	} {
		var got []string
		ss := q.Select(context.Background(), true, nil, c.ms...)
		for ss.Next() {
			got = append(got, ss.At().Labels().String())
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%v: %v, want %v", c.ms, got, c.want)
		}
	}
}

// TestScratchHashCollisions: series whose labels share a hash are each
// found, and truncation forgets exactly the emptied ones, whichever of them
// held the hash's first place.
func TestScratchHashCollisions(t *testing.T) {
	sc := newScratch()
	const h = 42
	var ls []labels.Labels
	for i, pod := range []string{"a", "b", "c"} {
		l := labels.FromStrings(model.MetricNameLabel, "m", "pod", pod)
		ls = append(ls, l)
		sc.add(sc.lookupHash(h, l), int64(i+1)*60_000, float64(i))
	}
	for i, l := range ls {
		if e := sc.find(h, l); e == nil || e.vs[0] != float64(i) {
			t.Fatalf("series %s not found: %v", l, e)
		}
		if e := sc.lookupHash(h, l); e.vs[0] != float64(i) {
			t.Fatalf("lookup of %s made a new series", l)
		}
	}
	// Forget "a" (the hash's first) and keep "b" and "c".
	sc.truncate(2 * 60_000)
	if sc.find(h, ls[0]) != nil {
		t.Fatal("truncated series still found")
	}
	for _, l := range ls[1:] {
		if sc.find(h, l) == nil {
			t.Fatalf("series %s lost by the truncation", l)
		}
	}
	if n, _ := sc.samples(); n != 2 {
		t.Fatalf("%d series after truncation, want 2", n)
	}
	sc.truncate(4 * 60_000)
	if len(sc.series) != 0 || len(sc.collided) != 0 || len(sc.byName) != 0 {
		t.Fatalf("maps %d/%d/%d after dropping everything", len(sc.series), len(sc.collided), len(sc.byName))
	}
}

// scratchSamples reads every series of ss as label string -> "t=v" pairs.
func scratchSamples(t *testing.T, ss storage.SeriesSet) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for ss.Next() {
		s := ss.At()
		it := s.Iterator(nil)
		var pts []string
		for it.Next() != chunkenc.ValNone {
			ts, v := it.At()
			pts = append(pts, strconv.FormatInt(ts, 10)+"="+strconv.FormatFloat(v, 'g', -1, 64))
		}
		got[s.Labels().String()] = pts
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestScratchSelectIsACopy: what a select returned keeps the samples it had
// in range while the store changes under it (appends, a replaced sample, a
// sample inserted in the middle, truncation), each series exactly its own
// although the selected samples share their arrays, and Seek finds them.
func TestScratchSelectIsACopy(t *testing.T) {
	sc := newScratch()
	a, b, c := labels.FromStrings(model.MetricNameLabel, "m", "pod", "a"),
		labels.FromStrings(model.MetricNameLabel, "m", "pod", "b"),
		labels.FromStrings(model.MetricNameLabel, "m", "pod", "c")
	appendAll := func(samples ...pending) {
		t.Helper()
		app := sc.AppenderV2(context.Background())
		for _, p := range samples {
			if _, err := app.Append(0, p.lbls, 0, p.t, p.v, nil, nil, storage.AppendV2Options{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	appendAll(pending{b, 60_000, 1}, pending{b, 180_000, 3}, pending{b, 240_000, 4},
		pending{a, 0, 10}, pending{a, 120_000, 12}, pending{a, 180_000, 13}, pending{a, 300_000, 15},
		pending{c, 600_000, 99}) // c: nothing in range
	q, err := sc.Querier(60_000, 240_000)
	if err != nil {
		t.Fatal(err)
	}
	ss := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "m"))
	want := map[string][]string{
		a.String(): {"120000=12", "180000=13"},
		b.String(): {"60000=1", "180000=3", "240000=4"},
	}
	// The store changes before the set is read.
	appendAll(pending{a, 180_000, -13}, pending{b, 120_000, -2}, pending{b, 250_000, 5}, pending{a, 310_000, 16})
	sc.truncate(170_000)
	if got := scratchSamples(t, ss); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("select read %v, want %v", got, want)
	}
	// A fresh select sees the changes.
	ss = q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "m"))
	want = map[string][]string{
		a.String(): {"180000=-13"},
		b.String(): {"180000=3", "240000=4"},
	}
	if got := scratchSamples(t, ss); !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("select after the changes read %v, want %v", got, want)
	}
	// Seek within one series stops at its own end, with the iterator
	// reused from one series to the next as PromQL does.
	ss = q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "m"))
	var it chunkenc.Iterator
	for ss.Next() {
		it = ss.At().Iterator(it)
		if vt := it.Seek(245_000); vt != chunkenc.ValNone {
			ts, v := it.At()
			t.Fatalf("%s: Seek past its last sample found %d=%g", ss.At().Labels(), ts, v)
		}
	}
}

// BenchmarkScratchSelect is an alerting rule's select in the engine's
// scratch store of every tracked signal series' z-score (13,600 at 50,000
// active series, a sample a minute, 21 minutes kept), over its last 3
// minutes, each series read with the iterator passed on as PromQL does:
// what one select allocates. metric=one selects the z-scores of one of the
// ten signals (`strata:anomaly:zscore{metric="..."}`, as most of the rules
// and evidence queries do), metric=all every one.
func BenchmarkScratchSelect(b *testing.B) {
	const series, minutes, signals = 13600, 21, 10
	sc := newScratch()
	app := sc.AppenderV2(context.Background())
	for i := range series {
		l := labels.FromStrings(model.MetricNameLabel, "strata:anomaly:zscore", "metric", "strata:signal_"+strconv.Itoa(i%signals), "pod", "pod-"+strconv.Itoa(i))
		for m := range minutes {
			if _, err := app.Append(0, l, 0, int64(m)*60_000, float64(i+m), nil, nil, storage.AppendV2Options{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
	maxt := int64(minutes-1) * 60_000
	q, err := sc.Querier(maxt-3*60_000+1, maxt)
	if err != nil {
		b.Fatal(err)
	}
	name := labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "strata:anomaly:zscore")
	for _, bc := range []struct {
		name string
		ms   []*labels.Matcher
		want int
	}{
		{"all", []*labels.Matcher{name}, series},
		{"one", []*labels.Matcher{name, labels.MustNewMatcher(labels.MatchEqual, "metric", "strata:signal_3")}, series / signals},
	} {
		b.Run("metric="+bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var it chunkenc.Iterator
			for b.Loop() {
				n := 0
				for ss := q.Select(context.Background(), false, nil, bc.ms...); ss.Next(); n++ {
					it = ss.At().Iterator(it)
					for it.Next() != chunkenc.ValNone {
					}
				}
				if n != bc.want {
					b.Fatalf("%d series, want %d", n, bc.want)
				}
			}
		})
	}
}

// TestScratchRegularTimestamps: a series keeps no timestamps while its
// samples are a minute apart, and reads the same as one that keeps them
// whatever is appended (the next minute, a replaced sample, a gap, a sample
// off the minute, one inserted before the last, timestamps at the ends of
// int64) and truncated: every sample, select, valuesAt and valueOf against
// a plain map of the same samples, for random sequences.
func TestScratchRegularTimestamps(t *testing.T) {
	const step = scratchStep
	rng := rand.New(rand.NewPCG(1, 2))
	l := labels.FromStrings(model.MetricNameLabel, "m", "pod", "a")
	for round := range 300 {
		sc := newScratch()
		ref := map[int64]float64{}
		base := int64(rng.IntN(1000)) * step
		switch round % 10 {
		case 8:
			base = math.MaxInt64 - 5*step - int64(rng.IntN(2))
		case 9:
			base = math.MinInt64 + int64(rng.IntN(2))
		}
		last := base
		h := &scratchHandle{lbls: l}
		for op := range 60 {
			var ts int64
			switch r := rng.IntN(20); {
			case op == 0:
				ts = base
			case r < 12: // the next minute
				ts = last + step
				if last > math.MaxInt64-step {
					ts = last
				}
			case r < 14: // a replaced sample
				ts = last - int64(rng.IntN(3))*step
			case r < 16: // a gap
				ts = last + int64(2+rng.IntN(3))*step
				if last > math.MaxInt64-5*step {
					ts = last
				}
			case r < 18: // off the minute, possibly before the last
				ts = last + int64(rng.IntN(int(2*step))) - step
			default: // truncation
				mint := last - int64(rng.IntN(6))*step + int64(rng.IntN(2))
				sc.truncate(mint)
				for k := range ref {
					if k < mint {
						delete(ref, k)
					}
				}
				continue
			}
			v := float64(rng.IntN(100))
			if op%2 == 0 {
				sc.appendDirect(ts, []*scratchHandle{h}, []float64{v})
			} else {
				app := sc.AppenderV2(context.Background())
				if _, err := app.Append(0, l, 0, ts, v, nil, nil, storage.AppendV2Options{}); err != nil {
					t.Fatal(err)
				}
				if err := app.Commit(); err != nil {
					t.Fatal(err)
				}
			}
			ref[ts] = v
			last = max(last, ts)
			// Every sample, in order.
			keys := slices.Sorted(maps.Keys(ref))
			e := sc.find(l.Hash(), l)
			if e == nil {
				t.Fatalf("round %d op %d: series lost", round, op)
			}
			if len(e.vs) != len(keys) {
				t.Fatalf("round %d op %d: %d samples, want %d", round, op, len(e.vs), len(keys))
			}
			regular := true
			for i, k := range keys {
				if e.at(sc.times(e), i) != k || e.vs[i] != ref[k] {
					t.Fatalf("round %d op %d: sample %d is %d=%g, want %d=%g", round, op, i, e.at(sc.times(e), i), e.vs[i], k, ref[k])
				}
				regular = regular && (i == 0 || k-keys[i-1] == step)
			}
			if _, kept := sc.irr[e]; kept != (e.t0 == irregular) || len(sc.irr) != btoi(kept) {
				t.Fatalf("round %d op %d: t0 %d with %d series' timestamps kept", round, op, e.t0, len(sc.irr))
			}
			if !regular && e.t0 != irregular {
				t.Fatalf("round %d op %d: irregular samples %v kept without timestamps", round, op, keys)
			}
			// Lookups at and around every sample.
			for _, k := range keys {
				for _, q := range []int64{k, k - 1, k + 1, k + step} {
					want, ok := ref[q]
					got, found := sc.valueOf(h, q)
					if ok != found || got != want {
						t.Fatalf("round %d op %d: valueOf(%d) = %g %v, want %g %v", round, op, q, got, found, want, ok)
					}
					vals := sc.valuesAt("m", q)
					if ok != (len(vals) == 1) || (ok && vals[0].v != want) {
						t.Fatalf("round %d op %d: valuesAt(%d) = %v, want %g %v", round, op, q, vals, want, ok)
					}
				}
			}
			// A select of a random range.
			lo := keys[0] - step + int64(rng.IntN(int(3*step)))
			hi := lo + int64(rng.IntN(int(4*step)))
			if rng.IntN(4) == 0 {
				lo, hi = math.MinInt64, math.MaxInt64
			}
			q, _ := sc.Querier(lo, hi)
			var want []string
			for _, k := range keys {
				if k >= lo && k <= hi {
					want = append(want, strconv.FormatInt(k, 10)+"="+strconv.FormatFloat(ref[k], 'g', -1, 64))
				}
			}
			got := scratchSamples(t, q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "m")))[l.String()]
			if !slices.Equal(got, want) {
				t.Fatalf("round %d op %d: select [%d, %d] read %v, want %v", round, op, lo, hi, got, want)
			}
		}
	}
}

// TestScratchSeriesSize: a scratch series fits the 48-byte size class
// (the store holds about 75,000 at 50,000 active series).
func TestScratchSeriesSize(t *testing.T) {
	if n := unsafe.Sizeof(scratchSeries{}); n > 48 {
		t.Errorf("scratchSeries is %d bytes, over the 48-byte size class", n)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestScratchSettles: truncation that leaves an irregular series' samples a
// minute apart drops its timestamps.
func TestScratchSettles(t *testing.T) {
	sc := newScratch()
	l := labels.FromStrings(model.MetricNameLabel, "m")
	e := sc.lookup(l)
	for _, ts := range []int64{0, 3 * scratchStep, 4 * scratchStep, 5 * scratchStep} {
		sc.add(e, ts, 1)
	}
	if e.t0 != irregular || len(sc.irr) != 1 {
		t.Fatal("a series with a gap keeps no timestamps")
	}
	sc.truncate(scratchStep)
	if len(sc.irr) != 0 || e.t0 != 3*scratchStep || len(e.vs) != 3 {
		t.Fatalf("after the gap was truncated: irr %v, t0 %d, %d samples", sc.irr, e.t0, len(e.vs))
	}
}

// TestScratchTrimsToItsKeep: a series truncated to its keep every minute,
// as the engine does, ends with an array of its keep plus a sample, not
// the power of two append grew it to, and keeps it.
func TestScratchTrimsToItsKeep(t *testing.T) {
	sc := newScratch()
	l := labels.FromStrings(model.MetricNameLabel, "strata:anomaly:zscore:avg3m")
	h := &scratchHandle{lbls: l}
	const keep = 21 * scratchStep
	for m := range int64(60) {
		tm := m * scratchStep
		sc.appendDirect(tm, []*scratchHandle{h}, []float64{float64(m)})
		sc.truncate(tm - keep)
		e := sc.find(l.Hash(), l)
		if m < 30 {
			continue
		}
		if len(e.vs) != 22 || cap(e.vs) != 23 {
			t.Fatalf("minute %d: %d samples in an array of %d, want 22 in 23", m, len(e.vs), cap(e.vs))
		}
		if e.vs[0] != float64(m-21) || e.at(nil, 0) != tm-keep {
			t.Fatalf("minute %d: first sample %d=%g", m, e.at(nil, 0), e.vs[0])
		}
	}
}
