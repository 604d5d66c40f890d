package storeapi

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/thanos-io/thanos/pkg/api/query/querypb"
	"github.com/thanos-io/thanos/pkg/info/infopb"
	"github.com/thanos-io/thanos/pkg/store/storepb"
	"github.com/thanos-io/thanos/pkg/store/storepb/prompb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// newEngine returns a PromQL engine allowing maxSamples samples in memory
// (0: Prometheus' default, 50 million).
func newEngine(maxSamples int) *promql.Engine {
	if maxSamples == 0 {
		maxSamples = 50_000_000
	}
	return promql.NewEngine(promql.EngineOpts{MaxSamples: maxSamples, Timeout: time.Minute, LookbackDelta: 5 * time.Minute})
}

// queryClient serves s (and, when engine is not nil, its Query API over the
// fixture) on a loopback port and returns the Query and Info clients.
func queryClient(t testing.TB, f *fixture, s *Server, engine promql.QueryEngine) (querypb.QueryClient, infopb.InfoClient) {
	t.Helper()
	var qs *QueryServer
	if engine != nil {
		qs = NewQueryServer(s, engine, f.stitched)
	}
	conn := serve(t, s, qs)
	return querypb.NewQueryClient(conn), infopb.NewInfoClient(conn)
}

// queryAnswer is a Query API answer, decoded.
type queryAnswer struct {
	series   []*prompb.TimeSeries
	messages int // series messages (single or batch)
	warnings []string
	stats    *querypb.QueryStats
}

// recvAll reads a Query or QueryRange stream to its end.
func recvAll[R interface {
	GetWarnings() string
	GetTimeseries() *prompb.TimeSeries
	GetTimeseriesBatch() *querypb.TimeSeriesBatch
	GetStats() *querypb.QueryStats
}](recv func() (R, error)) (queryAnswer, error) {
	var a queryAnswer
	for {
		r, err := recv()
		if errors.Is(err, io.EOF) {
			return a, nil
		}
		if err != nil {
			return a, err
		}
		switch {
		case r.GetWarnings() != "":
			a.warnings = append(a.warnings, r.GetWarnings())
		case r.GetStats() != nil:
			a.stats = r.GetStats()
		case r.GetTimeseries() != nil:
			a.messages++
			a.series = append(a.series, r.GetTimeseries())
		case r.GetTimeseriesBatch() != nil:
			a.messages++
			a.series = append(a.series, r.GetTimeseriesBatch().Series...)
		}
	}
}

func queryRange(t testing.TB, c querypb.QueryClient, req *querypb.QueryRangeRequest) (queryAnswer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.QueryRange(ctx, req)
	if err != nil {
		return queryAnswer{}, err
	}
	return recvAll(stream.Recv)
}

func queryInstant(t testing.TB, c querypb.QueryClient, req *querypb.QueryRequest) (queryAnswer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Query(ctx, req)
	if err != nil {
		return queryAnswer{}, err
	}
	return recvAll(stream.Recv)
}

// labelSets returns the answer's series' label sets, as strings, sorted.
func (a queryAnswer) labelSets() []string {
	out := make([]string, len(a.series))
	for i, s := range a.series {
		out[i] = PromLabels(s.Labels).String()
	}
	slices.Sort(out)
	return out
}

// shardConfig is a node of shard 1, replica a.
func shardConfig() Config {
	cfg := DefaultConfig()
	cfg.ExternalLabels = labels.FromStrings("replica", "a", "shard", "1")
	return cfg
}

