package storeapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/thanos-io/thanos/pkg/info/infopb"
	"github.com/thanos-io/thanos/pkg/store/storepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/tiers"
)

const (
	minMs  = int64(60_000)
	hourMs = 60 * minMs
	dayMs  = 24 * hourMs
	// t0 is the fixture's first day (2026-01-01T00:00Z).
	t0 = int64(1767225600000)
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fixture is two days of one-minute-spaced samples of four GPU gauges and a
// counter, held by all three tiers at once (raw, minute windows, hour
// windows), so that which tier served a request shows in the samples.
type fixture struct {
	stitched *tiers.Stitched
	series   map[string][]chunks.Sample // by labels.String()
	hour     map[string][]tiers.Window
}

type fsample struct {
	t int64
	f float64
}

func (s fsample) T() int64                      { return s.t }
func (s fsample) ST() int64                     { return 0 }
func (s fsample) F() float64                    { return s.f }
func (s fsample) H() *histogram.Histogram       { return nil }
func (s fsample) FH() *histogram.FloatHistogram { return nil }
func (s fsample) Copy() chunks.Sample           { return s }
func (s fsample) Type() chunkenc.ValueType      { return chunkenc.ValFloat }
func (s fsample) String() string                { return fmt.Sprintf("%d:%g", s.t, s.f) }
func gpuLabels(gpu int) labels.Labels {
	return labels.FromStrings("__name__", "gpu_temp", "gpu", fmt.Sprint(gpu), "host", "node-1")
}
func counterLabels() labels.Labels {
	return labels.FromStrings("__name__", "requests_total", "host", "node-1")
}
func kindOf(l labels.Labels) downsample.Kind { return kindByName(l.Get("__name__")) }
func kindByName(name string) downsample.Kind {
	if strings.HasSuffix(name, "_total") {
		return downsample.KindCounter
	}
	return downsample.KindGauge
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	dir := t.TempDir()
	rawCfg := tiers.DefaultRawConfig(filepath.Join(dir, "raw"))
	rawCfg.Retention = 365 * 24 * time.Hour // the TSDB's retention runs from its newest sample: keep both days
	raw, err := tiers.OpenRaw(rawCfg, quiet(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(filepath.Join(dir, "minute")), quiet(), prometheus.NewRegistry(), func() time.Time { return time.UnixMilli(t0 + 2*dayMs) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = minute.Close() })
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), quiet(), prometheus.NewRegistry(), func() time.Time { return time.UnixMilli(t0 + 2*dayMs) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hour.Close() })

	f := &fixture{series: map[string][]chunks.Sample{}, hour: map[string][]tiers.Window{}}
	all := []labels.Labels{counterLabels()}
	for g := range 4 {
		all = append(all, gpuLabels(g))
	}
	app := raw.Appender(context.Background())
	minutePart := map[int64][]tiers.SeriesWindows{}
	hourPart := map[int64][]tiers.SeriesWindows{}
	for i, l := range all {
		var ss []chunks.Sample
		for ts := t0 + int64(i)*1000; ts < t0+2*dayMs; ts += minMs / 4 {
			v := 50 + 10*math.Sin(float64(ts)/3.6e6+float64(i))
			if i == 0 {
				v = float64((ts - t0) / 1000) // a counter: one per second
			}
			ss = append(ss, fsample{ts, v})
			if _, err := app.Append(0, l, ts, v); err != nil {
				t.Fatal(err)
			}
		}
		f.series[l.String()] = ss
		mws, _, err := downsample.AppendWindows(nil, storage.NewListSeries(l, ss).Iterator(nil), downsample.MinuteRes, t0, t0+2*dayMs, kindOf(l))
		if err != nil {
			t.Fatal(err)
		}
		hws := downsample.Coarsen(nil, mws, downsample.HourRes, kindOf(l))
		f.hour[l.String()] = hws
		for _, w := range mws {
			p := w.Start - w.Start%hourMs
			minutePart[p] = appendWindow(minutePart[p], l, w)
		}
		for _, w := range hws {
			p := w.Start - w.Start%dayMs
			hourPart[p] = appendWindow(hourPart[p], l, w)
		}
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	for p, sws := range minutePart {
		sortWindows(sws)
		if err := minute.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
	for p, sws := range hourPart {
		sortWindows(sws)
		if err := hour.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
	f.stitched = tiers.NewStitched(raw, minute, hour)
	return f
}

func appendWindow(ps []tiers.SeriesWindows, l labels.Labels, w tiers.Window) []tiers.SeriesWindows {
	if len(ps) == 0 || !labels.Equal(ps[len(ps)-1].Labels, l) {
		ps = append(ps, tiers.SeriesWindows{Labels: l})
	}
	ps[len(ps)-1].Windows = append(ps[len(ps)-1].Windows, w)
	return ps
}

func sortWindows(sws []tiers.SeriesWindows) {
	slices.SortFunc(sws, func(a, b tiers.SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
}

// client starts a gRPC server for srv on a loopback port and returns a
// StoreAPI and Info client talking to it.
func client(t testing.TB, srv *Server) (storepb.StoreClient, infopb.InfoClient) {
	t.Helper()
	conn := serve(t, srv, nil)
	return storepb.NewStoreClient(conn), infopb.NewInfoClient(conn)
}

// serve starts srv's gRPC server (with qs, the Query API, when not nil) on
// a loopback port for the test and returns a connection to it.
func serve(t testing.TB, srv *Server, qs *QueryServer) *grpc.ClientConn {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPCServer(srv, qs, nil)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodec(Codec())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func newServer(t testing.TB, f *fixture, cfg Config) (*Server, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := New(cfg, f.stitched, quiet(), reg)
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

// gotSeries is one series of a Series answer, its frames joined.
type gotSeries struct {
	lbls    labels.Labels
	samples []fsample
}

// series runs a Series request and decodes the answer.
func series(t testing.TB, c storepb.StoreClient, req *storepb.SeriesRequest) ([]gotSeries, []string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Series(ctx, req)
	if err != nil {
		return nil, nil, err
	}
	var out []gotSeries
	var warns []string
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, warns, nil
		}
		if err != nil {
			return out, warns, err
		}
		if w := r.GetWarning(); w != "" {
			warns = append(warns, w)
			continue
		}
		all := []*storepb.Series{r.GetSeries()}
		if b := r.GetBatch(); b != nil {
			if req.ResponseBatchSize <= 1 || len(b.Series) > int(req.ResponseBatchSize) {
				t.Fatalf("a batch of %d series, for a request's batch size of %d", len(b.Series), req.ResponseBatchSize)
			}
			all = b.Series
		}
		for _, s := range all {
			if s != nil {
				out = addSeries(t, out, s)
			}
		}
	}
}

// addSeries decodes s and appends it to out, joining it to out's last series
// when their labels are the same (a series sent in several frames).
func addSeries(t testing.TB, out []gotSeries, s *storepb.Series) []gotSeries {
	t.Helper()
	l := PromLabels(s.Labels)
	if len(out) == 0 || !labels.Equal(out[len(out)-1].lbls, l) {
		out = append(out, gotSeries{lbls: l})
	}
	cur := &out[len(out)-1]
	for _, c := range s.Chunks {
		if c.Raw == nil || c.Raw.Type != storepb.Chunk_XOR {
			t.Fatalf("series %s: chunk %+v is not a raw XOR chunk", l, c)
		}
		chk, err := chunkenc.FromData(chunkenc.EncXOR, c.Raw.Data)
		if err != nil {
			t.Fatal(err)
		}
		it := chk.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			if ts < c.MinTime || ts > c.MaxTime {
				t.Fatalf("sample %d outside its chunk's [%d, %d]", ts, c.MinTime, c.MaxTime)
			}
			cur.samples = append(cur.samples, fsample{ts, v})
		}
	}
	return out
}

func eq(name, value string) storepb.LabelMatcher {
	return storepb.LabelMatcher{Type: storepb.LabelMatcher_EQ, Name: name, Value: value}
}

func re(name, value string) storepb.LabelMatcher {
	return storepb.LabelMatcher{Type: storepb.LabelMatcher_RE, Name: name, Value: value}
}

func TestInfo(t *testing.T) {
	f := newFixture(t)
	cfg := DefaultConfig()
	cfg.ExternalLabels = labels.FromStrings("replica", "a", "shard", "1")
	s, _ := newServer(t, f, cfg)
	_, info := client(t, s)
	resp, err := info.Info(context.Background(), &infopb.InfoRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Store == nil || resp.Store.MinTime != t0 || resp.Store.MaxTime != math.MaxInt64 {
		t.Fatalf("store info %+v, want min time %d (the oldest sample) and an open end", resp.Store, t0)
	}
	if !resp.Store.SupportsSharding || !resp.Store.SupportsWithoutReplicaLabels {
		t.Errorf("store info %+v does not announce sharding and without_replica_labels", resp.Store)
	}
	if len(resp.LabelSets) != 1 || !labels.Equal(PromLabels(resp.LabelSets[0].Labels), cfg.ExternalLabels) {
		t.Errorf("label sets %v, want the external labels %s", resp.LabelSets, cfg.ExternalLabels)
	}
}

// TestSeriesResolution: max_resolution_window chooses the tier, and the
// aggregates Thanos asks for choose the samples made of its windows.
func TestSeriesResolution(t *testing.T) {
	f := newFixture(t)
	s, _ := newServer(t, f, DefaultConfig())
	c, _ := client(t, s)
	gpu0 := gpuLabels(0)
	base := storepb.SeriesRequest{MinTime: t0, MaxTime: t0 + 2*dayMs - 1, Matchers: []storepb.LabelMatcher{eq("__name__", "gpu_temp"), eq("gpu", "0")}}

	t.Run("raw", func(t *testing.T) {
		req := base
		req.Aggregates = []storepb.Aggr{storepb.Aggr_COUNT, storepb.Aggr_SUM}
		got, _, err := series(t, c, &req)
		if err != nil {
			t.Fatal(err)
		}
		want := f.series[gpu0.String()]
		if len(got) != 1 || len(got[0].samples) != len(want) {
			t.Fatalf("got %d series (%d samples), want one with the %d raw samples", len(got), len(got[0].samples), len(want))
		}
		for i, smp := range got[0].samples {
			if smp.t != want[i].T() || smp.f != want[i].F() {
				t.Fatalf("sample %d = %v, want %v", i, smp, want[i])
			}
		}
	})
	t.Run("hour tier, max", func(t *testing.T) {
		req := base
		req.MaxResolutionWindow = hourMs
		req.Aggregates = []storepb.Aggr{storepb.Aggr_MAX}
		got, _, err := series(t, c, &req)
		if err != nil {
			t.Fatal(err)
		}
		ws := f.hour[gpu0.String()]
		if len(got) != 1 || len(got[0].samples) != len(ws) {
			t.Fatalf("got %v, want one series with one sample per hour window (%d)", got, len(ws))
		}
		for i, w := range ws {
			if smp := got[0].samples[i]; smp.t != w.LastT || smp.f != w.Max {
				t.Fatalf("sample %d = %v, want the window's max %g at %d", i, smp, w.Max, w.LastT)
			}
		}
	})
	t.Run("hour tier, count", func(t *testing.T) {
		// count(...) and count_over_time ask for COUNT alike: one sample a
		// window, the window's last value at its last sample, as plain
		// selectors get, not Count samples a window (240 here).
		req := base
		req.MaxResolutionWindow = hourMs
		req.Aggregates = []storepb.Aggr{storepb.Aggr_COUNT}
		got, _, err := series(t, c, &req)
		if err != nil {
			t.Fatal(err)
		}
		ws := f.hour[gpu0.String()]
		if len(got) != 1 || len(got[0].samples) != len(ws) {
			t.Fatalf("got %d series (%d samples), want one with one sample per hour window (%d)", len(got), len(got[0].samples), len(ws))
		}
		for i, w := range ws {
			if smp := got[0].samples[i]; smp.t != w.LastT || smp.f != w.Last {
				t.Fatalf("sample %d = %v, want the window's last value %g at %d", i, smp, w.Last, w.LastT)
			}
		}
	})
	t.Run("minute tier, counter", func(t *testing.T) {
		req := base
		req.Matchers = []storepb.LabelMatcher{eq("__name__", "requests_total")}
		req.MaxResolutionWindow = minMs
		req.Aggregates = []storepb.Aggr{storepb.Aggr_COUNTER}
		got, _, err := series(t, c, &req)
		if err != nil {
			t.Fatal(err)
		}
		// Counter windows become the samples the stitched view gives a
		// rate over the minute tier (tiers/stitch_iter.go): the same here.
		q := f.stitched.ResolutionQuerier(req.MinTime, req.MaxTime, minMs, 0)
		defer q.Close()
		set := q.Select(context.Background(), false, &storage.SelectHints{Start: req.MinTime, End: req.MaxTime, Func: "rate"},
			labels.MustNewMatcher(labels.MatchEqual, "__name__", "requests_total"))
		var want []fsample
		for set.Next() {
			it := set.At().Iterator(nil)
			for it.Next() != chunkenc.ValNone {
				ts, v := it.At()
				want = append(want, fsample{ts, v})
			}
		}
		if err := set.Err(); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || len(got[0].samples) != len(want) || len(want) < 2*2*24*60 {
			t.Fatalf("got %d series, want one with the stitched view's %d counter samples (at least two per minute window)", len(got), len(want))
		}
		for i := range want {
			if got[0].samples[i] != want[i] {
				t.Fatalf("sample %d = %v, want %v", i, got[0].samples[i], want[i])
			}
		}
		raw := f.series[counterLabels().String()]
		if first := got[0].samples[0]; first.t != raw[0].T() || first.f != raw[0].F() {
			t.Errorf("first sample %v, want the first raw sample %v", first, raw[0])
		}
	})
	t.Run("query hints win over aggregates", func(t *testing.T) {
		req := base
		req.MaxResolutionWindow = hourMs
		req.Aggregates = []storepb.Aggr{storepb.Aggr_COUNT, storepb.Aggr_SUM}
		req.QueryHints = &storepb.QueryHints{Func: &storepb.Func{Name: "min_over_time"}}
		got, _, err := series(t, c, &req)
		if err != nil {
			t.Fatal(err)
		}
		ws := f.hour[gpu0.String()]
		if len(got) != 1 || len(got[0].samples) != len(ws) || got[0].samples[5].f != ws[5].Min {
			t.Fatalf("got %v, want the hour windows' minima", got)
		}
	})
}

// TestQuerierLookback: the lookback a Thanos Querier evaluates a request
// with, by Thanos' LookbackDeltaFactory, from the request's resolution.
func TestQuerierLookback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		delta    time.Duration
		dynamic  bool
		maxResMs int64
		want     time.Duration
	}{
		{"raw", 0, true, 0, 5 * time.Minute},
		{"step 25m", 0, true, 5 * minMs, 5 * time.Minute},
		{"step 1h", 0, true, 12 * minMs, time.Hour},
		{"step 5h", 0, true, hourMs, time.Hour},
		{"dynamic off", 0, false, hourMs, 5 * time.Minute},
		{"delta 10m, step 50m", 10 * time.Minute, true, 10 * minMs, 10 * time.Minute},
		{"delta 10m, step 1h", 10 * time.Minute, true, 12 * minMs, time.Hour},
		{"delta 2h", 2 * time.Hour, true, hourMs, 2 * time.Hour},
		{"delta 2h, dynamic off", 2 * time.Hour, false, 0, 2 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{QuerierLookbackDelta: tc.delta, QuerierDynamicLookback: tc.dynamic}
			if got := c.querierLookback(tc.maxResMs); got != tc.want {
				t.Errorf("querierLookback(%d) = %s, want %s", tc.maxResMs, got, tc.want)
			}
		})
	}
}

// TestSeriesPlainSelectorHourTier: a plain selector over the hour tier
// (COUNT+SUM, as the Querier asks) gets one sample per window when the
// Querier widens its lookback to an hour (Thanos' default), and Last
// repeated every 5 m when it does not.
func TestSeriesPlainSelectorHourTier(t *testing.T) {
	f := newFixture(t)
	gpu0 := gpuLabels(0)
	ws := f.hour[gpu0.String()]
	req := storepb.SeriesRequest{MinTime: t0, MaxTime: t0 + 2*dayMs - 1, MaxResolutionWindow: hourMs,
		Matchers: []storepb.LabelMatcher{eq("__name__", "gpu_temp"), eq("gpu", "0")}, Aggregates: []storepb.Aggr{storepb.Aggr_COUNT, storepb.Aggr_SUM}}

	s, _ := newServer(t, f, DefaultConfig())
	c, _ := client(t, s)
	got, _, err := series(t, c, &req)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || len(got[0].samples) != len(ws) {
		t.Fatalf("got %v, want one series with one sample per hour window (%d)", got, len(ws))
	}
	for i, w := range ws {
		if smp := got[0].samples[i]; smp.t != w.LastT || smp.f != w.Last {
			t.Fatalf("sample %d = %v, want the window's last value %g at %d", i, smp, w.Last, w.LastT)
		}
	}

	cfg := DefaultConfig()
	cfg.QuerierDynamicLookback = false
	s, _ = newServer(t, f, cfg)
	c, _ = client(t, s)
	got, _, err = series(t, c, &req)
	if err != nil {
		t.Fatal(err)
	}
	// Every window's Last repeated every 5 m until the next window's last
	// sample: about an hour's worth.
	if len(got) != 1 || len(got[0].samples) < 11*len(ws) {
		t.Fatalf("got %d series, %d samples; want one with Last repeated every 5 m (at least %d)", len(got), len(got[0].samples), 11*len(ws))
	}
}

// TestSeriesBatches: with a ResponseBatchSize above 1 (Thanos' Querier
// sends 64), series come several a message, and the answer is the same.
func TestSeriesBatches(t *testing.T) {
	f := newFixture(t)
	s, _ := newServer(t, f, DefaultConfig())
	c, _ := client(t, s)
	req := storepb.SeriesRequest{MinTime: t0, MaxTime: t0 + 2*dayMs - 1, MaxResolutionWindow: hourMs,
		Matchers: []storepb.LabelMatcher{re("__name__", ".+")}, Aggregates: []storepb.Aggr{storepb.Aggr_COUNT, storepb.Aggr_SUM}}
	want, _, err := series(t, c, &req)
	if err != nil {
		t.Fatal(err)
	}
	req.ResponseBatchSize = 2
	got, _, err := series(t, c, &req)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 5 || len(got) != len(want) {
		t.Fatalf("batched: %d series, unbatched %d, want 5", len(got), len(want))
	}
	for i := range want {
		if !labels.Equal(got[i].lbls, want[i].lbls) || !slices.Equal(got[i].samples, want[i].samples) {
			t.Errorf("series %d: batched %s (%d samples), unbatched %s (%d)", i, got[i].lbls, len(got[i].samples), want[i].lbls, len(want[i].samples))
		}
	}
	stream, err := c.Series(context.Background(), &req)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []int
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if b := r.GetBatch(); b != nil {
			msgs = append(msgs, len(b.Series))
		} else if r.GetSeries() != nil {
			msgs = append(msgs, -1)
		}
	}
	if !slices.Equal(msgs, []int{2, 2, 1}) {
		t.Errorf("messages %v, want batches of 2, 2 and 1 series", msgs)
	}
}

func TestSeriesExternalLabels(t *testing.T) {
	f := newFixture(t)
	cfg := DefaultConfig()
	// "host" is also a series label: the external label wins, as in Thanos.
	cfg.ExternalLabels = labels.FromStrings("a_replica", "r1", "host", "shard-7")
	s, _ := newServer(t, f, cfg)
	c, _ := client(t, s)
	req := &storepb.SeriesRequest{MinTime: t0, MaxTime: t0 + hourMs, Matchers: []storepb.LabelMatcher{re("__name__", ".+")}, SkipChunks: true}
	got, _, err := series(t, c, req)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range got {
		names = append(names, g.lbls.String())
		if g.lbls.Get("a_replica") != "r1" || g.lbls.Get("host") != "shard-7" {
			t.Errorf("series %s lacks the external labels", g.lbls)
		}
	}
	if len(got) != 5 || !slices.IsSortedFunc(got, func(a, b gotSeries) int { return labels.Compare(a.lbls, b.lbls) }) {
		t.Errorf("series %v: want all five, sorted by their labels as sent", names)
	}

	t.Run("without replica labels", func(t *testing.T) {
		req := *req
		req.WithoutReplicaLabels = []string{"a_replica"}
		got, _, err := series(t, c, &req)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range got {
			if g.lbls.Has("a_replica") {
				t.Errorf("series %s still has the replica label", g.lbls)
			}
		}
		if len(got) != 5 || !slices.IsSortedFunc(got, func(a, b gotSeries) int { return labels.Compare(a.lbls, b.lbls) }) {
			t.Errorf("%d series, want all five sorted without the replica label", len(got))
		}
	})
	t.Run("matchers on external labels", func(t *testing.T) {
		for _, tc := range []struct {
			m    storepb.LabelMatcher
			want int
		}{{eq("a_replica", "r1"), 5}, {eq("a_replica", "r2"), 0}, {re("host", "shard-.*"), 5}, {eq("host", "node-1"), 0}} {
			req := *req
			req.Matchers = append([]storepb.LabelMatcher{tc.m}, req.Matchers...)
			got, _, err := series(t, c, &req)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Errorf("%s: %d series, want %d", tc.m.PromString(), len(got), tc.want)
			}
		}
		req := *req
		req.Matchers = []storepb.LabelMatcher{eq("a_replica", "r1")}
		if _, _, err := series(t, c, &req); status.Code(err) != codes.InvalidArgument {
			t.Errorf("only external-label matchers: %v, want InvalidArgument", err)
		}
	})
}

