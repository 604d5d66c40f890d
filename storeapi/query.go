package storeapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/thanos-io/thanos/pkg/api/query/querypb"
	"github.com/thanos-io/thanos/pkg/store/storepb"
	"github.com/thanos-io/thanos/pkg/store/storepb/prompb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/strata-dev/strata/internal/seriesset"
)

// maxPointsPerSeries bounds a QueryRange request's steps, as Prometheus'
// HTTP API does (11,000 points a series).
const maxPointsPerSeries = 11_000

// QueryServer serves Thanos' Query API (querypb: Query and QueryRange), the
// API a Thanos Querier in distributed mode (--query.mode=distributed) pushes
// subqueries down to. Each request is evaluated by Strata's own PromQL
// engine (the one behind /api/v1/query and /api/v1/query_range, with its
// limits) over the stitched tiers, so rollups are read exactly as a single
// Strata reads them, and only result series cross the wire.
//
// The series the engine sees carry the node's external labels, as the
// StoreAPI sends them, minus the replica labels the request names: the
// Querier's distributed engine pushes `sum by (x) (...)` down as
// `sum by (x, <external labels>) (...)` and deduplicates an HA pair's
// identical answers by their labels. See the package doc for what is not
// supported. It is safe for concurrent use.
type QueryServer struct {
	querypb.UnimplementedQueryServer

	s      *Server
	engine promql.QueryEngine
	q      storage.Queryable
	shared *sharedSelects // q, with concurrent requests' same selects read once
	// evals: the selectors of pushed aggregations (aggregate.go), evaluated
	// once for concurrent requests.
	evals *graceCache[evalKey, *selectorMatrix]
	// fused: pushed aggregations' fused passes (fused.go), shared alike.
	fused *graceCache[fusedKey, *fusedResult]
	now   func() time.Time

	lookbackMu sync.Mutex
	lookback   time.Duration // the engine's default lookback delta, once known
}

// NewQueryServer returns a Query API server evaluating with engine over q,
// with s's external labels and metrics. Register it with NewGRPCServer,
// which then announces the Query API in Info.
//
// Requests whose selects are the same (the `sum` and the `count` a
// distributed Querier splits an `avg` into) read q once (sharedSelects), and
// range queries of the form `sum|count|min|max by (labels) (selector)`
// evaluate the selector once for all such requests running at once
// (aggregate.go); selections and evaluations are held for a short grace
// period after their last request, which Close ends.
func NewQueryServer(s *Server, engine promql.QueryEngine, q storage.Queryable) *QueryServer {
	return &QueryServer{s: s, engine: engine, q: q, now: time.Now,
		shared: newSharedSelects(q, sharedSelectGrace, sharedSelectMax, s.querySelectsShared),
		evals:  newGraceCache[evalKey](sharedSelectGrace, sharedSelectMax, s.queryEvaluationsShared, closeSelectorMatrix),
		fused:  newGraceCache[fusedKey](sharedSelectGrace, sharedSelectMax, s.queryEvaluationsShared, func(*fusedResult) {}),
	}
}

// Close drops the selections and evaluations held for later requests and
// stops sharing them; requests still running finish. Call it once the gRPC
// server has stopped, before closing the tiers.
func (qs *QueryServer) Close() {
	qs.fused.close()
	qs.evals.close()
	qs.shared.close()
}

// Query implements querypb.QueryServer: an instant query.
func (qs *QueryServer) Query(req *querypb.QueryRequest, srv querypb.Query_QueryServer) error {
	qs.s.requests.WithLabelValues("query").Inc()
	ts := qs.now()
	if req.TimeSeconds != 0 {
		ts = time.Unix(req.TimeSeconds, 0)
	}
	ev := evaluation{
		query: req.Query, plan: req.QueryPlan, timeout: req.TimeoutSeconds, lookback: req.LookbackDeltaSeconds,
		replicaLabels: req.ReplicaLabels, storeMatchers: req.StoreMatchers, shard: req.ShardInfo,
	}
	return qs.run(srv.Context(), ev, int(req.ResponseBatchSize),
		engineExec(func(ctx context.Context, q storage.Queryable, opts promql.QueryOpts) (promql.Query, error) {
			return qs.engine.NewInstantQuery(ctx, q, opts, req.Query, ts)
		}),
		func(ws []error) error { return srv.Send(querypb.NewQueryWarningsResponse(ws...)) },
		seriesSender(srv, req.ResponseBatchSize,
			func(s *prompb.TimeSeries) error { return srv.Send(querypb.NewQueryResponse(s)) },
			func(b []*prompb.TimeSeries) error { return srv.Send(querypb.NewQueryBatchResponse(b)) }),
		func(st *querypb.QueryStats) error { return srv.Send(querypb.NewQueryStatsResponse(st)) })
}

