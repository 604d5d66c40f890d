package rulestale

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
)

// sample is a stored sample: series, timestamp, value bits (a stale
// marker's included).
type sample struct {
	series string
	t      int64
	v      uint64
}

func (s sample) String() string {
	if value.IsStaleNaN(math.Float64frombits(s.v)) {
		return fmt.Sprintf("%s@%d=stale", s.series, s.t)
	}
	return fmt.Sprintf("%s@%d=%g", s.series, s.t, math.Float64frombits(s.v))
}

// store records every committed transaction. Appends and commits fail as
// the script says, decided by what they are, never by call order.
type store struct {
	mu      sync.Mutex
	step    int
	commits [][]sample
	nCommit int // commits tried in this step
	// failAppend, failCommit: nil for none.
	failAppend func(step int, l labels.Labels, v float64) error
	failCommit func(step, n int) bool
	sawPlace   bool
	// refs, when set, makes the store resolve series references as the
	// head does: its appenders implement storage.GetRef, hand out a
	// reference per series and store a sample appended by a known
	// reference in that reference's series, whatever the labels passed.
	refs *refTable
}

// refTable is a refs store's references: series by reference (ref-1),
// references by series. forget makes every reference handed out unknown,
// as the head's garbage collection does; a series then gets a new one.
type refTable struct {
	series []string
	known  []bool
	byName map[string]storage.SeriesRef
	// byRef counts the appends whose reference was known.
	byRef int
}

func newRefTable() *refTable { return &refTable{byName: map[string]storage.SeriesRef{}} }

func (r *refTable) resolve(ref storage.SeriesRef, l labels.Labels) (string, storage.SeriesRef) {
	if ref > 0 && int(ref) <= len(r.series) && r.known[ref-1] {
		r.byRef++
		return r.series[ref-1], ref
	}
	name := l.String()
	if ref, ok := r.byName[name]; ok {
		return name, ref
	}
	r.series, r.known = append(r.series, name), append(r.known, true)
	ref = storage.SeriesRef(len(r.series))
	r.byName[name] = ref
	return name, ref
}

func (r *refTable) forget() {
	clear(r.known)
	clear(r.byName)
}

func (s *store) AppenderV2(context.Context) storage.AppenderV2 {
	if s.refs != nil {
		return &refStoreApp{storeApp{s: s}}
	}
	return &storeApp{s: s}
}

type storeApp struct {
	s   *store
	buf []sample
}

func (a *storeApp) Append(ref storage.SeriesRef, l labels.Labels, _, t int64, v float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	if v := l.Get(PlaceholderLabel); v != "" && v != "x" {
		a.s.sawPlace = true
	}
	series := l.String()
	if a.s.refs != nil {
		series, ref = a.s.refs.resolve(ref, l)
	}
	if a.s.failAppend != nil {
		if err := a.s.failAppend(a.s.step, l, v); err != nil {
			return 0, err
		}
	}
	a.buf = append(a.buf, sample{series, t, math.Float64bits(v)})
	return max(ref, 1), nil
}

// refStoreApp is a refs store's appender.
type refStoreApp struct{ storeApp }

func (a *refStoreApp) GetRef(l labels.Labels, _ uint64) (storage.SeriesRef, labels.Labels) {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return a.s.refs.byName[l.String()], l
}

func (a *storeApp) Commit() error {
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	n := a.s.nCommit
	a.s.nCommit++
	if a.s.failCommit != nil && a.s.failCommit(a.s.step, n) {
		return errors.New("commit failed (scripted)")
	}
	slices.SortFunc(a.buf, func(x, y sample) int { return strings.Compare(x.String(), y.String()) })
	a.s.commits = append(a.s.commits, a.buf)
	return nil
}

func (a *storeApp) Rollback() error { return nil }

func (s *store) setStep(step int) {
	s.mu.Lock()
	s.step, s.nCommit = step, 0
	s.mu.Unlock()
}

