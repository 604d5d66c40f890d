package bench

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"
)

// Scenario is a complete measurement: a load repeated Repeats times against
// one target, with the server's resource use, disk use, dashboard latency and
// rollup lag read after each repetition.
type Scenario struct {
	// Name labels the report (default "bench").
	Name string
	// Load is the load of each repetition. Its StartTime is managed by Run:
	// every repetition continues each series where the previous one stopped,
	// so the target never sees out-of-order samples.
	Load LoadConfig
	// Repeats is the number of load repetitions (default 3); figures are
	// medians over them, never one sample.
	Repeats int
	// PID is the server process to measure from /proc (0: no CPU or memory
	// figures). ProcRoot defaults to /proc.
	PID      int
	ProcRoot string
	// ProcSampleInterval is how often RSS is sampled for the peak (default 500ms).
	ProcSampleInterval time.Duration
	// TierDirs maps a tier name (raw, minute, hour, or "tsdb" for another
	// receiver) to its directory, for bytes on disk per sample.
	TierDirs map[string]string
	// QueryURL is the Prometheus HTTP API base (default: scheme://host of
	// Load.URL). SkipQueries turns dashboard latency off.
	QueryURL    string
	SkipQueries bool
	// Queries and QueryRanges default to DefaultDashboard and
	// DefaultQueryRanges; QueryRepeats (default 5) runs each panel that many
	// times per range; QueryTimeout (default 2m) bounds one query.
	Queries      []DashboardQuery
	QueryRanges  []time.Duration
	QueryRepeats int
	QueryTimeout time.Duration
	// MetricsURL is where strata_downsample_lag_seconds and the samples the
	// target stored (storedSampleMetrics) are read (default
	// scheme://host/metrics of Load.URL); SkipRollupLag turns both off.
	MetricsURL    string
	SkipRollupLag bool
	// CPUProfilePath, when set, receives the server's CPU profile
	// (/debug/pprof/profile) taken during the first repetition, for up to
	// CPUProfileSeconds (default 30, capped at the load duration).
	CPUProfilePath    string
	CPUProfileSeconds int
	// HeapProfilePath, when set, receives the server's heap profile
	// (/debug/pprof/heap) taken at the end of the last repetition's load,
	// before its queries: where the bytes per series go.
	HeapProfilePath string
	// Logger defaults to a discarding logger.
	Logger *slog.Logger
}

// DefaultRepeats and DefaultQueryRepeats are Scenario's defaults.
const (
	DefaultRepeats      = 3
	DefaultQueryRepeats = 5
)

// RunResult is everything measured in one repetition.
type RunResult struct {
	Load   LoadResult    `json:"load"`
	Server *ServerResult `json:"server,omitempty"`
	Disk   []TierDisk    `json:"disk,omitempty"`
	// Queries is the dashboard latency per range after this repetition.
	Queries     []RangeLatency `json:"queries,omitempty"`
	QueryErrors []string       `json:"query_errors,omitempty"`
	// RollupLagSeconds is nil when the target does not expose it.
	RollupLagSeconds *float64 `json:"rollup_lag_seconds,omitempty"`
	// StoredSamples is how many samples the target's storage appended since
	// the scenario started, by its own counter (StoredSamplesMetric): the
	// samples sent plus what the target adds itself (Strata's self-scrape,
	// recording rules and start-timestamp zero samples). Zero when the
	// target does not expose one.
	StoredSamples       int64  `json:"stored_samples,omitempty"`
	StoredSamplesMetric string `json:"stored_samples_metric,omitempty"`
}

