package downsample

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// interleaved is a random fleet whose senders misbehave in every way the
// tee must absorb: samples out of order within the lateness (landing in the
// minute a builder is folding and in minutes already folded), senders
// lagging behind the others by more than the lateness but in order, both at
// once, identical repeats, refused duplicates and too-old samples, counter
// resets, NaN, stale markers and gaps. What the raw tier accepted is the
// truth: the minute partitions must equal a from-scratch computation from
// raw.
type interleaved struct {
	labels     []labels.Labels
	deliveries []delivery
}

func genInterleaved(seed uint64, start, end int64) *interleaved {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	w := &interleaved{}
	const nSeries = 24
	type sender struct {
		step    int64
		lag     int64   // delivery delay: 0, or more than the lateness (in order)
		ooo     float64 // chance that a sample is delayed out of order, within the lateness
		counter bool
		stale   float64 // chance that a run ends with a stale marker (then a gap)
	}
	for i := range nSeries {
		name := "ilv_gauge"
		if i%3 != 0 {
			name = "ilv_total"
		}
		w.labels = append(w.labels, labelsFor(name, "series", fmt.Sprint(i)))
		s := sender{step: []int64{1000, 5000, 10_000, 15_000}[rng.IntN(4)], counter: i%3 != 0}
		switch i % 6 {
		case 1:
			s.lag = 11*MinuteRes + rng.Int64N(3*MinuteRes) // beyond the lateness, before the flush
		case 2:
			s.ooo = 0.15
		case 3:
			s.lag, s.ooo = 12*MinuteRes, 0.05
		case 4:
			s.stale = 0.01
		}
		v := 0.0
		for t := start + rng.Int64N(s.step); t < end; t += s.step {
			at := t + s.lag
			switch {
			case s.counter && rng.IntN(200) == 0:
				v = float64(rng.IntN(3)) // a reset
			case s.counter:
				v += float64(rng.IntN(10))
			case rng.IntN(100) == 0:
				v = math.NaN()
			default:
				v = float64(rng.IntN(100))
			}
			delayed := rng.Float64() < s.ooo
			if delayed {
				// Out of order, but within the lateness of the newest
				// sample (else the raw tier refuses it: also fine).
				at += 30_000 + rng.Int64N(8*MinuteRes)
			}
			w.deliveries = append(w.deliveries, delivery{series: i, t: t, v: v, at: at})
			if rng.IntN(50) == 0 { // an identical repeat: a no-op for raw
				w.deliveries = append(w.deliveries, delivery{series: i, t: t, v: v, at: at + rng.Int64N(60_000)})
			}
			// A different value at the same time, right after the series'
			// newest sample: refused. Out of order the TSDB would take it
			// (its out-of-order head does not look for the in-order one),
			// and which of the two a read returns can change when the head
			// compacts: no truth to compare with.
			if !delayed && rng.IntN(80) == 0 {
				w.deliveries = append(w.deliveries, delivery{series: i, t: t, v: v + 1, at: at + 1})
			}
			if rng.IntN(300) == 0 { // far too old: refused
				w.deliveries = append(w.deliveries, delivery{series: i, t: t - 30*MinuteRes, v: v, at: at + 1})
			}
			if rng.Float64() < s.stale {
				// The series ends: a stale marker, then a gap.
				w.deliveries = append(w.deliveries, delivery{series: i, t: t + s.step/2, v: math.Float64frombits(staleMarkerBits), at: at + s.step/2})
				t += int64(2+rng.IntN(8)) * MinuteRes
			}
		}
	}
	slices.SortStableFunc(w.deliveries, func(a, b delivery) int { return cmp.Compare(a.at, b.at) })
	return w
}

