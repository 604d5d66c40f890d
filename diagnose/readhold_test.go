package diagnose

import (
	"context"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"

	"github.com/strata-dev/strata/tiers"
)

// holdingMarks is a MarkSource that records the engine's read holds, as
// the rollup pipeline keeps them (downsample.Pipeline.HoldReads).
type holdingMarks struct {
	mark atomic.Int64
	ch   chan struct{}

	mu    sync.Mutex
	holds []int64
	held  bool
	// onHold, when set, runs (under mu) at each hold.
	onHold func(t int64)
}

func (h *holdingMarks) Mark() (int64, bool)           { return h.mark.Load(), true }
func (h *holdingMarks) MarkAdvanced() <-chan struct{} { return h.ch }

func (h *holdingMarks) HoldReads(t int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.holds, h.held = append(h.holds, t), true
	if h.onHold != nil {
		h.onHold(t)
	}
}

func (h *holdingMarks) ReleaseReads() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = false
}

// waitFor polls cond (under h.mu) for up to a minute.
func (h *holdingMarks) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		h.mu.Lock()
		ok := cond()
		h.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.mu.Lock()
			defer h.mu.Unlock()
			t.Fatalf("%s: not within a minute (held %v, last holds %v)", what, h.held, h.holds[max(0, len(h.holds)-3):])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newRunTestEngine is an engine with the default rules over an empty
