package main

import (
	"bytes"
	"cmp"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
// distributed mode). Thanos is built as in TestThanosQuerierEndToEnd (or
// taken from STRATA_E2E_THANOS); STRATA_BENCH_THANOS_FLAGS adds flags to
// the StoreAPI-mode Querier's command line (space-separated, e.g.
// --query.promql-engine=thanos); STRATA_BENCH_THANOS_QUERY replaces the
// query, `avg by (host) (gpu_temp)` (one series per host).
func BenchmarkThanosQuerier30d(b *testing.B) {
	tb := newThanosBench30d(b, strings.Fields(os.Getenv("STRATA_BENCH_THANOS_FLAGS")))
	ways := []struct {
		base    string
		pids    []int
		querier []int // the Querier's own pid, for its share of the CPU
	}{
		{tb.single, tb.singlePids, nil},
		{tb.querier, tb.querierPids, tb.querierPids[2:]},
		{tb.distributed, tb.distributedPids, tb.distributedPids[2:]},
	}
	var wall, cpu, querierCPU [3]time.Duration
	var want model.Value // the single Strata's answer, which the others must equal
	cpuOK := true
	for i := 0; b.Loop(); i++ {
		for k := range ways {
			j := (i + k) % len(ways)
			w := ways[j]
			c0, ok0 := procsCPU(w.pids)
			q0, _ := procsCPU(w.querier)
			t0 := time.Now()
			res, _ := promQuery(b, w.base+"/api/v1/query_range", tb.v)
			wall[j] += time.Since(t0)
			c1, ok1 := procsCPU(w.pids)
			q1, _ := procsCPU(w.querier)
			cpu[j] += c1 - c0
			querierCPU[j] += q1 - q0
			cpuOK = cpuOK && ok0 && ok1
			tb.check(b, res)
			if j == 0 && want == nil {
				want = res
			}
			// Through the Query API the answer is one Strata's; through the
			// StoreAPI some aggregations over rollups differ (max, min and
			// count: docs/scale-out.md), so only its shape is checked.
			if want != nil && j == 2 {
				if diff := sameResult(res, want, 0, "shard"); diff != "" {
					b.Fatalf("through %s: %s", w.base, diff)
				}
			}
		}
	}
	n := float64(b.N)
	b.ReportMetric(wall[0].Seconds()/n, "single-s/query")
	for j, name := range []string{"", "thanos", "dist"} {
		if j == 0 {
			continue
		}
		b.ReportMetric(wall[j].Seconds()/n, name+"-s/query")
		b.ReportMetric(wall[j].Seconds()/wall[0].Seconds(), name+"-wall-ratio")
	}
	if cpuOK && cpu[0] > 0 {
		b.ReportMetric(cpu[0].Seconds()/n, "single-cpu-s/query")
		for j, name := range []string{"", "thanos", "dist"} {
			if j == 0 {
				continue
			}
			b.ReportMetric(cpu[j].Seconds()/n, name+"-cpu-s/query")
			b.ReportMetric(querierCPU[j].Seconds()/n, name+"-querier-cpu-s/query")
			b.ReportMetric(cpu[j].Seconds()/cpu[0].Seconds(), name+"-cpu-ratio")
		}
	}
}

// procsCPU is the user and system CPU time the processes have used, from
// /proc/<pid>/stat (false where /proc cannot tell). The time a query costs
// them is the difference around it: the processes serve nothing else.
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
			if m, ok := res.(model.Matrix); !ok || len(m) != series/8 || len(m[0].Values) < days*24-1 {
				b.Fatalf("got %v, want %d series of %d points (the first step precedes the first window)", short(res), series/8, days*24-1)
			}
		},
	}
}
