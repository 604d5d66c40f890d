package diagnose

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

// TestPacerWaits: an active pacer waits (1-duty)/duty times each step's
// work, at most its budget in a minute; an inactive one (warm-up, replay,
// catching up) and one of duty 1 never wait.
func TestPacerWaits(t *testing.T) {
	var waits []time.Duration
	fake := func(_ context.Context, d time.Duration) { waits = append(waits, d) }
	ctx := context.Background()
	work := func(p *pacer, d time.Duration) {
		p.last = time.Now().Add(-d) // the step took d
		p.step(ctx)
	}

	p := pacer{duty: 0.25, budget: time.Second, wait: fake}
	p.begin(true)
	work(&p, 100*time.Millisecond)
	if len(waits) != 1 || waits[0] < 300*time.Millisecond || waits[0] > 330*time.Millisecond {
		t.Fatalf("after 100ms of work waited %v, want about 300ms", waits)
	}
	work(&p, 300*time.Millisecond) // 900ms more would pass the budget
	if len(waits) != 2 || p.waited != time.Second {
		t.Fatalf("waits %v (%v in all), want the rest of the 1s budget", waits, p.waited)
	}
	work(&p, 200*time.Millisecond)
	if len(waits) != 2 {
		t.Fatalf("waited %v past the budget", waits[2:])
	}
	p.end()
	p.begin(true) // a new minute has a new budget
	work(&p, 10*time.Millisecond)
	if len(waits) != 3 {
		t.Fatalf("no wait in the next minute: %v", waits)
	}
	p.end()
	work(&p, 100*time.Millisecond)

	p.begin(false)
	work(&p, 100*time.Millisecond)
	off := pacer{duty: 1, budget: time.Second, wait: fake}
	off.begin(true)
	work(&off, 100*time.Millisecond)
	if len(waits) != 3 {
		t.Errorf("waited %v when not pacing", waits[3:])
	}
}

// TestEnginePacesNewestMinuteOnly: the live engine waits in the newest
// final minute, not in one it catches up (a later minute already final)
// nor in replay.
func TestEnginePacesNewestMinuteOnly(t *testing.T) {
	minute := simHistory(t, smallCluster(), simStart.Add(30*time.Minute))
	mo := &fixedMark{}
	e, err := New(DefaultConfig(), Options{Minute: minute, Open: mo, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	var waited time.Duration
	e.pace.wait = func(_ context.Context, d time.Duration) { waited += d }
	ctx := context.Background()
	tm := simStart.Add(20 * time.Minute)
	mo.mark = tm.Add(5 * time.Minute).UnixMilli() // catching up
	if err := e.EvalMinute(ctx, tm); err != nil {
		t.Fatal(err)
	}
	if waited != 0 {
		t.Fatalf("waited %v catching up", waited)
	}
	tm = tm.Add(time.Minute)
	mo.mark = tm.Add(time.Minute).UnixMilli() // the newest final minute
	if err := e.EvalMinute(ctx, tm); err != nil {
		t.Fatal(err)
	}
	if waited == 0 {
		t.Fatal("no wait in the newest minute")
	}
	if e.pace.active {
		t.Error("the pacer is still active after the minute")
	}
}

// fixedMark is an empty open-window source with a mark.
type fixedMark struct{ mark int64 }

func (f *fixedMark) VisitOpenWindows(int64, int64, tiers.OpenWindowSink, ...*labels.Matcher) {}
func (f *fixedMark) Mark() (int64, bool)                                                     { return f.mark, true }
