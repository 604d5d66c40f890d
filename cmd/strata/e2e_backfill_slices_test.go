package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/backfill"
	"github.com/strata-dev/strata/tiers"
)

// TestBackfillRemoteReadSlices: three days of simulated history, served by
// Prometheus' own remote-read handler over a TSDB block, imported with
// `strata backfill --remote-read.url` in slices of 2 h, make exactly the
// minute and hour partitions and the raw samples that importing the same
// history from its OpenMetrics file (in slices of an hour) makes.
func TestBackfillRemoteReadSlices(t *testing.T) {
	if testing.Short() {
		t.Skip("backfill end-to-end: skipped under -short")
	}
	dir := t.TempDir()
	om, handler, first, last := historySource(t, dir, math.MinInt64)
	srv := httptest.NewServer(handler)
	defer srv.Close()

	rfc := func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }
	// An hour boundary between the two imports moves the raw tier's reach
	// (a day before now): then they are compared again.
	for attempt := 0; ; attempt++ {
		hour := time.Now().Truncate(time.Hour)
		fromFile, sliced := filepath.Join(dir, fmt.Sprint("file", attempt)), filepath.Join(dir, fmt.Sprint("sliced", attempt))
		runStrata(t, "backfill", "--storage.path="+fromFile, "--no-progress-bar", om)
		out := runStrata(t, "backfill", "--storage.path="+sliced, "--no-progress-bar", "--remote-read.url="+srv.URL,
			"--remote-read.from="+rfc(first), "--remote-read.to="+rfc(last), "--slice=2h")
		if !time.Now().Truncate(time.Hour).Equal(hour) && attempt == 0 {
			continue
		}
		// 72 h in slices of 2 h: 24 or 25 up to a day back, 12 or 13 in
		// the raw tier's reach.
		if !regexp.MustCompile(`requests=3[678]\b`).MatchString(out) {
			t.Errorf("backfill's output does not show 36 to 38 reads:\n%s", out)
		}
		sameStores(t, fromFile, sliced)
		return
	}
}

// sameStores checks that the store at got holds the minute and hour
// partitions of the store at want, and the same raw samples from a day
// back: raw holds a day back from each import's start, which differ by
// the first import's length, so they are compared from the later one's
// day.
func sameStores(t *testing.T, want, got string) {
	t.Helper()
	for _, tier := range []string{"minute", "hour"} {
		w, g := rollupDump(t, filepath.Join(want, tier)), rollupDump(t, filepath.Join(got, tier))
		if w == "" || g != w {
			t.Errorf("%s tier of %s:\n%.3000s\nof %s:\n%.3000s", tier, got, g, want, w)
		}
	}
	rawFrom := time.Now().Add(-24 * time.Hour).UnixMilli()
	if w, g := rawTierDump(t, filepath.Join(want, "raw"), rawFrom), rawTierDump(t, filepath.Join(got, "raw"), rawFrom); w == "" || g != w {
		t.Errorf("raw tier of %s:\n%.3000s\nof %s:\n%.3000s", got, g, want, w)
	}
}

