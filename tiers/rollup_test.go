package tiers_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

var testT0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC).UnixMilli()

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openTestRollup(t testing.TB, cfg tiers.RollupConfig, now func() time.Time) *tiers.Rollup {
	t.Helper()
	r, err := tiers.OpenRollup(cfg, quietLogger(), prometheus.NewRegistry(), now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// sampleWindows builds n one-minute windows starting at start with values
// derived from seed, so that every field is distinct and checkable.
func sampleWindows(start int64, n int, seed float64) []tiers.Window {
	ws := make([]tiers.Window, n)
	for i := range ws {
		s := start + int64(i)*60_000
		f := seed + float64(i)
		ws[i] = tiers.Window{
			Start: s, FirstT: s + 1000, LastT: s + 59_000, Count: uint32(4 + i%3),
			Sum: f * 4, Min: f - 1, Max: f + 1, First: f - 0.5, Last: f + 0.5,
			Increase: f / 2, Resets: uint32(i % 2), Stale: i%7 == 6,
		}
	}
	return ws
}

func TestRollupWriteSelectRoundTrip(t *testing.T) {
	dir := t.TempDir()
	r := openTestRollup(t, tiers.DefaultMinuteConfig(dir), nil)
	series := []tiers.SeriesWindows{
		{Labels: labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "gpu", "0", "UUID", "GPU-a", "instance", "n1:9400", "job", "dcgm"), Windows: sampleWindows(testT0, 60, 10)},
		{Labels: labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "gpu", "1", "UUID", "GPU-b", "instance", "n1:9400", "job", "dcgm"), Windows: sampleWindows(testT0, 30, 20)},
		{Labels: labels.FromStrings("__name__", "vllm:request_success_total", "model_name", "llama", "extra", "x=\"y\""), Windows: sampleWindows(testT0+30*60_000, 30, 30)},
	}
	if err := r.WritePartition(testT0, series); err != nil {
		t.Fatal(err)
	}
	if !r.HasPartition(testT0) || r.HasPartition(testT0+3600_000) {
		t.Fatal("HasPartition wrong")
	}
	parts := r.Partitions()
	if len(parts) != 1 || parts[0].Rows != 120 || parts[0].Bytes <= 0 || parts[0].End != testT0+3600_000 {
		t.Fatalf("partitions: %+v", parts)
	}

	tests := []struct {
		name       string
		mint, maxt int64
		ms         []*labels.Matcher
		want       map[string][]tiers.Window
	}{
		{
			name: "all", mint: testT0, maxt: testT0 + 3600_000,
			ms:   []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")},
			want: map[string][]tiers.Window{series[0].Labels.String(): series[0].Windows, series[1].Labels.String(): series[1].Windows, series[2].Labels.String(): series[2].Windows},
		},
		{
			name: "metric equality and label", mint: testT0, maxt: testT0 + 3600_000,
			ms:   []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "DCGM_FI_DEV_GPU_UTIL"), labels.MustNewMatcher(labels.MatchEqual, "gpu", "1")},
			want: map[string][]tiers.Window{series[1].Labels.String(): series[1].Windows},
		},
		{
			name: "time range is inclusive of window starts", mint: testT0 + 10*60_000, maxt: testT0 + 12*60_000,
			ms:   []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "gpu", "0")},
			want: map[string][]tiers.Window{series[0].Labels.String(): series[0].Windows[10:13]},
		},
		{
			name: "absent metric", mint: testT0, maxt: testT0 + 3600_000,
			ms:   []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, "__name__", "nope")},
			want: map[string][]tiers.Window{},
		},
		{
			name: "outside range", mint: testT0 + 3600_000, maxt: testT0 + 7200_000,
			ms:   []*labels.Matcher{labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")},
			want: map[string][]tiers.Window{},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := r.Select(context.Background(), tc.mint, tc.maxt, tc.ms...)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d series, want %d", len(got), len(tc.want))
			}
			for i, sw := range got {
				if i > 0 && labels.Compare(got[i-1].Labels, sw.Labels) >= 0 {
					t.Fatalf("series not sorted: %s before %s", got[i-1].Labels, sw.Labels)
				}
				want, ok := tc.want[sw.Labels.String()]
				if !ok {
					t.Fatalf("unexpected series %s", sw.Labels)
				}
				if len(sw.Windows) != len(want) {
					t.Fatalf("%s: %d windows, want %d", sw.Labels, len(sw.Windows), len(want))
				}
				for j := range want {
					if sw.Windows[j] != want[j] {
						t.Fatalf("%s window %d: got %+v want %+v", sw.Labels, j, sw.Windows[j], want[j])
					}
				}
			}
		})
	}
}