// chance is a fixed pseudo-random number in [0,1) for (seed, what).
func chance(seed int, what ...any) float64 {
	return float64(xxhash.Sum64String(fmt.Sprint(seed, what))>>11) / (1 << 53)
}

// script answers each rule's query at each step: a random subset of a few
// series, now and then a query error or two series that the rule's name
// makes one (a duplicate label set).
type script struct {
	seed int
}

func (sc script) query(_ context.Context, qs string, t time.Time) (promql.Vector, error) {
	step := int(t.Unix() / 60)
	if chance(sc.seed, "qerr", step, qs) < 0.06 {
		return nil, errors.New("query failed (scripted)")
	}
	var vec promql.Vector
	for i := range 12 {
		// Each series comes and goes in runs (a series present at a step
		// is likely present at the next).
		if chance(sc.seed, "on", step/3, qs, i) < 0.35 && chance(sc.seed, "off", step, qs, i) > 0.15 {
			vec = append(vec, promql.Sample{
				T:      t.UnixMilli(),
				F:      float64(i) + float64(step)/10,
				Metric: labels.FromStrings("__name__", "in_"+qs, "instance", fmt.Sprintf("i%d", i), "job", "j"),
			})
		}
	}
	if chance(sc.seed, "dup", step, qs) < 0.05 {
		vec = append(vec, promql.Sample{T: t.UnixMilli(), F: 1, Metric: labels.FromStrings("__name__", "other", "instance", "i0", "job", "j")},
			promql.Sample{T: t.UnixMilli(), F: 1, Metric: labels.FromStrings("__name__", "other2", "instance", "i0", "job", "j")})
	}
	return vec, nil
}

func mustParse(t testing.TB, s string) parser.Expr {
	t.Helper()
	e, err := parser.NewParser(parser.Options{}).ParseExpr(s)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// ruleSet builds the test group's rules: recording rules (two with the same
// name, one with labels, one whose labels carry the placeholder's name, so
// that Prometheus' own state keeps it) and an alerting rule. version 1
// drops rec:b, changes rec:c's expression and adds rec:e (a reload).
func ruleSet(t testing.TB, version int) []rules.Rule {
	rs := []rules.Rule{
		rules.NewRecordingRule("rec:a", mustParse(t, "a"), labels.EmptyLabels()),
	}
	if version == 0 {
		rs = append(rs, rules.NewRecordingRule("rec:b", mustParse(t, "b"), labels.FromStrings("team", "x")))
	}
	rs = append(rs,
		rules.NewAlertingRule("AHigh", mustParse(t, "ahigh"), 2*time.Minute, time.Minute, labels.FromStrings("severity", "page"),
			labels.FromStrings("summary", "{{ $value }}"), labels.EmptyLabels(), "", true, promslog.NewNopLogger()),
	)
	if version == 0 {
		rs = append(rs, rules.NewRecordingRule("rec:c", mustParse(t, "c"), labels.EmptyLabels()))
	} else {
		rs = append(rs, rules.NewRecordingRule("rec:c", mustParse(t, "c2"), labels.EmptyLabels()), rules.NewRecordingRule("rec:e", mustParse(t, "e"), labels.EmptyLabels()))
	}
	rs = append(rs,
		rules.NewRecordingRule("rec:a", mustParse(t, "a2"), labels.FromStrings("v", "2")),
		rules.NewRecordingRule("rec:a", mustParse(t, "a3"), labels.FromStrings("v", "2")),
		rules.NewRecordingRule("rec:f", mustParse(t, "f"), labels.FromStrings(PlaceholderLabel, "x")),
	)
	return rs
}

// side is one evaluation setup: Prometheus' own (tr nil) or with a Tracker.
type side struct {
	tr    *Tracker
	st    *store
	reg   *prometheus.Registry
	opts  *rules.ManagerOptions
	g     *rules.Group
	iter  rules.GroupEvalIterationFunc
	limit int
}

func newSide(t testing.TB, tracked bool, sc script, st *store, limit int) *side {
	s := &side{st: st, reg: prometheus.NewRegistry(), limit: limit}
	s.opts = &rules.ManagerOptions{
		QueryFunc:    sc.query,
		AppendableV2: st,
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
	}
	s.iter = rules.DefaultEvalIterationFunc
	if tracked {
		s.tr = New()
		s.opts.QueryFunc = s.tr.QueryFunc(sc.query)
		s.opts.AppendableV2 = s.tr.Appendable(st)
		s.opts.Metrics = s.tr.Metrics(s.reg)
		s.iter = s.tr.EvalIterationFunc(nil)
	} else {
		s.opts.Metrics = rules.NewGroupMetrics(s.reg)
	}
	s.g = s.newGroup(t, 0)
	return s
}

func (s *side) newGroup(t testing.TB, version int) *rules.Group {
	return rules.NewGroup(rules.GroupOptions{Name: "g", File: "f", Interval: time.Minute, Limit: s.limit, Rules: ruleSet(t, version), Opts: s.opts})
}

// state is what a user sees of a group after an evaluation.
func (s *side) state(t testing.TB) string {
	var b strings.Builder
	for _, r := range s.g.Rules() {
		fmt.Fprintf(&b, "%s %s health=%s err=%v evaluated=%v\n", r.Name(), r.Labels(), r.Health(), r.LastError(), !r.GetEvaluationTimestamp().IsZero())
		if ar, ok := r.(*rules.AlertingRule); ok {
			var lines []string
			for _, a := range ar.ActiveAlerts() {
				lines = append(lines, fmt.Sprintf("  alert %s %s active=%s firing=%s keep=%s value=%g\n", a.Labels, a.State, a.ActiveAt.UTC(), a.FiredAt.UTC(), a.KeepFiringSince.UTC(), a.Value))
			}
			slices.Sort(lines)
			b.WriteString(strings.Join(lines, ""))
		}
	}
	fmt.Fprintf(&b, "group evaluated=%v\n", !s.g.GetLastEvaluation().IsZero())
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.Contains(mf.GetName(), "duration") || strings.Contains(mf.GetName(), "timestamp") {
			continue
		}
		for _, m := range mf.GetMetric() {
			fmt.Fprintf(&b, "%s%v %s\n", mf.GetName(), labelPairs(m), metricValue(m))
		}
	}
	return b.String()
}

