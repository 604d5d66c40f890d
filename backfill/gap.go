package backfill

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/internal/timegrid"
)

// The raw tier's head takes a series' samples in order only (and, within
// the out-of-order window, a little behind): history imported into a store
// that already holds live samples of its series is refused from the first
// live sample back. Such a store is what a user moving from Prometheus has:
// remote write pointed at Strata at T0, then the history backfilled from
// the old server. The samples of T0's hour before T0 (the hour the cutoff
// puts in the head) were refused and lost, and the minute partition of that
// hour, the pipeline's, held only the live part for good.
//
// A refused sample is a gap sample when it lies before the first sample raw
// holds of its series around the head call's range, after the last, or in
// a hole between two of them (longer than a minute and than three times
// the series' mean interval): history where raw has none. Gap samples are
// written into raw blocks beside the head, as the blocks behind the cutoff
// are (the TSDB merges overlapping blocks at query time and compacts them
// together), and every minute partition that already exists for an hour
// they fall in is written again from raw's samples and theirs. Any other
// refused sample stays refused: at a timestamp raw holds it is the same
// scrape sent twice, or another value for it (the live one is kept);
// elsewhere it is another source's sample among the live ones, which
// interleaved with them would make two replicas' counters look like
// resets.

// span is what raw holds of a series around a head call's range: its first
// and last sample, and its holes, the intervals between two consecutive
// samples longer than minHole and than holeIntervals times the series'
// mean interval (a receiver down for a while, a sender that dropped what
// it could not deliver).
type span struct {
	first, last int64
	n           int
	holes       [][2]int64 // (from, to), both raw samples
}

// minHole and holeIntervals make a hole: a scrape that came late, or a
// series scraped less often than the others, is none.
const (
	minHole       = 60_000
	holeIntervals = 3
)

// spanMargin is how far before and after a range raw is read for the spans
// of its series: a series whose samples go on across the range's edge has
// no first or last sample at it, so another source's sample just inside the
// range, among the live ones, is not taken for history before or after them.
const spanMargin = 10 * downsample.MinuteRes

// rawSpans returns the span of every series of series that raw holds
// samples of in [from, to), by its index.
func rawSpans(ctx context.Context, q storage.Querier, series []Series, from, to int64) (map[int]*span, error) {
	out := map[int]*span{}
	err := eachRawSeries(ctx, q, series, nil, from, to, func(k int, it chunkenc.Iterator) error {
		return addSpan(out, k, it, from, to, nil)
	})
	return out, err
}

// addSpan sets series k's span to that of the samples in [from, to) it
// reads from it; keep, when not nil, is given every float sample it reads
// in [from, to).
func addSpan(spans map[int]*span, k int, it chunkenc.Iterator, from, to int64, keep func(t int64, v float64)) error {
	var sp *span
	for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
		t := it.AtT()
		if t < from || t >= to {
			continue
		}
		if keep != nil && vt == chunkenc.ValFloat {
			_, v := it.At()
			keep(t, v)
		}
		switch {
		case sp == nil:
			sp = &span{first: t, last: t}
		case t-sp.last > minHole:
			sp.holes = append(sp.holes, [2]int64{sp.last, t})
		}
		sp.last = t
		sp.n++
	}
	if sp == nil {
		return it.Err()
	}
	if sp.n > 1 {
		mean := (sp.last - sp.first) / int64(sp.n-1)
		sp.holes = slices.DeleteFunc(sp.holes, func(h [2]int64) bool { return h[1]-h[0] <= holeIntervals*mean })
	}
	spans[k] = sp
	return it.Err()
}

// eachRawSeries calls f with the iterator of every raw series in [from, to)
// that is one of series (only those in keep, when keep is not nil), with
// its index in series. It selects by metric name, one name at a time.
func eachRawSeries(ctx context.Context, q storage.Querier, series []Series, keep map[int]bool, from, to int64, f func(k int, it chunkenc.Iterator) error) error {
	byName := map[string][]int{}
	for k, s := range series {
		if keep == nil || keep[k] {
			name := s.Labels.Get(model.MetricNameLabel)
			byName[name] = append(byName[name], k)
		}
	}
	var it chunkenc.Iterator
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		byHash := map[uint64][]int{}
		for _, k := range byName[name] {
			h := series[k].Labels.Hash()
			byHash[h] = append(byHash[h], k)
		}
		set := q.Select(ctx, false, &storage.SelectHints{Start: from, End: to - 1}, labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, name))
		for set.Next() {
			s := set.At()
			lset := s.Labels()
			i := slices.IndexFunc(byHash[lset.Hash()], func(k int) bool { return labels.Equal(series[k].Labels, lset) })
			if i < 0 {
				continue
			}
			it = s.Iterator(it)
			if err := f(byHash[lset.Hash()][i], it); err != nil {
				return fmt.Errorf("read raw %s: %w", lset, err)
			}
		}
		if err := set.Err(); err != nil {
			return fmt.Errorf("read raw: %w", err)
		}
	}
	return nil
}

