package query

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/promql"
)

func newTestGate(slots int, timeout time.Duration) *queryGate {
	return newQueryGate(slots, timeout,
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejected_total"}, []string{"reason"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "waiting"}))
}

// The gate's tests run in a synctest bubble: time is the bubble's fake
// clock, so timeouts of minutes take no time, and synctest.Wait returns once
// every goroutine is blocked, so no test polls or sleeps.
func TestQueryGate(t *testing.T) {
	t.Run("queued query runs when a slot frees", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			g := newTestGate(1, time.Minute)
			if _, err := g.Insert(t.Context(), "first"); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := g.Insert(t.Context(), "second")
				done <- err
			}()
			synctest.Wait() // the second query is blocked in the gate
			if n := testutil.ToFloat64(g.waiting); n != 1 {
				t.Fatalf("waiting = %g, want the second query queued", n)
			}
			select {
			case err := <-done:
				t.Fatalf("second query passed a full gate: %v", err)
			default:
			}
			g.Delete(0)
			synctest.Wait()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			default:
				t.Fatal("queued query did not get the freed slot")
			}
			if n := testutil.ToFloat64(g.waiting); n != 0 {
				t.Errorf("waiting = %g after the query left the queue", n)
			}
		})
	})

	for _, tc := range []struct {
		name       string
		timeout    time.Duration
		ctx        func() (context.Context, context.CancelFunc)
		wantErr    error
		wantReason string
		wantWait   time.Duration // how long the query waited in the queue
	}{
		{
			name: "gate timeout", timeout: 2 * time.Minute,
			ctx:     func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			wantErr: promql.ErrQueryTimeout("query queue"), wantReason: "timeout_in_queue", wantWait: 2 * time.Minute,
		},
		{
			name: "request deadline", timeout: time.Hour,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 30*time.Second)
			},
			wantErr: promql.ErrQueryTimeout("query queue"), wantReason: "timeout_in_queue", wantWait: 30 * time.Second,
		},
		{
			name: "request canceled", timeout: time.Hour,
			ctx: func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx, cancel
			},
			wantErr: promql.ErrQueryCanceled("query queue"), wantReason: "canceled_in_queue",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := newTestGate(1, tc.timeout)
				if _, err := g.Insert(t.Context(), "holder"); err != nil {
					t.Fatal(err)
				}
				ctx, cancel := tc.ctx()
				defer cancel()
				start := time.Now()
				_, err := g.Insert(ctx, "queued")
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, want %v", err, tc.wantErr)
				}
				if waited := time.Since(start); waited != tc.wantWait {
					t.Errorf("the query waited %s in the queue, want %s", waited, tc.wantWait)
				}
				if n := testutil.ToFloat64(g.rejected.WithLabelValues(tc.wantReason)); n != 1 {
					t.Errorf("rejected{reason=%q} = %g, want 1", tc.wantReason, n)
				}
				if n := testutil.ToFloat64(g.waiting); n != 0 {
					t.Errorf("waiting = %g after the query left the queue", n)
				}
			})
		})
	}
}
