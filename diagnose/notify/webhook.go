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
}

// NewMetrics registers strata_diagnose_notifications_{sent,failed,dropped}_total{kind}.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	return &Metrics{
		sent:    f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_notifications_sent_total", Help: "Notifications delivered, by kind of sink."}, []string{"kind"}),
		failed:  f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_notifications_failed_total", Help: "Notifications given up after every retry failed, by kind of sink."}, []string{"kind"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_notifications_dropped_total", Help: "Notifications dropped because the sink's queue was full, by kind of sink."}, []string{"kind"}),
	}
}

// Webhook posts WebhookEvents to one URL. Update only queues; one goroutine
// delivers, retrying each event with exponential backoff (Backoff, doubling)
// up to MaxRetries times. The caller MUST call Stop.
type Webhook struct {
	cfg     diagnose.WebhookConfig
	client  *http.Client
	m       *Metrics
	logger  *slog.Logger
	backoff time.Duration
	queue   chan WebhookEvent
	sent    map[string]bool // diagnoses that fired the hook
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
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
	if backoff <= 0 {
		backoff = time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Webhook{
		cfg: cfg, client: &http.Client{Timeout: time.Duration(cfg.Timeout)}, m: m, logger: logger, backoff: backoff,
		queue: make(chan WebhookEvent, 1000), sent: map[string]bool{}, ctx: ctx, cancel: cancel,
	}
	w.wg.Add(1)
	go w.loop()
	return w
}

// Stop abandons queued events and waits for the delivery goroutine.
func (w *Webhook) Stop() {
	w.cancel()
	w.wg.Wait()
}

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
			w.enqueue(WebhookEvent{Event: "firing", Diagnosis: d})
		case d.State == diagnose.StateResolved && w.sent[d.ID]:
			delete(w.sent, d.ID)
			w.enqueue(WebhookEvent{Event: "resolved", Diagnosis: d})
		}
	}
}

func (w *Webhook) enqueue(ev WebhookEvent) {
	select {
	case w.queue <- ev:
	default:
		w.m.dropped.WithLabelValues("webhook").Inc()
	}
}

func (w *Webhook) loop() {
	defer w.wg.Done()
	for {
		select {
		case <-w.ctx.Done():
			return
		case ev := <-w.queue:
			w.deliver(ev)
		}
	}
}

func (w *Webhook) deliver(ev WebhookEvent) {
	body, err := json.Marshal(ev)
	if err != nil {
		w.m.failed.WithLabelValues("webhook").Inc()
		return
	}
	delay := w.backoff
	for attempt := 0; ; attempt++ {
		err = w.post(body)
		if err == nil {
			w.m.sent.WithLabelValues("webhook").Inc()
			return
		}
		if attempt >= w.cfg.MaxRetries {
			w.m.failed.WithLabelValues("webhook").Inc()
			w.logger.Warn("webhook delivery failed", "url", w.cfg.URL, "diagnosis", ev.Diagnosis.ID, "err", err)
			return
		}
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay *= 2
	}
}

func (w *Webhook) post(body []byte) error {
	req, err := http.NewRequestWithContext(w.ctx, http.MethodPost, w.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if err := resp.Body.Close(); err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook answered %s", resp.Status)
	}
	return nil
}