// isGap reports whether a refused sample of series k at t is a gap sample:
// outside the span raw holds of the series, or in one of its holes.
func isGap(spans map[int]*span, k int, t int64) bool {
	sp, ok := spans[k]
	if !ok || t < sp.first || t > sp.last {
		return true
	}
	return slices.ContainsFunc(sp.holes, func(h [2]int64) bool { return t > h[0] && t < h[1] })
}

// gaps collects the gap samples of one call of head, by series, in time
// order.
type gaps struct {
	series map[int]*Series // by the index in head's input
	from   int64           // the first gap sample's time (math.MaxInt64: none)
}

func (g *gaps) add(in []Series, k int, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram) {
	if g.series == nil {
		g.series = map[int]*Series{}
	}
	s := g.series[k]
	if s == nil {
		s = &Series{Labels: in[k].Labels}
		g.series[k] = s
	}
	if h != nil || fh != nil {
		s.Histograms = append(s.Histograms, HistogramSample{T: t, H: h, FH: fh})
	} else {
		s.Samples = append(s.Samples, Sample{t, v})
	}
	g.from = min(g.from, t)
}

// fill writes the gap samples of series (head's input, whose samples run to
// StaleLookahead past to) into raw blocks of the raw tier's block range and
// writes again every minute partition the minute tier already has for an
// hour of [from, to) they fall in.
func (im *importer) fill(series []Series, g *gaps, from, to int64) error {
	if len(g.series) == 0 {
		return nil
	}
	list := make([]Series, 0, len(g.series))
	mint, maxt := int64(math.MaxInt64), int64(math.MinInt64)
	for _, k := range slices.Sorted(maps.Keys(g.series)) {
		s := g.series[k]
		f, l := s.span()
		mint, maxt = min(mint, f), max(maxt, l)
		list = append(list, *s)
	}
	// The partitions first, then the blocks: an import killed between the
	// two finds the gap samples still missing from raw and does both again;
	// one killed while it wrote the blocks finds those of the blocks written
	// in raw (refused then) and writes the partitions again from them and
	// the rest; one killed after them has its partitions written.
	for h := timegrid.Floor(max(mint, from), downsample.HourRes); h < min(maxt+1, to); h += downsample.HourRes {
		if !im.t.Minute.HasPartition(h) {
			continue // the pipeline computes it from raw, gap blocks included
		}
		if err := im.rewritePartition(series, g, h); err != nil {
			return fmt.Errorf("backfill minute partition %s again: %w", time.UnixMilli(h).UTC().Format(time.RFC3339), err)
		}
	}
	span := im.st.RawBlockRange
	for b := timegrid.Floor(mint, span); b <= maxt; b += span {
		n, nh, err := writeGapBlockFunc(im.ctx, list, im.t.Raw.DB().Dir(), span, b, b+span)
		if err != nil {
			return fmt.Errorf("backfill raw block of gap samples %s: %w", time.UnixMilli(b).UTC().Format(time.RFC3339), err)
		}
		im.res.RawGapSamples += n
		im.res.HistogramSamples += nh
	}
	return nil
}

