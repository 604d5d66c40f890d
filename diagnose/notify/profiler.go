package notify

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/diagnose"
)

// ProfileRequest is the JSON body a profiler agent receives
// (docs/diagnosis.md, "Profiler hook"): profile Pod (outside Kubernetes,
// where Pod is empty: the serving process at Instance) with Tool for
// DurationSeconds, starting between NotBefore and NotAfter.
type ProfileRequest struct {
	DiagnosisID     string    `json:"diagnosis_id"`
	Cause           string    `json:"cause"`
	Confidence      float64   `json:"confidence"`
	Tool            string    `json:"tool,omitempty"`
	Namespace       string    `json:"namespace,omitempty"`
	Pod             string    `json:"pod"`
	Instance        string    `json:"instance,omitempty"`
	Host            string    `json:"host,omitempty"`
	GPU             string    `json:"gpu,omitempty"`
	Model           string    `json:"model,omitempty"`
	DurationSeconds float64   `json:"duration_seconds"`
	NotBefore       time.Time `json:"not_before"`
	NotAfter        time.Time `json:"not_after"`
	// QuietHourUTC is the hour of the day (0-23, UTC) with the model's
	// lowest request rate over QuietHourDays days before the diagnosis;
	// -1 when there was no history (the window then starts at once).
	QuietHourUTC  int                `json:"quiet_hour_utc"`
	QuietHourDays int                `json:"quiet_hour_days"`
	Diagnosis     diagnose.Diagnosis `json:"diagnosis"`
}

// Traffic gives a model's quietest hour of the day.
type Traffic interface {
	// QuietHour returns the hour of the day (UTC) with the lowest mean
	// request rate of model over the days before now, and the number of
	// days seen; days is 0 when there is no history.
	QuietHour(ctx context.Context, model string, now time.Time) (hour, days int, err error)
}

// Profiler asks a profiler agent for one short window on the pod of a
// diagnosis (diagnose.ProfilerConfig). Update only checks and queues; a
// goroutine finds the quiet hour and hands the request to a poster that
// retries with backoff. The caller MUST call Stop.
type Profiler struct {
	cfg     diagnose.ProfilerConfig
	slo     diagnose.SLOConfig
	traffic Traffic
	m       *Metrics
	logger  *slog.Logger
	now     func() time.Time
	out     *poster

	jobs       chan diagnose.Diagnosis
	requested  map[string]bool      // open diagnoses already handled
	lastTarget map[string]time.Time // Entities.ReplicaKey -> last request, within min_interval
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// NewProfiler starts the profiler hook. slo are the engine's objectives (a
// model whose tightest latency objective is under cfg.MinLatencySLO is never
// profiled); backoff is the first retry delay (0: 1 s); now is the clock.
func NewProfiler(cfg diagnose.ProfilerConfig, slo diagnose.SLOConfig, traffic Traffic, m *Metrics, logger *slog.Logger, backoff time.Duration, now func() time.Time) *Profiler {
	cfg = cfg.ProfilerDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	p := &Profiler{
		cfg: cfg, slo: slo, traffic: traffic, m: m, logger: logger, now: now,
		out:  newPoster("profiler", cfg.URL, time.Duration(cfg.Timeout), cfg.MaxRetries, backoff, m, logger),
		jobs: make(chan diagnose.Diagnosis, 100), requested: map[string]bool{}, lastTarget: map[string]time.Time{},
		ctx: ctx, cancel: cancel,
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

// Stop abandons queued requests and waits for the goroutines.
func (p *Profiler) Stop() {
	p.cancel()
	p.wg.Wait()
	p.out.stop()
}

// Update implements diagnose.Sink.
func (p *Profiler) Update(u diagnose.Update) {
	if u.WarmingUp {
		return
	}
	for _, d := range u.Changed {
		if d.State == diagnose.StateResolved {
			delete(p.requested, d.ID) // a diagnosis that opens again has a new id
			continue
		}
		if d.State != diagnose.StateFiring || p.requested[d.ID] || d.Confidence < p.cfg.MinConfidence {
			continue
		}
		if len(p.cfg.Causes) > 0 && !slices.Contains(p.cfg.Causes, d.Cause) {
			continue
		}
		p.requested[d.ID] = true
		key := d.Entities.ReplicaKey()
		switch last, seen := p.lastTarget[key]; {
		case key == "":
			p.m.skipped.WithLabelValues("no_pod").Inc()
			continue
		case p.slo.TightestLatencySLO(d.Entities.Model) < time.Duration(p.cfg.MinLatencySLO):
			p.m.skipped.WithLabelValues("latency_slo").Inc()
			continue
		case seen && u.T.Sub(last) < time.Duration(p.cfg.MinInterval):
			p.m.skipped.WithLabelValues("min_interval").Inc()
			continue
		}
		for k, t := range p.lastTarget {
			if u.T.Sub(t) >= time.Duration(p.cfg.MinInterval) {
				delete(p.lastTarget, k) // bounded by the replicas profiled within min_interval
			}
		}
		p.lastTarget[key] = u.T
		select {
		case p.jobs <- d:
		default:
			p.m.dropped.WithLabelValues("profiler").Inc()
		}
	}
}

func (p *Profiler) loop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case d := <-p.jobs:
			p.out.enqueue(d.ID, p.request(d))
		}
	}
}

