package remotewrite

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/prompb"
	"github.com/prometheus/prometheus/storage"
)

// gatedAppendable is a storage slower than the offered load: every Commit
// waits until the gate opens. It records the most requests and bytes the
// handler held in flight while a commit waited.
type gatedAppendable struct {
	next    storage.AppendableV2
	h       *Handler
	gate    chan struct{} // closed: commits proceed
	waiting chan struct{} // one token per commit that started waiting

	mu        sync.Mutex
	peakReqs  int64
	peakBytes int64
}

func (g *gatedAppendable) AppenderV2(ctx context.Context) storage.AppenderV2 {
	return &gatedAppender{AppenderV2: g.next.AppenderV2(ctx), g: g}
}

type gatedAppender struct {
	storage.AppenderV2
	g *gatedAppendable
}

func (a *gatedAppender) Commit() error {
	g := a.g
	g.mu.Lock()
	g.peakReqs = max(g.peakReqs, g.h.inflightReqs.Load())
	g.peakBytes = max(g.peakBytes, g.h.inflightBytes.Load())
	g.mu.Unlock()
	g.waiting <- struct{}{}
	<-g.gate
	return a.AppenderV2.Commit()
}

// gateHandler puts a handler with cfg over env's raw tier behind a
// gatedAppendable whose gate holds up to senders waiting commits, and makes
// it env's handler.
func gateHandler(t *testing.T, env *testEnv, cfg Config, senders int) *gatedAppendable {
	t.Helper()
	g := &gatedAppendable{next: env.raw, gate: make(chan struct{}), waiting: make(chan struct{}, senders)}
	h, err := NewHandler(cfg, g, nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), func() time.Time { return base })
	if err != nil {
		t.Fatal(err)
	}
	g.h, env.h = h, h
	return g
}

// TestHandlerOverloadSlowStorage: with the storage stalled and more
// senders than the handler admits, the handler holds at most its bound of
// requests and body bytes, answers the rest 429 with Retry-After without
// reading their bodies, and once the storage catches up every retried
// request is written: nothing is lost, nothing grows without bound.
func TestHandlerOverloadSlowStorage(t *testing.T) {
	const senders = 16
	bodies := make([][]byte, senders)
	for i := range bodies {
		var ts []prompb.TimeSeries
		for s := range 50 {
			ts = append(ts, series("overload", []string{"sender", fmt.Sprint(i), "s", fmt.Sprint(s)}, prompb.Sample{Timestamp: ms(0), Value: float64(i)}))
		}
		bodies[i] = encodeV1(t, &prompb.WriteRequest{Timeseries: ts})
	}
	n, err := decodedLen(bodies[0], 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	need := int64(len(bodies[0]) + n) // what one admitted request holds

	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		// admit is how many requests the bound lets in at once; 0: at
		// most maxAdmit, depending on the order of the byte reservations
		// (a request reserves its compressed size, then exchanges it for
		// compressed plus decompressed, and may be refused then, its body
		// read).
		admit, maxAdmit int
	}{
		{"requests", func(c *Config) { c.MaxInflightRequests = 4 }, 4, 4},
		{"bytes", func(c *Config) { c.MaxInflightBytes = 3*need + need/2 }, 0, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			env := newTestEnv(t, cfg)
			g := gateHandler(t, env, cfg, senders)
			h := g.h

			// Phase 1: every sender posts once while the storage is stalled.
			type answer struct {
				code       int
				retryAfter string
				read       int
			}
			answers := make(chan answer, senders)
			accepted := make(chan int, senders)
			retry := make(chan struct{})
			var wg sync.WaitGroup
			for i := range senders {
				wg.Go(func() {
					body := &countingReader{r: bytes.NewReader(bodies[i])}
					r := httptest.NewRequest(http.MethodPost, "/api/v1/write", body)
					r.Header.Set("Content-Type", ctV1)
					r.ContentLength = int64(len(bodies[i]))
					w := httptest.NewRecorder()
					h.ServeHTTP(w, r)
					answers <- answer{w.Code, w.Header().Get("Retry-After"), body.n}
					if w.Code == http.StatusNoContent {
						accepted <- i
						return
					}
					// Phase 2: retry, as a sender does after Retry-After, until written.
					<-retry
					for attempt := 0; attempt < 10_000; attempt++ {
						if w := env.post(bodies[i], ctV1, "snappy"); w.Code == http.StatusNoContent {
							accepted <- i
							return
						} else if w.Code != http.StatusTooManyRequests {
							t.Errorf("sender %d: %d %s", i, w.Code, w.Body)
							return
						}
					}
					t.Errorf("sender %d never got through", i)
				})
			}
			// The admitted requests wait in Commit; every other one is answered.
			timeout := time.After(30 * time.Second)
			admitted, rejected := 0, 0
			for admitted+rejected < senders {
				select {
				case <-g.waiting:
					admitted++
				case a := <-answers:
					if a.code != http.StatusTooManyRequests || !retryAfterValid(a.retryAfter, cfg.RetryAfter) {
						t.Fatalf("a request past the bound got %d, Retry-After %q", a.code, a.retryAfter)
					}
					if tc.admit > 0 && a.read != 0 {
						t.Errorf("a request refused at admission had its body read (%d bytes)", a.read)
					}
					rejected++
				case <-timeout:
					t.Fatalf("%d requests waiting in the storage and %d answered, of %d", admitted, rejected, senders)
				}
			}
			if admitted == 0 || admitted > tc.maxAdmit || (tc.admit > 0 && admitted != tc.admit) {
				t.Fatalf("%d requests admitted while the storage stalled, want %d (at most %d)", admitted, tc.admit, tc.maxAdmit)
			}
			if b := h.inflightBytes.Load(); b > max(cfg.MaxInflightBytes, need) {
				t.Fatalf("stalled: %d bytes in flight, bound %d", b, cfg.MaxInflightBytes)
			}

			// Phase 2: the storage catches up; the rejected senders retry.
			close(g.gate)
			close(retry)
			go func() {
				for range g.waiting { // drain: commits no longer wait
				}
			}()
			wg.Wait()
			close(g.waiting)
			close(accepted)
			got := map[int]bool{}
			for i := range accepted {
				got[i] = true
			}
			if len(got) != senders {
				t.Fatalf("%d of %d senders written", len(got), senders)
			}
			if n := len(env.read(t, "overload")); n != senders*50 {
				t.Fatalf("%d series stored, want %d", n, senders*50)
			}
			// Under the byte bound, requests refused at the exchange hold a
			// slot (not their bytes) for a moment: only bytes are bounded.
			if (tc.admit > 0 && g.peakReqs > int64(tc.admit)) || g.peakBytes > max(cfg.MaxInflightBytes, need) {
				t.Fatalf("peak in flight: %d requests, %d bytes; bound %d requests, %d bytes", g.peakReqs, g.peakBytes, tc.maxAdmit, cfg.MaxInflightBytes)
			}
			if n, b := h.inflightReqs.Load(), h.inflightBytes.Load(); n != 0 || b != 0 {
				t.Errorf("in-flight accounting leaked: %d requests, %d bytes", n, b)
			}
		})
	}
}

