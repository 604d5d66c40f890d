package remotewrite

import (
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"
)

// TestRequestStatesKept checks the handler's request states: one is kept
// and reused from one request to the next across garbage collections, never
// more are kept than MaxActiveRequests however many requests run at once,
// and one that an outsized request grew past the bound is left to the
// collector. What is stored does not depend on which state served it.
func TestRequestStatesKept(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxActiveRequests = 2
	env := newTestEnv(t, cfg)
	h := env.h
	body := func(round, n int) []byte {
		var ts []prompb.TimeSeries
		for i := range n {
			ts = append(ts, series("kept", []string{"i", strconv.Itoa(i)}, prompb.Sample{Value: float64(round), Timestamp: ms(time.Duration(round) * time.Second)}))
		}
		return encodeV1(t, &prompb.WriteRequest{Timeseries: ts})
	}
	post := func(round, n int) {
		t.Helper()
		if w := env.post(body(round, n), ctV1, "snappy"); w.Code != http.StatusNoContent {
			t.Fatalf("round %d: %d %s", round, w.Code, w.Body)
		}
	}

	post(0, 10)
	if len(h.states) != 1 {
		t.Fatalf("%d idle states after one request, want 1", len(h.states))
	}
	first := <-h.states
	h.states <- first
	runtime.GC()
	runtime.GC() // a sync.Pool would have dropped it by now
	post(1, 10)
	if len(h.states) != 1 {
		t.Fatalf("%d idle states, want 1", len(h.states))
	}
	if st := <-h.states; st != first {
		t.Fatal("the second request did not reuse the first one's state")
	} else {
		h.states <- st
	}

	// Many at once: at most MaxActiveRequests states are made and kept.
	if cap(h.states) != cfg.MaxActiveRequests {
		t.Fatalf("room for %d idle states, want %d", cap(h.states), cfg.MaxActiveRequests)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	conc := make([][]byte, 16)
	for k := range conc {
		conc[k] = body(2+k, 10)
	}
	for k, b := range conc {
		wg.Go(func() {
			if w := env.post(b, ctV1, "snappy"); w.Code != http.StatusNoContent {
				errs <- fmt.Errorf("request %d: %d %s", k, w.Code, w.Body)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := len(h.states); n < 1 || n > cfg.MaxActiveRequests {
		t.Fatalf("%d idle states after 16 concurrent requests, want 1..%d", n, cfg.MaxActiveRequests)
	}

	// A state grown past the bound is not kept; the next request gets a
	// fresh one.
	for len(h.states) > 0 {
		<-h.states
	}
	post(18, 10)
	st := <-h.states
	small := st.retainedBytes()
	h.states <- st
	h.maxKeptState = small + 1
	post(19, 200) // grows the state's buffers past small+1
	if len(h.states) != 0 {
		t.Fatalf("a state of more than %d bytes was kept", h.maxKeptState)
	}
	post(20, 10)
	if len(h.states) != 1 {
		t.Fatalf("%d idle states after a request with none idle, want 1", len(h.states))
	}

	got := env.read(t, "kept")
	if len(got) != 200 {
		t.Fatalf("%d series stored, want 200", len(got))
	}
	if pts := got[`{__name__="kept", i="3"}`]; len(pts) != 21 {
		t.Fatalf("series i=3: %d samples, want 21 (every round): %v", len(pts), pts)
	}
}

// TestRequestStatesIdleBound: with more active slots than maxIdleStates,
// the states beyond it are not kept after a burst of concurrent requests.
func TestRequestStatesIdleBound(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxActiveRequests = 2 * maxIdleStates
	env := newTestEnv(t, cfg)
	if c := cap(env.h.states); c != maxIdleStates {
		t.Fatalf("room for %d idle states with %d active slots, want %d", c, cfg.MaxActiveRequests, maxIdleStates)
	}
	bodies := make([][]byte, 4*maxIdleStates)
	for k := range bodies {
		bodies[k] = encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			series("idle", []string{"k", strconv.Itoa(k)}, prompb.Sample{Value: 1, Timestamp: ms(0)}),
		}})
	}
	var wg sync.WaitGroup
	for k, body := range bodies {
		wg.Go(func() {
			if w := env.post(body, ctV1, "snappy"); w.Code != http.StatusNoContent {
				t.Errorf("request %d: %d %s", k, w.Code, w.Body)
			}
		})
	}
	wg.Wait()
	if n := len(env.h.states); n < 1 || n > maxIdleStates {
		t.Fatalf("%d idle states kept, want 1..%d", n, maxIdleStates)
	}
	if got := env.read(t, "idle"); len(got) != 4*maxIdleStates {
		t.Fatalf("%d series stored, want %d", len(got), 4*maxIdleStates)
	}
}
