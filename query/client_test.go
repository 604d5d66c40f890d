package query

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// TestOfficialClient drives the API with client_golang's api/prometheus/v1,
// the client promtool, Grafana's backend and the PromQL compliance tester use
// (it POSTs forms and falls back to GET only on 405/501), over a raw tier
// filled through its appender.
func TestOfficialClient(t *testing.T) {
	srv, _ := newTestServer(t, DefaultConfig())
	client, err := api.NewClient(api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	papi := promv1.NewAPI(client)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	end := time.UnixMilli(t0 + 600_000)
	start := time.UnixMilli(t0)

	t.Run("instant query", func(t *testing.T) {
		v, warns, infos, err := papi.Query(ctx, `sum by (code) (increase(http_requests_total[1m]))`, end)
		if err != nil || len(warns) > 0 || len(infos) > 0 {
			t.Fatalf("err %v, warnings %v, infos %v", err, warns, infos)
		}
		// 4 samples 15 s apart in the 1 m window: 3 steps of 10 (resp. 1),
		// extrapolated to the window by Prometheus' increase: 30 * 60/45.
		want := model.Vector{
			{Metric: model.Metric{"code": "200"}, Value: 40, Timestamp: model.TimeFromUnixNano(end.UnixNano())},
			{Metric: model.Metric{"code": "500"}, Value: 4, Timestamp: model.TimeFromUnixNano(end.UnixNano())},
		}
		if diff := cmp.Diff(want, v); diff != "" {
			t.Errorf("-want +got:\n%s", diff)
		}
	})

	t.Run("range query", func(t *testing.T) {
		v, _, _, err := papi.QueryRange(ctx, `vllm:num_requests_running * 2`, promv1.Range{
			Start: start, End: start.Add(time.Minute), Step: 15 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		want := model.Matrix{{
			Metric: model.Metric{"instance": "a", "job": "vllm", "model": "llama"},
			Values: []model.SamplePair{
				{Timestamp: model.Time(t0), Value: 0},
				{Timestamp: model.Time(t0 + 15_000), Value: 2},
				{Timestamp: model.Time(t0 + 30_000), Value: 4},
				{Timestamp: model.Time(t0 + 45_000), Value: 6},
				{Timestamp: model.Time(t0 + 60_000), Value: 8},
			},
		}}
		if diff := cmp.Diff(want, v); diff != "" {
			t.Errorf("-want +got:\n%s", diff)
		}
	})

	t.Run("bad query is a client error", func(t *testing.T) {
		_, _, _, err := papi.Query(ctx, `sum(`, end)
		var apiErr *promv1.Error
		if !errors.As(err, &apiErr) || apiErr.Type != promv1.ErrBadData {
			t.Fatalf("got %v, want a %s error", err, promv1.ErrBadData)
		}
	})

	t.Run("series", func(t *testing.T) {
		got, _, _, err := papi.Series(ctx, []string{`{__name__=~"http_.*",code="500"}`}, start, end)
		if err != nil {
			t.Fatal(err)
		}
		want := []model.LabelSet{{"__name__": "http_requests_total", "code": "500", "instance": "a", "job": "vllm"}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("-want +got:\n%s", diff)
		}
	})

	t.Run("labels", func(t *testing.T) {
		got, _, _, err := papi.LabelNames(ctx, nil, start, end)
		if err != nil {
			t.Fatal(err)
		}
		want := model.LabelNames{"__name__", "code", "instance", "job", "model"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("-want +got:\n%s", diff)
		}
	})

	t.Run("label values", func(t *testing.T) {
		got, _, _, err := papi.LabelValues(ctx, "code", []string{"http_requests_total"}, start, end)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(model.LabelValues{"200", "500"}, got); diff != "" {
			t.Errorf("-want +got:\n%s", diff)
		}
	})

	t.Run("metadata", func(t *testing.T) {
		got, err := papi.Metadata(ctx, "http_requests_total", "")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string][]promv1.Metadata{
			"http_requests_total": {{Type: promv1.MetricTypeCounter, Help: "Requests served, by status code."}},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("-want +got:\n%s", diff)
		}
	})

	t.Run("buildinfo and format", func(t *testing.T) {
		if _, err := papi.Buildinfo(ctx); err != nil {
			t.Fatal(err)
		}
		// client_golang hands back the raw JSON of "data", quotes included,
		// as it does against Prometheus.
		got, err := papi.FormatQuery(ctx, `sum by(job)(up)`)
		if err != nil || got != `"sum by (job) (up)"` {
			t.Fatalf("got %q, %v", got, err)
		}
	})

	t.Run("unsupported endpoint", func(t *testing.T) {
		// The client turns every 404 into a client error, whatever the body.
		_, err := papi.Targets(ctx)
		var apiErr *promv1.Error
		if !errors.As(err, &apiErr) || apiErr.Type != promv1.ErrClient || apiErr.Msg != "client error: 404" {
			t.Fatalf("got %#v, want a 404 client error", err)
		}
	})
}
