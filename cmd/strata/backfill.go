package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/backfill"
	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/internal/diskspace"
)

type backfillCommand struct {
	cmd          *kingpin.CmdClause
	configFile   string
	storagePath  string
	files        []string
	readURL      string
	match        string
	from, to     string
	dropLabels   []string
	progressFile string
	noProgress   bool
	slice        time.Duration
	memory       memoryPolicy
	overrides    *overrides
}

func newBackfillCommand(app *kingpin.Application) *backfillCommand {
	c := &backfillCommand{cmd: app.Command("backfill", "Import historical samples into the tiers: what the raw head can take goes to raw; older data goes straight into minute and hour rollups, and what of it lies within the raw retention also into raw blocks. Run it while strata serve is stopped.")}
	c.cmd.Flag("config.file", "Strata configuration file (for storage path and retentions).").StringVar(&c.configFile)
	c.cmd.Flag("storage.path", "Directory holding every tier (overrides the configuration).").StringVar(&c.storagePath)
	c.cmd.Arg("file", "OpenMetrics (.om, .openmetrics) or Prometheus text files with a timestamp on every sample; gzip-compressed when named .gz (e.g. history.om.gz).").StringsVar(&c.files)
	c.cmd.Flag("remote-read.url", "Read the history from a Prometheus-compatible remote-read endpoint instead, e.g. http://prometheus:9090/api/v1/read.").StringVar(&c.readURL)
	c.cmd.Flag("remote-read.match", "Series selector for --remote-read.url.").Default(`{__name__=~".+"}`).StringVar(&c.match)
	c.cmd.Flag("remote-read.from", "Start of the range to read (RFC 3339 or a duration before now, e.g. 30d).").Default("7d").StringVar(&c.from)
	c.cmd.Flag("remote-read.to", "End of the range to read (RFC 3339, or a duration before now; 0s is now).").Default("0s").StringVar(&c.to)
	c.cmd.Flag("remote-read.drop-label", "Label to remove from every series read with --remote-read.url (repeatable), e.g. the external labels a Prometheus or Strata source adds to what it answers. Two series that only this label told apart are an error.").StringsVar(&c.dropLabels)
	c.cmd.Flag("slice", "The history is read and imported this much at a time, so the backfill holds one slice of it in memory, not the whole range; within the raw tier's reach (its retention) in whole hours, each slice reaching to the end of a raw block that starts in it. Files are parsed once into a spool of 20 bytes a sample under <storage.path>/"+rollupSpillDir+", removed at the end, and read back from there.").Default("1h").DurationVar(&c.slice)
	c.cmd.Flag("progress-file", "Where progress is recorded so an interrupted backfill resumes (default <storage.path>/backfill.progress.json).").StringVar(&c.progressFile)
	c.cmd.Flag("no-progress-bar", "Do not draw the progress bar.").BoolVar(&c.noProgress)
	c.memory.flags(c.cmd, " An import whose live heap nears the limit collects more often rather than be killed.")
	c.overrides = &overrides{cmd: c.cmd}
	c.overrides.bytes("storage.min-free-bytes", "The backfill stops, its progress kept, when the storage's free disk space falls below this (as strata serve refuses writes); 0: no check. (default: the configuration's storage.min_free_bytes, 256MiB)",
		func(c *Config) *ByteSize { return &c.Storage.MinFreeBytes })
	return c
}

