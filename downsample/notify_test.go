package downsample

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// TestMarkNotification: the mark is published after each tick that
// advanced it, the signal never blocks a tick (one pending signal however
// many ticks), and OpenWindowsIn returns exactly the open windows that
// start in the range.
func TestMarkNotification(t *testing.T) {
	raw := openTestRaw(t)
	minute, hour := newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
	clock := &testClock{t: time.UnixMilli(testStart)}
	p, err := New(testConfig(), raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, ok := p.Mark(); ok {
		t.Fatal("a mark before the first tick")
	}
	w := genWorkload(testStart, testStart+2*HourRes, 15_000)
	w.via = p.Tee(raw)
	if err := run(t, p, raw, w, clock, testStart, testStart+40*MinuteRes, false); err != nil {
		t.Fatal(err)
	}
	mark, ok := p.Mark()
	if !ok || mark != p.mark {
		t.Fatalf("Mark() = %d, %v; pipeline mark %d", mark, ok, p.mark)
	}
	// Many ticks advanced the mark, nobody read the channel: one signal waits.
	select {
	case <-p.MarkAdvanced():
	default:
		t.Fatal("no signal after the mark advanced")
	}
	select {
	case <-p.MarkAdvanced():
		t.Fatal("more than one pending signal")
	default:
	}
	all := p.openWindows()
	lo, hi := mark-10*MinuteRes, mark-5*MinuteRes
	in := p.OpenWindowsIn(lo, hi, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	want := 0
	for _, s := range all {
		for _, win := range s.Windows {
			if win.Start >= lo && win.Start <= hi {
				want++
			}
		}
	}
	got := 0
	for _, s := range in {
		for _, win := range s.Windows {
			if win.Start < lo || win.Start > hi {
				t.Fatalf("window at %s outside [%s, %s]", fmtTime(win.Start), fmtTime(lo), fmtTime(hi))
			}
			got++
		}
	}
	if got != want || want == 0 {
		t.Errorf("OpenWindowsIn: %d windows, want %d", got, want)
	}
}

// strictSink is an OpenWindowSink that fails the test when a series comes
// twice or its windows are not ascending, and keeps a copy of each.
type strictSink struct {
	t    *testing.T
	from func(labels.Labels) int64
	got  map[string]tiers.SeriesWindows
}

func (s *strictSink) Want(lset labels.Labels) (int64, bool) { return s.from(lset), true }

func (s *strictSink) Series(lset labels.Labels, ws []tiers.Window) {
	k := lset.String()
	if _, ok := s.got[k]; ok {
		s.t.Errorf("series %s handed over twice", k)
	}
	for i := 1; i < len(ws); i++ {
		if ws[i].Start <= ws[i-1].Start {
			s.t.Errorf("series %s: window at %s after %s", k, fmtTime(ws[i].Start), fmtTime(ws[i-1].Start))
		}
	}
	s.got[k] = tiers.SeriesWindows{Labels: lset, Windows: slices.Clone(ws)}
}

// TestVisitOpenWindowsEachOnce: at every tick of an interleaved fleet
// (series at 1 s, spilled, and 5-15 s, read back from raw; late, out of
// order, recomputed, stale) over three hours, VisitOpenWindows hands over
// every open window starting in a random range, from each series' own
// earliest start, exactly once (the spill blocks are merged as they are
// read: a series must neither lose a window nor come twice, across an hour
// boundary too), and those windows are what a recompute from raw gives.
func TestVisitOpenWindowsEachOnce(t *testing.T) {
	start := testStart + 2*HourRes + 13*MinuteRes
	end := start + 3*HourRes
	if testing.Short() {
		end = start + 80*MinuteRes
	}
	w := genInterleaved(5, start, end)
	raw := openTestRaw(t)
	clock := &testClock{t: time.UnixMilli(start)}
	p, err := New(testConfig(), raw, newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tee := p.Tee(raw)
	rng := rand.New(rand.NewPCG(5, 9))
	last := w.deliveries[len(w.deliveries)-1].at
	checks, crossed := 0, 0
	for at := start - 1; at < last; {
		next := min(at+1000+rng.Int64N(40_000), last)
		w.deliver(t, tee, rng, at, next)
		at = next
		clock.t = time.UnixMilli(at)
		if err := p.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		mark, ok := p.Mark()
		hours := p.spillStarts()
		if !ok || len(hours) == 0 || rng.IntN(4) != 0 {
			continue
		}
		mint := mark - rng.Int64N(25)*MinuteRes - rng.Int64N(MinuteRes)
		maxt := mark - rng.Int64N(3)*MinuteRes
		back := map[string]int64{}
		sink := &strictSink{t: t, got: map[string]tiers.SeriesWindows{}, from: func(lset labels.Labels) int64 {
			k := lset.String()
			if _, ok := back[k]; !ok {
				back[k] = mark - rng.Int64N(30)*MinuteRes
			}
			return back[k]
		}}
		p.VisitOpenWindows(mint, maxt, sink)
		// With a matcher, the matching series' windows alone (the spill
		// set holds only those).
		odd := labels.MustNewMatcher(labels.MatchRegexp, "series", ".*[13579]")
		some := &strictSink{t: t, got: map[string]tiers.SeriesWindows{}, from: sink.from}
		p.VisitOpenWindows(mint, maxt, some, odd)
		matched := 0
		for k, s := range sink.got {
			if !odd.Matches(s.Labels.Get("series")) {
				continue
			}
			matched++
			got, found := some.got[k]
			if !found {
				t.Fatalf("mark %s: series %s not handed over with a matcher", fmtTime(mark), k)
			}
			checkSeries(t, "open windows of "+k+" with a matcher", []tiers.SeriesWindows{got}, []tiers.SeriesWindows{s})
		}
		if len(some.got) != matched {
			t.Fatalf("mark %s: %d series handed over with a matcher, %d match", fmtTime(mark), len(some.got), matched)
		}
		lo, hi := max(mint, hours[0]), min(maxt, mark-MinuteRes)
		if lo > hi {
			continue
		}
		want := 0
		for _, s := range fromRaw(t, raw, timegrid.Floor(lo, MinuteRes), timegrid.Floor(hi, MinuteRes)+MinuteRes) {
			from, ok := back[s.Labels.String()]
			var ws []tiers.Window
			for _, win := range s.Windows {
				if win.Start >= lo && win.Start <= hi && (!ok || win.Start >= from) {
					ws = append(ws, win)
				}
			}
			if len(ws) == 0 {
				continue
			}
			want += len(ws)
			got, found := sink.got[s.Labels.String()]
			if !found {
				t.Fatalf("mark %s, [%s, %s]: series %s not handed over (%d windows)", fmtTime(mark), fmtTime(mint), fmtTime(maxt), s.Labels, len(ws))
			}
			checkSeries(t, "open windows of "+s.Labels.String(), []tiers.SeriesWindows{got}, []tiers.SeriesWindows{{Labels: s.Labels, Windows: ws}})
			delete(sink.got, s.Labels.String())
		}
		for k := range sink.got {
			t.Errorf("mark %s: series %s handed over, none wanted", fmtTime(mark), k)
		}
		if want > 0 {
			checks++
		}
		if timegrid.Floor(lo, HourRes) != timegrid.Floor(hi, HourRes) {
			crossed++
		}
	}
	if checks < 20 || crossed == 0 {
		t.Fatalf("%d ranges checked, %d across an hour boundary", checks, crossed)
	}
}

// TestRawSpans: VisitOpenWindows reads consecutive open hours from raw in
// one walk (each series met once, handed over as read) and a gap between
// open hours (a failed flush, a backfilled hour) in a walk of its own.
func TestRawSpans(t *testing.T) {
	const h = HourRes
	h0 := timegrid.Floor(time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli(), h)
	set := &spillSet{teeFrom: math.MaxInt64} // before the tee: every hour is read from raw
	want := func(labels.Labels) (int64, bool) { return 0, true }
	for _, c := range []struct {
		name       string
		hours      []int64 // open hours, from h0
		mint, maxt int64   // from h0
		spans      []rawSpan
	}{
		{"one hour", []int64{0}, 10 * MinuteRes, 30 * MinuteRes, []rawSpan{{h0 + 10*MinuteRes, h0 + 31*MinuteRes}}},
		{"two consecutive", []int64{0, h}, 50 * MinuteRes, h + 5*MinuteRes, []rawSpan{{h0 + 50*MinuteRes, h0 + h + 6*MinuteRes}}},
		{"range within the later", []int64{0, h}, h + MinuteRes, h + 5*MinuteRes, []rawSpan{{h0 + h + MinuteRes, h0 + h + 6*MinuteRes}}},
		{"a gap", []int64{0, 2 * h}, 50 * MinuteRes, 2*h + 5*MinuteRes, []rawSpan{{h0 + 50*MinuteRes, h0 + h}, {h0 + 2*h, h0 + 2*h + 6*MinuteRes}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &Pipeline{spills: map[int64]*hourSpill{}}
			for _, o := range c.hours {
				p.spills[h0+o] = nil
			}
			if got := p.rawSpans(h0+c.mint, h0+c.maxt, set, want); !slices.Equal(got, c.spans) {
				t.Errorf("spans %v, want %v", got, c.spans)
			}
		})
	}
}
