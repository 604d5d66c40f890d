package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"

	"github.com/strata-dev/strata/diagnose"
)

// WebhookEvent is the JSON body a webhook receives (docs/diagnosis.md,
// "Webhook"): "firing" once a diagnosis reaches the hook's confidence,
// "resolved" when a diagnosis that fired the hook resolves.
type WebhookEvent struct {
	Event     string             `json:"event"`
	Diagnosis diagnose.Diagnosis `json:"diagnosis"`
}

// Metrics of the sinks, shared by every webhook.
type Metrics struct {
	sent, failed, dropped *prometheus.CounterVec
	skipped               *prometheus.CounterVec // profiler hook, by reason
}

// NewMetrics registers strata_diagnose_notifications_{sent,failed,dropped}_total{kind}
// and strata_diagnose_profiles_skipped_total{reason}.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		sent:    f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_notifications_sent_total", Help: "Notifications delivered, by kind of sink."}, []string{"kind"}),
		failed:  f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_notifications_failed_total", Help: "Notifications given up after every retry failed, by kind of sink."}, []string{"kind"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_notifications_dropped_total", Help: "Notifications dropped because the sink's queue was full, by kind of sink."}, []string{"kind"}),
		skipped: f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_profiles_skipped_total", Help: "Diagnoses the profiler hook matched but did not profile: no_pod, latency_slo (a latency objective under min_latency_slo), min_interval (the pod was profiled recently)."}, []string{"reason"}),
	}
}

// Webhook posts WebhookEvents to one URL. Update only queues; one goroutine
// delivers, retrying each event with exponential backoff (Backoff, doubling)
// up to MaxRetries times. The caller MUST call Stop.
type Webhook struct {
	cfg  diagnose.WebhookConfig
	out  *poster
	sent map[string]bool // diagnoses that fired the hook
}

// NewWebhook starts the webhook's delivery goroutine. backoff is the first
// retry delay (0: 1 s).
func NewWebhook(cfg diagnose.WebhookConfig, m *Metrics, logger *slog.Logger, backoff time.Duration) *Webhook {
	if cfg.Timeout <= 0 {
		cfg.Timeout = model.Duration(10 * time.Second)
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 5
	}
	return &Webhook{
		cfg:  cfg,
		out:  newPoster("webhook", cfg.URL, time.Duration(cfg.Timeout), cfg.MaxRetries, backoff, m, logger),
		sent: map[string]bool{},
	}
}

// Stop abandons queued events and waits for the delivery goroutine.
func (w *Webhook) Stop() { w.out.stop() }

// Update implements diagnose.Sink.
func (w *Webhook) Update(u diagnose.Update) {
	if u.WarmingUp {
		return
	}
	for _, d := range u.Changed {
		if len(w.cfg.Causes) > 0 && !slices.Contains(w.cfg.Causes, d.Cause) {
			continue
		}
		switch {
		case d.State == diagnose.StateFiring && !w.sent[d.ID] && d.Confidence >= w.cfg.MinConfidence:
			w.sent[d.ID] = true
			w.out.enqueue(d.ID, WebhookEvent{Event: "firing", Diagnosis: d})
		case d.State == diagnose.StateResolved && w.sent[d.ID]:
			delete(w.sent, d.ID)
			w.out.enqueue(d.ID, WebhookEvent{Event: "resolved", Diagnosis: d})
		}
	}
}

// poster delivers JSON bodies to one URL from a bounded queue, in one
// goroutine, retrying each with exponential backoff; a full queue drops
// (counted), so a slow receiver never blocks the engine.
type poster struct {
	kind, url  string
	client     *http.Client
	maxRetries int
	backoff    time.Duration
	m          *Metrics
	logger     *slog.Logger
	queue      chan posting
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// posting is one queued body; id names it in logs (a diagnosis id).
type posting struct {
	id   string
	body any
}

func newPoster(kind, url string, timeout time.Duration, maxRetries int, backoff time.Duration, m *Metrics, logger *slog.Logger) *poster {
	if backoff <= 0 {
		backoff = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &poster{
		kind: kind, url: url, client: &http.Client{Timeout: timeout}, maxRetries: maxRetries, backoff: backoff,
		m: m, logger: logger, queue: make(chan posting, 1000), ctx: ctx, cancel: cancel,
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

func (p *poster) stop() {
	p.cancel()
	p.wg.Wait()
}

func (p *poster) enqueue(id string, body any) {
	select {
	case p.queue <- posting{id, body}:
	default:
		p.m.dropped.WithLabelValues(p.kind).Inc()
	}
}

func (p *poster) loop() {
	defer p.wg.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case ev := <-p.queue:
			p.deliver(ev)
		}
	}
}

func (p *poster) deliver(ev posting) {
	body, err := json.Marshal(ev.body)
	if err != nil {
		p.m.failed.WithLabelValues(p.kind).Inc()
		return
	}
	delay := p.backoff
	for attempt := 0; ; attempt++ {
		err = p.post(body)
		if err == nil {
			p.m.sent.WithLabelValues(p.kind).Inc()
			return
		}
		if attempt >= p.maxRetries {
			p.m.failed.WithLabelValues(p.kind).Inc()
			p.logger.Warn(p.kind+" delivery failed", "url", p.url, "diagnosis", ev.id, "err", err)
			return
		}
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (p *poster) post(body []byte) error {
	req, err := http.NewRequestWithContext(p.ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if err := resp.Body.Close(); err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s", p.kind, resp.Status)
	}
	return nil
}
