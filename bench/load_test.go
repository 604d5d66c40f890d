package bench

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeReceiver is a remote-write receiver that decodes every request and
// checks, like a TSDB head, that each series' timestamps only increase.
type fakeReceiver struct {
	t  *testing.T
	mu sync.Mutex
	// reply, when set, decides the status of the n-th request (0-based);
	// only 2xx replies store samples.
	reply    func(n int) (status int, header map[string]string)
	requests int
	samples  int
	last     map[string]int64
	ooo      int
	ctypes   map[string]int
	auth     string
}

func newFakeReceiver(t *testing.T) *fakeReceiver {
	return &fakeReceiver{t: t, last: map[string]int64{}, ctypes: map[string]int{}}
}

func (f *fakeReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	proto := ProtocolV1
	if strings.Contains(r.Header.Get("Content-Type"), "io.prometheus.write.v2.Request") {
		proto = ProtocolV2
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.requests
	f.requests++
	f.ctypes[r.Header.Get("Content-Type")]++
	if u, p, ok := r.BasicAuth(); ok {
		f.auth = u + ":" + p
	}
	if r.Header.Get("Content-Encoding") != "snappy" {
		http.Error(w, "want snappy", http.StatusUnsupportedMediaType)
		return
	}
	if f.reply != nil {
		status, hdr := f.reply(n)
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		if status/100 != 2 {
			http.Error(w, "scripted "+strconv.Itoa(status), status)
			return
		}
	}
	got, err := decodeBody(proto, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, s := range got {
		k := s.lset.String()
		if last, ok := f.last[k]; ok && s.t <= last {
			f.ooo++
		}
		f.last[k] = s.t
	}
	f.samples += len(got)
	// Like Strata: exact counts for 2.0, a 0 that means nothing for 1.0.
	written := 0
	if proto == ProtocolV2 {
		written = len(got)
	}
	w.Header().Set("X-Prometheus-Remote-Write-Samples-Written", strconv.Itoa(written))
	w.WriteHeader(http.StatusNoContent)
}

// noSleep replaces waiting: backoff and pacing return at once, and the
// requested durations are recorded.
type noSleep struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (n *noSleep) sleep(ctx context.Context, d time.Duration) error {
	n.mu.Lock()
	n.waits = append(n.waits, d)
	n.mu.Unlock()
	return ctx.Err()
}

func TestRunLoadOrderedAndCounted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		proto Protocol
		churn float64
		clock string
	}{
		{"v1", ProtocolV1, 0, TimestampsWallclock},
		{"v2", ProtocolV2, 0, TimestampsWallclock},
		{"v1 interval", ProtocolV1, 0, TimestampsInterval},
		{"v2 interval churn", ProtocolV2, 50, TimestampsInterval},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newFakeReceiver(t)
			srv := httptest.NewServer(rcv)
			defer srv.Close()
			ns := &noSleep{}
			cfg := LoadConfig{
				URL: srv.URL + "/api/v1/write", Protocol: tc.proto, Series: 2000, BatchSize: 500,
				Concurrency: 3, MaxRequests: 60, Duration: 30 * time.Second,
				ChurnPercent: tc.churn, ChurnInterval: 3 * time.Second,
				Timestamps: tc.clock, Backfill: 2 * time.Hour,
				Username: "u", Password: "p", sleep: ns.sleep,
			}
			res, err := RunLoad(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.StoppedBy != "max_requests" {
				t.Fatalf("stopped by %q, want max_requests", res.StoppedBy)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if rcv.requests != 60 || res.Requests != 60 {
				t.Fatalf("receiver saw %d requests, result says %d, want 60", rcv.requests, res.Requests)
			}
			if rcv.ooo != 0 {
				t.Fatalf("%d out-of-order samples", rcv.ooo)
			}
			if int64(rcv.samples) != res.SamplesAccepted {
				t.Fatalf("receiver stored %d samples, result accepted %d", rcv.samples, res.SamplesAccepted)
			}
			// Churn flushes partial batches; without it every batch is full.
			if tc.churn == 0 && res.SamplesAccepted != 60*500 {
				t.Fatalf("accepted %d samples, want %d", res.SamplesAccepted, 60*500)
			}
			if res.Status2xx != 60 || res.SamplesRefused != 0 || res.Retries != 0 {
				t.Fatalf("unexpected counts: %+v", res)
			}
			if rcv.auth != "u:p" {
				t.Fatalf("basic auth %q, want u:p", rcv.auth)
			}
			want := contentTypeV1
			if tc.proto == ProtocolV2 {
				want = contentTypeV2
			}
			if rcv.ctypes[want] != 60 {
				t.Fatalf("content types %v, want %q", rcv.ctypes, want)
			}
			if res.LastTimestamp <= res.FirstTimestamp {
				t.Fatalf("simulated time did not advance: %d..%d", res.FirstTimestamp, res.LastTimestamp)
			}
			if tc.churn > 0 && res.SeriesCreated <= res.Series {
				t.Fatalf("churn created no series: %d created, %d active", res.SeriesCreated, res.Series)
			}
			if tc.churn > 0 && len(rcv.last) <= res.Series {
				t.Fatalf("receiver saw %d series with churn, want more than %d", len(rcv.last), res.Series)
			}
			if res.ClientLatencyP99Seconds <= 0 || res.ClientLatencyP99Seconds < res.ClientLatencyP50Seconds {
				t.Fatalf("client latency p50 %g p99 %g", res.ClientLatencyP50Seconds, res.ClientLatencyP99Seconds)
			}
		})
	}
}

