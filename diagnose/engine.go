package diagnose

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge/rulegen"
	"github.com/strata-dev/strata/internal/rulestale"
	"github.com/strata-dev/strata/query"
	"github.com/strata-dev/strata/tiers"
)

const minute = time.Minute

// Names of the series the engine writes (besides its recording rules).
const (
	// DiagnosisSeries is written back once a minute per open diagnosis; its
	// value is the confidence.
	DiagnosisSeries = "strata_diagnosis"
)

// MaxHeld is how many diagnoses an engine keeps for its API; beyond it the
// oldest resolved ones are forgotten.
const MaxHeld = 10_000

// Options wires an Engine to its data and its consumers.
type Options struct {
	// Minute is the minute tier (required).
	Minute *tiers.Rollup
	// Open is the rollup pipeline's not yet flushed minute windows (live
	// mode); nil reads flushed partitions only.
	Open tiers.OpenWindowSource
	// Signals configures the canonical expressions (joins, extra network
	// histograms); its interval and rate window are the engine's own.
	// Zero value: DefaultSignals().
	Signals rulegen.Config
	// WriteBack, when set (live mode), receives the ALERTS, ALERTS_FOR_STATE
	// and strata_diagnosis series, timestamped T+WriteBackDelay (see
	// docs/diagnosis.md, "Write-back").
	WriteBack      storage.AppendableV2
	WriteBackDelay time.Duration
	// Baselines, when set (live mode), receives the baseline series instead
	// of WriteBack, at the same times: the rollup pipeline's direct series
	// (downsample.Pipeline.Direct), which reach the minute tier without the
	// raw head (docs/diagnosis.md, "Baseline series").
	Baselines storage.AppendableV2
	// Labels, when set (live mode: the raw tier), holds series whose label
	// sets the engine's recorded series take when they have the same
	// labels, through its appenders' storage.GetRef: the signals group
	// records again what the canonical rules record there, and a copy of
	// each tracked signal's labels was about 300 bytes a tracked series
	// (rulestale.Tracker.ShareLabels). The series its minute snapshots
	// read from the minute tier's files take them too
	// (tiers.WithSharedLabels). Nothing is appended to it.
	Labels storage.AppendableV2
	// Archive is told about every diagnosis (nil: NopArchive).
	Archive Archive
	// Sinks are told after every evaluated minute (Alertmanager, webhooks).
	Sinks []Sink
	// ExternalURL is used in alert templates ($externalURL).
	ExternalURL *url.URL
	// LookbackDelta of the PromQL engine (default 5m).
	LookbackDelta time.Duration
	// Pace spreads a live minute's work (see pacer): the share of wall
	// time its evaluation may take, in (0, 1]; 0 is DefaultPace, 1 does
	// not pace. Replay and the warm-up never wait.
	Pace float64
	// ScratchDir holds the baselines' hourly summaries in a scratch file
	// (unlinked when opened; see pageArena) instead of the heap; empty is
	// the temporary directory. Live mode gives the storage directory.
	ScratchDir string
	// BaselineDir holds the baselines' hourly checkpoints, from which a
	// start restores the tracker instead of reading its whole history back
	// (checkpoint.go; docs/format/baseline-checkpoint.md). Empty: none.
	// Live mode gives <storage>/baselines, and `strata diagnose` the same,
	// read-only.
	BaselineDir string
	// BaselineReadOnly restores from BaselineDir but writes nothing there
	// (replay beside a running server).
	BaselineReadOnly bool
	Logger           *slog.Logger
	Registerer       prometheus.Registerer
}

// Update is what a Sink receives after each evaluated minute.
type Update struct {
	// T is the minute evaluated.
	T time.Time
	// WarmingUp is true for the minutes a start replays before the first
	// live one: sinks should not notify from them.
	WarmingUp bool
	// Open are the diagnoses firing after T; Changed those that opened,
	// changed or resolved at T (copies, the sink may keep them).
	Open, Changed []Diagnosis
}

// Sink consumes diagnoses (Alertmanager, webhooks). Update is called from
// the evaluation goroutine and must not block: queue the work.
type Sink interface {
	Update(u Update)
}

