package backfill

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
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
// raw retention and the hour before it) is read at once and imported by
// Run, with its progress file. So a month of a fleet's history needs the
// memory of one slice and of a day, not of the month.
//
// History older than the hour tier's retention, which no tier would keep,
// is not read (Run reads it and counts it dropped).
//
// read is called for consecutive slices of at most slice each; the last
// slice before StreamEnd reaches StaleLookahead past it, so that the
// stream closes the windows before it as Run closes them (that part is
// read again for Run). A stream keeps no progress: a rerun reads its
// slices again and skips the minute partitions they wrote.
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
	input, err := read(ctx, max(from, end), to)
	if err != nil {
		return res, err
	}
	streamed := res
	r, err := Run(ctx, cfg, input, t, func(p Progress) { progress(p.plus(streamed)) })
	return r.plus(streamed), err
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
			err = streamSlice(st, r.series, r.from, r.to)
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
// time order across series. Native histograms are older than the raw
// retention here, and dropped as Run drops them.
func streamSlice(st *Stream, input []Series, from, to int64) error {
	series := normalize(input)
	h := cursorHeap{}
	for i := range series {
		s := &series[i]
		for _, x := range s.Histograms {
			if x.T >= from && x.T < min(to, st.until) {
				st.res.DroppedSamples++
				st.res.DroppedHistogramSamples++
			}
		}
		s.Histograms = nil
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

// plus adds q's counts to p's; p's phase and position stay.
func (p Progress) plus(q Progress) Progress {
	p.PartitionsWritten += q.PartitionsWritten
	p.PartitionsSkipped += q.PartitionsSkipped
	p.RawSamples += q.RawSamples
	p.RawBlockSamples += q.RawBlockSamples
	p.DroppedSamples += q.DroppedSamples
	p.RefusedRawSamples += q.RefusedRawSamples
	p.HistogramSamples += q.HistogramSamples
	p.DroppedHistogramSamples += q.DroppedHistogramSamples
	return p
}
