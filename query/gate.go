package query

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/promql"
)

// queryGate bounds how many queries the engine runs at once. It implements
// promql.QueryTracker, so the engine itself takes a slot for every query,
// including those of the rule evaluator that shares Engine().
//
// Prometheus' own ActiveQueryTracker does the same but also keeps an mmapped
// file of the running queries in the data directory, to log them after a
// crash; Strata's query package owns no directory, so a channel semaphore is
// enough.
//
// A query that finds no free slot waits, at most the query timeout (or its
// context's deadline if sooner), and then fails with promql.ErrQueryTimeout,
// which the HTTP API answers 503 "timeout". The typed error matters: the
// engine also takes a slot while it builds a query, under the request's
// context, and an untyped context error there would reach the client as a
// 400 "invalid parameter query".
type queryGate struct {
	slots    chan struct{}
	timeout  time.Duration
	rejected *prometheus.CounterVec
	waiting  prometheus.Gauge
}

func newQueryGate(maxConcurrent int, timeout time.Duration, rejected *prometheus.CounterVec, waiting prometheus.Gauge) *queryGate {
	return &queryGate{slots: make(chan struct{}, maxConcurrent), timeout: timeout, rejected: rejected, waiting: waiting}
}

// GetMaxConcurrent implements promql.QueryTracker.
func (g *queryGate) GetMaxConcurrent() int { return cap(g.slots) }

// Insert implements promql.QueryTracker: it blocks until a slot is free, the
// context is done or the timeout has passed.
func (g *queryGate) Insert(ctx context.Context, _ string) (int, error) {
	select {
	case g.slots <- struct{}{}:
		return 0, nil
	default:
	}
	g.waiting.Inc()
	defer g.waiting.Dec()
	timer := time.NewTimer(g.timeout)
	defer timer.Stop()
	select {
	case g.slots <- struct{}{}:
		return 0, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.Canceled) {
			g.rejected.WithLabelValues("canceled_in_queue").Inc()
			return 0, promql.ErrQueryCanceled("query queue")
		}
	case <-timer.C:
	}
	g.rejected.WithLabelValues("timeout_in_queue").Inc()
	return 0, promql.ErrQueryTimeout("query queue")
}

// Delete implements promql.QueryTracker.
func (g *queryGate) Delete(int) { <-g.slots }

// Close implements promql.QueryTracker; nothing is held.
func (g *queryGate) Close() error { return nil }
