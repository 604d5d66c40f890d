package rulegen

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
)

// InternalForms holds the internal form (PushDownRenames) of the canonical
// rules, keyed by their exported form as rules.Rule.Query().String() prints
// it. The rules stay in the exported form, so /api/v1/rules shows what the
// rule file says and a user can paste it into a query; QueryFunc evaluates
// the internal form in their place. Safe for concurrent use.
type InternalForms struct {
	mu         sync.RWMutex
	byExported map[string]internalForm
}

// internalForm is an expression's internal form, never modified once stored.
type internalForm struct {
	expr parser.Expr
	str  string
}

// NewInternalForms returns an empty set.
func NewInternalForms() *InternalForms {
	return &InternalForms{byExported: map[string]internalForm{}}
}

// Set replaces the set with the internal forms of exprs (expressions of the
// exported form, unparsed).
func (f *InternalForms) Set(p parser.Parser, exprs []string) error {
	m := make(map[string]internalForm, len(exprs))
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
		m[exported.String()] = internalForm{expr: internal, str: internal.String()}
	}
	f.mu.Lock()
	f.byExported = m
	f.mu.Unlock()
	return nil
}

// Of returns the internal form of an exported expression, or false when qs
// is not one of the set. The caller must not modify it.
func (f *InternalForms) Of(qs string) (parser.Expr, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	e, ok := f.byExported[qs]
	return e.expr, ok
}

// Internal returns the internal form of qs as a query string, or qs when it
// is not one of the set: for a caller that evaluates the rules' queries
// itself (the diagnosis engine's range queries) over RenamingQueryable.
func (f *InternalForms) Internal(qs string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if e, ok := f.byExported[qs]; ok {
		return e.str
	}
	return qs
}

// QueryFunc evaluates an instant query for rules.Manager over
// RenamingQueryable(q). An expression of the set runs in its internal form,
// and first every selector is looked up (Prune): parts that select no series
// in the query's range are dropped, and when nothing is left the engine does
// not run at all and the result is empty, as the engine's would be (the
// rule group then writes the same staleness markers). Any other expression
// (the operator's rules) runs as rules.EngineQueryFunc runs it. lookback
// must be the engine's lookback delta (0: the engine default, 5m), so that
// the lookup covers at least what the engine's selects read.
func (f *InternalForms) QueryFunc(engine promql.QueryEngine, q storage.Queryable, lookback time.Duration) rules.QueryFunc {
	rq := RenamingQueryable(q)
	run := rules.EngineQueryFunc(engine, rq)
	if lookback <= 0 {
		lookback = 5 * time.Minute
	}
	return func(ctx context.Context, qs string, t time.Time) (promql.Vector, error) {
		internal, ok := f.Of(qs)
		if !ok {
			return run(ctx, qs, t)
		}
		pruned, none, err := pruneAbsent(ctx, rq, internal, t, lookback)
		if err != nil {
			return nil, err
		}
		if none {
			return promql.Vector{}, nil
		}
		return run(ctx, pruned.String(), t)
	}
}

// pruneAbsent looks every selector of expr up over the range an instant
// query at t reads and prunes those that match no series.
func pruneAbsent(ctx context.Context, q storage.Queryable, expr parser.Expr, t time.Time, lookback time.Duration) (parser.Expr, bool, error) {
	mint, maxt := promql.FindMinMaxTime(&parser.EvalStmt{Expr: expr, Start: t, End: t, LookbackDelta: lookback})
	querier, err := q.Querier(mint, maxt)
	if err != nil {
		return nil, false, err
	}
	var lookupErr error
	absent := map[string]bool{}
	pruned, none := Prune(expr, func(vs *parser.VectorSelector) bool {
		if vs.Timestamp != nil || vs.StartOrEnd != 0 {
			return false // @ reads outside the range: keep
		}
		key := vs.String()
		if v, ok := absent[key]; ok {
			return v
		}
		set := querier.Select(ctx, false, &storage.SelectHints{Start: mint, End: maxt}, vs.LabelMatchers...)
		v := !set.Next()
		if v {
			if err := set.Err(); err != nil {
				lookupErr = errors.Join(lookupErr, err)
				v = false
			}
		}
		absent[key] = v
		return v
	})
	err = errors.Join(lookupErr, querier.Close())
	if err != nil {
		return nil, false, err
	}
	return pruned, none, nil
}
