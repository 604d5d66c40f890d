package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/tiers"
)

// BenchmarkThanosQuerier30d: a 30-day range query (1 h steps) over 1,000
// GPU series held in the hour tier, against one Strata holding them all and
// through Thanos Querier over two Strata shards holding half each: a
// Querier in its default mode, reading the shards' StoreAPI, and one in
// distributed mode (--query.mode=distributed), pushing subqueries down to
// the shards' Query API. Each iteration runs the query the three ways, in
// rotating order, so that the load of a shared machine weighs on each
// alike; it reports each way's wall time and the CPU time its processes
// spent (the single Strata; the two shards and that Querier), per query,
// and their ratios to one Strata (thanos-*: StoreAPI mode, dist-*:
// distributed mode).
//
// The CPU is read from /proc around each query (gross), and also net of
// what the same processes spend idle: before and after the loop every
// process is measured over an idle interval (the Queriers poll their
// endpoints' Info every few seconds, the nodes tick their tiers), and each
// query's net CPU is its gross less its processes' idle rate times its wall
// time (*-net-cpu-*). unattributed-cpu-s/query is what all processes spent
// over the whole loop, net of idle, that no query's window holds (work
// finished after an answer was sent, such as a collection of its garbage):
// near zero when the windows hold each query's whole cost.
//
// Thanos is built as in TestThanosQuerierEndToEnd (or taken from
// STRATA_E2E_THANOS). STRATA_BENCH_THANOS_FLAGS adds flags to the
// StoreAPI-mode Querier's command line (space-separated, e.g.
// --query.promql-engine=thanos); STRATA_BENCH_THANOS_QUERY replaces the
// query, `avg by (host) (gpu_temp)` (one series per host);
// STRATA_BENCH_THANOS_WAYS keeps only some ways besides the single Strata
// (`thanos`, `dist`, comma-separated); STRATA_BENCH_THANOS_PROFILE=<dir>
// writes each process's CPU profile over the first
// STRATA_BENCH_THANOS_PROFILE_SECONDS (default 20) seconds of the loop
// (<dir>/single.pprof, s0, s1, thanos, dist).
func BenchmarkThanosQuerier30d(b *testing.B) {
	tb := newThanosBench30d(b, strings.Fields(os.Getenv("STRATA_BENCH_THANOS_FLAGS")))
	type way struct {
		name    string
		base    string
		pids    []int
		querier []int // the Querier's own pid, for its share of the CPU
	}
	ways := []way{{"single", tb.single, tb.singlePids, nil}}
	keep := os.Getenv("STRATA_BENCH_THANOS_WAYS")
	for _, w := range []way{
		{"thanos", tb.querier, tb.querierPids, tb.querierPids[2:]},
		{"dist", tb.distributed, tb.distributedPids, tb.distributedPids[2:]},
	} {
		if keep == "" || slices.Contains(strings.Split(keep, ","), w.name) {
			ways = append(ways, w)
		}
	}
	all := slices.Concat(tb.singlePids, tb.querierPids, tb.distributedPids[2:])

	// One query each way first, outside the measurement: the first read
	// opens the partition files, which later queries find open. The single
	// Strata's answer is what the others must equal.
	for _, w := range ways {
		res, _ := promQuery(b, w.base+"/api/v1/query_range", tb.shifted(5))
		tb.check(b, res)
	}
	idleBefore, idleOK := idleRates(all, thanosBenchIdle)
	prof := tb.startProfiles(b, os.Getenv("STRATA_BENCH_THANOS_PROFILE"))

	wall := make([]time.Duration, len(ways))
	cpu := make([]time.Duration, len(ways))
	querierCPU := make([]time.Duration, len(ways))
	const (
		sharedMetric      = "strata_storeapi_query_selects_shared_total"
		sharedEvalsMetric = "strata_storeapi_query_evaluations_shared_total"
		fusedMetric       = "strata_storeapi_query_aggregations_fused_total"
		samplesMetric     = "strata_storeapi_samples_sent_total"
	)
	shared0 := nodeCounter(b, sharedMetric, tb.nodes[1:]...)
	sharedEvals0 := nodeCounter(b, sharedEvalsMetric, tb.nodes[1:]...)
	fused0 := nodeCounter(b, fusedMetric, tb.nodes[1:]...)
	samples0 := nodeCounter(b, samplesMetric, tb.nodes[1:]...)
	requests0 := storeRequests(b, tb.nodes[1:]...)
	loop0, ok0 := procsCPU(all)
	cpuOK := idleOK && ok0
	t0 := time.Now()
	for i := 0; b.Loop(); i++ {
		// Each iteration's range starts and ends 0-3 steps earlier than the
		// last one's (still 30 days, and still on whole hours, as Grafana
		// aligns a range to its step): a Strata that kept a read for a
		// repeated request (the Query API's shared selects) cannot serve
		// the next iteration from it.
		v := tb.shifted(i % 4)
		var want model.Value
		var dist []model.Value
		for k := range ways {
			j := (i + k) % len(ways)
			w := ways[j]
			c0, ok0 := procsCPU(w.pids)
			q0, _ := procsCPU(w.querier)
			t0 := time.Now()
			res, _ := promQuery(b, w.base+"/api/v1/query_range", v)
			wall[j] += time.Since(t0)
			c1, ok1 := procsCPU(w.pids)
			q1, _ := procsCPU(w.querier)
			cpu[j] += c1 - c0
			querierCPU[j] += q1 - q0
			cpuOK = cpuOK && ok0 && ok1
			tb.check(b, res)
			switch w.name {
			case "single":
				want = res
			case "dist":
				dist = append(dist, res)
			}
		}
		// Through the Query API the answer is one Strata's; through the
		// StoreAPI some aggregations over rollups differ (max, min and
		// count: docs/scale-out.md), so only its shape is checked.
		for _, res := range dist {
			if diff := sameResult(res, want, 0, "shard"); diff != "" {
				b.Fatalf("through %s: %s", tb.distributed, diff)
			}
		}
	}
	b.StopTimer()
	loopWall := time.Since(t0)
	loop1, ok1 := procsCPU(all)
	shared := nodeCounter(b, sharedMetric, tb.nodes[1:]...) - shared0
	sharedEvals := nodeCounter(b, sharedEvalsMetric, tb.nodes[1:]...) - sharedEvals0
	fused := nodeCounter(b, fusedMetric, tb.nodes[1:]...) - fused0
	samples := nodeCounter(b, samplesMetric, tb.nodes[1:]...) - samples0
	requests := storeRequests(b, tb.nodes[1:]...)
	prof.wait(b)
	idleAfter, idleOK := idleRates(all, thanosBenchIdle)
	cpuOK = cpuOK && ok1 && idleOK

	n := float64(b.N)
	// Selects the shards' Query API read once for two requests,
	// aggregations computed from another request's pass or evaluation of
	// their selector (an avg's sum and count), and aggregations a fused pass
	// answered, per distributed query; the samples the shards' StoreAPI
	// sent, per StoreAPI-mode query.
	b.ReportMetric(shared/n, "dist-shared-selects/query")
	b.ReportMetric(sharedEvals/n, "dist-shared-evaluations/query")
	b.ReportMetric(fused/n, "dist-fused/query")
	b.ReportMetric(samples/n, "thanos-samples-sent/query")
	b.ReportMetric((requests["query_range"]+requests["query"]-requests0["query_range"]-requests0["query"])/n, "dist-subqueries/query")
	b.ReportMetric(wall[0].Seconds()/n, "single-s/query")
	for j, w := range ways[1:] {
		b.ReportMetric(wall[j+1].Seconds()/n, w.name+"-s/query")
		b.ReportMetric(wall[j+1].Seconds()/wall[0].Seconds(), w.name+"-wall-ratio")
	}
	if !cpuOK || cpu[0] <= 0 {
		return
	}
	// idle is a pid's CPU per second idle, the mean of the two intervals.
	idle := func(pid int) float64 { return (idleBefore[pid] + idleAfter[pid]) / 2 }
	net := make([]float64, len(ways))
	var windows float64 // the queries' net CPU, all ways
	for j, w := range ways {
		var rate float64
		for _, pid := range w.pids {
			rate += idle(pid)
		}
		net[j] = cpu[j].Seconds() - rate*wall[j].Seconds()
		windows += net[j]
	}
	var idleAll float64
	for _, pid := range all {
		idleAll += idle(pid)
	}
	b.ReportMetric(idleAll, "idle-cpu-s/s")
	b.ReportMetric(cpu[0].Seconds()/n, "single-cpu-s/query")
	b.ReportMetric(net[0]/n, "single-net-cpu-s/query")
	for j, w := range ways[1:] {
		j++
		b.ReportMetric(cpu[j].Seconds()/n, w.name+"-cpu-s/query")
		b.ReportMetric(net[j]/n, w.name+"-net-cpu-s/query")
		b.ReportMetric(querierCPU[j].Seconds()/n, w.name+"-querier-cpu-s/query")
		b.ReportMetric(cpu[j].Seconds()/cpu[0].Seconds(), w.name+"-cpu-ratio")
		b.ReportMetric(net[j]/net[0], w.name+"-net-cpu-ratio")
	}
	// A pid of the shards is in two ways' pids but counted once here.
	loopNet := (loop1 - loop0).Seconds() - idleAll*loopWall.Seconds()
	b.ReportMetric((loopNet-windows)/n, "unattributed-cpu-s/query")
}