func labelPairs(m *dto.Metric) []string {
	var out []string
	for _, lp := range m.GetLabel() {
		out = append(out, lp.GetName()+"="+lp.GetValue())
	}
	return out
}

func metricValue(m *dto.Metric) string {
	switch {
	case m.Gauge != nil:
		return fmt.Sprint(m.GetGauge().GetValue())
	case m.Counter != nil:
		return fmt.Sprint(m.GetCounter().GetValue())
	}
	return "?"
}

// TestSameAsPrometheus evaluates the same random script of series coming
// and going, failing queries, duplicate label sets, a group limit, failing
// appends and commits and a reload (a rule removed, one changed, one added)
// with Prometheus' own rules.Group state and with a Tracker, and compares
// every committed transaction (so every stale marker, with its timestamp),
// the rules' health and errors, the alerts and the rule metrics after every
// evaluation. The Tracker's label hash is made to collide in half the runs;
// in the other half the storage resolves series references (the Tracker
// then appends by them), and forgets them every ten steps.
func TestSameAsPrometheus(t *testing.T) {
	for seed := range 16 {
		for _, collide := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed=%d/collide=%v", seed, collide), func(t *testing.T) {
				sc := script{seed: seed}
				limit := 0
				if seed%3 == 1 {
					limit = 9
				}
				mkStore := func() *store {
					return &store{
						failAppend: func(step int, l labels.Labels, v float64) error {
							if n := l.Get("__name__"); n == "ALERTS" || n == "ALERTS_FOR_STATE" {
								// An alerting rule's output comes in map
								// order: which failure is its last error
								// would be chance, in Prometheus too.
								return nil
							}
							if value.IsStaleNaN(v) {
								if chance(seed, "stalefail", step, l.String()) < 0.1 {
									return storage.ErrOutOfOrderSample
								}
								if chance(seed, "stalefail2", step, l.String()) < 0.05 {
									return errors.New("disk on fire (scripted)")
								}
								return nil
							}
							switch c := chance(seed, "appfail", step, l.String()); {
							case c < 0.04:
								return fmt.Errorf("wrapped: %w", storage.ErrOutOfOrderSample)
							case c < 0.06:
								return storage.ErrDuplicateSampleForTimestamp
							case c < 0.07:
								return storage.ErrTooOldSample
							case c < 0.08:
								return errors.New("other append error (scripted)")
							}
							return nil
						},
						failCommit: func(step, n int) bool { return chance(seed, "commitfail", step, n) < 0.08 },
					}
				}
				a := newSide(t, false, sc, mkStore(), limit)
				bs := mkStore()
				if !collide {
					bs.refs = newRefTable()
				}
				b := newSide(t, true, sc, bs, limit)
				if collide {
					b.tr.hash = func(l labels.Labels) uint64 { return l.Hash() % 3 }
				}
				ctx := context.Background()
				for step := 1; step <= 60; step++ {
					if step == 30 {
						// A reload, as rules.Manager.Update does it.
						for _, s := range []*side{a, b} {
							ng := s.newGroup(t, 1)
							ng.CopyState(s.g)
							s.g = ng
						}
					}
					ts := time.Unix(int64(step)*60, 0)
					if bs.refs != nil && step%10 == 0 {
						bs.mu.Lock()
						bs.refs.forget()
						bs.mu.Unlock()
					}
					for _, s := range []*side{a, b} {
						s.st.setStep(step)
						s.iter(ctx, s.g, ts)
					}
					if !slices.EqualFunc(a.st.commits, b.st.commits, slices.Equal) {
						t.Fatalf("step %d: stored transactions differ\nprometheus:\n%v\ntracker:\n%v", step, diffTail(a.st.commits), diffTail(b.st.commits))
					}
					if sa, sb := a.state(t), b.state(t); sa != sb {
						t.Fatalf("step %d: state differs\nprometheus:\n%s\ntracker:\n%s", step, sa, sb)
					}
				}
				if b.st.sawPlace {
					t.Fatal("a placeholder reached the storage")
				}
				stales := 0
				for _, c := range a.st.commits {
					for _, s := range c {
						if value.IsStaleNaN(math.Float64frombits(s.v)) {
							stales++
						}
					}
				}
				if stales == 0 {
					t.Fatal("the script wrote no stale marker")
				}
				if bs.refs != nil && bs.refs.byRef < 100 {
					t.Fatalf("only %d appends by reference", bs.refs.byRef)
				}
				// Only the rules evaluated by Prometheus (rec:f) and the
				// rules' last outputs are held.
				b.tr.mu.Lock()
				defer b.tr.mu.Unlock()
				if len(b.tr.pending) != 0 {
					t.Fatalf("%d results left pending", len(b.tr.pending))
				}
				if len(b.tr.sets) > 6 {
					t.Fatalf("%d sets held for 6 recording rules", len(b.tr.sets))
				}
				for r, set := range b.tr.last {
					if !slices.Contains(slices.Collect(maps.Values(b.tr.sets)), set) {
						t.Fatalf("rule %s: its last set is no longer held", r.Name())
					}
				}
			})
		}
	}
}

