package rulegen

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/promqlast"
)

// InternalForms holds the internal form (PushDownRenames) of the canonical
// rules, keyed by their exported form as rules.Rule.Query().String() prints
// it. The rules stay in the exported form, so /api/v1/rules shows what the
// rule file says and a user can paste it into a query; QueryFunc evaluates
// the internal form in their place. Safe for concurrent use.
type InternalForms struct {
	mu         sync.RWMutex
	byExported map[string]*internalForm
	// shared holds the subexpressions the memo evaluates, by id (see
	// markShared).
	shared []memoExpr

	// pins holds, when PinIn was called, the query strings QueryFunc hands
	// to the engine, pinned in its parser, with how many plans (or shared
	// subexpressions) hold each.
	pinMu  sync.Mutex
	pinner ExprPinner
	pins   map[string]int
}

// ExprPinner is the PromQL engine's parser (query.PinnedExprs): a string
// pinned in it is parsed once, and the engine gets a copy of its tree at
// each use instead of parsing it again.
type ExprPinner interface {
	Pin(qs string)
	Unpin(qs string)
}

// PinIn makes f pin in p every query string its QueryFunc hands to the
// engine, for as long as it may hand it over: each canonical rule's
// expression is then parsed once per load (and once per plan, see
// InternalForms.QueryFunc), not at every evaluation. Call it before Set.
func (f *InternalForms) PinIn(p ExprPinner) {
	f.pinMu.Lock()
	f.pinner, f.pins = p, map[string]int{}
	f.pinMu.Unlock()
}

// pin and unpin count the holders of each string, so that a string two
// plans share stays pinned while either holds it.
func (f *InternalForms) pin(qs ...string) {
	f.pinMu.Lock()
	defer f.pinMu.Unlock()
	if f.pinner == nil {
		return
	}
	for _, s := range qs {
		if f.pins[s] == 0 {
			f.pinner.Pin(s)
		}
		f.pins[s]++
	}
}

func (f *InternalForms) unpin(qs ...string) {
	f.pinMu.Lock()
	defer f.pinMu.Unlock()
	if f.pinner == nil {
		return
	}
	for _, s := range qs {
		switch f.pins[s] {
		case 0:
		case 1:
			delete(f.pins, s)
			f.pinner.Unpin(s)
		default:
			f.pins[s]--
		}
	}
}

// internalForm is one expression's internal form. Everything but plans is
// never modified once stored.
type internalForm struct {
	owner *InternalForms
	expr  parser.Expr
	str   string
	// selectors are the distinct selectors of expr, looked up before each
	// evaluation; index maps each selector node to its position.
	selectors []*parser.VectorSelector
	index     map[*parser.VectorSelector]int
	// shared maps the nodes of expr (aggregations, histogram_quantile
	// calls) that are shared subexpressions to
	// their id in InternalForms.shared.
	shared map[parser.Expr]int
	// drops are the shared subexpressions no expression after this one
	// (in the order the group evaluates them) reads: the memo forgets
	// them once this one is evaluated (lastReaders).
	drops []int

	mu    sync.Mutex
	plans map[string]*plan // by which selectors matched nothing
	// retired is set when a later Set replaced the form: an evaluation
	// still running with it pins nothing more.
	retired bool
}

// plan is how an expression is evaluated when a given set of its selectors
// matches nothing.
type plan struct {
	none bool // nothing is left: the result is empty
	// query is the expression without the parts that select nothing;
	// sharing is the same with its shared subexpressions read from the
	// evaluation's memo (SharedLabel selectors), which holds ids.
	query, sharing string
	ids            []int
	// whole is set when sharing is nothing but the memo's result ids[0]:
	// the memo answers without the engine. Else local, when not nil,
	// evaluates sharing over the memo without the engine (local.go).
	whole bool
	local localNode
}

// strings returns what the plan hands to the engine.
func (p *plan) strings() []string {
	if p.none {
		return nil
	}
	if len(p.ids) == 0 {
		return []string{p.query}
	}
	return []string{p.query, p.sharing}
}

// maxPlans bounds the plans kept per expression (one per combination of
// absent sources seen; a fleet shows few).
const maxPlans = 16

