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
// series, one request at a time: the series of a TSDB querier share its
// chunk reader, whose cache of head chunks is not safe for concurrent use
// (two requests iterating the raw tier's series of one selection at once
// read each other's chunks), so a request that finds the selection in use
// selects on its own (the halves of an avg running at once share their
// evaluation or fused pass instead: aggregate.go, fused.go). A selection
// is kept while a request holds it and for a grace period after the last
// one is done (the second half of a rewritten query may arrive a little
// later), then dropped: it is never read again after that, so it never
// serves data older than the grace period.
type sharedSelects struct {
	q     storage.Queryable
	cache *graceCache[selectKey, *selection]
	hits  prometheus.Counter // selects served by another request's selection
}

// Defaults of the Query API's shared selects and evaluations.
const (
	sharedSelectGrace = 250 * time.Millisecond
	sharedSelectMax   = 16
)

func newSharedSelects(q storage.Queryable, grace time.Duration, maxEntries int, hits prometheus.Counter) *sharedSelects {
	// The cache counts no hits: a selection found in use is not shared.
	return &sharedSelects{q: q, cache: newGraceCache[selectKey](grace, maxEntries, nil, closeSelection), hits: hits}
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

// selection is one shared select's answer: its series, read whole, and the
// querier they come from, closed when the selection is dropped.
type selection struct {
	q        storage.Querier
	series   []storage.Series
	warnings annotations.Annotations

	// inUse is held by the request iterating series, from its select to
	// its querier's Close: one request at a time (sharedSelects).
	inUse sync.Mutex
}

// Querier returns a querier whose selects are shared.
func (c *sharedSelects) Querier(mint, maxt int64) (storage.Querier, error) {
	return &sharedQuerier{c: c, mint: mint, maxt: maxt}, nil
}

// run runs a select with a querier of its own and reads its series whole.
func (c *sharedSelects) run(ctx context.Context, mint, maxt int64, sortSeries bool, hints *storage.SelectHints, ms []*labels.Matcher) (*selection, error) {
	q, err := c.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	sel := &selection{q: q}
	set := q.Select(ctx, sortSeries, hints, ms...)
	for set.Next() {
		sel.series = append(sel.series, set.At())
	}
	if err := set.Err(); err != nil {
		return sel, err // the querier is closed with the entry
	}
	sel.warnings = set.Warnings()
	sel.inUse.Lock() // for the request that ran it, before others can see it
	return sel, nil
}

// closeSelection closes a dropped selection's querier.
func closeSelection(sel *selection) {
	if sel != nil && sel.q != nil {
		_ = sel.q.Close() // stitched queriers release the raw tier's; nothing to flush
	}
}

// sharedQuerier is one request's querier: its selects are shared, and
// Close lets go of them.
type sharedQuerier struct {
	c          *sharedSelects
	mint, maxt int64
	held       []*graceEntry[selectKey, *selection]
	using      []*selection    // the selections whose series it iterates (inUse held)
	own        storage.Querier // for selects that are not shared
}

func (q *sharedQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	e, first := q.c.cache.acquire(keyOf(q.mint, q.maxt, sortSeries, hints, ms))
	if e == nil {
		return q.ownSelect(ctx, sortSeries, hints, ms)
	}
	q.held = append(q.held, e)
	if first {
		q.c.cache.finish(e)(q.c.run(ctx, q.mint, q.maxt, sortSeries, hints, ms))
	}
	sel, err := q.c.cache.wait(ctx, e, first)
	if err != nil {
		if errors.Is(err, errGiveUp) {
			// The first request gave up; this one has not.
			return q.ownSelect(ctx, sortSeries, hints, ms)
		}
		return storage.ErrSeriesSet(err)
	}
	if !first {
		if !sel.inUse.TryLock() {
			// Another request, or another select of this one, is
			// iterating its series.
			return q.ownSelect(ctx, sortSeries, hints, ms)
		}
		q.c.hits.Inc()
	}
	q.using = append(q.using, sel)
	return seriesset.List(sel.series, maps.Clone(sel.warnings))
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
	for _, sel := range q.using {
		sel.inUse.Unlock()
	}
	q.using = nil
	for _, e := range q.held {
		q.c.cache.release(e)
	}
	q.held = nil
	if q.own != nil {
		err := q.own.Close()
		q.own = nil
		return err
	}
	return nil
}

// close drops the selections no request holds and stops sharing.
func (c *sharedSelects) close() { c.cache.close() }

// len is the number of selections held or in their grace period.
func (c *sharedSelects) len() int { return c.cache.len() }