func diffTail(cs [][]sample) string {
	var b strings.Builder
	for i := max(0, len(cs)-8); i < len(cs); i++ {
		fmt.Fprintf(&b, "  #%d %v\n", i, cs[i])
	}
	return b.String()
}

// TestManagerReloadAndRemove runs rules.Manager with Prometheus' own state
// and with a Tracker side by side: a reload drops a recording rule from a
// group and removes another group. Both must write the same stale markers:
// the dropped rule's series at the group's next evaluation timestamp, the
// removed group's series (two intervals later) at the time it was stopped.
func TestManagerReloadAndRemove(t *testing.T) {
	dir := t.TempDir()
	before := `groups:
- name: g1
  interval: 100ms
  rules:
  - record: rec:a
    expr: a
  - record: rec:b
    expr: b
- name: g2
  interval: 100ms
  rules:
  - record: rec:c
    expr: c
`
	after := `groups:
- name: g1
  interval: 100ms
  rules:
  - record: rec:a
    expr: a
`
	query := func(_ context.Context, qs string, ts time.Time) (promql.Vector, error) {
		var vec promql.Vector
		for i := range 3 {
			vec = append(vec, promql.Sample{T: ts.UnixMilli(), F: float64(i), Metric: labels.FromStrings("instance", fmt.Sprint(i), "q", qs)})
		}
		return vec, nil
	}
	type run struct {
		st       *store
		m        *rules.Manager
		from, to int64 // the reload's start and end, ms

		stopReader, readerDone chan struct{}
	}
	start := func(tracked bool) *run {
		r := &run{st: &store{}}
		// Groups are keyed by file and name: the reload rewrites the file.
		file := fmt.Sprintf("%s/rules-%v.yml", dir, tracked)
		if err := writeFile(file, before); err != nil {
			t.Fatal(err)
		}
		opts := &rules.ManagerOptions{QueryFunc: query, AppendableV2: r.st, Context: context.Background(),
			NotifyFunc: func(context.Context, string, ...*rules.Alert) {}, Logger: promslog.NewNopLogger(),
			Queryable: storage.QueryableFunc(func(int64, int64) (storage.Querier, error) { return storage.NoopQuerier(), nil })}
		var iter rules.GroupEvalIterationFunc
		var reader func()
		if tracked {
			tr := New()
			reg := prometheus.NewRegistry()
			opts.QueryFunc, opts.AppendableV2, opts.Metrics = tr.QueryFunc(query), tr.Appendable(r.st), tr.Metrics(reg)
			iter = tr.EvalIterationFunc(nil)
			// What /api/v1/rules and /metrics read, while the groups
			// evaluate (for -race).
			r.readerDone = make(chan struct{})
			r.stopReader = make(chan struct{})
			reader = func() {
				defer close(r.readerDone)
				for {
					select {
					case <-r.stopReader:
						return
					case <-time.After(5 * time.Millisecond):
					}
					if _, err := reg.Gather(); err != nil {
						t.Error(err)
					}
					for _, g := range r.m.RuleGroups() {
						_, _ = g.GetEvaluationTime(), g.GetLastEvaluation()
						for _, rl := range g.Rules() {
							_, _, _ = rl.Health(), rl.LastError(), rl.GetEvaluationTimestamp()
						}
					}
				}
			}
		}
		r.m = rules.NewManager(opts)
		if reader != nil {
			go reader()
		}
		if err := r.m.Update(time.Minute, []string{file}, labels.EmptyLabels(), "", iter); err != nil {
			t.Fatal(err)
		}
		go r.m.Run()
		waitFor(t, func() bool { return len(r.st.stored("rec:b", false)) >= 6 && len(r.st.stored("rec:c", false)) >= 6 })
		if err := writeFile(file, after); err != nil {
			t.Fatal(err)
		}
		r.from = time.Now().UnixMilli()
		if err := r.m.Update(time.Minute, []string{file}, labels.EmptyLabels(), "", iter); err != nil {
			t.Fatal(err)
		}
		r.to = time.Now().UnixMilli()
		return r
	}
	var runs [2]*run
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { runs[i] = start(i == 1) })
	}
	wg.Wait()
	for i, r := range runs {
		waitFor(t, func() bool { return len(r.st.stored("rec:b", true)) == 3 && len(r.st.stored("rec:c", true)) == 3 })
		// Two more intervals: no stale marker comes twice or late.
		time.Sleep(300 * time.Millisecond)
		if r.stopReader != nil {
			close(r.stopReader)
			<-r.readerDone
		}
		r.m.Stop()
		r.st.mu.Lock()
		saw := r.st.sawPlace
		r.st.mu.Unlock()
		if saw {
			t.Fatalf("run %d: a placeholder reached the storage", i)
		}
		if n := len(r.st.stored("rec:a", true)); n != 0 {
			t.Errorf("run %d: %d stale markers for the kept rule", i, n)
		}
		evalTimes := map[int64]bool{}
		for _, s := range r.st.stored("rec:a", false) {
			evalTimes[s.t] = true
		}
		for _, s := range r.st.stored("rec:b", true) {
			if !evalTimes[s.t] || s.t < r.from {
				t.Errorf("run %d: %v is not at an evaluation of g1 after the reload", i, s)
			}
		}
		for _, s := range r.st.stored("rec:c", true) {
			if s.t < r.from || s.t > r.to {
				t.Errorf("run %d: %v is not at the time g2 was stopped (%d-%d)", i, s, r.from, r.to)
			}
		}
	}
	for _, name := range []string{"rec:b", "rec:c"} {
		var series [2][]string
		for i, r := range runs {
			for _, s := range r.st.stored(name, true) {
				series[i] = append(series[i], s.series)
			}
			slices.Sort(series[i])
		}
		if !slices.Equal(series[0], series[1]) {
			t.Errorf("%s: stale markers for %v with Prometheus' state, %v with the Tracker", name, series[0], series[1])
		}
	}
}