// Engine evaluates the diagnosis rules minute by minute and keeps the
// diagnoses. Evaluation (EvalMinute, Run) is single-goroutine; the reading
// methods (Diagnoses, Diagnosis, RuleGroups) are safe for concurrent use.
type Engine struct {
	cfg    Config
	o      Options
	logger *slog.Logger
	promql *promql.Engine
	groups []*rules.Group
	forms  *rulegen.InternalForms // the signals group's internal forms
	pinned *query.PinnedExprs     // the engine's parser; every rule's query is pinned
	// snapSeries is how many series the last snapshot held (live, the
	// snapshot itself is dropped after each minute).
	snapSeries int
	hidden     map[string]bool
	view       *tiers.MinuteView

	scratch  *scratch
	keep     *scratchKeep // how long the scratch store keeps each name
	need     int64        // ms of minute windows before T a minute's rules read
	warmup   time.Duration
	lookback time.Duration
	snap     *tiers.MinuteSnapshot
	// lastData is the index in groups of the last group that reads the
	// minute data (-1: none; len(groups): the assembly may read it too).
	// Live, the snapshot is dropped after it (evalMinute).
	lastData int
	ahead    *prefetched       // the next chunk, being read (replay)
	reads    *labels.Matcher   // the metric names the rules read (nil: all)
	reach    *readReach        // how far back they read each (nil: e.need)
	query    storage.Queryable // minute data + scratch, for the minute being evaluated
	chunk    time.Duration     // how far ahead a snapshot loads (replay); 0 reloads every minute
	boot     *readBack         // the baselines' read-back, kept by a failed attempt (bootstrap.go)
	inc      *incidents
	precomp  *precomputed // replay's fast path (nil: instant queries)
	// base computes the baselines (nil in static mode); it runs after
	// signalsGroup at every minute.
	base *tracker
	// beside is set while the baselines' history is read back beside live
	// evaluation (readBackToLive): the read-back owns base, and the live
	// minutes are evaluated without baselines (tracking). bg is that
	// read-back while it runs.
	beside       bool
	bg           *bgReadBack
	signalsGroup *rules.Group
	// evalGroup is rules.DefaultEvalIterationFunc with the recording rules'
	// stale-marker state kept by a rulestale.Tracker (buildGroups).
	evalGroup rules.GroupEvalIterationFunc
	// evalSignals evaluates signalsGroup as evalGroup does, its queries
	// through signalsQuery: the canonical rules' internal forms as the
	// canonical group evaluates them (rulegen.InternalForms.QueryFunc: a
	// memo of the subexpressions several rules share, aggregations of one
	// selector in fused passes), with the same results to the bit.
	evalSignals  rules.GroupEvalIterationFunc
	signalsQuery rules.QueryFunc
	// andPlans are the and-chain rules' plans, by query string (andchain.go).
	andPlans  map[string]*andPlan
	lastEval  time.Time
	evaluated bool
	pace      pacer

	mu    sync.RWMutex
	diags []Diagnosis // every diagnosis, by open order
	byID  map[string]int

	m engineMetrics
}

type engineMetrics struct {
	evaluations prometheus.Counter
	duration    prometheus.Histogram
	lag         prometheus.Gauge
	diagnoses   *prometheus.GaugeVec
	failures    prometheus.Counter
	skipped     prometheus.Counter
	beside      prometheus.Gauge
	scratchSeries,
	scratchSamples prometheus.Gauge
}

func newEngineMetrics(reg prometheus.Registerer) engineMetrics {
	f := promauto.With(reg)
	return engineMetrics{
		evaluations: f.NewCounter(prometheus.CounterOpts{Name: "strata_diagnose_evaluations_total", Help: "Minutes evaluated by the diagnosis engine (warm-up included)."}),
		duration: f.NewHistogram(prometheus.HistogramOpts{
			Name: "strata_diagnose_evaluation_duration_seconds", Help: "Time to evaluate one minute: every rule group, then the diagnosis assembly (a live minute's pacing waits left out).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8),
		}),
		lag:            f.NewGauge(prometheus.GaugeOpts{Name: "strata_diagnose_lag_seconds", Help: "How far the last evaluated minute trails the newest final minute (the rollup pipeline's mark)."}),
		diagnoses:      f.NewGaugeVec(prometheus.GaugeOpts{Name: "strata_diagnose_diagnoses", Help: "Diagnoses held, by cause and state."}, []string{"cause", "state"}),
		failures:       f.NewCounter(prometheus.CounterOpts{Name: "strata_diagnose_evaluation_failures_total", Help: "Minutes whose evaluation failed (minute data unreadable); the minute is retried."}),
		skipped:        f.NewCounter(prometheus.CounterOpts{Name: "strata_diagnose_minutes_skipped_total", Help: "Minutes not evaluated because the baselines' read-back at start outlasted 15 minutes: the engine warmed up at the live edge instead of catching up (their baselines were read back)."}),
		beside:         f.NewGauge(prometheus.GaugeOpts{Name: "strata_diagnose_baselines_reading_back", Help: "1 while the baselines' history is read back beside live evaluation (a read-back at start that outlasted 15 minutes): the minutes evaluated meanwhile have no baselines."}),
		scratchSeries:  f.NewGauge(prometheus.GaugeOpts{Name: "strata_diagnose_scratch_series", Help: "Series of the engine's own recorded series held in memory (the scratch store), after its last truncation."}),
		scratchSamples: f.NewGauge(prometheus.GaugeOpts{Name: "strata_diagnose_scratch_samples", Help: "Samples the scratch store holds (16 bytes each), after its last truncation."}),
	}
}