// ServerResult is the server process' resource use during one repetition.
type ServerResult struct {
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPUCores is CPUSeconds over the repetition's wall time: the cores the
	// server kept busy, the figure a paced load is about.
	CPUCores float64 `json:"cpu_cores"`
	// CPUSecondsPerMillionSamples is what a million accepted samples cost.
	CPUSecondsPerMillionSamples float64 `json:"cpu_seconds_per_million_samples"`
	// SamplesPerCPUSecond is the same ratio inverted: throughput per core.
	SamplesPerCPUSecond float64 `json:"samples_per_cpu_second"`
	RSSStartBytes       int64   `json:"rss_start_bytes"`
	RSSEndBytes         int64   `json:"rss_end_bytes"`
	// PeakRSSBytes is the highest RSS sampled during the run.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// HWMBytes is the kernel's lifetime RSS peak of the process.
	HWMBytes int64 `json:"hwm_bytes"`
	// RSSPerActiveSeriesBytes is PeakRSSBytes over the active series: an
	// upper bound, as it includes the server's fixed footprint.
	RSSPerActiveSeriesBytes float64 `json:"rss_per_active_series_bytes"`
	// SteadyRSSBytes is the median RSS over the last quarter of the
	// repetition: where memory settles under a steady load, without the
	// spikes the peak catches. SteadyRSSPerActiveSeriesBytes is it over the
	// active series.
	SteadyRSSBytes                float64 `json:"steady_rss_bytes"`
	SteadyRSSPerActiveSeriesBytes float64 `json:"steady_rss_per_active_series_bytes"`
	// PeakRSSAnonBytes and SteadyRSSAnonBytes are the same figures of the
	// RSS's anonymous part (ProcSample.RSSAnonBytes): what is left when the
	// file pages a server maps are set aside, which two servers map in
	// different amounts (a TSDB reading its chunk files through mappings
	// keeps them resident until it unmaps them). 0 when not read.
	PeakRSSAnonBytes   int64   `json:"peak_rss_anon_bytes,omitempty"`
	SteadyRSSAnonBytes float64 `json:"steady_rss_anon_bytes,omitempty"`
	Samples            int     `json:"rss_samples"`
	// RSSTimeline is every RSS reading of the repetition.
	RSSTimeline []RSSPoint `json:"rss_timeline,omitempty"`
}

// RSSPoint is one reading of the server's resident set size.
type RSSPoint struct {
	Seconds   float64 `json:"seconds"` // since the repetition started
	Bytes     int64   `json:"bytes"`
	AnonBytes int64   `json:"anon_bytes,omitempty"` // RssAnon
}

// TierDisk is one tier's size on disk after a repetition.
type TierDisk struct {
	Tier  string `json:"tier"`
	Dir   string `json:"dir"`
	Bytes int64  `json:"bytes"`
	// BytesPerSample is the growth since the scenario started over every
	// sample accepted since then: for rollup tiers, what each raw sample
	// costs in that tier. It is the figure the README shows: what a sent
	// sample costs, whatever the target stores beside it.
	BytesPerSample float64 `json:"bytes_per_sample"`
	// BytesPerStoredSample is the same growth over the samples the target
	// stored (RunResult.StoredSamples); 0 when unknown.
	BytesPerStoredSample float64 `json:"bytes_per_stored_sample,omitempty"`
}

