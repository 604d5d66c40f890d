package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"

	"github.com/strata-dev/strata/internal/rwclient"
)

// LoadResult is what one bounded load run measured on the client side.
type LoadResult struct {
	Started        time.Time `json:"started"`
	ElapsedSeconds float64   `json:"elapsed_seconds"`
	// StoppedBy says which bound ended the run: "duration", "max_requests"
	// or "canceled".
	StoppedBy string `json:"stopped_by"`
	// Series is the number of active series; SeriesCreated also counts the
	// series that churn replaced.
	Series        int `json:"series"`
	SeriesCreated int `json:"series_created"`

	Requests      int64 `json:"requests"` // HTTP attempts, retries included
	Status2xx     int64 `json:"status_2xx"`
	Status4xx     int64 `json:"status_4xx"` // 4xx other than 429: refused, never retried
	Status429     int64 `json:"status_429"`
	Status5xx     int64 `json:"status_5xx"`
	NetworkErrors int64 `json:"network_errors"`
	Retries       int64 `json:"retries"`

	// SamplesAccepted counts samples in 2xx replies (or the RW 2.0
	// X-Prometheus-Remote-Write-Samples-Written count when the receiver sends
	// it). SamplesRefused counts samples a 4xx refused; SamplesDropped those
	// still being retried when a bound ended the run.
	SamplesAccepted int64 `json:"samples_accepted"`
	SamplesRefused  int64 `json:"samples_refused"`
	SamplesDropped  int64 `json:"samples_dropped"`

	AcceptedSamplesPerSecond float64 `json:"accepted_samples_per_second"`
	ClientLatencyP50Seconds  float64 `json:"client_latency_p50_seconds"`
	ClientLatencyP99Seconds  float64 `json:"client_latency_p99_seconds"`
	// PacedSeconds is the sender time spent waiting for the real clock (summed
	// over senders): a run with much pacing was limited by Series/Interval,
	// not by the receiver. That is the point of a paced run (LoadConfig.Paced).
	PacedSeconds float64 `json:"paced_seconds"`
	// MaxScheduleLagSeconds is, with "interval" timestamps, the most a
	// sample was generated after its timestamp: under a second or so when the
	// receiver keeps up with a paced load, growing when it falls behind (or
	// the backfill, for a run that starts in the past).
	MaxScheduleLagSeconds float64 `json:"max_schedule_lag_seconds"`

	// FirstTimestamp and LastTimestamp (ms) are the simulated time span sent.
	FirstTimestamp int64 `json:"first_timestamp_ms"`
	LastTimestamp  int64 `json:"last_timestamp_ms"`

	// Timeline is accepted samples per second over the run.
	Timeline []TimelinePoint `json:"timeline"`
	// Errors holds the first distinct error replies, for diagnosis.
	Errors []string `json:"errors,omitempty"`
}

// TimelinePoint is the accepted-sample rate in one step of the run.
type TimelinePoint struct {
	Seconds          float64 `json:"seconds"` // since the run started
	SamplesPerSecond float64 `json:"samples_per_second"`
}

// maxSkewRounds bounds how far one sender may run ahead of the slowest, in
// rounds: a TSDB head refuses samples older than about an hour behind its
// newest, so senders must stay close together in simulated time.
const maxSkewRounds = 30

// maxErrors is how many distinct error messages a result keeps.
const maxErrors = 5

// errStop ends a sender: a bound was reached.
var errStop = errors.New("load bound reached")

// RunLoad drives one bounded load at cfg.URL and returns what it measured. It
// returns an error for an invalid config, and the partial result with ctx's
// error when ctx ends before a bound does. Refused and failed requests are
// not errors: they are counted in the result.
func RunLoad(ctx context.Context, cfg LoadConfig, logger *slog.Logger) (LoadResult, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return LoadResult{}, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	gen, err := newGenerator(cfg)
	if err != nil {
		return LoadResult{}, err
	}
	l, err := newLoadRun(cfg, gen, logger)
	if err != nil {
		return LoadResult{}, err
	}
	return l.run(ctx)
}