func TestRollupRewriteReopenAndErrors(t *testing.T) {
	dir := t.TempDir()
	lbls := labels.FromStrings("__name__", "m", "job", "j")
	r := openTestRollup(t, tiers.DefaultMinuteConfig(dir), nil)
	if err := r.WritePartition(testT0, []tiers.SeriesWindows{{Labels: lbls, Windows: sampleWindows(testT0, 10, 1)}}); err != nil {
		t.Fatal(err)
	}
	// Rewriting replaces the file atomically.
	if err := r.WritePartition(testT0, []tiers.SeriesWindows{{Labels: lbls, Windows: sampleWindows(testT0, 5, 100)}}); err != nil {
		t.Fatal(err)
	}
	got, err := r.Select(context.Background(), testT0, testT0+3600_000)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Windows) != 5 || got[0].Windows[0].First != 99.5 {
		t.Fatalf("rewrite not visible: %+v", got)
	}

	t.Run("misaligned partition", func(t *testing.T) {
		err := r.WritePartition(testT0+60_000, nil)
		if !errors.Is(err, tiers.ErrMisaligned) {
			t.Fatalf("got %v, want ErrMisaligned", err)
		}
	})
	t.Run("window outside partition", func(t *testing.T) {
		err := r.WritePartition(testT0, []tiers.SeriesWindows{{Labels: lbls, Windows: sampleWindows(testT0+3600_000, 1, 0)}})
		if !errors.Is(err, tiers.ErrMisaligned) {
			t.Fatalf("got %v, want ErrMisaligned", err)
		}
	})
	t.Run("unsorted windows", func(t *testing.T) {
		ws := sampleWindows(testT0, 2, 0)
		ws[0], ws[1] = ws[1], ws[0]
		if err := r.WritePartition(testT0, []tiers.SeriesWindows{{Labels: lbls, Windows: ws}}); err == nil {
			t.Fatal("want error for unsorted windows")
		}
	})
	t.Run("duplicate series", func(t *testing.T) {
		ws := sampleWindows(testT0, 2, 0)
		if err := r.WritePartition(testT0, []tiers.SeriesWindows{{Labels: lbls, Windows: ws}, {Labels: lbls, Windows: ws}}); err == nil {
			t.Fatal("want error for duplicate series")
		}
	})
	t.Run("a write failing after the file is encoded", func(t *testing.T) {
		// A directory where the next partition's file goes: the rename
		// into place fails once the temporary file is complete.
		next := testT0 + hourMs
		blocker := filepath.Join(dir, "p-"+time.UnixMilli(next).UTC().Format("20060102T1504Z")+".parquet")
		if err := os.MkdirAll(filepath.Join(blocker, "inside"), 0o750); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = os.RemoveAll(blocker) }()
		if err := r.WritePartition(next, []tiers.SeriesWindows{{Labels: lbls, Windows: sampleWindows(next, 3, 1)}}); err == nil {
			t.Fatal("a write renamed over a directory succeeded")
		}
		if r.HasPartition(next) {
			t.Fatal("a failed write is listed as a partition")
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".tmp") {
				t.Fatalf("a failed write left %s", e.Name())
			}
		}
	})
	t.Run("failed writes leave no temp file and keep the old partition", func(t *testing.T) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || strings.HasPrefix(entries[0].Name(), ".tmp") {
			t.Fatalf("dir holds %v", entries)
		}
	})

	// A leftover temp file from a crash is removed on open; partitions are found again.
	if err := os.WriteFile(filepath.Join(dir, ".tmp-123.parquet"), []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := openTestRollup(t, tiers.DefaultMinuteConfig(dir), nil)
	if _, err := os.Stat(filepath.Join(dir, ".tmp-123.parquet")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file not removed: %v", err)
	}
	if p := r2.Partitions(); len(p) != 1 || p[0].Rows != 5 {
		t.Fatalf("reopened partitions: %+v", p)
	}
}

