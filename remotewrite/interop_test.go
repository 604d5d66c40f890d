package remotewrite

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/prometheus/prompb"
	writev2 "github.com/prometheus/prometheus/prompb/io/prometheus/write/v2"
)

// TestInteropPrometheusSender talks to the handler over HTTP (127.0.0.1)
// with the sender Prometheus and avalanche use (client_golang's
// exp/api/remote): both protocols must be accepted as written, and a 400 must
// reach the sender as a non-retried error carrying our message.
func TestInteropPrometheusSender(t *testing.T) {
	env := newTestEnv(t, DefaultConfig())
	mux := http.NewServeMux()
	mux.Handle("/api/v1/write", env.h)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	api, err := remoteapi.NewAPI(srv.URL, remoteapi.WithAPIBackoff(remoteapi.BackoffConfig{Min: time.Millisecond, Max: time.Millisecond, MaxRetries: 1}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := api.Write(ctx, remoteapi.WriteV1MessageType, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		series("interop_v1", []string{"job", "a"}, prompb.Sample{Value: 1, Timestamp: ms(0)}),
	}}); err != nil {
		t.Fatalf("v1 write: %v", err)
	}

	b := newV2()
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("job", "b", "__name__", "interop_v2"), Samples: []writev2.Sample{{Value: 2, Timestamp: ms(0)}, {Value: 3, Timestamp: ms(time.Second)}}})
	b.req.Symbols = b.st.Symbols()
	stats, err := api.Write(ctx, remoteapi.WriteV2MessageType, &b.req)
	if err != nil {
		t.Fatalf("v2 write: %v", err)
	}
	if stats.Samples != 2 || stats.Histograms != 0 || stats.Exemplars != 0 {
		t.Fatalf("v2 stats %+v", stats)
	}
	if len(env.read(t, "interop_v1")) != 1 || len(env.read(t, "interop_v2")[`{__name__="interop_v2", job="b"}`]) != 2 {
		t.Fatal("interop data not stored")
	}

	b = newV2()
	b.add(writev2.TimeSeries{LabelsRefs: b.refs("job", "nameless"), Samples: []writev2.Sample{{Value: 2, Timestamp: ms(0)}}})
	b.req.Symbols = b.st.Symbols()
	_, err = api.Write(ctx, remoteapi.WriteV2MessageType, &b.req)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "missing or empty __name__") {
		t.Fatalf("invalid series: err %v", err)
	}
}