// TestQueryAPIInfo: Info announces the Query API only where it is served,
// and a TSDB with the node's time range even without external labels (a
// distributed Querier reads an engine's time range from its TSDB infos).
func TestQueryAPIInfo(t *testing.T) {
	f := newFixture(t)
	for _, served := range []bool{false, true} {
		s, _ := newServer(t, f, DefaultConfig())
		var engine promql.QueryEngine
		if served {
			engine = newEngine(0)
		}
		_, info := queryClient(t, f, s, engine)
		resp, err := info.Info(context.Background(), &infopb.InfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if (resp.Query != nil) != served {
			t.Errorf("Query API served %v, announced %v", served, resp.Query != nil)
		}
		if resp.Store == nil || len(resp.Store.TsdbInfos) != 1 || resp.Store.TsdbInfos[0].MinTime != t0 {
			t.Errorf("store info %+v, want one TSDB from %d", resp.Store, t0)
		}
	}
}

// TestQueryRangeExternalLabels: a range query is evaluated by the engine
// over the tiers, its series carrying the external labels minus the
// request's replica labels, so that `sum by (gpu, shard)` keeps the shard;
// matchers on external labels select the node or not.
func TestQueryRangeExternalLabels(t *testing.T) {
	f := newFixture(t)
	s, _ := newServer(t, f, shardConfig())
	engine := newEngine(0)
	c, _ := queryClient(t, f, s, engine)
	start, end := t0+3*hourMs, t0+30*hourMs
	req := func(q string) *querypb.QueryRangeRequest {
		return &querypb.QueryRangeRequest{Query: q, StartTimeSeconds: start / 1000, EndTimeSeconds: end / 1000, IntervalSeconds: 3600, ReplicaLabels: []string{"replica"}}
	}

	// What the engine computes over the tiers directly.
	direct, err := engine.NewRangeQuery(context.Background(), f.stitched, nil, `sum by (gpu) (gpu_temp)`, time.UnixMilli(start), time.UnixMilli(end), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	want := direct.Exec(context.Background())
	if want.Err != nil {
		t.Fatal(want.Err)
	}
	wm := want.Value.(promql.Matrix)

	got, err := queryRange(t, c, req(`sum by (gpu, shard) (gpu_temp)`))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.series) != len(wm) || len(wm) != 4 {
		t.Fatalf("%d series, want %d (one per GPU)", len(got.series), len(wm))
	}
	for _, w := range wm {
		wl := labels.NewBuilder(w.Metric).Set("shard", "1").Labels()
		i := slices.IndexFunc(got.series, func(s *prompb.TimeSeries) bool { return labels.Equal(PromLabels(s.Labels), wl) })
		if i < 0 {
			t.Fatalf("no series %s in %v", wl, got.labelSets())
		}
		g := got.series[i].Samples
		if len(g) != len(w.Floats) {
			t.Fatalf("%s: %d samples, want %d", wl, len(g), len(w.Floats))
		}
		for j, p := range w.Floats {
			if g[j].Timestamp != p.T || g[j].Value != p.F {
				t.Fatalf("%s: sample %d is %v, want %v", wl, j, g[j], p)
			}
		}
	}
	if got.stats == nil || got.stats.SamplesTotal == 0 {
		t.Errorf("stats %+v, want the samples the query read", got.stats)
	}

	for _, tc := range []struct {
		query string
		want  []string
	}{
		{`gpu_temp{gpu="0"}`, []string{`{__name__="gpu_temp", gpu="0", host="node-1", shard="1"}`}},
		{`gpu_temp{gpu="0", shard="1"}`, []string{`{__name__="gpu_temp", gpu="0", host="node-1", shard="1"}`}},
		{`gpu_temp{gpu="0", shard="2"}`, []string{}},
		{`gpu_temp{gpu="0", replica="b"}`, []string{}},
		{`count by (__name__) ({shard="1"})`, []string{`{__name__="gpu_temp"}`, `{__name__="requests_total"}`}},
	} {
		got, err := queryRange(t, c, req(tc.query))
		if err != nil {
			t.Fatalf("%s: %v", tc.query, err)
		}
		if ls := got.labelSets(); !slices.Equal(ls, tc.want) {
			t.Errorf("%s: series %v, want %v", tc.query, ls, tc.want)
		}
	}

	// Without replica labels in the request, the replica label stays.
	r := req(`gpu_temp{gpu="0"}`)
	r.ReplicaLabels = nil
	got, err = queryRange(t, c, r)
	if err != nil {
		t.Fatal(err)
	}
	if ls := got.labelSets(); !slices.Equal(ls, []string{`{__name__="gpu_temp", gpu="0", host="node-1", replica="a", shard="1"}`}) {
		t.Errorf("without replica labels: %v", ls)
	}
}

// TestQueryInstant: instant queries answer a vector at the request's time
// and scalars as one unlabelled sample; store matchers that exclude the
// node answer nothing.
func TestQueryInstant(t *testing.T) {
	f := newFixture(t)
	s, _ := newServer(t, f, shardConfig())
	c, _ := queryClient(t, f, s, newEngine(0))
	at := t0 + 40*hourMs
	got, err := queryInstant(t, c, &querypb.QueryRequest{Query: `max by (shard) (gpu_temp)`, TimeSeconds: at / 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.series) != 1 || len(got.series[0].Samples) != 1 || got.series[0].Samples[0].Timestamp != at {
		t.Fatalf("got %v, want one sample at %d", got.series, at)
	}
	if ls := got.labelSets(); ls[0] != `{shard="1"}` {
		t.Errorf("labels %v", ls)
	}

	got, err = queryInstant(t, c, &querypb.QueryRequest{Query: `1 + 1`, TimeSeconds: at / 1000})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.series) != 1 || len(got.series[0].Labels) != 0 || got.series[0].Samples[0].Value != 2 {
		t.Errorf("scalar: got %v", got.series)
	}

	for _, tc := range []struct {
		name string
		ms   []querypb.StoreMatchers
		n    int
	}{
		{"other shard", []querypb.StoreMatchers{{LabelMatchers: []storepb.LabelMatcher{eq("shard", "2")}}}, 0},
		{"this shard", []querypb.StoreMatchers{{LabelMatchers: []storepb.LabelMatcher{eq("shard", "1")}}}, 4},
		{"either", []querypb.StoreMatchers{{LabelMatchers: []storepb.LabelMatcher{eq("shard", "2")}}, {LabelMatchers: []storepb.LabelMatcher{re("shard", "1|3")}}}, 4},
	} {
		got, err := queryInstant(t, c, &querypb.QueryRequest{Query: `gpu_temp`, TimeSeconds: at / 1000, StoreMatchers: tc.ms})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.series) != tc.n {
			t.Errorf("store matchers %s: %d series, want %d", tc.name, len(got.series), tc.n)
		}
	}
}

