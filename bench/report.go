package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/strata-dev/strata/internal/atomicfile"
)

// ReportSchemaVersion is the version of the JSON report. Bump it when a field
// changes meaning or is removed; adding a field keeps it.
const ReportSchemaVersion = 1

// Report is the outcome of Run: every repetition and the summary over them.
// Its JSON form (WriteJSON, ReadReport) is what `strata bench compare` reads.
type Report struct {
	SchemaVersion int         `json:"schema_version"`
	Name          string      `json:"name"`
	Target        string      `json:"target"`
	Started       time.Time   `json:"started"`
	Host          HostInfo    `json:"host"`
	Load          LoadConfig  `json:"load"`
	Repeats       int         `json:"repeats"`
	Runs          []RunResult `json:"runs"`
	Summary       Summary     `json:"summary"`
	// DashboardWith names the targets whose dashboards were measured
	// interleaved with this one's (SetDashboard), this one included; empty
	// when the dashboard ran after each repetition.
	DashboardWith []string `json:"dashboard_with,omitempty"`
}

// SetDashboard makes lat (and errs) the report's dashboard latency, as
// measured after its last repetition by MeasureDashboards together with the
// targets named in with, and recomputes the summary. Latencies measured
// after earlier repetitions are dropped: the summary's dashboard figures
// are then this one measurement's.
func (r *Report) SetDashboard(lat []RangeLatency, errs []string, with []string) {
	if len(r.Runs) == 0 {
		return
	}
	for i := range r.Runs {
		r.Runs[i].Queries, r.Runs[i].QueryErrors = nil, nil
	}
	last := &r.Runs[len(r.Runs)-1]
	last.Queries, last.QueryErrors = lat, errs
	r.DashboardWith = with
	r.Summary = summarize(r.Runs)
}

// DashboardEnd is where the dashboard's ranges end for this report: the
// newest sample its last repetition sent.
func (r Report) DashboardEnd() (time.Time, bool) {
	if len(r.Runs) == 0 {
		return time.Time{}, false
	}
	return time.UnixMilli(r.Runs[len(r.Runs)-1].Load.LastTimestamp), true
}

// HostInfo is the machine the bench ran on.
type HostInfo struct {
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	CPUs   int    `json:"cpus"`
}

// Figure is one measured quantity over the repetitions.
type Figure struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// figureOf summarises xs; the zero Figure for no data.
func figureOf(xs []float64) Figure {
	if len(xs) == 0 {
		return Figure{}
	}
	return Figure{Median: quantile(xs, 0.5), Min: slices.Min(xs), Max: slices.Max(xs), N: len(xs)}
}

// RangeFigure is the dashboard latency at one range over the repetitions.
type RangeFigure struct {
	Range      string `json:"range"`
	P50Seconds Figure `json:"p50_seconds"`
	P99Seconds Figure `json:"p99_seconds"`
	// CPUPerQuerySeconds is the server's CPU time per query execution
	// (RangeLatency.CPUPerQuerySeconds); N == 0 when not measured.
	CPUPerQuerySeconds Figure `json:"cpu_per_query_seconds"`
}

