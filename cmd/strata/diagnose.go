package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/rules"
	"gopkg.in/yaml.v3"

	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/diagnose/notify"
	"github.com/strata-dev/strata/tiers"
)

// alertingConfig parses the `alerting:` section with Prometheus' own
// configuration code (the same keys and validation as prometheus.yml).
func (c Config) alertingConfig() (promconfig.AlertingConfig, error) {
	if c.Alerting.Kind == 0 {
		return promconfig.AlertingConfig{}, nil
	}
	pc, err := promSection("alerting", &c.Alerting)
	if err != nil {
		return promconfig.AlertingConfig{}, err
	}
	if c.dir != "" {
		pc.SetDirectory(c.dir) // its files, as Prometheus reads them
	}
	return pc.AlertingConfig, nil
}

// otlpConfig is the `otlp:` section as Prometheus reads it (its defaults
// where the section is absent or silent, its validation).
func (c Config) otlpConfig() (promconfig.OTLPConfig, error) {
	if c.OTLP.Kind == 0 {
		return promconfig.DefaultOTLPConfig, nil
	}
	pc, err := promSection("otlp", &c.OTLP)
	if err != nil {
		return promconfig.OTLPConfig{}, err
	}
	return pc.OTLPConfig, nil
}

// promSection reads node, the section name of Strata's configuration that
// is Prometheus' own, with Prometheus' configuration code: its defaults, its
// validation.
func promSection(name string, node *yaml.Node) (*promconfig.Config, error) {
	body, err := yaml.Marshal(map[string]*yaml.Node{name: node})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	pc, err := promconfig.Load(string(body), slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, fmt.Errorf("%s (line numbers within the section): %w", name, err)
	}
	return pc, nil
}

// ruleSources is what /api/v1/rules and /api/v1/alerts list: the canonical
// rule manager's groups, then the diagnosis engine's. It is filled in once
// both have started.
type ruleSources struct {
	mu  sync.RWMutex
	mgr *rules.Manager
	eng *diagnose.Engine
}

func (r *ruleSources) set(mgr *rules.Manager, eng *diagnose.Engine) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if mgr != nil {
		r.mgr = mgr
	}
	if eng != nil {
		r.eng = eng
	}
}

// RuleGroups implements v1.RulesRetriever.
func (r *ruleSources) RuleGroups() []*rules.Group {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*rules.Group
	if r.mgr != nil {
		out = append(out, r.mgr.RuleGroups()...)
	}
	if r.eng != nil {
		out = append(out, r.eng.RuleGroups()...)
	}
	return out
}

// AlertingRules implements v1.RulesRetriever.
func (r *ruleSources) AlertingRules() []*rules.AlertingRule {
	var out []*rules.AlertingRule
	for _, g := range r.RuleGroups() {
		out = append(out, g.AlertingRules()...)
	}
	return out
}

// alertmanagers is /api/v1/alertmanagers' source, set when alerting is on.
type alertmanagers struct {
	am atomic.Pointer[notify.Alertmanager]
}

func (a *alertmanagers) Alertmanagers() []*url.URL {
	if am := a.am.Load(); am != nil {
		return am.Alertmanagers()
	}
	return nil
}

func (a *alertmanagers) DroppedAlertmanagers() []*url.URL {
	if am := a.am.Load(); am != nil {
		return am.DroppedAlertmanagers()
	}
	return nil
}

// diagSource serves the API from the engine once it runs.
type diagSource struct {
	eng atomic.Pointer[diagnose.Engine]
}

func (d *diagSource) Diagnoses() []diagnose.Diagnosis {
	if e := d.eng.Load(); e != nil {
		return e.Diagnoses()
	}
	return nil
}

func (d *diagSource) Diagnosis(id string) (diagnose.Diagnosis, bool) {
	if e := d.eng.Load(); e != nil {
		return e.Diagnosis(id)
	}
	return diagnose.Diagnosis{}, false
}

// startAlertmanagers starts the notifier of the `alerting:` section's
// Alertmanagers: the diagnoses and the operator's alerting rules send
// through it, with global.external_labels added as Prometheus adds them.
// It starts without Alertmanagers too (what is sent to none is dropped),
// so that a reload can add some, as Prometheus' notifier does.
func (s *server) startAlertmanagers(ext *url.URL) (*notify.Alertmanager, error) {
	ac, err := s.cfg.alertingConfig()
	if err != nil {
		return nil, err
	}
	lbls, err := s.cfg.externalLabels()
	if err != nil {
		return nil, err
	}
	am, err := notify.NewAlertmanager(ac, lbls, ext, s.logger.With("component", "alertmanager"), s.reg, time.Now)
	if err != nil {
		return nil, err
	}
	s.closer = append(s.closer, func() error { am.Stop(); return nil })
	s.ams.am.Store(am)
	return am, nil
}