// New loads the rules (the signals, the SLO series, the default pack unless
// disabled, the operator's files) and returns an engine that has evaluated
// nothing yet.
func New(cfg Config, o Options) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Minute == nil {
		return nil, errors.New("diagnosis engine needs the minute tier")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.Archive == nil {
		o.Archive = NopArchive{}
	}
	if o.LookbackDelta <= 0 {
		o.LookbackDelta = 5 * time.Minute
	}
	if o.ExternalURL == nil {
		o.ExternalURL = &url.URL{}
	}
	if o.Pace <= 0 || o.Pace > 1 {
		o.Pace = DefaultPace
	}
	if o.Signals.GroupName == "" {
		o.Signals = DefaultSignals()
	}
	e := &Engine{
		cfg: cfg, o: o, logger: o.Logger.With("component", "diagnose"), scratch: newScratch(), forms: rulegen.NewInternalForms(),
		lookback: o.LookbackDelta, byID: map[string]int{}, m: newEngineMetrics(o.Registerer),
		pace: pacer{duty: o.Pace, budget: maxPaceWait},
	}
	// The engine parses through pinned: every rule's query string is
	// pinned in it once the groups are built, so a minute's evaluation
	// copies parsed trees instead of parsing each rule again (pinRules).
	e.pinned = query.NewPinnedExprs(newParser())
	e.forms.PinIn(e.pinned)
	e.promql = promql.NewEngine(promql.EngineOpts{
		Logger: e.logger, MaxSamples: 50_000_000, Timeout: 2 * time.Minute, LookbackDelta: o.LookbackDelta,
		EnableAtModifier: true, EnableNegativeOffset: true, Parser: e.pinned,
	})
	files, err := e.ruleFiles()
	if err != nil {
		return nil, err
	}
	if cfg.Baseline.Mode == BaselineSeasonal {
		arena, err := newPageArena(o.ScratchDir)
		if err != nil {
			e.logger.Warn("keeping the baselines' hourly summaries on the heap", "err", err)
		}
		arena.logger = e.logger
		e.base = newTracker(cfg.Baseline, arena)
		registerRingBytes(o.Registerer, arena)
	}
	if err := e.buildGroups(files); err != nil {
		return nil, err
	}
	if err := e.checkBaselineSignals(); err != nil {
		return nil, err
	}
	if e.base != nil && o.BaselineDir != "" {
		// A start restores a state at or before its first minute, which
		// trails the newest state by the warm-up and the write-back delay.
		keep := int((e.warmup+o.WriteBackDelay)/time.Hour) + 3
		e.base.ckpt = newCheckpointer(o.BaselineDir, e.baselineFingerprints(), keep, e.logger, o.Registerer)
		e.base.ckpt.readOnly = o.BaselineReadOnly
	}
	e.pinRules()
	e.view = tiers.NewMinuteView(o.Minute, o.Open, tiers.WithHiddenNames(e.isHidden), tiers.WithSharedLabels(o.Labels))
	e.inc = newIncidents(e)
	return e, nil
}

func (e *Engine) ruleFiles() ([]ruleFile, error) {
	sig, err := signalsYAML(e.o.Signals, time.Duration(e.cfg.RateWindow))
	if err != nil {
		return nil, err
	}
	signals, err := parseRuleFile("strata/diagnose/signals.rules.yml", sig)
	if err != nil {
		return nil, err
	}
	slo, err := parseRuleFile("strata/diagnose/slo.rules.yml", sloYAML(e.cfg.SLO))
	if err != nil {
		return nil, err
	}
	rest, err := loadRuleFiles(e.cfg)
	if err != nil {
		return nil, err
	}
	return append([]ruleFile{signals, slo}, rest...), nil
}