// Run measures the scenario. It returns an error only when the scenario
// cannot run at all (bad config, unreadable server process or tier
// directory, canceled context); refused samples and failing queries are
// results.
func Run(ctx context.Context, sc Scenario) (Report, error) {
	sc, err := sc.withDefaults()
	if err != nil {
		return Report{}, err
	}
	logger := sc.Logger
	load := sc.Load
	rep := Report{
		SchemaVersion: ReportSchemaVersion,
		Name:          sc.Name,
		Target:        load.URL,
		Started:       load.Now().UTC(),
		Host:          HostInfo{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU()},
		Load:          load,
		Repeats:       sc.Repeats,
	}
	rep.Load.StartTime = time.Time{}

	baseDisk := map[string]int64{}
	for tier, dir := range sc.TierDirs {
		n, err := DirSize(dir)
		if err != nil {
			return Report{}, fmt.Errorf("tier %s: %w", tier, err)
		}
		baseDisk[tier] = n
	}
	if sc.PID != 0 {
		if _, err := ReadProc(sc.ProcRoot, sc.PID); err != nil {
			return Report{}, fmt.Errorf("server process %d: %w", sc.PID, err)
		}
	}

	gen, err := newGenerator(load)
	if err != nil {
		return Report{}, err
	}
	client := &http.Client{Timeout: sc.QueryTimeout}
	base, _ := baseOf(load.URL)
	var baseStored float64
	if !sc.SkipRollupLag {
		if m, err := readReceiverMetrics(ctx, client, sc.MetricsURL, load.Username, load.Password); err == nil && m.hasStored {
			baseStored = m.stored
		}
	}
	var cumAccepted int64
	for i := range sc.Repeats {
		logger.Info("bench repetition", "run", i+1, "of", sc.Repeats, "target", load.URL)
		if i > 0 && load.Paced() {
			// A fleet does not send faster to catch up after the queries
			// that ran between repetitions: it resumes at the real clock.
			load.StartTime = later(load.StartTime, load.Now())
		}
		run, err := newLoadRun(load, gen, logger)
		if err != nil {
			return rep, err
		}
		var rr RunResult
		var profErr chan error
		if i == 0 && sc.CPUProfilePath != "" {
			secs := min(sc.CPUProfileSeconds, max(1, int(load.Duration.Seconds())))
			profErr = make(chan error, 1)
			go func() {
				profErr <- captureCPUProfile(ctx, client, base, load.Username, load.Password, secs, sc.CPUProfilePath)
			}()
		}
		var ps *procSampler
		if sc.PID != 0 {
			ps = startProcSampler(sc.ProcRoot, sc.PID, sc.ProcSampleInterval)
		}
		lr, err := run.run(ctx)
		if ps != nil {
			rr.Server = ps.stop(lr)
		}
		if err != nil {
			return rep, fmt.Errorf("run %d: %w", i+1, err)
		}
		rr.Load = lr
		cumAccepted += lr.SamplesAccepted
		// Interval timestamps round the start up to the next round, so +1
		// never skips one.
		load.StartTime = time.UnixMilli(lr.LastTimestamp + 1)
		if i == sc.Repeats-1 && sc.HeapProfilePath != "" {
			if err := captureProfile(ctx, client, base+"/debug/pprof/heap", load.Username, load.Password, sc.HeapProfilePath); err != nil {
				logger.Warn("heap profile not captured", "err", err)
			} else {
				logger.Info("heap profile written", "path", sc.HeapProfilePath)
			}
		}

		if profErr != nil {
			if err := <-profErr; err != nil {
				logger.Warn("cpu profile not captured", "err", err)
			} else {
				logger.Info("cpu profile written", "path", sc.CPUProfilePath)
			}
		}
		if !sc.SkipRollupLag {
			m, err := readReceiverMetrics(ctx, client, sc.MetricsURL, load.Username, load.Password)
			if err != nil {
				logger.Debug("target metrics not read", "err", err)
			}
			if m.hasLag {
				rr.RollupLagSeconds = &m.rollupLag
			}
			if m.hasStored {
				rr.StoredSamples, rr.StoredSamplesMetric = int64(m.stored-baseStored), m.storedTotal
			}
		}
		for _, tier := range sortedKeys(sc.TierDirs) {
			n, err := DirSize(sc.TierDirs[tier])
			if err != nil {
				return rep, fmt.Errorf("tier %s: %w", tier, err)
			}
			td := TierDisk{Tier: tier, Dir: sc.TierDirs[tier], Bytes: n}
			if cumAccepted > 0 {
				td.BytesPerSample = float64(n-baseDisk[tier]) / float64(cumAccepted)
			}
			if rr.StoredSamples > 0 {
				td.BytesPerStoredSample = float64(n-baseDisk[tier]) / float64(rr.StoredSamples)
			}
			rr.Disk = append(rr.Disk, td)
		}
		if !sc.SkipQueries {
			ql, qerrs, err := runQueries(ctx, queryConfig{
				url: sc.QueryURL, username: load.Username, password: load.Password,
				queries: sc.Queries, ranges: sc.QueryRanges, repeats: sc.QueryRepeats,
				// End at the newest sample sent, not the wall clock: the
				// simulated clock may trail it by up to the backfill, and a
				// panel over a range without data measures nothing.
				timeout: sc.QueryTimeout, end: time.UnixMilli(lr.LastTimestamp),
			})
			if err != nil {
				return rep, fmt.Errorf("run %d queries: %w", i+1, err)
			}
			rr.Queries, rr.QueryErrors = ql, qerrs
		}
		rep.Runs = append(rep.Runs, rr)
	}
	rep.Summary = summarize(rep.Runs)
	return rep, nil
}