// TestHandlerActiveBound: past MaxActiveRequests, admitted requests wait
// for a slot instead of decoding (only that many are ever in the storage at
// once), get 429 with Retry-After once MaxQueueWait runs out, and are
// written when retried after the storage catches up.
func TestHandlerActiveBound(t *testing.T) {
	const senders, active = 6, 2
	bodies := make([][]byte, senders)
	for i := range bodies {
		bodies[i] = encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
			series("queued", []string{"sender", fmt.Sprint(i)}, prompb.Sample{Timestamp: ms(0), Value: float64(i)}),
		}})
	}
	for _, tc := range []struct {
		name string
		wait time.Duration
	}{
		{"wait", time.Hour},           // the queued requests are still waiting when the storage catches up
		{"timeout", time.Millisecond}, // they give up first
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.MaxActiveRequests, cfg.MaxQueueWait = active, tc.wait
			env := newTestEnv(t, cfg)
			g := gateHandler(t, env, cfg, senders)
			h := g.h
			codes := make(chan int, senders)
			var wg sync.WaitGroup
			for i := range senders {
				wg.Go(func() {
					for attempt := 0; attempt < 1000; attempt++ {
						w := env.post(bodies[i], ctV1, "snappy")
						if attempt == 0 {
							codes <- w.Code
						}
						switch w.Code {
						case http.StatusNoContent:
							return
						case http.StatusTooManyRequests:
							if w.Header().Get("Retry-After") == "" {
								t.Errorf("429 without Retry-After")
							}
							<-g.gate // retry once the storage has caught up
						default:
							t.Errorf("sender %d: %d %s", i, w.Code, w.Body)
							return
						}
					}
					t.Errorf("sender %d never got through", i)
				})
			}
			// Two requests reach the storage; the other four wait or are refused.
			for range active {
				select {
				case <-g.waiting:
				case <-time.After(30 * time.Second):
					t.Fatal("no request reached the storage")
				}
			}
			if tc.wait == time.Hour {
				for i := 0; h.inflightReqs.Load() != senders; i++ {
					if i == 30_000 {
						t.Fatalf("%d requests in flight, want all %d", h.inflightReqs.Load(), senders)
					}
					time.Sleep(time.Millisecond)
				}
				if len(codes) != 0 {
					t.Fatalf("%d requests answered while they should wait for a slot", len(codes))
				}
			} else {
				for range senders - active {
					if c := <-codes; c != http.StatusTooManyRequests {
						t.Fatalf("a request past the active bound got %d, want 429", c)
					}
				}
				if got := testutil.ToFloat64(h.m.rejected.WithLabelValues(ReasonQueueTimeout)); got != senders-active {
					t.Errorf("queue_timeout rejections %v, want %d", got, senders-active)
				}
			}
			if n := len(h.active); n != active {
				t.Fatalf("%d requests active, want %d", n, active)
			}
			close(g.gate)
			go func() {
				for range g.waiting {
				}
			}()
			wg.Wait()
			close(g.waiting)
			if g.peakReqs > senders {
				t.Fatalf("peak %d requests", g.peakReqs)
			}
			if n := len(env.read(t, "queued")); n != senders {
				t.Fatalf("%d series stored, want %d", n, senders)
			}
			if n, b, a := h.inflightReqs.Load(), h.inflightBytes.Load(), len(h.active); n != 0 || b != 0 || a != 0 {
				t.Errorf("accounting leaked: %d requests, %d bytes, %d active", n, b, a)
			}
		})
	}
}

