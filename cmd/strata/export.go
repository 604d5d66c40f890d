package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/export"
	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/remotewrite"
	"github.com/strata-dev/strata/tiers"
)

type exportCommand struct {
	cmd         *kingpin.CmdClause
	configFile  string
	storagePath string
	from, to    string
	step, tz    string
	by          []string
	format      string
	output      string
	chart       string
	preset      string
	force       bool
	noProgress  bool
	queries     []string
}

func newExportCommand(app *kingpin.Application) *exportCommand {
	c := &exportCommand{cmd: app.Command("export", "Write capacity-planning tables from the rollup tiers: one row per group and step (docs/format/export.md). Safe while strata serve runs: the rollup files are read, nothing is written or locked.")}
	c.cmd.Flag("config.file", "Strata configuration file (for the storage path and the query lookback).").StringVar(&c.configFile)
	c.cmd.Flag("storage.path", "Directory holding every tier (overrides the configuration).").StringVar(&c.storagePath)
	c.cmd.Flag("from", "Start (RFC 3339, a date, Unix seconds, or a duration before now such as 30d).").Default("7d").StringVar(&c.from)
	c.cmd.Flag("to", "End, exclusive (same forms; 0s is now).").Default("0s").StringVar(&c.to)
	c.cmd.Flag("step", "1h, 1d (calendar days in --tz), 1w (weeks from Monday in --tz), or a whole number of minutes.").Default("1h").StringVar(&c.step)
	c.cmd.Flag("tz", "Time zone of day and week boundaries and of the times in CSV and JSON (IANA name).").Default("UTC").StringVar(&c.tz)
	c.cmd.Flag("by", "Labels to group by, comma-separated or repeated (e.g. modelName,Hostname).").StringsVar(&c.by)
	c.cmd.Flag("format", "parquet, csv or jsonl (default: from --output's extension, else csv).").StringVar(&c.format)
	c.cmd.Flag("output", "File to write, or - for standard output.").Short('o').Default("-").StringVar(&c.output)
	c.cmd.Flag("preset", "capacity: per GPU model and served model, SM activity, tokens/s per GPU, requests/s, TTFT and TPOT p99, KV cache, throttling, headroom and a 90-day linear trend.").EnumVar(&c.preset, "", export.PresetCapacity)
	c.cmd.Flag("chart", "With --preset=capacity: the PNG chart's file (default: --output with .png; none for standard output).").StringVar(&c.chart)
	c.cmd.Flag("force", "Replace --output (and --chart) if they exist.").BoolVar(&c.force)
	c.cmd.Flag("no-progress-bar", "Do not draw the progress bar.").BoolVar(&c.noProgress)
	c.cmd.Arg("query", "Series selectors (one metric name each) or PromQL expressions, each optionally alias=..., which names its columns.").StringsVar(&c.queries)
	return c
}

func (c *exportCommand) run(logger *slog.Logger) (err error) {
	cfg, err := loadOfflineConfig(c.configFile, c.storagePath)
	if err != nil {
		return err
	}
	loc, err := export.ParseLocation(c.tz)
	if err != nil {
		return err
	}
	now := time.Now()
	req := export.Request{Step: c.step, Location: loc, Queries: c.queries, By: splitFlagList(c.by), Preset: c.preset}
	if req.From, err = export.ParseTime(c.from, now, loc); err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	if req.To, err = export.ParseTime(c.to, now, loc); err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	format, err := c.outputFormat()
	if err != nil {
		return err
	}
	if c.output == "" {
		c.output = "-" // kingpin reads "-o -" as an empty value
	}
	chart := c.chartPath()
	for _, path := range []string{c.output, chart} {
		if path == "" || path == "-" || c.force {
			continue
		}
		if _, err := os.Stat(path); err == nil {
			return fmt.Errorf("%s exists: give --force to replace it", path)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ex, closeTiers, err := openExporter(cfg, logger, nil, nil, nil, nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, closeTiers()) }()
	job, err := ex.Prepare(ctx, req, export.CapacityConfig{})
	if err != nil {
		return err
	}

	bar := &progressBar{w: os.Stderr, off: c.noProgress || !isTerminal(os.Stdout) || !isTerminal(os.Stderr)}
	err = writeExport(ctx, job, format, loc, c.output, os.Stdout, func(done, total int) { bar.draw("export", done, total, "steps") })
	bar.finish()
	if err != nil {
		return err
	}
	if chart != "" && job.HasChart() {
		if err := atomicfile.Write(chart, job.WriteChart); err != nil {
			return fmt.Errorf("write chart: %w", err)
		}
		logger.Info("wrote capacity chart", "file", chart)
	}
	return nil
}

// writeExport writes job's rows to path ("-": stdout) in format. A file is
// written under a temporary name beside path and renamed at the end, so
// that Ctrl-C (ctx cancelled) or an error leaves no partial file.
func writeExport(ctx context.Context, job export.Job, format export.Format, loc *time.Location, path string, stdout io.Writer, progress func(done, total int)) (err error) {
	out := stdout
	var file *atomicfile.File
	if path != "-" && path != "" {
		if file, err = atomicfile.Create(path, ""); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				err = errors.Join(err, file.Abort())
			}
		}()
		out = file
	}
	rw, err := export.NewWriter(format, out, job.Columns(), loc)
	if err != nil {
		return err
	}
	if err := job.Run(ctx, rw, progress); err != nil {
		if errors.Is(err, context.Canceled) {
			return errors.New("interrupted: nothing written")
		}
		return err
	}
	if err := rw.Close(); err != nil {
		return err
	}
	if file != nil {
		return file.Commit()
	}
	return nil
}

