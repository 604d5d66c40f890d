package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"
)

// TestPushRemoteWrite pushes three model-time intervals to a receiver on
// 127.0.0.1 that throttles the first request; it decodes every body.
func TestPushRemoteWrite(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	got := map[string]int{} // metric name -> samples
	stamps := map[int64]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "slow down", http.StatusTooManyRequests)
			return
		}
		if r.Header.Get("Content-Encoding") != "snappy" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "bad headers", http.StatusUnsupportedMediaType)
			return
		}
		body, _ := io.ReadAll(r.Body)
		raw, err := snappy.Decode(nil, body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var wr prompb.WriteRequest
		if err := wr.Unmarshal(raw); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		for _, ts := range wr.Timeseries {
			for _, l := range ts.Labels {
				if l.Name == "__name__" {
					got[l.Value] += len(ts.Samples)
				}
			}
			for _, s := range ts.Samples {
				stamps[s.Timestamp] = true
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 9})
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := c.PushWith(ctx, PushOptions{URL: srv.URL, Interval: 15 * time.Second, Duration: 30 * time.Second, MaxSamplesPerSend: 500, MinBackoff: time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	if st.Retries != 1 || st.SamplesDropped != 0 || st.SamplesSent == 0 {
		t.Errorf("stats %+v, want one retry and nothing dropped", st)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(stamps) != 3 {
		t.Errorf("%d distinct timestamps, want 3 (0s, 15s, 30s)", len(stamps))
	}
	for _, name := range []string{"vllm:num_requests_running", "DCGM_FI_PROF_SM_ACTIVE", "ebpf_exporter_accept_latency_seconds_bucket"} {
		if got[name] == 0 {
			t.Errorf("no %s samples pushed", name)
		}
	}
	if v := testutil.ToFloat64(mustCounter(t, reg, "strata_sim_push_retries_total")); v != 1 {
		t.Errorf("retries metric %v", v)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: "copy"}, func() float64 { return mf.GetMetric()[0].GetCounter().GetValue() })
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

func TestPushDropsOnClientError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "invalid series", http.StatusBadRequest)
	}))
	defer srv.Close()
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 1})
	st, err := c.PushWith(context.Background(), PushOptions{URL: srv.URL, Interval: time.Second, Duration: time.Second, MinBackoff: time.Millisecond})
	if !errors.Is(err, ErrPushRejected) {
		t.Fatalf("error %v, want ErrPushRejected", err)
	}
	if st.Retries != 0 || st.SamplesSent != 0 || st.SamplesDropped == 0 {
		t.Errorf("stats %+v: a 400 must be dropped, never retried", st)
	}
}

func TestBackfillOrderAndGaps(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 2, Faults: []FaultSpec{
		{Kind: KindScrapeGap, Node: 0, GPU: intp(1), At: 2 * time.Minute, Duration: time.Minute},
	}})
	from := c.Config().Start
	last := int64(0)
	perTS := map[int64]int{}
	staleAt := map[int64]int{}
	err := c.Backfill(from, from.Add(5*time.Minute), 15*time.Second, func(l labels.Labels, ts int64, v float64) error {
		if ts < last {
			return errors.New("samples out of time order")
		}
		last = ts
		if l.Get("job") == "" || l.Get("instance") == "" {
			return errors.New("series without job/instance: " + l.String())
		}
		if value.IsStaleNaN(v) {
			if l.Get("instance") != "gpu-node-0:8001" {
				return errors.New("stale marker for a live target: " + l.String())
			}
			staleAt[ts]++
			return nil
		}
		perTS[ts]++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(perTS) != 21 {
		t.Fatalf("%d timestamps, want 21", len(perTS))
	}
	full := perTS[from.UnixMilli()]
	if gap := perTS[from.Add(150*time.Second).UnixMilli()]; gap >= full {
		t.Errorf("scrape gap did not remove the instance's series: %d vs %d", gap, full)
	}
	// The gap starts at 2m: the 2m sample is the first without the
	// instance, and carries one stale marker per vanished series.
	if len(staleAt) != 1 || staleAt[from.Add(2*time.Minute).UnixMilli()] != full-perTS[from.Add(2*time.Minute).UnixMilli()] {
		t.Errorf("stale markers %v, want %d at the gap's start", staleAt, full-perTS[from.Add(2*time.Minute).UnixMilli()])
	}
	if after := perTS[from.Add(4*time.Minute).UnixMilli()]; after != full {
		t.Errorf("series count %d after the gap, want %d", after, full)
	}
	if err := c.Backfill(from, from.Add(time.Minute), time.Second, func(labels.Labels, int64, float64) error { return nil }); err == nil {
		t.Error("backfill into the model's past must fail")
	}
}

func TestOpenMetricsParses(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 1, Seed: 2})
	var sb strings.Builder
	from := c.Config().Start
	if err := c.WriteOpenMetrics(&sb, from, from.Add(2*time.Minute), 15*time.Second); err != nil {
		t.Fatal(err)
	}
	body := []byte(sb.String())
	p, err := textparse.New(body, "application/openmetrics-text", labels.NewSymbolTable(), textparse.ParserOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("openmetrics parse after %d samples: %v", n, err)
		}
		if e == textparse.EntrySeries {
			_, ts, _ := p.Series()
			if ts == nil {
				t.Fatal("sample without timestamp")
			}
			n++
		}
	}
	if n == 0 || !strings.HasSuffix(sb.String(), "# EOF\n") {
		t.Fatalf("%d samples; EOF marker present: %v", n, strings.HasSuffix(sb.String(), "# EOF\n"))
	}
}