func (c *backfillCommand) run(logger *slog.Logger) (err error) {
	cfg, err := loadOfflineConfig(c.configFile, c.storagePath)
	if err != nil {
		return err
	}
	c.overrides.applyTo(&cfg)
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	if (len(c.files) == 0) == (c.readURL == "") {
		return errors.New("give either input files or --remote-read.url")
	}
	if len(c.dropLabels) > 0 && c.readURL == "" {
		return errors.New("--remote-read.drop-label applies to --remote-read.url only")
	}
	for _, n := range c.dropLabels {
		if !model.UTF8Validation.IsValidLabelName(n) || n == model.MetricNameLabel {
			return fmt.Errorf("--remote-read.drop-label: %q is not a label that can be dropped", n)
		}
	}
	if c.slice <= 0 {
		return fmt.Errorf("--slice must be positive, not %s", c.slice)
	}
	// The memory policy of strata serve, without its heap pacer: an
	// import holds a slice of the history.
	if err := c.memory.apply(memorySources{root: "/"}, logger); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// An import writes as fast as the disk takes it: it stops, as an
	// interrupt stops it (progress kept), when the disk nears full, before
	// the raw tier's head panics for want of chunk space.
	ctx, stopWatch, err := watchDisk(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopWatch()
	if err := diskLow(ctx); err != nil {
		return err
	}

	// Both kinds of input are read by RunSliced, a slice at a time where the
	// history goes into the rollup tiers alone: a remote-read source
	// directly, files from a spool they are parsed into first.
	var (
		read     backfill.ReadFunc
		reader   *rangeReader
		spool    *backfill.Spool
		from, to int64
		inputID  string
	)
	progressFile := c.progressFile
	if progressFile == "" {
		progressFile = filepath.Join(cfg.Storage.Path, "backfill.progress.json")
	}
	if c.readURL != "" {
		if reader, from, to, err = c.remoteReader(); err != nil {
			return err
		}
		read = reader.read
		// The same command again resumes an unfinished import of it: with
		// the range that import began with, not one relative to now again.
		source := fmt.Sprintf("remote-read %s %s drop %v from %s to %s", c.readURL, reader.matchers, c.dropLabels, c.from, c.to)
		u, ok, err := backfill.Unfinished(progressFile)
		if err != nil {
			return progressError(err, progressFile)
		}
		if ok && strings.HasPrefix(u.Input, source+" [") && (u.From != from || u.To != to) {
			from, to = u.From, u.To
			logger.Info("resuming the unfinished import of this command, over the range it began with",
				"from", time.UnixMilli(from).UTC().Format(time.RFC3339), "to", time.UnixMilli(to-1).UTC().Format(time.RFC3339), "progress_file", progressFile)
		}
		inputID = fmt.Sprintf("%s [%d, %d)", source, from, to)
	} else {
		if spool, err = c.spoolFiles(ctx, filepath.Join(cfg.Storage.Path, rollupSpillDir)); err != nil {
			return cmp.Or(diskLow(ctx), err)
		}
		defer func() { err = errors.Join(err, spool.Close()) }()
		read = spool.Read
		mint, maxt, ok := spool.Range()
		if !ok {
			logger.Info("read backfill input: no samples", "files", len(c.files))
			return nil
		}
		from, to = mint, maxt+1
		logger.Info("read backfill input", "series", spool.Series(), "samples", spool.Samples(),
			"from", time.UnixMilli(mint).UTC().Format(time.RFC3339), "to", time.UnixMilli(maxt).UTC().Format(time.RFC3339))
	}
	minT := from
	// The diagnosis engine's checkpoints after the first backfilled minute
	// never saw it: its next start reads the baselines back from there.
	if dropped, err := diagnose.DropBaselineCheckpoints(baselineDir(cfg.Storage.Path), minT); err != nil {
		return fmt.Errorf("remove the baselines' checkpoints the backfill makes stale: %w", err)
	} else if dropped > 0 {
		logger.Info("removed the baselines' checkpoints after the backfilled history's start", "files", dropped, "from", time.UnixMilli(minT).UTC().Format(time.RFC3339))
	}

	reg := prometheus.NewRegistry() // tiers' metrics are not served by this command
	st, err := openTiers(cfg, logger, reg, reg)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.close()) }()
	keep := ""
	if spool != nil {
		keep = spool.Dir()
	}
	removeLeftoverSpools(filepath.Join(cfg.Storage.Path, rollupSpillDir), keep, logger)

	bcfg := backfill.DefaultConfig()
	bcfg.RawRetention = time.Duration(cfg.Storage.Raw.Retention)
	bcfg.HourRetention = time.Duration(cfg.Storage.Hour.Retention)
	if skew := time.Duration(cfg.RemoteWrite.MaxFutureSkew); skew > 0 {
		bcfg.MaxFutureSkew = skew // else the receiver's default, as serve takes it
	}
	if bcfg.KindOf, err = rollupTyping(); err != nil {
		return err
	}
	bcfg.TempDir = filepath.Join(cfg.Storage.Path, rollupSpillDir)
	bcfg.ProgressFile = progressFile
	bcfg.InputID = inputID
	if spool != nil {
		bcfg.InputID = spool.Fingerprint()
	}
	bar := &progressBar{w: os.Stderr, off: c.noProgress}
	targets := backfill.Targets{Raw: st.raw, Minute: st.minute, Hour: st.hour}
	res, err := backfill.RunSliced(ctx, bcfg, read, from, to, c.slice, targets, bar.update)
	bar.finish()
	if spool != nil {
		// RunSliced does not read what no tier keeps: Run counted it.
		res.DroppedSamples += spool.SamplesBefore(backfill.Horizon(bcfg))
	}
	if reader != nil {
		logger.Info("read backfill input", "samples", reader.samples, "histogram_samples", reader.histograms, "requests", reader.requests)
	}
	if errors.Is(err, backfill.ErrProgressMismatch) {
		return fmt.Errorf("backfill: %w: rerun that import to finish it (the same files, or the same remote-read command, "+
			"which resumes the range it began with), or remove %s to start this one", err, bcfg.ProgressFile)
	}
	if errors.Is(err, backfill.ErrProgressDamaged) {
		return progressError(err, bcfg.ProgressFile)
	}
	if err := diskLow(ctx); err != nil {
		return err
	}
	if err != nil {
		return fmt.Errorf("backfill (rerun the same command to resume): %w", err)
	}
	logger.Info("backfill done", "partitions_written", res.PartitionsWritten, "partitions_skipped", res.PartitionsSkipped,
		"raw_samples", res.RawSamples, "raw_block_samples", res.RawBlockSamples, "raw_gap_samples", res.RawGapSamples,
		"partitions_rewritten", res.PartitionsRewritten, "histogram_samples", res.HistogramSamples,
		"dropped_samples", res.DroppedSamples, "conflicting_samples", res.ConflictingSamples)
	if res.ConflictingSamples > 0 {
		logger.Warn("samples of the input were left out for another value of their series at their timestamp later in the input (the last is kept): two sources' series without the labels that tell them apart (a job or instance label), or two files of the same series that disagree",
			"samples", res.ConflictingSamples)
	}
	if res.RefusedRawSamples > 0 {
		logger.Warn("samples of the backfill among a series' samples in the raw tier were left out: at a timestamp it holds (the same scrape, or another value for it: the live one is kept) or between two of them (another source's, which would interleave with them); history before a series' first sample, after its last or in a hole between two went into raw blocks beside the head",
			"samples", res.RefusedRawSamples)
	}
	if res.FutureSamples > 0 {
		logger.Warn("samples more than remote_write.max_future_skew past this machine's clock were not backfilled (a source's clock ahead, or times written in another zone): in the raw tier's head they would make every live sample behind them too old, as the remote-write receiver refuses them",
			"samples", res.FutureSamples, "max_future_skew", model.Duration(bcfg.MaxFutureSkew))
	}
	if res.DroppedHistogramSamples > 0 {
		logger.Warn("native histogram samples older than the raw retention are not backfilled: the rollup tiers hold floats only",
			"samples", res.DroppedHistogramSamples, "raw_retention", cfg.Storage.Raw.Retention)
	}
	return nil
}