// startDiagnose starts the diagnosis engine (when enabled) following the
// rollup pipeline, with its sinks.
func (s *server) startDiagnose(ctx context.Context, ext *url.URL) error {
	if !s.cfg.Diagnose.Enabled {
		return nil
	}
	logger := s.logger.With("component", "diagnose")
	signals, err := s.cfg.canonicalRules()
	if err != nil {
		return err
	}
	var sinks []diagnose.Sink
	if am := s.ams.am.Load(); am != nil {
		sinks = append(sinks, am)
	}
	if hooks := s.cfg.Diagnose.Hooks; len(hooks.Webhooks)+len(hooks.Profilers) > 0 {
		m := notify.NewMetrics(s.reg)
		for _, h := range hooks.Webhooks {
			w := notify.NewWebhook(h, m, logger.With("sink", "webhook"), 0)
			s.closer = append(s.closer, func() error { w.Stop(); return nil })
			sinks = append(sinks, w)
		}
		traffic := notify.QueryTraffic{Engine: s.api.Engine(), Queryable: s.stitched}
		for _, h := range hooks.Profilers {
			p := notify.NewProfiler(h, s.cfg.Diagnose.SLO, traffic, m, logger.With("sink", "profiler"), 0, time.Now)
			s.closer = append(s.closer, func() error { p.Stop(); return nil })
			sinks = append(sinks, p)
		}
	}
	eng, err := diagnose.New(s.cfg.Diagnose.Config, diagnose.Options{
		Minute: s.minute, Open: s.rollup, Signals: signals, Archive: s.arc.archive(),
		WriteBack: s.rawApp, WriteBackDelay: time.Duration(s.cfg.Storage.OutOfOrderWindow) + time.Minute,
		// The baselines go to the minute tier only, not the raw head (the
		// stitched view serves them from there: serve.go).
		Baselines: s.rollup.Direct(),
		// The recorded signals share the canonical rules' label sets in
		// the raw head.
		Labels: s.raw,
		Sinks:  sinks, ExternalURL: ext, LookbackDelta: time.Duration(s.cfg.Query.LookbackDelta),
		ScratchDir: s.cfg.Storage.Path, BaselineDir: baselineDir(s.cfg.Storage.Path),
		Logger: logger, Registerer: s.reg,
	})
	if err != nil {
		return err
	}
	s.diag.eng.Store(eng)
	s.rules.set(nil, eng)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := eng.Run(ctx, s.rollup); err != nil {
			logger.Error("diagnosis engine stopped", "err", err)
		}
	}()
	// Runs before the tiers close (closers run in reverse): ctx is done by then.
	s.closer = append(s.closer, func() error { <-done; return nil })
	return nil
}

// baselineDir is where the diagnosis engine checkpoints its baselines.
func baselineDir(storagePath string) string { return filepath.Join(storagePath, "baselines") }

type diagnoseCommand struct {
	cmd         *kingpin.CmdClause
	configFile  string
	storagePath string
	url         string
	from, to    string
	format      string
}

func newDiagnoseCommand(app *kingpin.Application) *diagnoseCommand {
	c := &diagnoseCommand{cmd: app.Command("diagnose", "List the diagnoses of a time range: replayed from a data directory's minute tier (read-only, safe beside a running strata serve), or read from a running server.")}
	c.cmd.Flag("config.file", "Strata configuration file (diagnose section, rule files, SLOs).").StringVar(&c.configFile)
	c.cmd.Flag("storage.path", "Data directory to replay (as strata serve and strata backfill take it).").StringVar(&c.storagePath)
	c.cmd.Flag("url", "Read the diagnoses from a running server instead, e.g. http://localhost:9201.").StringVar(&c.url)
	c.cmd.Flag("from", "Start of the range: RFC 3339, Unix seconds, or a duration before now such as -2h.").Default("-1h").StringVar(&c.from)
	c.cmd.Flag("to", "End of the range (same forms; now by default).").Default("now").StringVar(&c.to)
	c.cmd.Flag("format", "Output: table, or json (one diagnosis per line).").Default("table").EnumVar(&c.format, "table", "json")
	return c
}