func (sc Scenario) withDefaults() (Scenario, error) {
	sc.Load = sc.Load.withDefaults()
	if err := sc.Load.validate(); err != nil {
		return sc, err
	}
	if sc.Name == "" {
		sc.Name = "bench"
	}
	if sc.Repeats == 0 {
		sc.Repeats = DefaultRepeats
	}
	if sc.Repeats < 0 || sc.QueryRepeats < 0 || sc.PID < 0 {
		return sc, fmt.Errorf("%w: repeats and pid must not be negative", ErrBadConfig)
	}
	if sc.ProcRoot == "" {
		sc.ProcRoot = "/proc"
	}
	if sc.ProcSampleInterval == 0 {
		sc.ProcSampleInterval = 500 * time.Millisecond
	}
	base, err := baseOf(sc.Load.URL)
	if err != nil {
		return sc, fmt.Errorf("%w: %w", ErrBadConfig, err)
	}
	if sc.QueryURL == "" {
		sc.QueryURL = base
	}
	if sc.MetricsURL == "" {
		sc.MetricsURL = base + "/metrics"
	}
	if len(sc.Queries) == 0 {
		sc.Queries = DefaultDashboard()
	}
	if len(sc.QueryRanges) == 0 {
		sc.QueryRanges = DefaultQueryRanges()
	}
	if sc.QueryRepeats == 0 {
		sc.QueryRepeats = DefaultQueryRepeats
	}
	if sc.QueryTimeout == 0 {
		sc.QueryTimeout = 2 * time.Minute
	}
	if sc.CPUProfileSeconds == 0 {
		sc.CPUProfileSeconds = 30
	}
	if sc.Logger == nil {
		sc.Logger = slog.New(slog.DiscardHandler)
	}
	return sc, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// procSampler samples a process' RSS periodically during a run, for the
// peak and the steady state, and its CPU time at both ends.
type procSampler struct {
	root   string
	pid    int
	began  time.Time
	start  ProcSample
	ok     bool
	points []RSSPoint
	done   chan struct{}
	wg     sync.WaitGroup
}

func startProcSampler(root string, pid int, every time.Duration) *procSampler {
	p := &procSampler{root: root, pid: pid, began: time.Now(), done: make(chan struct{})}
	if s, err := ReadProc(root, pid); err == nil {
		p.start, p.ok = s, true
		p.points = append(p.points, RSSPoint{Bytes: s.RSSBytes, AnonBytes: s.RSSAnonBytes})
	}
	p.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				if s, err := ReadProc(root, pid); err == nil {
					p.points = append(p.points, RSSPoint{Seconds: time.Since(p.began).Seconds(), Bytes: s.RSSBytes, AnonBytes: s.RSSAnonBytes})
				}
			}
		}
	})
	return p
}

// stop ends sampling and computes the figures for the run lr; nil when the
// process could not be read.
func (p *procSampler) stop(lr LoadResult) *ServerResult {
	close(p.done)
	p.wg.Wait()
	end, err := ReadProc(p.root, p.pid)
	if err != nil || !p.ok {
		return nil
	}
	p.points = append(p.points, RSSPoint{Seconds: time.Since(p.began).Seconds(), Bytes: end.RSSBytes, AnonBytes: end.RSSAnonBytes})
	return serverResult(p.start, end, p.points, lr)
}

// serverResult computes a repetition's server figures from the process
// readings at its start and end and the RSS readings in between (the end
// reading included).
func serverResult(start, end ProcSample, points []RSSPoint, lr LoadResult) *ServerResult {
	sr := &ServerResult{
		CPUSeconds:    end.CPUSeconds - start.CPUSeconds,
		RSSStartBytes: start.RSSBytes,
		RSSEndBytes:   end.RSSBytes,
		HWMBytes:      end.HWMBytes,
		Samples:       len(points),
		RSSTimeline:   points,
	}
	var steady, steadyAnon []float64
	last := points[len(points)-1].Seconds
	for _, pt := range points {
		sr.PeakRSSBytes = max(sr.PeakRSSBytes, pt.Bytes)
		sr.PeakRSSAnonBytes = max(sr.PeakRSSAnonBytes, pt.AnonBytes)
		if pt.Seconds >= 0.75*last {
			steady = append(steady, float64(pt.Bytes))
			if pt.AnonBytes > 0 {
				steadyAnon = append(steadyAnon, float64(pt.AnonBytes))
			}
		}
	}
	sr.SteadyRSSBytes = quantile(steady, 0.5)
	if len(steadyAnon) > 0 {
		sr.SteadyRSSAnonBytes = quantile(steadyAnon, 0.5)
	}
	if lr.ElapsedSeconds > 0 {
		sr.CPUCores = sr.CPUSeconds / lr.ElapsedSeconds
	}
	if lr.SamplesAccepted > 0 {
		sr.CPUSecondsPerMillionSamples = sr.CPUSeconds / float64(lr.SamplesAccepted) * 1e6
	}
	if sr.CPUSeconds > 0 {
		sr.SamplesPerCPUSecond = float64(lr.SamplesAccepted) / sr.CPUSeconds
	}
	if lr.Series > 0 {
		sr.RSSPerActiveSeriesBytes = float64(sr.PeakRSSBytes) / float64(lr.Series)
		sr.SteadyRSSPerActiveSeriesBytes = sr.SteadyRSSBytes / float64(lr.Series)
	}
	return sr
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// quantile is the q-quantile of xs by linear interpolation between closest
// ranks; 0 for no data. xs is not modified.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(pos)
	if lo+1 >= len(s) {
		return s[len(s)-1]
	}
	frac := pos - float64(lo)
	return s[lo] + frac*(s[lo+1]-s[lo])
}
