package downsample

import (
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/prometheus/prometheus/util/kahansum"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// Resolutions and partition lengths of the two rollup tiers, in milliseconds.
// They are fixed: the on-disk formats (docs/format/) and the stitched view
// depend on them.
const (
	MinuteRes = int64(60 * 1000)
	HourRes   = 60 * MinuteRes
	DayLen    = 24 * HourRes

	// StaleLookahead is how far after a window's last float sample a stale
	// marker still marks the window Stale, wherever the marker falls: in the
	// same window, or in a later one that holds no float sample (a series that
	// ends is marked stale at the next scrape, often in the next minute). It
	// equals PromQL's default lookback: a reader extends a sample by at most
	// that much anyway. Because the rule does not depend on the resolution,
	// hour windows merged from minute windows carry the same Stale as hour
	// windows computed from raw samples.
	StaleLookahead = 5 * MinuteRes
)

// Stats counts what one window computation read.
type Stats struct {
	Floats     int // float samples aggregated (stale markers excluded)
	Stale      int // stale markers seen
	Histograms int // native histogram samples skipped: they stay raw-only
}

func (s *Stats) add(o Stats) {
	s.Floats += o.Floats
	s.Stale += o.Stale
	s.Histograms += o.Histograms
}

// builder aggregates one series' samples, in time order, into windows. Its
// semantics are chosen so that a window answers what PromQL's *_over_time and
// counter functions return over the same raw samples:
//
//   - every float sample counts, NaN included (count_over_time counts NaN);
//   - Sum is a Kahan-Neumaier sum finished as sum_over_time finishes it, so a
//     NaN makes it NaN;
//   - Min and Max skip NaN unless every sample is NaN, as min_over_time and
//     max_over_time do;
//   - Increase is Last - First plus the value before every reset, the form
//     PromQL's increase() uses; for NaN-free data it equals the per-step sum
//     the tiers.Window comment gives, and a NaN between two finite samples does
//     not poison it (as in PromQL);
//   - Resets counts v < previous v, as resets() does (NaN never resets);
//   - for a KindGauge series there are no resets: Resets is 0 and Increase
//     is exactly Last - First (see Kind);
//   - stale markers are not aggregated; a stale marker that is the next
//     sample after the window's last float sample, at most StaleLookahead
//     later, sets Stale; stale markers do not break the counter chain (PromQL
//     drops them from range vectors too).
type builder struct {
	start       int64
	first, last float64
	min, max    float64
	sum, c      float64 // Kahan-Neumaier state of Sum
	resetSum    float64 // sum of the values before each reset inside the window
	// res is the window length; firstOff and lastOff are the window's first
	// and last float sample's offsets from start (less than res, so they
	// fit as res does). The tee holds a builder per series: 32-bit
	// offsets and length instead of three int64s, and the window's Sum and
	// Increase computed when it is read, keep it at 88 bytes, not a whole
	// tiers.Window's 88 and the state's 40.
	res               uint32
	firstOff, lastOff uint32
	count, resets     uint32
	kind              Kind
	open              bool
	stale             bool // the sample after lastT is a stale marker (tiers.Window.Stale)
}

// maxRes is the longest window a builder takes (res is 32 bits): 49 days.
const maxRes = math.MaxUint32

func newBuilder(res int64, kind Kind) builder {
	return builder{res: uint32(res), kind: kind} //nolint:gosec // res is checked against maxRes by its callers
}

// firstT and lastT are the timestamps of the open window's first and last
// float sample.
func (b *builder) firstT() int64 { return b.start + int64(b.firstOff) }
func (b *builder) lastT() int64  { return b.start + int64(b.lastOff) }

// add aggregates a float sample (stale markers included) at t. When t falls
// into a later window than the open one, the open window is returned complete.
func (b *builder) add(t int64, v float64) (done tiers.Window, ok bool) {
	if value.IsStaleNaN(v) {
		if b.open && t-b.lastT() <= StaleLookahead {
			b.stale = true
		}
		return tiers.Window{}, false
	}
	res := int64(b.res)
	if b.open && t >= b.start+res {
		done, ok = b.finish(), true
	}
	if !b.open {
		start := timegrid.Floor(t, res)
		off := uint32(t - start) //nolint:gosec // 0 <= t-start < res <= maxRes
		*b = builder{res: b.res, kind: b.kind, open: true, start: start, firstOff: off, lastOff: off, count: 1, first: v, last: v, min: v, max: v}
		b.sum, b.c = kahansum.Inc(v, 0, 0)
		return done, ok
	}
	if v < b.last && b.kind != KindGauge {
		b.resets++
		b.resetSum += b.last
	}
	b.count++
	b.sum, b.c = kahansum.Inc(v, b.sum, b.c)
	if v < b.min || math.IsNaN(b.min) {
		b.min = v
	}
	if v > b.max || math.IsNaN(b.max) {
		b.max = v
	}
	b.lastOff, b.last = uint32(t-b.start), v //nolint:gosec // in order within the window: 0 <= t-start < res
	b.stale = false
	return done, ok
}

// finish closes the open window and returns it.
func (b *builder) finish() tiers.Window {
	b.open = false
	return b.current()
}

// current returns the open window as finish would, leaving it open: more
// samples may still be added to it.
func (b *builder) current() tiers.Window {
	w := tiers.Window{
		Start: b.start, FirstT: b.firstT(), LastT: b.lastT(), Count: b.count,
		Min: b.min, Max: b.max, First: b.first, Last: b.last,
		Resets: b.resets, Stale: b.stale,
	}
	w.Sum = b.sum
	if !math.IsInf(b.sum, 0) {
		w.Sum += b.c
	}
	if b.kind == KindGauge {
		// Not + resetSum (0): -0 + 0 is +0, and the rule that stores
		// Increase as a null must see exactly Last - First.
		w.Increase = w.Last - w.First
	} else {
		w.Increase = w.Last - w.First + b.resetSum
	}
	return w
}

// AppendWindows aggregates the float samples of it with mint <= t < maxt into
// windows of length res aligned to res, and appends them to dst in time order.
// kind is the series' kind (Config.KindOf of its labels).
// It reads on past maxt up to the first sample at or after maxt, at most
// StaleLookahead past it, to see a stale marker that ends the last window:
// callers that read from a querier select [mint, maxt+StaleLookahead].
// Minutes (or hours) without a float sample produce no window. Native
// histogram samples are skipped and counted in Stats: rollups are float-only
// (classic histograms are float series and roll up as counters).
//
// The iterator must yield samples in ascending time order, as every
// storage.Series iterator does.
func AppendWindows(dst []tiers.Window, it chunkenc.Iterator, res, mint, maxt int64, kind Kind) ([]tiers.Window, Stats, error) {
	if res <= 0 || res > maxRes {
		return dst, Stats{}, fmt.Errorf("window resolution must be positive and at most %d ms, got %d", int64(maxRes), res)
	}
	var (
		b  = newBuilder(res, kind)
		st Stats
	)
	vt := it.Next()
	if vt != chunkenc.ValNone {
		if t := it.AtT(); t < mint {
			vt = it.Seek(mint)
		}
	}
	for ; vt != chunkenc.ValNone; vt = it.Next() {
		switch vt {
		case chunkenc.ValFloat:
			t, v := it.At()
			if t >= maxt {
				if value.IsStaleNaN(v) {
					b.add(t, v) // may mark the last window stale; never closes it
				}
				return finishAppend(dst, &b, st, it)
			}
			if value.IsStaleNaN(v) {
				st.Stale++
			} else {
				st.Floats++
			}
			if w, ok := b.add(t, v); ok {
				dst = append(dst, w)
			}
		default: // native histograms (integer or float)
			if it.AtT() >= maxt {
				return finishAppend(dst, &b, st, it)
			}
			st.Histograms++
		}
	}
	return finishAppend(dst, &b, st, it)
}

func finishAppend(dst []tiers.Window, b *builder, st Stats, it chunkenc.Iterator) ([]tiers.Window, Stats, error) {
	if b.open {
		dst = append(dst, b.finish())
	}
	if err := it.Err(); err != nil {
		return dst, st, fmt.Errorf("read raw samples: %w", err)
	}
	return dst, st, nil
}

// Merge combines consecutive windows of one series (ascending Start, not
// overlapping) into one window, as if the window had been computed from the
// raw samples directly: for KindCounter the step from one window's Last to
// the next window's First is a counter reset when First < Last (a reset
// exactly at a boundary) and adds First to Increase, else it adds
// First - Last; for KindGauge Resets is 0 and Increase is Last - First of the
// result (also when the windows were written with counter semantics). Min,
// Max and Sum keep the PromQL semantics described on AppendWindows.
//
// The result's Start is windows[0].Start; a caller building a coarser
// resolution sets it to the coarser window's start. Merge of no windows
// returns the zero Window (Count 0), which callers must not store.
func Merge(windows []tiers.Window, kind Kind) tiers.Window {
	if len(windows) == 0 {
		return tiers.Window{}
	}
	out := windows[0]
	sum, c := kahansum.Inc(out.Sum, 0, 0)
	for i := 1; i < len(windows); i++ {
		w := &windows[i]
		if kind != KindGauge {
			if w.First < out.Last {
				out.Resets++
				out.Increase += w.First
			} else {
				out.Increase += w.First - out.Last
			}
			out.Increase += w.Increase
			out.Resets += w.Resets
		}
		out.Count += w.Count
		sum, c = kahansum.Inc(w.Sum, sum, c)
		if w.Min < out.Min || math.IsNaN(out.Min) {
			out.Min = w.Min
		}
		if w.Max > out.Max || math.IsNaN(out.Max) {
			out.Max = w.Max
		}
		out.LastT, out.Last, out.Stale = w.LastT, w.Last, w.Stale
	}
	out.Sum = sum
	if !math.IsInf(sum, 0) {
		out.Sum += c
	}
	if kind == KindGauge {
		out.Increase, out.Resets = out.Last-out.First, 0
	}
	return out
}

// Coarsen merges a series' windows (ascending Start) into windows of the
// coarser resolution res, appending them to dst: it is how hour windows are
// built from minute windows. kind is the series' kind, as for Merge.
func Coarsen(dst, windows []tiers.Window, res int64, kind Kind) []tiers.Window {
	for i := 0; i < len(windows); {
		start := timegrid.Floor(windows[i].Start, res)
		j := i + 1
		for j < len(windows) && windows[j].Start < start+res {
			j++
		}
		w := Merge(windows[i:j], kind)
		w.Start = start
		dst = append(dst, w)
		i = j
	}
	return dst
}