// TestQueryBatchesAndShards: series come response_batch_size a message (one
// a message at 0 or 1); the shards of a sharded query partition the series.
func TestQueryBatchesAndShards(t *testing.T) {
	f := newFixture(t)
	s, _ := newServer(t, f, shardConfig())
	c, _ := queryClient(t, f, s, newEngine(0))
	at := (t0 + 40*hourMs) / 1000
	for _, tc := range []struct{ batch, messages int64 }{{0, 5}, {1, 5}, {2, 3}, {64, 1}} {
		got, err := queryInstant(t, c, &querypb.QueryRequest{Query: `{host="node-1"}`, TimeSeconds: at, ResponseBatchSize: tc.batch})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.series) != 5 || int64(got.messages) != tc.messages {
			t.Errorf("batch size %d: %d series in %d messages, want 5 in %d", tc.batch, len(got.series), got.messages, tc.messages)
		}
	}
	var union []string
	for i := range int64(2) {
		got, err := queryInstant(t, c, &querypb.QueryRequest{Query: `gpu_temp`, TimeSeconds: at,
			ShardInfo: &storepb.ShardInfo{ShardIndex: i, TotalShards: 2, By: true, Labels: []string{"gpu"}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(got.series) == 4 {
			t.Errorf("shard %d holds every series", i)
		}
		union = append(union, got.labelSets()...)
	}
	slices.Sort(union)
	if len(union) != 4 || len(slices.Compact(union)) != 4 {
		t.Errorf("the shards' series %v, want each of the 4 once", union)
	}
}

// TestQueryErrors: what the Query API does not take fails with a clear gRPC
// status, never a crash, and is counted.
func TestQueryErrors(t *testing.T) {
	f := newFixture(t)
	s, _ := newServer(t, f, shardConfig())
	c, _ := queryClient(t, f, s, newEngine(100))
	at := (t0 + 40*hourMs) / 1000
	for _, tc := range []struct {
		name   string
		run    func() error
		code   codes.Code
		reason string
	}{
		{"parse error", func() error {
			_, err := queryInstant(t, c, &querypb.QueryRequest{Query: `sum(`, TimeSeconds: at})
			return err
		}, codes.InvalidArgument, "bad_request"},
		{"plan without query", func() error {
			_, err := queryInstant(t, c, &querypb.QueryRequest{QueryPlan: &querypb.QueryPlan{Encoding: &querypb.QueryPlan_Json{Json: []byte(`{}`)}}, TimeSeconds: at})
			return err
		}, codes.InvalidArgument, "bad_request"},
		{"string result", func() error {
			_, err := queryInstant(t, c, &querypb.QueryRequest{Query: `"text"`, TimeSeconds: at})
			return err
		}, codes.Unimplemented, "unsupported"},
		{"zero step", func() error {
			_, err := queryRange(t, c, &querypb.QueryRangeRequest{Query: `gpu_temp`, StartTimeSeconds: at, EndTimeSeconds: at + 60})
			return err
		}, codes.InvalidArgument, "bad_request"},
		{"too many points", func() error {
			_, err := queryRange(t, c, &querypb.QueryRangeRequest{Query: `gpu_temp`, StartTimeSeconds: at, EndTimeSeconds: at + 11_000, IntervalSeconds: 1})
			return err
		}, codes.InvalidArgument, "bad_request"},
		{"engine sample limit", func() error {
			_, err := queryRange(t, c, &querypb.QueryRangeRequest{Query: `gpu_temp`, StartTimeSeconds: at - 3600, EndTimeSeconds: at, IntervalSeconds: 60})
			return err
		}, codes.ResourceExhausted, "query_max_samples"},
	} {
		before := testutil.ToFloat64(s.rejected.WithLabelValues(tc.reason))
		err := tc.run()
		if status.Code(err) != tc.code {
			t.Errorf("%s: %v, want code %s", tc.name, err, tc.code)
		}
		if after := testutil.ToFloat64(s.rejected.WithLabelValues(tc.reason)); after != before+1 {
			t.Errorf("%s: rejected{reason=%q} went from %g to %g", tc.name, tc.reason, before, after)
		}
	}
}
