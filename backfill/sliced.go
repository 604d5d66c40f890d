package backfill

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/timegrid"
)

// ReadFunc returns the history of [from, to) (Unix milliseconds): every
// series with a sample in the range, with those samples only.
type ReadFunc func(ctx context.Context, from, to int64) ([]Series, error)

// RunSliced imports the history of [from, to) that read returns, into the
// same partitions, raw blocks and head as Run given all of it at once, but
// without holding all of it: the history before StreamEnd, which goes into
// the rollup tiers alone, is read a slice at a time, oldest first, and
// rolled up through a Stream; the rest (the raw tier's reach: at most the
// raw retention and the hour before it) is read a slice of whole hours at
// a time too, and each slice's minute partitions, raw blocks and head
// samples written as Run writes them (reach). So a month of a fleet's
// history needs the memory of one slice (or of one raw block's range,
// when that is longer), not of the month or of the day raw keeps.
//
// History older than the hour tier's retention, which no tier would keep,
// is not read (Run reads it and counts it dropped).
//
// read is called for consecutive slices of at most slice each; the last
// slice before StreamEnd reaches StaleLookahead past it, so that the
// stream closes the windows before it as Run closes them (that part is
// read again for the raw tier's reach). A stream keeps no progress: a
// rerun reads its slices again and skips the minute partitions they wrote.
// The raw tier's reach keeps Run's progress under cfg.InputID: a rerun of
// the same input reads only the slices not finished.
func RunSliced(ctx context.Context, cfg Config, read ReadFunc, from, to int64, slice time.Duration, t Targets, progress func(Progress)) (Result, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if progress == nil {
		progress = func(Progress) {}
	}
	if slice <= 0 {
		return Result{}, errors.New("backfill: the slice must be positive")
	}
	asked := [2]int64{from, to}
	// Older history has no tier: it is not read (Run would drop it).
	from = max(from, Horizon(cfg))
	if from >= to {
		return Result{}, nil
	}
	var res Result
	end := StreamEnd(cfg, t)
	if from < min(end, to) {
		var err error
		if res, err = stream(ctx, cfg, read, from, to, end, slice.Milliseconds(), t, progress); err != nil {
			return res, err
		}
	}
	if to <= end {
		return res, nil
	}
	streamed := res
	r, err := reach(ctx, cfg, read, max(from, end), to, slice.Milliseconds(), asked, t, func(p Progress) { progress(p.plus(streamed)) })
	return r.plus(streamed), err
}

