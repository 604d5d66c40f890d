package storeapi

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/util/annotations"
	"github.com/thanos-io/thanos/pkg/api/query/querypb"
	"github.com/thanos-io/thanos/pkg/store/storepb/prompb"

	"github.com/strata-dev/strata/internal/seriesset"
)

// countingQueryable counts the selects and queriers of the queryable it
// wraps; a select waits for gate when gate is not nil, and fails with
// failNext's error when set.
type countingQueryable struct {
	q               storage.Queryable
	selects, opened atomic.Int64
	closed          atomic.Int64
	gate            chan struct{}
	mu              sync.Mutex
	failNext        error
}

func (c *countingQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	q, err := c.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	c.opened.Add(1)
	return &countingQuerier{Querier: q, c: c}, nil
}

type countingQuerier struct {
	storage.Querier
	c      *countingQueryable
	closed bool
}

func (q *countingQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	q.c.selects.Add(1)
	if q.c.gate != nil {
		select {
		case <-q.c.gate:
		case <-ctx.Done():
			return storage.ErrSeriesSet(ctx.Err())
		}
	}
	q.c.mu.Lock()
	err := q.c.failNext
	q.c.failNext = nil
	q.c.mu.Unlock()
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	return q.Querier.Select(ctx, sortSeries, hints, ms...)
}

func (q *countingQuerier) Close() error {
	if q.closed {
		panic("querier closed twice")
	}
	q.closed = true
	q.c.closed.Add(1)
	return q.Querier.Close()
}

// listQueryable is a queryable over fixed series.
type listQueryable struct{ series []storage.Series }

func (l listQueryable) Querier(int64, int64) (storage.Querier, error) {
	return listQuerier(l), nil
}

type listQuerier struct{ series []storage.Series }

func (l listQuerier) Select(_ context.Context, _ bool, _ *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	var out []storage.Series
	for _, s := range l.series {
		ok := true
		for _, m := range ms {
			ok = ok && m.Matches(s.Labels().Get(m.Name))
		}
		if ok {
			out = append(out, s)
		}
	}
	return seriesset.List(out, nil)
}
func (listQuerier) LabelValues(context.Context, string, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}

func (listQuerier) LabelNames(context.Context, *storage.LabelHints, ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	return nil, nil, nil
}
func (listQuerier) Close() error { return nil }

func testSeries() listQueryable {
	var out []storage.Series
	for g := range 3 {
		out = append(out, storage.NewListSeries(gpuLabels(g), []chunks.Sample{fsample{1000, float64(g)}, fsample{2000, float64(g + 1)}}))
	}
	return listQueryable{out}
}

// selectAll runs a select on q and returns its series' labels and samples.
func selectAll(ctx context.Context, t *testing.T, q storage.Querier, fn string) ([]string, error) {
	t.Helper()
	set := q.Select(ctx, false, &storage.SelectHints{Start: 0, End: 3000, Step: 1000, Func: fn}, labels.MustNewMatcher(labels.MatchEqual, "__name__", "gpu_temp"))
	return seriesStrings(set)
}

// seriesStrings reads a set whole: each series' labels and float samples
// as one string.
func seriesStrings(set storage.SeriesSet) ([]string, error) {
	var out []string
	var it chunkenc.Iterator
	for set.Next() {
		s := set.At()
		it = s.Iterator(it)
		str := s.Labels().String()
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			str += " " + fsample{ts, v}.String()
		}
		out = append(out, str)
	}
	return out, set.Err()
}

func newTestShared(q storage.Queryable, grace time.Duration, maxEntries int) (*sharedSelects, prometheus.Counter) {
	hits := prometheus.NewCounter(prometheus.CounterOpts{Name: "hits"})
	return newSharedSelects(q, grace, maxEntries, hits), hits
}

