package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/diagnose/archive"
)

// Options configure a benchmark run.
type Options struct {
	// Splits to run, in order (SplitTuning, SplitHeldout). When both run,
	// the held-out split's diagnoses are also reranked by the tuning
	// split's archive after simulated operator feedback (Report.Feedback).
	Splits []string
	// Short runs each split's short (CI) scenarios.
	Short bool
	// DataDir holds the generated data directories (one per scenario);
	// empty uses a temporary directory removed at the end. A given DataDir
	// is kept.
	DataDir string
	// Reuse opens a scenario's data directory under DataDir as it is when a
	// finished generation of the same scenario is there (only the replay
	// and the scoring run again: the loop of someone tuning the rules).
	Reuse bool
	// MaxHistory, when positive, shortens every scenario's history to at
	// most this (a quick run; the report says so). Zero keeps the splits'.
	MaxHistory time.Duration
	// PriorArchive is the case archive of an earlier tuning run (its
	// data directory's diagnoses.db, with the simulated verdicts): the
	// held-out split is reranked by it as when both splits run at once.
	PriorArchive string
	// Engine is the diagnosis engine's configuration (zero:
	// diagnose.DefaultConfig()).
	Engine *diagnose.Config
	// CompareStatic replays every scenario's fault-free history a second
	// time with static thresholds in place of the baselines
	// (diagnose.baseline.mode: static) and reports its false diagnoses per
	// fault-free day beside the seasonal ones. Only with a seasonal Engine.
	CompareStatic bool
	Logger        *slog.Logger
}

// Report is the outcome of a benchmark run: markdown, JSON and PNG
// (WriteFiles).
type Report struct {
	SchemaVersion int       `json:"schema_version"`
	Started       time.Time `json:"started"`
	Short         bool      `json:"short"`
	Host          HostInfo  `json:"host"`
	Thresholds    string    `json:"thresholds"`
	// MaxHistory is the shortened history of a quick run ("" for the
	// splits' own).
	MaxHistory string        `json:"max_history,omitempty"`
	Splits     []SplitReport `json:"splits"`
	// Feedback is the held-out split's accuracy before and after the
	// archive's rerank with the tuning split's verdicts (both splits run).
	Feedback *FeedbackReport `json:"feedback,omitempty"`
	Wall     float64         `json:"wall_seconds"`
	CPU      float64         `json:"cpu_seconds"`
}

// ReportSchemaVersion is the version of the JSON report.
const ReportSchemaVersion = 1

// HostInfo is the machine the benchmark ran on.
type HostInfo struct {
	GOOS   string `json:"goos"`
	GOARCH string `json:"goarch"`
	CPUs   int    `json:"cpus"`
}

// SplitReport is one split's scores.
type SplitReport struct {
	Name        string            `json:"name"`
	Purpose     string            `json:"purpose"`
	Scenarios   []ScenarioReport  `json:"scenarios"`
	Scores      Scores            `json:"scores"`
	PerKind     map[string]Scores `json:"per_kind"`
	PerVariant  map[string]Scores `json:"per_variant,omitempty"`
	Concurrent  Scores            `json:"concurrent"`
	Reliability []Bucket          `json:"reliability"`
	// Calibration is the confidence map the split's diagnoses call for
	// (nil with too few of them).
	Calibration *CalibrationFit  `json:"calibration_fit,omitempty"`
	Confusion   Confusion        `json:"confusion"`
	Faults      []FaultOutcome   `json:"faults"`
	False       []FalseDiagnosis `json:"false_diagnoses"`
}

// ScenarioReport is one scenario's size and where its time went.
type ScenarioReport struct {
	Name      string  `json:"name"`
	Nodes     int     `json:"nodes"`
	GPUs      int     `json:"gpus"`
	Days      float64 `json:"history_days"`
	PeriodH   float64 `json:"incident_period_hours"`
	Incidents int     `json:"incidents"`
	// Reused is true when the data directory of an earlier run was reused
	// (Options.Reuse): the generation times are then zero.
	Reused    bool  `json:"reused,omitempty"`
	Decoys    int   `json:"decoys"`
	Samples   int64 `json:"samples"`
	Diagnoses int   `json:"diagnoses"`
	// Seconds: the simulator's own time and the rollup/partition writing
	// (concurrent, so their sum exceeds Generate), the generation's wall
	// time, the replay, and the archive and scoring.
	SimSeconds      float64 `json:"sim_seconds"`
	WriteSeconds    float64 `json:"write_seconds"`
	GenerateSeconds float64 `json:"generate_seconds"`
	ReplaySeconds   float64 `json:"replay_seconds"`
	ScoreSeconds    float64 `json:"score_seconds"`
	CPUSeconds      float64 `json:"cpu_seconds"`
	// StaticFalseHistory counts the diagnoses a replay of the fault-free
	// history with static thresholds makes (Options.CompareStatic; -1 when
	// not run).
	StaticFalseHistory int `json:"static_false_history"`
}

