package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/dcgmbridge/rulegen"
	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/internal/rulestale"
)

// startRules runs Prometheus' rule manager over the stitched tiers with the
// canonical recording rules (rendered from the dcgmbridge catalogue into
// <storage.path>/rules/canonical.rules.yml at every start, so they always match
// this binary's catalogue) and the operator's rule files. Results are appended
// to the raw tier. The manager is nil when there is nothing to evaluate. The
// caller MUST call the returned stop function. pins is engine's parser, in
// which the canonical rules' internal forms are pinned so that the engine
// parses each once per load, not at every evaluation (nil: parsed at each).
// The alerts of the operator's alerting rules go to send (the `alerting:`
// section's Alertmanagers, none or some) as Prometheus sends them.
// reload loads the operator's rule files again, from the list given (the
// configuration read again at SIGHUP), as Prometheus' reload does: groups
// whose rules did not change keep their state.
func startRules(ctx context.Context, cfg Config, engine promql.QueryEngine, pins rulegen.ExprPinner, q storage.Queryable, app storage.AppendableV2,
	send rules.Sender, externalURL *url.URL, logger *slog.Logger, reg prometheus.Registerer,
) (mgr *rules.Manager, stop func(), reload func(files []string) error, err error) {
	files := append([]string(nil), cfg.Rules.Files...)
	// The canonical file is written and loaded in the exported form
	// (label_replace chains, valid for any Prometheus: what /api/v1/rules
	// shows); forms.QueryFunc evaluates each canonical rule in its internal
	// form, whose selectors RenamingQueryable reads with the label spellings
	// already unified, without the parts the fleet sends nothing for, and
	// with the aggregations several rules share evaluated once
	// (docs/metrics.md "Levels and joins").
	forms := rulegen.NewInternalForms()
	if pins != nil {
		forms.PinIn(pins)
	}
	loader := rulegen.Loader{Parser: parser.NewParser(parser.Options{}), Logger: logger, Forms: forms}
	if cfg.Rules.Canonical {
		rc, err := cfg.canonicalRules()
		if err != nil {
			return nil, nil, nil, err
		}
		cat, err := dcgmbridge.NewCatalogue()
		if err != nil {
			return nil, nil, nil, err
		}
		yml, err := rulegen.YAML(cat, rc)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("render canonical rules: %w", err)
		}
		path := filepath.Join(cfg.Storage.Path, "rules", "canonical.rules.yml")
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, nil, nil, fmt.Errorf("write canonical rules: %w", err)
		}
		if err := atomicfile.WriteFile(path, yml); err != nil {
			return nil, nil, nil, fmt.Errorf("write canonical rules: %w", err)
		}
		files = append(files, path)
		loader.Canonical = path
	}
	if len(files) == 0 {
		return nil, func() {}, func([]string) error {
			return errors.New("strata serve started without rule files (rules.files empty, rules.canonical off): rule files added since take effect at its restart")
		}, nil
	}
	canonical := files[len(cfg.Rules.Files):]
	// $externalLabels in the rules' templates, as Prometheus'; the alerts
	// sent carry them through the notifier (startAlertmanagers).
	ext, err := cfg.externalLabels()
	if err != nil {
		return nil, nil, nil, err
	}
	// The recording rules' stale-marker state is kept by stale (a label
	// hash a series) instead of by Prometheus' groups (two copies of each
	// series' labels); what the groups show and write is the same.
	stale := rulestale.New()
	m := rules.NewManager(&rules.ManagerOptions{
		ExternalURL:  externalURL,
		QueryFunc:    stale.QueryFunc(forms.QueryFunc(engine, q, time.Duration(cfg.Query.LookbackDelta))),
		GroupLoader:  loader,
		Context:      ctx,
		AppendableV2: stale.Appendable(app),
		Queryable:    q,
		Logger:       logger,
		Registerer:   reg,
		Metrics:      stale.Metrics(reg),
		Parser:       loader.Parser,
		NotifyFunc:   rules.SendAlerts(send, externalURL.String()),
		// Prometheus' --rules.alert.resend-delay default.
		ResendDelay: time.Minute,
	})
	// Each group evaluation gets a memo for the canonical rules' shared
	// subexpressions (rulegen.InternalForms.QueryFunc), dropped when it ends.
	update := func(own []string) error {
		// The manager logs why a file did not load and returns only that
		// one did not: the operator's files are read first, so that the
		// error (SIGHUP's log line, POST /-/reload's answer) names the
		// file and the problem. The canonical file is Strata's own.
		own, _, errs := parseRuleFiles(own, loader.Parser, logger)
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		return m.Update(time.Duration(cfg.Rules.CanonicalInterval), append(slices.Clone(own), canonical...), ext, externalURL.String(), stale.EvalIterationFunc(forms.EvalIterationFunc))
	}
	if err := update(cfg.Rules.Files); err != nil {
		return nil, nil, nil, fmt.Errorf("load rule files: %w", err)
	}
	go m.Run()
	return m, m.Stop, update, nil
}

// parseRuleFiles expands rules.files' patterns and parses every file they
// name as the rule manager does (the operator's files: rulefmt with p),
// returning the files in load order, how many rules they hold and every
// problem, each naming its pattern or file: for the reload's error and
// for `strata check config`.
func parseRuleFiles(patterns []string, p parser.Parser, logger *slog.Logger) (files []string, rules int, errs []error) {
	for _, pat := range patterns {
		fs, err := expandRuleFiles([]string{pat})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range fs {
			rgs, fe := rulefmt.ParseFile(f, false, model.UTF8Validation, p, logger)
			errs = append(errs, fe...)
			if rgs != nil {
				for _, g := range rgs.Groups {
					rules += len(g.Rules)
				}
			}
		}
		files = append(files, fs...)
	}
	return files, rules, errs
}

// expandRuleFiles expands rules.files' glob patterns (filepath.Glob, as
// Prometheus expands rule_files), each pattern's files in name order, at
// every load: a file added to a matched directory loads at the next
// reload. A pattern that matches no file loads none, as in Prometheus; a
// path without glob characters must name a file that exists (the error
// then says which, where a glob would silently load nothing).
func expandRuleFiles(patterns []string) ([]string, error) {
	var files []string
	for _, pat := range patterns {
		matches, err := filepath.Glob(pat)
		if err != nil {
			return nil, fmt.Errorf("rules.files pattern %q: %w", pat, err)
		}
		if len(matches) == 0 && !strings.ContainsAny(pat, `*?[\`) {
			return nil, fmt.Errorf("rules.files: %s: no such file", pat)
		}
		files = append(files, matches...) // Glob sorts them
	}
	return files, nil
}