// Summary holds the medians (with min and max) over the repetitions. A
// figure with N == 0 was not measured.
type Summary struct {
	AcceptedSamplesPerSecond Figure `json:"accepted_samples_per_second"`
	// RefusedRatio is refused/(accepted+refused) samples.
	RefusedRatio            Figure `json:"refused_ratio"`
	ClientLatencyP50Seconds Figure `json:"client_latency_p50_seconds"`
	ClientLatencyP99Seconds Figure `json:"client_latency_p99_seconds"`

	CPUSecondsPerMillionSamples Figure `json:"cpu_seconds_per_million_samples"`
	SamplesPerCPUSecond         Figure `json:"samples_per_cpu_second"`
	CPUCores                    Figure `json:"cpu_cores"`
	PeakRSSBytes                Figure `json:"peak_rss_bytes"`
	RSSPerActiveSeriesBytes     Figure `json:"rss_per_active_series_bytes"`
	SteadyRSSBytes              Figure `json:"steady_rss_bytes"`
	// SteadyRSSPerActiveSeriesBytes is the steady-state RSS over the
	// active series.
	SteadyRSSPerActiveSeriesBytes Figure `json:"steady_rss_per_active_series_bytes"`
	// PeakRSSAnonBytes and SteadyRSSAnonBytes are the RSS's anonymous
	// part (ServerResult), unmeasured where the kernel does not give it.
	PeakRSSAnonBytes   Figure `json:"peak_rss_anon_bytes"`
	SteadyRSSAnonBytes Figure `json:"steady_rss_anon_bytes"`

	// DiskBytesPerSample is per tier, after the last repetition's growth.
	DiskBytesPerSample map[string]Figure `json:"disk_bytes_per_sample,omitempty"`
	// DiskBytesPerStoredSample is per tier over the samples the target
	// stored (its own and rule outputs included), where it says.
	DiskBytesPerStoredSample map[string]Figure `json:"disk_bytes_per_stored_sample,omitempty"`
	// StoredPerSentSample is the target's stored samples over the samples
	// accepted from the load: 1 for a plain TSDB, above 1 for a target that
	// also stores its own metrics and rule outputs.
	StoredPerSentSample Figure        `json:"stored_per_sent_sample"`
	QueryLatency        []RangeFigure `json:"query_latency,omitempty"`
	RollupLagSeconds    Figure        `json:"rollup_lag_seconds"`
}

func summarize(runs []RunResult) Summary {
	var (
		s                                        Summary
		tput, refused, cp50, cp99                []float64
		cpuPerM, perCPU, peak, perSeries, rollup []float64
		cores, steady, steadyPerSeries           []float64
		peakAnon, steadyAnon                     []float64
		disk, diskStored                         = map[string][]float64{}, map[string][]float64{}
		storedPerSent                            []float64
		accepted                                 int64
		qp50, qp99, qcpu                         = map[string][]float64{}, map[string][]float64{}, map[string][]float64{}
		ranges                                   []string
	)
	for _, r := range runs {
		l := r.Load
		tput = append(tput, l.AcceptedSamplesPerSecond)
		if t := l.SamplesAccepted + l.SamplesRefused; t > 0 {
			refused = append(refused, float64(l.SamplesRefused)/float64(t))
		}
		cp50 = append(cp50, l.ClientLatencyP50Seconds)
		cp99 = append(cp99, l.ClientLatencyP99Seconds)
		if sv := r.Server; sv != nil {
			cpuPerM = append(cpuPerM, sv.CPUSecondsPerMillionSamples)
			perCPU = append(perCPU, sv.SamplesPerCPUSecond)
			peak = append(peak, float64(sv.PeakRSSBytes))
			perSeries = append(perSeries, sv.RSSPerActiveSeriesBytes)
			cores = append(cores, sv.CPUCores)
			steady = append(steady, sv.SteadyRSSBytes)
			steadyPerSeries = append(steadyPerSeries, sv.SteadyRSSPerActiveSeriesBytes)
			if sv.SteadyRSSAnonBytes > 0 {
				peakAnon = append(peakAnon, float64(sv.PeakRSSAnonBytes))
				steadyAnon = append(steadyAnon, sv.SteadyRSSAnonBytes)
			}
		}
		for _, d := range r.Disk {
			disk[d.Tier] = append(disk[d.Tier], d.BytesPerSample)
			if d.BytesPerStoredSample > 0 {
				diskStored[d.Tier] = append(diskStored[d.Tier], d.BytesPerStoredSample)
			}
		}
		// StoredSamples counts from the scenario's start, like the disk.
		accepted += l.SamplesAccepted
		if r.StoredSamples > 0 && accepted > 0 {
			storedPerSent = append(storedPerSent, float64(r.StoredSamples)/float64(accepted))
		}
		for _, q := range r.Queries {
			if q.Executions == q.Errors {
				continue // nothing measured at this range
			}
			if _, seen := qp50[q.Range]; !seen {
				ranges = append(ranges, q.Range)
			}
			qp50[q.Range] = append(qp50[q.Range], q.P50Seconds)
			qp99[q.Range] = append(qp99[q.Range], q.P99Seconds)
			if q.CPUPerQuerySeconds > 0 {
				qcpu[q.Range] = append(qcpu[q.Range], q.CPUPerQuerySeconds)
			}
		}
		if r.RollupLagSeconds != nil {
			rollup = append(rollup, *r.RollupLagSeconds)
		}
	}
	s.AcceptedSamplesPerSecond = figureOf(tput)
	s.RefusedRatio = figureOf(refused)
	s.ClientLatencyP50Seconds = figureOf(cp50)
	s.ClientLatencyP99Seconds = figureOf(cp99)
	s.CPUSecondsPerMillionSamples = figureOf(cpuPerM)
	s.SamplesPerCPUSecond = figureOf(perCPU)
	s.PeakRSSBytes = figureOf(peak)
	s.RSSPerActiveSeriesBytes = figureOf(perSeries)
	s.CPUCores = figureOf(cores)
	s.SteadyRSSBytes = figureOf(steady)
	s.SteadyRSSPerActiveSeriesBytes = figureOf(steadyPerSeries)
	s.PeakRSSAnonBytes = figureOf(peakAnon)
	s.SteadyRSSAnonBytes = figureOf(steadyAnon)
	s.RollupLagSeconds = figureOf(rollup)
	if len(disk) > 0 {
		s.DiskBytesPerSample = map[string]Figure{}
		for t, xs := range disk {
			s.DiskBytesPerSample[t] = figureOf(xs)
		}
	}
	if len(diskStored) > 0 {
		s.DiskBytesPerStoredSample = map[string]Figure{}
		for t, xs := range diskStored {
			s.DiskBytesPerStoredSample[t] = figureOf(xs)
		}
	}
	s.StoredPerSentSample = figureOf(storedPerSent)
	for _, r := range ranges {
		s.QueryLatency = append(s.QueryLatency, RangeFigure{Range: r, P50Seconds: figureOf(qp50[r]), P99Seconds: figureOf(qp99[r]), CPUPerQuerySeconds: figureOf(qcpu[r])})
	}
	return s
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	return nil
}

