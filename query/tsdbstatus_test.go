package query

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "github.com/prometheus/prometheus/web/api/v1"

	"github.com/strata-dev/strata/tiers"
)

// TestTSDBStatus: with the raw tier's status, /api/v1/status/tsdb answers
// the head's series, label pairs, chunks and time range and its top
// cardinalities (limit honoured, a bad limit a 400 as in Prometheus),
// /status/tsdb/blocks the persisted blocks, /status/walreplay the replay's
// progress and /status/runtimeinfo what the server gives; without them the
// four answer 404.
func TestTSDBStatus(t *testing.T) {
	reg := prometheus.NewRegistry()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), slog.New(slog.DiscardHandler), prometheus.WrapRegistererWithPrefix("strata_raw_", reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := raw.Close(); err != nil {
			t.Error(err)
		}
	})
	fillTestRaw(t, raw)
	start := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	info := v1.RuntimeInfo{StartTime: start, CWD: "/srv", Hostname: "node-1", GOMAXPROCS: 2, GOGC: "50", StorageRetention: "1d raw, 30d minute, 1y hour"}
	api, err := New(DefaultConfig(), raw, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry(),
		WithRawStatus(raw, reg, "strata_raw_"),
		WithRuntimeInfo(func() (v1.RuntimeInfo, error) { return info, nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Close() })
	mux := http.NewServeMux()
	api.Register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	get := func(path string, wantCode int, data any) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != wantCode {
			t.Fatalf("GET %s: %d %s, want %d", path, resp.StatusCode, body, wantCode)
		}
		if data != nil {
			env := struct {
				Status string `json:"status"`
				Data   any    `json:"data"`
			}{Data: data}
			if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
				t.Fatalf("GET %s: %s (%v)", path, body, err)
			}
		}
	}

	var st v1.TSDBStatus
	get("/api/v1/status/tsdb", http.StatusOK, &st)
	h := st.HeadStats
	if h.NumSeries != 3 || h.ChunkCount != 3 || h.MinTime != t0 || h.MaxTime != t0+(testSamples-1)*testStep {
		t.Errorf("head stats %+v, want 3 series in 3 chunks from %d to %d", h, t0, t0+(testSamples-1)*testStep)
	}
	want := []v1.TSDBStat{{Name: "http_requests_total", Value: 2}, {Name: "vllm:num_requests_running", Value: 1}}
	if len(st.SeriesCountByMetricName) != 2 || st.SeriesCountByMetricName[0] != want[0] || st.SeriesCountByMetricName[1] != want[1] {
		t.Errorf("series by metric name %v, want %v", st.SeriesCountByMetricName, want)
	}
	get("/api/v1/status/tsdb?limit=1", http.StatusOK, &st)
	if len(st.SeriesCountByMetricName) != 1 || st.SeriesCountByMetricName[0] != want[0] || len(st.LabelValueCountByLabelName) != 1 {
		t.Errorf("limit=1: %+v", st)
	}
	get("/api/v1/status/tsdb?limit=0", http.StatusBadRequest, nil)
	get("/api/v1/status/tsdb?limit=10001", http.StatusBadRequest, nil)

	var blocks struct {
		Blocks []json.RawMessage `json:"blocks"`
	}
	get("/api/v1/status/tsdb/blocks", http.StatusOK, &blocks)
	if len(blocks.Blocks) != 0 {
		t.Errorf("blocks %s, want none: the data is in the head", blocks.Blocks)
	}
	var replay struct{ Min, Max, Current int }
	get("/api/v1/status/walreplay", http.StatusOK, &replay)
	if replay.Current != replay.Max {
		t.Errorf("WAL replay %+v: the tier opened after its replay", replay)
	}
	var got v1.RuntimeInfo
	get("/api/v1/status/runtimeinfo", http.StatusOK, &got)
	if !got.StartTime.Equal(start) || got.Hostname != "node-1" || got.GOGC != "50" || got.StorageRetention != info.StorageRetention {
		t.Errorf("runtime info %+v, want %+v", got, info)
	}

	_, bare := newTestAPI(t, DefaultConfig(), raw)
	bareSrv := httptest.NewServer(bare)
	t.Cleanup(bareSrv.Close)
	for _, p := range []string{"/api/v1/status/tsdb", "/api/v1/status/tsdb/blocks", "/api/v1/status/walreplay", "/api/v1/status/runtimeinfo"} {
		resp, err := http.Get(bareSrv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s without the raw tier's status: %d, want 404", p, resp.StatusCode)
		}
	}
}
