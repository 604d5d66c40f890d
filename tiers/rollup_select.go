package tiers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/parquet-go/parquet-go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/parallel"
	"github.com/strata-dev/strata/internal/timegrid"
)

// Select returns the series matching all matchers that have windows starting
// in [mint, maxt], each with those windows in ascending order, the series
// sorted by labels. Windows of one series from several partitions are
// concatenated.
//
// Only the partitions overlapping the range are opened. Within a file a row
// group is skipped when its start-time statistics miss the range, or when a
// metric-name equality matcher is absent from the row group's name statistics
// or bloom filter. Only the columns needed to rebuild windows are decoded (the
// curated label columns are for analysts and are never read here).
func (r *Rollup) Select(ctx context.Context, mint, maxt int64, matchers ...*labels.Matcher) ([]SeriesWindows, error) {
	sel, err := r.selectColumns(ctx, mint, maxt, matchers, selectOptions{})
	if err != nil {
		return nil, err
	}
	return toSeriesWindows(sel), nil
}

// WindowFields is a set of a Window's aggregate fields (SelectFields).
type WindowFields uint16

// The fields SelectFields can be asked for; Start and LastT are always read.
const (
	FieldFirstT   = WindowFields(colFirstT)
	FieldCount    = WindowFields(colCount)
	FieldSum      = WindowFields(colSum)
	FieldMin      = WindowFields(colMin)
	FieldMax      = WindowFields(colMax)
	FieldFirst    = WindowFields(colFirst)
	FieldLast     = WindowFields(colLast)
	FieldIncrease = WindowFields(colIncrease)
	FieldResets   = WindowFields(colResets)
	FieldStale    = WindowFields(colStale)
)

// SelectFields is Select decoding only fields of each window (and the
// columns the null rules of docs/format/hour-parquet.md derive them from,
// which are not kept); the other fields read as zero. For readers that need
// a few aggregates of many windows (strata export): a column not decoded
// costs nothing, and one decoded only to derive another is not held.
func (r *Rollup) SelectFields(ctx context.Context, mint, maxt int64, fields WindowFields, matchers ...*labels.Matcher) ([]SeriesWindows, error) {
	if fields == 0 {
		fields = FieldLast // 0 would mean every column
	}
	sel, err := r.selectColumns(ctx, mint, maxt, matchers, selectOptions{need: colSet(fields)})
	if err != nil {
		return nil, err
	}
	return toSeriesWindows(sel), nil
}

func toSeriesWindows(sel []selectedSeries) []SeriesWindows {
	out := make([]SeriesWindows, len(sel))
	for i, s := range sel {
		out[i] = SeriesWindows{Labels: s.lbls, Windows: s.ws.appendTo(make([]Window, 0, s.ws.Len()))}
	}
	return out
}

// SelectLabels returns the label sets of the series matching all matchers
// that have windows in partitions overlapping [mint, maxt] (partition
// granularity: it reads only the series_id and labels columns). For label
// name/value APIs.
func (r *Rollup) SelectLabels(ctx context.Context, mint, maxt int64, matchers ...*labels.Matcher) ([]labels.Labels, error) {
	sel, err := r.selectColumns(ctx, mint, maxt, matchers, selectOptions{labelsOnly: true})
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	out := make([]labels.Labels, len(sel))
	for i, s := range sel {
		out[i] = s.lbls
	}
	return out, nil
}

type selectOptions struct {
	// need is the aggregate columns asked for (0: all; the others read as
	// zero), which the series' blocks hold. The query decodes the columns
	// the null rules derive them from too (rollupQuery.decode), into the
	// reader's batch only.
	need colSet
	// seriesNeed, when set, is the columns of need a series' block holds
	// (the minute snapshot's: only those its readers read of its metric
	// name). Called from the readers' goroutines, once a series and reader.
	seriesNeed func(lbls labels.Labels) colSet
	// seriesFrom, when set, is the earliest window start a series keeps
	// (the minute snapshot's: how far back its readers read its metric
	// name); earlier windows are not kept, as if mint were later for it.
	// Called from the readers' goroutines, once a series and reader.
	seriesFrom func(lbls labels.Labels) int64
	// seriesHint, when set, is about how many series each reader meets:
	// its tables are sized for that many at once instead of grown as they
	// are met (growing them allocated four times what they end up holding).
	seriesHint int
	// thinStep > 0 keeps, per series, only the latest window before each
	// evaluation time thinOrigin + k*thinStep (plain selectors at a coarse
	// step see no other).
	thinStep, thinOrigin int64
	maxWindows           int  // bound on windows held in memory (0: none)
	labelsOnly           bool // series only, no windows
	// batchRows is a reader's batch size (0: defaultBatchRows, see
	// fileReader.batch); tests make it small.
	batchRows int
	// shared holds label sets a matching series' labels are taken from
	// when it holds an equal one (labelshare; nil: none).
	shared storage.AppendableV2
}