// buildGroups compiles the files into rules.Groups sharing one set of
// options, and derives what the data a minute needs and the warm-up.
func (e *Engine) buildGroups(files []ruleFile) error {
	// The recording rules' stale-marker state is kept by stale (a label
	// hash a series, the labels shared with the scratch store) instead of
	// by the groups (two copies of each series' labels); what the groups
	// show and write is the same (package rulestale).
	stale := rulestale.New()
	if e.o.Labels != nil {
		stale.ShareLabels(e.o.Labels)
	}
	e.evalGroup = stale.EvalIterationFunc(rules.DefaultEvalIterationFunc)
	e.evalSignals = stale.EvalIterationFunc(func(ctx context.Context, g *rules.Group, t time.Time) {
		e.forms.EvalIterationFunc(context.WithValue(ctx, signalsKey{}, true), g, t)
	})
	e.signalsQuery = e.forms.QueryFunc(e.promql, minuteQueryable{e}, e.lookback)
	opts := &rules.ManagerOptions{
		ExternalURL:  e.o.ExternalURL,
		QueryFunc:    stale.QueryFunc(e.queryFunc),
		Context:      context.Background(),
		AppendableV2: stale.Appendable(e.appendable()),
		Queryable:    e.scratch,
		Logger:       e.logger,
		Registerer:   prometheus.WrapRegistererWithPrefix("strata_diagnose_", e.o.Registerer),
		Parser:       newParser(),
		// Alerts reach Alertmanager one per diagnosis through a Sink, never
		// one per rule alert.
		NotifyFunc: func(context.Context, string, ...*rules.Alert) {},
	}
	opts.Metrics = stale.Metrics(opts.Registerer)
	e.hidden = map[string]bool{"ALERTS": true, "ALERTS_FOR_STATE": true, DiagnosisSeries: true}
	e.andPlans = map[string]*andPlan{}
	var maxRange, maxReach, maxScratch, maxHold time.Duration
	reached := map[string]time.Duration{}
	recorded := map[string]bool{}
	for _, f := range files {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					recorded[r.Record] = true
				}
			}
		}
	}
	// The baseline step writes these (static mode: nobody, and they are
	// never read from the minute data either).
	for _, n := range baselineNames {
		recorded[n] = true
	}
	p := newParser()
	var signals []string
	for _, f := range files {
		for _, g := range f.groups {
			rs := make([]rules.Rule, 0, len(g.Rules))
			for _, r := range g.Rules {
				expr, err := p.ParseExpr(r.Expr)
				if err != nil {
					return fmt.Errorf("%w: %s: group %q: %s: %w", ErrInvalidRules, f.name, g.Name, r.Alert+r.Record, err)
				}
				if g.Name == SignalsGroup {
					// The rule keeps the exported form (/api/v1/rules shows
					// it); queries run the internal form (docs/metrics.md)
					// through rulegen.RenamingQueryable.
					signals = append(signals, r.Expr)
				} else if plan := planAnd(expr); plan != nil {
					e.andPlans[expr.String()] = plan
				}
				direct, total, scratchRange := reach(expr, reached, recorded)
				maxRange, maxReach, maxScratch = max(maxRange, direct), max(maxReach, total), max(maxScratch, scratchRange)
				lbls := rules.FromMaps(g.Labels, r.Labels)
				if r.Record != "" {
					e.hidden[r.Record] = true
					reached[r.Record] = max(reached[r.Record], total)
					rs = append(rs, rules.NewRecordingRule(r.Record, expr, lbls))
					continue
				}
				maxHold = max(maxHold, time.Duration(r.For)+time.Duration(r.KeepFiringFor))
				rs = append(rs, rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
					lbls, labels.FromMap(r.Annotations), labels.EmptyLabels(), e.o.ExternalURL.String(), true, e.logger.With("alert", r.Alert)))
			}
			grp := rules.NewGroup(rules.GroupOptions{
				Name: g.Name, File: f.name, Interval: minute, Limit: g.Limit, Rules: rs, Opts: opts,
			})
			if g.Name == SignalsGroup {
				e.signalsGroup = grp
			}
			e.groups = append(e.groups, grp)
		}
	}
	if err := e.forms.Set(p, signals); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrInvalidRules, SignalsGroup, err)
	}
	e.reads = readSet(files, recorded)
	if e.reads != nil {
		e.reach = newReadReach(engineExprs(files), recorded, e.lookback)
	}
	// A minute's rules read the minute data this far back (its own series
	// come from the scratch store).
	e.need = (maxRange + e.lookback + minute).Milliseconds()
	e.warmup = time.Duration(e.cfg.Warmup)
	if e.warmup == 0 {
		// The furthest back any rule reaches through the recorded series it
		// reads, plus the longest for and keep_firing_for: at least an hour,
		// in whole 5 m.
		e.warmup = max(time.Hour, (maxHold+maxReach+5*minute-1)/(5*minute)*(5*minute))
	}
	if ret := time.Duration(e.cfg.ScratchRetention); ret < maxScratch+minute {
		return fmt.Errorf("diagnose scratch_retention %s is shorter than the longest range a rule reads of the engine's own series (%s)", ret, maxScratch)
	}
	// What the scratch store holds: the recorded names, and the series
	// the rules append besides them.
	kept := maps.Clone(recorded)
	for _, n := range []string{"ALERTS", "ALERTS_FOR_STATE", DiagnosisSeries} {
		kept[n] = true
	}
	e.keep = newScratchKeep(engineExprs(files), kept, e.lookback, time.Duration(e.cfg.ScratchRetention))
	e.lastData = e.lastDataGroup(files)
	return nil
}

