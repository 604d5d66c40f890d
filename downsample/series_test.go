package downsample

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/promslog"
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