func TestRollupRetention(t *testing.T) {
	dir := t.TempDir()
	now := time.UnixMilli(testT0).Add(48 * time.Hour)
	cfg := tiers.DefaultHourConfig(dir)
	cfg.Retention = 30 * time.Hour
	r := openTestRollup(t, cfg, func() time.Time { return now })
	lbls := labels.FromStrings("__name__", "m")
	for d := range 3 {
		start := testT0 + int64(d)*86_400_000
		w := tiers.Window{Start: start, FirstT: start, LastT: start, Count: 1, Sum: 1, Min: 1, Max: 1, First: 1, Last: 1}
		if err := r.WritePartition(start, []tiers.SeriesWindows{{Labels: lbls, Windows: []tiers.Window{w}}}); err != nil {
			t.Fatal(err)
		}
	}
	// now = T0+48h, cutoff = T0+18h: day 0 ends at T0+24h > cutoff, kept.
	if n, err := r.ApplyRetention(); err != nil || n != 0 {
		t.Fatalf("early retention deleted %d, %v", n, err)
	}
	now = now.Add(7 * time.Hour) // cutoff T0+25h: day 0 [T0, T0+24h) is past it
	n, err := r.ApplyRetention()
	if err != nil || n != 1 {
		t.Fatalf("retention deleted %d, %v; want 1", n, err)
	}
	if r.HasPartition(testT0) || !r.HasPartition(testT0+86_400_000) {
		t.Fatal("wrong partition deleted")
	}
	got, err := r.Select(context.Background(), math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Windows) != 2 {
		t.Fatalf("after retention: %+v", got)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 {
		t.Fatalf("files left: %d", len(entries))
	}
}

func TestStitchedMaxWindows(t *testing.T) {
	r := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
	lbls := labels.FromStrings("__name__", "m")
	if err := r.WritePartition(testT0, []tiers.SeriesWindows{{Labels: lbls, Windows: sampleWindows(testT0, 60, 1)}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		max     int
		wantErr bool
	}{{"under the bound", 60, false}, {"over the bound", 59, true}} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := tiers.NewStitched(nil, r, nil, tiers.WithMaxWindows(tc.max)).Querier(testT0, testT0+hourMs)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = q.Close() }()
			set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
			for set.Next() {
			}
			if got := errors.Is(set.Err(), tiers.ErrTooManyWindows); got != tc.wantErr {
				t.Fatalf("err %v, want ErrTooManyWindows: %v", set.Err(), tc.wantErr)
			}
		})
	}
}

// TestRollupReadOnly: a tier opened read-only next to its writer (strata
// export while strata serve runs) leaves the writer's temporary files alone,
// reads its partitions and refuses to write; a missing directory is empty.
func TestRollupReadOnly(t *testing.T) {
	dir := t.TempDir()
	w := openTestRollup(t, tiers.DefaultMinuteConfig(dir), nil)
	lbls := labels.FromStrings("__name__", "x")
	if err := w.WritePartition(testT0, []tiers.SeriesWindows{{Labels: lbls, Windows: sampleWindows(testT0, 3, 1)}}); err != nil {
		t.Fatal(err)
	}
	inProgress := filepath.Join(dir, ".tmp-123.parquet")
	if err := os.WriteFile(inProgress, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := tiers.DefaultMinuteConfig(dir)
	cfg.ReadOnly = true
	r := openTestRollup(t, cfg, nil)
	if _, err := os.Stat(inProgress); err != nil {
		t.Fatalf("read-only open touched the writer's temporary file: %v", err)
	}
	got, err := r.Select(context.Background(), testT0, testT0+hourMs, labels.MustNewMatcher(labels.MatchEqual, "__name__", "x"))
	if err != nil || len(got) != 1 || len(got[0].Windows) != 3 {
		t.Fatalf("select: %v, %d series", err, len(got))
	}
	if err := r.WritePartition(testT0+hourMs, nil); !errors.Is(err, tiers.ErrReadOnly) {
		t.Fatalf("write: %v, want ErrReadOnly", err)
	}
	if _, err := r.ApplyRetention(); !errors.Is(err, tiers.ErrReadOnly) {
		t.Fatalf("retention: %v, want ErrReadOnly", err)
	}
	cfg.Dir = filepath.Join(dir, "missing")
	empty := openTestRollup(t, cfg, nil)
	if _, _, ok := empty.Bounds(); ok {
		t.Fatal("a missing directory is not an empty tier")
	}
	if _, err := os.Stat(cfg.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open created %s", cfg.Dir)
	}
}
