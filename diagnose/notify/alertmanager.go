// Package notify delivers diagnoses outside Strata: to Alertmanager (one
// alert per diagnosis, with Prometheus' notifier and resend rules) and to
// webhooks. Each sink implements diagnose.Sink: it never blocks the
// engine's evaluation; failures are queued, retried and counted.
package notify

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/notifier"

	"github.com/strata-dev/strata/diagnose"
)

// Resend rules, as Prometheus' (rules/alerting.go): an active alert is sent
// again every ResendDelay, its EndsAt is 4 x max(evaluation interval,
// ResendDelay) ahead, and a resolved one is re-sent for ResolvedRetention.
const (
	ResendDelay       = time.Minute
	ResolvedRetention = 15 * time.Minute
	evalInterval      = time.Minute
)

// Alertmanager sends one alert per diagnosis to the Alertmanagers of a
// Prometheus `alerting:` configuration, through Prometheus' notifier (its
// queue, batching, retries and metrics, prefixed strata_diagnose_).
//
// The engine evaluates minute T about the out-of-order window after T, so
// StartsAt is the diagnosis' start but EndsAt of an active alert is taken
// from the wall clock at send time: EndsAt = now + 4 x max(1m, resend
// delay). From T it would already be past, and Alertmanager would resolve
// the alert at once.
type Alertmanager struct {
	n      *notifier.Manager
	tsets  chan map[string][]*targetgroup.Group // the Alertmanagers, to n.Run
	cfgMu  sync.Mutex                           // one ApplyConfig at a time
	ext    string
	now    func() time.Time
	logger *slog.Logger

	mu       sync.Mutex
	lastSent map[string]time.Time // by diagnosis id
	resolved map[string]resolvedAlert
}

type resolvedAlert struct {
	a    *notifier.Alert
	when time.Time // wall time of the resolution
}

// NewAlertmanager starts the notifier for cfg's alertmanagers (only
// static_configs are supported). externalURL is the base of each alert's
// generatorURL. externalLabels (global.external_labels) are added to every
// alert that does not carry the label already, and cfg's
// alert_relabel_configs applied after, as Prometheus' notifier does. The
// caller MUST call Stop.
func NewAlertmanager(cfg config.AlertingConfig, externalLabels labels.Labels, externalURL *url.URL, logger *slog.Logger, reg prometheus.Registerer, now func() time.Time) (*Alertmanager, error) {
	n := notifier.NewManager(&notifier.Options{QueueCapacity: 10_000, Registerer: prometheus.WrapRegistererWithPrefix("strata_diagnose_", reg)}, model.UTF8Validation, logger)
	ext := ""
	if externalURL != nil {
		ext = externalURL.String()
	}
	if now == nil {
		now = time.Now
	}
	a := &Alertmanager{n: n, tsets: make(chan map[string][]*targetgroup.Group, 1), ext: ext, now: now, logger: logger,
		lastSent: map[string]time.Time{}, resolved: map[string]resolvedAlert{}}
	if err := a.ApplyConfig(cfg, externalLabels); err != nil {
		return nil, err
	}
	go n.Run(a.tsets)
	return a, nil
}

// StaticGroups returns the Alertmanagers of cfg by its alertmanager sets'
// keys, as Prometheus' discovery would hand them to the notifier; only
// static_configs are supported.
func StaticGroups(cfg config.AlertingConfig) (map[string][]*targetgroup.Group, error) {
	tgs := map[string][]*targetgroup.Group{}
	for k, am := range cfg.AlertmanagerConfigs.ToMap() {
		for _, sd := range am.ServiceDiscoveryConfigs {
			static, ok := sd.(discovery.StaticConfig)
			if !ok {
				return nil, fmt.Errorf("alerting: alertmanagers: only static_configs are supported, got %s", sd.Name())
			}
			tgs[k] = append(tgs[k], static...)
		}
	}
	return tgs, nil
}