// watchDisk returns a context cancelled when the free space of the storage
// path's or the raw tier's filesystem falls below storage.min_free_bytes
// (checked every second; never with a minimum of 0), and the function that
// stops watching.
func watchDisk(ctx context.Context, cfg Config) (context.Context, context.CancelFunc, error) {
	dirs := []string{cfg.Storage.Path, rawDir(cfg)}
	if cfg.Storage.MinFreeBytes > 0 {
		for _, d := range dirs { // so that their free space can be read
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, nil, fmt.Errorf("create the storage directory: %w", err)
			}
		}
	}
	// Its log lines speak of the server's writers: this command says why it stops.
	g := diskspace.New(int64(cfg.Storage.MinFreeBytes), dirs, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	ctx, stop := g.Watch(ctx, time.Second)
	return ctx, stop, nil
}

// diskLow is the error that ends a backfill stopped by watchDisk, or nil.
func diskLow(ctx context.Context) error {
	if cause := context.Cause(ctx); errors.Is(cause, diskspace.ErrLow) {
		return fmt.Errorf("backfill stopped: %w. What it wrote is kept: free disk space (or lower --storage.min-free-bytes) and rerun the same command to resume", cause)
	}
	return nil
}

// removeLeftoverSpools removes the spools that backfills killed before
// their end left in dir, but keep, and says so; a failure is only
// logged: it costs disk, not data.
func removeLeftoverSpools(dir, keep string, logger *slog.Logger) {
	n, bytes, err := backfill.RemoveSpools(dir, keep)
	if n > 0 {
		logger.Info("removed the spools of backfills that did not finish", "spools", n, "bytes", bytes, "dir", dir)
	}
	if err != nil {
		logger.Warn("could not remove a backfill's leftover spool", "err", err)
	}
}