// NewInternalForms returns an empty set.
func NewInternalForms() *InternalForms {
	return &InternalForms{byExported: map[string]*internalForm{}}
}

// Set replaces the set with the internal forms of exprs (expressions of the
// exported form, unparsed).
func (f *InternalForms) Set(p parser.Parser, exprs []string) error {
	m := make(map[string]*internalForm, len(exprs))
	var forms []*internalForm
	for _, s := range exprs {
		exported, err := p.ParseExpr(s)
		if err != nil {
			return err
		}
		internal, err := p.ParseExpr(s)
		if err != nil {
			return err
		}
		internal = PushDownRenames(internal)
		form := &internalForm{owner: f, expr: internal, str: internal.String(), index: map[*parser.VectorSelector]int{}, shared: map[parser.Expr]int{}}
		pos := map[string]int{}
		parser.Inspect(internal, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				k := vs.String()
				i, seen := pos[k]
				if !seen {
					i = len(form.selectors)
					pos[k] = i
					form.selectors = append(form.selectors, vs)
				}
				form.index[vs] = i
			}
			return nil
		})
		m[exported.String()] = form
		forms = append(forms, form)
	}
	shared := markShared(forms)
	lastReaders(forms, shared)
	f.pin(queries(shared)...)
	f.mu.Lock()
	old, oldShared := f.byExported, f.shared
	f.byExported, f.shared = m, shared
	f.mu.Unlock()
	f.unpin(queries(oldShared)...)
	for _, form := range old {
		form.mu.Lock()
		for _, p := range form.plans {
			f.unpin(p.strings()...)
		}
		form.plans, form.retired = nil, true
		form.mu.Unlock()
	}
	return nil
}

// memoExpr is a subexpression the memo evaluates.
type memoExpr struct {
	// query is its internal form, for the engine.
	query string
	// fused computes it instead of the engine, or quantile from another
	// one (nil: the engine evaluates it).
	fused    *fusedAgg
	quantile *fusedQuantile
	// fresh is set when it is evaluated anew at each use: it reads
	// canonical series, which the rules of the evaluation write.
	fresh bool
}

// queries returns the query strings of ms.
func queries(ms []memoExpr) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.query
	}
	return out
}

// markShared finds the subexpressions the memo evaluates: the aggregations
// that occur more than once across forms (the per-GPU rules' guards read
// one DCGM field in several places, p50 and p99 of a histogram aggregate the
// same buckets), and those a fused pass computes (fusable), which the memo
// evaluates without the engine even when only one form reads them, with
// the histogram_quantile of one of those (fusedQuantile). A fused one that
// reads canonical series is evaluated at each use (fresh), as the engine
// would evaluate it in its place. It marks their outermost occurrences in
// each form (a quantile's aggregation too, for a plan that leaves the call
// but not its aggregation whole) and returns them by id.
func markShared(forms []*internalForm) []memoExpr {
	count := map[string]int{}
	for _, form := range forms {
		parser.Inspect(form.expr, func(n parser.Node, _ []parser.Node) error {
			if a, ok := n.(*parser.AggregateExpr); ok && shareable(a) {
				count[a.String()]++
			}
			return nil
		})
	}
	ids := map[string]int{}
	var shared []memoExpr
	add := func(e memoExpr) int {
		id, ok := ids[e.query]
		if !ok {
			id = len(shared)
			ids[e.query] = id
			shared = append(shared, e)
		}
		return id
	}
	// aggregation marks a if the memo evaluates it.
	aggregation := func(form *internalForm, a *parser.AggregateExpr) (int, bool) {
		s, fa, reused := a.String(), fusable(a), shareable(a)
		// Fused, or shared by several forms and reading raw inputs only.
		if fa == nil && (!reused || count[s] < 2) {
			return 0, false
		}
		id := add(memoExpr{query: s, fused: fa, fresh: !reused})
		form.shared[a] = id
		return id, true
	}
	for _, form := range forms {
		var walk func(parser.Node)
		walk = func(n parser.Node) {
			switch n := n.(type) {
			case *parser.Call:
				if q, a, ok := quantileCall(n); ok {
					if of, ok := aggregation(form, a); ok && quantileOf(shared[of].fused) {
						form.shared[n] = add(memoExpr{query: n.String(), quantile: &fusedQuantile{q: q, of: of}, fresh: shared[of].fresh})
						return
					}
				}
			case *parser.AggregateExpr:
				if _, ok := aggregation(form, n); ok {
					return
				}
			}
			for c := range parser.ChildrenIter(n) {
				walk(c)
			}
		}
		walk(form.expr)
	}
	return shared
}

