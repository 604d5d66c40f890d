package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/strata-dev/strata/bench"
)

type benchCommand struct {
	cmd, run, compare, dashboard *kingpin.CmdClause

	url, protocol, name, out, timestamps string
	series, concurrency, batch, repeats  int
	queryRepeats, pid, extraLabels       int
	maxRequests                          int
	duration, backfill, interval         time.Duration
	churn, rate                          float64
	tierDirs                             map[string]string
	cpuProfile, heapProfile, user, pass  string
	skipQueries                          bool

	reports []string
	targets []string // dashboard: report.json=URL
}

func newBenchCommand(app *kingpin.Application) *benchCommand {
	c := &benchCommand{cmd: app.Command("bench", "Drive a bounded remote-write load at any receiver and measure it (docs/bench.md)."), tierDirs: map[string]string{}}
	c.run = c.cmd.Command("run", "Run a scenario against a receiver and write a report (JSON, markdown, PNG charts).").Default()
	c.run.Flag("url", "Remote-write URL of the receiver (Strata, Prometheus with --web.enable-remote-write-receiver, VictoriaMetrics).").Default("http://127.0.0.1:9201/api/v1/write").StringVar(&c.url)
	c.run.Flag("protocol", "Protocol: remote write v1 or v2, or otlp (OTLP/HTTP, every series a gauge; --url is the receiver's OTLP path, /api/v1/otlp/v1/metrics for Strata and Prometheus).").Default("v1").EnumVar(&c.protocol, "v1", "v2", "otlp")
	c.run.Flag("series", "Active series (DCGM-, vLLM- and eBPF-like mix).").Default("10000").IntVar(&c.series)
	c.run.Flag("extra-labels", "Constant labels added per series, to study label-size cost.").Default("0").IntVar(&c.extraLabels)
	c.run.Flag("churn", "Percent of pods replaced every 10 minutes of simulated time.").Default("0").Float64Var(&c.churn)
	c.run.Flag("batch", "Samples per request (Prometheus' max_samples_per_send).").Default("2000").IntVar(&c.batch)
	c.run.Flag("concurrency", "Concurrent senders (Prometheus' shards).").Default("4").IntVar(&c.concurrency)
	c.run.Flag("rate", "Samples per second offered over all senders, with wallclock timestamps (0: as fast as the receiver accepts). Above the receiver's capacity, with more senders than its in-flight limit, it is an overload (docs/bench.md).").Default("0").Float64Var(&c.rate)
	c.run.Flag("duration", "Real time each repetition lasts.").Default("1m").DurationVar(&c.duration)
	c.run.Flag("repeats", "Repetitions; figures are medians over them.").Default("3").IntVar(&c.repeats)
	c.run.Flag("max-requests", "Requests (retries included) after which a repetition ends even before --duration. 0: 100000, or for a paced load twice its schedule's requests if more.").Default("0").IntVar(&c.maxRequests)
	c.run.Flag("interval", "Paced mode: every series sends one sample per interval in real time, as a fleet of exporters does (e.g. 1s or 15s); implies --timestamps=interval. 0: as fast as the receiver accepts.").Default("0s").DurationVar(&c.interval)
	c.run.Flag("timestamps", "wallclock (default) or interval (--interval steps, default 1s, starting --backfill ago).").Default("wallclock").EnumVar(&c.timestamps, "wallclock", "interval")
	c.run.Flag("backfill", "With --timestamps=interval, how far behind now the first samples are.").Default("0s").DurationVar(&c.backfill)
	c.run.Flag("pid", "PID of the receiver, to read its CPU and memory from /proc (0: none).").Default("0").IntVar(&c.pid)
	c.run.Flag("tier-dir", "tier=dir to measure bytes on disk per sample (repeatable), e.g. raw=data/raw.").StringMapVar(&c.tierDirs)
	c.run.Flag("query-repeats", "Times each dashboard query runs per range (p50, p99).").Default("5").IntVar(&c.queryRepeats)
	c.run.Flag("skip-queries", "Do not measure dashboard query latency.").BoolVar(&c.skipQueries)
	c.run.Flag("cpu-profile", "Write the receiver's CPU profile (/debug/pprof/profile, strata serve --web.enable-pprof) of the first repetition here.").StringVar(&c.cpuProfile)
	c.run.Flag("heap-profile", "Write the receiver's heap profile (/debug/pprof/heap) taken at the end of the last repetition's load here.").StringVar(&c.heapProfile)
	c.run.Flag("name", "Name of the report.").Default("bench").StringVar(&c.name)
	c.run.Flag("out", "Directory for report.json, report.md and the charts.").Default("bench-report").StringVar(&c.out)
	c.run.Flag("user", "Basic-auth user.").StringVar(&c.user)
	c.run.Flag("password", "Basic-auth password (or STRATA_BENCH_PASSWORD).").Envar("STRATA_BENCH_PASSWORD").StringVar(&c.pass)

	c.compare = c.cmd.Command("compare", "Compare reports (JSON) figure by figure: the last against each one before it.")
	c.compare.Arg("reports", "Baseline report.json files, then the report compared with them.").Required().StringsVar(&c.reports)

	c.dashboard = c.cmd.Command("dashboard", "Measure the dashboard of several receivers interleaved (each panel execution on every one in turn) and put the latencies into their reports.")
	c.dashboard.Flag("query-repeats", "Times each dashboard query runs per range and receiver (p50, p99).").Default("5").IntVar(&c.queryRepeats)
	c.dashboard.Flag("user", "Basic-auth user.").StringVar(&c.user)
	c.dashboard.Flag("password", "Basic-auth password (or STRATA_BENCH_PASSWORD).").Envar("STRATA_BENCH_PASSWORD").StringVar(&c.pass)
	c.dashboard.Arg("targets", "report.json=URL of each receiver's Prometheus HTTP API (scheme://host), with =PID to measure its CPU per query from /proc, e.g. /tmp/b/strata/report.json=http://127.0.0.1:19301=4242; the report is rewritten in place.").Required().StringsVar(&c.targets)
	return c
}