// TestRunLoadContinues checks that a second run started after the first's
// last timestamp sends nothing out of order, as Run's repetitions do.
func TestRunLoadContinues(t *testing.T) {
	for _, clock := range []string{TimestampsWallclock, TimestampsInterval} {
		t.Run(clock, func(t *testing.T) {
			rcv := newFakeReceiver(t)
			srv := httptest.NewServer(rcv)
			defer srv.Close()
			ns := &noSleep{}
			cfg := LoadConfig{URL: srv.URL, Series: 1000, BatchSize: 300, Concurrency: 2, MaxRequests: 25,
				Timestamps: clock, Backfill: time.Hour, sleep: ns.sleep}.withDefaults()
			gen, err := newGenerator(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				run, err := newLoadRun(cfg, gen, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatal(err)
				}
				res, err := run.run(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				cfg.StartTime = time.UnixMilli(res.LastTimestamp + 1)
			}
			if rcv.ooo != 0 {
				t.Fatalf("%d out-of-order samples across runs", rcv.ooo)
			}
		})
	}
}

// TestWallclockTimestamps checks that wallclock stamps follow the injected
// clock and never repeat, even when the clock stands still.
func TestWallclockTimestamps(t *testing.T) {
	rcv := newFakeReceiver(t)
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	fixed := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := LoadConfig{URL: srv.URL, Series: 200, Mix: Mix{DCGM: 1}, BatchSize: 200, Concurrency: 1, MaxRequests: 5,
		Now: func() time.Time { return fixed }}
	res, err := RunLoad(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rcv.ooo != 0 {
		t.Fatalf("%d out-of-order samples", rcv.ooo)
	}
	if res.FirstTimestamp != fixed.UnixMilli() || res.LastTimestamp < fixed.UnixMilli()+4 {
		t.Fatalf("timestamps %d..%d, want from %d, one ms per round", res.FirstTimestamp, res.LastTimestamp, fixed.UnixMilli())
	}
}

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		name      string
		replies   []int
		header    map[string]string
		wantWaits []time.Duration
		want429   int64
		want5xx   int64
	}{
		{
			name:      "5xx doubles from min backoff",
			replies:   []int{503, 500, 502},
			wantWaits: []time.Duration{30 * time.Millisecond, 60 * time.Millisecond, 120 * time.Millisecond},
			want5xx:   3,
		},
		{
			name:      "429 and 5xx honour Retry-After",
			replies:   []int{429, 429, 503},
			header:    map[string]string{"Retry-After": "2"},
			wantWaits: []time.Duration{2 * time.Second, 2 * time.Second, 2 * time.Second},
			want429:   2,
			want5xx:   1,
		},
		{
			name:      "capped at max backoff",
			replies:   []int{500, 500, 500, 500, 500, 500, 500, 500, 500},
			wantWaits: []time.Duration{30, 60, 120, 240, 480, 960, 1920, 3840, 5000},
			want5xx:   9,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rcv := newFakeReceiver(t)
			rcv.reply = func(n int) (int, map[string]string) {
				if n < len(tc.replies) {
					return tc.replies[n], tc.header
				}
				return http.StatusNoContent, nil
			}
			srv := httptest.NewServer(rcv)
			defer srv.Close()
			ns := &noSleep{}
			// One sender and one batch, so the request order is the script's.
			cfg := LoadConfig{URL: srv.URL, Series: 96, Mix: Mix{DCGM: 1}, Concurrency: 1, BatchSize: 96,
				MaxRequests: len(tc.replies) + 1, sleep: ns.sleep}
			res, err := RunLoad(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			want := tc.wantWaits
			if tc.name == "capped at max backoff" {
				want = make([]time.Duration, len(tc.wantWaits))
				for i, w := range tc.wantWaits {
					want[i] = w * time.Millisecond
				}
			}
			waits := ns.waits
			if len(waits) != len(want) {
				t.Fatalf("waits %v, want %v", waits, want)
			}
			for i := range want {
				if waits[i] != want[i] {
					t.Fatalf("waits %v, want %v", waits, want)
				}
			}
			if res.Status429 != tc.want429 || res.Status5xx != tc.want5xx || res.Retries != int64(len(want)) {
				t.Fatalf("429=%d 5xx=%d retries=%d, want %d %d %d", res.Status429, res.Status5xx, res.Retries, tc.want429, tc.want5xx, len(want))
			}
			if res.Status2xx != 1 || res.SamplesAccepted != int64(res.Series) || res.SamplesRefused != 0 {
				t.Fatalf("the retried batch was not accepted once: %+v", res)
			}
			if len(res.Errors) == 0 {
				t.Fatal("no error message kept")
			}
		})
	}
}

