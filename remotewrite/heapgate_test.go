package remotewrite

import (
	"bytes"
	"math"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/prompb"
)

// TestHandlerHeapLimit: while the live heap is over MaxHeapBytes every
// request gets 429 with Retry-After, its body unread and nothing written;
// once the heap is back under the bound the retried request is written. The
// heap is the process' real one, read as in production: the test holds a
// block of memory live past a bound set just above what the process had.
func TestHandlerHeapLimit(t *testing.T) {
	runtime.GC()
	before := readLiveHeap()
	if before == 0 {
		t.Fatalf("%s reads 0", liveHeapMetric)
	}
	cfg := DefaultConfig()
	const margin = 64 << 20
	cfg.MaxHeapBytes = int64(before) + margin
	cfg.RetryAfter = 2 * time.Second
	env := newTestEnv(t, cfg)
	body := encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		series("gated", []string{"a", "1"}, prompb.Sample{Timestamp: ms(0), Value: 1}),
	}})

	// Hold twice the margin live: the next request must be refused.
	hog := make([]byte, 2*margin)
	for i := range hog {
		hog[i] = byte(i)
	}
	runtime.GC()
	unread := &countingReader{r: bytes.NewReader(body)}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/write", unread)
	r.Header.Set("Content-Type", ctV1)
	w := httptest.NewRecorder()
	env.h.ServeHTTP(w, r)
	if w.Code != http.StatusTooManyRequests || !retryAfterValid(w.Header().Get("Retry-After"), 2*time.Second) {
		t.Fatalf("over the heap bound: %d, Retry-After %q: %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if unread.n != 0 {
		t.Errorf("a request refused for memory had its body read (%d bytes)", unread.n)
	}
	if n := len(env.read(t, "gated")); n != 0 {
		t.Fatalf("%d series written by a refused request", n)
	}
	if got := testutil.ToFloat64(env.h.m.rejected.WithLabelValues(ReasonHeapLimit)); got != 1 {
		t.Errorf("heap_limit rejections %v, want 1", got)
	}
	runtime.KeepAlive(hog) // live until here, garbage after

	// The memory is released: the sender's retry is written.
	runtime.GC()
	if w := env.post(body, ctV1, "snappy"); w.Code != http.StatusNoContent {
		t.Fatalf("under the heap bound again: %d %s", w.Code, w.Body)
	}
	if n := len(env.read(t, "gated")); n != 1 {
		t.Fatalf("%d series written after the retry, want 1", n)
	}
	if n, b := env.h.inflightReqs.Load(), env.h.inflightBytes.Load(); n != 0 || b != 0 {
		t.Errorf("in-flight accounting leaked: %d requests, %d bytes", n, b)
	}
}

// TestHeapLimitDefault: MaxHeapBytes 0 follows the runtime's soft memory
// limit (GOMEMLIMIT, set by strata serve), no limit means no gate, and a
// negative value switches the gate off whatever the limit.
func TestHeapLimitDefault(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })

	debug.SetMemoryLimit(math.MaxInt64)
	if got := DefaultConfig().withDefaults().MaxHeapBytes; got != 0 {
		t.Errorf("without a memory limit: MaxHeapBytes %d, want 0 (no gate)", got)
	}
	debug.SetMemoryLimit(10 << 30)
	want := int64(float64(10<<30) * DefaultHeapLimitRatio)
	if got := DefaultConfig().withDefaults().MaxHeapBytes; got != want {
		t.Errorf("GOMEMLIMIT 10GiB: MaxHeapBytes %d, want %d", got, want)
	}
	off := DefaultConfig()
	off.MaxHeapBytes = -1
	env := newTestEnv(t, off)
	env.h.liveHeap = func() uint64 { return math.MaxUint64 }
	body := encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		series("ungated", []string{"a", "1"}, prompb.Sample{Timestamp: ms(0), Value: 1}),
	}})
	if w := env.post(body, ctV1, "snappy"); w.Code != http.StatusNoContent {
		t.Fatalf("gate switched off: %d %s", w.Code, w.Body)
	}
}