// stored returns the samples of the recorded series name: stale markers
// (stale) or values.
func (s *store) stored(name string, stale bool) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sample
	for _, c := range s.commits {
		for _, x := range c {
			if strings.HasPrefix(x.series, `{__name__="`+name+`"`) && value.IsStaleNaN(math.Float64frombits(x.v)) == stale {
				out = append(out, x)
			}
		}
	}
	return out
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func writeFile(p, body string) error { return os.WriteFile(p, []byte(body), 0o600) }

// TestRefsStayWithTheirStorage: a group whose state moves (CopyState) to a
// group appending to another storage, through another Appendable of the
// same Tracker, appends the series by their labels there, never by the
// references the first storage returned (which name other series in the
// second).
func TestRefsStayWithTheirStorage(t *testing.T) {
	sc := script{seed: 3}
	tr := New()
	first, second := &store{refs: newRefTable()}, &store{refs: newRefTable()}
	for i := range 40 { // the second storage's references name other series
		second.refs.resolve(0, labels.FromStrings("__name__", "other", "i", fmt.Sprint(i)))
	}
	opts := func(st *store) *rules.ManagerOptions {
		return &rules.ManagerOptions{QueryFunc: tr.QueryFunc(sc.query), AppendableV2: tr.Appendable(st), Context: context.Background(),
			NotifyFunc: func(context.Context, string, ...*rules.Alert) {}, Metrics: tr.Metrics(prometheus.NewRegistry())}
	}
	newGroup := func(st *store) *rules.Group {
		return rules.NewGroup(rules.GroupOptions{Name: "g", File: "f", Interval: time.Minute, Rules: ruleSet(t, 0), Opts: opts(st)})
	}
	iter := tr.EvalIterationFunc(nil)
	g := newGroup(first)
	for step := 1; step <= 3; step++ {
		iter(context.Background(), g, time.Unix(int64(step)*60, 0))
	}
	moved := newGroup(second)
	moved.CopyState(g)
	for step := 4; step <= 6; step++ {
		iter(context.Background(), moved, time.Unix(int64(step)*60, 0))
	}
	if len(second.commits) == 0 {
		t.Fatal("nothing written to the second storage")
	}
	for _, c := range second.commits {
		for _, s := range c {
			if strings.HasPrefix(s.series, `{__name__="other"`) {
				t.Fatalf("a rule sample went into another series (appended by the first storage's reference): %s", s)
			}
		}
	}
}
