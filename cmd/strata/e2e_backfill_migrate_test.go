package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

// TestBackfillMigration is the move from Prometheus as a user makes it:
// remote write pointed at a new Strata at T0 (100 minutes ago, within an
// hour that began before it), the minute partition of T0's hour written by
// its pipeline, then, the server stopped, the history copied from the old
// server with `strata backfill --remote-read.url` over a range that reaches
// past T0. Every sample of the old server's three hours must be in the new
// one after its restart, and T0's hour's minute windows must count all of
// that hour's samples: the raw tier's head refused the history before T0
// (behind its series' live samples), and until 2026-12-07 it was lost, in
// raw and in the partition for good; the live samples are kept (the copy's
// duplicates of them are refused).
func TestBackfillMigration(t *testing.T) {
	if testing.Short() {
		t.Skip("backfill end-to-end: skipped under -short")
	}
	old := startStrata(t, t.TempDir())
	now := time.Now().Truncate(10 * time.Second)
	t0 := now.Add(-100 * time.Minute)
	h0 := t0.Truncate(time.Hour)
	writeCopiedSeries(t, old, now.Add(-3*time.Hour), now)
	dir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "strata.yml")
	// Without the diagnosis engine, whose baselines hold an hour's
	// partition for up to 30 minutes.
	if err := os.WriteFile(cfg, []byte("diagnose:\n  enabled: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startStrata(t, dir, "--config.file="+cfg)
	writeCopiedSeries(t, p, t0, now)
	deadline := time.Now().Add(time.Minute)
	for !hasMinutePartition(t, p, h0) {
		if time.Now().After(deadline) {
			t.Fatalf("no minute partition of %s within a minute", h0)
		}
		time.Sleep(time.Second)
	}
	p.stop()
	out := runStrata(t, "backfill", "--storage.path="+dir, "--config.file="+cfg, "--no-progress-bar",
		"--remote-read.url="+old.url("/api/v1/read"), `--remote-read.match={__name__=~"copied_.*"}`, "--remote-read.from=3h")
	if !strings.Contains(out, "raw_gap_samples=") || strings.Contains(out, "raw_gap_samples=0 ") || !strings.Contains(out, "partitions_rewritten=1 ") {
		t.Errorf("the backfill wrote no gap samples, or not T0's hour's partition again:\n%s", out)
	}
	// T0's hour's windows: 360 samples of each series.
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(filepath.Join(dir, "minute")), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := minute.Select(context.Background(), h0.UnixMilli(), h0.Add(time.Hour).UnixMilli()-1, labels.MustNewMatcher(labels.MatchEqual, "__name__", "copied_total"))
	if cerr := minute.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, sw := range ws {
		n := 0
		for _, w := range sw.Windows {
			n += int(w.Count)
		}
		if n != 360 {
			t.Errorf("%s: the minute windows of %s count %d samples, want 360", sw.Labels, h0.Format(time.TimeOnly), n)
		}
	}
	if len(ws) != 3 {
		t.Errorf("%d series in the minute partition of %s, want 3", len(ws), h0.Format(time.TimeOnly))
	}
	p = startStrata(t, dir, "--config.file="+cfg)
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

// hasMinutePartition reports whether p's minute tier has hour h's
// partition.
func hasMinutePartition(t *testing.T, p *strataProc, h time.Time) bool {
	t.Helper()
	var st struct {
		Data tiers.Status `json:"data"`
	}
	getJSON(t, p.url("/api/v1/status/tiers"), &st)
	for _, ts := range st.Data.Tiers {
		if ts.Tier == tiers.TierMinute {
			return ts.Partitions > 0 && ts.MinTime <= h.UnixMilli()
		}
	}
	return false
}