// lastReaders sets each form's drops: the shared subexpressions whose last
// reader it is, forms being in the order of the group's rules (a rules.Group
// evaluates them one after the other, in order). A quantile's reader reads
// its bucket sum too. Without them the memo held every result until the
// evaluation ended: 70 MB at 500,000 series, live at every collection that
// fell within an evaluation (docs/bench.md, s16-peak). Should a group
// evaluate its rules in another order, a result read after it was dropped
// is evaluated again, as the engine evaluates a subexpression at each use.
// An expression that two rules of the set share is evaluated through one
// form at both places: what it reads is kept to the evaluation's end.
func lastReaders(forms []*internalForm, shared []memoExpr) {
	const never = -2 // kept to the end
	last := make([]int, len(shared))
	for i := range last {
		last[i] = -1
	}
	seen := map[string]int{}
	for _, form := range forms {
		seen[form.str]++
	}
	for i, form := range forms {
		for _, id := range form.shared {
			ids := []int{id}
			if q := shared[id].quantile; q != nil {
				ids = append(ids, q.of)
			}
			for _, id := range ids {
				switch {
				case seen[form.str] > 1:
					last[id] = never
				case last[id] != never:
					last[id] = i
				}
			}
		}
	}
	for id, i := range last {
		if i >= 0 {
			forms[i].drops = append(forms[i].drops, id)
		}
	}
}

// shareable reports whether an aggregation reads only raw inputs, named
// literally (never a canonical series another rule of the same evaluation
// may be writing), at the evaluation time.
func shareable(a *parser.AggregateExpr) bool {
	ok := true
	parser.Inspect(a, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.SubqueryExpr:
			ok = false
		case *parser.VectorSelector:
			if n.Timestamp != nil || n.StartOrEnd != 0 || n.OriginalOffset != 0 || !literalNames(n) {
				ok = false
			}
		}
		return nil
	})
	return ok
}

// literalNames reports whether a selector's metric names are listed (an
// equality or an alternation of names) and none is a canonical series.
func literalNames(vs *parser.VectorSelector) bool {
	for _, m := range vs.LabelMatchers {
		if m.Name != model.MetricNameLabel {
			continue
		}
		names := []string{m.Value}
		switch m.Type {
		case labels.MatchEqual:
		case labels.MatchRegexp:
			names = m.SetMatches()
		default:
			return false
		}
		if len(names) == 0 {
			return false
		}
		for _, n := range names {
			if strings.HasPrefix(n, "strata:") {
				return false
			}
		}
		return true
	}
	return false
}

func (f *InternalForms) form(qs string) (*internalForm, []memoExpr, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	form, ok := f.byExported[qs]
	return form, f.shared, ok
}

// Internal returns the internal form of qs as a query string, or qs when it
// is not one of the set: for a caller that evaluates the rules' queries
// itself (the diagnosis engine's range queries) over RenamingQueryable.
func (f *InternalForms) Internal(qs string) string {
	if form, _, ok := f.form(qs); ok {
		return form.str
	}
	return qs
}