func TestSeriesSharding(t *testing.T) {
	f := newFixture(t)
	s, _ := newServer(t, f, DefaultConfig())
	c, _ := client(t, s)
	seen := map[string]int{}
	for i := range int64(2) {
		req := &storepb.SeriesRequest{MinTime: t0, MaxTime: t0 + hourMs, Matchers: []storepb.LabelMatcher{re("__name__", ".+")}, SkipChunks: true,
			ShardInfo: &storepb.ShardInfo{ShardIndex: i, TotalShards: 2, By: true, Labels: []string{"gpu"}}}
		got, _, err := series(t, c, req)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 || len(got) == 5 {
			t.Errorf("shard %d of 2 holds %d of 5 series", i, len(got))
		}
		for _, g := range got {
			seen[g.lbls.String()]++
		}
	}
	if len(seen) != 5 {
		t.Errorf("the shards together hold %d series, want 5", len(seen))
	}
	for l, n := range seen {
		if n != 1 {
			t.Errorf("series %s in %d shards", l, n)
		}
	}
}

func TestLimits(t *testing.T) {
	f := newFixture(t)
	all := []storepb.LabelMatcher{re("__name__", ".+")}
	t.Run("series", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.MaxSeries = 3
		s, reg := newServer(t, f, cfg)
		c, _ := client(t, s)
		_, _, err := series(t, c, &storepb.SeriesRequest{MinTime: t0, MaxTime: t0 + hourMs, Matchers: all})
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_series") {
			t.Fatalf("5 series over a limit of 3: %v, want ResourceExhausted naming max_series", err)
		}
		if n := testutil.ToFloat64(s.rejected.WithLabelValues("max_series")); n != 1 {
			t.Errorf("rejections counted %g, want 1", n)
		}
		_ = reg
	})
	t.Run("samples", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.MaxSamples = 1000
		s, _ := newServer(t, f, cfg)
		c, _ := client(t, s)
		_, _, err := series(t, c, &storepb.SeriesRequest{MinTime: t0, MaxTime: t0 + dayMs, Matchers: all})
		if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "max_samples") {
			t.Fatalf("a day of raw samples over a limit of 1000: %v, want ResourceExhausted naming max_samples", err)
		}
		// The same day from the hour tier fits.
		if _, _, err := series(t, c, &storepb.SeriesRequest{MinTime: t0, MaxTime: t0 + dayMs - 1, Matchers: all, MaxResolutionWindow: hourMs, Aggregates: []storepb.Aggr{storepb.Aggr_MAX}}); err != nil {
			t.Fatalf("hour windows: %v", err)
		}
	})
	t.Run("concurrency", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.MaxConcurrency = 1
		s, _ := newServer(t, f, cfg)
		c, _ := client(t, s)
		release, err := s.acquire(context.Background(), "test")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err = c.LabelNames(ctx, &storepb.LabelNamesRequest{Start: t0, End: t0 + hourMs})
		if code := status.Code(err); code != codes.ResourceExhausted && code != codes.DeadlineExceeded {
			t.Fatalf("a request while the only slot is taken: %v, want it refused at its deadline", err)
		}
		release()
		if _, err := c.LabelNames(context.Background(), &storepb.LabelNamesRequest{Start: t0, End: t0 + hourMs}); err != nil {
			t.Fatalf("after the slot is free: %v", err)
		}
	})
}