// QueryRange implements querypb.QueryServer: a range query.
func (qs *QueryServer) QueryRange(req *querypb.QueryRangeRequest, srv querypb.Query_QueryRangeServer) error {
	qs.s.requests.WithLabelValues("query_range").Inc()
	start, end := time.Unix(req.StartTimeSeconds, 0), time.Unix(req.EndTimeSeconds, 0)
	step := time.Duration(req.IntervalSeconds) * time.Second
	switch {
	case req.IntervalSeconds <= 0:
		return qs.badRequest("zero or negative query resolution step width (interval_seconds %d)", req.IntervalSeconds)
	case end.Before(start):
		return qs.badRequest("end time %d before start time %d", req.EndTimeSeconds, req.StartTimeSeconds)
	case end.Sub(start)/step >= maxPointsPerSeries:
		return qs.badRequest("exceeded maximum resolution of %d points per timeseries: try a longer interval", maxPointsPerSeries)
	}
	ev := evaluation{
		query: req.Query, plan: req.QueryPlan, timeout: req.TimeoutSeconds, lookback: req.LookbackDeltaSeconds,
		replicaLabels: req.ReplicaLabels, storeMatchers: req.StoreMatchers, shard: req.ShardInfo,
	}
	exec := engineExec(func(ctx context.Context, q storage.Queryable, opts promql.QueryOpts) (promql.Query, error) {
		return qs.engine.NewRangeQuery(ctx, q, opts, req.Query, start, end, step)
	})
	if a, ok := aggregationOf(req.Query); ok {
		exec = qs.aggregationExec(a, ev, start, end, step, exec)
	}
	return qs.run(srv.Context(), ev, int(req.ResponseBatchSize), exec,
		func(ws []error) error { return srv.Send(querypb.NewQueryRangeWarningsResponse(ws...)) },
		seriesSender(srv, req.ResponseBatchSize,
			func(s *prompb.TimeSeries) error { return srv.Send(querypb.NewQueryRangeResponse(s)) },
			func(b []*prompb.TimeSeries) error { return srv.Send(querypb.NewQueryRangeBatchResponse(b)) }),
		func(st *querypb.QueryStats) error { return srv.Send(querypb.NewQueryRangeStatsResponse(st)) })
}

// seriesSender sends a Query or QueryRange answer's series: batches of
// more than one when the request asks for them (batchSize), encoded by
// encodeSeries when the batcher gives their sizes, else by gogoproto
// through one (a series) or many (a batch).
func seriesSender(srv grpc.ServerStream, batchSize int64, one func(*prompb.TimeSeries) error, many func([]*prompb.TimeSeries) error) func([]*prompb.TimeSeries, []int) error {
	batch := batchSize > 1
	return func(b []*prompb.TimeSeries, sizes []int) error {
		switch {
		case sizes != nil:
			return srv.SendMsg(encodeSeries(b, sizes, batch))
		case !batch:
			return one(b[0])
		}
		return many(b)
	}
}

// evaluation is what Query and QueryRange requests share.
type evaluation struct {
	query         string
	plan          *querypb.QueryPlan
	timeout       int64 // seconds, 0: none but the engine's
	lookback      int64 // seconds, 0: the engine's
	replicaLabels []string
	storeMatchers []querypb.StoreMatchers
	shard         *storepb.ShardInfo
}

func (qs *QueryServer) badRequest(format string, args ...any) error {
	qs.s.rejected.WithLabelValues("bad_request").Inc()
	return status.Errorf(codes.InvalidArgument, "strata: "+format, args...)
}

// result is an evaluated request: its value, warnings and sample
// statistics; close (when not nil) releases the value's memory, which is
// the engine's until then.
type result struct {
	value parser.Value
	// series, when not nil, is the answer already in the Query API's form
	// (value is then nil).
	series   []*prompb.TimeSeries
	warnings annotations.Annotations
	stats    *querypb.QueryStats
	close    func()
}