// thanosBenchIdle is how long BenchmarkThanosQuerier30d measures its
// processes idle, before and after its loop.
const thanosBenchIdle = 5 * time.Second

// idleRates measures what each process spends idle, as CPU seconds per
// second over d (false where /proc cannot tell).
func idleRates(pids []int, d time.Duration) (map[int]float64, bool) {
	before := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		c, ok := procsCPU([]int{pid})
		if !ok {
			return nil, false
		}
		before[pid] = c
	}
	t0 := time.Now()
	time.Sleep(d)
	elapsed := time.Since(t0).Seconds()
	out := make(map[int]float64, len(pids))
	for _, pid := range pids {
		c, ok := procsCPU([]int{pid})
		if !ok {
			return nil, false
		}
		out[pid] = (c - before[pid]).Seconds() / elapsed
	}
	return out, true
}

// benchProfiles are CPU profiles being taken of the benchmark's processes.
type benchProfiles struct {
	wg   sync.WaitGroup
	errs chan error
}

// startProfiles starts taking each process's CPU profile into dir (none
// when dir is empty) for STRATA_BENCH_THANOS_PROFILE_SECONDS seconds.
func (tb *thanosBench30d) startProfiles(b testing.TB, dir string) *benchProfiles {
	p := &benchProfiles{errs: make(chan error, 5)}
	if dir == "" {
		return p
	}
	secs, err := strconv.Atoi(cmp.Or(os.Getenv("STRATA_BENCH_THANOS_PROFILE_SECONDS"), "20"))
	if err != nil || secs <= 0 {
		b.Fatalf("STRATA_BENCH_THANOS_PROFILE_SECONDS: %q is not a positive number of seconds", os.Getenv("STRATA_BENCH_THANOS_PROFILE_SECONDS"))
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		b.Fatal(err)
	}
	for name, base := range map[string]string{
		"single": "http://" + tb.nodes[0].addr, "s0": "http://" + tb.nodes[1].addr, "s1": "http://" + tb.nodes[2].addr,
		"thanos": tb.querier, "dist": tb.distributed,
	} {
		p.wg.Go(func() {
			resp, err := http.Get(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, secs)) //nolint:noctx,gosec // a loopback server the benchmark started
			if err != nil {
				p.errs <- err
				return
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s: %s", name, resp.Status, body)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, name+".pprof"), body, 0o600)
			}
			if err != nil {
				p.errs <- err
			}
		})
	}
	return p
}

