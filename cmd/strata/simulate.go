package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"gopkg.in/yaml.v3"

	"github.com/strata-dev/strata/dcgmbridge/sim"
)

type simulateCommand struct {
	cmd           *kingpin.CmdClause
	configFile    string
	seed          uint64
	nodes         int
	gpusPerNode   int
	vllmVersion   string
	fault         string
	faultNode     int
	faultGPU      int
	faultAfter    time.Duration
	faultDuration time.Duration
	listen        string
	pushURL       string
	interval      time.Duration
	backfill      time.Duration
	duration      time.Duration
	groundTruth   string
	openMetrics   string
}

func newSimulateCommand(app *kingpin.Application) *simulateCommand {
	c := &simulateCommand{cmd: app.Command("simulate", "Run a deterministic simulated inference cluster (vLLM, dcgm-exporter, ebpf_exporter) with injected faults.")}
	c.cmd.Flag("sim.config", "Simulator configuration (YAML, see docs/simulator.md); flags below override its size and seed.").StringVar(&c.configFile)
	c.cmd.Flag("seed", "Random seed: the same seed gives the same metrics.").Default("1").Uint64Var(&c.seed)
	c.cmd.Flag("nodes", "Number of GPU nodes.").Default("2").IntVar(&c.nodes)
	c.cmd.Flag("gpus-per-node", "GPUs per node (one vLLM instance each).").Default("4").IntVar(&c.gpusPerNode)
	c.cmd.Flag("vllm-version", "vLLM metric names to expose: v1 or v0 (legacy).").Default("v1").EnumVar(&c.vllmVersion, "v1", "v0")
	c.cmd.Flag("fault", "Inject one fault of this kind ("+kindList()+").").StringVar(&c.fault)
	c.cmd.Flag("fault.node", "Node index of the injected fault.").Default("0").IntVar(&c.faultNode)
	c.cmd.Flag("fault.gpu", "GPU index of the injected fault.").Default("0").IntVar(&c.faultGPU)
	c.cmd.Flag("fault.after", "When the fault starts, counted from the start of the simulation (the start of the --backfill history).").Default("5m").DurationVar(&c.faultAfter)
	c.cmd.Flag("fault.duration", "How long the fault lasts.").Default("15m").DurationVar(&c.faultDuration)
	c.cmd.Flag("web.listen-address", "Serve every simulated exporter's /metrics here (for scraping), e.g. 127.0.0.1:9400.").StringVar(&c.listen)
	c.cmd.Flag("push.url", "Remote-write URL to push to, e.g. http://127.0.0.1:9201/api/v1/write.").StringVar(&c.pushURL)
	c.cmd.Flag("push.interval", "Simulated time between two pushed samples of a series (a scrape interval).").Default("15s").DurationVar(&c.interval)
	c.cmd.Flag("backfill", "Push this much history (ending now) as fast as the receiver takes it before running live. A receiver takes history only a little behind its newest sample (Strata: half a raw block, 30 minutes): write longer history with --openmetrics and import it with strata backfill.").Default("0s").DurationVar(&c.backfill)
	c.cmd.Flag("duration", "How long to run live after the backfill (0: until SIGINT/SIGTERM).").Default("0s").DurationVar(&c.duration)
	c.cmd.Flag("ground-truth", "Write the injected faults as JSON lines to this file.").StringVar(&c.groundTruth)
	c.cmd.Flag("openmetrics", "Instead of running, write the --backfill history ending now as OpenMetrics text with timestamps to this file (input for `strata backfill`).").StringVar(&c.openMetrics)
	return c
}

func kindList() string {
	var names []string
	for _, k := range sim.Kinds() {
		names = append(names, string(k))
	}
	return strings.Join(names, ", ")
}

func (c *simulateCommand) run(logger *slog.Logger) error {
	cfg := sim.Config{}
	if c.configFile != "" {
		b, err := os.ReadFile(c.configFile)
		if err != nil {
			return fmt.Errorf("read simulator config: %w", err)
		}
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg); err != nil {
			return fmt.Errorf("simulator config %s: %w", c.configFile, err)
		}
	}
	cfg.Seed, cfg.Nodes, cfg.GPUsPerNode, cfg.VLLMVersion = c.seed, c.nodes, c.gpusPerNode, c.vllmVersion
	now := time.Now().Truncate(time.Second)
	cfg.Start = now.Add(-c.backfill)
	if c.fault != "" {
		gpu := c.faultGPU
		cfg.Faults = append(cfg.Faults, sim.FaultSpec{
			Kind: sim.Kind(c.fault), Node: c.faultNode, GPU: &gpu,
			At: c.faultAfter, Duration: c.faultDuration,
		})
	}
	cluster, err := sim.New(cfg)
	if err != nil {
		return fmt.Errorf("simulator: %w", err)
	}
	if c.groundTruth != "" {
		if err := writeGroundTruth(c.groundTruth, cluster.GroundTruth()); err != nil {
			return err
		}
	}
	if c.openMetrics != "" {
		return writeOpenMetrics(cluster, c.openMetrics, cfg.Start, now, c.interval)
	}
	if c.pushURL == "" && c.listen == "" {
		return errors.New("nothing to do: give --push.url, --web.listen-address or --openmetrics")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.backfill+c.duration+time.Minute)
		defer cancel()
	}
	errc := make(chan error, 2)
	running := 0
	if c.pushURL != "" {
		if c.backfill > 0 {
			logger.Info("pushing history", "from", cfg.Start, "to", now, "url", c.pushURL)
			st, err := cluster.PushWith(ctx, sim.PushOptions{URL: c.pushURL, Interval: c.interval, Duration: c.backfill, Logger: logger})
			if err != nil {
				if msg := err.Error(); strings.Contains(msg, "too old") || strings.Contains(msg, "out of bounds") {
					// Strata and Prometheus take samples older than their newest
					// (their own metrics' included) only within the out-of-order
					// window, or half a raw block: longer history is imported.
					return fmt.Errorf("push history: %w; a remote-write receiver takes history only a little behind its newest sample "+
						"(storage.out_of_order_time_window, or half a raw block): write longer history with --openmetrics=FILE and import it with `strata backfill FILE`", err)
				}
				return fmt.Errorf("push history: %w", err)
			}
			logger.Info("history pushed", "samples", st.SamplesSent, "dropped", st.SamplesDropped, "requests", st.Requests)
		}
		running++
		go func() {
			logger.Info("pushing live", "interval", c.interval, "url", c.pushURL)
			errc <- cluster.Push(ctx, c.pushURL, c.interval, c.duration)
		}()
	}
	if c.listen != "" {
		running++
		go func() {
			logger.Info("serving simulated exporters", "address", c.listen)
			errc <- cluster.Serve(ctx, c.listen, time.Now)
		}()
	}
	var errs []error
	for range running {
		if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
		if c.duration > 0 {
			stop() // a bounded run ends everything when the push ends
		}
	}
	return errors.Join(errs...)
}

func writeGroundTruth(path string, faults []sim.Fault) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("ground truth: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	return sim.WriteGroundTruth(f, faults)
}

func writeOpenMetrics(c *sim.Cluster, path string, from, to time.Time, step time.Duration) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("openmetrics output: %w", err)
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	return c.WriteOpenMetrics(f, from, to, step)
}
