package downsample

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// dirtyRange is a series' minutes [from, to) to recompute from raw.
type dirtyRange struct {
	slot     uint32
	lset     labels.Labels
	kind     Kind
	from, to int64
}

// drainTee moves what the tee computed to the spills, up to the mark: the
// windows emitted since the last tick, the open windows of minutes that
// became final (a series that stopped, or lags, emits its window then; more
// samples for it emit it again), and the windows recomputed from raw for
// series with out-of-order samples in minutes now final.
func (p *Pipeline) drainTee(ctx context.Context) error {
	to := p.mark
	p.tap.mu.Lock()
	if !p.tap.enabled {
		p.tap.mu.Unlock()
		return nil
	}
	p.tap.drained = max(p.tap.drained, to)
	for s := range p.tap.series.n {
		st := p.tap.series.at(s)
		if b := p.tap.series.builder(st); b != nil && b.open && !st.emitted && !st.tainted && b.start < to {
			p.emit(s, st, b.current())
		}
	}
	pending := p.tap.pending
	p.tap.pending = nil
	var redo []dirtyRange
	p.tap.dirty = slices.DeleteFunc(p.tap.dirty, func(s uint32) bool {
		st := p.tap.series.at(s)
		r := p.tap.dirtyRanges[s]
		if r.from >= to {
			return false
		}
		redo = append(redo, dirtyRange{slot: s, lset: st.lset, kind: st.kind, from: r.from, to: min(r.to+MinuteRes, to)})
		if r.to+MinuteRes <= to {
			delete(p.tap.dirtyRanges, s)
			st.listed = false
			return true
		}
		p.tap.dirtyRanges[s] = minuteRange{to, r.to}
		return false
	})
	if len(p.tap.dirtyRanges) == 0 {
		p.tap.dirtyRanges = nil // a map keeps its buckets: a burst of out-of-order samples is not held
	}
	p.tap.mu.Unlock()

	err := p.spillEntries(pending)
	clear(pending)
	p.tap.mu.Lock()
	if p.tap.pending == nil && cap(pending) <= 2*int(p.tap.series.nb)+1024 {
		// Reuse the buffer, unless it has room for many more windows
		// than the dense series hand over: grown while every series
		// was new (each starts dense), a 15 s fleet's would otherwise
		// keep 72 bytes for each of its series.
		p.tap.pending = pending[:0]
	}
	p.tap.mu.Unlock()
	if err != nil {
		return err
	}
	if len(redo) == 0 {
		return nil
	}
	entries, err := p.recompute(ctx, redo)
	if err == nil {
		// A sparse series' recomputed windows are not spilled: its
		// readers compute them from raw as well.
		p.tap.mu.Lock()
		for _, e := range entries {
			p.tap.series.at(e.slot).sawWindow(e.start)
		}
		entries = slices.DeleteFunc(entries, func(e spillEntry) bool { return p.tap.series.at(e.slot).sparse })
		p.tap.mu.Unlock()
		err = p.spillEntries(entries)
	}
	if err != nil {
		p.tap.mu.Lock()
		defer p.tap.mu.Unlock()
		for _, d := range redo {
			p.markDirty(d.slot, p.tap.series.at(d.slot), d.from, d.to-MinuteRes)
		}
		return err
	}
	return nil
}

// entryKey is a spill entry's place in partition order: its series' name
// and id, and its index in the entries. The labels, compared only between
// series of the same name and id, are read from the slot. At a minute
// boundary every series emits a window at once, so the tick sorts one key
// per series: 32 bytes, not the entry and its labels again.
type entryKey struct {
	name   string
	id     int64
	i      int32
	direct bool // the slot's (spillBlockOf: a block of direct series or of the others)
}