func (c *benchCommand) exec(cmd string, logger *slog.Logger) error {
	if cmd == c.compare.FullCommand() {
		if len(c.reports) < 2 {
			return fmt.Errorf("%w: compare needs at least two reports", bench.ErrBadConfig)
		}
		reports := make([]bench.Report, len(c.reports))
		for i, path := range c.reports {
			r, err := bench.LoadReport(path)
			if err != nil {
				return err
			}
			reports[i] = r
		}
		_, err := fmt.Print(bench.Compare(reports...))
		return err
	}
	if cmd == c.dashboard.FullCommand() {
		return c.measureDashboards()
	}
	timestamps, interval := c.timestamps, c.interval
	if interval > 0 {
		if c.backfill > 0 {
			return fmt.Errorf("%w: --interval paces a real-time fleet; --backfill needs --timestamps=interval instead", bench.ErrBadConfig)
		}
		timestamps = bench.TimestampsInterval
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sc := bench.Scenario{
		Name: c.name,
		Load: bench.LoadConfig{
			URL: c.url, Protocol: bench.Protocol(c.protocol), Series: c.series, ExtraLabels: c.extraLabels,
			ChurnPercent: c.churn, BatchSize: c.batch, Concurrency: c.concurrency, Rate: c.rate, Duration: c.duration, MaxRequests: c.maxRequests,
			Timestamps: timestamps, Interval: interval, Backfill: c.backfill, Username: c.user, Password: c.pass,
		},
		Repeats:         c.repeats,
		PID:             c.pid,
		TierDirs:        c.tierDirs,
		QueryRepeats:    c.queryRepeats,
		SkipQueries:     c.skipQueries,
		CPUProfilePath:  c.cpuProfile,
		HeapProfilePath: c.heapProfile,
		Logger:          logger,
	}
	report, err := bench.Run(ctx, sc)
	if err != nil {
		return err
	}
	files, err := report.WriteFiles(c.out)
	if err != nil {
		return err
	}
	if err := report.WriteMarkdown(os.Stdout); err != nil {
		return err
	}
	_, err = fmt.Printf("\nwrote %s\n", strings.Join(files, ", "))
	return err
}

// measureDashboards is `strata bench dashboard`: every receiver's dashboard,
// interleaved, over the range ending at the newest sample its report's last
// repetition sent; each report gets the latencies and is written again
// (JSON, markdown, charts) where it was read.
func (c *benchCommand) measureDashboards() error {
	if c.queryRepeats < 1 {
		return fmt.Errorf("%w: --query-repeats must be at least 1", bench.ErrBadConfig)
	}
	reports := make([]bench.Report, len(c.targets))
	dirs := make([]string, len(c.targets))
	targets := make([]bench.DashboardTarget, len(c.targets))
	names := make([]string, len(c.targets))
	for i, arg := range c.targets {
		parts := strings.Split(arg, "=")
		pid := 0
		if len(parts) == 3 {
			p, err := strconv.Atoi(parts[2])
			if err != nil || p <= 0 {
				return fmt.Errorf("%w: target %q: PID %q is not a process id", bench.ErrBadConfig, arg, parts[2])
			}
			pid = p
		}
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
			return fmt.Errorf("%w: target %q is not report.json=URL or report.json=URL=PID", bench.ErrBadConfig, arg)
		}
		path, u := parts[0], parts[1]
		r, err := bench.LoadReport(path)
		if err != nil {
			return err
		}
		end, ok := r.DashboardEnd()
		if !ok {
			return fmt.Errorf("%w: report %s has no run", bench.ErrBadConfig, path)
		}
		reports[i], dirs[i], names[i] = r, filepath.Dir(path), r.Name
		targets[i] = bench.DashboardTarget{Name: r.Name, URL: strings.TrimSuffix(u, "/"), End: end, Username: c.user, Password: c.pass, PID: pid}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	lat, errs, err := bench.MeasureDashboards(ctx, targets, bench.DefaultDashboard(), bench.DefaultQueryRanges(), c.queryRepeats, 2*time.Minute)
	if err != nil {
		return err
	}
	for i := range reports {
		reports[i].SetDashboard(lat[i], errs[i], names)
		if _, err := reports[i].WriteFiles(dirs[i]); err != nil {
			return err
		}
		if _, err := fmt.Printf("%s: dashboard measured, report %s rewritten\n", names[i], dirs[i]); err != nil {
			return err
		}
	}
	return nil
}