// FeedbackReport compares the held-out split's top-1 cause accuracy
// without and with the tuning split's archive.
type FeedbackReport struct {
	TuningCases   int     `json:"tuning_cases"`
	Verdicts      int     `json:"verdicts"`
	Faults        int     `json:"faults"`
	Before        float64 `json:"top1_before"`
	After         float64 `json:"top1_after"`
	Changed       int     `json:"changed"`
	Fixed, Broken int     `json:"-"`
}

// Run runs the splits and scores them.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	cfg := diagnose.DefaultConfig()
	if o.Engine != nil {
		cfg = *o.Engine
	}
	dir := o.DataDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "strata-diagnose-bench-")
		if err != nil {
			return nil, err
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		dir = tmp
	}
	r := &Report{
		SchemaVersion: ReportSchemaVersion, Started: time.Now().UTC(), Short: o.Short,
		Host: HostInfo{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU()},
	}
	r.Thresholds = "the default pack with diagnose.baseline.mode " + cfg.Baseline.Mode
	compareStatic := o.CompareStatic && cfg.Baseline.Mode == diagnose.BaselineSeasonal
	start, cpu0 := time.Now(), cpuSeconds()
	var prior *archive.Archive
	if o.PriorArchive != "" {
		var err error
		if prior, err = archive.Open(o.PriorArchive, archive.Config{}, archive.Options{ReadOnly: true, Logger: o.Logger}); err != nil {
			return nil, fmt.Errorf("prior archive: %w", err)
		}
	}
	for _, name := range o.Splits {
		s, err := LoadSplit(name)
		if err != nil {
			return nil, err
		}
		scs := slices.Clone(s.Scenarios)
		if o.Short {
			scs = slices.Clone(s.Short)
		}
		if o.MaxHistory > 0 {
			r.MaxHistory = o.MaxHistory.String()
			for i := range scs {
				if scs[i].History.D() > o.MaxHistory {
					scs[i] = scs[i].withHistory(o.MaxHistory)
				}
			}
		}
		sr := SplitReport{Name: s.Name, Purpose: s.Purpose}
		var all []judged
		var arcs []*archive.Archive
		for _, sc := range scs {
			o.Logger.Info("scenario", "split", s.Name, "scenario", sc.Name)
			rep, outs, falses, js, arc, err := runScenario(ctx, cfg, sc, filepath.Join(dir, s.Name, sc.Name), o.Reuse && o.DataDir != "", prior, compareStatic, o.Logger)
			if err != nil {
				return nil, errors.Join(err, closeAll(arcs))
			}
			arcs = append(arcs, arc)
			sr.Scenarios = append(sr.Scenarios, rep)
			sr.Faults = append(sr.Faults, outs...)
			sr.False = append(sr.False, falses...)
			all = append(all, js...)
		}
		sr.finish(all, scs)
		if prior != nil && name == SplitHeldout {
			r.Feedback = feedbackReport(prior, sr.Faults)
		}
		if err := closeAll([]*archive.Archive{prior}); err != nil {
			return nil, errors.Join(err, closeAll(arcs))
		}
		prior = nil
		if name == SplitTuning && len(arcs) > 0 {
			// The tuning split's first scenario's archive, with the
			// simulated operator's verdicts, answers the next split.
			prior, arcs = arcs[0], arcs[1:]
		}
		if err := closeAll(arcs); err != nil {
			return nil, err
		}
		r.Splits = append(r.Splits, sr)
	}
	if err := closeAll([]*archive.Archive{prior}); err != nil {
		return nil, err
	}
	r.Wall, r.CPU = time.Since(start).Seconds(), cpuSeconds()-cpu0
	return r, nil
}

func closeAll(as []*archive.Archive) error {
	var errs []error
	for _, a := range as {
		if a != nil {
			errs = append(errs, a.Close())
		}
	}
	return errors.Join(errs...)
}

// recorder is the Archive the replay reports to: the scenario's own case
// archive, plus the first minute each diagnosis was reported. Similar
// cases come from prior (another split's archive) when given.
type recorder struct {
	arc   *archive.Archive
	prior *archive.Archive
	mu    sync.Mutex
	fired map[string]time.Time
}

func (r *recorder) Record(d diagnose.Diagnosis, fp diagnose.Fingerprint) {
	r.mu.Lock()
	if _, ok := r.fired[d.ID]; !ok {
		r.fired[d.ID] = d.Updated
	}
	r.mu.Unlock()
	r.arc.Record(d, fp)
}