// selectedSeries is one series a select found, with its windows.
type selectedSeries struct {
	lbls labels.Labels
	ws   windowSeq
}

// selectColumns reads the partitions overlapping [mint, maxt] and returns the
// matching series sorted by labels.
//
// The partitions are split into GOMAXPROCS contiguous time ranges read in
// parallel. Each reader appends a series' kept windows, column by column and
// only the columns the query needs, to that series' own block (through a
// cache-sized batch, see fileReader.batch), so a series
// ends with one block per reader, in time order, and its windows lie
// contiguously in memory: the engine then walks each series in a tight loop
// (scattering a series over hundreds of per-file blocks cost a cache and TLB
// miss per file, 40 % of a 365-day query's evaluation).
//
// A partition found corrupt on the way is set aside (quarantine.go) and the
// select runs again without it: a part of its windows may have been read.
func (r *Rollup) selectColumns(ctx context.Context, mint, maxt int64, matchers []*labels.Matcher, opts selectOptions) ([]selectedSeries, error) {
	for {
		sel, err := r.selectColumnsOnce(ctx, mint, maxt, matchers, opts)
		var ce *corruptPartitionError
		// Each round sets one partition aside or returns: bounded by
		// the partitions.
		if err == nil || !errors.As(err, &ce) || !r.quarantine(ce) {
			return sel, err
		}
	}
}

func (r *Rollup) selectColumnsOnce(ctx context.Context, mint, maxt int64, matchers []*labels.Matcher, opts selectOptions) ([]selectedSeries, error) {
	r.mu.RLock()
	closed := r.closed
	r.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if opts.need == 0 {
		opts.need = colAll
	}
	if opts.batchRows <= 0 {
		opts.batchRows = defaultBatchRows
	}
	opts.need |= colLastT
	res := r.cfg.Resolution.Milliseconds()
	q := newRollupQuery(mint, maxt, res, matchers, opts)
	q.batches = &r.batches
	parts := r.partitionsOverlapping(mint, maxt)
	workers := min(parallel.Budget(ctx), len(parts))
	readers := make([]*fileReader, workers)
	errs := make([]error, workers)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range readers {
		lo, hi := w*len(parts)/workers, (w+1)*len(parts)/workers
		fr := newFileReader(q)
		fr.keyed = hi-lo > 1
		readers[w] = fr
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				fr.filesLeft = hi - i
				err := fr.readFile(ctx, r.files, parts[i])
				if err != nil && !errors.Is(err, os.ErrNotExist) { // a file deleted by retention after we listed it is skipped
					errs[w] = err
					cancel()
					return
				}
			}
			fr.flush()
			fr.share.Close()
		})
	}
	wg.Wait()
	for _, fr := range readers {
		r.batches.putBack(fr)
	}
	if parent.Err() == nil && slices.ContainsFunc(errs, readerFailed) {
		// The readers another's failure stopped say only "context
		// canceled": the failure names the partition.
		errs = slices.DeleteFunc(errs, func(err error) bool { return errors.Is(err, context.Canceled) })
	}
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, ErrTooManyWindows) {
			err = fmt.Errorf("%w: more than %d", ErrTooManyWindows, opts.maxWindows)
		}
		return nil, fmt.Errorf("select %s tier: %w", r.cfg.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("select %s tier: %w", r.cfg.Name, err)
	}
	return mergeReaders(readers, opts.labelsOnly), nil
}

// mergeReaders joins the readers' series by their label text. Readers cover
// ascending time ranges, so each series' blocks are already in time order.
func mergeReaders(readers []*fileReader, labelsOnly bool) []selectedSeries {
	var byKey map[textKey]int
	if len(readers) > 1 {
		// One reader's series are distinct already: a select of one
		// partition (the diagnosis engine's, in the ten minutes after an
		// hour's is written) needs no map of its 500,000 series.
		byKey = map[textKey]int{}
	}
	var out []selectedSeries
	if len(readers) == 1 {
		out = make([]selectedSeries, 0, len(readers[0].series))
	}
	for _, fr := range readers {
		for _, ls := range fr.series {
			n := int(ls.n)
			if n == 0 && !labelsOnly {
				continue
			}
			gi, ok := byKey[ls.key] // byKey nil: not found
			if !ok {
				gi = len(out)
				if byKey != nil {
					byKey[ls.key] = gi
				}
				out = append(out, selectedSeries{lbls: ls.lbls})
			}
			if n > 0 {
				out[gi].ws.add(ls.blk, int(ls.off), n)
			}
		}
	}
	slices.SortFunc(out, func(a, b selectedSeries) int { return labels.Compare(a.lbls, b.lbls) })
	return out
}