// ApplyConfig replaces the Alertmanagers and the alert relabelling with
// cfg's, and the external labels (a configuration reload), as Prometheus'
// reload applies its alerting section: an Alertmanager whose
// configuration did not change keeps its queue.
func (a *Alertmanager) ApplyConfig(cfg config.AlertingConfig, externalLabels labels.Labels) error {
	tgs, err := StaticGroups(cfg)
	if err != nil {
		return err
	}
	a.cfgMu.Lock()
	defer a.cfgMu.Unlock()
	if err := a.n.ApplyConfig(&config.Config{GlobalConfig: config.GlobalConfig{ExternalLabels: externalLabels}, AlertingConfig: cfg}); err != nil {
		return fmt.Errorf("alerting: %w", err)
	}
	select {
	case <-a.tsets: // an update not taken yet: this one supersedes it
	default:
	}
	a.tsets <- tgs
	return nil
}

// Stop stops sending.
func (a *Alertmanager) Stop() { a.n.Stop() }

// Send queues alerts other than the diagnoses' (the operator's alerting
// rules': it is their rules.Sender) on the same notifier.
func (a *Alertmanager) Send(alerts ...*notifier.Alert) { a.n.Send(alerts...) }

// Alertmanagers lists the Alertmanagers in use (for /api/v1/alertmanagers).
func (a *Alertmanager) Alertmanagers() []*url.URL { return a.n.Alertmanagers() }

// DroppedAlertmanagers lists the dropped ones.
func (a *Alertmanager) DroppedAlertmanagers() []*url.URL { return a.n.DroppedAlertmanagers() }

// Update implements diagnose.Sink.
func (a *Alertmanager) Update(u diagnose.Update) {
	if u.WarmingUp {
		return
	}
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []*notifier.Alert
	for _, d := range u.Changed {
		if d.State == diagnose.StateResolved {
			if _, sent := a.lastSent[d.ID]; sent {
				al := toAlert(d, a.ext)
				al.EndsAt = *d.End
				a.resolved[d.ID] = resolvedAlert{a: al, when: now}
				delete(a.lastSent, d.ID)
			}
		}
	}
	for _, d := range u.Open {
		if last, ok := a.lastSent[d.ID]; ok && now.Sub(last) < ResendDelay && !changed(u.Changed, d.ID) {
			continue
		}
		al := toAlert(d, a.ext)
		al.EndsAt = now.Add(4 * max(evalInterval, ResendDelay))
		a.lastSent[d.ID] = now
		out = append(out, al)
	}
	for id, r := range a.resolved {
		if now.Sub(r.when) > ResolvedRetention {
			delete(a.resolved, id)
			continue
		}
		out = append(out, r.a)
	}
	if len(out) > 0 {
		a.n.Send(out...)
	}
}

func changed(ds []diagnose.Diagnosis, id string) bool {
	for _, d := range ds {
		if d.ID == id {
			return true
		}
	}
	return false
}

// AlertName is the alertname of a diagnosis: its root cause rule, or
// DiagnosisCauseUnknown.
func AlertName(d diagnose.Diagnosis) string {
	if d.Rule != "" {
		return d.Rule
	}
	return "DiagnosisCauseUnknown"
}

// toAlert maps a diagnosis onto an Alertmanager alert: labels alertname,
// diagnosis, severity, dimension and the entity labels; annotations
// summary, description, runbook_url, confidence, evidence and actions (JSON).
func toAlert(d diagnose.Diagnosis, ext string) *notifier.Alert {
	b := labels.NewBuilder(labels.EmptyLabels())
	b.Set(labels.AlertName, AlertName(d))
	b.Set("diagnosis", d.Cause)
	b.Set("diagnosis_id", d.ID)
	if d.Severity != "" {
		b.Set("severity", d.Severity)
	}
	if d.Dimension != "" {
		b.Set("dimension", d.Dimension)
	}
	for k, v := range d.Entities.Map() {
		b.Set(k, v)
	}
	ann := labels.NewBuilder(labels.EmptyLabels())
	ann.Set("summary", d.Summary)
	ann.Set("description", d.Description)
	ann.Set("confidence", fmt.Sprintf("%.2f", d.Confidence))
	if d.RunbookURL != "" {
		ann.Set("runbook_url", d.RunbookURL)
	}
	if ev, err := json.Marshal(d.Evidence); err == nil {
		ann.Set("evidence", string(ev))
	}
	if ac, err := json.Marshal(d.Actions); err == nil {
		ann.Set("actions", string(ac))
	}
	return &notifier.Alert{
		Labels: b.Labels(), Annotations: ann.Labels(), StartsAt: d.Start,
		GeneratorURL: ext + "/diagnoses/" + d.ID, // its page (cmd/strata)
	}
}