// QueryFunc evaluates an instant query for rules.Manager over
// RenamingQueryable(q). An expression of the set runs in its internal form:
// first every selector is looked up, and the parts that select no series in
// the query's range are dropped (Prune); when nothing is left the engine does
// not run at all and the result is empty, as the engine's would be (the
// rule group then writes the same staleness markers). Within a group
// evaluation run by EvalIterationFunc, an aggregation that occurs in several
// of the set's expressions is evaluated once, on its first use, and read by
// the others from the evaluation's memo; there, too, an aggregation of one
// selector or of its rate is computed in a fused pass (fused.go) instead
// of by the engine, and read from the memo, and what is left of the plan,
// when it only combines memo results by set operations, a number and
// label_replace, is evaluated over the memo without the engine (local.go).
// Any other expression (the operator's rules) runs as
// rules.EngineQueryFunc runs it. lookback must be
// the engine's lookback delta (0: the engine default, 5m), so that the
// lookup covers at least what the engine's selects read. Every query's
// instant selectors read the newest NewestWindow of each series first
// (newestFirst).
func (f *InternalForms) QueryFunc(engine promql.QueryEngine, q storage.Queryable, lookback time.Duration) rules.QueryFunc {
	if lookback <= 0 {
		lookback = 5 * time.Minute
	}
	rq := RenamingQueryable(q)
	// The engine and the fused passes read the same storage, to read the
	// same series in the same order; the passes make the internal
	// matchers' copies and bounds themselves.
	nq := newestFirst(q, lookback, NewestWindow)
	run := rules.EngineQueryFunc(engine, RenamingQueryable(nq))
	return func(ctx context.Context, qs string, t time.Time) (promql.Vector, error) {
		form, shared, ok := f.form(qs)
		if !ok {
			return run(ctx, qs, t)
		}
		memo, _ := ctx.Value(memoKey{}).(*sharedMemo)
		if memo != nil {
			// Once this expression is evaluated (whatever its plan
			// reads), the memo forgets what no later one reads.
			defer memo.drop(t, form.drops)
		}
		absent, err := form.lookup(ctx, rq, t, lookback)
		if err != nil {
			return nil, err
		}
		p := form.plan(absent)
		if p.none {
			return promql.Vector{}, nil
		}
		if memo == nil || len(p.ids) == 0 {
			return run(ctx, p.query, t)
		}
		// The fresh subexpressions go into a memo of this query's own.
		qm := memo
		for _, id := range p.ids {
			if shared[id].fresh && qm == memo {
				qm = &sharedMemo{t: t, vals: map[int]memoValue{}, parent: memo}
				ctx = context.WithValue(ctx, memoKey{}, qm)
			}
		}
		var fill func(id int) error
		fill = func(id int) error {
			e, m := shared[id], memo
			if e.fresh {
				m = qm
			}
			return m.fill(id, t, func() (memoValue, error) {
				switch {
				case e.fused != nil:
					sc := memo.takeScratch()
					v, err := e.fused.eval(ctx, nq, t, lookback, sc)
					memo.putScratch(sc)
					if !errors.Is(err, errNotFused) {
						return v, err
					}
				case e.quantile != nil:
					if err := fill(e.quantile.of); err != nil {
						return memoValue{}, err
					}
					of, _ := qm.value(e.quantile.of)
					if v, ok := e.quantile.eval(of); ok {
						return memoValue{vec: v}, nil
					}
				}
				v, err := run(ctx, e.query, t)
				return memoValue{vec: v}, err
			})
		}
		for _, id := range p.ids {
			if err := fill(id); err != nil {
				return nil, err
			}
		}
		if p.whole {
			return qm.vector(p.ids[0])
		}
		if p.local != nil {
			if v, ok := p.local.eval(qm, t.UnixMilli()); ok {
				return v, nil
			}
		}
		return run(ctx, p.sharing, t)
	}
}

// EvalIterationFunc is rules.DefaultEvalIterationFunc with a memo for the
// shared subexpressions of one evaluation of g (QueryFunc), each result
// dropped after the last rule that reads it: pass it to
// rules.Manager.Update.
func (f *InternalForms) EvalIterationFunc(ctx context.Context, g *rules.Group, ts time.Time) {
	rules.DefaultEvalIterationFunc(context.WithValue(ctx, memoKey{}, newSharedMemo()), g, ts)
}

