package storeapi

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/util/annotations"

	"github.com/strata-dev/strata/internal/seriesset"
)

// A Thanos Querier in distributed mode rewrites `avg by (x) (sel)` into
// `sum by (x, <external labels>) (sel) / count by (x, <external labels>)
// (sel)` and pushes each half down as its own Query API request, at the
// same time: without help, each node reads the same selection of the tiers
// twice. sharedSelects lets requests whose selects are the same (matchers,
// time range and the hints that choose the samples) read the tiers once:
// the first runs the select, the others wait for it and iterate the same
// series. A selection is kept while a request uses it and for a grace
// period after the last one is done (the second half of a rewritten query
// may arrive a little later), then dropped: it is never read again after
// that, so it never serves data older than the grace period.
type sharedSelects struct {
	q     storage.Queryable
	grace time.Duration
	max   int // entries at most; a select past that is not shared
	hits  prometheus.Counter

	mu      sync.Mutex
	entries map[selectKey]*sharedSelect
	closed  bool
}

// Defaults of the Query API's shared selects.
const (
	sharedSelectGrace = 250 * time.Millisecond
	sharedSelectMax   = 16
)

func newSharedSelects(q storage.Queryable, grace time.Duration, maxEntries int, hits prometheus.Counter) *sharedSelects {
	return &sharedSelects{q: q, grace: grace, max: maxEntries, hits: hits, entries: map[selectKey]*sharedSelect{}}
}

// selectKey is what makes two selects read the same series and samples.
type selectKey struct {
	mint, maxt            int64 // the querier's range
	sortSeries            bool
	start, end, step, rng int64
	limit                 int
	fn                    string // selectFunc of the hints' Func
	shardCount, shardIdx  uint64
	disableTrimming       bool
	projection            string
	matchers              string
}

func keyOf(mint, maxt int64, sortSeries bool, h *storage.SelectHints, ms []*labels.Matcher) selectKey {
	k := selectKey{mint: mint, maxt: maxt, sortSeries: sortSeries}
	if h != nil {
		k.start, k.end, k.step, k.rng, k.limit = h.Start, h.End, h.Step, h.Range, h.Limit
		k.fn = selectFunc(h.Func)
		k.shardCount, k.shardIdx, k.disableTrimming = h.ShardCount, h.ShardIndex, h.DisableTrimming
		if len(h.ProjectionLabels) > 0 {
			k.projection = strings.Join(h.ProjectionLabels, "\xff")
			if h.ProjectionInclude {
				k.projection = "+" + k.projection
			}
		}
	} else {
		k.fn = "\xffnone" // no hints: not the same as hints with an empty Func
	}
	// Matchers in a canonical order: the engine passes a selector's as
	// written.
	strs := make([]string, len(ms))
	for i, m := range ms {
		strs[i] = m.String()
	}
	slices.Sort(strs)
	k.matchers = strings.Join(strs, "\xff")
	return k
}

// aggregations are PromQL's aggregation operators. The engine names the one
// around a plain selector in SelectHints.Func; the stitched view reads a
// plain selector's samples for each of them (it chooses other samples only
// for functions over ranges: docs/format/minute.md), so the selects of
// `sum(x)` and `count(x)` are the same select.
// TestSharedSelectAggregationsReadAlike checks that against the tiers.
var aggregations = map[string]struct{}{
	"sum": {}, "avg": {}, "count": {}, "min": {}, "max": {}, "group": {}, "stddev": {}, "stdvar": {},
	"topk": {}, "bottomk": {}, "count_values": {}, "quantile": {}, "limitk": {}, "limit_ratio": {},
}

// selectFunc is the Func a select is keyed by: "" for an aggregation
// operator (a plain selector's samples), else Func.
func selectFunc(fn string) string {
	if _, ok := aggregations[fn]; ok {
		return ""
	}
	return fn
}

// sharedSelect is one selection, run once and iterated by every request
// that holds it.
type sharedSelect struct {
	key  selectKey
	done chan struct{} // closed when the select has run

	// Set before done is closed, read-only after.
	series   []storage.Series
	warnings annotations.Annotations
	err      error

	// Under sharedSelects.mu.
	q      storage.Querier // the querier the series come from, closed when the entry is dropped
	refs   int             // requests holding it
	idle   *time.Timer     // drops it after the grace period, while refs is 0
	cached bool            // in entries, to be found by later requests
}

// Querier returns a querier whose selects are shared.
func (c *sharedSelects) Querier(mint, maxt int64) (storage.Querier, error) {
	return &sharedQuerier{c: c, mint: mint, maxt: maxt}, nil
}

// acquire returns the selection for key, holding it, and whether the caller
// must run it (it is new); nil when no more selections may be held.
func (c *sharedSelects) acquire(key selectKey) (*sharedSelect, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[key]; e != nil {
		e.refs++
		if e.idle != nil {
			e.idle.Stop() // if it already fired, drop finds refs > 0 and keeps e
			e.idle = nil
		}
		c.hits.Inc()
		return e, false
	}
	if c.closed || len(c.entries) >= c.max {
		return nil, false
	}
	e := &sharedSelect{key: key, done: make(chan struct{}), refs: 1, cached: true}
	c.entries[key] = e
	return e, true
}