// execFunc evaluates a request over q. Its errors are the engine's.
type execFunc func(ctx context.Context, q storage.Queryable, opts promql.QueryOpts) (result, error)

// engineExec evaluates a request with the engine.
func engineExec(newQuery func(context.Context, storage.Queryable, promql.QueryOpts) (promql.Query, error)) execFunc {
	return func(ctx context.Context, q storage.Queryable, opts promql.QueryOpts) (result, error) {
		qry, err := newQuery(ctx, q, opts)
		if err != nil {
			return result{}, err
		}
		res := qry.Exec(ctx)
		if res.Err != nil {
			qry.Close()
			return result{}, res.Err
		}
		st := &querypb.QueryStats{}
		if stats := qry.Stats(); stats != nil && stats.Samples != nil {
			st.SamplesTotal = stats.Samples.TotalSamples
			st.PeakSamples = int64(stats.Samples.PeakSamples)
		}
		return result{value: res.Value, warnings: res.Warnings, stats: st, close: qry.Close}, nil
	}
}

// run evaluates one request and streams its answer: warnings first, then
// the series in batches of batchSize (one a message when at most 1), then
// the query's sample statistics, as Thanos' own Query API does.
func (qs *QueryServer) run(ctx context.Context, ev evaluation, batchSize int, exec execFunc,
	sendWarnings func([]error) error, sendBatch func([]*prompb.TimeSeries, []int) error, sendStats func(*querypb.QueryStats) error,
) error {
	if ev.query == "" {
		if ev.plan != nil {
			return qs.badRequest("the request has a query plan but no query string: Strata evaluates the query string with its own engine")
		}
		return qs.badRequest("empty query")
	}
	if ev.timeout < 0 || ev.lookback < 0 {
		return qs.badRequest("negative timeout (%d s) or lookback delta (%d s)", ev.timeout, ev.lookback)
	}
	selected, err := qs.storeSelected(ev.storeMatchers)
	if err != nil {
		return qs.badRequest("store matchers: %v", err)
	}
	if !selected {
		// The client's store matchers exclude this node: it answers nothing,
		// as a Thanos store the matchers do not select.
		return sendStats(&querypb.QueryStats{})
	}
	if ev.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(ev.timeout)*time.Second)
		defer cancel()
	}
	drop := dropSet(ev.replicaLabels)
	q := &externalQueryable{q: qs.shared, s: qs.s, ext: qs.s.externalLabels(drop), drop: drop, shard: ev.shard}
	opts := promql.NewPrometheusQueryOpts(false, time.Duration(ev.lookback)*time.Second, nil)
	res, err := exec(ctx, q, opts)
	if err != nil {
		if ctx.Err() != nil && !errors.As(err, new(promql.ErrQueryTimeout)) {
			return status.FromContextError(ctx.Err()).Err()
		}
		return qs.queryError(err)
	}
	if res.close != nil {
		defer res.close()
	}
	if ws := warnings(res.warnings); len(ws) > 0 {
		errs := make([]error, len(ws))
		for i, w := range ws {
			errs[i] = errors.New(w)
		}
		if err := sendWarnings(errs); err != nil {
			return status.Error(codes.Aborted, err.Error())
		}
	}
	series := res.series
	if series == nil {
		series, err = resultSeries(res.value)
		if err != nil {
			qs.s.rejected.WithLabelValues("unsupported").Inc()
			return status.Error(codes.Unimplemented, err.Error())
		}
	}
	out := seriesBatcher{send: sendBatch, size: max(batchSize, 1)}
	for _, s := range series {
		if err := out.add(s); err != nil {
			return status.Error(codes.Aborted, err.Error())
		}
	}
	if err := out.flush(); err != nil {
		return status.Error(codes.Aborted, err.Error())
	}
	qs.s.querySeries.Add(float64(len(series)))
	if err := sendStats(res.stats); err != nil {
		return status.Error(codes.Aborted, err.Error())
	}
	return nil
}

// storeSelected reports whether the request's store matchers (any of the
// sets; none: every store) select this node by its external labels.
func (qs *QueryServer) storeSelected(sms []querypb.StoreMatchers) (bool, error) {
	if len(sms) == 0 {
		return true, nil
	}
	for _, sm := range sms {
		ms, err := storepb.MatchersToPromMatchers(sm.LabelMatchers...)
		if err != nil {
			return false, err
		}
		all := true
		for _, m := range ms {
			if !m.Matches(qs.s.cfg.ExternalLabels.Get(m.Name)) {
				all = false
				break
			}
		}
		if all {
			return true, nil
		}
	}
	return false, nil
}

