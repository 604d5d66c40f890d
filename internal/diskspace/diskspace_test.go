package diskspace

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

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