func TestHandlersServe(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 1, Seed: 2})
	clock := c.Config().Start.Add(time.Hour)
	hs := c.Handlers(func() time.Time { return clock })
	if len(hs) != 3 {
		t.Fatalf("%d handlers, want dcgm, vllm and ebpf", len(hs))
	}
	rec := httptest.NewRecorder()
	hs["/gpu-node-0/vllm/8000/metrics"].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/gpu-node-0/vllm/8000/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "vllm:num_requests_running") {
		t.Fatalf("status %d body %.200s", rec.Code, rec.Body.String())
	}
	if !c.Now().Equal(clock) {
		t.Errorf("scrape did not step the model to the clock: %s", c.Now())
	}
}

func TestSamplesIteratorStops(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 1, Seed: 2})
	from := c.Config().Start
	n := 0
	var lastT int64
	for l, s := range c.Samples(from, from.Add(time.Hour), 15*time.Second) {
		if l.IsEmpty() || s.T < lastT {
			t.Fatalf("bad sample %v %v", l, s)
		}
		lastT = s.T
		n++
		if n == 1000 {
			break
		}
	}
	if n != 1000 {
		t.Fatalf("%d samples", n)
	}
	// Breaking out stopped the model shortly after from, not at from+1h.
	if now := c.Now(); now.Sub(from) > 5*time.Minute {
		t.Errorf("model ran to %s after the loop stopped", now)
	}
}

// TestOpenMetricsIsWhatAPushStores: the OpenMetrics history holds the series
// and samples a push (Backfill) of the same range stores, with the targets'
// job and instance labels: without them the per-node and per-instance
// series of several targets were one series with several samples at every
// timestamp, and a backfill of the file kept one of them.
func TestOpenMetricsIsWhatAPushStores(t *testing.T) {
	cfg := Config{Nodes: 2, GPUsPerNode: 2, Seed: 3}
	a, b := mustNew(t, cfg), mustNew(t, cfg)
	from := a.Config().Start
	to := from.Add(4 * time.Minute)
	var sb strings.Builder
	if err := a.WriteOpenMetrics(&sb, from, to, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	type key struct {
		series string
		t      int64
	}
	written := map[key]float64{}
	p, err := textparse.New([]byte(sb.String()), "application/openmetrics-text", labels.NewSymbolTable(), textparse.ParserOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if e != textparse.EntrySeries {
			continue
		}
		var l labels.Labels
		p.Labels(&l)
		_, ts, v := p.Series()
		k := key{l.String(), *ts}
		if _, dup := written[k]; dup {
			t.Fatalf("%s has two samples at %d", k.series, k.t)
		}
		written[k] = v
	}
	pushed := 0
	err = b.Backfill(from, to, 15*time.Second, func(l labels.Labels, ts int64, v float64) error {
		if value.IsStaleNaN(v) {
			return nil
		}
		pushed++
		got, ok := written[key{l.String(), ts}]
		if !ok {
			return fmt.Errorf("pushed %s at %d is not in the OpenMetrics history", l, ts)
		}
		// The exposition's formats round (DCGM's integers, six decimals).
		if math.Abs(got-v) > max(0.5, 1e-6*math.Abs(v)) && !(math.IsNaN(got) && math.IsNaN(v)) {
			return fmt.Errorf("%s at %d: %v written, %v pushed", l, ts, got, v)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pushed != len(written) {
		t.Fatalf("%d samples pushed, %d written", pushed, len(written))
	}
}