// wait waits for the profiles to be written.
func (p *benchProfiles) wait(b testing.TB) {
	p.wg.Wait()
	close(p.errs)
	for err := range p.errs {
		b.Error(err)
	}
}

// procsCPU is the user and system CPU time the processes have used, from
// /proc/<pid>/stat (false where /proc cannot tell). The time a query costs
// them is the difference around it (the processes serve nothing else), less
// what they spend idle (idleRates).
func procsCPU(pids []int) (time.Duration, bool) {
	const ticksPerSecond = 100 // USER_HZ, 100 on every Linux Go supports
	var total time.Duration
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, false
		}
		// The command name (field 2) may hold spaces: count from its ")".
		f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(f) < 13 {
			return 0, false
		}
		for _, s := range f[11:13] { // utime, stime: fields 14 and 15
			ticks, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, false
			}
			total += time.Duration(ticks) * time.Second / ticksPerSecond
		}
	}
	return total, true
}

// thanosBench30d is BenchmarkThanosQuerier30d's setup: the single Strata's
// and the Queriers' base URLs, the processes serving each, the query and a
// check of its answer.
type thanosBench30d struct {
	single, querier, distributed string
	nodes                        []*strataProc // the single Strata, then the shards
	// querierPids and distributedPids: the two shards, then the Querier.
	singlePids, querierPids, distributedPids []int
	v                                        url.Values
	check                                    func(testing.TB, model.Value)
}

// shifted is the query over the range starting and ending steps steps
// (hours) earlier: its first steps precede the data.
func (tb *thanosBench30d) shifted(steps int) url.Values {
	v := maps.Clone(tb.v)
	for _, k := range []string{"start", "end"} {
		t, err := strconv.ParseInt(v.Get(k), 10, 64)
		if err != nil {
			panic(err)
		}
		v.Set(k, fmt.Sprint(t-int64(steps)*3600))
	}
	return v
}

