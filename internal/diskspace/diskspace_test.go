package diskspace

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestGuardRefusesBelowMinimum: writes are refused below the minimum on the
// fullest of the paths, and accepted again only from the minimum and a
// tenth; a path whose space cannot be read changes nothing.
func TestGuardRefusesBelowMinimum(t *testing.T) {
	free := map[string]uint64{"a": 5000, "b": 5000}
	var readErr error
	reg := prometheus.NewRegistry()
	g := newGuard(1000, []string{"a", "b"}, func(p string) (uint64, error) { return free[p], readErr }, slog.New(slog.DiscardHandler), reg)
	step := func(a, b uint64, wantLow bool) {
		t.Helper()
		free["a"], free["b"] = a, b
		g.Check()
		err := g.Err()
		if (err != nil) != wantLow {
			t.Fatalf("free %d and %d: Err() = %v, want refusing %v", a, b, err, wantLow)
		}
		if err != nil && (!errors.Is(err, ErrLow) || !strings.Contains(err.Error(), "storage.min_free_bytes")) {
			t.Fatalf("the refusal does not say why: %v", err)
		}
		want := 0.0
		if wantLow {
			want = 1
		}
		if got := testutil.ToFloat64(g.refusing); got != want {
			t.Fatalf("strata_storage_disk_space_low = %v, want %v", got, want)
		}
	}
	step(5000, 5000, false)
	step(5000, 999, true) // the fuller disk decides
	if got := testutil.ToFloat64(g.freeBytes); got != 999 {
		t.Fatalf("strata_storage_free_bytes = %v, want 999", got)
	}
	step(1000, 1050, true) // back at the minimum: not yet
	step(1100, 1100, false)
	step(1050, 1050, false) // under the resume mark but over the minimum
	step(10, 10, true)
	readErr = errors.New("statfs: input/output error")
	step(5000, 5000, true) // unreadable: no change
	readErr = nil
	step(5000, 5000, false)
}

// TestGuardReadsThisDisk: the platform's reading of a real directory, and
// no guard when the minimum is not positive.
func TestGuardReadsThisDisk(t *testing.T) {
	if New(0, []string{t.TempDir()}, slog.New(slog.DiscardHandler), prometheus.NewRegistry()) != nil {
		t.Fatal("a guard with no minimum")
	}
	var nilGuard *Guard
	if nilGuard.Err() != nil {
		t.Fatal("a nil guard refuses")
	}
	if !Supported {
		t.Skip("free space is not read on this platform")
	}
	n, err := freeBytes(t.TempDir())
	if err != nil || n == 0 {
		t.Fatalf("free space of a temporary directory: %d, %v", n, err)
	}
	if g := New(1, []string{t.TempDir()}, slog.New(slog.DiscardHandler), prometheus.NewRegistry()); g == nil || g.Err() != nil {
		t.Fatalf("a 1-byte minimum refuses on a disk with %d bytes free: %v", n, g.Err())
	}
	if g := New(1<<62, []string{t.TempDir()}, slog.New(slog.DiscardHandler), prometheus.NewRegistry()); g.Err() == nil {
		t.Fatal("a 4 EiB minimum accepts")
	}
}

// TestWatchCancelsWhenLow: Watch's context ends, with the guard's error as
// its cause, once a poll finds the disk low, at once when it already is,
// and only with its parent's for a nil guard or after its CancelFunc.
func TestWatchCancelsWhenLow(t *testing.T) {
	var free atomic.Uint64
	free.Store(5000)
	g := newGuard(1000, []string{"a"}, func(string) (uint64, error) { return free.Load(), nil }, slog.New(slog.DiscardHandler), prometheus.NewRegistry())

	ctx, stop := g.Watch(context.Background(), time.Millisecond)
	time.Sleep(20 * time.Millisecond)
	if ctx.Err() != nil {
		t.Fatalf("cancelled with %v free of a 1000-byte minimum: %v", free.Load(), context.Cause(ctx))
	}
	free.Store(999)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("not cancelled 10 s after the disk went low")
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrLow) || !strings.Contains(cause.Error(), "999 bytes free") {
		t.Fatalf("cause %v, want the guard's error", cause)
	}
	stop()

	ctx, stop = g.Watch(context.Background(), time.Hour) // still low: no poll needed
	defer stop()
	if !errors.Is(context.Cause(ctx), ErrLow) {
		t.Fatalf("a watch begun below the minimum: cause %v", context.Cause(ctx))
	}

	free.Store(5000)
	g.Check()
	ctx, stop = g.Watch(context.Background(), time.Millisecond)
	stop()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("after its CancelFunc: cause %v, want context.Canceled", context.Cause(ctx))
	}

	var nilGuard *Guard
	parent, cancelParent := context.WithCancel(context.Background())
	ctx, stop = nilGuard.Watch(parent, time.Millisecond)
	defer stop()
	if ctx.Err() != nil {
		t.Fatal("a nil guard's watch cancelled")
	}
	cancelParent()
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("a nil guard's watch after its parent ended: %v", context.Cause(ctx))
	}
}