func (r *recorder) Similar(fp diagnose.Fingerprint, k int) []diagnose.SimilarCase {
	if r.prior != nil {
		return r.prior.Similar(fp, k)
	}
	return r.arc.Similar(fp, k)
}

func runScenario(ctx context.Context, cfg diagnose.Config, sc Scenario, dir string, reuse bool, prior *archive.Archive, compareStatic bool, logger *slog.Logger) (ScenarioReport, []FaultOutcome, []FalseDiagnosis, []judged, *archive.Archive, error) {
	rep := ScenarioReport{
		Name: sc.Name, Nodes: sc.Cluster.Nodes, GPUs: sc.Cluster.Nodes * sc.Cluster.GPUsPerNode,
		Days: sc.History.D().Hours() / 24, PeriodH: sc.Period.D().Hours(), StaticFalseHistory: -1,
	}
	for _, in := range sc.Incidents {
		if isDecoy(in.Kind) {
			rep.Decoys++
		} else {
			rep.Incidents++
		}
	}
	cpu0 := cpuSeconds()
	g, reused, err := generate(ctx, sc, dir, reuse, logger)
	if err != nil {
		return rep, nil, nil, nil, nil, err
	}
	defer func() { _ = g.Close() }()
	rep.Reused = reused
	rep.Samples, rep.SimSeconds, rep.WriteSeconds, rep.GenerateSeconds = g.Samples, g.SimTime.Seconds(), g.WriteTime.Seconds(), g.Wall.Seconds()
	for _, f := range []string{archive.FileName, archive.FileName + "-wal", archive.FileName + "-shm"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return rep, nil, nil, nil, nil, err
		}
	}
	arc, err := archive.Open(filepath.Join(dir, archive.FileName), archive.Config{}, archive.Options{Now: sc.End, Logger: logger})
	if err != nil {
		return rep, nil, nil, nil, nil, err
	}
	rec := &recorder{arc: arc, prior: prior, fired: map[string]time.Time{}}
	t0 := time.Now()
	from := sc.Cluster.Start.Add(time.Hour) // the first hour is the replay's warm-up
	ds, err := diagnose.Replay(ctx, cfg, diagnose.Options{Minute: g.Minute, Archive: rec, Logger: logger}, from, sc.End())
	if err != nil {
		return rep, nil, nil, nil, nil, errors.Join(fmt.Errorf("replay scenario %s: %w", sc.Name, err), arc.Close())
	}
	rep.ReplaySeconds = time.Since(t0).Seconds()
	rep.Diagnoses = len(ds)
	if compareStatic && from.Before(sc.Start()) {
		// The same fault-free history with static thresholds: every
		// diagnosis starting in it is false.
		scfg := cfg
		scfg.Baseline.Mode = diagnose.BaselineStatic
		sds, err := diagnose.Replay(ctx, scfg, diagnose.Options{Minute: g.Minute, Logger: logger}, from, sc.Start())
		if err != nil {
			return rep, nil, nil, nil, nil, errors.Join(fmt.Errorf("static replay of scenario %s: %w", sc.Name, err), arc.Close())
		}
		rep.StaticFalseHistory = 0
		for _, d := range sds {
			rep.StaticFalseHistory += b2i(d.Start.Before(sc.Start()))
		}
	}

	t1 := time.Now()
	variants := make([]string, len(g.Truth))
	for i, f := range g.Truth {
		for _, in := range sc.Incidents {
			if in.Kind == f.Kind && sc.Start().Add(in.At.D()).Equal(f.Start) {
				variants[i] = in.Variant
			}
		}
	}
	outs, falses, js := scoreScenario(scenarioInput{sc: sc, truth: g.Truth, diagnoses: ds, fired: rec.fired, variants: variants})
	if err := operatorVerdicts(ctx, arc, outs, falses); err != nil {
		return rep, nil, nil, nil, nil, errors.Join(err, arc.Close())
	}
	byID := map[string]diagnose.Diagnosis{}
	for _, d := range ds {
		byID[d.ID] = d
	}
	for i := range outs {
		o := &outs[i]
		if o.Diagnosis == "" {
			continue
		}
		// The nearest archived case: leave-one-out in the scenario's own
		// archive, or the nearest case of the prior split's archive.
		var near []diagnose.SimilarCase
		if prior != nil {
			c, err := arc.Get(ctx, o.Diagnosis)
			if err != nil {
				return rep, nil, nil, nil, nil, errors.Join(err, arc.Close())
			}
			near = prior.Similar(c.Fingerprint, 1)
		} else if near, err = arc.Nearest(o.Diagnosis, 1); err != nil {
			return rep, nil, nil, nil, nil, errors.Join(err, arc.Close())
		}
		if len(near) == 1 {
			o.Nearest = near[0].Cause
			if near[0].Verdict == archive.VerdictRejected {
				o.Nearest = "none"
			}
		}
		if prior != nil {
			o.Reranked = archive.Rerank(byID[o.Diagnosis]).Cause
		}
	}
	rep.ScoreSeconds = time.Since(t1).Seconds()
	rep.CPUSeconds = cpuSeconds() - cpu0
	return rep, outs, falses, js, arc, nil
}