// minute tier, warming up over 10 minutes, for Run's own tests.
func newRunTestEngine(t *testing.T) *Engine {
	t.Helper()
	minute, _ := openTiers(t, t.TempDir())
	cfg := DefaultConfig()
	cfg.Warmup = model.Duration(10 * time.Minute)
	e, err := New(cfg, Options{Minute: minute, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestRunHoldsReads: the live engine holds, before each minute, the
// start of that minute's snapshot (9 minutes back for the default rules:
// their longest range, 3 minutes, the lookback and a minute), then the
// next minute's once caught up, so that the pipeline writes an hour once
// the engine has read its last minutes. It releases the hold when the mark
// stands still for readHoldIdle (the fleet stopped: the hour must not wait
// for minutes that may never come), holds again when the mark moves, and
// releases it when it stops.
func TestRunHoldsReads(t *testing.T) {
	idle := readHoldIdle
	readHoldIdle = 300 * time.Millisecond
	t.Cleanup(func() { readHoldIdle = idle })
	e := newRunTestEngine(t)
	if back := time.Duration(e.need) * time.Millisecond; back != 9*time.Minute {
		t.Fatalf("the default rules' snapshots start %s back, want 9m", back)
	}
	end := simStart.Add(3 * time.Hour)
	src := &holdingMarks{ch: make(chan struct{})}
	src.mark.Store(end.UnixMilli())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx, src) }()
	last := func(want int64) func() bool {
		return func() bool { return len(src.holds) > 0 && src.holds[len(src.holds)-1] == want }
	}
	src.waitFor(t, "caught up, the next minute held", last(end.UnixMilli()-e.need))
	// The warm-up's first minute is the live minute (the mark's last
	// whole minute) less the warm-up; each minute is held before it is
	// evaluated, then the next one.
	first := end.Add(-time.Minute - 10*time.Minute).UnixMilli()
	var want []int64
	for m := first; m <= end.UnixMilli(); m += time.Minute.Milliseconds() {
		want = append(want, m-e.need)
	}
	src.mu.Lock()
	got := slices.Clone(src.holds)
	src.mu.Unlock()
	if !slices.Equal(got, want) {
		t.Errorf("holds %v, want %v", got, want)
	}

	src.waitFor(t, "released while the mark stood still", func() bool { return !src.held })
	src.mark.Store(end.Add(time.Minute).UnixMilli())
	src.ch <- struct{}{}
	src.waitFor(t, "held again when the mark moved", last(end.Add(time.Minute).UnixMilli()-e.need))

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	src.mu.Lock()
	defer src.mu.Unlock()
	if src.held {
		t.Error("the hold was not released when the engine stopped")
	}
}

// TestRunLagFollowsMark: strata_diagnose_lag_seconds is how far the first
// minute not evaluated trails the mark as it is after each minute, not as
// it was when a batch of minutes started: an engine slower than the mark
// showed no lag.
func TestRunLagFollowsMark(t *testing.T) {
	e := newRunTestEngine(t)
	end := simStart.Add(3 * time.Hour)
	src := &holdingMarks{ch: make(chan struct{})}
	src.mark.Store(end.UnixMilli())
	// While the batch's last minute is evaluated, the mark moves 7 minutes
	// on, without a signal: the engine waits, 7 minutes behind.
	moved := end.Add(7 * time.Minute).UnixMilli()
	src.onHold = func(t int64) {
		if t == end.Add(-time.Minute).UnixMilli()-e.need {
			src.mark.Store(moved)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error)
	go func() { done <- e.Run(ctx, src) }()
	src.waitFor(t, "the batch evaluated", func() bool {
		return len(src.holds) > 0 && src.holds[len(src.holds)-1] == end.UnixMilli()-e.need
	})
	deadline := time.Now().Add(time.Minute)
	for testutil.ToFloat64(e.m.lag) != 420 {
		if time.Now().After(deadline) {
			t.Fatalf("lag %v s, want 420 (7 minutes behind the mark)", testutil.ToFloat64(e.m.lag))
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestRunEvaluatesBesideReadBack: when the baselines' read-back outlasts
// readBackCatchUp, the engine warms up at the live edge and evaluates its
// minutes without baselines while the read-back goes on beside (the
// minutes in between are read into the baselines, not evaluated); the
// read-back then follows the live loop to its next minute, and the
// baselines are those of an engine that read back first and planned at
// that edge.
//
// It runs under -short, so that make test runs it under the race detector:
// the read-back and live evaluation run at once.
func TestRunEvaluatesBesideReadBack(t *testing.T) {
	catchUp := readBackCatchUp
	t.Cleanup(func() { readBackCatchUp = catchUp })
	minute, end := fourHours(t)
	planned, moved := end.Add(-2*time.Hour), end.Add(-10*time.Minute)
	readBackCatchUp = 0 // any read-back is long enough
	e, starts, beside := runUntilCaughtUp(t, minute, planned, moved, nil)
	if !beside {
		t.Fatal("no hold saw the read-back beside live evaluation")
	}
	// The warm-up's 10 minutes and the live minute, at the new edge.
	if n := testutil.ToFloat64(e.m.evaluations); n != 11 {
		t.Fatalf("evaluated %v minutes, want 11: the warm-up did not move to the live edge", n)
	}
	if n, want := testutil.ToFloat64(e.m.skipped), moved.Sub(planned).Minutes(); n != want {
		t.Fatalf("%v minutes counted as skipped, want %v", n, want)
	}
	// Each leg of the read-back goes on from the last: the history's
	// first chunk is read once.
	first := slices.Min(starts)
	if n := countOf(starts, first); n != 1 {
		t.Fatalf("the history's first chunk (%d) was read %d times: %v", first, n, starts)
	}
	// The minutes evaluated beside the read-back had no baselines.
	if n := e.scratch.namedSeries(BaselineMedianSeries); n != 0 {
		t.Fatalf("%d baseline series in the scratch store: minutes were evaluated with baselines", n)
	}
	readBackCatchUp = time.Hour // read back, then evaluate
	want, _, _ := runUntilCaughtUp(t, minute, moved, moved, nil)
	if n := testutil.ToFloat64(want.m.evaluations); n != 11 {
		t.Fatalf("an engine planned at the edge evaluated %v minutes, want 11", n)
	}
	if n := want.scratch.namedSeries(BaselineMedianSeries); n == 0 {
		t.Fatal("no baseline series in the scratch store of an engine that read back first")
	}
	if got, want := trackerState(t, e), trackerState(t, want); got != want {
		t.Fatalf("the baselines differ from an engine's planned at the live edge:\n%s", firstDiff(got, want))
	}
}

// TestRunBesideReadBackLegFails: a leg of the read-back that fails while
// the engine evaluates beside it (a minute partition it reads is
// unreadable) is counted as a failure, and the next leg, started at the
// next mark, goes on from the chunk that failed: the history's first chunk
// is read once, the failed one twice, and the baselines end where an
// engine's whose read-back never failed do.
func TestRunBesideReadBackLegFails(t *testing.T) {
	catchUp, windows := readBackCatchUp, chunkWindows
	t.Cleanup(func() { readBackCatchUp, chunkWindows = catchUp, windows })
	// Beside at once; 10-minute chunks, so that a failure leaves chunks
	// before and after it.
	readBackCatchUp, chunkWindows = 0, 1
	minute, end := fourHours(t)
	planned, moved := end.Add(-2*time.Hour), end.Add(-10*time.Minute)
	parts := minute.Partitions()
	if len(parts) < 3 {
		t.Fatalf("%d minute partitions, want at least 3", len(parts))
	}
	// The second hour's partition cannot be read until the first leg has
	// failed on it: its file is emptied in place (the tier may hold it
	// open), then written back. Live evaluation reads the last hour's only.
	bad := parts[1]
	saved, err := os.ReadFile(bad.Path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(bad.Path, 0); err != nil {
		t.Fatal(err)
	}
	mended := false
	e, starts, beside := runUntilCaughtUp(t, minute, planned, moved, func(e *Engine, src *holdingMarks) {
		deadline := time.Now().Add(time.Minute)
		for testutil.ToFloat64(e.m.failures) == 0 {
			if time.Now().After(deadline) {
				t.Errorf("the read-back did not fail on the unreadable partition within a minute (partitions %v)", parts)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := os.WriteFile(bad.Path, saved, 0o600); err != nil {
			t.Error(err)
			return
		}
		mended = true
		src.ch <- struct{}{} // the next mark: the engine tries again
	})
	if !mended {
		t.FailNow()
	}
	if !beside {
		t.Fatal("no hold saw the read-back beside live evaluation")
	}
	if n := testutil.ToFloat64(e.m.failures); n != 1 {
		t.Fatalf("%v failures counted, want 1", n)
	}
	failed := bad.Start - e.need // the chunk from the partition's first minute
	if n := countOf(starts, failed); n != 2 {
		t.Fatalf("the failed chunk (%s) was read %d times, want 2: %v", fmtMs(failed), n, starts)
	}
	if first := slices.Min(starts); countOf(starts, first) != 1 {
		t.Fatalf("the history's first chunk (%s) was read %d times, want once: the leg after the failure started over", fmtMs(first), countOf(starts, first))
	}
	readBackCatchUp = time.Hour
	want, _, _ := runUntilCaughtUp(t, minute, moved, moved, nil)
	if got, want := trackerState(t, e), trackerState(t, want); got != want {
		t.Fatalf("the baselines differ from an engine's whose read-back did not fail:\n%s", firstDiff(got, want))
	}
}

// runUntilCaughtUp runs an engine with the default rules over minute,
// warming up over 10 minutes, whose mark is at from when it plans its
// warm-up and at to from its first hold on (during its read-back), until
// it has evaluated minute to less one and read the baselines back to
// there. during, when set, runs while the engine does. It returns the
// engine, the starts of its snapshots and whether a hold saw the read-back
// beside.
func runUntilCaughtUp(t *testing.T, minute *tiers.Rollup, from, to time.Time, during func(*Engine, *holdingMarks)) (*Engine, []int64, bool) {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Warmup = model.Duration(10 * time.Minute)
	open := &failingOpen{}
	e, err := New(cfg, Options{Minute: minute, Open: open, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	src := &holdingMarks{ch: make(chan struct{})}
	src.mark.Store(from.UnixMilli())
	beside := false
	src.onHold = func(int64) {
		src.mark.Store(to.UnixMilli())
		beside = beside || testutil.ToFloat64(e.m.beside) == 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- e.Run(ctx, src) }()
	if during != nil {
		during(e, src)
	}
	if !t.Failed() {
		src.waitFor(t, "caught up", func() bool {
			return len(src.holds) > 0 && src.holds[len(src.holds)-1] == to.UnixMilli()-e.need && testutil.ToFloat64(e.m.beside) == 0
		})
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	open.mu.Lock()
	defer open.mu.Unlock()
	return e, open.starts, beside
}

// countOf is how many times v is in s.
func countOf(s []int64, v int64) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// namedSeries is how many series named name the store holds.
func (s *scratch) namedSeries(name string) int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byName[name])
}