// deliver appends the deliveries with at in (from, to] through app,
// ignoring the raw tier's refusals, in batches of random size.
func (w *interleaved) deliver(t *testing.T, app storage.AppendableV2, rng *rand.Rand, from, to int64) {
	t.Helper()
	i, _ := slices.BinarySearchFunc(w.deliveries, from+1, func(d delivery, at int64) int { return cmp.Compare(d.at, at) })
	for i < len(w.deliveries) && w.deliveries[i].at <= to {
		a := app.AppenderV2(context.Background())
		for n := 1 + rng.IntN(40); n > 0 && i < len(w.deliveries) && w.deliveries[i].at <= to; n-- {
			d := w.deliveries[i]
			_, _ = a.Append(0, w.labels[d.series], 0, d.t, d.v, nil, nil, storage.AppendV2Options{}) // refusals are part of the test
			i++
		}
		if err := a.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestTeeInterleavedLateAndOutOfOrder runs the tee over random interleaved
// fleets and checks every minute partition, and the open windows, against a
// from-scratch computation from what raw holds.
func TestTeeInterleavedLateAndOutOfOrder(t *testing.T) {
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			var minute, hour readableWriter = newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen)
			spillDir := ""
			if seed%2 == 1 { // the real Parquet tiers and spill files
				spillDir = t.TempDir()
				m, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(t.TempDir()), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { m.Close() })
				h, err := tiers.OpenRollup(tiers.DefaultHourConfig(t.TempDir()), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { h.Close() })
				minute, hour = m, h
			}
			testInterleaved(t, uint64(seed), minute.(MinuteTier), hour, spillDir)
		})
	}
}

func testInterleaved(t *testing.T, seed uint64, minute MinuteTier, hour readableWriter, spillDir string) {
	start := testStart + 2*HourRes + 13*MinuteRes
	end := start + 3*HourRes
	w := genInterleaved(seed, start, end)
	raw := openTestRaw(t)
	clock := &testClock{t: time.UnixMilli(start)}
	cfg := testConfig()
	cfg.SpillDir = spillDir
	p, err := New(cfg, raw, minute, hour, promslog.NewNopLogger(), prometheus.NewRegistry(), clock.now)
	if err != nil {
		t.Fatal(err)
	}
	tee := p.Tee(raw)
	rng := rand.New(rand.NewPCG(seed, 7))

	// A reader follows the mark, as the diagnosis engine does.
	ctx, cancel := context.WithCancel(context.Background())
	var readers sync.WaitGroup
	readers.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.MarkAdvanced():
				if mark, ok := p.Mark(); ok {
					open := p.OpenWindowsIn(mark-20*MinuteRes, mark)
					// The mark may have advanced meanwhile: windows final
					// by then may be returned, never later ones.
					after, _ := p.Mark()
					for _, s := range open {
						if last := s.Windows[len(s.Windows)-1]; last.Start >= after {
							t.Errorf("open window at %s at or past the mark %s", fmtTime(last.Start), fmtTime(after))
						}
					}
				}
			}
		}
	})
	last := w.deliveries[len(w.deliveries)-1].at
	for at := start - 1; at < last; {
		next := min(at+1000+rng.Int64N(40_000), last)
		w.deliver(t, tee, rng, at, next)
		at = next
		clock.t = time.UnixMilli(at)
		if err := p.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	readers.Wait()

	// The open windows are those of a recompute from raw, up to the mark.
	open := p.openWindows()
	if len(open) == 0 {
		t.Fatal("no open windows")
	}
	from := timegrid.Floor(open[0].Windows[0].Start, HourRes)
	for _, s := range open[1:] {
		from = min(from, timegrid.Floor(s.Windows[0].Start, HourRes))
	}
	checkSeries(t, "open windows", open, fromRaw(t, raw, from, p.mark))

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_, rawMax, _ := raw.Bounds()
	wm := rawMax - DefaultConfig().Lateness.Milliseconds()
	n := 0
	for h := timegrid.Floor(start, HourRes); flushable(h, wm); h += HourRes {
		if !minute.HasPartition(h) {
			t.Errorf("minute partition %s missing", fmtTime(h))
			continue
		}
		checkSeries(t, "minute "+fmtTime(h), readPartition(t, minute, h, HourRes), fromRaw(t, raw, h, h+HourRes))
		n++
	}
	if n < 2 {
		t.Fatalf("only %d partitions checked", n)
	}
	if testutil.ToFloat64(p.m.late) == 0 || testutil.ToFloat64(p.m.outOfOrder) == 0 || testutil.ToFloat64(p.m.recomputed) == 0 {
		t.Errorf("the fleet did not exercise the tee: late %v, out of order %v, recomputed %v",
			testutil.ToFloat64(p.m.late), testutil.ToFloat64(p.m.outOfOrder), testutil.ToFloat64(p.m.recomputed))
	}
}