// SaveJSON writes the report to path atomically.
func (r Report) SaveJSON(path string) error {
	return atomicfile.Write(path, r.WriteJSON)
}

// ReadReport decodes a JSON report and checks its schema version.
func ReadReport(rd io.Reader) (Report, error) {
	var r Report
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return Report{}, fmt.Errorf("decode report: %w", err)
	}
	if r.SchemaVersion != ReportSchemaVersion {
		return Report{}, fmt.Errorf("%w: report schema version %d, this bench reads %d", ErrBadConfig, r.SchemaVersion, ReportSchemaVersion)
	}
	return r, nil
}

// LoadReport reads a JSON report file.
func LoadReport(path string) (r Report, err error) {
	f, err := os.Open(path)
	if err != nil {
		return Report{}, fmt.Errorf("open report: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close report: %w", cerr)
		}
	}()
	r, err = ReadReport(f)
	if err != nil {
		return Report{}, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// row is one line of the summary and comparison tables. higherBetter tells
// Compare which direction is an improvement.
type row struct {
	name         string
	unit         string
	fig          Figure
	higherBetter bool
}

// rows lists the summary's measured figures in a stable order.
func (s Summary) rows() []row {
	rs := []row{
		{"accepted samples/s", "", s.AcceptedSamplesPerSecond, true},
		{"refused ratio", "", s.RefusedRatio, false},
		{"client request latency p50", "s", s.ClientLatencyP50Seconds, false},
		{"client request latency p99", "s", s.ClientLatencyP99Seconds, false},
		{"server CPU-seconds per million samples", "s", s.CPUSecondsPerMillionSamples, false},
		{"samples per server CPU-second", "", s.SamplesPerCPUSecond, true},
		{"server CPU cores used", "", s.CPUCores, false},
		{"peak RSS", "B", s.PeakRSSBytes, false},
		{"peak RSS per active series", "B", s.RSSPerActiveSeriesBytes, false},
		{"steady-state RSS", "B", s.SteadyRSSBytes, false},
		{"steady-state RSS per active series", "B", s.SteadyRSSPerActiveSeriesBytes, false},
		{"peak anonymous RSS", "B", s.PeakRSSAnonBytes, false},
		{"steady-state anonymous RSS", "B", s.SteadyRSSAnonBytes, false},
	}
	for _, t := range sortedKeys(s.DiskBytesPerSample) {
		rs = append(rs, row{"disk bytes per sample, " + t, "B", s.DiskBytesPerSample[t], false})
	}
	if s.StoredPerSentSample.N > 0 {
		rs = append(rs, row{"samples stored per sample sent", "", s.StoredPerSentSample, false})
	}
	for _, t := range sortedKeys(s.DiskBytesPerStoredSample) {
		rs = append(rs, row{"disk bytes per stored sample, " + t, "B", s.DiskBytesPerStoredSample[t], false})
	}
	for _, q := range s.QueryLatency {
		rs = append(rs, row{"dashboard latency p50, " + q.Range, "s", q.P50Seconds, false},
			row{"dashboard latency p99, " + q.Range, "s", q.P99Seconds, false},
			row{"dashboard server CPU per query, " + q.Range, "s", q.CPUPerQuerySeconds, false})
	}
	rs = append(rs, row{"rollup lag", "s", s.RollupLagSeconds, false})
	return rs
}

// WriteMarkdown writes the report for humans: the setup, the summary table
// (median and range over repetitions) and a short table per repetition.
func (r Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	l := r.Load
	fmt.Fprintf(&b, "# Bench report: %s\n\n", r.Name)
	fmt.Fprintf(&b, "- target: `%s` (remote write %s)\n", r.Target, l.Protocol)
	fmt.Fprintf(&b, "- started: %s, host %s/%s with %d CPUs\n", r.Started.Format(time.RFC3339), r.Host.GOOS, r.Host.GOARCH, r.Host.CPUs)
	series := 0
	if len(r.Runs) > 0 {
		series = r.Runs[0].Load.Series
	}
	fmt.Fprintf(&b, "- load: %d active series (mix dcgm %.2g / vllm %.2g / ebpf %.2g), %d extra labels of %d chars, churn %g%% per %s\n",
		series, l.Mix.DCGM, l.Mix.VLLM, l.Mix.EBPF, l.ExtraLabels, l.LabelValueLength, l.ChurnPercent, l.ChurnInterval)
	switch {
	case l.Paced():
		fmt.Fprintf(&b, "- paced: every series sends one sample every %s in real time, as a fleet of exporters does (%d samples/s in all)\n",
			l.Interval, int(math.Round(float64(series)/l.Interval.Seconds())))
	case l.Timestamps == TimestampsInterval:
		fmt.Fprintf(&b, "- timestamps %s apart from %s before the start, sent as fast as the target accepts\n", l.Interval, l.Backfill)
	default:
		b.WriteString("- timestamps from the real clock, rounds sent as fast as the target accepts (capacity)\n")
	}
	fmt.Fprintf(&b, "- sender: batch %d samples, concurrency %d; each run bounded by %s and %d requests\n",
		l.BatchSize, l.Concurrency, l.Duration, l.MaxRequests)
	fmt.Fprintf(&b, "- repetitions: %d (figures are the median, with min and max)\n", r.Repeats)
	if len(r.DashboardWith) > 0 {
		fmt.Fprintf(&b, "- dashboard: measured once after the last repetition, interleaved with %s (each panel execution on every target in turn)\n", strings.Join(r.DashboardWith, ", "))
	}
	b.WriteString("\n")

	b.WriteString("## Summary\n\n| figure | median | min | max | n |\n|---|---:|---:|---:|---:|\n")
	for _, rw := range r.Summary.rows() {
		if rw.fig.N == 0 {
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d |\n", rw.name, formatValue(rw.fig.Median, rw.unit),
			formatValue(rw.fig.Min, rw.unit), formatValue(rw.fig.Max, rw.unit), rw.fig.N)
	}
	b.WriteString("\n## Runs\n\n| run | stopped by | elapsed | accepted | refused | dropped | 2xx | 4xx | 429 | 5xx | net err | retries | samples/s | paced |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, rr := range r.Runs {
		x := rr.Load
		fmt.Fprintf(&b, "| %d | %s | %.1fs | %d | %d | %d | %d | %d | %d | %d | %d | %d | %s | %.1fs |\n",
			i+1, x.StoppedBy, x.ElapsedSeconds, x.SamplesAccepted, x.SamplesRefused, x.SamplesDropped,
			x.Status2xx, x.Status4xx, x.Status429, x.Status5xx, x.NetworkErrors, x.Retries,
			formatValue(x.AcceptedSamplesPerSecond, ""), x.PacedSeconds)
	}
	if hasServer(r.Runs) {
		b.WriteString("\n## Server per run\n\n| run | CPU-s | cores | RSS start | RSS steady | RSS peak | RSS end | steady per series |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, rr := range r.Runs {
			if sv := rr.Server; sv != nil {
				fmt.Fprintf(&b, "| %d | %.1f | %.2f | %s | %s | %s | %s | %s |\n", i+1, sv.CPUSeconds, sv.CPUCores,
					formatValue(float64(sv.RSSStartBytes), "B"), formatValue(sv.SteadyRSSBytes, "B"),
					formatValue(float64(sv.PeakRSSBytes), "B"), formatValue(float64(sv.RSSEndBytes), "B"),
					formatValue(sv.SteadyRSSPerActiveSeriesBytes, "B"))
			}
		}
	}
	var notes []string
	for i, rr := range r.Runs {
		for _, e := range rr.Load.Errors {
			notes = append(notes, fmt.Sprintf("run %d: %s", i+1, e))
		}
		for _, e := range rr.QueryErrors {
			notes = append(notes, fmt.Sprintf("run %d query: %s", i+1, e))
		}
		var empty []string
		for _, q := range rr.Queries {
			if q.Empty > 0 {
				empty = append(empty, fmt.Sprintf("%d of %d at %s", q.Empty, q.Executions-q.Errors, q.Range))
			}
		}
		if len(empty) > 0 {
			notes = append(notes, fmt.Sprintf("run %d: successful panels that returned no series: %s", i+1, strings.Join(empty, ", ")))
		}
		if !l.Paced() && rr.Load.PacedSeconds > rr.Load.ElapsedSeconds*float64(l.Concurrency)/2 {
			notes = append(notes, fmt.Sprintf("run %d: senders waited for the real clock for most of the run, so its throughput is the load's schedule, not the target's capacity (raise series or backfill)", i+1))
		}
		if lag := rr.Load.MaxScheduleLagSeconds; l.Paced() && lag > max(1, 2*l.Interval.Seconds()) {
			notes = append(notes, fmt.Sprintf("run %d: the load fell up to %.1fs behind its schedule: the target (or the generator, on a busy machine) did not keep up, so fewer samples than the schedule's were sent", i+1, lag))
		}
	}
	if len(notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", strings.ReplaceAll(n, "\n", " "))
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write markdown report: %w", err)
	}
	return nil
}

func hasServer(runs []RunResult) bool {
	for _, rr := range runs {
		if rr.Server != nil {
			return true
		}
	}
	return false
}

// samplesHeld is what the target held when the last repetition's dashboard
// ran: every sample it accepted over the runs.
func samplesHeld(r Report) int64 {
	var n int64
	for _, rr := range r.Runs {
		n += rr.Load.SamplesAccepted
	}
	return n
}

// heldTolerance is how far apart (as a ratio) the samples two targets held
// may be for their dashboard latencies to be compared.
const heldTolerance = 1.1

// dashboardRow reports whether a row is a dashboard figure (latency, CPU per query).
func dashboardRow(name string) bool { return strings.HasPrefix(name, "dashboard ") }

// Compare renders a markdown table of the last report against each one
// before it (the baselines, e.g. Prometheus and VictoriaMetrics, then
// Strata): every report's medians, then per baseline the ratio
// last/baseline marked better, worse or same (within 5%) by the figure's
// direction. A figure the last report did not measure has no row; a
// baseline that did not measure it shows "-".
//
// A query's cost grows with the samples in its range, so dashboard
// latencies are only compared between targets that held the same data: when
// the samples they accepted differ by more than 10% (an unpaced load, where
// the faster receiver gets more samples per series per second), the
// verdict says "not comparable" and by how much the data differed.
func Compare(reports ...Report) string {
	if len(reports) < 2 {
		return ""
	}
	subject, bases := reports[len(reports)-1], reports[:len(reports)-1]
	name := func(i int) string { return cell(reports[i].Name, string(rune('a'+i))) }
	var sb strings.Builder
	sb.WriteString("| figure |")
	for i := range reports {
		fmt.Fprintf(&sb, " %s |", name(i))
	}
	for i := range bases {
		fmt.Fprintf(&sb, " %s / %s | |", name(len(reports)-1), name(i))
	}
	sb.WriteString("\n|---|" + strings.Repeat("---:|", len(reports)) + strings.Repeat("---:|---|", len(bases)) + "\n")
	byName := make([]map[string]row, len(bases))
	for i, b := range bases {
		byName[i] = map[string]row{}
		for _, r := range b.Summary.rows() {
			byName[i][r.name] = r
		}
	}
	for _, rs := range subject.Summary.rows() {
		if rs.fig.N == 0 {
			continue
		}
		var vals, ratios strings.Builder
		measured := false
		for i := range bases {
			rb, ok := byName[i][rs.name]
			if !ok || rb.fig.N == 0 {
				vals.WriteString(" - |")
				ratios.WriteString(" - | |")
				continue
			}
			measured = true
			fmt.Fprintf(&vals, " %s |", formatValue(rb.fig.Median, rb.unit))
			ratio, verdict := "n/a", ""
			if rb.fig.Median != 0 {
				q := rs.fig.Median / rb.fig.Median
				ratio = fmt.Sprintf("%.2fx", q)
				held := heldRatio(subject, bases[i])
				switch {
				case dashboardRow(rs.name) && (held > heldTolerance || held < 1/heldTolerance):
					verdict = fmt.Sprintf("not comparable: %s held %.2fx the samples", name(len(reports)-1), held)
				case math.Abs(q-1) < 0.05:
					verdict = "same"
				case (q > 1) == rs.higherBetter:
					verdict = "better"
				default:
					verdict = "worse"
				}
			}
			fmt.Fprintf(&ratios, " %s | %s |", ratio, verdict)
		}
		if !measured {
			continue
		}
		fmt.Fprintf(&sb, "| %s |%s %s |%s\n", rs.name, vals.String(), formatValue(rs.fig.Median, rs.unit), ratios.String())
	}
	return sb.String()
}

// heldRatio is the samples a held over those b held; 1 when either is
// unknown (reports without runs).
func heldRatio(a, b Report) float64 {
	na, nb := samplesHeld(a), samplesHeld(b)
	if na <= 0 || nb <= 0 {
		return 1
	}
	return float64(na) / float64(nb)
}

func cell(name, def string) string {
	if name == "" {
		return def
	}
	return strings.ReplaceAll(name, "|", "/")
}

// formatValue prints a figure with a unit prefix readable at a glance.
func formatValue(v float64, unit string) string {
	switch unit {
	case "B":
		switch a := math.Abs(v); {
		case a >= 1<<30:
			return fmt.Sprintf("%.2f GiB", v/(1<<30))
		case a >= 1<<20:
			return fmt.Sprintf("%.1f MiB", v/(1<<20))
		case a >= 1<<10:
			return fmt.Sprintf("%.1f KiB", v/(1<<10))
		default:
			return fmt.Sprintf("%.2f B", v)
		}
	case "s":
		switch a := math.Abs(v); {
		case a == 0:
			return "0 s"
		case a < 1e-3:
			return fmt.Sprintf("%.0f µs", v*1e6)
		case a < 1:
			return fmt.Sprintf("%.1f ms", v*1e3)
		default:
			return fmt.Sprintf("%.2f s", v)
		}
	default:
		switch a := math.Abs(v); {
		case a >= 1e4:
			return fmt.Sprintf("%.0f", v)
		case a >= 1:
			return fmt.Sprintf("%.2f", v)
		default:
			return fmt.Sprintf("%.4f", v)
		}
	}
}

// Report file names written by WriteFiles.
const (
	JSONReportFile     = "report.json"
	MarkdownReportFile = "report.md"
)

// WriteFiles writes the JSON report, the markdown report and the PNG charts
// into dir (created if missing) and returns the paths written.
func (r Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create report dir: %w", err)
	}
	jsonPath := filepath.Join(dir, JSONReportFile)
	if err := r.SaveJSON(jsonPath); err != nil {
		return nil, err
	}
	mdPath := filepath.Join(dir, MarkdownReportFile)
	if err := atomicfile.Write(mdPath, r.WriteMarkdown); err != nil {
		return nil, err
	}
	charts, err := r.WriteCharts(dir)
	if err != nil {
		return nil, err
	}
	return append([]string{jsonPath, mdPath}, charts...), nil
}
