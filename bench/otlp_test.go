package bench

import (
	"context"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/strata-dev/strata/remotewrite"
	"github.com/strata-dev/strata/tiers"
)

// TestRunLoadOTLP sends the OTLP load to Strata's own OTLP receiver (with
// Prometheus' translator) over a raw tier: every sample is accepted, and
// the series it stores are the generator's, under the names remote write
// gives them, so that the dashboards read an OTLP-fed receiver alike.
func TestRunLoadOTLP(t *testing.T) {
	logger := slog.New(slog.DiscardHandler)
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(t.TempDir()), logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	h, err := remotewrite.NewHandler(remotewrite.DefaultConfig(), raw, remotewrite.NewMetadataStore(0), logger, prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	o, err := remotewrite.NewOTLPHandler(h, remotewrite.OTLPConfig{Translation: promconfig.DefaultOTLPConfig, LookbackDelta: 5 * time.Minute, MaxAge: 24 * time.Hour}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	srv := httptest.NewServer(o)
	defer srv.Close()

	cfg := LoadConfig{
		URL: srv.URL + "/api/v1/otlp/v1/metrics", Protocol: ProtocolOTLP, Series: 2000, BatchSize: 500,
		Concurrency: 2, MaxRequests: 20, Duration: 30 * time.Second, sleep: (&noSleep{}).sleep,
	}
	res, err := RunLoad(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status2xx != 20 || res.SamplesAccepted != 20*500 || res.SamplesRefused != 0 {
		t.Fatalf("%d 2xx, %d accepted, %d refused; want 20, %d, 0 (errors %v)", res.Status2xx, res.SamplesAccepted, res.SamplesRefused, 20*500, res.Errors)
	}

	g := testGenerator(t, cfg)
	want := map[string]bool{}
	for _, s := range g.series {
		want[s.lset.String()] = true
	}
	q, err := raw.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+"))
	stored := 0
	for ss.Next() {
		stored++
		if ls := ss.At().Labels().String(); !want[ls] {
			t.Fatalf("stored %s, which the generator does not have", ls)
		}
	}
	if err := ss.Err(); err != nil {
		t.Fatal(err)
	}
	if stored == 0 || stored > len(want) {
		t.Fatalf("%d series stored of the generator's %d", stored, len(want))
	}
}

// TestRunLoadOTLPPartialSuccess: the data points a 200's partial success
// rejects are counted as refused, the rest as accepted.
func TestRunLoadOTLPPartialSuccess(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Encoding") != "gzip" || r.Header.Get("X-Prometheus-Remote-Write-Version") != "" {
			http.Error(w, "want gzip and no remote-write version", http.StatusUnsupportedMediaType)
			return
		}
		resp := pmetricotlp.NewExportResponse()
		resp.PartialSuccess().SetRejectedDataPoints(7)
		b, _ := resp.MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
	}))
	defer srv.Close()
	res, err := RunLoad(context.Background(), LoadConfig{
		URL: srv.URL, Protocol: ProtocolOTLP, Series: 1000, BatchSize: 100,
		Concurrency: 1, MaxRequests: 3, Duration: 30 * time.Second, sleep: (&noSleep{}).sleep,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status2xx != 3 || res.SamplesAccepted != 3*93 || res.SamplesRefused != 3*7 {
		t.Fatalf("%d 2xx, %d accepted, %d refused; want 3, %d, %d (errors %v)", res.Status2xx, res.SamplesAccepted, res.SamplesRefused, 3*93, 3*7, res.Errors)
	}
}
