package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that only moves when a sender waits on it, so a paced
// load runs at once and deterministically.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	c.advance(d)
	return ctx.Err()
}

// pacedReceiver records, per request, what a paced load must get right: no
// sample stamped after the clock at its arrival, each series' samples one
// interval apart, and how old a request's oldest sample is.
type pacedReceiver struct {
	t     *testing.T
	clock *fakeClock

	mu       sync.Mutex
	future   int
	last     map[string]int64
	gaps     map[int64]int   // time between a series' consecutive samples -> count
	offsets  map[int64]bool  // timestamps modulo the interval
	spans    []time.Duration // newest minus oldest timestamp of each request
	sizes    []int
	samples  int
	interval int64
}

func (p *pacedReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	got, err := decodeBody(ProtocolV1, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	now := p.clock.Now().UnixMilli()
	p.mu.Lock()
	defer p.mu.Unlock()
	lo, hi := got[0].t, got[0].t
	for _, s := range got {
		if s.t > now {
			p.future++
		}
		k := s.lset.String()
		if last, ok := p.last[k]; ok {
			p.gaps[s.t-last]++
		}
		p.last[k] = s.t
		p.offsets[s.t%p.interval] = true
		lo, hi = min(lo, s.t), max(hi, s.t)
	}
	p.spans = append(p.spans, time.Duration(hi-lo)*time.Millisecond)
	p.sizes = append(p.sizes, len(got))
	p.samples += len(got)
	w.WriteHeader(http.StatusNoContent)
}

func newPacedReceiver(t *testing.T, clock *fakeClock, interval time.Duration) *pacedReceiver {
	return &pacedReceiver{t: t, clock: clock, last: map[string]int64{}, gaps: map[int64]int{},
		offsets: map[int64]bool{}, interval: interval.Milliseconds()}
}

// TestPacedLoad checks the paced mode: every series one sample per interval,
// exactly an interval apart, the units spread over the interval rather than
// sent in one burst, never a sample ahead of the clock, and no lag when the
// receiver keeps up.
func TestPacedLoad(t *testing.T) {
	for _, interval := range []time.Duration{time.Second, 15 * time.Second} {
		t.Run(interval.String(), func(t *testing.T) {
			clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 123e6, time.UTC)}
			rcv := newPacedReceiver(t, clock, interval)
			srv := httptest.NewServer(rcv)
			defer srv.Close()
			cfg := LoadConfig{
				URL: srv.URL, Series: 2000, BatchSize: 500, Concurrency: 1, MaxRequests: 40,
				Timestamps: TimestampsInterval, Interval: interval, Duration: time.Minute,
				Now: clock.Now, sleep: clock.sleep,
			}
			if !cfg.Paced() {
				t.Fatal("interval timestamps without backfill are not reported as paced")
			}
			res, err := RunLoad(context.Background(), cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if rcv.future != 0 {
				t.Fatalf("%d samples arrived stamped after the clock", rcv.future)
			}
			if len(rcv.gaps) != 1 || rcv.gaps[interval.Milliseconds()] == 0 {
				t.Fatalf("gaps between a series' samples %v, want only %d ms", rcv.gaps, interval.Milliseconds())
			}
			// 61 units on one sender: one offset each within the interval.
			if len(rcv.offsets) < 50 {
				t.Fatalf("samples at %d distinct offsets within the interval, want them spread over one per unit", len(rcv.offsets))
			}
			// At 15 s a sender fills less than a batch within the 5 s batch
			// deadline, so its batches are partial.
			if int64(rcv.samples) != res.SamplesAccepted || res.SamplesAccepted > 40*500 || res.SamplesAccepted < 40*250 {
				t.Fatalf("receiver got %d samples, result says %d, want 40 requests' worth", rcv.samples, res.SamplesAccepted)
			}
			if res.PacedSeconds <= 0 || res.MaxScheduleLagSeconds != 0 {
				t.Fatalf("paced %.1fs, lag %.3fs: want waits and no lag", res.PacedSeconds, res.MaxScheduleLagSeconds)
			}
			// One round of every series per interval of real time.
			rounds := float64(res.LastTimestamp-res.FirstTimestamp) / float64(interval.Milliseconds())
			if want := float64(res.SamplesAccepted) / float64(res.Series); rounds < want-1.5 || rounds > want+1.5 {
				t.Fatalf("the run spanned %.1f intervals for %.1f rounds of samples", rounds, want)
			}
		})
	}
}

// TestPacedBatchDeadline checks that a sender too small to fill a batch in
// a few intervals sends it after BatchDeadline of sample time, as
// Prometheus' batch_send_deadline does, instead of holding samples back.
func TestPacedBatchDeadline(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	rcv := newPacedReceiver(t, clock, time.Second)
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	cfg := LoadConfig{
		URL: srv.URL, Series: 192, Mix: Mix{DCGM: 1}, BatchSize: 2000, Concurrency: 1, MaxRequests: 4,
		Timestamps: TimestampsInterval, Now: clock.Now, sleep: clock.sleep,
	}
	if _, err := RunLoad(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.spans) != 4 {
		t.Fatalf("%d requests, want 4", len(rcv.spans))
	}
	for i, span := range rcv.spans {
		if span >= DefaultBatchDeadline || rcv.sizes[i] >= 2000 || rcv.sizes[i] < 192*4 {
			t.Fatalf("request %d: %d samples over %s, want a partial batch of about 5 s", i, rcv.sizes[i], span)
		}
	}
}