func TestRefusedNotRetried(t *testing.T) {
	rcv := newFakeReceiver(t)
	rcv.reply = func(n int) (int, map[string]string) {
		if n%2 == 0 {
			return http.StatusBadRequest, nil
		}
		return http.StatusNoContent, nil
	}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	ns := &noSleep{}
	cfg := LoadConfig{URL: srv.URL, Series: 1000, BatchSize: 100, Concurrency: 1, MaxRequests: 10, sleep: ns.sleep}
	res, err := RunLoad(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Status4xx != 5 || res.Status2xx != 5 || res.Retries != 0 {
		t.Fatalf("4xx=%d 2xx=%d retries=%d, want 5 5 0", res.Status4xx, res.Status2xx, res.Retries)
	}
	if res.SamplesRefused != 500 || res.SamplesAccepted != 500 {
		t.Fatalf("refused %d accepted %d, want 500 500", res.SamplesRefused, res.SamplesAccepted)
	}
	if !strings.Contains(strings.Join(res.Errors, " "), "HTTP 400") {
		t.Fatalf("errors %v do not name the 400", res.Errors)
	}
}

func TestRunLoadDurationBound(t *testing.T) {
	// The receiver always answers 503 and the sleep hook does not wait, so
	// only the duration can end this run; it must do so promptly.
	rcv := newFakeReceiver(t)
	rcv.reply = func(int) (int, map[string]string) { return http.StatusServiceUnavailable, nil }
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cfg := LoadConfig{URL: srv.URL, Series: 200, Concurrency: 2, Duration: 300 * time.Millisecond, MaxRequests: 1 << 30, MaxBackoff: 10 * time.Millisecond, MinBackoff: time.Millisecond}
	began := time.Now()
	res, err := RunLoad(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("run took %s with a 300ms bound", d)
	}
	if res.StoppedBy != "duration" || res.SamplesAccepted != 0 || res.SamplesDropped == 0 {
		t.Fatalf("stopped by %s, accepted %d, dropped %d", res.StoppedBy, res.SamplesAccepted, res.SamplesDropped)
	}
}

func TestRunLoadBadConfig(t *testing.T) {
	for _, cfg := range []LoadConfig{
		{},
		{URL: "ftp://x/"},
		{URL: "http://127.0.0.1:1", Protocol: "v3"},
		{URL: "http://127.0.0.1:1", ChurnPercent: 150},
		{URL: "http://127.0.0.1:1", Mix: Mix{DCGM: -1}},
	} {
		if _, err := RunLoad(context.Background(), cfg, nil); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}