// outputFormat is --format, else --output's extension, else CSV.
func (c *exportCommand) outputFormat() (export.Format, error) {
	if c.format != "" {
		return export.ParseFormat(c.format)
	}
	switch strings.ToLower(filepath.Ext(c.output)) {
	case ".parquet":
		return export.FormatParquet, nil
	case ".jsonl", ".json", ".ndjson":
		return export.FormatJSON, nil
	}
	return export.FormatCSV, nil
}

// chartPath is where the capacity preset's chart goes ("" for none).
func (c *exportCommand) chartPath() string {
	if c.preset == "" {
		return ""
	}
	if c.chart != "" || c.output == "-" {
		return c.chart
	}
	return strings.TrimSuffix(c.output, filepath.Ext(c.output)) + ".png"
}

func splitFlagList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// isTerminal reports whether f is a terminal (a character device).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// openExporter returns an exporter over the storage's rollup tiers. With
// minute and hour nil (strata export), it opens them read-only, so that
// it can run beside strata serve (raw, the TSDB and its lock, are never
// touched), and reads the remote-write metadata file; strata serve passes
// its own tiers, engine and metadata. close closes what it opened.
func openExporter(cfg Config, logger *slog.Logger, minute, hour *tiers.Rollup, engine promql.QueryEngine, meta *remotewrite.MetadataStore) (*export.Exporter, func() error, error) {
	closeFn := func() error { return nil }
	if minute == nil || hour == nil {
		reg := prometheus.NewRegistry()
		open := func(rc tiers.RollupConfig) (*tiers.Rollup, error) {
			rc.ReadOnly = true
			return tiers.OpenRollup(rc, logger, reg, time.Now)
		}
		var err error
		if minute, err = open(tiers.DefaultMinuteConfig(filepath.Join(cfg.Storage.Path, "minute"))); err != nil {
			return nil, nil, err
		}
		if hour, err = open(tiers.DefaultHourConfig(filepath.Join(cfg.Storage.Path, "hour"))); err != nil {
			return nil, nil, errors.Join(err, minute.Close())
		}
		closeFn = func() error { return errors.Join(hour.Close(), minute.Close()) }
	}
	lookback := time.Duration(cfg.Query.LookbackDelta)
	if engine == nil {
		engine = promql.NewEngine(promql.EngineOpts{Logger: logger, MaxSamples: cfg.Query.MaxSamples, Timeout: time.Duration(cfg.Query.Timeout), LookbackDelta: lookback})
	}
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		return nil, nil, errors.Join(err, closeFn())
	}
	if meta == nil {
		if meta, err = remotewrite.ReadMetadataStore(filepath.Join(cfg.Storage.Path, "metadata.json")); err != nil {
			logger.Warn("metadata not read: metric types come from the catalogue and names only", "err", err)
			meta = remotewrite.NewMetadataStore(0)
		}
	}
	typing := export.Typing{
		Catalogue: cat.TypeOf,
		Metadata: func(family string) model.MetricType {
			for _, m := range meta.Metadata(family)[family] {
				return m.Type
			}
			return ""
		},
	}
	ex := export.New(export.Config{
		Minute: minute, Hour: hour, Typing: typing, Engine: engine,
		Queryable: tiers.NewStitched(nil, minute, hour, tiers.WithLookbackDelta(lookback)),
	})
	return ex, closeFn, nil
}