// request schedules d's profile in the model's quiet hour: the next time
// that hour comes (now, when it is that hour and the window still fits).
// Without history, or when the traffic query fails (logged), it starts now.
func (p *Profiler) request(d diagnose.Diagnosis) ProfileRequest {
	now := p.now().UTC()
	dur := time.Duration(p.cfg.Duration)
	hour, days, err := -1, 0, error(nil)
	if p.traffic != nil {
		ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
		hour, days, err = p.traffic.QuietHour(ctx, d.Entities.Model, now)
		cancel()
		if err != nil {
			p.logger.Warn("profiler hook: no quiet hour, profiling at once", "diagnosis", d.ID, "err", err)
		}
	}
	if err != nil || days == 0 {
		hour, days = -1, 0
	}
	notBefore, notAfter := QuietWindow(now, hour, dur)
	e := d.Entities
	return ProfileRequest{
		DiagnosisID: d.ID, Cause: d.Cause, Confidence: d.Confidence, Tool: p.cfg.Tool,
		Namespace: e.Namespace, Pod: e.Pod, Instance: e.Instance, Host: e.Host, GPU: e.GPU, Model: e.Model,
		DurationSeconds: dur.Seconds(), NotBefore: notBefore, NotAfter: notAfter,
		QuietHourUTC: hour, QuietHourDays: days, Diagnosis: d,
	}
}

// QuietWindow is when a profile of length dur may start: within the next
// occurrence of hour (UTC) at or after now, leaving room for dur before the
// hour ends; with hour < 0, from now for one hour.
func QuietWindow(now time.Time, hour int, dur time.Duration) (notBefore, notAfter time.Time) {
	now = now.UTC()
	if hour < 0 {
		return now, now.Add(time.Hour)
	}
	day := now.Truncate(24 * time.Hour)
	start := day.Add(time.Duration(hour) * time.Hour)
	if now.After(start.Add(time.Hour - dur)) {
		start = start.Add(24 * time.Hour)
	}
	notBefore = start
	if now.After(start) {
		notBefore = now
	}
	return notBefore, start.Add(time.Hour - dur)
}

// QueryTraffic is Traffic over the store: the mean of
// sum(avg_over_time(strata:requests:rate{model_name=model}[1h])) per hour of
// the day over the last Days days (7 when zero), through the engine, so the
// minute and hour tiers serve it.
type QueryTraffic struct {
	Engine    promql.QueryEngine
	Queryable storage.Queryable
	Days      int
}

// QuietHour implements Traffic.
func (q QueryTraffic) QuietHour(ctx context.Context, model string, now time.Time) (int, int, error) {
	days := q.Days
	if days <= 0 {
		days = 7
	}
	sel := ""
	if model != "" {
		sel = "model_name=" + strconv.Quote(model)
	}
	expr := fmt.Sprintf("sum(avg_over_time(strata:requests:rate{%s}[1h]))", sel)
	end := now.UTC().Truncate(time.Hour)
	qry, err := q.Engine.NewRangeQuery(ctx, q.Queryable, nil, expr, end.Add(-time.Duration(days)*24*time.Hour), end, time.Hour)
	if err != nil {
		return 0, 0, err
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return 0, 0, res.Err
	}
	m, err := res.Matrix()
	if err != nil {
		return 0, 0, err
	}
	var pts []hourPoint
	for _, s := range m {
		for _, f := range s.Floats {
			// avg_over_time at t covers the hour before t.
			pts = append(pts, hourPoint{time.UnixMilli(f.T).UTC().Add(-time.Hour), f.F})
		}
	}
	h, d := quietestHour(pts)
	return h, d, nil
}

// hourPoint is one hour's mean request rate, at the hour's start.
type hourPoint struct {
	t time.Time
	v float64
}

// quietestHour is the hour of the day with the lowest mean over pts, and
// the number of days of hours pts hold (at least 1 when there are any); ties
// go to the earliest hour.
func quietestHour(pts []hourPoint) (hour, days int) {
	var sum, n [24]float64
	total := 0
	for _, p := range pts {
		if math.IsNaN(p.v) {
			continue
		}
		sum[p.t.Hour()] += p.v
		n[p.t.Hour()]++
		total++
	}
	hour, best := -1, math.Inf(1)
	for h := range 24 {
		if n[h] == 0 {
			continue
		}
		if m := sum[h] / n[h]; m < best {
			hour, best = h, m
		}
	}
	if hour < 0 {
		return -1, 0
	}
	return hour, max(1, int(math.Round(float64(total)/24)))
}
