package query

import (
	"context"
	"errors"
	"testing"
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

func TestQueryGate(t *testing.T) {
	t.Run("queued query runs when a slot frees", func(t *testing.T) {
		g := newTestGate(1, time.Minute)
		if _, err := g.Insert(t.Context(), "first"); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := g.Insert(t.Context(), "second")
			done <- err
		}()
		// Wait (bounded) until the second query is queued, then free the slot.
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(g.waiting) != 1 {
			if time.Now().After(deadline) {
				t.Fatal("second query never queued")
			}
			time.Sleep(time.Millisecond)
		}
		g.Delete(0)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("queued query did not get the freed slot")
		}
	})

	for _, tc := range []struct {
		name       string
		timeout    time.Duration
		ctx        func() (context.Context, context.CancelFunc)
		wantErr    error
		wantReason string
	}{
		{
			name: "gate timeout", timeout: 20 * time.Millisecond,
			ctx:     func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			wantErr: promql.ErrQueryTimeout("query queue"), wantReason: "timeout_in_queue",
		},
		{
			name: "request deadline", timeout: time.Hour,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 20*time.Millisecond)
			},
			wantErr: promql.ErrQueryTimeout("query queue"), wantReason: "timeout_in_queue",
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
			g := newTestGate(1, tc.timeout)
			if _, err := g.Insert(t.Context(), "holder"); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := tc.ctx()
			defer cancel()
			_, err := g.Insert(ctx, "queued")
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
			if n := testutil.ToFloat64(g.rejected.WithLabelValues(tc.wantReason)); n != 1 {
				t.Errorf("rejected{reason=%q} = %g, want 1", tc.wantReason, n)
			}
			if n := testutil.ToFloat64(g.waiting); n != 0 {
				t.Errorf("waiting = %g after the query left the queue", n)
			}
		})
	}
}
