package storeapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/thanos-io/thanos/pkg/info/infopb"
	"github.com/thanos-io/thanos/pkg/store/labelpb"
	"github.com/thanos-io/thanos/pkg/store/storepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Queryable is what the server reads: the stitched tiers
// (*tiers.Stitched).
type Queryable interface {
	// ResolutionQuerier returns a querier over [mint, maxt] whose selects
	// are served from tiers no coarser than maxResolution (ms), with samples
	// for an engine whose lookback delta is lookback (0: the view's own).
	// The caller MUST close it.
	ResolutionQuerier(mint, maxt, maxResolution int64, lookback time.Duration) storage.Querier
	// MinTime is the oldest time any tier holds data for, false when none.
	MinTime() (int64, bool)
}

// Config is the server's configuration.
type Config struct {
	// ExternalLabels are added to every series the server returns and
	// announced by Info, so that the Querier can tell nodes (shards,
	// replicas) apart. Prometheus calls them global.external_labels.
	ExternalLabels labels.Labels
	// MaxConcurrency bounds the requests served at once (0: 20); others
	// wait for a slot until their context ends.
	MaxConcurrency int
	// MaxSeries and MaxSamples bound one Series request (0: no bound).
	MaxSeries  int
	MaxSamples int
	// QuerierLookbackDelta and QuerierDynamicLookback describe the Thanos
	// Querier in front (its --query.lookback-delta, 0 meaning its default
	// of 5 m, and --query.dynamic-lookback-delta, on by default), from which
	// the server knows the lookback each request is evaluated with: plain
	// selectors over the hour tier then need a sample only where the
	// Querier's lookback would not reach the next one (querierLookback).
	QuerierLookbackDelta   time.Duration
	QuerierDynamicLookback bool
}

// DefaultConfig is the configuration `strata serve` starts from: a Querier
// with Thanos' defaults.
func DefaultConfig() Config {
	return Config{ExternalLabels: labels.EmptyLabels(), MaxConcurrency: 20, MaxSeries: 1_000_000, MaxSamples: 100_000_000, QuerierDynamicLookback: true}
}

// Thanos' downsampling resolutions, which its dynamic lookback delta is
// keyed by (Thanos' pkg/compact/downsample ResLevel1 and ResLevel2).
const (
	thanosRes5m = 5 * time.Minute
	thanosRes1h = time.Hour
)

// querierLookback is the lookback delta a Thanos Querier evaluates a Series
// request with, as Thanos' LookbackDeltaFactory chooses it from the query's
// max_source_resolution: with the dynamic lookback delta on, a resolution
// above 5 m (above the configured delta, if longer) widens it to at least
// 1 h, one above the delta to at least 5 m. The request carries
// max_resolution_window, which is max_source_resolution or, for functions
// over a range, at most half the range: never more, so the lookback derived
// from it is never longer than the Querier's and the samples sent for it
// leave no gap.
func (c Config) querierLookback(maxResolutionWindow int64) time.Duration {
	ld := c.QuerierLookbackDelta
	res := []time.Duration{0}
	if c.QuerierDynamicLookback {
		res = append(res, thanosRes5m, thanosRes1h)
	}
	w := time.Duration(maxResolutionWindow) * time.Millisecond
	for i := len(res) - 1; i >= 1; i-- {
		if max(res[i-1], ld) < w {
			return max(ld, res[i])
		}
	}
	if ld <= 0 {
		return 5 * time.Minute // the PromQL engine's default
	}
	return ld
}

// Errors a request can fail with (as gRPC statuses; see the package doc).
var (
	// ErrTooManySeries: a Series request selected more than MaxSeries series.
	ErrTooManySeries = errors.New("query selects too many series")
	// ErrTooManySamples: a Series request would send more than MaxSamples samples.
	ErrTooManySamples = errors.New("query selects too many samples")
)

// Server serves the StoreAPI and the Info API. It is safe for concurrent
// use; register it on a gRPC server with Register.
type Server struct {
	storepb.UnimplementedStoreServer
	infopb.UnimplementedInfoServer

	cfg     Config
	q       Queryable
	logger  *slog.Logger
	slots   chan struct{}
	buffers sync.Pool // shard matcher buffers

	requests *prometheus.CounterVec
	rejected *prometheus.CounterVec
	inflight prometheus.Gauge
	waiting  prometheus.Gauge
	series   prometheus.Counter
	samples  prometheus.Counter

	querySeries            prometheus.Counter // result series sent by the Query API
	querySelectsShared     prometheus.Counter // Query API selects served by another request's read
	queryEvaluationsShared prometheus.Counter // Query API aggregations over another request's evaluation
	queryAggregationsFused prometheus.Counter // Query API aggregations answered by a fused pass
}

