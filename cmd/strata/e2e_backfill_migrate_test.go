package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
)

// writeScraped writes three counters copied_total{instance="0".."2"}, a
// sample every 10 s from first to before end whose value is a function of
// its time: two servers given the same range hold the same samples, as two
// receivers of one scraper's remote write do.
func writeScraped(t *testing.T, p *strataProc, first, end time.Time) {
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

// TestBackfillMigration is the move from Prometheus as a user makes it:
// remote write pointed at a new Strata at T0 (25 minutes ago, within an
// hour that began before it), then, the server stopped, the history copied
// from the old server with `strata backfill --remote-read.url` over a range
// that reaches past T0. Every sample of the old server's three hours must
// be in the new one after its restart, the history of T0's hour before T0
// included: the raw tier's head refused those (they are behind its series'
// live samples), and until 2026-12-07 they were lost; the live samples are
// kept (the copy's duplicates of them are refused).
func TestBackfillMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("backfill end-to-end: skipped under -short")
	}
	old := startStrata(t, t.TempDir())
	now := time.Now().Truncate(10 * time.Second)
	t0 := now.Add(-25 * time.Minute)
	writeScraped(t, old, now.Add(-3*time.Hour), now)
	dir := t.TempDir()
	p := startStrata(t, dir)
	writeScraped(t, p, t0, now)
	p.stop()
	out := runStrata(t, "backfill", "--storage.path="+dir, "--no-progress-bar",
		"--remote-read.url="+old.url("/api/v1/read"), `--remote-read.match={__name__=~"copied_.*"}`, "--remote-read.from=3h")
	if !strings.Contains(out, "raw_gap_samples=") || strings.Contains(out, "raw_gap_samples=0 ") {
		t.Errorf("the backfill wrote no gap samples:\n%s", out)
	}
	p = startStrata(t, dir)
	q := `sum by (instance) (count_over_time(copied_total[170m])) * 1e9 + sum by (instance) (sum_over_time(copied_total[170m]))`
	want, _, _, err := newAPIClient(t, old).Query(context.Background(), q, now)
	if err != nil {
		t.Fatal(err)
	}
	got, _, _, err := newAPIClient(t, p).Query(context.Background(), q, now)
	if err != nil {
		t.Fatal(err)
	}
	if w, g := want.(model.Vector), got.(model.Vector); len(w) != 3 || w.String() != g.String() {
		t.Errorf("count and sum of samples over the old server's history:\n got %v\nwant %v", g, w)
	}
}
