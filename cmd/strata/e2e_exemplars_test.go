package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/prometheus/prompb"
)

// TestExemplarsQueryable: an exemplar remote-written to strata serve comes
// back from /api/v1/query_exemplars, as Grafana asks for it to link a
// latency panel to its traces, and a selector without exemplars answers an
// empty list, as Prometheus does. The API was given the stitched view,
// which kept no exemplars, and answered null for every query although the
// raw tier stored them.
func TestExemplarsQueryable(t *testing.T) {
	p := startStrata(t, t.TempDir())
	now := time.Now().Truncate(time.Millisecond)
	req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{
		Labels:    []prompb.Label{{Name: "__name__", Value: "vllm:time_to_first_token_seconds_bucket"}, {Name: "le", Value: "0.5"}},
		Samples:   []prompb.Sample{{Value: 7, Timestamp: now.UnixMilli()}},
		Exemplars: []prompb.Exemplar{{Labels: []prompb.Label{{Name: "trace_id", Value: "4bf92f3577b34da6"}}, Value: 0.31, Timestamp: now.UnixMilli()}},
	}}}
	body, err := req.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newWriteClient(t, p, remoteapi.WriteV1MessageType).Store(context.Background(), snappy.Encode(nil, body), 0); err != nil {
		t.Fatal(err)
	}
	got, err := newAPIClient(t, p).QueryExemplars(context.Background(), `vllm:time_to_first_token_seconds_bucket`, now.Add(-time.Minute), now.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].Exemplars) != 1 || got[0].SeriesLabels["le"] != "0.5" ||
		got[0].Exemplars[0].Labels["trace_id"] != "4bf92f3577b34da6" || got[0].Exemplars[0].Value != 0.31 ||
		!got[0].Exemplars[0].Timestamp.Time().Equal(now) {
		t.Errorf("exemplars: %+v, want the one written", got)
	}
	resp, err := http.Get(p.url("/api/v1/query_exemplars?" + url.Values{"query": {"up"}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"data":[]`) {
		t.Errorf("exemplars of a series without any: %s, want an empty list", b)
	}
}