// New returns a server over q.
func New(cfg Config, q Queryable, logger *slog.Logger, reg prometheus.Registerer) (*Server, error) {
	if cfg.MaxConcurrency <= 0 {
		cfg.MaxConcurrency = 20
	}
	if cfg.MaxSeries < 0 || cfg.MaxSamples < 0 {
		return nil, fmt.Errorf("storeapi: negative limit (max series %d, max samples %d)", cfg.MaxSeries, cfg.MaxSamples)
	}
	if cfg.QuerierLookbackDelta < 0 {
		return nil, fmt.Errorf("storeapi: negative querier lookback delta %s", cfg.QuerierLookbackDelta)
	}
	if err := cfg.ExternalLabels.Validate(func(l labels.Label) error {
		if l.Value == "" {
			return fmt.Errorf("external label %q has an empty value", l.Name)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("storeapi: %w", err)
	}
	f := promauto.With(reg)
	s := &Server{
		cfg: cfg, q: q, logger: logger, slots: make(chan struct{}, cfg.MaxConcurrency),
		requests: f.NewCounterVec(prometheus.CounterOpts{Name: "strata_storeapi_requests_total", Help: "StoreAPI and Query API requests received, by method."}, []string{"method"}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{Name: "strata_storeapi_rejected_total", Help: "StoreAPI and Query API requests refused, by reason (queue_timeout, max_series, max_samples, bad_request; Query API: query_timeout, query_max_samples, unsupported)."}, []string{"reason"}),
		inflight: f.NewGauge(prometheus.GaugeOpts{Name: "strata_storeapi_inflight_requests", Help: "StoreAPI requests being served."}),
		waiting:  f.NewGauge(prometheus.GaugeOpts{Name: "strata_storeapi_waiting_requests", Help: "StoreAPI requests waiting for a slot (storeapi max_concurrency)."}),
		series:   f.NewCounter(prometheus.CounterOpts{Name: "strata_storeapi_series_sent_total", Help: "Series sent in StoreAPI Series answers."}),
		samples:  f.NewCounter(prometheus.CounterOpts{Name: "strata_storeapi_samples_sent_total", Help: "Samples sent in StoreAPI Series answers."}),

		querySeries:            f.NewCounter(prometheus.CounterOpts{Name: "strata_storeapi_query_series_sent_total", Help: "Result series sent in Query API (distributed query) answers."}),
		querySelectsShared:     f.NewCounter(prometheus.CounterOpts{Name: "strata_storeapi_query_selects_shared_total", Help: "Query API selects served by the tier read of another request with the same select (the sum and count a distributed Querier splits an avg into), not a read of their own."}),
		queryEvaluationsShared: f.NewCounter(prometheus.CounterOpts{Name: "strata_storeapi_query_evaluations_shared_total", Help: "Query API aggregations (sum, count, min, max by a selector) computed from the selector's evaluation by another request running at the same time (the sum and count a distributed Querier splits an avg into), not an evaluation of their own."}),
		queryAggregationsFused: f.NewCounter(prometheus.CounterOpts{Name: "strata_storeapi_query_aggregations_fused_total", Help: "Query API aggregations (sum, count, min, max by a selector) answered by a fused pass, which selects each series' samples step by step into the groups' accumulators without the selector's matrix (its own pass or another request's)."}),
	}
	s.buffers.New = func() any { b := make([]byte, 0, 1024); return &b }
	return s, nil
}

// acquire takes a request slot, waiting until one is free or ctx ends.
func (s *Server) acquire(ctx context.Context, method string) (func(), error) {
	s.requests.WithLabelValues(method).Inc()
	select {
	case s.slots <- struct{}{}:
	default:
		s.waiting.Inc()
		select {
		case s.slots <- struct{}{}:
			s.waiting.Dec()
		case <-ctx.Done():
			s.waiting.Dec()
			s.rejected.WithLabelValues("queue_timeout").Inc()
			return nil, status.Errorf(codes.ResourceExhausted, "strata: %d StoreAPI requests already running (storeapi max_concurrency) and none finished before this one's deadline: %v", cap(s.slots), ctx.Err())
		}
	}
	s.inflight.Inc()
	return func() { s.inflight.Dec(); <-s.slots }, nil
}

// Info implements infopb.InfoServer.
func (s *Server) Info(context.Context, *infopb.InfoRequest) (*infopb.InfoResponse, error) {
	mint, ok := s.q.MinTime()
	if !ok {
		// Nothing yet: data may arrive any moment, and the Querier refreshes
		// Info only every few seconds; never let it skip this node.
		mint = math.MinInt64
	}
	maxt := int64(math.MaxInt64) // live data: remote write appends up to now
	resp := &infopb.InfoResponse{
		ComponentType: "receive",
		LabelSets:     []labelpb.ZLabelSet{},
		Store: &infopb.StoreInfo{
			MinTime: mint, MaxTime: maxt,
			SupportsSharding:             true,
			SupportsWithoutReplicaLabels: true,
			TsdbInfos:                    []infopb.TSDBInfo{},
		},
	}
	zl := labelpb.ZLabelSet{Labels: ZLabels(s.cfg.ExternalLabels)}
	if !s.cfg.ExternalLabels.IsEmpty() {
		resp.LabelSets = append(resp.LabelSets, zl)
	}
	// One TSDB, even without external labels: a distributed Querier takes a
	// Query API endpoint's time range from its TSDB infos only, and skips an
	// endpoint that has none.
	resp.Store.TsdbInfos = append(resp.Store.TsdbInfos, infopb.TSDBInfo{Labels: zl, MinTime: mint, MaxTime: maxt})
	return resp, nil
}

// matchers converts the request's matchers and checks those on external
// labels against the node's values: ok is false when one excludes this node
// (nothing to return), and such matchers are not passed on to the tiers.
func (s *Server) matchers(ms []storepb.LabelMatcher) (out []*labels.Matcher, ok bool, err error) {
	pms, err := storepb.MatchersToPromMatchers(ms...)
	if err != nil {
		return nil, false, err
	}
	for _, m := range pms {
		if v := s.cfg.ExternalLabels.Get(m.Name); v != "" {
			if !m.Matches(v) {
				return nil, false, nil
			}
			continue
		}
		out = append(out, m)
	}
	return out, true, nil
}

// externalLabels returns the external labels minus those in drop.
func (s *Server) externalLabels(drop map[string]struct{}) labels.Labels {
	if len(drop) == 0 {
		return s.cfg.ExternalLabels
	}
	b := labels.NewBuilder(s.cfg.ExternalLabels)
	for n := range drop {
		b.Del(n)
	}
	return b.Labels()
}

func dropSet(names []string) map[string]struct{} {
	if len(names) == 0 {
		return nil
	}
	m := make(map[string]struct{}, len(names))
	for _, n := range names {
		m[n] = struct{}{}
	}
	return m
}

// seriesLabels is a series' labels as the node answers them: external
// labels added (winning over the series' own), drop removed.
func seriesLabels(l, ext labels.Labels, drop map[string]struct{}) labels.Labels {
	if ext.IsEmpty() && len(drop) == 0 {
		return l
	}
	b := labels.NewBuilder(l)
	for n := range drop {
		b.Del(n)
	}
	ext.Range(func(e labels.Label) { b.Set(e.Name, e.Value) })
	return b.Labels()
}

// labelQuerier is what LabelNames and LabelValues share: a concurrency slot,
// the request's matchers, and a querier over [start, end]. It returns a nil
// querier (and no error) when the matchers can match nothing; release closes
// the querier and frees the slot.
func (s *Server) labelQuerier(ctx context.Context, method string, pms []storepb.LabelMatcher, start, end int64) (storage.Querier, []*labels.Matcher, func(), error) {
	release, err := s.acquire(ctx, method)
	if err != nil {
		return nil, nil, nil, err
	}
	ms, ok, err := s.matchers(pms)
	if err != nil {
		release()
		s.rejected.WithLabelValues("bad_request").Inc()
		return nil, nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if !ok {
		release()
		return nil, nil, nil, nil
	}
	q := s.q.ResolutionQuerier(start, end, 0, 0)
	return q, ms, func() {
		_ = q.Close() // a querier over immutable data; nothing to flush
		release()
	}, nil
}

// LabelNames implements storepb.StoreServer.
func (s *Server) LabelNames(ctx context.Context, req *storepb.LabelNamesRequest) (*storepb.LabelNamesResponse, error) {
	q, ms, release, err := s.labelQuerier(ctx, "label_names", req.Matchers, req.Start, req.End)
	if err != nil || q == nil {
		return &storepb.LabelNamesResponse{}, err
	}
	defer release()
	names, annots, err := q.LabelNames(ctx, &storage.LabelHints{Limit: int(req.Limit)}, ms...)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	drop := dropSet(req.WithoutReplicaLabels)
	if len(names) > 0 {
		s.externalLabels(drop).Range(func(l labels.Label) { names = append(names, l.Name) })
		slices.Sort(names)
		names = slices.Compact(names)
		if req.Limit > 0 && int64(len(names)) > req.Limit {
			names = names[:req.Limit]
		}
	}
	return &storepb.LabelNamesResponse{Names: names, Warnings: warnings(annots)}, nil
}

// LabelValues implements storepb.StoreServer.
func (s *Server) LabelValues(ctx context.Context, req *storepb.LabelValuesRequest) (*storepb.LabelValuesResponse, error) {
	if req.Label == "" {
		s.rejected.WithLabelValues("bad_request").Inc()
		return nil, status.Error(codes.InvalidArgument, "label name parameter cannot be empty")
	}
	if slices.Contains(req.WithoutReplicaLabels, req.Label) {
		return &storepb.LabelValuesResponse{}, nil
	}
	q, ms, release, err := s.labelQuerier(ctx, "label_values", req.Matchers, req.Start, req.End)
	if err != nil || q == nil {
		return &storepb.LabelValuesResponse{}, err
	}
	defer release()
	if v := s.cfg.ExternalLabels.Get(req.Label); v != "" {
		// Every series of this node carries the external value.
		if len(ms) == 0 {
			return &storepb.LabelValuesResponse{Values: []string{v}}, nil
		}
		set := q.Select(ctx, false, &storage.SelectHints{Start: req.Start, End: req.End, Func: "series", Limit: 1}, ms...)
		if set.Next() {
			return &storepb.LabelValuesResponse{Values: []string{v}}, nil
		}
		if err := set.Err(); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		return &storepb.LabelValuesResponse{}, nil
	}
	vals, annots, err := q.LabelValues(ctx, req.Label, &storage.LabelHints{Limit: int(req.Limit)}, ms...)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &storepb.LabelValuesResponse{Values: vals, Warnings: warnings(annots)}, nil
}

// warnings returns the annotations the Querier should show as warnings:
// the stitched view's informational notes (which tiers served a query)
// stay local, as a single Strata reports them as infos, not warnings.
func warnings(a annotations.Annotations) []string {
	var out []string
	for _, err := range a {
		if errors.Is(err, annotations.PromQLInfo) {
			continue
		}
		out = append(out, err.Error())
	}
	slices.Sort(out)
	return out
}

// funcOf is the PromQL function a Series request serves, for the stitched
// view's choice of synthetic samples over rollups: the client's QueryHints
// when it sends them, else inferred from the aggregates Thanos asks for
// (Thanos' aggrsFromFunc, inverted).
func funcOf(req *storepb.SeriesRequest) (fn string, rng int64) {
	rng = req.Range
	if h := req.QueryHints; h != nil {
		if h.Func != nil && h.Func.Name != "" {
			fn = h.Func.Name
		}
		if h.Range != nil && h.Range.Millis > 0 {
			rng = h.Range.Millis
		}
	}
	if fn != "" {
		return fn, rng
	}
	if len(req.Aggregates) == 1 {
		switch req.Aggregates[0] {
		case storepb.Aggr_COUNTER:
			return "rate", rng
		case storepb.Aggr_MIN:
			return "min_over_time", rng
		case storepb.Aggr_MAX:
			return "max_over_time", rng
		case storepb.Aggr_SUM:
			return "sum_over_time", rng
		case storepb.Aggr_COUNT:
			// count(...), count_values(...) and count_over_time all ask
			// for COUNT, and the Querier tells them apart by nothing it
			// sends. The plain-selector samples (a window's last value)
			// answer the two operators as a single Strata does, at one
			// sample a window; count_over_time's synthetic samples (Count
			// of them a window, for the engine to count) would cost 240
			// an hour window of 15 s scrapes for every count(...), and
			// count_values would group them by the wrong values. So
			// count_over_time counts windows, as it does over Thanos' own
			// downsampled blocks (docs/scale-out.md); a client that sends
			// QueryHints.Func gets it counted exactly.
			return "", rng
		}
	}
	// COUNT+SUM (every other function, plain selectors) or none: the
	// plain-selector samples.
	return "", rng
}

// describe is a request's selector, for errors and logs.
func describe(ms []storepb.LabelMatcher) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.PromString()
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// ZLabels converts labels to the StoreAPI's, copying. (labelpb's own
// converters reinterpret the memory of a labels.Labels as a []ZLabel, which
// is only right when Prometheus is built with the slicelabels tag, as Thanos
// is; Strata uses Prometheus' default label representation.)
func ZLabels(l labels.Labels) []labelpb.ZLabel {
	out := make([]labelpb.ZLabel, 0, l.Len())
	l.Range(func(x labels.Label) { out = append(out, labelpb.ZLabel{Name: x.Name, Value: x.Value}) })
	return out
}

// PromLabels converts StoreAPI labels to Prometheus', copying.
func PromLabels(zl []labelpb.ZLabel) labels.Labels {
	b := labels.NewScratchBuilder(len(zl))
	for _, l := range zl {
		b.Add(l.Name, l.Value)
	}
	b.Sort()
	return b.Labels()
}
