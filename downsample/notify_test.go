package downsample

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
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