// lastDataGroup is the index of the last group (in files' order, which is
// the groups') with a rule that reads the minute data: a selector whose
// name the minute view does not hide, or of no one name. It is
// len(e.groups) when an evidence query (which the assembly evaluates after
// the groups) may read it, or a template may query anything.
func (e *Engine) lastDataGroup(files []ruleFile) int {
	p := newParser()
	reads := func(q string) bool {
		expr, err := p.ParseExpr(q)
		if err != nil {
			return true
		}
		data := false
		walkSelectors(expr, func(vs *parser.VectorSelector, _ time.Duration, _ bool) {
			data = data || vs.Name == "" || !e.isHidden(vs.Name)
		})
		return data
	}
	last, i := -1, 0
	for _, f := range files {
		for _, g := range f.groups {
			for _, r := range g.Rules {
				if templateQueries(r.Labels) || templateQueries(r.Annotations) {
					return len(e.groups)
				}
				for _, ev := range parseEvidence(r.Annotations["evidence"]) {
					// Template actions stand in label values (engineExprs).
					if q := templateAction.ReplaceAllString(ev.Query, "x"); q != "" && reads(q) {
						return len(e.groups)
					}
				}
				if reads(r.Expr) {
					last = i
				}
			}
			i++
		}
	}
	return last
}

// templateQueries reports whether a template among ts may run a query.
func templateQueries(ts map[string]string) bool {
	for _, t := range ts {
		for _, a := range templateAction.FindAllString(t, -1) {
			if strings.Contains(a, "query") {
				return true
			}
		}
	}
	return false
}

// reach walks an expression's selectors: how far back each reads (range +
// offset, subqueries included), and how far back that reaches through the
// recorded series it reads (reached: each recorded name's own reach).
//
// dataRange is the furthest back it reads of the minute data (selectors of
// names no rule records); scratchRange of the engine's own series.
func reach(expr parser.Expr, reached map[string]time.Duration, recorded map[string]bool) (dataRange, total, scratchRange time.Duration) {
	walkSelectors(expr, func(vs *parser.VectorSelector, back time.Duration, _ bool) {
		total = max(total, back+reached[vs.Name])
		if recorded[vs.Name] {
			scratchRange = max(scratchRange, back)
		} else {
			dataRange = max(dataRange, back)
		}
	})
	return dataRange, total, scratchRange
}

// walkSelectors calls fn for every vector selector of n (a matrix
// selector's too) with how far back it reads: its range and offset plus
// those of the subqueries around it. pinned says a subquery around it has
// an @ modifier, which fixes its time whatever the evaluation's.
func walkSelectors(n parser.Node, fn func(vs *parser.VectorSelector, back time.Duration, pinned bool)) {
	walkSelectorNodes(n, func(vs *parser.VectorSelector, back time.Duration, pinned, _ bool) { fn(vs, back, pinned) })
}

// walkSelectorNodes is walkSelectors, telling also whether the selector is
// a matrix selector's (matrix: PromQL adds no lookback to its range).
func walkSelectorNodes(n parser.Node, fn func(vs *parser.VectorSelector, back time.Duration, pinned, matrix bool)) {
	var walk func(n parser.Node, extra time.Duration, pinned bool)
	walk = func(n parser.Node, extra time.Duration, pinned bool) {
		switch x := n.(type) {
		case *parser.MatrixSelector:
			if vs, ok := x.VectorSelector.(*parser.VectorSelector); ok {
				fn(vs, extra+x.Range+vs.OriginalOffset, pinned, true)
			}
			return
		case *parser.VectorSelector:
			fn(x, extra+x.OriginalOffset, pinned, false)
			return
		case *parser.SubqueryExpr:
			walk(x.Expr, extra+x.Range+x.OriginalOffset, pinned || x.Timestamp != nil || x.StartOrEnd != 0)
			return
		}
		for _, c := range parser.Children(n) {
			walk(c, extra, pinned)
		}
	}
	walk(n, 0, false)
}