// TestSharedSelects: selects that read alike (a sum and a count over the
// same selector) read once when one comes after the other is done, within
// the grace period; two at once read once each (a selection's series are
// iterated by one request at a time: TestSharedSelectsIteratedAlone);
// others read on their own; a selection is dropped, and its querier
// closed, after the grace period; errors are not kept.
func TestSharedSelects(t *testing.T) {
	ctx := context.Background()
	cq := &countingQueryable{q: testSeries(), gate: make(chan struct{})}
	c, hits := newTestShared(cq, 50*time.Millisecond, 4)

	// A sum and a count arriving together: the second waits for the
	// first's select, finds its series in use and reads on its own.
	var wg sync.WaitGroup
	results := make([][]string, 2)
	qs := make([]storage.Querier, 2)
	for i, fn := range []string{"sum", "count"} {
		qs[i], _ = c.Querier(0, 3000)
		wg.Go(func() {
			var err error
			if results[i], err = selectAll(ctx, t, qs[i], fn); err != nil {
				t.Error(err)
			}
		})
	}
	waitFor(t, "both selects waiting", func() bool { return c.cache.holders() == 2 })
	close(cq.gate)
	wg.Wait()
	if n, h := cq.selects.Load(), testutil.ToFloat64(hits); n != 2 || h != 0 {
		t.Fatalf("%d selects and %v shared for a sum and a count iterating at once, want 2 and 0", n, h)
	}
	if len(results[0]) != 3 || !slices.Equal(results[0], results[1]) {
		t.Fatalf("the sum's select read %v, the count's %v", results[0], results[1])
	}
	// A function over a range reads other samples: its own select.
	q3, _ := c.Querier(0, 3000)
	if _, err := selectAll(ctx, t, q3, "rate"); err != nil {
		t.Fatal(err)
	}
	if n := cq.selects.Load(); n != 3 {
		t.Fatalf("%d selects after a rate, want 3", n)
	}
	for _, q := range append(qs, q3) {
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Within the grace period a later request still shares; after it the
	// selections are dropped and their queriers closed.
	q4, _ := c.Querier(0, 3000)
	if got, _ := selectAll(ctx, t, q4, ""); !slices.Equal(got, results[0]) || cq.selects.Load() != 3 || testutil.ToFloat64(hits) != 1 {
		t.Fatalf("within the grace period: %d selects, %v shared, read %v", cq.selects.Load(), testutil.ToFloat64(hits), got)
	}
	_ = q4.Close()
	waitFor(t, "the selections dropped", func() bool { return c.len() == 0 })
	if o, cl := cq.opened.Load(), cq.closed.Load(); o != 3 || cl != 3 {
		t.Fatalf("%d queriers opened, %d closed; want 3 and 3", o, cl)
	}
	q5, _ := c.Querier(0, 3000)
	if _, err := selectAll(ctx, t, q5, "sum"); err != nil {
		t.Fatal(err)
	}
	_ = q5.Close()
	if n := cq.selects.Load(); n != 4 {
		t.Fatalf("%d selects after the grace period, want 4", n)
	}

	// An error is answered, not kept.
	cq.mu.Lock()
	cq.failNext = errors.New("disk on fire")
	cq.mu.Unlock()
	waitFor(t, "the selections dropped", func() bool { return c.len() == 0 })
	q6, _ := c.Querier(0, 3000)
	if _, err := selectAll(ctx, t, q6, "sum"); err == nil || err.Error() != "disk on fire" {
		t.Fatalf("error %v, want the select's", err)
	}
	q7, _ := c.Querier(0, 3000)
	if got, err := selectAll(ctx, t, q7, "sum"); err != nil || len(got) != 3 {
		t.Fatalf("after an error: %v, %v", got, err)
	}
	_, _ = q6.Close(), q7.Close()

	// Past the bound on selections held, a select reads on its own.
	waitFor(t, "the selections dropped", func() bool { return c.len() == 0 })
	c.cache.max = 1
	q8, _ := c.Querier(0, 3000)
	q9, _ := c.Querier(0, 3000)
	before := cq.selects.Load()
	if _, err := selectAll(ctx, t, q8, "sum"); err != nil {
		t.Fatal(err)
	}
	if _, err := selectAll(ctx, t, q9, "rate"); err != nil {
		t.Fatal(err)
	}
	if n := cq.selects.Load() - before; n != 2 || c.len() != 1 {
		t.Fatalf("%d selects, %d held; want 2 and 1", n, c.len())
	}
	_, _ = q8.Close(), q9.Close()

	// close drops what no request holds, and ends sharing.
	c.close()
	if c.len() != 0 {
		t.Fatalf("%d selections held after close", c.len())
	}
	waitFor(t, "every querier closed", func() bool { return cq.opened.Load() == cq.closed.Load() })
}

// TestSharedSelectFirstGivesUp: when the request that runs a shared select
// is canceled, one waiting for it runs its own.
func TestSharedSelectFirstGivesUp(t *testing.T) {
	cq := &countingQueryable{q: testSeries(), gate: make(chan struct{})}
	c, _ := newTestShared(cq, time.Minute, 4)
	first, cancel := context.WithCancel(context.Background())
	q1, _ := c.Querier(0, 3000)
	q2, _ := c.Querier(0, 3000)
	var wg sync.WaitGroup
	var err1 error
	wg.Go(func() { _, err1 = selectAll(first, t, q1, "sum") })
	waitFor(t, "the first select running", func() bool { return cq.selects.Load() == 1 })
	var got []string
	var err2 error
	wg.Go(func() { got, err2 = selectAll(context.Background(), t, q2, "count") })
	waitFor(t, "the second waiting", func() bool { return c.cache.holders() == 2 })
	cancel()
	waitFor(t, "the second's own select", func() bool { return cq.selects.Load() == 2 })
	close(cq.gate)
	wg.Wait()
	if !errors.Is(err1, context.Canceled) {
		t.Errorf("the canceled request: %v", err1)
	}
	if err2 != nil || len(got) != 3 {
		t.Errorf("the waiting request: %v, %v", got, err2)
	}
	_, _ = q1.Close(), q2.Close()
	if o, cl := cq.opened.Load(), cq.closed.Load(); o != cl {
		t.Errorf("%d queriers opened, %d closed", o, cl)
	}
}

// TestSharedSelectAggregationsReadAlike: the stitched view reads the same
// series and samples for a plain selector under every aggregation operator
// as for one under none, over each tier (what keying selects by
// selectFunc relies on); and differently for a function over a range.
func TestSharedSelectAggregationsReadAlike(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	read := func(fn string, start, end, step, rng int64) []string {
		q, err := f.stitched.Querier(start, end)
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		out, err := seriesStrings(q.Select(ctx, false, &storage.SelectHints{Start: start, End: end, Step: step, Func: fn, Range: rng}, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+")))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for _, tc := range []struct {
		name             string
		start, end, step int64
	}{
		{"hour tier", t0 + 3*hourMs, t0 + 40*hourMs, hourMs},
		{"minute tier", t0 + 3*hourMs, t0 + 5*hourMs, 5 * minMs},
		{"raw", t0 + 3*hourMs, t0 + 4*hourMs, 15_000},
	} {
		plain := read("", tc.start, tc.end, tc.step, 0)
		if len(plain) != 5 {
			t.Fatalf("%s: %d series, want the fixture's 5", tc.name, len(plain))
		}
		for agg := range aggregations {
			if got := read(agg, tc.start, tc.end, tc.step, 0); !slices.Equal(got, plain) {
				t.Errorf("%s: a select under %s reads other samples than a plain selector's", tc.name, agg)
			}
		}
		if tc.name != "raw" {
			if got := read("rate", tc.start, tc.end, tc.step, 2*tc.step); slices.Equal(got, plain) {
				t.Errorf("%s: rate reads a plain selector's samples: the test cannot tell selects apart", tc.name)
			}
		}
	}
}

// TestQueryAPISharesAvgHalves: the sum and the count a distributed Querier
// splits an avg into, sent at once, read the tiers once and answer what
// the engine computes over the tiers directly, over rollups and over raw
// data: over a plain selector one evaluates it and the other aggregates its
// matrix (aggregate.go); over a function (which the engine evaluates) the
// second iterates the first's selection when the first is done with it,
// and reads on its own while the first iterates it (its series are not
// iterated by two requests at once: TestSharedSelectsIteratedAlone).
func TestQueryAPISharesAvgHalves(t *testing.T) {
	f := newFixture(t)
	s, _ := newServer(t, f, shardConfig())
	engine := newEngine(0)
	cq := &countingQueryable{q: f.stitched}
	qs := NewQueryServer(s, engine, cq)
	t.Cleanup(qs.Close)
	c := querypb.NewQueryClient(serve(t, s, qs))
	for _, tc := range []struct {
		name             string
		start, end, step int64
		inner            string
		counter          prometheus.Counter // the request that shares counts here
		mayReadTwice     bool               // both read when they iterate at once
	}{
		{"hour tier", t0 + 3*hourMs, t0 + 40*hourMs, hourMs, "gpu_temp", s.queryEvaluationsShared, false},
		{"raw", t0 + 3*hourMs, t0 + 4*hourMs, 15_000, "gpu_temp", s.queryEvaluationsShared, false},
		{"hour tier, a function", t0 + 3*hourMs, t0 + 40*hourMs, hourMs, "max_over_time(gpu_temp[2h])", s.querySelectsShared, true},
		{"raw, a function", t0 + 3*hourMs, t0 + 4*hourMs, 15_000, "max_over_time(gpu_temp[1m])", s.querySelectsShared, true},
	} {
		selects0, hits0 := cq.selects.Load(), testutil.ToFloat64(tc.counter)
		var wg sync.WaitGroup
		answers := make([]queryAnswer, 2)
		for i, agg := range []string{"sum", "count"} {
			wg.Go(func() {
				var err error
				answers[i], err = queryRange(t, c, &querypb.QueryRangeRequest{
					Query: agg + ` by (gpu, shard) (` + tc.inner + `)`, StartTimeSeconds: tc.start / 1000, EndTimeSeconds: tc.end / 1000,
					IntervalSeconds: tc.step / 1000, ReplicaLabels: []string{"replica"},
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		switch n, shared := cq.selects.Load()-selects0, testutil.ToFloat64(tc.counter)-hits0; {
		case n == 1 && shared == 1: // one read, or one evaluation, for both
		case tc.mayReadTwice && n == 2 && shared == 0: // they iterated at once: a read each
		default:
			t.Errorf("%s: %d selects for the sum and the count, the shared requests' counter grew by %g; want 1 and 1", tc.name, n, shared)
		}
		for i, agg := range []string{"sum", "count"} {
			direct, err := engine.NewRangeQuery(context.Background(), f.stitched, nil, agg+` by (gpu) (`+tc.inner+`)`, time.UnixMilli(tc.start), time.UnixMilli(tc.end), time.Duration(tc.step)*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			want := direct.Exec(context.Background())
			if want.Err != nil {
				t.Fatal(want.Err)
			}
			wm := want.Value.(promql.Matrix)
			got := answers[i].series
			if len(got) != len(wm) || len(wm) != 4 {
				t.Fatalf("%s %s: %d series, want %d", tc.name, agg, len(got), len(wm))
			}
			for _, w := range wm {
				wl := labels.NewBuilder(w.Metric).Set("shard", "1").Labels()
				k := slices.IndexFunc(got, func(s *prompb.TimeSeries) bool { return labels.Equal(PromLabels(s.Labels), wl) })
				if k < 0 {
					t.Fatalf("%s %s: no series %s", tc.name, agg, wl)
				}
				if len(got[k].Samples) != len(w.Floats) {
					t.Fatalf("%s %s %s: %d samples, want %d", tc.name, agg, wl, len(got[k].Samples), len(w.Floats))
				}
				for j, p := range w.Floats {
					if g := got[k].Samples[j]; g.Timestamp != p.T || g.Value != p.F {
						t.Fatalf("%s %s %s: sample %d is %v, want %v", tc.name, agg, wl, j, g, p)
					}
				}
			}
			direct.Close()
		}
	}
	if w := testutil.ToFloat64(s.queryEvaluationsShared); w != 2 {
		t.Errorf("strata_storeapi_query_evaluations_shared_total %g, want 2", w)
	}
	qs.Close()
	waitFor(t, "every querier closed", func() bool { return cq.opened.Load() == cq.closed.Load() })
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("waiting for %s: timed out", what)
}

// holders is how many requests hold an entry (for tests to see one wait).
func (c *graceCache[K, V]) holders() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.entries {
		n += e.refs
	}
	return n
}

// TestSharedSelectsIteratedAlone: requests selecting alike at once over
// the stitched tiers, raw included, each get the answer they would get
// alone. The raw tier's series share their querier's chunk reader, whose
// cache of head chunks is not safe for concurrent use: two requests
// iterating one selection's series at once read each other's chunks
// (sums doubled, values of other series) until a selection served one
// request at a time.
func TestSharedSelectsIteratedAlone(t *testing.T) {
	data := tieredFixture(t)
	const step = 47_000
	start, end := t0+dayMs+18*hourMs, t0+2*dayMs-600_000
	hints := &storage.SelectHints{Start: start - 5*60_000 + 1, End: end, Step: step, Func: "sum"}
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "m")
	read := func(q storage.Querier) ([]string, error) {
		set := q.Select(context.Background(), false, hints, m)
		var out []string
		var chk chunkenc.Iterator
		for set.Next() {
			s := set.At()
			chk = s.Iterator(chk)
			it := storage.NewMemoizedIterator(chk, 5*60_000)
			str := s.Labels().String()
			for ts := start; ts <= end; ts += step {
				if it.Seek(ts) == chunkenc.ValFloat {
					_, v := it.At()
					str += " " + fsample{ts, v}.String()
				}
			}
			out = append(out, str)
		}
		return out, set.Err()
	}
	alone, err := data.Querier(hints.Start, hints.End)
	if err != nil {
		t.Fatal(err)
	}
	want, err := read(alone)
	_ = alone.Close()
	if err != nil || len(want) == 0 {
		t.Fatalf("read alone: %d series, %v", len(want), err)
	}
	c, _ := newTestShared(data, time.Minute, 4)
	defer c.close()
	for round := range 20 {
		var wg sync.WaitGroup
		for range 3 {
			q, _ := c.Querier(hints.Start, hints.End)
			wg.Go(func() {
				defer q.Close()
				got, err := read(q)
				if err != nil || !slices.Equal(got, want) {
					t.Errorf("round %d: a request reading with others got another answer (%v)", round, err)
				}
			})
		}
		wg.Wait()
	}
}