// loadRun is the state of one RunLoad call.
type loadRun struct {
	cfg    LoadConfig
	gen    *generator
	logger *slog.Logger
	http   *http.Client
	client *rwclient.Client

	budget atomic.Int64 // requests left
	byReq  atomic.Bool  // the request budget ended the run

	requests, s2xx, s4xx, s429, s5xx, netErr, retries atomic.Int64
	accepted, refused, dropped, created               atomic.Int64
	pacedNanos, lagNanos                              atomic.Int64
	senders                                           int // set by run

	errMu  sync.Mutex
	errors []string
}

func newLoadRun(cfg LoadConfig, gen *generator, logger *slog.Logger) (*loadRun, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = cfg.Concurrency
	tr.DisableCompression = true
	l := &loadRun{cfg: cfg, gen: gen, logger: logger, http: &http.Client{Transport: tr, Timeout: cfg.Timeout}}
	l.budget.Store(int64(cfg.MaxRequests))
	enc := newEncoder(cfg.Protocol)
	var err error
	l.client, err = rwclient.New(rwclient.Config{
		URL: cfg.URL, ContentType: enc.contentType(), Version: enc.version(), ContentEncoding: enc.contentEncoding(),
		KeepBody: cfg.Protocol == ProtocolOTLP, UserAgent: "strata-bench",
		Username: cfg.Username, Password: cfg.Password, HTTPClient: l.http,
		MinBackoff: cfg.MinBackoff, MaxBackoff: cfg.MaxBackoff,
		Admit: func() bool { return l.budget.Add(-1) >= 0 },
		Sleep: cfg.sleep, Now: cfg.Now,
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// sender owns a fixed share of the units, like a Prometheus shard, so each
// series is sent by one goroutine in timestamp order.
type sender struct {
	id        int
	units     []*unit
	enc       *encoder
	batch     []sampleRef
	latencies []float64
	lastTS    int64
	// due is when, under LoadConfig.Rate, the sender may send its next
	// batch.
	due time.Time
}

func (l *loadRun) run(parent context.Context) (LoadResult, error) {
	cfg := l.cfg
	ctx, cancel := context.WithTimeout(parent, cfg.Duration)
	defer cancel()
	defer l.http.CloseIdleConnections()

	senders := make([]*sender, min(cfg.Concurrency, len(l.gen.units)))
	for i := range senders {
		senders[i] = &sender{id: i, enc: newEncoder(cfg.Protocol), batch: make([]sampleRef, 0, cfg.BatchSize)}
	}
	l.senders = len(senders)
	for i, u := range l.gen.units {
		s := senders[i%len(senders)]
		s.units = append(s.units, u)
	}
	step := cfg.Interval.Milliseconds()
	start := cfg.StartTime
	if start.IsZero() {
		start = cfg.Now().Add(-cfg.Backfill)
	}
	startMs := start.UnixMilli()
	if cfg.Timestamps == TimestampsInterval {
		// Up, not down: StartTime is the earliest timestamp allowed, and a
		// repeated run sets it just after the previous run's last one.
		startMs = (startMs + step - 1) / step * step
	}

	gate := newRoundGate(len(senders))
	stopGate := context.AfterFunc(ctx, gate.stop)
	defer stopGate()

	res := LoadResult{Started: cfg.Now(), Series: len(l.gen.series), FirstTimestamp: startMs}
	began := time.Now()
	timelineDone := make(chan []TimelinePoint, 1)
	stopTimeline := make(chan struct{})
	go func() { timelineDone <- l.timeline(stopTimeline, began) }()

	var wg sync.WaitGroup
	for _, s := range senders {
		wg.Go(func() {
			defer gate.finish(s.id)
			l.runSender(ctx, s, gate, startMs, step)
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	close(stopTimeline)
	res.Timeline = <-timelineDone

	res.ElapsedSeconds = elapsed.Seconds()
	switch {
	case parent.Err() != nil:
		res.StoppedBy = "canceled"
	case l.byReq.Load():
		res.StoppedBy = "max_requests"
	default:
		res.StoppedBy = "duration"
	}
	res.SeriesCreated = len(l.gen.series) + int(l.created.Load())
	res.Requests = l.requests.Load()
	res.Status2xx, res.Status4xx, res.Status429, res.Status5xx = l.s2xx.Load(), l.s4xx.Load(), l.s429.Load(), l.s5xx.Load()
	res.NetworkErrors, res.Retries = l.netErr.Load(), l.retries.Load()
	res.SamplesAccepted, res.SamplesRefused, res.SamplesDropped = l.accepted.Load(), l.refused.Load(), l.dropped.Load()
	if res.ElapsedSeconds > 0 {
		res.AcceptedSamplesPerSecond = float64(res.SamplesAccepted) / res.ElapsedSeconds
	}
	res.PacedSeconds = time.Duration(l.pacedNanos.Load()).Seconds()
	res.MaxScheduleLagSeconds = time.Duration(l.lagNanos.Load()).Seconds()
	var lat []float64
	res.LastTimestamp = startMs
	for _, s := range senders {
		lat = append(lat, s.latencies...)
		res.LastTimestamp = max(res.LastTimestamp, s.lastTS)
	}
	res.ClientLatencyP50Seconds = quantile(lat, 0.5)
	res.ClientLatencyP99Seconds = quantile(lat, 0.99)
	res.Errors = l.errors
	l.logger.Info("load run finished", "accepted", res.SamplesAccepted, "refused", res.SamplesRefused,
		"dropped", res.SamplesDropped, "samples_per_second", math.Round(res.AcceptedSamplesPerSecond),
		"stopped_by", res.StoppedBy, "elapsed", elapsed.Round(time.Millisecond))
	return res, parent.Err()
}

// runSender generates and sends the sender's units round after round until a
// bound is reached.
//
// With "interval" timestamps a round is spread over the interval, as a
// Prometheus spreads its scrapes: the sender's i-th of n units is stamped
// i/n of an interval after the round's start and is generated no earlier
// than that (pace), so a paced load arrives evenly rather than in one burst
// per interval. A series' samples stay exactly Interval apart.
func (l *loadRun) runSender(ctx context.Context, s *sender, gate *roundGate, startMs, step int64) {
	dt := l.cfg.Interval.Seconds()
	churnRounds := int64(0)
	if l.cfg.ChurnPercent > 0 {
		churnRounds = max(1, l.cfg.ChurnInterval.Milliseconds()/step)
	}
	wallclock := l.cfg.Timestamps == TimestampsWallclock
	deadline := l.cfg.BatchDeadline.Milliseconds()
	prev := startMs - 1
	for r := int64(0); ; r++ {
		var ts int64
		if wallclock {
			ts = max(l.cfg.Now().UnixMilli(), prev+1)
			if err := ctx.Err(); err != nil {
				return
			}
			// Counters and histograms advance by the real time between
			// rounds, so rate() over the data gives the configured rates.
			if r > 0 {
				dt = float64(ts-prev) / 1000
			}
		} else {
			ts = startMs + r*step
		}
		prev = ts
		if !gate.wait(r, s.id) {
			return
		}
		if churnRounds > 0 && r > 0 && r%churnRounds == 0 {
			// Send what is pending first: its samples belong to the old
			// labels, which churn is about to rewrite.
			if l.flush(ctx, s) != nil {
				return
			}
			for _, u := range s.units {
				if l.gen.maybeChurn(u, l.cfg.ChurnPercent) {
					l.created.Add(int64(u.count))
				}
			}
		}
		for i, u := range s.units {
			uts := ts
			if !wallclock {
				uts = ts + int64(i)*step/int64(len(s.units))
				// Like Prometheus' batch_send_deadline: a batch does not
				// wait for more samples longer than that.
				if len(s.batch) > 0 && uts-s.batch[0].t >= deadline {
					if l.flush(ctx, s) != nil {
						return
					}
				}
				if err := l.pace(ctx, uts); err != nil {
					return
				}
			}
			// Recorded before any sample of the unit is sent: the next run
			// must start after every timestamp that may have reached the
			// target.
			s.lastTS = uts
			u.advance(dt)
			for _, gr := range u.groups {
				for j, v := range gr.vals {
					s.batch = append(s.batch, sampleRef{ref: int32(gr.first + j), t: uts, v: v})
					if len(s.batch) == l.cfg.BatchSize {
						if l.flush(ctx, s) != nil {
							return
						}
					}
				}
			}
		}
	}
}

// pace waits until the real clock has reached ts, so no sample is in the
// future, and records how far behind ts the clock already was.
func (l *loadRun) pace(ctx context.Context, ts int64) error {
	ahead := time.Duration(ts-l.cfg.Now().UnixMilli()) * time.Millisecond
	if ahead <= 0 {
		for lag := int64(-ahead); ; {
			cur := l.lagNanos.Load()
			if lag <= cur || l.lagNanos.CompareAndSwap(cur, lag) {
				break
			}
		}
		return ctx.Err()
	}
	l.pacedNanos.Add(int64(ahead))
	return l.cfg.sleep(ctx, ahead)
}

// maxRateDebt is how far behind its LoadConfig.Rate schedule a sender may
// fall (held back by a slow or refusing receiver) before the schedule
// restarts from now: the offered rate stays the configured one instead of
// bursting to make up for the time the receiver took.
const maxRateDebt = time.Second

// throttle waits, under LoadConfig.Rate, until the sender may send n more
// samples at its share of the rate.
func (l *loadRun) throttle(ctx context.Context, s *sender, n int) error {
	if l.cfg.Rate <= 0 {
		return nil
	}
	share := l.cfg.Rate / float64(l.senders)
	now := l.cfg.Now()
	if s.due.IsZero() || now.Sub(s.due) > maxRateDebt {
		s.due = now
	}
	wait := s.due.Sub(now)
	s.due = s.due.Add(time.Duration(float64(n) / share * float64(time.Second)))
	if wait <= 0 {
		return ctx.Err()
	}
	l.pacedNanos.Add(int64(wait))
	return l.cfg.sleep(ctx, wait)
}

// flush encodes and sends the sender's pending batch.
func (l *loadRun) flush(ctx context.Context, s *sender) error {
	if len(s.batch) == 0 {
		return nil
	}
	n := len(s.batch)
	if err := l.throttle(ctx, s, n); err != nil {
		s.batch = s.batch[:0]
		l.dropped.Add(int64(n))
		return errStop
	}
	body, err := s.enc.encode(l.gen.series, s.batch)
	s.batch = s.batch[:0]
	if err != nil {
		l.dropped.Add(int64(n))
		l.noteError(err.Error())
		return errStop
	}
	return l.send(ctx, s, body, n)
}

// send posts one body through the remote-write client, which retries like
// Prometheus' queue manager: 5xx, 429 and network errors after a backoff
// that starts at MinBackoff and doubles up to MaxBackoff, or after the
// reply's Retry-After; other 4xx replies are refusals and are never retried.
// Every attempt is counted; the request budget is the client's Admit.
func (l *loadRun) send(ctx context.Context, s *sender, body []byte, samples int) error {
	n := int64(samples)
	observe := func(a rwclient.Attempt) {
		l.requests.Add(1)
		s.latencies = append(s.latencies, a.Latency.Seconds())
		switch {
		case a.Err != nil:
			if ctx.Err() == nil {
				l.netErr.Add(1)
				l.noteError(a.Err.Error())
			}
		case a.Status/100 == 2:
			l.s2xx.Add(1)
		case a.Status == http.StatusTooManyRequests:
			l.s429.Add(1)
			l.noteError(fmt.Sprintf("HTTP %d: %s", a.Status, a.Message))
		case a.Status/100 == 5:
			l.s5xx.Add(1)
			l.noteError(fmt.Sprintf("HTTP %d: %s", a.Status, a.Message))
		default:
			l.s4xx.Add(1)
			l.noteError(fmt.Sprintf("HTTP %d: %s", a.Status, a.Message))
		}
		if a.Retry {
			l.retries.Add(1)
		}
	}
	last, err := l.client.Send(ctx, body, observe)
	switch {
	case err == nil:
		ok := l.written(last, n)
		l.accepted.Add(ok)
		l.refused.Add(n - ok)
		return nil
	case errors.Is(err, rwclient.ErrRejected):
		ok := min(l.written(last, 0), n)
		l.accepted.Add(ok)
		l.refused.Add(n - ok)
		return nil
	case errors.Is(err, rwclient.ErrNotAdmitted):
		l.byReq.Store(true)
	}
	l.dropped.Add(n)
	return errStop
}

// written is how many of a request's samples a reply says were written, or
// def when it does not say: RW 2.0's samples-written header; for OTLP, what
// a 200's partial success does not count as rejected (every sample of the
// bench is one data point). RW 1.0 replies are not read: the spec lets a
// 1.0 receiver omit the header or send 0 (Strata sends 0), so for 1.0 a 2xx
// means the whole batch was written and a 4xx that none was.
func (l *loadRun) written(a rwclient.Attempt, def int64) int64 {
	if l.cfg.Protocol == ProtocolOTLP {
		if a.Status != http.StatusOK || len(a.Body) == 0 {
			return def
		}
		resp := pmetricotlp.NewExportResponse()
		if resp.UnmarshalProto(a.Body) != nil {
			return def
		}
		return max(def-resp.PartialSuccess().RejectedDataPoints(), 0)
	}
	v := a.Header.Get("X-Prometheus-Remote-Write-Samples-Written")
	if v == "" || l.cfg.Protocol != ProtocolV2 {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return def
	}
	return n
}

func (l *loadRun) noteError(msg string) {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	if len(l.errors) >= maxErrors {
		return
	}
	for _, e := range l.errors {
		if e == msg {
			return
		}
	}
	l.errors = append(l.errors, msg)
}

// timeline samples the accepted counter once a second until stop closes.
func (l *loadRun) timeline(stop <-chan struct{}, began time.Time) []TimelinePoint {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var (
		points []TimelinePoint
		last   int64
		lastAt = began
	)
	record := func(now time.Time) {
		acc := l.accepted.Load()
		if d := now.Sub(lastAt).Seconds(); d > 0.05 {
			points = append(points, TimelinePoint{Seconds: now.Sub(began).Seconds(), SamplesPerSecond: float64(acc-last) / d})
		}
		last, lastAt = acc, now
	}
	for {
		select {
		case <-stop:
			record(time.Now())
			return points
		case now := <-t.C:
			record(now)
		}
	}
}

// roundGate keeps senders within maxSkewRounds of each other.
type roundGate struct {
	mu     sync.Mutex
	cond   *sync.Cond
	rounds []int64
	done   bool
}

func newRoundGate(n int) *roundGate {
	g := &roundGate{rounds: make([]int64, n)}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// wait records that sender id starts round r and blocks while r is more than
// maxSkewRounds ahead of the slowest sender. It returns false once stopped.
func (g *roundGate) wait(r int64, id int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rounds[id] = r
	g.cond.Broadcast()
	for !g.done && r > g.minRound()+maxSkewRounds {
		g.cond.Wait()
	}
	return !g.done
}

func (g *roundGate) minRound() int64 {
	m := int64(math.MaxInt64)
	for _, r := range g.rounds {
		m = min(m, r)
	}
	return m
}

// finish takes a sender that has ended out of the minimum.
func (g *roundGate) finish(id int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.rounds[id] = math.MaxInt64
	g.cond.Broadcast()
}

// stop releases every waiter; called when the run's context ends.
func (g *roundGate) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	g.cond.Broadcast()
}
