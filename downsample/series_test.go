package downsample

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
)

// TestTeeForgetsIdleSeries: the tee's state is bounded by the series that
// send: a series idle for an hour whose windows are written is forgotten
// (counted), its slot goes to the next new series, and the gauges say so.
func TestTeeForgetsIdleSeries(t *testing.T) {
	raw := openTestRaw(t)
	clock := &testClock{t: time.UnixMilli(testStart)}
	reg := prometheus.NewRegistry()
	minute := newMemTier(MinuteRes, HourRes)
	p, err := New(testConfig(), raw, minute, newMemTier(HourRes, DayLen), promslog.NewNopLogger(), reg, clock.now)
	if err != nil {
		t.Fatal(err)
	}
	tee := p.Tee(raw)
	steady, idle, late := labelsFor("steady_total"), labelsFor("idle_total"), labelsFor("newcomer_total")
	send := func(ts int64) {
		app := tee.AppenderV2(context.Background())
		if _, err := app.Append(0, steady, 0, ts, float64(ts), nil, nil, storage.AppendV2Options{}); err != nil {
			t.Fatal(err)
		}
		if ts < testStart+HourRes { // idle stops after the first hour
			if _, err := app.Append(0, idle, 0, ts, 1, nil, nil, storage.AppendV2Options{}); err != nil {
				t.Fatal(err)
			}
		}
		if ts >= testStart+4*HourRes {
			if _, err := app.Append(0, late, 0, ts, 2, nil, nil, storage.AppendV2Options{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	tick := func() {
		if err := p.Tick(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	end := testStart + 4*HourRes
	for ts := testStart; ts < end; ts += 15_000 {
		send(ts)
		if ts%MinuteRes == 0 {
			clock.t = time.UnixMilli(ts)
			tick()
		}
	}
	if got := testutil.ToFloat64(p.m.forgotten); got != 1 {
		t.Fatalf("%v series forgotten, want 1 (the idle one)", got)
	}
	if got := gauge("strata_downsample_series"); got != 1 {
		t.Fatalf("strata_downsample_series %v, want 1", got)
	}
	if got := gauge("strata_downsample_tee_bytes"); got <= 0 {
		t.Fatalf("strata_downsample_tee_bytes %v", got)
	}
	// The idle series' windows were written before it was forgotten.
	if !minute.HasPartition(testStart) || len(readPartition(t, minute, testStart, HourRes)) != 2 {
		t.Fatal("the first hour's partition lacks a series")
	}
	// A new series takes the forgotten slot: the table does not grow.
	slots := p.tap.series.n
	send(end)
	if p.tap.series.n != slots {
		t.Fatalf("a new series took a new slot (%d, was %d) while one was free", p.tap.series.n, slots)
	}
	if got := gauge("strata_downsample_series"); got != 2 {
		t.Fatalf("strata_downsample_series %v after the newcomer, want 2", got)
	}
}

// TestSeriesTableBuilders: the dense series' builders stay packed as
// series become sparse and leave in any order: each dense slot keeps its
// own builder (the one moved into a hole included), sparse slots have
// none, and the pages are as many as the dense series need.
func TestSeriesTableBuilders(t *testing.T) {
	var tab seriesTable
	rng := rand.New(rand.NewPCG(1, 2))
	dense := map[uint32]int64{} // slot: the start its builder was given
	next := int64(1)
	check := func(step int) {
		t.Helper()
		if int(tab.nb) != len(dense) {
			t.Fatalf("step %d: %d builders in use, want %d", step, tab.nb, len(dense))
		}
		if want := (len(dense) + slotPageSize - 1) / slotPageSize; len(tab.builders) != want {
			t.Fatalf("step %d: %d builder pages for %d dense series, want %d", step, len(tab.builders), len(dense), want)
		}
		for s := range tab.n {
			st := tab.at(s)
			b := tab.builder(st)
			start, ok := dense[s]
			switch {
			case ok && (b == nil || b.start != start):
				t.Fatalf("step %d: slot %d lost its builder", step, s)
			case !ok && b != nil:
				t.Fatalf("step %d: slot %d has a builder, want none", step, s)
			}
		}
	}
	for step := range 12_000 {
		switch op := rng.IntN(10); {
		case op < 5 || tab.live() == 0: // a new series, dense
			s := tab.assign(storage.SeriesRef(step+1), labels.FromStrings("s", strconv.Itoa(step)), KindGauge)
			tab.builder(tab.at(s)).start = next
			dense[s] = next
			next++
		case op < 8: // a series becomes sparse
			s := uint32(rng.IntN(int(tab.n)))
			if st := tab.at(s); !st.lset.IsEmpty() {
				tab.dropBuilder(st)
				delete(dense, s)
			}
		default: // a series leaves
			s := uint32(rng.IntN(int(tab.n)))
			if st := tab.at(s); !st.lset.IsEmpty() {
				tab.release(s)
				delete(dense, s)
			}
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(12_000)
	for s := range tab.n {
		if st := tab.at(s); !st.lset.IsEmpty() {
			tab.release(s)
		}
	}
	clear(dense)
	check(12_001)
}
