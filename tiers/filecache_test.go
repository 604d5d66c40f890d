package tiers

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
)

// cacheTestWindows is one partition's windows for one series, valued v.
// cacheT0 is the tests' first partition start (cacheT0 belongs to package tiers_test).
var cacheT0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC).UnixMilli()

func cacheTestWindows(start int64, v float64) []Window {
	ws := make([]Window, 60)
	for i := range ws {
		s := start + int64(i)*60_000
		ws[i] = Window{Start: s, FirstT: s, LastT: s + 30_000, Count: 2, Sum: 2 * v, Min: v, Max: v, First: v, Last: v}
	}
	return ws
}

func openCacheTestRollup(t *testing.T, openFiles int, now func() time.Time) *Rollup {
	t.Helper()
	cfg := DefaultMinuteConfig(t.TempDir())
	cfg.OpenFiles = openFiles
	return openRollupForTest(t, cfg, now)
}

// openRollupForTest opens a tier of cfg, logging nowhere, closed when the
// test ends.
func openRollupForTest(t testing.TB, cfg RollupConfig, now func() time.Time) *Rollup {
	t.Helper()
	r, err := OpenRollup(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry(), now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// lastValues selects everything and returns each window's Last, in order.
func lastValues(t *testing.T, r *Rollup) []float64 {
	t.Helper()
	got, err := r.Select(context.Background(), 0, 1<<62)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("got %d series, want 1", len(got))
	}
	var out []float64
	for _, w := range got[0].Windows {
		out = append(out, w.Last)
	}
	return out
}

// TestFileCacheSeesRewrites: a partition rewritten after a query cached it
// is read anew, and retention closes what it deletes.
func TestFileCacheSeesRewrites(t *testing.T) {
	now := time.UnixMilli(cacheT0 + 10*3_600_000)
	r := openCacheTestRollup(t, 0, func() time.Time { return now })
	lbls := labels.FromStrings("__name__", "m")
	for h := range int64(3) {
		if err := r.WritePartition(cacheT0+h*3_600_000, []SeriesWindows{{Labels: lbls, Windows: cacheTestWindows(cacheT0+h*3_600_000, float64(h))}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := lastValues(t, r); len(got) != 180 || got[0] != 0 || got[179] != 2 {
		t.Fatalf("first read: %d windows, first %v last %v", len(got), got[0], got[len(got)-1])
	}
	if n := r.files.len(); n != 3 {
		t.Fatalf("%d files cached after a query over 3 partitions, want 3", n)
	}
	if err := r.WritePartition(cacheT0+3_600_000, []SeriesWindows{{Labels: lbls, Windows: cacheTestWindows(cacheT0+3_600_000, 7)}}); err != nil {
		t.Fatal(err)
	}
	if got := lastValues(t, r); got[60] != 7 || got[119] != 7 {
		t.Fatalf("after the rewrite, windows 60 and 119 are %v and %v, want 7", got[60], got[119])
	}
	// Retention: only the first partition ends more than 8.5 h before now.
	r.cfg.Retention = 8*time.Hour + 30*time.Minute
	if n, err := r.ApplyRetention(); err != nil || n != 1 {
		t.Fatalf("retention deleted %d partitions (%v), want 1", n, err)
	}
	if n := r.files.len(); n != 2 {
		t.Fatalf("%d files cached after retention deleted one of 3, want 2", n)
	}
	if got := lastValues(t, r); len(got) != 120 || got[0] != 7 {
		t.Fatalf("after retention: %d windows, first %v", len(got), got[0])
	}
}

// TestFileCacheEvicts: a cache smaller than the partitions a query reads
// evicts the least recently used and still answers correctly.
func TestFileCacheEvicts(t *testing.T) {
	r := openCacheTestRollup(t, 2, nil)
	lbls := labels.FromStrings("__name__", "m")
	for h := range int64(5) {
		if err := r.WritePartition(cacheT0+h*3_600_000, []SeriesWindows{{Labels: lbls, Windows: cacheTestWindows(cacheT0+h*3_600_000, float64(h))}}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		got := lastValues(t, r)
		if len(got) != 300 {
			t.Fatalf("got %d windows, want 300", len(got))
		}
		for i, v := range got {
			if v != float64(i/60) {
				t.Fatalf("window %d is %v, want %v", i, v, i/60)
			}
		}
		if n := r.files.len(); n > 2 {
			t.Fatalf("%d files cached, limit 2", n)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.files.len(); n != 0 {
		t.Fatalf("%d files cached after Close", n)
	}
}

// TestFileCacheNone: a negative OpenFiles keeps no file open, and queries
// still read every partition.
func TestFileCacheNone(t *testing.T) {
	r := openCacheTestRollup(t, -1, nil)
	lbls := labels.FromStrings("__name__", "m")
	for h := range int64(2) {
		if err := r.WritePartition(cacheT0+h*3_600_000, []SeriesWindows{{Labels: lbls, Windows: cacheTestWindows(cacheT0+h*3_600_000, float64(h))}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := lastValues(t, r); len(got) != 120 || got[119] != 1 {
		t.Fatalf("%d windows, last %v; want 120 ending in 1", len(got), got[len(got)-1])
	}
	if n := r.files.len(); n != 0 {
		t.Fatalf("%d files kept open with OpenFiles -1", n)
	}
}

// TestFileCacheConcurrent: queries run while partitions are rewritten and
// the cache evicts; every query sees each partition whole (all 60 windows
// of one write). Run with -race.
func TestFileCacheConcurrent(t *testing.T) {
	r := openCacheTestRollup(t, 3, nil)
	lbls := labels.FromStrings("__name__", "m")
	write := func(h int64, v float64) {
		if err := r.WritePartition(cacheT0+h*3_600_000, []SeriesWindows{{Labels: lbls, Windows: cacheTestWindows(cacheT0+h*3_600_000, v)}}); err != nil {
			t.Error(err)
		}
	}
	for h := range int64(4) {
		write(h, 0)
	}
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for range 20 {
				got, err := r.Select(context.Background(), 0, 1<<62)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) != 1 || len(got[0].Windows) != 240 {
					t.Errorf("reader %d: got %d series", g, len(got))
					return
				}
				ws := got[0].Windows
				for p := 0; p < 240; p += 60 {
					for i := p; i < p+60; i++ {
						if ws[i].Last != ws[p].Last {
							t.Errorf("reader %d: partition %d mixes writes: %v and %v", g, p/60, ws[p].Last, ws[i].Last)
							return
						}
					}
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 20 {
			write(int64(i%4), float64(i+1))
		}
	})
	wg.Wait()
}

// TestFileCacheRewriteWhileOpening: a file opened before its partition was
// rewritten (the rewrite's drop found nothing cached yet) is not cached
// afterwards, which would serve the old data until evicted.
func TestFileCacheRewriteWhileOpening(t *testing.T) {
	r := openCacheTestRollup(t, 0, nil)
	lbls := labels.FromStrings("__name__", "m")
	if err := r.WritePartition(cacheT0, []SeriesWindows{{Labels: lbls, Windows: cacheTestWindows(cacheT0, 1)}}); err != nil {
		t.Fatal(err)
	}
	p := r.Partitions()[0]
	c := r.files
	of, drops := c.lookup(p.Start)
	if of != nil {
		t.Fatal("cached before any query")
	}
	old, err := openPartition(p.Path) // a reader opens the file...
	if err != nil {
		t.Fatal(err)
	}
	// ... the partition is rewritten meanwhile ...
	if err := r.WritePartition(cacheT0, []SeriesWindows{{Labels: lbls, Windows: cacheTestWindows(cacheT0, 2)}}); err != nil {
		t.Fatal(err)
	}
	// ... and the reader, done opening, offers the old file to the cache.
	held := c.insert(p.Start, old, drops)
	if err := c.release(held); err != nil {
		t.Fatal(err)
	}
	if n := c.len(); n != 0 {
		t.Fatalf("the old file was cached (%d files)", n)
	}
	if got := lastValues(t, r); got[0] != 2 {
		t.Fatalf("read %v after the rewrite, want 2", got[0])
	}
}

// TestFileCacheBoundsBytes: the cache keeps no more files than their
// footers' weights allow (OpenFilesBytes), evicting the least recently
// used, keeps none that is over the bound alone, and reads stay right.
func TestFileCacheBoundsBytes(t *testing.T) {
	cfg := DefaultMinuteConfig(t.TempDir())
	write := func(r *Rollup) {
		t.Helper()
		for h := range int64(5) {
			var series []SeriesWindows
			for i := range 20 {
				series = append(series, SeriesWindows{Labels: labels.FromStrings("__name__", "m", "i", strconv.Itoa(i)), Windows: cacheTestWindows(cacheT0+h*3_600_000, float64(h))})
			}
			if err := r.WritePartition(cacheT0+h*3_600_000, series); err != nil {
				t.Fatal(err)
			}
		}
	}
	open := func(maxBytes int64) *Rollup {
		t.Helper()
		c := cfg
		c.OpenFilesBytes = maxBytes
		return openRollupForTest(t, c, nil)
	}
	write(open(-1))
	// One file's weight, from a cache without a byte bound.
	r := open(-1)
	if _, err := r.Select(context.Background(), cacheT0, cacheT0+3_600_000-1); err != nil {
		t.Fatal(err)
	}
	one := r.files.weight()
	if r.files.len() != 1 || one <= 0 {
		t.Fatalf("%d files of %d bytes cached, want one of a positive weight", r.files.len(), one)
	}
	for _, c := range []struct {
		maxBytes int64
		files    int
	}{{2*one + one/2, 2}, {one - 1, 0}, {-1, 5}} {
		r := open(c.maxBytes)
		for range 2 {
			got, err := r.Select(context.Background(), 0, 1<<62)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 20 || len(got[0].Windows) != 300 || got[0].Windows[299].Last != 4 {
				t.Fatalf("bound %d: %d series, want 20 of 300 windows", c.maxBytes, len(got))
			}
		}
		if n, w := r.files.len(), r.files.weight(); n != c.files || w != int64(n)*one {
			t.Fatalf("bound %d: %d files of %d bytes cached, want %d of %d", c.maxBytes, n, w, c.files, int64(c.files)*one)
		}
	}
}