// rewritePartition writes hour h's minute partition again: the windows of
// every series with gap samples in h computed from raw's samples and the
// gap samples (and, in the StaleLookahead past the hour, their samples
// outside raw's span of them there: the next slice's gap samples), the
// others' as they were (the diagnosis engine's baselines among them, which
// raw does not hold).
func (im *importer) rewritePartition(series []Series, g *gaps, h int64) (err error) {
	end := h + downsample.HourRes
	affected := map[int]bool{}
	for k, s := range g.series {
		if slices.ContainsFunc(s.Samples, func(x Sample) bool { return x.T >= h && x.T < end }) {
			affected[k] = true
		}
	}
	if len(affected) == 0 {
		return nil // histograms only: the rollups hold floats
	}
	// Raw's float samples of the affected series in [h, end+StaleLookahead)
	// and their spans around the lookahead past the hour, which the next
	// slice's gap samples may fall in.
	lo, hi := h-spanMargin, end+downsample.StaleLookahead+spanMargin
	q, err := im.t.Raw.Querier(lo, hi-1)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, q.Close()) }()
	merged := map[int][]Sample{}
	next := map[int]*span{}
	err = eachRawSeries(im.ctx, q, series, affected, lo, hi, func(k int, it chunkenc.Iterator) error {
		return addSpan(next, k, it, lo, hi, func(t int64, v float64) {
			if t >= h && t < end+downsample.StaleLookahead {
				merged[k] = append(merged[k], Sample{t, v})
			}
		})
	})
	if err != nil {
		return err
	}
	var recomputed []Series
	for k := range affected {
		ss := merged[k]
		for _, x := range g.series[k].Samples {
			if x.T >= h && x.T < end+downsample.StaleLookahead {
				ss = append(ss, x)
			}
		}
		s := &series[k]
		i, _ := slices.BinarySearchFunc(s.Samples, end, func(x Sample, t int64) int { return cmp.Compare(x.T, t) })
		for _, x := range s.Samples[i:] {
			if x.T >= end+downsample.StaleLookahead {
				break
			}
			if isGap(next, k, x.T) {
				ss = append(ss, x)
			}
		}
		// Raw's sample wins a timestamp both have: it comes first here.
		slices.SortStableFunc(ss, func(a, b Sample) int { return cmp.Compare(a.T, b.T) })
		ss = slices.CompactFunc(ss, func(a, b Sample) bool { return a.T == b.T })
		recomputed = append(recomputed, Series{Labels: s.Labels, Samples: ss})
	}
	windows, err := minuteWindows(recomputed, h, im.cfg.KindOf)
	if err != nil {
		return err
	}
	old, err := im.t.Minute.Select(im.ctx, h, end-1)
	if err != nil {
		return err
	}
	byLabels := map[string]int{}
	for i, sw := range old {
		byLabels[sw.Labels.String()] = i
	}
	for _, sw := range windows {
		if i, ok := byLabels[sw.Labels.String()]; ok {
			old[i] = sw
		} else {
			old = append(old, sw)
		}
	}
	if err := im.t.Minute.WritePartition(h, old); err != nil {
		return err
	}
	im.res.PartitionsRewritten++
	// The day's hour partition is built again, if this import built it,
	// and by a resume of it too: the hours written again are recorded.
	d := timegrid.Floor(h, downsample.DayLen)
	im.days[d] = true
	im.st.Hour = slices.DeleteFunc(im.st.Hour, func(x int64) bool { return x == d })
	if !slices.Contains(im.st.Rewritten, h) {
		im.st.Rewritten = append(im.st.Rewritten, h)
	}
	return im.save()
}

// writeGapBlockFunc is writeGapBlock; tests make it fail.
var writeGapBlockFunc = writeGapBlock

// writeGapBlock writes the gap samples of list in [from, to) as writeRawBlock
// does, as a block marked out-of-order (its meta.json's "from-out-of-order"
// compaction hint), moved into dir once marked. The TSDB takes the newest
// in-order block's end for the head's lower bound: when it opens, the WAL's
// samples before it are dropped, and a reload after a compaction truncates
// the head there. A gap block ends among the head's samples, and unmarked
// it cost the head every live sample before its end (a test reopening raw
// lost 50 minutes of them); blocks the out-of-order head is compacted into
// are marked so for the same reason. The block is written in a directory
// the TSDB removes at its next start if the backfill dies before the move.
func writeGapBlock(ctx context.Context, list []Series, dir string, span, from, to int64) (n, nh int, err error) {
	tmp, err := os.MkdirTemp(dir, "backfill-gap-*.tmp-for-creation")
	if err != nil {
		return 0, 0, err
	}
	defer func() { err = errors.Join(err, os.RemoveAll(tmp)) }()
	if n, nh, err = writeRawBlock(ctx, list, tmp, span, from, to); err != nil || n == 0 {
		return 0, 0, err
	}
	ents, err := os.ReadDir(tmp)
	if err != nil {
		return 0, 0, err
	}
	if len(ents) != 1 {
		return 0, 0, fmt.Errorf("block writer left %d entries in %s, want one block", len(ents), tmp)
	}
	block := filepath.Join(tmp, ents[0].Name())
	metaPath := filepath.Join(block, "meta.json")
	b, err := os.ReadFile(metaPath)
	if err != nil {
		return 0, 0, err
	}
	var meta tsdb.BlockMeta
	if err := json.Unmarshal(b, &meta); err != nil {
		return 0, 0, fmt.Errorf("block meta %s: %w", metaPath, err)
	}
	meta.Compaction.SetOutOfOrder()
	if b, err = json.MarshalIndent(&meta, "", "\t"); err != nil {
		return 0, 0, err
	}
	if err := atomicfile.WriteFile(metaPath, b); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(block, filepath.Join(dir, ents[0].Name())); err != nil {
		return 0, 0, err
	}
	return n, nh, atomicfile.SyncDir(dir)
}