// rollupQuery is what every file reader of one select shares.
type rollupQuery struct {
	mint, maxt int64
	res        int64 // the tier's resolution, ms
	// loT, hiT: a window starts in [mint, maxt] iff its last sample's
	// time is in [loT, hiT).
	loT, hiT int64
	matchers []*labels.Matcher
	// decode is the columns read from each row group: opts.need and the
	// columns the null rules derive them from (derivationInputs).
	decode    colSet
	nameEq    *parquet.Value // metric name equality matcher, for pruning
	nameEqStr string
	// nameEqJSON is that matcher's label as the labels column encodes it
	// ("__name__":"<name>"), to pass over other metrics' series without
	// decoding their labels (fileReader.admit)
	nameEqJSON string
	opts       selectOptions
	nWindows   atomic.Int64 // windows kept so far, against opts.maxWindows
	batches    *batchPool   // the tier's, for the readers' batches
}

func newRollupQuery(mint, maxt, res int64, ms []*labels.Matcher, opts selectOptions) *rollupQuery {
	q := &rollupQuery{mint: mint, maxt: maxt, res: res, matchers: ms, opts: opts, decode: derivationInputs(opts.need)}
	// Window starts are multiples of res: one starts at or after mint iff
	// its last sample does, at or before maxt iff its last sample is
	// before the window after maxt's.
	q.loT = timegrid.Ceil(mint, res)
	q.hiT = satAdd(timegrid.Floor(maxt, res), res)
	for _, m := range ms {
		if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
			v := parquet.ByteArrayValue([]byte(m.Value))
			q.nameEq, q.nameEqStr = &v, m.Value
			if js, err := json.Marshal(m.Value); err == nil {
				q.nameEqJSON = nameKeyJSON + string(js)
			}
		}
	}
	return q
}

// skipRowGroup uses the row group's statistics and bloom filter.
func (q *rollupQuery) skipRowGroup(rg parquet.RowGroup, c rollupColumns) bool {
	chunks := rg.ColumnChunks()
	if fc, ok := chunks[c.start].(*parquet.FileColumnChunk); ok {
		if lo, hi, ok := fc.Bounds(); ok && (hi.Int64() < q.mint || lo.Int64() > q.maxt) {
			return true
		}
	}
	if q.nameEq == nil {
		return false
	}
	if fc, ok := chunks[c.name].(*parquet.FileColumnChunk); ok {
		if lo, hi, ok := fc.Bounds(); ok && (string(lo.ByteArray()) > q.nameEqStr || string(hi.ByteArray()) < q.nameEqStr) {
			return true
		}
		if bf := fc.BloomFilter(); bf != nil {
			if found, err := bf.Check(*q.nameEq); err == nil && !found {
				return true
			}
		}
	}
	return false
}

// skipOf is how many windows after the query's first start the series
// lbls keeps its first (selectOptions.seriesFrom): its windows starting
// before that are not kept.
func (q *rollupQuery) skipOf(lbls labels.Labels) int32 {
	f := q.opts.seriesFrom
	if f == nil {
		return 0
	}
	// The window holding from is kept, as the open windows' collector
	// keeps it.
	from := f(lbls)
	if from <= q.loT {
		return 0
	}
	first := timegrid.Floor(min(from, q.hiT), q.res) // past hiT none is kept
	// A span too long for the count (or for int64) keeps every window, as
	// without seriesFrom.
	n := max(first-q.loT, 0) / q.res
	if n > math.MaxInt32 {
		return 0
	}
	return int32(n) //nolint:gosec // checked above
}

// keepRows appends to keep the rows of [lo, hi), one series' rows in time
// order, whose windows the query reads: those with last_ts in [loT, hiT)
// (loT is the query's, or later for a series that keeps fewer), and when
// thinning only the latest of those before each evaluation step (a plain
// selector sees no other).
func (q *rollupQuery) keepRows(keep []int32, lastT []int64, lo, hi int, loT int64, thin bool) []int32 {
	for lo < hi && lastT[lo] < loT {
		lo++
	}
	for hi > lo && lastT[hi-1] >= q.hiT {
		hi--
	}
	if lo >= hi {
		return keep
	}
	if !thin {
		for i := lo; i < hi; i++ {
			keep = append(keep, int32(i)) //nolint:gosec // a row group's rows fit
		}
		return keep
	}
	step := q.opts.thinStep
	bucketEnd := gridAtOrAfter(lastT[lo], q.opts.thinOrigin, step)
	for i := lo + 1; i < hi; i++ {
		t := lastT[i]
		if t <= bucketEnd {
			continue // a later window before the same step
		}
		keep = append(keep, int32(i-1)) //nolint:gosec // as above
		if t-bucketEnd <= step {
			bucketEnd += step // the next step: no division
		} else {
			bucketEnd = gridAtOrAfter(t, q.opts.thinOrigin, step)
		}
	}
	return append(keep, int32(hi-1)) //nolint:gosec // as above
}

// readerFailed reports whether err is a reader's own failure, not its stop.
func readerFailed(err error) bool { return err != nil && !errors.Is(err, context.Canceled) }