// historySource writes three days of simulated history as OpenMetrics into
// dir (simulatedHistory) and serves the same samples from one TSDB block
// through Prometheus' own remote-read handler, those before notBefore (ms)
// left out. It returns the file (all of the history), the handler, and the
// first and last sample times served.
func historySource(t *testing.T, dir string, notBefore int64) (om string, h http.Handler, first, last int64) {
	t.Helper()
	om = simulatedHistory(t, dir)
	text, err := os.ReadFile(om)
	if err != nil {
		t.Fatal(err)
	}
	input, err := backfill.ParseText(text, "application/openmetrics-text")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	var series []storage.Series
	first, last = int64(math.MaxInt64), int64(math.MinInt64)
	for _, s := range input {
		var xs []chunks.Sample
		for _, x := range s.Samples {
			if x.T < notBefore {
				continue
			}
			xs = append(xs, listSample{t: x.T, f: x.V})
			first, last = min(first, x.T), max(last, x.T)
		}
		if len(xs) > 0 {
			series = append(series, storage.NewListSeries(s.Labels, xs))
		}
	}
	// One block: a head of 200 h takes 100 h in any order.
	if _, err := tsdb.CreateBlock(series, src, 200*time.Hour.Milliseconds(), promslog.NewNopLogger()); err != nil {
		t.Fatal(err)
	}
	db, err := tsdb.Open(src, promslog.NewNopLogger(), nil, tsdb.DefaultOptions(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return om, remote.NewReadHandler(promslog.NewNopLogger(), nil, db, func() config.Config { return config.DefaultConfig }, 0, 1, 1<<20), first, last
}

// listSample is a float sample for storage.NewListSeries.
type listSample struct {
	t int64
	f float64
}

func (s listSample) T() int64                      { return s.t }
func (s listSample) F() float64                    { return s.f }
func (s listSample) H() *histogram.Histogram       { return nil }
func (s listSample) FH() *histogram.FloatHistogram { return nil }
func (s listSample) ST() int64                     { return 0 }
func (s listSample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s listSample) Copy() chunks.Sample           { return s }

// rollupDump is every window of the rollup tier in dir, as text.
func rollupDump(t *testing.T, dir string) string {
	t.Helper()
	cfg := tiers.DefaultMinuteConfig(dir)
	if filepath.Base(dir) == "hour" {
		cfg = tiers.DefaultHourConfig(dir)
	}
	r, err := tiers.OpenRollup(cfg, promslog.NewNopLogger(), nil, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var b strings.Builder
	for _, p := range r.Partitions() {
		got, err := r.Select(context.Background(), p.Start, p.End-1)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range got {
			fmt.Fprintf(&b, "%d %s %+v\n", p.Start, s.Labels, s.Windows)
		}
	}
	return b.String()
}

// rawTierDump is every sample of the raw tier in dir from from on, as text.
func rawTierDump(t *testing.T, dir string, from int64) string {
	t.Helper()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(dir), promslog.NewNopLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	q, err := raw.Querier(from, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var b strings.Builder
	set := q.Select(context.Background(), true, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+"))
	for set.Next() {
		b.WriteString(set.At().Labels().String())
		it := set.At().Iterator(nil)
		for it.Next() != chunkenc.ValNone {
			ts, v := it.At()
			fmt.Fprintf(&b, " %d=%x", ts, math.Float64bits(v))
		}
		b.WriteString("\n")
	}
	if err := set.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestBackfillRemoteReadResumesRelativeRange: `strata backfill
// --remote-read.url` with a range relative to now (the default) fails when
// its source does part-way through the raw tier's reach; the same command
// again resumes that import over the range it began with (where it was
// refused as another input before: the range had moved with the clock),
// reads less than a fresh import, and leaves the tiers as a fresh import
// of the same source does.
func TestBackfillRemoteReadResumesRelativeRange(t *testing.T) {
	if testing.Short() {
		t.Skip("backfill end-to-end: skipped under -short")
	}
	dir := t.TempDir()
	// The range starts 30 h before each run; the source's history from
	// 29 h back only, so that each import's range holds all of it: with
	// the three days of 1-minute samples, a run's start 30 h back crossed
	// a sample the one before had (CI, stop 61), and their tiers differed
	// by it.
	_, handler, _, _ := historySource(t, dir, time.Now().Add(-29*time.Hour).UnixMilli())
	var requests, failAt atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := requests.Add(1); n == failAt.Load() {
			http.Error(w, "source down", http.StatusServiceUnavailable)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	defer srv.Close()
	args := func(path string) []string {
		return []string{"backfill", "--storage.path=" + path, "--no-progress-bar", "--remote-read.url=" + srv.URL, "--remote-read.from=30h", "--slice=2h"}
	}
	count := regexp.MustCompile(`requests=(\d+)`)
	reads := func(out string) int {
		m := count.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no request count in:\n%s", out)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	for attempt := 0; ; attempt++ {
		hour := time.Now().Truncate(time.Hour)
		fresh, resumed := filepath.Join(dir, fmt.Sprint("fresh", attempt)), filepath.Join(dir, fmt.Sprint("resumed", attempt))
		full := reads(runStrata(t, args(fresh)...))
		// 6 h before the raw tier's reach in slices of 2 h, then the
		// reach's first slices, then the source fails.
		requests.Store(0)
		failAt.Store(6)
		out, errOut, err := runStrataOut(t, args(resumed)...)
		if err == nil || !strings.Contains(out+errOut, "rerun the same command to resume") {
			t.Fatalf("the import with its source down: %v\n%s%s", err, out, errOut)
		}
		failAt.Store(0)
		out = runStrata(t, args(resumed)...)
		if !time.Now().Truncate(time.Hour).Equal(hour) && attempt == 0 {
			continue
		}
		if !strings.Contains(out, "resuming the unfinished import of this command") || !strings.Contains(out, "backfill done") {
			t.Fatalf("the same command again:\n%s", out)
		}
		if n := reads(out); n >= full {
			t.Errorf("the resumed import read %d times, a fresh one %d", n, full)
		}
		sameStores(t, fresh, resumed)
		return
	}
}