// spillEntries writes windows of the tee's series to their hours' spills,
// in one block per hour, sorted in partition order with the later of two
// windows of a series and minute after the earlier. Windows of an hour
// already written are dropped (a sample later than the flush: docs/rollups.md).
func (p *Pipeline) spillEntries(es []spillEntry) error {
	if len(es) == 0 {
		return nil
	}
	// lset, id and direct of a slot with a pending window cannot change:
	// slots are forgotten by the tick, which is running this.
	keyed := make([]entryKey, len(es))
	var directs int
	for i, e := range es {
		st := p.tap.series.at(e.slot)
		keyed[i] = entryKey{name: st.lset.Get(model.MetricNameLabel), id: st.id, i: int32(i), direct: st.direct}
		if st.direct {
			directs++
		}
	}
	slices.SortFunc(keyed, func(a, b entryKey) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		if c := cmp.Compare(a.id, b.id); c != 0 {
			return c
		}
		if sa, sb := es[a.i].slot, es[b.i].slot; sa != sb {
			if c := labels.Compare(p.tap.series.at(sa).lset, p.tap.series.at(sb).lset); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.i, b.i) // same series: emission order
	})
	hours := map[int64]bool{}
	for _, e := range es {
		hours[timegrid.Floor(e.start, HourRes)] = true
	}
	markHour := timegrid.Floor(p.mark, HourRes)
	var errs []error
	for _, h := range slices.Sorted(maps.Keys(hours)) {
		p.spillMu.RLock()
		sp := p.spills[h]
		p.spillMu.RUnlock()
		if sp == nil {
			// Every hour the mark has passed either has a spill or was
			// written: a window for a written hour comes too late.
			if h < markHour || p.minute.HasPartition(h) {
				continue
			}
			var err error
			if sp, err = p.spillFor(h); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		// The direct series' windows in blocks of their own (direct.go);
		// a kind no entry is of is not walked for.
		for _, direct := range []bool{false, true} {
			if (direct && directs == 0) || (!direct && directs == len(es)) {
				continue
			}
			if err := p.spillBlockOf(sp, es, keyed, h, direct); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// spillBlockOf writes the entries of hour h, of direct series or of the
// others, in key order, as one block of sp (none when there are none).
func (p *Pipeline) spillBlockOf(sp *hourSpill, es []spillEntry, keyed []entryKey, h int64, direct bool) error {
	buf := p.encBuf[:0]
	blk := spillBlock{minStart: math.MaxInt64, maxStart: math.MinInt64, direct: direct}
	enc := windowCodec{h: h}
	for _, k := range keyed {
		e := &es[k.i]
		if k.direct != direct || timegrid.Floor(e.start, HourRes) != h {
			continue
		}
		buf = binary.AppendUvarint(buf, uint64(e.slot))
		buf = enc.appendWindow(buf, e.window())
		blk.records++
		blk.minStart, blk.maxStart = min(blk.minStart, e.start), max(blk.maxStart, e.start)
	}
	p.encBuf = buf
	if blk.records == 0 {
		return nil
	}
	if err := p.writeBlock(sp, buf, blk); err != nil {
		// These windows are lost: the hour is recomputed from raw.
		p.spillMu.Lock()
		sp.reread = true
		p.spillMu.Unlock()
		return err
	}
	return nil
}

// recompute reads the dirty ranges' series from raw and returns their
// windows. One querier serves them all; each series is selected by its
// labels.
func (p *Pipeline) recompute(ctx context.Context, redo []dirtyRange) (out []spillEntry, err error) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, d := range redo {
		lo, hi = min(lo, d.from), max(hi, d.to)
	}
	q, err := p.src.Querier(lo, hi+StaleLookahead)
	if err != nil {
		return nil, fmt.Errorf("query raw tier: %w", err)
	}
	defer func() {
		if cerr := q.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close raw querier: %w", cerr))
		}
	}()
	var (
		ms    []*labels.Matcher
		it    chunkenc.Iterator
		ws    []tiers.Window
		total Stats
	)
	for _, d := range redo {
		ms = ms[:0]
		d.lset.Range(func(l labels.Label) { ms = append(ms, labels.MustNewMatcher(labels.MatchEqual, l.Name, l.Value)) })
		set := q.Select(ctx, false, &storage.SelectHints{Start: d.from, End: d.to + StaleLookahead, Func: "rollup"}, ms...)
		for set.Next() {
			s := set.At()
			if !labels.Equal(s.Labels(), d.lset) {
				continue // the matchers also match series with more labels
			}
			it = s.Iterator(it)
			var st Stats
			ws, st, err = AppendWindows(ws[:0], it, MinuteRes, d.from, d.to, d.kind)
			total.add(st)
			if err != nil {
				return nil, fmt.Errorf("recompute series %s: %w", d.lset, err)
			}
			for _, w := range ws {
				out = append(out, newSpillEntry(d.slot, w))
			}
		}
		if err := set.Err(); err != nil {
			return nil, fmt.Errorf("select raw series %s: %w", d.lset, err)
		}
	}
	p.m.samples.Add(float64(total.Floats))
	p.m.histograms.Add(float64(total.Histograms))
	p.m.recomputed.Add(float64(len(redo)))
	return out, nil
}

// forgetIdle forgets the series without a sample for an hour before the
// mark whose windows are all written: their slots are reused. It holds
// spillMu, so that no reader of a spill sees a slot change.
func (p *Pipeline) forgetIdle() {
	p.spillMu.Lock()
	defer p.spillMu.Unlock()
	oldest := int64(math.MaxInt64)
	for h := range p.spills {
		oldest = min(oldest, h)
	}
	p.tap.mu.Lock()
	defer p.tap.mu.Unlock()
	cutoff := p.mark - HourRes
	n := 0
	for s := range p.tap.series.n {
		st := p.tap.series.at(s)
		if st.lset.IsEmpty() || st.lastT >= cutoff || st.listed || st.hasWindowsFrom(oldest) {
			continue
		}
		if st.direct {
			p.tap.direct.del(st.lset.Hash(), s)
		}
		p.tap.series.release(s)
		n++
	}
	p.m.forgotten.Add(float64(n))
}

// registerMemoryMetrics exposes what the tee and the spills hold.
func (p *Pipeline) registerMemoryMetrics(reg prometheus.Registerer) {
	f := promauto.With(reg)
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_downsample_series",
		Help: "Series the rollup tee tracks, one window builder each.",
	}, func() float64 {
		p.tap.mu.Lock()
		defer p.tap.mu.Unlock()
		return float64(p.tap.series.live())
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_downsample_tee_bytes",
		Help: "Memory the rollup tee holds: its series slots, its reference index and the windows waiting for the next tick (labels are shared with the raw tier and not counted).",
	}, func() float64 {
		p.tap.mu.Lock()
		defer p.tap.mu.Unlock()
		n := int64(0)
		if pages := p.tap.series.pages.Load(); pages != nil {
			n += int64(len(*pages)) * slotPageSize * seriesStateBytes
		}
		n += int64(len(p.tap.series.builders)) * slotPageSize * builderBytes
		n += p.tap.series.byRef.bytes()
		n += p.tap.direct.bytes()
		n += int64(cap(p.tap.pending)) * int64(unsafe.Sizeof(spillEntry{}))
		n += int64(len(p.tap.dirtyRanges)) * int64(unsafe.Sizeof(minuteRange{})+8) // a map entry, about
		return float64(n)
	})
	f.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "strata_downsample_spill_bytes",
		Help: "Bytes of minute windows waiting for their partition in the open hours' spills (files with a spill directory, else memory).",
	}, func() float64 {
		p.spillMu.RLock()
		defer p.spillMu.RUnlock()
		n := int64(0)
		for _, sp := range p.spills {
			n += sp.size
		}
		return float64(n)
	})
}