// queryError maps an engine error onto a gRPC status and counts it:
// a query that does not parse or cannot be evaluated is the client's
// (InvalidArgument), a limit is ResourceExhausted, a timeout
// DeadlineExceeded, a storage failure Internal.
func (qs *QueryServer) queryError(err error) error {
	var (
		parseErrs parser.ParseErrors
		parseErr  *parser.ParseErr
		timeout   promql.ErrQueryTimeout
		canceled  promql.ErrQueryCanceled
		tooMany   promql.ErrTooManySamples
		storage   promql.ErrStorage
	)
	msg := "strata: " + err.Error()
	switch {
	case errors.As(err, &parseErrs), errors.As(err, &parseErr):
		qs.s.rejected.WithLabelValues("bad_request").Inc()
		return status.Error(codes.InvalidArgument, msg)
	case errors.As(err, &timeout):
		qs.s.rejected.WithLabelValues("query_timeout").Inc()
		return status.Error(codes.DeadlineExceeded, msg)
	case errors.As(err, &canceled):
		return status.Error(codes.Canceled, msg)
	case errors.As(err, &tooMany):
		qs.s.rejected.WithLabelValues("query_max_samples").Inc()
		return status.Error(codes.ResourceExhausted, msg+" (query max_samples)")
	case errors.As(err, &storage):
		return status.Error(codes.Internal, msg)
	}
	// The engine's evaluation errors (e.g. many-to-many matching): what
	// Prometheus' HTTP API answers with 422.
	qs.s.rejected.WithLabelValues("bad_request").Inc()
	return status.Error(codes.InvalidArgument, msg)
}

