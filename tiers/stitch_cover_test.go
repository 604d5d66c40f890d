package tiers

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// TestWindowIterFirstCovered: min_over_time and max_over_time over the
// iterator's samples, where a boundary First the previous window's extreme
// covers is left out (seriesPart.cover), answer every range at least cover
// long, ending anywhere, as over all of windowPoints' samples; and on
// clock-aligned windows the iterator leaves most Firsts out.
func TestWindowIterFirstCovered(t *testing.T) {
	const res = int64(3_600_000)
	r := rand.New(rand.NewPCG(9, 10))
	var kept, all int // samples, left out or not
	for round := range 400 {
		mode := []aggMode{modeMin, modeMax}[round%2]
		var ws []Window
		start := int64(1_000) * res
		for range 5 + r.IntN(30) {
			start += res * int64(1+r.IntN(4)/3*r.IntN(3)) // mostly the next window, sometimes a gap
			last := start + res - 15_000
			switch r.IntN(8) {
			case 0:
				last = start + int64(r.IntN(int(res))) // early, anywhere in the window
			case 1:
				last = start // a single sample at the start
			case 2:
				last += int64(r.IntN(10_000)) // jitter
			}
			first := start
			if r.IntN(5) == 0 {
				first += int64(r.IntN(int(last-start) + 1)) // not on the start
			}
			v := r.NormFloat64()
			w := Window{Start: start, FirstT: first, LastT: last, Count: 240, Min: v - 1, Max: v + 1, First: v + r.NormFloat64(), Stale: r.IntN(15) == 0}
			switch r.IntN(20) {
			case 0:
				w.First = math.NaN()
			case 1:
				w.Max, w.Min = math.Inf(1), math.Inf(-1)
			}
			w.Min, w.Max = min(w.Min, w.First), max(w.Max, w.First) // NaN leaves them
			ws = append(ws, w)
		}
		seq := randomBlocks(r, ws, res, mode)
		cover := []int64{res, res / 2, 2 * res, res + 1, 3 * res}[r.IntN(5)]
		p := &seriesPart{windows: seq, mode: mode, res: res, lo: math.MinInt64, hi: math.MaxInt64}
		if r.IntN(3) == 0 {
			p.lo = ws[0].Start + int64(r.IntN(int(2*res)))
		}
		var want []point
		for i := range ws {
			for _, pt := range windowPoints(nil, &ws[i], nil, p) {
				if pt.t >= p.lo {
					want = append(want, pt)
				}
			}
		}
		p.cover = cover
		var got []point
		it := p.iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			got = append(got, point{ts, v})
		}
		kept += len(got)
		all += len(want)

		for range 200 {
			rng := cover + int64(r.IntN(int(2*res)))
			at := ws[0].Start + int64(r.IntN(int(ws[len(ws)-1].Start+2*res-ws[0].Start)))
			if r.IntN(2) == 0 {
				at = ws[r.IntN(len(ws))].Start // on a window's start, as aligned steps are
				rng = cover + int64(r.IntN(3))*res
			}
			gv, gok := extremeOver(got, at, rng, mode)
			wv, wok := extremeOver(want, at, rng, mode)
			if gok != wok || gok && math.Float64bits(gv) != math.Float64bits(wv) {
				t.Fatalf("round %d (mode %d, cover %d): over (%d, %d]: %v %v, want %v %v\n got %v\nwant %v", round, mode, cover, at-rng, at, gv, gok, wv, wok, got, want)
			}
		}
	}
	t.Logf("random windows: kept %d of %d samples", kept, all)

	// A gauge scraped on the clock every 15 s for two days, as the hour
	// tier holds it: each window's First is the scrape on its start, no
	// higher than the last window's maximum but where the gauge steps up
	// (every 10th hour), so only those Firsts and the first window's stay.
	seq := windowSeq{}
	b := newWindowBlock(res, columnsFor(modeMax), 48)
	for i := range int64(48) {
		start := 1_000*res + i*res
		first := float64(i / 10 * 10)
		b.lastT = append(b.lastT, start+res-15_000)
		b.firstT = append(b.firstT, start)
		b.first = append(b.first, first)
		b.max = append(b.max, first+0.5)
	}
	seq.add(b, 0, 48)
	p := &seriesPart{windows: seq, mode: modeMax, res: res, cover: res, lo: math.MinInt64, hi: math.MaxInt64}
	n := 0
	for it := p.iterator(nil); it.Next() == chunkenc.ValFloat; {
		n++
	}
	if want := 48 + 1 + 4; n != want {
		t.Errorf("aligned gauge: %d samples, want %d (a Max a window, the first window's First and the 4 step-ups')", n, want)
	}
}

// extremeOver is min_over_time (max_over_time) of the samples in (at-rng,
// at] as PromQL computes it: stale markers dropped, a NaN replaced by any
// later value.
func extremeOver(pts []point, at, rng int64, mode aggMode) (float64, bool) {
	var m float64
	ok := false
	for _, pt := range pts {
		if pt.t <= at-rng || pt.t > at || value.IsStaleNaN(pt.v) {
			continue
		}
		if !ok || math.IsNaN(m) || mode == modeMax && pt.v > m || mode == modeMin && pt.v < m {
			m = pt.v
		}
		ok = true
	}
	return m, ok
}
