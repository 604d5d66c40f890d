package diagnose

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/downsample"
	"github.com/strata-dev/strata/tiers"
)

// fleetPipeline is a live data path at a fleet's size: a raw tier, the
// rollup pipeline fed through its tee and minutes of the simulator's fleet
// in its open windows.
type fleetPipeline struct {
	pipe   *downsample.Pipeline
	app    storage.AppendableV2
	minute *tiers.Rollup
	series int
	final  time.Time // the last minute whose windows are final
}

// Where a fleet pipeline's open windows come from.
const (
	// readSpilled spills every series' windows, as a 1 Hz fleet's are.
	readSpilled = "spilled"
	// readRaw keeps the pipeline's default: the fleet's 15 s series are
	// sparse and their windows are computed from the raw tier, as a
	// 15 s fleet's are live (the 500,000-series paced runs).
	readRaw = "raw"
)

// newFleetPipeline feeds minutes of a sim cluster of nodes x 8 GPUs (about
// 2,750 series a node) at 15 s steps through the tee, ticking the pipeline
// every simulated minute; read is readSpilled or readRaw.
func newFleetPipeline(b *testing.B, nodes int, minutes int, read string) *fleetPipeline {
	b.Helper()
	dir := b.TempDir()
	raw, err := tiers.OpenRaw(tiers.DefaultRawConfig(dir+"/raw"), quietLogger(), prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = raw.Close() })
	minute, hour := openTiers(b, dir)
	fp := &fleetPipeline{minute: minute}
	var clock time.Time
	dcfg := downsample.DefaultConfig()
	if read == readSpilled {
		dcfg.SparseInterval = -1
	}
	fp.pipe, err = downsample.New(dcfg, raw, minute, hour, quietLogger(), prometheus.NewRegistry(), func() time.Time { return clock })
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = fp.pipe.Close() })
	fp.app = fp.pipe.Tee(raw)
	cfg := sim.Config{Seed: 5, Start: simStart, Nodes: nodes, GPUsPerNode: 8}
	c, err := sim.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	app := fp.app.AppenderV2(ctx)
	lastTick := simStart
	seen := map[uint64]struct{}{}
	end := simStart.Add(time.Duration(minutes) * time.Minute)
	err = c.Backfill(simStart, end, 15*time.Second, func(l labels.Labels, ts int64, v float64) error {
		if now := time.UnixMilli(ts); now.Sub(lastTick) >= time.Minute {
			if err := app.Commit(); err != nil {
				return err
			}
			app = fp.app.AppenderV2(ctx)
			clock, lastTick = now, now
			if err := fp.pipe.Tick(ctx); err != nil {
				return err
			}
		}
		if ts == simStart.UnixMilli() {
			seen[l.Hash()] = struct{}{}
		}
		_, err := app.Append(0, l, 0, ts, v, nil, nil, storage.AppendV2Options{})
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := app.Commit(); err != nil {
		b.Fatal(err)
	}
	clock = end
	if err := fp.pipe.Tick(ctx); err != nil {
		b.Fatal(err)
	}
	mark, ok := fp.pipe.Mark()
	if !ok {
		b.Fatal("pipeline has no mark")
	}
	fp.series = len(seen)
	fp.final = time.UnixMilli(mark).Truncate(time.Minute).Add(-time.Minute)
	return fp
}

func fleetNodes() int {
	if n, err := strconv.Atoi(os.Getenv("STRATA_DIAGNOSE_FLEET_NODES")); err == nil && n > 0 {
		return n
	}
	return 18
}

// BenchmarkEngineMinuteFleet is what the live engine allocates in one
// steady minute over a fleet's open windows (issue 13's paced peak: the
// Go collector counts what a minute allocates during a collection as live,
// so B/op is the burst the heap goal jumps by). Each op evaluates the next
// minute: the snapshot of the pipeline's open windows, every rule group,
// the baselines, the assembly and the write-back into the raw tier.
//
// STRATA_DIAGNOSE_FLEET_NODES sizes the fleet (default 18 nodes x 8 GPUs,
// about 49,500 series). The pipeline holds 36 minutes, of which the engine
// warms up over 14 untimed: run with -benchtime 8x or fewer. read=spilled
// reads every series' windows from the spill (a 1 Hz fleet), read=raw the
// sparse series' from the raw tier (a 15 s fleet, as the fleet is).
func BenchmarkEngineMinuteFleet(b *testing.B) {
	for _, read := range []string{readSpilled, readRaw} {
		for _, mode := range []string{BaselineStatic, BaselineSeasonal} {
			b.Run("read="+read+"/mode="+mode, func(b *testing.B) {
				// A fleet of its own: the other engine's write-back (in
				// the raw tier) is not in it.
				benchEngineMinuteFleet(b, newFleetPipeline(b, fleetNodes(), 36, read), modeConfig(mode))
			})
		}
	}
}

func benchEngineMinuteFleet(b *testing.B, fp *fleetPipeline, cfg Config) {
	e, err := New(cfg, Options{
		Minute: fp.minute, Open: fp.pipe, WriteBack: fp.app, WriteBackDelay: 11 * time.Minute,
		Registerer: prometheus.NewRegistry(), Logger: quietLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	t := simStart.Add(time.Minute)
	for range 14 { // the windows, scratch store and baselines fill up, untimed
		if err := e.EvalMinute(ctx, t); err != nil {
			b.Fatal(err)
		}
		t = t.Add(time.Minute)
	}
	b.ReportAllocs()
	cpu0 := processCPU(b)
	n := 0
	for b.Loop() {
		if t.After(fp.final) {
			b.Fatalf("no final minute left at %s: run with -benchtime %dx or fewer", t.Format(time.RFC3339), n)
		}
		if err := e.EvalMinute(ctx, t); err != nil {
			b.Fatal(err)
		}
		t = t.Add(time.Minute)
		n++
	}
	b.ReportMetric((processCPU(b)-cpu0).Seconds()/float64(n), "cpu-s/minute")
	b.ReportMetric(float64(e.snapSeries), "snapshot-series")
	b.ReportMetric(float64(fp.series), "fleet-series")
}

// markedOpen is the fleet's pipeline with the mark a benchmark sets: the
// minute evaluated is the newest final one, which the engine paces.
type markedOpen struct {
	p    *downsample.Pipeline
	mark atomic.Int64
}

func (m *markedOpen) VisitOpenWindows(mint, maxt int64, sink tiers.OpenWindowSink, ms ...*labels.Matcher) {
	m.p.VisitOpenWindows(mint, maxt, sink, ms...)
}
func (m *markedOpen) Mark() (int64, bool) { return m.mark.Load(), true }

// BenchmarkEngineMinuteGoal is how far one live minute raises the Go
// collector's heap goal (GOGC 50, as strata serve runs; a collection
// first, so that each minute starts from the goal of what is live):
// goal-rise-MiB is the highest goal during the minute less the goal before
// it, read every 2 ms. Unpaced, and paced as the live engine is
// (DefaultPace): the wait spreads the minute's allocation, so that a
// collection running meanwhile counts less of it as live. gc/minute is the
// collections a minute besides the forced one: the rise means something
// only when it is 1 or more. Same fleet as BenchmarkEngineMinuteFleet;
// -benchtime 6x or fewer, -count 1 (a second fleet in the same process
// leaves the heap room enough for a minute without a collection).
func BenchmarkEngineMinuteGoal(b *testing.B) {
	for _, pace := range []float64{1, DefaultPace} {
		b.Run(fmt.Sprint("pace=", pace), func(b *testing.B) {
			// A fleet of its own: the other engine's write-back is not in it.
			benchEngineMinuteGoal(b, newFleetPipeline(b, fleetNodes(), 36, readSpilled), pace)
		})
	}
}

func benchEngineMinuteGoal(b *testing.B, fp *fleetPipeline, pace float64) {
	open, e, t := warmFleetEngine(b, fp, DefaultConfig(), pace)
	ctx := context.Background()
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	goal := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	var highest atomic.Uint64
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			metrics.Read(s)
			for g := s[0].Value.Uint64(); g > highest.Load(); {
				if highest.CompareAndSwap(highest.Load(), g) {
					break
				}
			}
		}
	}()
	var rise float64
	n := 0
	cycles := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(cycles)
	cycles0 := cycles[0].Value.Uint64()
	b.ReportAllocs()
	for b.Loop() {
		if t.After(fp.final) {
			b.Fatalf("no final minute left at %s: run with -benchtime %dx or fewer", t.Format(time.RFC3339), n)
		}
		open.mark.Store(t.Add(time.Minute).UnixMilli())
		runtime.GC()
		metrics.Read(goal)
		before := goal[0].Value.Uint64()
		highest.Store(before)
		if err := e.EvalMinute(ctx, t); err != nil {
			b.Fatal(err)
		}
		rise += float64(highest.Load()-before) / (1 << 20)
		t = t.Add(time.Minute)
		n++
	}
	close(stop)
	<-stopped
	metrics.Read(cycles)
	b.ReportMetric(rise/float64(n), "goal-rise-MiB")
	// Less than one collection a minute (besides the forced one) leaves
	// minutes with no collection, which raise no goal: the heap around
	// the fleet had room for the whole minute.
	b.ReportMetric(float64(cycles[0].Value.Uint64()-cycles0)/float64(n)-1, "gc/minute")
}

// BenchmarkEngineMinuteStages is where one live minute's bytes go and what
// it holds, by stage: the snapshot, each rule group (the default pack's
// and the signals' and SLOs' groups, without the strata_diagnose_ prefix),
// the baselines (the tracker and its write-back into the scratch store
// and the raw tier), and the rest (the scratch store's truncation, the
// assembly, the diagnoses' write-back, the sinks). The engine paces the
// minute (markedOpen), and the pacer's wait, run after the snapshot, each
// rule's query and the baselines, collects and reads the heap instead of
// sleeping. Per minute: MB-<stage> is what the stage allocates,
// cpu-ms-<stage> the process' CPU time during it (the collector's
// background work included, the forced collections not), live-*-MB
// the live heap before the minute, at its highest after a step, and after
// the minute; live-at-alloc-MB is the live heap after each step weighted
// by the bytes the step allocated: what a collection, which allocation
// triggers, finds live on average (less what the step holds only while it
// runs). The collections make its time meaningless:
// BenchmarkEngineMinuteFleet has the CPU. -benchtime 6x or fewer.
func BenchmarkEngineMinuteStages(b *testing.B) {
	for _, read := range []string{readSpilled, readRaw} {
		b.Run("read="+read, func(b *testing.B) {
			benchEngineMinuteStages(b, newFleetPipeline(b, fleetNodes(), 36, read))
		})
	}
}

func benchEngineMinuteStages(b *testing.B, fp *fleetPipeline) {
	open, e, t := warmFleetEngine(b, fp, modeConfig(BaselineSeasonal), 0)
	ctx := context.Background()
	// The pacer's steps in order: the snapshot, one a rule's query, the
	// baselines after the signals group.
	stages := []string{"snapshot"}
	for _, g := range e.groups {
		for range g.Rules() {
			stages = append(stages, strings.TrimPrefix(g.Name(), "strata_diagnose_"))
		}
		if g == e.signalsGroup {
			stages = append(stages, "baselines")
		}
	}
	ms := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	heap := func() (allocs, live float64) {
		runtime.GC()
		metrics.Read(ms)
		return float64(ms[0].Value.Uint64()), float64(ms[1].Value.Uint64())
	}
	allocated, cpu := map[string]float64{}, map[string]time.Duration{}
	var cpu0 time.Duration
	var step int
	var last, peak, weighted float64
	e.pace.budget = time.Hour
	e.pace.wait = func(context.Context, time.Duration) {
		c := processCPU(b)
		a, l := heap()
		if step < len(stages) {
			allocated[stages[step]] += a - last
			cpu[stages[step]] += c - cpu0
		}
		cpu0 = processCPU(b)
		step++
		weighted += (a - last) * l
		last, peak = a, max(peak, l)
	}
	var before, highest, end, total float64
	n := 0
	for b.Loop() {
		if t.After(fp.final) {
			b.Fatalf("no final minute left at %s: run with -benchtime %dx or fewer", t.Format(time.RFC3339), n)
		}
		open.mark.Store(t.Add(time.Minute).UnixMilli())
		var a0, l0 float64
		step = 0
		a0, l0 = heap()
		last, peak = a0, l0
		cpu0 = processCPU(b)
		if err := e.EvalMinute(ctx, t); err != nil {
			b.Fatal(err)
		}
		if step != len(stages) {
			b.Fatalf("%d pacer steps, want %d: a rule queries more than once", step, len(stages))
		}
		cpu["rest"] += processCPU(b) - cpu0
		a, l := heap()
		allocated["rest"] += a - last
		weighted += (a - last) * l
		total += a - a0
		before, highest, end = before+l0, highest+peak, end+l
		t = t.Add(time.Minute)
		n++
	}
	const mb = 1e6
	for s, v := range allocated {
		b.ReportMetric(v/float64(n)/mb, "MB-"+s)
		b.ReportMetric(float64(cpu[s].Milliseconds())/float64(n), "cpu-ms-"+s)
	}
	b.ReportMetric(before/float64(n)/mb, "live-before-MB")
	b.ReportMetric(highest/float64(n)/mb, "live-peak-MB")
	b.ReportMetric(end/float64(n)/mb, "live-end-MB")
	b.ReportMetric(weighted/total/mb, "live-at-alloc-MB")
}

// warmFleetEngine is a live engine over fp, with its write-back, that has
// evaluated 14 minutes (the warm-up catches up: the mark is past them, so
// no minute waits), and the next minute to evaluate.
func warmFleetEngine(b *testing.B, fp *fleetPipeline, cfg Config, pace float64) (*markedOpen, *Engine, time.Time) {
	b.Helper()
	open := &markedOpen{p: fp.pipe}
	open.mark.Store(fp.final.Add(time.Minute).UnixMilli())
	e, err := New(cfg, Options{
		Minute: fp.minute, Open: open, WriteBack: fp.app, WriteBackDelay: 11 * time.Minute,
		Registerer: prometheus.NewRegistry(), Logger: quietLogger(), Pace: pace,
	})
	if err != nil {
		b.Fatal(err)
	}
	t := simStart.Add(time.Minute)
	for range 14 {
		if err := e.EvalMinute(context.Background(), t); err != nil {
			b.Fatal(err)
		}
		t = t.Add(time.Minute)
	}
	return open, e, t
}