// lookup reports which of form's selectors match no series over the range
// an instant query at t reads, as a key of form.plans.
func (form *internalForm) lookup(ctx context.Context, q storage.Queryable, t time.Time, lookback time.Duration) (string, error) {
	mint, maxt := promql.FindMinMaxTime(&parser.EvalStmt{Expr: form.expr, Start: t, End: t, LookbackDelta: lookback})
	querier, err := q.Querier(mint, maxt)
	if err != nil {
		return "", err
	}
	key := make([]byte, len(form.selectors))
	var errs error
	for i, vs := range form.selectors {
		key[i] = '1'
		if vs.Timestamp != nil || vs.StartOrEnd != 0 {
			continue // @ reads outside the range: keep
		}
		set := querier.Select(ctx, false, &storage.SelectHints{Start: mint, End: maxt}, vs.LabelMatchers...)
		if !set.Next() {
			if err := set.Err(); err != nil {
				errs = errors.Join(errs, err)
				continue
			}
			key[i] = '0'
		}
	}
	if err := errors.Join(errs, querier.Close()); err != nil {
		return "", err
	}
	return string(key), nil
}

// plan returns (and keeps) the plan for the selectors absent says match
// nothing.
func (form *internalForm) plan(absent string) *plan {
	form.mu.Lock()
	defer form.mu.Unlock()
	if p, ok := form.plans[absent]; ok {
		return p
	}
	pruned, none := Prune(form.expr, func(vs *parser.VectorSelector) bool { return absent[form.index[vs]] == '0' })
	p := &plan{none: none}
	if !none {
		p.query = pruned.String()
		sharing, ids := form.readShared(pruned)
		p.sharing, p.ids = sharing.String(), ids
		_, p.whole = promqlast.Unparen(sharing).(*parser.VectorSelector)
		p.whole = p.whole && len(ids) == 1
		if !p.whole {
			p.local = form.local(pruned)
		}
	}
	if form.plans == nil || len(form.plans) >= maxPlans {
		for _, old := range form.plans {
			if !form.retired {
				form.owner.unpin(old.strings()...)
			}
		}
		form.plans = map[string]*plan{}
	}
	form.plans[absent] = p
	if !form.retired {
		form.owner.pin(p.strings()...)
	}
	return p
}

// readShared returns a copy of e in which every shared subexpression left
// whole by Prune (the same node) reads the memo instead, and their ids.
func (form *internalForm) readShared(e parser.Expr) (parser.Expr, []int) {
	var ids []int
	var rewrite func(parser.Expr) parser.Expr
	rewrite = func(e parser.Expr) parser.Expr {
		if id, ok := form.shared[e]; ok {
			ids = append(ids, id)
			return &parser.VectorSelector{LabelMatchers: []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, SharedLabel, strconv.Itoa(id))}}
		}
		switch n := e.(type) {
		case *parser.AggregateExpr:
			c := *n
			c.Expr = rewrite(n.Expr)
			return &c
		case *parser.BinaryExpr:
			c := *n
			c.LHS, c.RHS = rewrite(n.LHS), rewrite(n.RHS)
			return &c
		case *parser.Call:
			c := *n
			c.Args = make(parser.Expressions, len(n.Args))
			for i, a := range n.Args {
				c.Args[i] = rewrite(a)
			}
			return &c
		case *parser.ParenExpr:
			c := *n
			c.Expr = rewrite(n.Expr)
			return &c
		case *parser.UnaryExpr:
			c := *n
			c.Expr = rewrite(n.Expr)
			return &c
		default:
			return e
		}
	}
	return rewrite(e), ids
}

// SharedLabel is the matcher through which an expression reads a shared
// subexpression's result from the group evaluation's memo (its value is the
// id); only RenamingQueryable, within QueryFunc, understands it.
const SharedLabel = "__strata_shared__"

type memoKey struct{}

// sharedMemo holds the shared subexpressions' results of one group
// evaluation, or, with a parent (the group evaluation's), the fresh ones of
// one query.
type sharedMemo struct {
	mu     sync.Mutex
	t      time.Time
	vals   map[int]memoValue
	parent *sharedMemo
	// passes is the fused passes' scratch, between passes (takeScratch).
	passes *passScratch
	// ordered is set for a group evaluation's memo (EvalIterationFunc):
	// its rules come in order, and a result is dropped after its last
	// reader (internalForm.drops). Any other memo keeps its results.
	ordered bool
	// evals counts the evaluations of each id (tests read it: an id the
	// memo dropped too early is evaluated twice).
	evals map[int]int
}