// reach imports the history of [from, to), the raw tier's reach (from is
// StreamEnd or later), into what Run given all of it at once would write,
// a slice at a time: the minute partitions of the slice's hours, the raw
// blocks whose range starts in it, the head's samples of it, and the
// hour partitions of the days it ends. Slices end on whole hours; a slice
// is read to StaleLookahead past its end for its last hour's windows, and
// to the end of the raw blocks starting in it, so a read spans at most
// the longer of the slice and the raw block duration, and five minutes.
// Its progress is recorded as Run's, under cfg.InputID, with the range
// RunSliced was asked for (asked).
func reach(ctx context.Context, cfg Config, read ReadFunc, from, to, slice int64, asked [2]int64, t Targets, progress func(Progress)) (Result, error) {
	im, err := newImporter(ctx, cfg, t, cfg.InputID, progress)
	if err != nil {
		return Result{}, err
	}
	if im.st.To == 0 {
		im.st.From, im.st.To = asked[0], asked[1]
	}
	if im.st.Complete && im.st.Input != "" {
		return im.res, nil // this input was imported whole
	}
	// Raw blocks take [blockFrom, blockTo); the head the rest.
	blockFrom, blockTo := max(from, im.rawFrom), min(to, im.cutoff)
	span := im.st.RawBlockRange
	next := func(a int64) int64 {
		return min(max(timegrid.Floor(a+slice, downsample.HourRes), timegrid.Floor(a, downsample.HourRes)+downsample.HourRes), to)
	}
	total := 0
	for a := from; a < to; a = next(a) {
		total++
	}
	for i, a := 0, from; a < to; i, a = i+1, next(a) {
		b := next(a)
		// Progress counts slices.
		at := func(phase string) func(int, int) {
			return func(int, int) { im.report(phase, i+1, total) }
		}
		var blocks []block
		readTo := b + downsample.StaleLookahead
		if blockFrom < blockTo {
			for s := timegrid.Floor(max(a, blockFrom), span); s < min(b, blockTo); s += span {
				// A block whose samples start in an earlier slice was
				// written there.
				if bf := max(s, blockFrom); bf >= a {
					blocks = append(blocks, block{s, bf, min(s+span, blockTo)})
					readTo = max(readTo, min(s+span, blockTo))
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return im.res, err
		}
		if im.recorded(a, b, blocks) {
			// Done by the run this one resumes: not read again.
			if err := im.hourPartitions(b, at("hour")); err != nil {
				return im.res, err
			}
			continue
		}
		input, err := read(ctx, a, min(readTo, to))
		if err != nil {
			return im.res, err
		}
		series, conflicts := normalize(input, a, b)
		im.res.ConflictingSamples += conflicts
		im.res.DroppedSamples += conflicts
		im.countDropped(series, a, b)
		series = cutAfter(series, im.newest)
		for h := timegrid.Floor(a, downsample.HourRes); h < min(b, im.cutoff); h += downsample.HourRes {
			if err := im.minutePartition(series, h); err != nil {
				return im.res, err
			}
			im.report("minute", i+1, total)
		}
		for _, x := range blocks {
			if err := im.rawBlock(series, x.start, x.from, x.to); err != nil {
				return im.res, err
			}
			im.report("raw blocks", i+1, total)
		}
		if t.Raw != nil && !im.st.RawDone && b > im.cutoff {
			if err := im.head(series, a, b, at("raw")); err != nil {
				return im.res, err
			}
		}
		if err := im.hourPartitions(b, at("hour")); err != nil {
			return im.res, err
		}
	}
	if err := im.hourPartitions(math.MaxInt64, func(done, n int) { im.report("hour", done, n) }); err != nil {
		return im.res, err
	}
	im.st.RawDone = true
	return im.res, im.finish()
}

// recorded reports whether the progress file records every unit of the
// slice [a, b) of the raw tier's reach done (its hours' minute partitions,
// the raw blocks starting in it, its samples for the head), and marks the
// days of its hours for their hour partitions, as minutePartition does.
func (im *importer) recorded(a, b int64, blocks []block) bool {
	first := timegrid.Floor(a, downsample.HourRes)
	for h := first; h < min(b, im.cutoff); h += downsample.HourRes {
		if !slices.Contains(im.st.Minute, h) {
			return false
		}
	}
	for _, x := range blocks {
		if !slices.Contains(im.st.RawBlocks, x.start) {
			return false
		}
	}
	if im.t.Raw != nil && b > im.cutoff && !im.st.RawDone && im.st.RawMark < b {
		return false
	}
	for h := first; h < min(b, im.cutoff); h += downsample.HourRes {
		im.days[timegrid.Floor(h, downsample.DayLen)] = true
	}
	return true
}

// StreamEnd is the hour before which a backfill only rolls history up
// (RunSliced streams it): it is older than the raw retention, and before
// the hour that holds raw's oldest sample, from which the pipeline owns
// the minute partitions. math.MaxInt64 without a raw tier.
func StreamEnd(cfg Config, t Targets) int64 {
	if t.Raw == nil {
		return math.MaxInt64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	end := timegrid.Floor(cfg.Now().UnixMilli()-max(cfg.RawRetention, 0).Milliseconds(), downsample.HourRes)
	if rawMin, _, ok := t.Raw.Bounds(); ok {
		end = min(end, timegrid.Floor(rawMin, downsample.HourRes))
	}
	return end
}

// stream rolls the history of [from, min(to, end)) up slice by slice
// through a Stream that ends at end (math.MaxInt64: none). The next slice
// is read while one is rolled up.
func stream(ctx context.Context, cfg Config, read ReadFunc, from, to, end, slice int64, t Targets, progress func(Progress)) (Result, error) {
	st, err := NewStream(ctx, cfg, Targets{Minute: t.Minute, Hour: t.Hour})
	if err != nil {
		return Result{}, err
	}
	st.until = end
	newest := futureLimit(cfg)
	stop := min(to, end)
	total := int((stop - from + slice - 1) / slice)
	type sliceRead struct {
		from, to int64
		series   []Series
		err      error
	}
	rctx, cancel := context.WithCancel(ctx)
	reads := make(chan sliceRead, 1)
	go func() {
		defer close(reads)
		for a := from; a < stop; a += slice {
			b := min(a+slice, stop)
			if b == end {
				b = min(end+downsample.StaleLookahead, to)
			}
			series, err := read(rctx, a, b)
			select {
			case reads <- sliceRead{a, b, series, err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	i := 0
	for r := range reads {
		if err = r.err; err == nil {
			err = streamSlice(st, r.series, r.from, r.to, newest)
		}
		if err != nil {
			break
		}
		i++
		p := st.res
		p.Phase, p.Done, p.Total = "stream", i, total
		progress(p)
	}
	cancel()
	for range reads {
		// The reader stops at the cancel; a read it held is dropped.
	}
	if err != nil && st.err == nil {
		// The hours after the last one written are not complete: Close
		// must not write them, or they would be final with part of their
		// samples (a rerun skips them).
		st.err = err
	}
	return st.Close()
}

// streamSlice appends the float samples of [from, to) in input to st, in
// time order across series, up to newest (futureLimit): later ones are
// dropped and counted, as Run drops them. Native histograms are older than
// the raw retention here, or have no raw tier, and are dropped as Run
// drops them.
func streamSlice(st *Stream, input []Series, from, to, newest int64) error {
	counted := min(to, st.until) // the samples after it are the next slice's
	series, conflicts := normalize(input, from, counted)
	st.res.ConflictingSamples += conflicts
	st.res.DroppedSamples += conflicts
	h := cursorHeap{}
	for i := range series {
		s := &series[i]
		for _, x := range s.Histograms {
			if x.T >= from && x.T < counted {
				st.res.DroppedSamples++
				st.res.DroppedHistogramSamples++
				if x.T > newest {
					st.res.FutureSamples++
				}
			}
		}
		s.Histograms = nil
		for _, x := range s.Samples {
			if x.T > newest && x.T >= from && x.T < counted {
				st.res.DroppedSamples++
				st.res.FutureSamples++
			}
		}
	}
	series = cutAfter(series, newest)
	for i := range series {
		s := &series[i]
		// Only [from, to): a reader that returns more would hand the
		// stream a sample twice, or one after a later one.
		if c := cursorAt(s, from); c.t() < to {
			c.k = i
			h = append(h, &c)
		}
	}
	heap.Init(&h)
	for h.Len() > 0 {
		c := h[0]
		t, v, _, _, _ := c.next()
		if err := st.Append(c.s.Labels, t, v); err != nil {
			return fmt.Errorf("backfill stream: %w", err)
		}
		if c.t() >= to {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
	}
	return nil
}

// block is a raw block's range (start) and the part of it a backfill
// writes, [from, to).
type block struct{ start, from, to int64 }

// plus adds q's counts to p's; p's phase and position stay.
func (p Progress) plus(q Progress) Progress {
	p.PartitionsWritten += q.PartitionsWritten
	p.PartitionsSkipped += q.PartitionsSkipped
	p.RawSamples += q.RawSamples
	p.RawBlockSamples += q.RawBlockSamples
	p.DroppedSamples += q.DroppedSamples
	p.RefusedRawSamples += q.RefusedRawSamples
	p.RawGapSamples += q.RawGapSamples
	p.PartitionsRewritten += q.PartitionsRewritten
	p.HistogramSamples += q.HistogramSamples
	p.DroppedHistogramSamples += q.DroppedHistogramSamples
	p.FutureSamples += q.FutureSamples
	p.ConflictingSamples += q.ConflictingSamples
	return p
}