// newThanosBench30d writes the data, starts the nodes and the Queriers (the
// StoreAPI-mode one with the extra flags) and waits until they see both
// shards.
func newThanosBench30d(b testing.TB, querierFlags []string) *thanosBench30d {
	dir := b.TempDir()
	thanos := os.Getenv("STRATA_E2E_THANOS")
	if thanos == "" {
		thanos = buildThanos(b, dir)
	}
	const series, days = 1000, 30
	end := time.Now().Truncate(24 * time.Hour)
	start := end.Add(-days * 24 * time.Hour)
	write := func(name string, keep func(s int) bool) string {
		d := filepath.Join(dir, name)
		cfg := tiers.DefaultHourConfig(filepath.Join(d, "hour"))
		r, err := tiers.OpenRollup(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), time.Now)
		if err != nil {
			b.Fatal(err)
		}
		for day := start; day.Before(end); day = day.Add(24 * time.Hour) {
			var sws []tiers.SeriesWindows
			for s := range series {
				if !keep(s) {
					continue
				}
				sw := tiers.SeriesWindows{Labels: labels.FromStrings("__name__", "gpu_temp", "gpu", fmt.Sprint(s%8), "host", fmt.Sprintf("node-%03d", s/8))}
				for h := range 24 {
					st := day.Add(time.Duration(h) * time.Hour).UnixMilli()
					v := float64(40 + (s+h)%30)
					sw.Windows = append(sw.Windows, tiers.Window{Start: st, FirstT: st, LastT: st + 3_599_000, Count: 240, Sum: 240 * v, Min: v - 2, Max: v + 2, First: v, Last: v})
				}
				sws = append(sws, sw)
			}
			slices.SortFunc(sws, func(a, b tiers.SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
			if err := r.WritePartition(day.UnixMilli(), sws); err != nil {
				b.Fatal(err)
			}
		}
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
		cfgFile := filepath.Join(dir, name+".yml")
		body := "rules:\n  canonical: false\nself_scrape:\n  enabled: false\ndiagnose:\n  enabled: false\nglobal:\n  external_labels:\n    shard: " + name + "\n"
		if err := os.WriteFile(cfgFile, []byte(body), 0o600); err != nil {
			b.Fatal(err)
		}
		return d
	}
	node := func(name string, keep func(int) bool) *strataProc {
		d := write(name, keep)
		// pprof, to profile a run (docs/scale-out.md's figures were).
		return startStrata(b, d, "--config.file="+filepath.Join(dir, name+".yml"), "--grpc.listen-address=127.0.0.1:0", "--web.enable-pprof")
	}
	one := node("single", func(int) bool { return true })
	s0 := node("s0", func(s int) bool { return s%2 == 0 })
	s1 := node("s1", func(s int) bool { return s%2 == 1 })
	endpoints := []string{grpcAddr(b, s0), grpcAddr(b, s1)}
	q, qp := startThanosQueryProc(b, thanos, dir, endpoints, querierFlags...)
	ddir := filepath.Join(dir, "distributed")
	if err := os.MkdirAll(ddir, 0o750); err != nil {
		b.Fatal(err)
	}
	dq, dqp := startThanosQueryProc(b, thanos, ddir, endpoints, "--query.mode=distributed")
	waitStores(b, q, 2)
	waitStores(b, dq, 2)

	shards := []int{s0.cmd.Process.Pid, s1.cmd.Process.Pid}
	return &thanosBench30d{
		single: "http://" + one.addr, querier: q, distributed: dq, nodes: []*strataProc{one, s0, s1},
		singlePids: []int{one.cmd.Process.Pid}, querierPids: append(slices.Clone(shards), qp.Pid), distributedPids: append(slices.Clone(shards), dqp.Pid),
		v: url.Values{"query": {cmp.Or(os.Getenv("STRATA_BENCH_THANOS_QUERY"), `avg by (host) (gpu_temp)`)}, "start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(end.Unix() - 1)}, "step": {"3600"}},
		check: func(b testing.TB, res model.Value) {
			// The first step precedes the first window; so do up to 5 more
			// in a shifted range.
			if m, ok := res.(model.Matrix); !ok || len(m) != series/8 || len(m[0].Values) < days*24-6 {
				b.Fatalf("got %v, want %d series of at least %d points", short(res), series/8, days*24-6)
			}
		},
	}
}
