package remotewrite

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/prompb"
)

// TestHandlerStorageGate: while the storage gate refuses (the disk nearly
// full), remote write and OTLP get 503 with Retry-After and the gate's
// reason, their bodies unread and nothing written; once it lets them
// through, the senders' retries are written.
func TestHandlerStorageGate(t *testing.T) {
	var full atomic.Bool
	full.Store(true)
	cfg := DefaultConfig()
	cfg.RetryAfter = 2 * time.Second
	cfg.StorageGate = func() error {
		if full.Load() {
			return errors.New("disk space low: 10 bytes free")
		}
		return nil
	}
	env := newTestEnv(t, cfg)
	o := newOTLP(t, env.h, env.reg)
	body := encodeV1(t, &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{
		series("gated", []string{"a", "1"}, prompb.Sample{Timestamp: ms(0), Value: 1}),
	}})
	otlp := otlpBody(t, otlpMetrics(false), false)

	unread := &countingReader{r: bytes.NewReader(body)}
	r := httptest.NewRequest(http.MethodPost, "/api/v1/write", unread)
	r.Header.Set("Content-Type", ctV1)
	w := httptest.NewRecorder()
	env.h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable || !retryAfterValid(w.Header().Get("Retry-After"), 2*time.Second) || !strings.Contains(w.Body.String(), "disk space low") {
		t.Fatalf("remote write with the disk full: %d, Retry-After %q: %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if unread.n != 0 {
		t.Errorf("a request refused for disk space had its body read (%d bytes)", unread.n)
	}
	w = postOTLP(o, otlp, otlpProtobuf, "")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("OTLP with the disk full: %d, Retry-After %q: %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if n := len(env.read(t, "gated")); n != 0 {
		t.Fatalf("%d series written by a refused request", n)
	}
	if got := testutil.ToFloat64(env.h.m.rejected.WithLabelValues(ReasonDiskSpace)); got != 2 {
		t.Errorf("disk_space_low rejections %v, want 2", got)
	}

	full.Store(false)
	if w := env.post(body, ctV1, "snappy"); w.Code != http.StatusNoContent {
		t.Fatalf("with space again: %d %s", w.Code, w.Body)
	}
	if w := postOTLP(o, otlp, otlpProtobuf, ""); w.Code != http.StatusOK {
		t.Fatalf("OTLP with space again: %d %s", w.Code, w.Body)
	}
	if n := len(env.read(t, "gated")); n != 1 {
		t.Fatalf("%d series written after the retry, want 1", n)
	}
	if n, b := env.h.inflightReqs.Load(), env.h.inflightBytes.Load(); n != 0 || b != 0 {
		t.Errorf("in-flight accounting leaked: %d requests, %d bytes", n, b)
	}
}