// operatorVerdicts simulates an operator who knows the ground truth: each
// fault's primary diagnosis is confirmed when its cause is right and
// relabelled to the right cause otherwise; false diagnoses are rejected.
func operatorVerdicts(ctx context.Context, arc *archive.Archive, outs []FaultOutcome, falses []FalseDiagnosis) error {
	done := map[string]bool{}
	for _, o := range outs {
		if o.Diagnosis == "" || done[o.Diagnosis] {
			continue
		}
		done[o.Diagnosis] = true
		v := archive.Verdict{Verdict: archive.VerdictConfirmed, At: o.End, Note: "benchmark: ground truth"}
		if !o.CauseTop1 {
			v.Verdict, v.Cause = archive.VerdictRelabelled, o.Kind
		}
		if _, err := arc.Feedback(ctx, o.Diagnosis, v); err != nil {
			return err
		}
	}
	for _, f := range falses {
		if _, err := arc.Feedback(ctx, f.ID, archive.Verdict{Verdict: archive.VerdictRejected, At: f.Start, Note: "benchmark: no fault"}); err != nil {
			return err
		}
	}
	return nil
}

func feedbackReport(prior *archive.Archive, outs []FaultOutcome) *FeedbackReport {
	fr := &FeedbackReport{TuningCases: prior.Len(), Faults: len(outs)}
	before, after := 0, 0
	for _, o := range outs {
		b := o.CauseTop1
		a := b
		if o.Reranked != "" {
			a = o.Reranked == o.Kind
		}
		before += b2i(b)
		after += b2i(a)
		if a != b {
			fr.Changed++
		}
	}
	fr.Before, fr.After = ratio(before, len(outs)), ratio(after, len(outs))
	return fr
}

// finish computes the split's summaries.
func (sr *SplitReport) finish(all []judged, scs []Scenario) {
	sr.Scores = summarize(sr.Faults)
	sr.PerKind = map[string]Scores{}
	sr.PerVariant = map[string]Scores{}
	byKind, byVariant := map[string][]FaultOutcome{}, map[string][]FaultOutcome{}
	var conc []FaultOutcome
	for _, o := range sr.Faults {
		byKind[o.Kind] = append(byKind[o.Kind], o)
		if o.Variant != "" {
			byVariant[o.Variant] = append(byVariant[o.Variant], o)
		}
		if o.Concurrent {
			conc = append(conc, o)
		}
	}
	for k, os := range byKind {
		sr.PerKind[k] = summarize(os)
	}
	for k, os := range byVariant {
		sr.PerVariant[k] = summarize(os)
	}
	sr.Concurrent = summarize(conc)
	s := &sr.Scores
	s.Diagnoses = len(all)
	for _, j := range all {
		s.UnknownDiags += b2i(j.d.Cause == diagnose.CauseUnknown)
	}
	s.UnknownDiagsRate = ratio(s.UnknownDiags, s.Diagnoses)
	for _, sc := range scs {
		s.HistoryDays += (sc.History.D() - time.Hour).Hours() / 24
		for _, in := range sc.Incidents {
			s.Decoys += b2i(isDecoy(in.Kind))
		}
	}
	for _, f := range sr.False {
		switch f.Where {
		case "history":
			s.FalseHistory++
		case "decoy":
			s.FalseDecoy++
		default:
			s.FalseIncident++
		}
	}
	if s.HistoryDays > 0 {
		s.FalsePerDay = float64(s.FalseHistory) / s.HistoryDays
	}
	s.StaticFalseHistory = -1
	for _, sc := range sr.Scenarios {
		if sc.StaticFalseHistory >= 0 {
			s.StaticFalseHistory = max(s.StaticFalseHistory, 0) + sc.StaticFalseHistory
		}
	}
	if s.StaticFalseHistory >= 0 && s.HistoryDays > 0 {
		s.StaticFalsePerDay = float64(s.StaticFalseHistory) / s.HistoryDays
	}
	sr.Reliability, s.ECE = reliability(all)
	sr.Calibration = calibrationFit(all)
	sr.Confusion = confusion(sr.Faults)
}

// cpuSeconds is the process' user+system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
}