// newSharedMemo returns the memo of a group evaluation.
func newSharedMemo() *sharedMemo {
	return &sharedMemo{vals: map[int]memoValue{}, ordered: true, evals: map[int]int{}}
}

// memoValue is a shared subexpression's result as the memo holds it: its
// vector, or a fused bucket sum's bucketSums, whose vector is built only
// when something but a quantile reads it.
type memoValue struct {
	vec  promql.Vector
	sums *bucketSums
}

// vector is v's vector (a bucket sum's built anew).
func (v memoValue) vector() promql.Vector {
	if v.sums != nil {
		return v.sums.vector()
	}
	return v.vec
}

// takeScratch returns the scratch the last fused pass of the evaluation
// put back (putScratch), or a new one: passes that run at once (a group's
// rules are evaluated one at a time, so they never do) each get their own.
func (m *sharedMemo) takeScratch() *passScratch {
	m.mu.Lock()
	defer m.mu.Unlock()
	sc := m.passes
	m.passes = nil
	if sc == nil {
		sc = &passScratch{}
	}
	return sc
}

func (m *sharedMemo) putScratch(sc *passScratch) {
	m.mu.Lock()
	m.passes = sc
	m.mu.Unlock()
}

// fill evaluates shared subexpression id at t unless the memo has it.
func (m *sharedMemo) fill(id int, t time.Time, eval func() (memoValue, error)) error {
	m.mu.Lock()
	if !m.t.Equal(t) {
		// A group evaluates every rule at one time; a memo is never
		// read at another.
		m.t, m.vals = t, map[int]memoValue{}
	}
	_, ok := m.vals[id]
	m.mu.Unlock()
	if ok {
		return nil
	}
	v, err := eval()
	if err != nil {
		return err
	}
	for i := range v.vec {
		// The engine may hand a result's histograms to its pools when
		// the query closes; later queries read the memo.
		if v.vec[i].H != nil {
			v.vec[i].H = v.vec[i].H.Copy()
		}
	}
	m.mu.Lock()
	if m.t.Equal(t) {
		m.vals[id] = v
		if m.evals != nil {
			m.evals[id]++
		}
	}
	m.mu.Unlock()
	return nil
}

// drop forgets the results ids of the evaluation at t, when m is a group
// evaluation's.
func (m *sharedMemo) drop(t time.Time, ids []int) {
	if !m.ordered || len(ids) == 0 {
		return
	}
	m.mu.Lock()
	if m.t.Equal(t) {
		for _, id := range ids {
			delete(m.vals, id)
		}
	}
	m.mu.Unlock()
}

// vector is what the engine returns for an instant query of nothing but
// shared subexpression id's memo selector (see selectShared): a copy the
// caller owns, which a recording rule relabels in place.
func (m *sharedMemo) vector(id int) (promql.Vector, error) {
	v, ok := m.get(id)
	if !ok {
		return nil, fmt.Errorf("rulegen: shared subexpression %d not evaluated", id)
	}
	out := make(promql.Vector, 0, len(v))
	for _, s := range v {
		if s.H == nil && value.IsStaleNaN(s.F) || s.H != nil && value.IsStaleNaN(s.H.Sum) {
			continue // the engine's selector skips a stale marker
		}
		if s.H != nil {
			s.H = s.H.Copy()
		}
		out = append(out, s)
	}
	return out, nil
}

// get is id's result as a vector; a bucket sum's is built at the first
// read and kept.
func (m *sharedMemo) get(id int) (promql.Vector, bool) {
	m.mu.Lock()
	v, ok := m.vals[id]
	if ok && v.sums != nil {
		v = memoValue{vec: v.sums.vector()}
		m.vals[id] = v
	}
	m.mu.Unlock()
	if !ok && m.parent != nil {
		return m.parent.get(id)
	}
	return v.vec, ok
}

// value is id's result as the memo holds it.
func (m *sharedMemo) value(id int) (memoValue, bool) {
	m.mu.Lock()
	v, ok := m.vals[id]
	m.mu.Unlock()
	if !ok && m.parent != nil {
		return m.parent.value(id)
	}
	return v, ok
}