// TestPacedScenarioResumesAtClock checks that a paced scenario's next
// repetition starts at the real clock after the queries rather than
// bursting to catch up with the time they took, and continues every series
// in order.
func TestPacedScenarioResumesAtClock(t *testing.T) {
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	rcv := newPacedReceiver(t, clock, time.Second)
	mux := http.NewServeMux()
	mux.Handle("/api/v1/write", rcv)
	mux.HandleFunc("/api/v1/query_range", func(w http.ResponseWriter, r *http.Request) {
		clock.advance(time.Minute) // a slow query
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	sc := Scenario{
		Load: LoadConfig{
			URL: srv.URL + "/api/v1/write", Series: 1000, BatchSize: 500, Concurrency: 1, MaxRequests: 10,
			Timestamps: TimestampsInterval, Now: clock.Now, sleep: clock.sleep,
		},
		Repeats:       2,
		Queries:       []DashboardQuery{{Name: "up", Expr: "up"}},
		QueryRanges:   []time.Duration{time.Hour},
		QueryRepeats:  1,
		SkipRollupLag: true,
	}
	rep, err := Run(context.Background(), sc)
	if err != nil {
		t.Fatal(err)
	}
	first, second := rep.Runs[0].Load, rep.Runs[1].Load
	if min := first.LastTimestamp + time.Minute.Milliseconds(); second.FirstTimestamp < min {
		t.Fatalf("second repetition starts at %d, before the clock after the queries (%d)", second.FirstTimestamp, min)
	}
	if second.MaxScheduleLagSeconds != 0 {
		t.Fatalf("second repetition lagged %.1fs behind its schedule: it caught up instead of resuming", second.MaxScheduleLagSeconds)
	}
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	for gap := range rcv.gaps {
		if gap <= 0 {
			t.Fatalf("out-of-order or repeated samples across repetitions: gaps %v", rcv.gaps)
		}
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(md.String(), "- paced: every series sends one sample every 1s") {
		t.Fatalf("markdown does not say the load was paced:\n%s", md.String())
	}
	if strings.Contains(md.String(), "waited for the real clock") {
		t.Fatalf("a paced run is flagged as limited by its schedule:\n%s", md.String())
	}
}

func TestServerResult(t *testing.T) {
	const mib = 1 << 20
	// A ramp, then a plateau at 200 MiB over the last quarter with one
	// spike: the steady state is the plateau, the peak the spike.
	var points []RSSPoint
	for i := range 101 {
		b := int64(200 * mib)
		switch {
		case i < 75:
			b = int64(i) * 2 * mib
		case i == 90:
			b = 1000 * mib
		}
		// The anonymous part: 100 MiB less, its spike at i == 80.
		a := b - 100*mib
		if i == 80 {
			a = 900 * mib
		}
		points = append(points, RSSPoint{Seconds: float64(i), Bytes: b, AnonBytes: max(a, 0)})
	}
	sr := serverResult(ProcSample{CPUSeconds: 10, RSSBytes: 0}, ProcSample{CPUSeconds: 60, RSSBytes: 200 * mib, HWMBytes: 1000 * mib},
		points, LoadResult{ElapsedSeconds: 100, SamplesAccepted: 1e6, Series: 1000})
	if sr.SteadyRSSBytes != 200*mib || sr.PeakRSSBytes != 1000*mib {
		t.Fatalf("steady %g peak %d, want 200 MiB and 1000 MiB", sr.SteadyRSSBytes/mib, sr.PeakRSSBytes/mib)
	}
	if sr.SteadyRSSAnonBytes != 100*mib || sr.PeakRSSAnonBytes != 900*mib {
		t.Fatalf("anonymous: steady %g peak %d, want 100 MiB and 900 MiB", sr.SteadyRSSAnonBytes/mib, sr.PeakRSSAnonBytes/mib)
	}
	if sr.CPUCores != 0.5 || sr.SamplesPerCPUSecond != 2e4 || sr.CPUSecondsPerMillionSamples != 50 {
		t.Fatalf("cores %g, samples per CPU-s %g, CPU-s per million %g", sr.CPUCores, sr.SamplesPerCPUSecond, sr.CPUSecondsPerMillionSamples)
	}
	if sr.SteadyRSSPerActiveSeriesBytes != 200*mib/1000.0 || sr.RSSPerActiveSeriesBytes != 1000*mib/1000.0 {
		t.Fatalf("per series: steady %g peak %g", sr.SteadyRSSPerActiveSeriesBytes, sr.RSSPerActiveSeriesBytes)
	}
}

// TestPacedMaxRequests: a paced load's default request bound follows its
// schedule, so a run of two hours at 50,000 series of 1 Hz (25 requests a
// second in batches of 2,000) is not cut at 100,000 requests (66.7
// minutes); an unpaced one keeps 100,000, and a bound given is kept.
func TestPacedMaxRequests(t *testing.T) {
	paced := LoadConfig{Series: 50_000, BatchSize: 2000, Concurrency: 4, Timestamps: TimestampsInterval,
		Interval: time.Second, Duration: 2 * time.Hour}
	if got, want := paced.withDefaults().MaxRequests, 2*(25+4)*7200; got != want {
		t.Errorf("paced, 2 h: MaxRequests %d, want %d", got, want)
	}
	short := paced
	short.Duration = time.Minute
	if got := short.withDefaults().MaxRequests; got != DefaultMaxRequests {
		t.Errorf("paced, 1 m: MaxRequests %d, want the default %d", got, DefaultMaxRequests)
	}
	unpaced := paced
	unpaced.Timestamps = TimestampsWallclock
	if got := unpaced.withDefaults().MaxRequests; got != DefaultMaxRequests {
		t.Errorf("unpaced: MaxRequests %d, want %d", got, DefaultMaxRequests)
	}
	given := paced
	given.MaxRequests = 500
	if got := given.withDefaults().MaxRequests; got != 500 {
		t.Errorf("given 500: MaxRequests %d", got)
	}
}
