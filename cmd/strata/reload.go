package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// reloader reads the configuration file again and loads its rules.files
// and its `alerting:` section (the Alertmanagers, alert_relabel_configs),
// at SIGHUP and at POST /-/reload (web.enable_lifecycle), as Prometheus'
// reload does; the rest of the configuration takes effect at the next
// start. A configuration or rule file that does not load leaves the
// running rules and Alertmanagers as they are. strata_config_last_reload_successful and
// _success_timestamp_seconds say how the last one went, as Prometheus'.
type reloader struct {
	cmd *serveCommand
	srv *server
	ok  prometheus.Gauge
	at  prometheus.Gauge

	mu sync.Mutex // one reload at a time
}

func newReloader(cmd *serveCommand, srv *server) *reloader {
	f := promauto.With(srv.reg)
	r := &reloader{
		cmd: cmd,
		srv: srv,
		ok:  f.NewGauge(prometheus.GaugeOpts{Name: "strata_config_last_reload_successful", Help: "Whether the last configuration reload (SIGHUP or POST /-/reload: the rule files and the alerting section) succeeded."}),
		at:  f.NewGauge(prometheus.GaugeOpts{Name: "strata_config_last_reload_success_timestamp_seconds", Help: "Timestamp of the last successful configuration reload."}),
	}
	r.ok.Set(1)
	r.at.SetToCurrentTime()
	return r
}

// reload loads the rule files and the alerting section of the
// configuration as it now reads: the rules first, then, if they loaded,
// the Alertmanagers (whose section the configuration's validation has
// parsed already).
func (r *reloader) reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := func() error {
		cfg, err := r.cmd.config()
		if err != nil {
			return err
		}
		reload := r.srv.reloadRules.Load()
		if reload == nil {
			return errors.New("the rule manager has not started yet")
		}
		if err := (*reload)(cfg.Rules.Files); err != nil {
			return err
		}
		am := r.srv.ams.am.Load()
		if am == nil {
			return nil
		}
		ac, err := cfg.alertingConfig()
		if err != nil {
			return err
		}
		// The external labels are the running server's: they also name
		// its series to a Thanos Querier, and change at a restart.
		ext, err := r.srv.cfg.externalLabels()
		if err != nil {
			return err
		}
		return am.ApplyConfig(ac, ext)
	}()
	if err != nil {
		r.ok.Set(0)
		r.srv.logger.Error("reload failed: what did not load keeps running as it was", "err", err)
		return err
	}
	r.ok.Set(1)
	r.at.SetToCurrentTime()
	r.srv.logger.Info("reloaded the rule files and the alerting section; the rest of the configuration takes effect at the next start", "config_file", r.cmd.configFile)
	return nil
}

// onHangup reloads at each signal on hup until ctx is done.
func (r *reloader) onHangup(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			_ = r.reload() // logged and counted
		}
	}
}

// lifecycle serves Prometheus' lifecycle endpoints, POST (or PUT)
// /-/reload and /-/quit, when web.enable_lifecycle is on, with
// Prometheus' answers: 200, or 500 and the error for a reload that
// failed; 503 for a second quit; 403 when the setting is off; 405 for
// another method.
func (s *server) lifecycle(mux *http.ServeMux) {
	handle := func(path string, do func(w http.ResponseWriter)) {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method != http.MethodPost && r.Method != http.MethodPut:
				w.Header().Set("Allow", "POST, PUT")
				http.Error(w, "This endpoint requires a POST request.", http.StatusMethodNotAllowed)
			case !s.cfg.Web.EnableLifecycle:
				http.Error(w, "Lifecycle API is not enabled (web.enable_lifecycle, --web.enable-lifecycle).", http.StatusForbidden)
			default:
				do(w)
			}
		})
	}
	handle("/-/reload", func(w http.ResponseWriter) {
		if s.reload == nil {
			http.Error(w, "reload is not available", http.StatusServiceUnavailable)
			return
		}
		if err := s.reload(); err != nil {
			http.Error(w, fmt.Sprintf("failed to reload config: %s", err), http.StatusInternalServerError)
		}
	})
	handle("/-/quit", func(w http.ResponseWriter) {
		if s.quit == nil {
			http.Error(w, "quit is not available", http.StatusServiceUnavailable)
			return
		}
		if !s.quit() {
			http.Error(w, "Termination already in progress.", http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "Requesting termination... Goodbye!")
	})
}