func (c *diagnoseCommand) run(logger *slog.Logger, out io.Writer) error {
	now := time.Now()
	from, err := diagnose.ParseTime(c.from, now)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	to, err := diagnose.ParseTime(c.to, now)
	if err != nil {
		return fmt.Errorf("--to: %w", err)
	}
	if !from.Before(to) {
		return fmt.Errorf("--from %s is not before --to %s", from.UTC().Format(time.RFC3339), to.UTC().Format(time.RFC3339))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var ds []diagnose.Diagnosis
	if c.url != "" {
		ds, err = fetchDiagnoses(ctx, c.url, from, to)
	} else {
		ds, err = c.replay(ctx, logger, from, to)
	}
	if err != nil {
		return err
	}
	if c.format == "json" {
		enc := json.NewEncoder(out)
		for _, d := range ds {
			if err := enc.Encode(d); err != nil {
				return err
			}
		}
		return nil
	}
	return printTable(out, ds)
}

// replay opens the minute tier read-only (never the raw TSDB, whose lock a
// running server holds) and replays the range.
func (c *diagnoseCommand) replay(ctx context.Context, logger *slog.Logger, from, to time.Time) (ds []diagnose.Diagnosis, err error) {
	cfg, err := loadOfflineConfig(c.configFile, c.storagePath)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.Storage.Path, "minute")
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("no minute tier in %s: %w", cfg.Storage.Path, err)
	}
	mcfg := tiers.DefaultMinuteConfig(dir)
	mcfg.ReadOnly, mcfg.Retention = true, 0
	minute, err := tiers.OpenRollup(mcfg, logger, prometheus.NewRegistry(), time.Now)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, minute.Close()) }()
	// The minute tier has an hour once strata serve rolled it up (when it
	// ends, or at the server's start for a backfill's last hours, which
	// strata backfill leaves in raw): a replay sees nothing after that.
	if _, maxt, ok := minute.Bounds(); !ok || maxt < to.UnixMilli() {
		end := "holds nothing yet"
		if ok {
			end = "ends at " + time.UnixMilli(maxt).UTC().Format(time.RFC3339)
		}
		logger.Warn("the minute tier "+end+", before the range's end: the minutes after it are in the raw tier only until strata serve rolls them up "+
			"(an hour when it ends; at its start, the hours a backfill left in raw), so they are not replayed; start strata serve on the directory, "+
			"or read a running server's diagnoses with --url", "range_end", to.UTC().Format(time.RFC3339))
	}
	signals, err := cfg.canonicalRules()
	if err != nil {
		return nil, err
	}
	// The baselines are restored from the server's checkpoints when one is
	// kept from before the range (the last hours'), never written.
	return diagnose.Replay(ctx, cfg.Diagnose.Config, diagnose.Options{Minute: minute, Signals: signals, Logger: logger,
		LookbackDelta: time.Duration(cfg.Query.LookbackDelta), BaselineDir: baselineDir(cfg.Storage.Path), BaselineReadOnly: true}, from, to)
}

// fetchDiagnoses reads GET /api/v1/diagnoses of a running server.
func fetchDiagnoses(ctx context.Context, base string, from, to time.Time) ([]diagnose.Diagnosis, error) {
	u, err := url.Parse(strings.TrimRight(base, "/") + "/api/v1/diagnoses")
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("--url %q is not a URL such as http://localhost:9201", base)
	}
	q := u.Query()
	q.Set("start", from.UTC().Format(time.RFC3339Nano))
	q.Set("end", to.UTC().Format(time.RFC3339Nano))
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("read diagnoses: %w", err)
	}
	defer resp.Body.Close() //nolint:errcheck // read-only response body
	var body struct {
		Status string               `json:"status"`
		Data   []diagnose.Diagnosis `json:"data"`
		Error  string               `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 256<<20)).Decode(&body); err != nil {
		return nil, fmt.Errorf("read diagnoses from %s: %s: %w", u.Host, resp.Status, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("read diagnoses from %s: %s: %s", u.Host, resp.Status, body.Error)
	}
	return body.Data, nil
}

// printTable prints one line per diagnosis, then its evidence and actions.
func printTable(out io.Writer, ds []diagnose.Diagnosis) error {
	if len(ds) == 0 {
		_, err := fmt.Fprintln(out, "No diagnoses in this range.")
		return err
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "ID\tCAUSE\tSTATE\tCONFIDENCE\tSTART\tEND\tENTITY\tSUMMARY")
	for _, d := range ds {
		end := "-"
		if d.End != nil {
			end = d.End.UTC().Format(time.RFC3339)
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t%s\n", d.ID, d.Cause, d.State, d.Confidence, d.Start.UTC().Format(time.RFC3339), end, entityString(d.Entities), d.Summary)
	}
	_ = tw.Flush() // into a strings.Builder: cannot fail
	for _, d := range ds {
		fmt.Fprintf(&b, "\n%s %s on %s\n", d.ID, d.Cause, entityString(d.Entities))
		for _, e := range d.Evidence {
			v := "n/a"
			if e.Value != nil {
				v = fmt.Sprintf("%.4g", *e.Value)
			}
			th := ""
			if e.Threshold != nil {
				th = fmt.Sprintf(" (threshold %g)", *e.Threshold)
			}
			fmt.Fprintf(&b, "  evidence: %s = %s%s\n    %s\n", e.Metric, v, th, e.Query)
		}
		for _, a := range d.Actions {
			fmt.Fprintf(&b, "  action: %s\n    effect: %s\n    risk: %s\n", a.Action, a.Effect, a.Risk)
		}
		for _, s := range d.Symptoms {
			fmt.Fprintf(&b, "  explains: %s since %s\n", s.Alert, s.Since.UTC().Format(time.RFC3339))
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func entityString(e diagnose.Entities) string {
	var parts []string
	for _, k := range diagnose.EntityLabels {
		if v := e.Map()[k]; v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	return strings.Join(parts, ",")
}
