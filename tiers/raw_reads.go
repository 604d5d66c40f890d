package tiers

import (
	"context"
	"runtime"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/tsdb/chunks"
)

// chunkReadSignalSeries is how many series' samples or chunks the tier's
// queriers let be read between two signals on ChunkReads. Reading a series
// maps the file pages of its cut chunks, and on Linux with large folios in
// the page cache one touch maps a whole folio (2 MiB on ext4): a walk over
// a chunk file just written maps about 12 KiB a series (docs/bench.md, stop
// 37). 512 series are about 6 MiB, under the growth at which strata serve
// releases (8 MiB).
const chunkReadSignalSeries = 512

// ChunkReads returns a channel signalled, without blocking the reader, each
// time chunkReadSignalSeries series of the tier's queriers (Querier,
// ChunkQuerier) have had an iterator since the last signal: the reads that
// map the head's cut chunks and the blocks' files, whose pages
// ReleaseChunkPages drops. A watcher polls the mapped pages on it
// (mapped.Trigger.Signal) as well as on its timer: at the fleet's chunk cut
// (every series cuts at the block boundary) the canonical rules' next
// evaluation reads every cut chunk back within a second or two, faster
// than a 10 ms poll follows.
//
// The count is of iterators, not of series handed out: PromQL's engine
// takes every series of a selector before it reads any (stop 37's signal,
// counted as series were handed out, fired before the reads began and
// bounded nothing).
func (r *Raw) ChunkReads() <-chan struct{} { return r.reads }

// readStarted counts one series' read and signals ChunkReads every
// chunkReadSignalSeries, once pending at most.
func (r *Raw) readStarted() {
	if r.iterators.Add(1)%chunkReadSignalSeries != 0 {
		return
	}
	select {
	case r.reads <- struct{}{}:
		// The watcher woken is queued to run next on this goroutine's P,
		// where it would wait up to a scheduling quantum (10 ms) while this
		// read maps on; a yield lets it run now.
		runtime.Gosched()
	default:
	}
}

// signallingQuerier is a raw querier whose series count their reads.
type signallingQuerier struct {
	storage.Querier
	r *Raw
}

func (q signallingQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	return signallingSet{SeriesSet: q.Querier.Select(ctx, sortSeries, hints, ms...), r: q.r}
}

type signallingSet struct {
	storage.SeriesSet
	r *Raw
}

func (s signallingSet) At() storage.Series { return signallingSeries{Series: s.SeriesSet.At(), r: s.r} }

type signallingSeries struct {
	storage.Series
	r *Raw
}

func (s signallingSeries) Iterator(it chunkenc.Iterator) chunkenc.Iterator {
	s.r.readStarted()
	return s.Series.Iterator(it)
}

// signallingChunkQuerier is signallingQuerier for chunk queriers.
type signallingChunkQuerier struct {
	storage.ChunkQuerier
	r *Raw
}

func (q signallingChunkQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.ChunkSeriesSet {
	return signallingChunkSet{ChunkSeriesSet: q.ChunkQuerier.Select(ctx, sortSeries, hints, ms...), r: q.r}
}

type signallingChunkSet struct {
	storage.ChunkSeriesSet
	r *Raw
}

func (s signallingChunkSet) At() storage.ChunkSeries {
	return signallingChunkSeries{ChunkSeries: s.ChunkSeriesSet.At(), r: s.r}
}

type signallingChunkSeries struct {
	storage.ChunkSeries
	r *Raw
}

func (s signallingChunkSeries) Iterator(it chunks.Iterator) chunks.Iterator {
	s.r.readStarted()
	return s.ChunkSeries.Iterator(it)
}
