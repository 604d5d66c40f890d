package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/strata-dev/strata/tiers"
)

// runStrata runs a strata subcommand to completion and returns its output.
func runStrata(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, strataBinary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("strata %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// simulatedHistory writes three days of one simulated GPU's history as
// OpenMetrics into dir with `strata simulate --openmetrics` and returns the
// file's path.
func simulatedHistory(t *testing.T, dir string) string {
	t.Helper()
	om := filepath.Join(dir, "history.om")
	runStrata(t, "simulate", "--nodes=1", "--gpus-per-node=1", "--backfill=72h", "--push.interval=60s", "--openmetrics="+om)
	if st, err := os.Stat(om); err != nil || st.Size() == 0 {
		t.Fatalf("no OpenMetrics written: %v", err)
	}
	return om
}

// TestBackfillEndToEnd writes three days of simulated history as OpenMetrics
// with `strata simulate --openmetrics`, imports it with `strata backfill`
// (raw keeps what it can, older data goes straight into minute and hour
// rollups), starts strata serve on the result and queries across the tiers.
// A second backfill of the same file resumes and writes nothing twice.
func TestBackfillEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("backfill end-to-end: skipped under -short")
	}
	dir := t.TempDir()
	om := simulatedHistory(t, dir)
	data := filepath.Join(dir, "data")
	// The diagnosis engine's checkpoints after the history's start never
	// saw it: the backfill removes them, and keeps those before.
	ckpt := func(prefix string, ago time.Duration, suffix string) string {
		return filepath.Join(baselineDir(data), prefix+time.Now().Add(-ago).UTC().Format("2006-01-02T15")+suffix)
	}
	stale, kept := []string{ckpt("state-", 24*time.Hour, ".ckpt"), ckpt("hour-", 24*time.Hour, ".sum")}, []string{ckpt("state-", 80*time.Hour, ".ckpt"), ckpt("hour-", 80*time.Hour, ".sum")}
	if err := os.MkdirAll(baselineDir(data), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range append(stale, kept...) {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := runStrata(t, "backfill", "--storage.path="+data, "--no-progress-bar", om)
	if !strings.Contains(out, "backfill done") {
		t.Fatalf("backfill output lacks its summary:\n%s", out)
	}
	for _, f := range stale {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("backfill kept %s, after the history's start", filepath.Base(f))
		}
	}
	for _, f := range kept {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("backfill removed %s, before the history's start: %v", filepath.Base(f), err)
		}
	}
	minuteFiles, _ := filepath.Glob(filepath.Join(data, "minute", "*.parquet"))
	hourFiles, _ := filepath.Glob(filepath.Join(data, "hour", "*.parquet"))
	if len(minuteFiles) < 24 || len(hourFiles) < 1 {
		t.Fatalf("backfill wrote %d minute and %d hour partitions, want at least 24 and 1", len(minuteFiles), len(hourFiles))
	}
	// Resuming the same input writes no partition twice.
	out = runStrata(t, "backfill", "--storage.path="+data, "--no-progress-bar", om)
	if !strings.Contains(out, "partitions_written=0") {
		t.Errorf("second backfill of the same input wrote partitions:\n%s", out)
	}

	p := startStrata(t, data)
	client := newAPIClient(t, p)
	ctx := context.Background()
	end := time.Now()
	// A range over the whole history: minute tier for the older part, raw
	// for the last day. The step is under 5 minutes, so that raw serves all
	// it holds: at a coarser one (Thanos' auto-downsampling, step/5 of a
	// minute or more) the minute tier serves up to its newest partition,
	// and the server's pipeline writes the raw day's hours into it as the
	// test runs, so raw's part depended on how fast it ran (make test under
	// load, stop 62: minute alone).
	v, _, infos, err := client.QueryRange(ctx, `sum(vllm:num_requests_running)`, promv1.Range{Start: end.Add(-70 * time.Hour), End: end.Add(-time.Hour), Step: 4 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m, ok := v.(model.Matrix)
	if !ok || len(m) != 1 {
		t.Fatalf("range over the backfilled history = %v", v)
	}
	if got, want := len(m[0].Values), 1036; got < want-2 {
		t.Errorf("%d points over 69 h at 4 m steps, want about %d (a gap between tiers?)", got, want)
	}
	served := strings.Join(infos, " ")
	for _, tier := range []string{"raw", "minute"} {
		if !strings.Contains(served, tier) {
			t.Errorf("infos %q do not say tier %s served the 4m-step query", served, tier)
		}
	}
	// A coarse step may be served from the hour tier (step/5 >= 1h).
	v, _, infos, err = client.QueryRange(ctx, `sum(vllm:num_requests_running)`, promv1.Range{Start: end.Add(-70 * time.Hour), End: end.Add(-time.Hour), Step: 6 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := v.(model.Matrix); !ok || len(m) != 1 || len(m[0].Values) < 11 {
		t.Fatalf("6h-step range over the backfilled history = %v", v)
	}
	if served := strings.Join(infos, " "); !strings.Contains(served, "hour") {
		t.Errorf("infos %q: the 6h-step query was not served by the hour tier", served)
	}
}

// TestBackfillFromRemoteRead copies history from one running Strata to
// another through `strata backfill --remote-read.url` (Prometheus' remote-read
// protocol, as any Prometheus-compatible server speaks it) and checks the
// copy answers the same.
func TestBackfillFromRemoteRead(t *testing.T) {
	if testing.Short() {
		t.Skip("backfill end-to-end: skipped under -short")
	}
	// The source's external labels come with what it answers, as
	// Prometheus' do; --remote-read.drop-label leaves them out of the copy.
	dir := t.TempDir()
	cfg := filepath.Join(dir, "src.yml")
	if err := os.WriteFile(cfg, []byte("global:\n  external_labels:\n    cluster: src\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := startStrata(t, filepath.Join(dir, "src"), "--config.file="+cfg)
	now := time.Now().Truncate(time.Second)
	writeCopiedSeries(t, src, now.Add(-1200*time.Second), now)
	// A native histogram series comes along into the copy's raw tier.
	hist := prompb.TimeSeries{Labels: []prompb.Label{{Name: "__name__", Value: "copied_hist"}}}
	for i := range 10 {
		h := &histogram.Histogram{Count: uint64(i), Sum: float64(i), ZeroCount: uint64(i), ZeroThreshold: 0.001}
		hist.Histograms = append(hist.Histograms, prompb.FromIntHistogram(now.Add(time.Duration(i-10)*10*time.Second).UnixMilli(), h))
	}
	body, err := (&prompb.WriteRequest{Timeseries: []prompb.TimeSeries{hist}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newWriteClient(t, src, remoteapi.WriteV1MessageType).Store(context.Background(), snappy.Encode(nil, body), 0); err != nil {
		t.Fatal(err)
	}
	out := checkRemoteReadCopy(t, src, now, "30m", "", "--remote-read.drop-label=cluster")
	if !strings.Contains(out, "raw_block_samples=0 ") || !strings.Contains(out, "histogram_samples=10 ") {
		t.Errorf("backfill's output does not count the 10 histogram samples written:\n%s", out)
	}
	checkRemoteReadCopy(t, src, now, "30m", "src")
}

// TestBackfillFromRemoteReadFirstHourFinal is TestBackfillFromRemoteRead
// from a source whose first hour is already a minute partition: its oldest
// sample lies mid-minute in the hour before a boundary b, and its newest are
// past b plus the lateness and the diagnosis engine's reach (19 minutes: the
// hour is written once the engine's minutes no longer read it). The source's
// remote read used to serve that partial first minute from the minute tier,
// the window's last sample only, so the copy lacked the samples before it
// (once in a while, TestBackfillFromRemoteRead: when it ran 15 to 20 minutes
// past an hour and a tick fell between its write and its read).
func TestBackfillFromRemoteReadFirstHourFinal(t *testing.T) {
	if testing.Short() {
		t.Skip("backfill end-to-end: skipped under -short")
	}
	src := startStrata(t, t.TempDir())
	now := time.Now().Truncate(time.Second)
	b := now.Add(-20 * time.Minute).Truncate(time.Hour)
	writeCopiedSeries(t, src, b.Add(-5*time.Minute+20*time.Second), now)
	// The tick after the write (every 15 s) writes the partition.
	deadline := time.Now().Add(time.Minute)
	for {
		var st struct {
			Data tiers.Status `json:"data"`
		}
		getJSON(t, src.url("/api/v1/status/tiers"), &st)
		i := slices.IndexFunc(st.Data.Tiers, func(ts tiers.TierStatus) bool { return ts.Tier == tiers.TierMinute })
		if i >= 0 && st.Data.Tiers[i].Partitions > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source wrote no minute partition within a minute: %+v", st.Data)
		}
		time.Sleep(time.Second)
	}
	checkRemoteReadCopy(t, src, now, "2h", "")
}

// writeCopiedSeries writes three counters copied_total{instance="0".."2"}
// to p, a sample every 10 s from first to before end whose value is a
// function of its time: two servers given the same range hold the same
// samples, as two receivers of one scraper's remote write do.
func writeCopiedSeries(t *testing.T, p *strataProc, first, end time.Time) {
	t.Helper()
	var series []testSeries
	for i := range 3 {
		s := testSeries{lbls: labels.FromStrings("__name__", "copied_total", "instance", fmt.Sprint(i))}
		for ts := first; ts.Before(end); ts = ts.Add(10 * time.Second) {
			s.samples = append(s.samples, prompb.Sample{Value: float64(ts.Unix()/10) * float64(i+1), Timestamp: ts.UnixMilli()})
		}
		series = append(series, s)
	}
	if _, err := newWriteClient(t, p, remoteapi.WriteV1MessageType).Store(context.Background(), encodeV1(t, series), 0); err != nil {
		t.Fatal(err)
	}
}

// checkRemoteReadCopy copies the last hour and a half of copied_* from src
// into a new store with `strata backfill --remote-read.url` (and args),
// starts a server on the copy, and checks that the count and the sum of
// every copied_total series' samples over rng before now are the source's,
// and so are those of copied_hist's native histograms,
// and that the copy's series have the label cluster="<cluster>" ("": none).
// It returns the backfill's output.
func checkRemoteReadCopy(t *testing.T, src *strataProc, now time.Time, rng, cluster string, args ...string) string {
	t.Helper()
	dst := t.TempDir()
	out := runStrata(t, append([]string{"backfill", "--storage.path=" + dst, "--no-progress-bar",
		"--remote-read.url=" + src.url("/api/v1/read"), `--remote-read.match={__name__=~"copied_.*"}`, "--remote-read.from=90m"}, args...)...)
	p := startStrata(t, dst)
	clusters, _, _, err := newAPIClient(t, p).Query(context.Background(), `count by (cluster) (last_over_time(copied_total[90m]))`, now)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := clusters.(model.Vector); !ok || len(v) != 1 || string(v[0].Metric["cluster"]) != cluster || v[0].Value != 3 {
		t.Errorf("the copy's series by cluster: %v, want 3 with cluster=%q", clusters, cluster)
	}
	for _, q := range []string{
		`sum by (instance) (count_over_time(copied_total[%[1]s])) * 1000 + sum by (instance) (sum_over_time(copied_total[%[1]s]))`,
		// copied_hist's native histograms, when the source has them.
		`sum(count_over_time(copied_hist[%[1]s])) * 1e6 + histogram_sum(sum(sum_over_time(copied_hist[%[1]s]))) * 1000 + histogram_count(sum(sum_over_time(copied_hist[%[1]s])))`,
	} {
		q = fmt.Sprintf(q, rng)
		want, _, _, err := newAPIClient(t, src).Query(context.Background(), q, now)
		if err != nil {
			t.Fatal(err)
		}
		got, _, _, err := newAPIClient(t, p).Query(context.Background(), q, now)
		if err != nil {
			t.Fatal(err)
		}
		// The engine keeps its input's order, which is not the same in
		// two stores.
		for _, v := range []model.Value{got, want} {
			if vec, ok := v.(model.Vector); ok {
				sort.Sort(vec)
			}
		}
		if got.String() != want.String() {
			t.Errorf("%s: copy answers\n%v\nsource answers\n%v", q, got, want)
		}
		if strings.Contains(q, "copied_total") && len(got.(model.Vector)) != 3 {
			t.Errorf("%s: %v, want 3 series", q, got)
		}
	}
	return out
}

// TestBackfillFilesShareSeries: two files that hold one series (an hour
// each, the second also repeating three of the first's timestamps) import
// as one series, where the files read whole gave "series given twice" at
// the first partition; the spool the files are parsed into is gone
// afterwards. A missing file is an error naming it, and writes nothing.
func TestBackfillFilesShareSeries(t *testing.T) {
	dir := t.TempDir()
	// At the start of a UTC day: the two hours then make two minute
	// partitions and one hour partition whatever the time of day the test
	// runs (run between 01:00 and 02:00 UTC, the hour 50 h before began at
	// 23:00 and the two hours made two hour partitions).
	t0 := time.Now().Add(-50 * time.Hour).Truncate(24 * time.Hour).Unix()
	write := func(name string, from, to int64, extra string) string {
		var b strings.Builder
		b.WriteString("# TYPE g gauge\n")
		for s := from; s < to; s += 15 {
			fmt.Fprintf(&b, "g{x=\"1\"} %d %d\n", s%7, t0+s)
		}
		b.WriteString(extra + "# EOF\n")
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.om", 0, 3600, "")
	b := write("b.om", 3600, 7200, fmt.Sprintf("g{x=\"1\"} 100 %d\ng{x=\"1\"} 100 %d\ng{x=\"1\"} 100 %d\n", t0, t0+15, t0+30))
	data := filepath.Join(dir, "data")

	_, stderr, err := runStrataOut(t, "backfill", "--storage.path="+data, "--no-progress-bar", a, filepath.Join(dir, "missing.om"))
	if err == nil || !strings.Contains(stderr, "missing.om") {
		t.Fatalf("a missing file: %v\n%s", err, stderr)
	}
	if ents, _ := os.ReadDir(filepath.Join(data, "minute")); len(ents) != 0 {
		t.Fatalf("a failed read wrote %d minute partitions", len(ents))
	}

	out := runStrata(t, "backfill", "--storage.path="+data, "--no-progress-bar", a, b)
	if !strings.Contains(out, "series=1 samples=483") || !strings.Contains(out, "partitions_written=3") ||
		!strings.Contains(out, `msg="Go runtime memory policy" gogc=50`) {
		t.Fatalf("backfill of two files of one series:\n%s", out)
	}
	// The second file's samples at the first file's timestamps win, as
	// the later of two samples at a timestamp does.
	if dump := rollupDump(t, filepath.Join(data, "minute")); !strings.Contains(dump, fmt.Sprintf("{Start:%d000 FirstT:%d000 LastT:%d000 Count:4 Sum:303 Min:3 Max:100 First:100 Last:3 ", t0, t0, t0+45)) {
		t.Errorf("the first minute is not the second file's:\n%.600s", dump)
	}
	spill, err := os.ReadDir(filepath.Join(data, rollupSpillDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range spill {
		if strings.HasPrefix(e.Name(), "backfill-spool-") {
			t.Errorf("spool %s left behind", e.Name())
		}
	}
}