// pinRules pins in the engine's parser the string queryFunc hands to the
// engine for each rule: the internal form of the signals group's rules,
// every other rule's expression as the rule prints it.
func (e *Engine) pinRules() {
	for _, g := range e.groups {
		for _, r := range g.Rules() {
			e.pinned.Pin(e.forms.Internal(r.Query().String()))
		}
	}
	for _, p := range e.andPlans {
		e.pinned.Pin(p.first)
	}
}

func (e *Engine) isHidden(name string) bool {
	return e.hidden[name] || strings.HasPrefix(name, "strata:baseline:") || strings.HasPrefix(name, "strata:anomaly:")
}

// Warmup is how long before the first reported minute evaluation starts.
func (e *Engine) Warmup() time.Duration { return e.warmup }

// RuleGroups returns the engine's rule groups in evaluation order (for
// /api/v1/rules and /api/v1/alerts).
func (e *Engine) RuleGroups() []*rules.Group { return slices.Clone(e.groups) }

// queryFunc evaluates an instant query at t over the minute being evaluated.
func (e *Engine) queryFunc(ctx context.Context, qs string, t time.Time) (promql.Vector, error) {
	if e.precomp != nil {
		if v, ok := e.precomp.at(qs, t); ok {
			return v, nil
		}
	}
	defer e.pace.step(ctx)
	if signals, _ := ctx.Value(signalsKey{}).(bool); signals {
		return e.signalsQuery(ctx, qs, t)
	}
	if p := e.andPlans[qs]; p != nil {
		return e.queryAnd(ctx, p, qs, t)
	}
	return rules.EngineQueryFunc(e.promql, rulegen.RenamingQueryable(e.query))(ctx, e.forms.Internal(qs), t)
}

// signalsKey marks the context of the signals group's evaluation
// (evalSignals), whose queries queryFunc runs through signalsQuery.
type signalsKey struct{}

// minuteQueryable reads what the engine's query reads when a querier is
// asked for: the minute being evaluated (signalsQuery is built once).
type minuteQueryable struct{ e *Engine }

func (m minuteQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	return m.e.query.Querier(mint, maxt)
}

// EvalMinute evaluates minute t (a multiple of one minute): every group at
// t, then the diagnoses. Minutes must be evaluated in increasing order; the
// windows of every minute up to t+1m must be final.
func (e *Engine) EvalMinute(ctx context.Context, t time.Time) error {
	return e.evalMinute(ctx, t, false)
}