// fromRaw computes the minute windows of [from, to) from scratch, from raw.
func fromRaw(t *testing.T, raw *tiers.Raw, from, to int64) []tiers.SeriesWindows {
	t.Helper()
	out, _, err := computeWindows(context.Background(), raw, MinuteRes, from, to, testKindOf)
	if err != nil {
		t.Fatal(err)
	}
	sortSeries(out)
	return out
}

// TestSparseSeriesEqualSpilled runs one interleaved fleet (series at 1 s,
// 5 s, 10 s and 15 s, late, out of order, stale) twice, the same deliveries
// and ticks: once spilling every series' windows (Config.SparseInterval < 0)
// and once with the default, which spills only the 1 s series and computes
// the others' windows from raw where they are read. The open windows must
// be equal, and the minute partition files equal byte for byte.
func TestSparseSeriesEqualSpilled(t *testing.T) {
	seeds := []uint64{3, 11}
	if testing.Short() {
		seeds = seeds[:1]
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			spilled := ingestInterleaved(t, seed, -1)
			sparse := ingestInterleaved(t, seed, 0)
			if sparse.sparse == 0 || sparse.dense == 0 || spilled.sparse != 0 {
				t.Fatalf("sparse and dense series %d and %d (spilling every series: %d sparse)", sparse.sparse, sparse.dense, spilled.sparse)
			}
			if sparse.spillBytes >= spilled.spillBytes*3/4 {
				t.Errorf("spill of %.0f bytes with sparse series left out, %.0f with every series", sparse.spillBytes, spilled.spillBytes)
			}
			checkSeries(t, "open windows", sparse.open, spilled.open)
			if len(spilled.files) < 2 || len(sparse.files) != len(spilled.files) {
				t.Fatalf("%d and %d minute partition files", len(sparse.files), len(spilled.files))
			}
			for name, b := range spilled.files {
				if got, ok := sparse.files[name]; !ok || !bytes.Equal(got, b) {
					t.Errorf("minute partition %s differs (%d bytes, %d spilling every series)", name, len(got), len(b))
				}
			}
		})
	}
}

type interleavedRun struct {
	open          []tiers.SeriesWindows
	files         map[string][]byte
	sparse, dense int
	spillBytes    float64 // the largest the spill got
}

// ingestInterleaved delivers fleet seed through the tee of a pipeline with
// SparseInterval sparse over the Parquet minute tier and spill files, and
// returns what it made.
func ingestInterleaved(t *testing.T, seed uint64, sparse time.Duration) interleavedRun {
	t.Helper()
	start := testStart + 2*HourRes + 13*MinuteRes
	w := genInterleaved(seed, start, start+3*HourRes)
	raw := openTestRaw(t)
	minuteDir := t.TempDir()
	minute, err := tiers.OpenRollup(tiers.DefaultMinuteConfig(minuteDir), promslog.NewNopLogger(), prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { minute.Close() })
	clock := &testClock{t: time.UnixMilli(start)}
	cfg := testConfig()
	cfg.SpillDir, cfg.SparseInterval = t.TempDir(), sparse
	reg := prometheus.NewRegistry()
	p, err := New(cfg, raw, minute, newMemTier(HourRes, DayLen), promslog.NewNopLogger(), reg, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	tee := p.Tee(raw)
	rng := rand.New(rand.NewPCG(seed, 7))
	var out interleavedRun
	last := w.deliveries[len(w.deliveries)-1].at
	for at := start - 1; at < last; {
		next := min(at+1000+rng.Int64N(40_000), last)
		w.deliver(t, tee, rng, at, next)
		at = next
		clock.t = time.UnixMilli(at)
		if err := p.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
		out.spillBytes = max(out.spillBytes, gatheredValue(t, reg, "strata_downsample_spill_bytes"))
	}
	out.open = p.openWindows()
	p.tap.mu.Lock()
	for s := range p.tap.series.n {
		if st := p.tap.series.at(s); !st.lset.IsEmpty() {
			if st.sparse {
				out.sparse++
			} else {
				out.dense++
			}
		}
	}
	p.tap.mu.Unlock()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	out.files = map[string][]byte{}
	entries, err := os.ReadDir(minuteDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(minuteDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out.files[e.Name()] = b
	}
	return out
}

// gatheredValue returns the value of the gauge name in reg.
func gatheredValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
