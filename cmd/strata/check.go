package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/internal/bucket"
)

// checkCommand is `strata check config FILE...`: what `promtool check
// config` is to Prometheus, for a deployment's CI or a config reloader to
// run before a configuration reaches a server.
type checkCommand struct {
	config *kingpin.CmdClause
	files  []string
}

func newCheckCommand(app *kingpin.Application) *checkCommand {
	c := &checkCommand{}
	check := app.Command("check", "Check Strata's configuration files.")
	c.config = check.Command("config", "Check that configuration files are valid, with the files they name (rules.files, the diagnosis engine's rule files, web.config_file, storage.objstore.config_file), as strata serve reads them; exit status 1 if one is not.")
	c.config.Arg("config-files", "The configuration files to check.").Required().StringsVar(&c.files)
	return c
}

func (c *checkCommand) run(w io.Writer) error {
	failed := 0
	for _, f := range c.files {
		_, _ = fmt.Fprintf(w, "Checking %s\n", f)
		summary, err := checkConfigFile(f)
		if err != nil {
			failed++
			_, _ = fmt.Fprintf(w, "  FAILED:\n    %s\n\n", strings.ReplaceAll(err.Error(), "\n", "\n    "))
			continue
		}
		_, _ = fmt.Fprintf(w, "  SUCCESS: %s\n\n", summary)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d configuration files are not valid", failed, len(c.files))
	}
	return nil
}

// checkConfigFile reads path as strata serve would (the embedded default
// under it, unknown keys refused, every setting validated) and loads what
// it names, without opening storage or the network. It returns what it
// found, or every problem at once.
func checkConfigFile(path string) (string, error) {
	cfg, err := loadConfig(path)
	if err != nil {
		return "", err
	}
	if err := cfg.validate(); err != nil {
		return "", fmt.Errorf("invalid configuration: %w", err)
	}
	files, rules, errs := parseRuleFiles(cfg.Rules.Files, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	summary := fmt.Sprintf("%d rule files (%d rules)", len(files), rules)
	if cfg.Diagnose.Enabled {
		groups, drules, err := diagnose.CheckRules(cfg.Diagnose.Config)
		if err != nil {
			errs = append(errs, err)
		}
		summary += fmt.Sprintf(", diagnosis rules: %d groups (%d rules)", groups, drules)
	}
	if f := cfg.Web.ConfigFile; f != "" {
		if err := web.Validate(f); err != nil {
			errs = append(errs, fmt.Errorf("web.config_file %s: %w", f, err))
		}
	}
	if f := cfg.Storage.ObjStore.ConfigFile; f != "" {
		b, err := os.ReadFile(f) //nolint:gosec // the operator's own file
		if err == nil {
			_, err = bucket.Parse(b)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("storage.objstore.config_file %s: %w", f, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return "", err
	}
	return summary, nil
}