// spoolFiles parses the input files into a spool under dir.
func (c *backfillCommand) spoolFiles(ctx context.Context, dir string) (*backfill.Spool, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("backfill spool: %w", err)
	}
	spool, err := backfill.NewSpool(dir)
	if err != nil {
		return nil, err
	}
	bar := &progressBar{w: os.Stderr, off: c.noProgress}
	for i, f := range c.files {
		err = spool.AddFile(ctx, f, func(done, size int) {
			bar.draw("parse", done>>20, size>>20, fmt.Sprintf(" file %d/%d  series %d  samples %d", i+1, len(c.files), spool.Series(), spool.Samples()))
		})
		if err != nil {
			break
		}
	}
	bar.finish()
	if err != nil {
		return nil, errors.Join(err, spool.Close())
	}
	return spool, nil
}

// rangeReader reads ranges of the series matching its matchers from a
// Prometheus-compatible remote-read endpoint with Prometheus' own client,
// native histograms included (the backfill puts them in the raw tier only),
// and counts what it read.
type rangeReader struct {
	client     remote.ReadClient
	url        string
	matchers   []*labels.Matcher
	dropLabels []string

	requests, samples, histograms int
}

// remoteReader returns the reader of --remote-read.url and the range
// [from, to) the flags ask for.
func (c *backfillCommand) remoteReader() (r *rangeReader, from, to int64, err error) {
	now := time.Now()
	f, err := parseTimeOrAgo(c.from, now)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("--remote-read.from: %w", err)
	}
	t, err := parseTimeOrAgo(c.to, now)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("--remote-read.to: %w", err)
	}
	if !f.Before(t) {
		return nil, 0, 0, fmt.Errorf("--remote-read.from (%s) must be before --remote-read.to (%s)", f.UTC().Format(time.RFC3339), t.UTC().Format(time.RFC3339))
	}
	matchers, err := parser.NewParser(parser.Options{}).ParseMetricSelector(c.match)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("--remote-read.match: %w", err)
	}
	u, err := url.Parse(c.readURL)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("--remote-read.url: %w", err)
	}
	client, err := remote.NewReadClient("backfill", &remote.ClientConfig{
		URL:                   &config_util.URL{URL: u},
		Timeout:               model.Duration(5 * time.Minute),
		ChunkedReadLimit:      1 << 30,
		AcceptedResponseTypes: []prompb.ReadRequest_ResponseType{prompb.ReadRequest_STREAMED_XOR_CHUNKS, prompb.ReadRequest_SAMPLES},
	})
	if err != nil {
		return nil, 0, 0, err
	}
	// The flags' range includes its end; the reader's excludes it.
	return &rangeReader{client: client, url: c.readURL, matchers: matchers, dropLabels: c.dropLabels}, f.UnixMilli(), t.UnixMilli() + 1, nil
}