// retryAfterValid reports whether v is a Retry-After the handler may send
// for the mean delay d: whole seconds from 1 to 1.5 times d.
func retryAfterValid(v string, d time.Duration) bool {
	n, err := strconv.Atoi(v)
	return err == nil && n >= 1 && float64(n) <= math.Ceil(1.5*d.Seconds())
}

// TestRetryAfterSpread: a 429's Retry-After grows with the requests waiting
// for an active slot and is spread at random, so that senders refused
// together do not all come back in the same second.
func TestRetryAfterSpread(t *testing.T) {
	cfg := DefaultConfig()
	h, err := NewHandler(cfg, &nopAppendable{}, nil, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	full := int64(h.cfg.MaxInflightRequests)
	for _, tc := range []struct {
		waiting int64
		jitter  float64
		want    int64
	}{
		{0, 0, 1},            // 5 s x 0.5 x 0.5 = 1.25
		{0, 0.999, 4},        // 5 s x 0.5 x 1.5 = 3.75
		{full, 0, 3},         // 5 s x 1 x 0.5 = 2.5
		{full, 0.5, 5},       // the mean with the queue full
		{full, 0.999, 7},     // 5 s x 1 x 1.5 = 7.5
		{2 * full, 0.999, 7}, // more waiting than the bound: as full
		{full / 2, 0.5, 4},   // 5 s x 0.75 x 1 = 3.75
	} {
		h.inflightReqs.Store(tc.waiting)
		h.jitter = func() float64 { return tc.jitter }
		if got := h.retryAfterSeconds(); got != tc.want {
			t.Errorf("%d waiting, jitter %.3f: Retry-After %d, want %d", tc.waiting, tc.jitter, got, tc.want)
		}
	}

	h.jitter = rand.Float64
	h.inflightReqs.Store(full)
	seen := map[int64]int{}
	for range 1000 {
		v := h.retryAfterSeconds()
		if !retryAfterValid(strconv.FormatInt(v, 10), cfg.RetryAfter) {
			t.Fatalf("Retry-After %d out of bounds", v)
		}
		seen[v]++
	}
	// The queue full: 2.5 to 7.5 s, six whole-second values, none of them
	// given to most senders.
	if len(seen) < 4 {
		t.Errorf("1,000 Retry-After values took %d distinct values (%v); want them spread", len(seen), seen)
	}
	for v, n := range seen {
		if n > 400 {
			t.Errorf("Retry-After %d given %d times of 1,000", v, n)
		}
	}
}

// TestAddBoundedNeverPasses: requests that reserve and release bytes
// concurrently never make the counter pass its bound, not even for a
// moment, so that the in-flight gauge and a request checking the bound see
// only bytes some request holds (an add taken back after the check showed
// bytes nobody held, and failed TestHandlerOverloadSlowStorage's peak).
func TestAddBoundedNeverPasses(t *testing.T) {
	const bound, workers, rounds = 100, 4, 20_000
	var v atomic.Int64
	var done atomic.Bool
	var peak atomic.Int64
	observed := make(chan struct{})
	go func() {
		defer close(observed)
		for !done.Load() {
			if n := v.Load(); n > peak.Load() {
				peak.Store(n)
			}
		}
	}()
	var wg sync.WaitGroup
	admitted := atomic.Int64{}
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				n := int64(30 + (w*7+i)%20) // 30-49: two or three fit
				if addBounded(&v, n, bound, n) {
					admitted.Add(1)
					runtime.Gosched()
					v.Add(-n)
				}
			}
		})
	}
	wg.Wait()
	done.Store(true)
	<-observed
	if p := peak.Load(); p > bound {
		t.Fatalf("the counter reached %d, bound %d", p, bound)
	}
	if v.Load() != 0 || admitted.Load() == 0 {
		t.Fatalf("after the rounds: counter %d, %d admitted", v.Load(), admitted.Load())
	}
	// Alone, a reservation past the bound is taken; with others, not.
	if !addBounded(&v, 2*bound, bound, 2*bound) || addBounded(&v, 1, bound, 1) {
		t.Fatal("a reservation alone past the bound refused, or one beside it taken")
	}
}
