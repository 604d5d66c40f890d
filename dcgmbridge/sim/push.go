package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/prometheus/prompb"

	"github.com/strata-dev/strata/internal/rwclient"
)

// PushOptions configures the remote-write push loop.
type PushOptions struct {
	URL string
	// Interval is the model time between two pushes (default 15s); Pace
	// decides how much wall time passes between them.
	Interval time.Duration
	// Duration bounds the run in model time (default: until ctx ends).
	Duration time.Duration
	// Pace, when set, is called between pushes and returns when the next
	// push is due; nil pushes as fast as the receiver accepts (a fast
	// backfill over remote write).
	Pace func(ctx context.Context, d time.Duration) error
	// MaxSamplesPerSend splits one timestamp's samples into requests
	// (default 2000, Prometheus' max_samples_per_send).
	MaxSamplesPerSend int
	// MaxRetries bounds the retries of one request on 429 and 5xx (default
	// 8); the backoff doubles from MinBackoff to MaxBackoff, and a reply's
	// Retry-After replaces it (package rwclient).
	MaxRetries int
	MinBackoff time.Duration // default 30ms, as Prometheus
	MaxBackoff time.Duration // default 5s
	Client     *http.Client
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// PushStats summarises a push run.
type PushStats struct {
	Requests       int
	SamplesSent    int
	SamplesDropped int
	Retries        int
}

// ErrPushRejected marks a 4xx other than 429: the receiver will never accept
// that body, so it is dropped and not retried.
var ErrPushRejected = rwclient.ErrRejected

type pushMetrics struct {
	requests *prometheus.CounterVec
	samples  prometheus.Counter
	dropped  prometheus.Counter
	retries  prometheus.Counter
}

func newPushMetrics(reg prometheus.Registerer) *pushMetrics {
	f := promauto.With(reg)
	return &pushMetrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{Name: "strata_sim_push_requests_total", Help: "Remote-write requests sent by the simulator, by HTTP status code."}, []string{"code"}),
		samples:  f.NewCounter(prometheus.CounterOpts{Name: "strata_sim_push_samples_total", Help: "Samples accepted by the remote-write receiver."}),
		dropped:  f.NewCounter(prometheus.CounterOpts{Name: "strata_sim_push_dropped_samples_total", Help: "Samples dropped after a non-retryable error or exhausted retries."}),
		retries:  f.NewCounter(prometheus.CounterOpts{Name: "strata_sim_push_retries_total", Help: "Remote-write requests retried after 429 or 5xx."}),
	}
}

// Push sends the cluster's series to a remote-write 1.0 URL every interval of
// wall-clock time for duration (model time advances by the same amount).
// It is PushWith with a ticker for pacing.
func (c *Cluster) Push(ctx context.Context, url string, interval, duration time.Duration) error {
	_, err := c.PushWith(ctx, PushOptions{URL: url, Interval: interval, Duration: duration, Pace: rwclient.Sleep})
	return err
}

// PushWith runs the push loop: at model time now, now+Interval, ... it steps
// the model and sends every live series' sample as RW 1.0 (protobuf, snappy).
// 429 and 5xx are retried with bounded exponential backoff; other 4xx drop
// the request. It returns when Duration of model time is covered or ctx ends
// (ctx's end is not an error); the error reports dropped samples, wrapping
// the last failure (errors.Is(err, ErrPushRejected) for a 4xx).
func (c *Cluster) PushWith(ctx context.Context, o PushOptions) (PushStats, error) {
	var st PushStats
	if o.URL == "" {
		return st, errors.New("push: empty URL")
	}
	if o.Interval <= 0 {
		o.Interval = 15 * time.Second
	}
	if o.MaxSamplesPerSend <= 0 {
		o.MaxSamplesPerSend = 2000
	}
	if o.MaxRetries <= 0 {
		o.MaxRetries = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	client, err := rwclient.New(rwclient.Config{
		URL: o.URL, ContentType: "application/x-protobuf", Version: "0.1.0", UserAgent: "strata-sim",
		HTTPClient: o.Client, MinBackoff: o.MinBackoff, MaxBackoff: o.MaxBackoff, MaxRetries: o.MaxRetries,
	})
	if err != nil {
		return st, fmt.Errorf("push: %w", err)
	}
	m := newPushMetrics(o.Registerer)
	start := c.Now()
	e := newEmitter()
	var lastErr error
	// A run that dropped samples reports it, wrapping the last failure.
	result := func() (PushStats, error) {
		if st.SamplesDropped > 0 {
			return st, fmt.Errorf("push: %d of %d samples dropped: %w", st.SamplesDropped, st.SamplesDropped+st.SamplesSent, lastErr)
		}
		return st, nil
	}
	for t := start; o.Duration <= 0 || !t.After(start.Add(o.Duration)); t = t.Add(o.Interval) {
		if ctx.Err() != nil {
			return result()
		}
		batches := c.collect(e, t, o.MaxSamplesPerSend)
		for _, wr := range batches {
			n := 0
			for _, ts := range wr.Timeseries {
				n += len(ts.Samples)
			}
			err := c.send(ctx, client, o.Logger, m, &st, wr)
			switch {
			case err == nil:
				st.SamplesSent += n
				m.samples.Add(float64(n))
			case ctx.Err() != nil:
				return result()
			default:
				st.SamplesDropped += n
				m.dropped.Add(float64(n))
				lastErr = err
				o.Logger.Warn("remote write dropped", "samples", n, "err", err)
			}
		}
		if o.Pace != nil {
			if err := o.Pace(ctx, o.Interval); err != nil {
				return result() // the context ending is the normal way to stop a push loop
			}
		}
	}
	return result()
}

// collect steps to t and returns the live series (and stale markers for
// vanished ones) as write requests of at most maxSamples each.
func (c *Cluster) collect(e *emitter, t time.Time, maxSamples int) []*prompb.WriteRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stepTo(t)
	c.refresh()
	var out []*prompb.WriteRequest
	cur := &prompb.WriteRequest{}
	_ = e.emit(c, t.UnixMilli(), func(s *series, ts int64, v float64) error {
		cur.Timeseries = append(cur.Timeseries, prompb.TimeSeries{Labels: s.pb, Samples: []prompb.Sample{{Timestamp: ts, Value: v}}})
		if len(cur.Timeseries) == maxSamples {
			out = append(out, cur)
			cur = &prompb.WriteRequest{}
		}
		return nil
	})
	if len(cur.Timeseries) > 0 {
		out = append(out, cur)
	}
	return out
}

// send posts one write request through the remote-write client, counting
// every attempt and retry.
func (c *Cluster) send(ctx context.Context, client *rwclient.Client, logger *slog.Logger, m *pushMetrics, st *PushStats, wr *prompb.WriteRequest) error {
	raw, err := wr.Marshal()
	if err != nil {
		return fmt.Errorf("marshal write request: %w", err)
	}
	_, err = client.Send(ctx, snappy.Encode(nil, raw), func(a rwclient.Attempt) {
		st.Requests++
		code := "error"
		if a.Err == nil {
			code = strconv.Itoa(a.Status)
		}
		m.requests.WithLabelValues(code).Inc()
		if a.Retry {
			st.Retries++
			m.retries.Inc()
			logger.Debug("remote write retry", "attempt", st.Requests, "status", a.Status, "err", a.Err)
		}
	})
	return err
}