// read returns the samples in [from, to) of every matching series.
func (r *rangeReader) read(ctx context.Context, from, to int64) ([]backfill.Series, error) {
	pm, err := remote.ToQuery(from, to-1, r.matchers, nil)
	if err != nil {
		return nil, err
	}
	r.requests++
	set, err := r.client.Read(ctx, pm, false)
	if err != nil {
		return nil, fmt.Errorf("remote read from %s: %w", r.url, err)
	}
	var out []backfill.Series
	for set.Next() {
		s := set.At()
		bs := backfill.Series{Labels: s.Labels()}
		it := s.Iterator(nil)
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			// A streamed response holds whole chunks, which may reach
			// beyond the range.
			if t := it.AtT(); t < from || t >= to {
				continue
			}
			// At*Histogram(nil) returns a histogram of its own, which the
			// iterator does not reuse.
			switch vt {
			case chunkenc.ValFloat:
				t, v := it.At()
				bs.Samples = append(bs.Samples, backfill.Sample{T: t, V: v})
			case chunkenc.ValHistogram:
				t, h := it.AtHistogram(nil)
				bs.Histograms = append(bs.Histograms, backfill.HistogramSample{T: t, H: h})
			case chunkenc.ValFloatHistogram:
				t, fh := it.AtFloatHistogram(nil)
				bs.Histograms = append(bs.Histograms, backfill.HistogramSample{T: t, FH: fh})
			}
		}
		if err := it.Err(); err != nil {
			return nil, err
		}
		if len(bs.Samples)+len(bs.Histograms) > 0 {
			out = append(out, bs)
			r.samples += len(bs.Samples)
			r.histograms += len(bs.Histograms)
		}
	}
	if err := set.Err(); err != nil {
		return nil, fmt.Errorf("remote read from %s: %w", r.url, err)
	}
	return dropLabels(out, r.dropLabels)
}

// dropLabels removes the labels named names from every series. Series that
// only those labels told apart would be merged into one, their samples
// mixed: that is an error naming the series.
func dropLabels(series []backfill.Series, names []string) ([]backfill.Series, error) {
	if len(names) == 0 {
		return series, nil
	}
	b := labels.NewBuilder(labels.EmptyLabels())
	seen := make(map[string]labels.Labels, len(series))
	var buf []byte
	for i := range series {
		b.Reset(series[i].Labels)
		b.Del(names...)
		l := b.Labels()
		buf = l.Bytes(buf)
		if before, ok := seen[string(buf)]; ok {
			return nil, fmt.Errorf("--remote-read.drop-label: %s and %s would both become %s", before, series[i].Labels, l)
		}
		seen[string(buf)] = series[i].Labels
		series[i].Labels = l
	}
	return series, nil
}

// parseTimeOrAgo reads RFC 3339, or a Prometheus duration meaning that long before now.
func parseTimeOrAgo(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := model.ParseDuration(s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither RFC 3339 nor a duration", s)
	}
	return now.Add(-time.Duration(d)), nil
}

// progressBar draws a one-line progress bar on a terminal (or any writer),
// for strata backfill and strata export.
type progressBar struct {
	w     io.Writer
	off   bool
	last  time.Time
	drawn bool
}

func (b *progressBar) update(p backfill.Progress) {
	b.draw(p.Phase, p.Done, p.Total, fmt.Sprintf(" partitions %d written, %d kept  raw samples %d (+%d in blocks)  dropped %d",
		p.PartitionsWritten, p.PartitionsSkipped, p.RawSamples, p.RawBlockSamples, p.DroppedSamples))
}

// draw redraws the bar at most every 100 ms (and always at the end).
func (b *progressBar) draw(phase string, done, total int, detail string) {
	if b.off || time.Since(b.last) < 100*time.Millisecond && done != total {
		return
	}
	b.last = time.Now()
	const width = 40
	filled := width
	if total > 0 {
		filled = width * done / total
	}
	_, _ = fmt.Fprintf(b.w, "\r%-10s [%s%s] %d/%d %s ",
		phase, strings.Repeat("=", filled), strings.Repeat(" ", width-filled), done, total, detail)
	b.drawn = true
}

func (b *progressBar) finish() {
	if b.drawn {
		_, _ = fmt.Fprintln(b.w)
	}
}

// progressError is the backfill's answer to a progress file it cannot
// resume from: rerunning the command would meet the same file.
func progressError(err error, path string) error {
	if errors.Is(err, backfill.ErrProgressDamaged) {
		return fmt.Errorf("backfill: %w: remove %s to start the import over from its beginning "+
			"(the partitions it wrote are kept and skipped)", err, path)
	}
	return err
}