func (e *Engine) evalMinute(ctx context.Context, t time.Time, warm bool) error {
	if t.Truncate(minute) != t {
		return fmt.Errorf("diagnose: evaluation time %s is not a whole minute", t.UTC().Format(time.RFC3339Nano))
	}
	if e.evaluated && !t.After(e.lastEval) {
		return fmt.Errorf("diagnose: minute %s is not after the last evaluated one (%s)", t.UTC().Format(time.RFC3339), e.lastEval.UTC().Format(time.RFC3339))
	}
	start := time.Now()
	tm := t.UnixMilli()
	e.pace.begin(!warm && e.chunk == 0 && e.newest(tm))
	defer e.pace.end()
	if b := e.tracking(); b != nil && !b.booted {
		if err := e.bootstrap(ctx, tm); err != nil {
			e.m.failures.Inc()
			return fmt.Errorf("diagnose: read back the baselines' history: %w", err)
		}
	}
	if e.snap == nil || e.chunk == 0 || func() bool { lo, hi := e.snap.Range(); return lo > tm-e.need || hi < tm }() {
		maxt := tm + e.chunk.Milliseconds() // snapshot sizes the next chunk
		snap, err := e.snapshot(ctx, tm-e.need, maxt)
		if err != nil {
			e.m.failures.Inc()
			return fmt.Errorf("diagnose: read minute windows: %w", err)
		}
		e.snap, e.snapSeries = snap, snap.Series()
		e.query = mergeQueryable{e.snap, e.scratch}
		e.pace.step(ctx)
		if e.precomp != nil {
			if err := e.precomp.compute(ctx, e, pass{items: e.items(), q: e.query, sc: e.scratch}, tm, maxt); err != nil {
				return err
			}
		}
	}
	for i, g := range e.groups {
		if e.precomp != nil && e.precomp.ready && !g.HasAlertingRules() {
			// Replay's fast path wrote this group's results for the whole
			// chunk, exactly as its evaluation would (fastpath.go).
			continue
		}
		// Group.Eval, plus the group's last-evaluation bookkeeping that
		// /api/v1/rules shows.
		if g == e.signalsGroup {
			e.evalSignals(ctx, g, t)
		} else {
			e.evalGroup(ctx, g, t)
		}
		if i == e.lastData && e.chunk == 0 {
			// Live: the baselines, the groups after this one and the
			// assembly read the scratch store alone, so that the snapshot
			// (40-70 MB at 500,000 series) is not live at the collections
			// their allocation triggers.
			e.snap, e.query = nil, e.scratch
		}
		if g == e.signalsGroup && e.tracking() != nil {
			e.baselineMinute(tm) // a no-op when the fast path did it
			e.pace.step(ctx)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Every minute, so that a series' slices never grow past its keep
	// plus a sample: truncated every 10 minutes, they grew to a capacity
	// of 16 samples for a 6-minute keep (8 now), 32 for 9 minutes (16) and
	// 256 for 2 h 6 m (128).
	e.scratch.truncateBy(func(name string) int64 { return tm - e.keep.keepFor(name) })
	if tm%(10*minute).Milliseconds() == 0 {
		n, samples := e.scratch.samples()
		e.m.scratchSeries.Set(float64(n))
		e.m.scratchSamples.Set(float64(samples))
	}
	changed := e.inc.assemble(ctx, t)
	if e.chunk == 0 {
		// Live: the next minute reads a new snapshot, so this one need not
		// stay in the heap for the minute in between (it holds every
		// series the rules read, 14 MiB at 50,000 active series).
		e.snap, e.query = nil, e.scratch
	}
	e.evaluated = true
	e.m.evaluations.Inc()
	e.m.duration.Observe((time.Since(start) - e.pace.waited).Seconds()) // the work, not the pacer's waits
	e.publish(t, warm, changed)
	return nil
}

// newest reports whether minute tm is the newest the live data has final
// (no later minute waits: the engine is not catching up).
func (e *Engine) newest(tm int64) bool {
	src, ok := e.o.Open.(interface{ Mark() (int64, bool) })
	if !ok {
		return false
	}
	mark, ok := src.Mark()
	return ok && mark < tm+2*minute.Milliseconds()
}

// DefaultPace is the share of wall time a live minute's evaluation takes
// (Options.Pace): it waits three times as long as it works.
const DefaultPace = 0.25

// maxPaceWait bounds what a minute waits in all: it ends well within the
// minute whatever its work took.
const maxPaceWait = 20 * time.Second

// pacer spreads a live minute's work over more wall time. The minute
// allocates 100-300 MB in a second or two of work (its snapshot, every
// rule's PromQL), and Go's collector counts what is allocated while it
// marks as live: a collection running during the burst sets the next
// heap goal over much of the burst, and the heap grows to it (issue 13's
// paced peak). After each step of the minute (the snapshot, each rule's
// query, the baselines) it waits (1-duty)/duty times as long as the step
// took, so the minute allocates at a duty-th of the rate and a collection
// sees that much less of it. Diagnoses come later by that wait (at most
// maxPaceWait) and are otherwise the same: rules evaluate at the minute's
// timestamp whenever they run.
type pacer struct {
	duty   float64
	budget time.Duration // the most a minute waits
	active bool
	last   time.Time
	waited time.Duration
	// wait is time.Sleep bounded by ctx; a test replaces it.
	wait func(ctx context.Context, d time.Duration)
}

// begin starts a minute (active: pace it).
func (p *pacer) begin(active bool) {
	p.active = active && p.duty > 0 && p.duty < 1
	p.last, p.waited = time.Now(), 0
}

func (p *pacer) end() { p.active = false }

// step waits after a step of the minute that began at p.last.
func (p *pacer) step(ctx context.Context) {
	if !p.active {
		return
	}
	work := time.Since(p.last)
	d := min(time.Duration(float64(work)*(1-p.duty)/p.duty), p.budget-p.waited)
	if d > 0 {
		wait := p.wait
		if wait == nil {
			wait = sleepCtx
		}
		wait(ctx, d)
		p.waited += d
	}
	p.last = time.Now()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// prefetched is a snapshot being read ahead (replay).
type prefetched struct {
	mint, maxt int64
	done       chan struct{}
	snap       *tiers.MinuteSnapshot
	err        error
}

// snapshot returns the minute data of [mint, maxt]. In replay (chunked) it
// also sizes the next chunk by the series this one holds (nextChunk) and
// starts reading it in the background, so the disk reads of one chunk
// overlap the evaluation of the previous one.
func (e *Engine) snapshot(ctx context.Context, mint, maxt int64) (*tiers.MinuteSnapshot, error) {
	var snap *tiers.MinuteSnapshot
	var err error
	if p := e.ahead; p != nil && p.mint == mint && p.maxt == maxt {
		<-p.done
		snap, err = p.snap, p.err
	} else {
		if p != nil {
			<-p.done // never leave a read running
		}
		snap, err = e.view.SnapshotFor(ctx, mint, maxt, e.reach.reads(mint+e.need), e.readMatchers()...)
	}
	e.ahead = nil
	if err != nil || e.chunk == 0 {
		return snap, err
	}
	e.chunk = e.nextChunk(snap.Series())
	c := e.chunk.Milliseconds()
	p := &prefetched{mint: maxt + minute.Milliseconds() - e.need, maxt: maxt + minute.Milliseconds() + c, done: make(chan struct{})}
	e.ahead = p
	go func() {
		defer close(p.done)
		p.snap, p.err = e.view.SnapshotFor(ctx, p.mint, p.maxt, e.reach.reads(p.mint+e.need), e.readMatchers()...)
	}()
	return snap, nil
}

func (e *Engine) readMatchers() []*labels.Matcher {
	if e.reads == nil {
		return nil
	}
	return []*labels.Matcher{e.reads}
}

// readSet returns a matcher of the metric names the rules (and their
// evidence queries) read of the minute data, so that a snapshot loads only
// those series; nil when some selector has no metric-name matcher (or an
// evidence query cannot be parsed), which needs every series.
func readSet(files []ruleFile, recorded map[string]bool) *labels.Matcher {
	exprs := engineExprs(files)
	if slices.Contains(exprs, nil) {
		return nil
	}
	return readSetExprs(exprs, recorded)
}

var templateAction = regexp.MustCompile(`\{\{[^}]*\}\}`)

// publish stores the changed diagnoses and tells the sinks.
func (e *Engine) publish(t time.Time, warm bool, changed []Diagnosis) {
	e.mu.Lock()
	e.lastEval = t
	for _, d := range changed {
		if i, ok := e.byID[d.ID]; ok {
			e.diags[i] = d
			continue
		}
		e.byID[d.ID] = len(e.diags)
		e.diags = append(e.diags, d)
	}
	for _, id := range e.inc.dropped {
		if i, ok := e.byID[id]; ok {
			e.diags = slices.Delete(e.diags, i, i+1)
			delete(e.byID, id)
			for j := i; j < len(e.diags); j++ {
				e.byID[e.diags[j].ID] = j
			}
		}
	}
	e.inc.dropped = e.inc.dropped[:0]
	if len(e.diags) > MaxHeld {
		// The oldest resolved diagnoses go first; open ones always stay.
		drop := len(e.diags) - MaxHeld
		e.diags = slices.DeleteFunc(e.diags, func(d Diagnosis) bool {
			if drop > 0 && d.State == StateResolved {
				drop--
				return true
			}
			return false
		})
		clear(e.byID)
		for i, d := range e.diags {
			e.byID[d.ID] = i
		}
	}
	var open []Diagnosis
	counts := map[[2]string]int{}
	for _, d := range e.diags {
		counts[[2]string{d.Cause, string(d.State)}]++
		if d.State == StateFiring {
			open = append(open, d)
		}
	}
	e.mu.Unlock()
	e.m.diagnoses.Reset()
	for k, n := range counts {
		e.m.diagnoses.WithLabelValues(k[0], k[1]).Set(float64(n))
	}
	if e.o.WriteBack != nil {
		e.writeDiagnoses(t, open, changed)
	}
	for _, s := range e.o.Sinks {
		s.Update(Update{T: t, WarmingUp: warm, Open: slices.Clone(open), Changed: slices.Clone(changed)})
	}
}

// Diagnoses returns copies of the diagnoses held, in opening order.
func (e *Engine) Diagnoses() []Diagnosis {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return slices.Clone(e.diags)
}

// Diagnosis returns the diagnosis with the given id.
func (e *Engine) Diagnosis(id string) (Diagnosis, bool) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	i, ok := e.byID[id]
	if !ok {
		return Diagnosis{}, false
	}
	return e.diags[i], true
}

// LastEvaluated is the last minute evaluated (zero before the first).
func (e *Engine) LastEvaluated() time.Time {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.lastEval
}

// mergeQueryable reads the minute data and the scratch store together; their
// series names are disjoint (the view hides the engine's names).
type mergeQueryable struct{ a, b storage.Queryable }

func (m mergeQueryable) Querier(mint, maxt int64) (storage.Querier, error) {
	qa, err := m.a.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	qb, err := m.b.Querier(mint, maxt)
	if err != nil {
		return nil, errors.Join(err, qa.Close())
	}
	return storage.NewMergeQuerier([]storage.Querier{qa, qb}, nil, storage.ChainedSeriesMerge), nil
}