// resultSeries converts a PromQL result into the Query API's series. The
// labels are copied: the result's memory belongs to the query.
func resultSeries(v parser.Value) ([]*prompb.TimeSeries, error) {
	switch v := v.(type) {
	case promql.Matrix:
		out := make([]*prompb.TimeSeries, len(v))
		for i, s := range v {
			floats, hists := prompb.SamplesFromPromqlSeries(s)
			out[i] = &prompb.TimeSeries{Labels: ZLabels(s.Metric), Samples: floats, Histograms: hists}
		}
		return out, nil
	case promql.Vector:
		out := make([]*prompb.TimeSeries, len(v))
		for i, s := range v {
			floats, hists := prompb.SamplesFromPromqlSamples(s)
			out[i] = &prompb.TimeSeries{Labels: ZLabels(s.Metric), Samples: floats, Histograms: hists}
		}
		return out, nil
	case promql.Scalar:
		return []*prompb.TimeSeries{{Samples: []prompb.Sample{{Value: v.V, Timestamp: v.T}}}}, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("strata: a %s result cannot be sent through the Query API (vectors, matrices and scalars only)", v.Type())
}

// seriesBatcher groups result series into messages of at most size series
// and about maxFrameBytes of samples. send is given the series' encoded
// sizes (wireSize) when every one of them has one, so that the message is
// encoded by encodeSeries, else nil.
type seriesBatcher struct {
	send  func(series []*prompb.TimeSeries, sizes []int) error
	size  int
	batch []*prompb.TimeSeries
	sizes []int
	gogo  bool // a series of the batch is gogoproto's to encode
	bytes int
}

func (b *seriesBatcher) add(s *prompb.TimeSeries) error {
	n, ok := wireSize(s)
	if !ok {
		n, b.gogo = s.Size(), true
	}
	b.batch, b.sizes = append(b.batch, s), append(b.sizes, n)
	b.bytes += n
	if len(b.batch) >= b.size || b.bytes >= maxFrameBytes {
		return b.flush()
	}
	return nil
}

func (b *seriesBatcher) flush() error {
	if len(b.batch) == 0 {
		return nil
	}
	sizes := b.sizes
	if b.gogo {
		sizes = nil
	}
	if b.size == 1 {
		for i, s := range b.batch {
			var n []int
			if sizes != nil {
				n = sizes[i : i+1]
			}
			if err := b.send([]*prompb.TimeSeries{s}, n); err != nil {
				return err
			}
		}
	} else if err := b.send(b.batch, sizes); err != nil {
		return err
	}
	clear(b.batch)
	b.batch, b.sizes, b.bytes, b.gogo = b.batch[:0], b.sizes[:0], 0, false
	return nil
}

// externalQueryable is the node's data as a Query API request sees it:
// every series with the external labels added (they win over a series label
// of the same name) and the request's replica labels removed, restricted to
// the request's shard (Thanos' query sharding). Matchers on external labels
// are checked against the node's values instead of the series'.
type externalQueryable struct {
	q     storage.Queryable
	s     *Server
	ext   labels.Labels // the external labels minus drop
	drop  map[string]struct{}
	shard *storepb.ShardInfo
}

func (e *externalQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := e.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	return &externalQuerier{Querier: q, e: e}, nil
}

type externalQuerier struct {
	storage.Querier
	e *externalQueryable
}

// anyName selects every series: what is left of a selector whose matchers
// were all on external labels.
var anyName = labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+")

// own returns the matchers the tiers are asked with, false when a matcher on
// an external label excludes this node.
func (q *externalQuerier) own(ms []*labels.Matcher) ([]*labels.Matcher, bool) {
	out := make([]*labels.Matcher, 0, len(ms))
	for _, m := range ms {
		if v := q.e.s.cfg.ExternalLabels.Get(m.Name); v != "" {
			if !m.Matches(v) {
				return nil, false
			}
			continue
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		out = append(out, anyName)
	}
	return out, true
}

func (q *externalQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	own, ok := q.own(ms)
	if !ok {
		return storage.EmptySeriesSet()
	}
	relabel := !q.e.ext.IsEmpty() || len(q.e.drop) > 0
	set := q.Querier.Select(ctx, sortSeries, hints, own...)
	if !relabel && q.e.shard == nil {
		return set
	}
	out := &externalSeriesSet{SeriesSet: set, e: q.e, matcher: q.e.shard.Matcher(&q.e.s.buffers)}
	if sortSeries && relabel {
		// The labels added and removed can change the order.
		return seriesset.Sorted(out)
	}
	return out
}

func (q *externalQuerier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	own, ok := q.own(ms)
	if !ok {
		return nil, nil, nil
	}
	names, annots, err := q.Querier.LabelNames(ctx, hints, own...)
	if err != nil || len(names) == 0 {
		return names, annots, err
	}
	names = dropNames(names, q.e.drop)
	q.e.ext.Range(func(l labels.Label) { names = append(names, l.Name) })
	names = sortCompact(names)
	return names, annots, nil
}

func (q *externalQuerier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	if _, ok := q.e.drop[name]; ok {
		return nil, nil, nil
	}
	own, ok := q.own(ms)
	if !ok {
		return nil, nil, nil
	}
	if v := q.e.ext.Get(name); v != "" {
		names, annots, err := q.Querier.LabelNames(ctx, hints, own...)
		if err != nil || len(names) == 0 {
			return nil, annots, err
		}
		return []string{v}, annots, nil
	}
	return q.Querier.LabelValues(ctx, name, hints, own...)
}

func dropNames(names []string, drop map[string]struct{}) []string {
	out := names[:0]
	for _, n := range names {
		if _, ok := drop[n]; !ok {
			out = append(out, n)
		}
	}
	return out
}

func sortCompact(names []string) []string {
	slices.Sort(names)
	return slices.Compact(names)
}

// externalSeriesSet relabels a set's series and skips those of other shards.
type externalSeriesSet struct {
	storage.SeriesSet
	e       *externalQueryable
	matcher *storepb.ShardMatcher
	cur     storage.Series
}

func (s *externalSeriesSet) Next() bool {
	for s.SeriesSet.Next() {
		sr := s.SeriesSet.At()
		l := seriesLabels(sr.Labels(), s.e.ext, s.e.drop)
		if s.matcher.IsSharded() && !s.matcher.MatchesZLabels(ZLabels(l)) {
			continue
		}
		s.cur = relabelledSeries{Series: sr, lbls: l}
		return true
	}
	s.matcher.Close() // its buffer back to the pool; Next is not called again
	s.matcher = &storepb.ShardMatcher{}
	return false
}

func (s *externalSeriesSet) At() storage.Series { return s.cur }

type relabelledSeries struct {
	storage.Series
	lbls labels.Labels
}

func (s relabelledSeries) Labels() labels.Labels { return s.lbls }
