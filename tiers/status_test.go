package tiers_test

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-dev/strata/tiers"
)

func TestStatusHandlerAndMetrics(t *testing.T) {
	cfg := tiers.DefaultRawConfig(t.TempDir())
	cfg.Retention = 30 * 24 * time.Hour
	raw, err := tiers.OpenRaw(cfg, quietLogger(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = raw.Close() }()
	w := newWorkload(testT0, 1)
	w.appendTo(t, raw, testT0+20*hourMs+30_000)
	minute := openTestRollup(t, tiers.DefaultMinuteConfig(t.TempDir()), nil)
	hour := openTestRollup(t, tiers.DefaultHourConfig(t.TempDir()), nil)
	w.writeRollups(t, minute, hour, testT0+10*hourMs)
	s := tiers.NewStitched(raw, minute, hour)

	srv := httptest.NewServer(tiers.NewStatusHandler(s))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/v1/status/tiers")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var body struct {
		Status string       `json:"status"`
		Data   tiers.Status `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || body.Status != "success" || len(body.Data.Tiers) != 3 {
		t.Fatalf("status %d, body %+v", resp.StatusCode, body)
	}
	want := []struct {
		tier       string
		minTime    int64
		partitions int
		servesFrom int64
	}{
		{"raw", testT0 + 20*hourMs + 30_000, -1, testT0 + 20*hourMs + minMs}, // blocks: whatever the TSDB compacted
		{"minute", testT0 + 10*hourMs, 14, testT0 + 10*hourMs},
		{"hour", testT0, 1, math.MinInt64},
	}
	for i, wt := range want {
		got := body.Data.Tiers[i]
		if got.Tier != wt.tier || got.Empty || got.MinTime != wt.minTime || (wt.partitions >= 0 && got.Partitions != wt.partitions) || got.Bytes <= 0 {
			t.Errorf("tier %d: got %+v, want %+v", i, got, wt)
		}
		if wt.servesFrom != math.MinInt64 && (got.ServesFrom == nil || *got.ServesFrom != wt.servesFrom) {
			t.Errorf("tier %s serves from %v, want %d", got.Tier, got.ServesFrom, wt.servesFrom)
		}
	}
	if body.Data.Tiers[1].ServesUntil == nil || *body.Data.Tiers[1].ServesUntil != testT0+20*hourMs+minMs {
		t.Errorf("minute tier serves until %v", body.Data.Tiers[1].ServesUntil)
	}

	post, err := http.Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = post.Body.Close()
	if post.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", post.StatusCode)
	}

	reg := prometheus.NewRegistry()
	if err := s.RegisterMetrics(reg); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			got[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	if got["strata_tier_partitions/minute"] != 14 || got["strata_tier_partitions/hour"] != 1 ||
		got["strata_tier_oldest_timestamp_seconds/hour"] != float64(testT0/1000) || got["strata_tier_bytes/minute"] <= 0 || got["strata_tier_bytes/raw"] <= 0 {
		t.Errorf("metrics: %v", got)
	}
}
