package tiers

import (
	"context"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// chunkReadSignalSeries is how many series a querier of the raw tier hands
// out between two signals on ChunkReads. A series read maps the file pages
// of its cut chunks, and on Linux with large folios in the page cache one
// touch maps a whole folio (2 MiB here): in a walk over a chunk file just
// written, about 12 KiB of mappings a series (docs/bench.md, stop 37).
// 512 series are about 6 MiB, under the growth at which strata serve
// releases (8 MiB).
const chunkReadSignalSeries = 512

// ChunkReads returns a channel signalled, without blocking the reader,
// each time the tier's queriers (Querier, ChunkQuerier) have handed out
// chunkReadSignalSeries series (a series set signals every that many of
// its own; the rest of the sets that ended add up): the reads that map
// the head's cut chunks, whose pages ReleaseChunkPages drops. A watcher
// polls the mapped pages on it (mapped.Trigger.Run) rather than on a timer
// alone: the diagnosis engine's minute reads every series of a 500,000
// series fleet within a few seconds, and at a chunk cut maps a 128 MiB
// chunk file faster than a 10 ms poll follows. At 500,000 series the
// files were still mapped up to 197 MB at once after a cut with it: it
// does not bound them (docs/bench.md, stop 37). The count across sets is
// approximate: adds that race a reset are lost.
func (r *Raw) ChunkReads() <-chan struct{} { return r.reads }

// signalRead signals ChunkReads, once pending at most.
func (r *Raw) signalRead() {
	select {
	case r.reads <- struct{}{}:
	default:
	}
}

// readsLeft counts n series a series set handed out since its last signal
// when it ends: the canonical rules select one metric at a time, fewer than
// chunkReadSignalSeries series each, and their reads signal once they add
// up to it.
func (r *Raw) readsLeft(n int) {
	if n > 0 && r.leftover.Add(int64(n)) >= chunkReadSignalSeries {
		r.leftover.Store(0)
		r.signalRead()
	}
}

// readCount counts the series a set hands out, for ChunkReads.
type readCount struct {
	r *Raw
	n int
}

// next takes the result of a set's Next and returns it, signalling every
// chunkReadSignalSeries series and adding the rest up when the set ends.
func (c *readCount) next(ok bool) bool {
	if !ok {
		c.r.readsLeft(c.n)
		c.n = 0
		return false
	}
	if c.n++; c.n == chunkReadSignalSeries {
		c.n = 0
		c.r.signalRead()
	}
	return true
}

// signallingQuerier is a raw querier whose series sets signal ChunkReads.
type signallingQuerier struct {
	storage.Querier
	r *Raw
}

func (q signallingQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.SeriesSet {
	return &signallingSet{SeriesSet: q.Querier.Select(ctx, sortSeries, hints, ms...), c: readCount{r: q.r}}
}

type signallingSet struct {
	storage.SeriesSet
	c readCount
}

func (s *signallingSet) Next() bool { return s.c.next(s.SeriesSet.Next()) }

// signallingChunkQuerier is signallingQuerier for chunk queriers.
type signallingChunkQuerier struct {
	storage.ChunkQuerier
	r *Raw
}

func (q signallingChunkQuerier) Select(ctx context.Context, sortSeries bool, hints *storage.SelectHints, ms ...*labels.Matcher) storage.ChunkSeriesSet {
	return &signallingChunkSet{ChunkSeriesSet: q.ChunkQuerier.Select(ctx, sortSeries, hints, ms...), c: readCount{r: q.r}}
}

type signallingChunkSet struct {
	storage.ChunkSeriesSet
	c readCount
}

func (s *signallingChunkSet) Next() bool { return s.c.next(s.ChunkSeriesSet.Next()) }