func TestLabelNamesAndValues(t *testing.T) {
	f := newFixture(t)
	cfg := DefaultConfig()
	cfg.ExternalLabels = labels.FromStrings("replica", "a", "shard", "1")
	s, _ := newServer(t, f, cfg)
	c, _ := client(t, s)
	ctx := context.Background()
	names, err := c.LabelNames(ctx, &storepb.LabelNamesRequest{Start: t0, End: t0 + hourMs, WithoutReplicaLabels: []string{"replica"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"__name__", "gpu", "host", "shard"}; !slices.Equal(names.Names, want) {
		t.Errorf("label names %v, want %v", names.Names, want)
	}
	for _, tc := range []struct {
		label string
		ms    []storepb.LabelMatcher
		want  []string
	}{
		{"gpu", nil, []string{"0", "1", "2", "3"}},
		{"__name__", []storepb.LabelMatcher{eq("gpu", "1")}, []string{"gpu_temp"}},
		{"shard", nil, []string{"1"}},
		{"shard", []storepb.LabelMatcher{eq("__name__", "requests_total")}, []string{"1"}},
		{"shard", []storepb.LabelMatcher{eq("__name__", "nothing")}, nil},
		{"gpu", []storepb.LabelMatcher{eq("shard", "2")}, nil},
	} {
		vals, err := c.LabelValues(ctx, &storepb.LabelValuesRequest{Label: tc.label, Start: t0, End: t0 + hourMs, Matchers: tc.ms})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(vals.Values, tc.want) {
			t.Errorf("values of %s %v: %v, want %v", tc.label, tc.ms, vals.Values, tc.want)
		}
	}
}
