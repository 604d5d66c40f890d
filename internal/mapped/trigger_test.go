package mapped

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestTrigger: a release is due once the shared resident set has grown by
// Grow since the last release or Every has passed, not before; growth a
// release did not take back does not make every later poll due; after a
// release growth made due the polls come every BurstPoll for Burst.
func TestTrigger(t *testing.T) {
	const mib = 1 << 20
	t0 := time.Unix(1_800_000_000, 0)
	at := t0.Add
	tr := Trigger{Grow: 8 * mib, Every: 15 * time.Second, Poll: 100 * time.Millisecond, BurstPoll: 10 * time.Millisecond, Burst: 2 * time.Second}
	steps := []struct {
		at       time.Duration
		cur      int64
		due      bool
		released int64         // the resident set after the release, when due
		next     time.Duration // the poll interval after it
	}{
		{0, 70 * mib, false, 0, 100 * time.Millisecond},                      // the first poll sets the baseline
		{100 * time.Millisecond, 77 * mib, false, 0, 100 * time.Millisecond}, // 7 MiB: below Grow
		{200 * time.Millisecond, 78 * mib, true, 71 * mib, 10 * time.Millisecond},
		{210 * time.Millisecond, 78 * mib, false, 0, 10 * time.Millisecond}, // 7 MiB above the new baseline
		{400 * time.Millisecond, 200 * mib, true, 90 * mib, 10 * time.Millisecond},
		// 90 MiB stayed after it (not the chunk files' pages): the new
		// baseline, so the next polls are not due
		{500 * time.Millisecond, 91 * mib, false, 0, 10 * time.Millisecond},
		{2*time.Second + 400*time.Millisecond, 91 * mib, false, 0, 100 * time.Millisecond}, // the burst is over
		{10 * time.Second, 97 * mib, false, 0, 100 * time.Millisecond},
		{15*time.Second + 399*time.Millisecond, 97 * mib, false, 0, 100 * time.Millisecond},
		// Every since the last release: no burst
		{15*time.Second + 400*time.Millisecond, 97 * mib, true, 96 * mib, 100 * time.Millisecond},
		{16 * time.Second, 0, false, 0, 100 * time.Millisecond}, // unreadable: time only
		{30*time.Second + 400*time.Millisecond, 0, true, 0, 100 * time.Millisecond},
	}
	for _, s := range steps {
		if got := tr.Due(at(s.at), s.cur); got != s.due {
			t.Fatalf("at %v with %d MiB: due %v, want %v", s.at, s.cur/mib, got, s.due)
		}
		if s.due {
			tr.Released(at(s.at), s.released)
		}
		if got := tr.Interval(at(s.at)); got != s.next {
			t.Fatalf("at %v: next poll in %v, want %v", s.at, got, s.next)
		}
	}
}

// TestTriggerRun: Run calls release when a release is due, and returns
// once its context is done.
func TestTriggerRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := Trigger{Every: 5 * time.Millisecond, Poll: time.Millisecond}
	releases := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Run(ctx, func() {
			if releases++; releases == 3 {
				cancel()
			}
		})
	}()
	<-done
	if releases < 3 {
		t.Fatalf("%d releases before the context ended (%v)", releases, ctx.Err())
	}
}

func TestTriggerRunHolds(t *testing.T) {
	var held atomic.Bool
	held.Store(true)
	tr := Trigger{Every: 2 * time.Millisecond, Poll: time.Millisecond, Hold: func(time.Time) bool { return held.Load() }}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var releases atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Run(ctx, func() {
			releases.Add(1)
			cancel()
		})
	}()
	// Due every poll from the third millisecond on, held for 50 ms.
	time.Sleep(50 * time.Millisecond)
	if n := releases.Load(); n != 0 {
		t.Fatalf("%d releases while held", n)
	}
	held.Store(false)
	<-done
	if releases.Load() != 1 {
		t.Fatalf("no release once the hold ended (%v)", ctx.Err())
	}
}
