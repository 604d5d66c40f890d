package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRateCapsOfferedLoad: with a Rate, batches leave a sender no faster than
// its share of the rate, and a sender the receiver held back (here one reply
// that takes 5 s) resumes at the rate instead of bursting to catch up.
func TestRateCapsOfferedLoad(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	rcv := newFakeReceiver(t)
	var arrivals []time.Time
	rcv.reply = func(n int) (int, map[string]string) {
		arrivals = append(arrivals, clock.Now())
		if n == 5 {
			clock.advance(5 * time.Second) // a slow reply
		}
		return http.StatusNoContent, nil
	}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	const (
		rate    = 1000 // samples/s
		batch   = 100  // so one request per 100 ms
		maxReqs = 30
	)
	cfg := LoadConfig{URL: srv.URL, Series: 200, Mix: Mix{DCGM: 1}, BatchSize: batch, Concurrency: 1,
		Rate: rate, MaxRequests: maxReqs, Now: clock.Now, sleep: clock.sleep}
	res, err := RunLoad(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(arrivals) != maxReqs || res.SamplesAccepted != maxReqs*batch {
		t.Fatalf("%d requests, %d samples accepted; want %d and %d", len(arrivals), res.SamplesAccepted, maxReqs, maxReqs*batch)
	}
	step := time.Duration(batch * float64(time.Second) / rate)
	for i := 1; i < len(arrivals); i++ {
		if gap := arrivals[i].Sub(arrivals[i-1]); gap < step {
			t.Errorf("request %d came %s after the one before, under the rate's %s", i, gap, step)
		}
	}
	// Every wait but the slow reply's is exactly one step.
	if span, want := arrivals[len(arrivals)-1].Sub(arrivals[0]), time.Duration(maxReqs-2)*step+5*time.Second; span != want {
		t.Errorf("requests spanned %s, want %s", span, want)
	}
}

func TestRateNeedsWallclock(t *testing.T) {
	cfg := LoadConfig{URL: "http://127.0.0.1:1/api/v1/write", Rate: 10, Timestamps: TimestampsInterval}
	if _, err := RunLoad(context.Background(), cfg, nil); err == nil {
		t.Fatal("a rate with interval timestamps was accepted")
	}
}
