package backfill

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunks"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// Stream is the streaming form of Run for history that goes entirely into
// the rollup tiers (Targets.Raw nil): samples arrive in time order across
// all series, and Stream writes each hour's minute partition as soon as no
// later sample can change it, then each day's hour partition once its hours
// are written. It holds one open minute of samples per series and the
// finished windows of the hours not yet written, so weeks of a large
// cluster stream through in bounded memory, where Run holds every sample.
//
// For the same samples it writes exactly the partitions Run writes with no
// raw tier (TestStreamEqualsRun). Like Run it never overwrites an existing
// minute partition and drops samples older than the hour tier's retention;
// it keeps no progress file (a stream cannot be resumed: rerun it, and the
// partitions already written are skipped).
//
// A Stream is not safe for concurrent use. The caller MUST call Close,
// which writes what is left; after an error the Stream is unusable.
type Stream struct {
	ctx    context.Context
	cfg    Config
	t      Targets
	oldest int64
	series map[uint64][]*streamSeries
	order  []*streamSeries // every series, in first-seen order
	prev   *streamSeries   // the series of the previous Append
	now    int64           // newest sample time seen
	hour   int64           // first hour not yet written (math.MinInt64 before the first sample)
	// until is the end of the stream's hours (math.MaxInt64: none): a
	// sample at or after it only closes the window before it, and no
	// partition at or after it is written, nor the hour partition of the
	// day that holds it (RunSliced: Run imports the history from there).
	until   int64
	days    []int64 // days with minute partitions whose hour partition is not built yet
	w       *partitionWriter
	res     Result
	err     error
	started bool
}

// streamSeries is one series: the samples of its open minute and the
// finished windows not yet written.
type streamSeries struct {
	labels  labels.Labels
	kind    downsample.Kind
	minute  int64         // start of the open minute (valid when len(pending) > 0)
	pending []floatSample // samples of the open minute (stale markers included)
	windows []tiers.Window
	// next is the series that followed this one in the previous Append:
	// producers emit series in the same order at every timestamp, so the
	// map lookup (a hash of every label) is usually skipped.
	next *streamSeries
}

// NewStream starts a stream into t.Minute and t.Hour; t.Raw must be nil.
func NewStream(ctx context.Context, cfg Config, t Targets) (*Stream, error) {
	if t.Minute == nil || t.Hour == nil {
		return nil, errors.New("backfill stream needs the minute and hour tiers")
	}
	if t.Raw != nil || t.RawAppendable != nil {
		return nil, errors.New("backfill stream writes rollup partitions only: use Run for history that reaches the raw tier")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Stream{ctx: ctx, cfg: cfg, t: t, oldest: Horizon(cfg), series: map[uint64][]*streamSeries{}, hour: math.MinInt64, now: math.MinInt64, until: math.MaxInt64}
	s.w = newPartitionWriter(ctx, t, cfg.KindOf, cfg.TempDir)
	return s, nil
}

// ErrOutOfOrder is returned by Stream.Append for a sample older than the
// newest one appended.
var ErrOutOfOrder = errors.New("backfill stream: samples must arrive in time order")

// Append adds one sample (a stale marker is a sample too). Samples must
// come in non-decreasing time order across all series; l may be kept.
func (s *Stream) Append(l labels.Labels, t int64, v float64) error {
	if s.err != nil {
		return s.err
	}
	if t < s.now {
		s.err = fmt.Errorf("%w: %d after %d (%s)", ErrOutOfOrder, t, s.now, l)
		return s.err
	}
	if t < s.oldest {
		s.res.DroppedSamples++
		return nil
	}
	if !s.started {
		s.started = true
		s.hour = timegrid.Floor(t, downsample.HourRes)
	}
	if t > s.now {
		s.now = t
		// Hour h is final once no sample can reach back into it: its last
		// window is closed by a later sample of its series, or by time
		// passing StaleLookahead beyond the hour.
		for s.hour+downsample.HourRes+downsample.StaleLookahead < t && s.hour < s.until {
			if err := s.flushHour(); err != nil {
				s.err = err
				return err
			}
		}
	}
	ss := s.lookup(l)
	m := timegrid.Floor(t, downsample.MinuteRes)
	if len(ss.pending) > 0 && m != ss.minute {
		// This sample is the first after the open minute: it closes the
		// minute (and ends it stale when it is a stale marker within
		// StaleLookahead), exactly as it does in Run's hour-long pass.
		if err := ss.closeMinute(&floatSample{t: t, v: v}); err != nil {
			s.err = err
			return err
		}
	}
	if t >= s.until {
		return nil // it closed the window before it, if any; it opens none
	}
	if len(ss.pending) == 0 && value.IsStaleNaN(v) {
		return nil // a stale marker opens no window
	}
	if n := len(ss.pending); n > 0 && ss.pending[n-1].t == t {
		ss.pending[n-1].v = v // as Run, the last of samples sharing a timestamp
		return nil
	}
	if len(ss.pending) == 0 {
		ss.minute = m
	}
	ss.pending = append(ss.pending, floatSample{t: t, v: v})
	return nil
}

func (s *Stream) lookup(l labels.Labels) *streamSeries {
	if p := s.prev; p != nil && p.next != nil && labels.Equal(p.next.labels, l) {
		s.prev = p.next
		return p.next
	}
	h := l.Hash()
	var ss *streamSeries
	for _, c := range s.series[h] {
		if labels.Equal(c.labels, l) {
			ss = c
			break
		}
	}
	if ss == nil {
		ss = &streamSeries{labels: l, kind: s.cfg.KindOf.Of(l)}
		s.series[h] = append(s.series[h], ss)
		s.order = append(s.order, ss)
	}
	if s.prev != nil {
		s.prev.next = ss
	}
	s.prev = ss
	return ss
}

// closeMinute turns the open minute into its window; after, when non-nil,
// is the series' next sample.
func (ss *streamSeries) closeMinute(after *floatSample) error {
	in := ss.pending
	if after != nil {
		in = append(in, *after)
	}
	ws, _, err := downsample.AppendWindows(ss.windows, storage.NewListSeriesIterator(pendingView(in)), downsample.MinuteRes, ss.minute, ss.minute+downsample.MinuteRes, ss.kind)
	if err != nil {
		return fmt.Errorf("roll up %s: %w", ss.labels, err)
	}
	ss.windows = ws
	ss.pending = ss.pending[:0]
	return nil
}

// flushHour hands the minute partition of s.hour to the writer and moves
// on; when the hour ends a day, the day's hour partition is queued too.
func (s *Stream) flushHour() error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	if err := s.w.failed(); err != nil {
		return err
	}
	h, end := s.hour, s.hour+downsample.HourRes
	var out []tiers.SeriesWindows
	for _, ss := range s.order {
		if len(ss.pending) > 0 && ss.minute < end {
			if err := ss.closeMinute(nil); err != nil {
				return err
			}
		}
		n := 0
		for n < len(ss.windows) && ss.windows[n].Start < end {
			n++
		}
		if n > 0 {
			out = append(out, tiers.SeriesWindows{Labels: ss.labels, Windows: slices.Clone(ss.windows[:n])})
			ss.windows = slices.Delete(ss.windows, 0, n)
		}
	}
	s.hour = end
	if len(out) > 0 {
		if s.t.Minute.HasPartition(h) {
			s.res.PartitionsSkipped++
		} else {
			s.w.queue(writeJob{start: h, series: out})
			s.res.PartitionsWritten++
			if d := timegrid.Floor(h, downsample.DayLen); !slices.Contains(s.days, d) {
				s.days = append(s.days, d)
			}
		}
	}
	s.res.Phase, s.res.Done = "minute", s.res.PartitionsWritten+s.res.PartitionsSkipped
	if end%downsample.DayLen == 0 {
		s.buildDays(end)
	}
	return nil
}

