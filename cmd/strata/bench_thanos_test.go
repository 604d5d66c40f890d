package main

import (
	"bytes"
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
// through Thanos Querier over two Strata shards holding half each. Each
// iteration runs the query both ways, in alternating order, so that the
// load of a shared machine weighs on both alike; it reports each way's wall
// time and the CPU time its processes spent (the single Strata; the two
// shards and the Querier), per query, and their ratios. Thanos is built as
// in TestThanosQuerierEndToEnd (or taken from STRATA_E2E_THANOS);
// STRATA_BENCH_THANOS_FLAGS adds flags to the Querier's command line
// (space-separated, e.g. --query.promql-engine=thanos).
func BenchmarkThanosQuerier30d(b *testing.B) {
	tb := newThanosBench30d(b, strings.Fields(os.Getenv("STRATA_BENCH_THANOS_FLAGS")))
	ways := []struct {
		base string
		pids []int
	}{{tb.single, tb.singlePids}, {tb.querier, tb.querierPids}}
	var wall, cpu [2]time.Duration
	var querierCPU time.Duration // the Querier's part of cpu[1]
	cpuOK := true
	for i := 0; b.Loop(); i++ {
		for k := range ways {
			w := ways[(i+k)%2]
			c0, ok0 := procsCPU(w.pids)
			q0, _ := procsCPU(tb.querierPids[2:])
			t0 := time.Now()
			res, _ := promQuery(b, w.base+"/api/v1/query_range", tb.v)
			wall[(i+k)%2] += time.Since(t0)
			c1, ok1 := procsCPU(w.pids)
			q1, _ := procsCPU(tb.querierPids[2:])
			cpu[(i+k)%2] += c1 - c0
			if (i+k)%2 == 1 {
				querierCPU += q1 - q0
			}
			cpuOK = cpuOK && ok0 && ok1
			tb.check(b, res)
		}
	}
	n := float64(b.N)
	b.ReportMetric(wall[0].Seconds()/n, "single-s/query")
	b.ReportMetric(wall[1].Seconds()/n, "thanos-s/query")
	b.ReportMetric(wall[1].Seconds()/wall[0].Seconds(), "wall-ratio")
	if cpuOK && cpu[0] > 0 {
		b.ReportMetric(cpu[0].Seconds()/n, "single-cpu-s/query")
		b.ReportMetric(cpu[1].Seconds()/n, "thanos-cpu-s/query")
		b.ReportMetric(querierCPU.Seconds()/n, "querier-cpu-s/query")
		b.ReportMetric(cpu[1].Seconds()/cpu[0].Seconds(), "cpu-ratio")
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
// and the Querier's base URLs, the processes serving each, the query and a
// check of its answer.
type thanosBench30d struct {
	single, querier         string
	singlePids, querierPids []int // querierPids: the two shards, then the Querier
	v                       url.Values
	check                   func(testing.TB, model.Value)
}

// newThanosBench30d writes the data, starts the nodes and the Querier (with
// the extra flags) and waits until the Querier sees both shards.
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
		return startStrata(b, d, "--config.file="+filepath.Join(dir, name+".yml"), "--grpc.listen-address=127.0.0.1:0")
	}
	one := node("single", func(int) bool { return true })
	s0 := node("s0", func(s int) bool { return s%2 == 0 })
	s1 := node("s1", func(s int) bool { return s%2 == 1 })
	q, qp := startThanosQueryProc(b, thanos, dir, []string{grpcAddr(b, s0), grpcAddr(b, s1)}, querierFlags...)
	waitStores(b, q, 2)

	return &thanosBench30d{
		single: "http://" + one.addr, querier: q,
		singlePids: []int{one.cmd.Process.Pid}, querierPids: []int{s0.cmd.Process.Pid, s1.cmd.Process.Pid, qp.Pid},
		v: url.Values{"query": {`avg by (host) (gpu_temp)`}, "start": {fmt.Sprint(start.Unix())}, "end": {fmt.Sprint(end.Unix() - 1)}, "step": {"3600"}},
		check: func(b testing.TB, res model.Value) {
			if m, ok := res.(model.Matrix); !ok || len(m) != series/8 || len(m[0].Values) < days*24-1 {
				b.Fatalf("got %v, want %d series of %d points (the first step precedes the first window)", short(res), series/8, days*24-1)
			}
		},
	}
}