// run runs e's select with a querier of its own and keeps its series.
func (c *sharedSelects) run(ctx context.Context, e *sharedSelect, mint, maxt int64, sortSeries bool, hints *storage.SelectHints, ms []*labels.Matcher) {
	defer close(e.done)
	q, err := c.q.Querier(mint, maxt)
	if err != nil {
		c.failed(e, err)
		return
	}
	c.mu.Lock()
	e.q = q
	c.mu.Unlock()
	set := q.Select(ctx, sortSeries, hints, ms...)
	var series []storage.Series
	for set.Next() {
		series = append(series, set.At())
	}
	if err := set.Err(); err != nil {
		c.failed(e, err)
		return
	}
	e.series, e.warnings = series, set.Warnings()
}

// failed records e's error and stops sharing e: requests already waiting
// get the error (or, if it is the first request's context's, run their
// own select), later ones run the select again.
func (c *sharedSelects) failed(e *sharedSelect, err error) {
	e.err = err
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.cached {
		delete(c.entries, e.key)
		e.cached = false
	}
}

// release lets go of e; the last request starts its grace period.
func (c *sharedSelects) release(e *sharedSelect) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.refs--
	if e.refs > 0 {
		return
	}
	if !e.cached || c.closed {
		c.drop(e)
		return
	}
	e.idle = time.AfterFunc(c.grace, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if e.refs == 0 {
			c.drop(e)
		}
	})
}

// drop removes e and closes its querier; under c.mu, with e.refs 0.
func (c *sharedSelects) drop(e *sharedSelect) {
	if e.cached && c.entries[e.key] == e {
		delete(c.entries, e.key)
	}
	e.cached = false
	if e.q != nil {
		_ = e.q.Close() // stitched queriers release the raw tier's; nothing to flush
		e.q = nil
	}
	e.series = nil
}

// close drops every selection no request holds and stops sharing: those
// still held are dropped when released.
func (c *sharedSelects) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for _, e := range c.entries {
		if e.refs == 0 {
			if e.idle != nil {
				e.idle.Stop()
			}
			c.drop(e)
		}
	}
}

// len is the number of selections held or in their grace period.
func (c *sharedSelects) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// sharedQuerier is one request's querier: its selects are shared, and
// Close lets go of them.
type sharedQuerier struct {
	c          *sharedSelects
	mint, maxt int64
	held       []*sharedSelect
	own        storage.Querier // for selects that are not shared
}

func (q *sharedQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	e, first := q.c.acquire(keyOf(q.mint, q.maxt, sortSeries, hints, ms))
	if e == nil {
		return q.ownSelect(ctx, sortSeries, hints, ms)
	}
	q.held = append(q.held, e)
	if first {
		q.c.run(ctx, e, q.mint, q.maxt, sortSeries, hints, ms)
	} else {
		select {
		case <-e.done:
		case <-ctx.Done():
			return storage.ErrSeriesSet(ctx.Err())
		}
	}
	if e.err != nil {
		if !first && ctx.Err() == nil && (errors.Is(e.err, context.Canceled) || errors.Is(e.err, context.DeadlineExceeded)) {
			// The first request gave up; this one has not.
			return q.ownSelect(ctx, sortSeries, hints, ms)
		}
		return storage.ErrSeriesSet(e.err)
	}
	return seriesset.List(e.series, maps.Clone(e.warnings))
}

func (q *sharedQuerier) ownSelect(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms []*labels.Matcher) storage.SeriesSet {
	own, err := q.ownQuerier()
	if err != nil {
		return storage.ErrSeriesSet(err)
	}
	return own.Select(ctx, sortSeries, hints, ms...)
}

func (q *sharedQuerier) LabelValues(ctx context.Context, name string, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	own, err := q.ownQuerier()
	if err != nil {
		return nil, nil, err
	}
	return own.LabelValues(ctx, name, hints, ms...)
}

func (q *sharedQuerier) LabelNames(ctx context.Context, hints *storage.LabelHints, ms ...*labels.Matcher) ([]string, annotations.Annotations, error) {
	own, err := q.ownQuerier()
	if err != nil {
		return nil, nil, err
	}
	return own.LabelNames(ctx, hints, ms...)
}

// ownQuerier is the request's querier for what is not shared, opened once.
func (q *sharedQuerier) ownQuerier() (storage.Querier, error) {
	if q.own == nil {
		own, err := q.c.q.Querier(q.mint, q.maxt)
		if err != nil {
			return nil, err
		}
		q.own = own
	}
	return q.own, nil
}

// Close lets go of the request's selections and closes its own querier.
func (q *sharedQuerier) Close() error {
	for _, e := range q.held {
		q.c.release(e)
	}
	q.held = nil
	if q.own != nil {
		err := q.own.Close()
		q.own = nil
		return err
	}
	return nil
}