// buildDays queues the hour partitions of the days that end at or before
// before; the writer builds each after the minute partitions queued before.
func (s *Stream) buildDays(before int64) {
	rest := s.days[:0]
	for _, d := range s.days {
		if d+downsample.DayLen > before {
			rest = append(rest, d)
			continue
		}
		s.w.queue(writeJob{start: d, day: true})
		s.res.PartitionsWritten++
	}
	s.days = rest
}

// Close writes the remaining minute partitions and the hour partitions of
// the days they touch, waits for every write, and returns what the stream
// wrote.
func (s *Stream) Close() (Result, error) {
	if s.err == nil && s.started {
		for s.hour <= s.now && s.hour < s.until && s.err == nil {
			s.err = s.flushHour()
		}
		if s.err == nil {
			s.buildDays(s.until)
		}
	}
	if err := s.w.close(); err != nil && s.err == nil {
		s.err = err
	}
	if s.err != nil {
		return s.res, s.err
	}
	s.err = errors.New("backfill stream closed")
	return s.res, nil
}

// writeJob is one partition to write: a minute partition, or a day's hour
// partition built from the minute tier.
type writeJob struct {
	start  int64
	day    bool
	series []tiers.SeriesWindows
}

// partitionWriter writes partitions in the order queued, in its own
// goroutine, so that compressing and writing Parquet overlaps the rolling
// up of the next hour. At most streamQueue partitions wait.
type partitionWriter struct {
	ctx  context.Context
	t    Targets
	kind downsample.KindFunc
	tmp  string // Config.TempDir
	jobs chan writeJob
	done chan struct{}
	mu   sync.Mutex
	err  error
}

const streamQueue = 2

func newPartitionWriter(ctx context.Context, t Targets, kind downsample.KindFunc, tmp string) *partitionWriter {
	w := &partitionWriter{ctx: ctx, t: t, kind: kind, tmp: tmp, jobs: make(chan writeJob, streamQueue), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *partitionWriter) run() {
	defer close(w.done)
	for j := range w.jobs {
		if w.failed() != nil {
			continue // drain: the stream reports the first error
		}
		var err error
		if j.day {
			if _, _, err = downsample.BuildHourPartition(w.ctx, w.t.Minute, w.t.Hour, j.start, w.kind, w.tmp); err != nil {
				err = fmt.Errorf("backfill: %w", err)
			}
		} else if err = w.t.Minute.WritePartition(j.start, j.series); err != nil {
			err = fmt.Errorf("backfill minute partition %s: %w", time.UnixMilli(j.start).UTC().Format(time.RFC3339), err)
		}
		if err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
		}
	}
}

func (w *partitionWriter) queue(j writeJob) { w.jobs <- j }

func (w *partitionWriter) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// close waits for the queued writes and returns the first error.
func (w *partitionWriter) close() error {
	if w.jobs != nil {
		close(w.jobs)
		<-w.done
		w.jobs = nil
	}
	return w.failed()
}

// pendingView exposes a series' open minute to
// storage.NewListSeriesIterator without boxing a copy of each sample (the
// stream's hot path): Get returns a pointer into the slice.
type pendingView []floatSample

func (v pendingView) Get(i int) chunks.Sample { return &v[i] }
func (v pendingView) Len() int                { return len(v) }
