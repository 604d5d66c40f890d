package diagnose

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	defaultrules "github.com/strata-dev/strata/diagnose/rules"
)

// ruleFile is one parsed rule file and the name it is shown under.
type ruleFile struct {
	name   string
	groups []rulefmt.RuleGroup
	pack   bool // the embedded default pack
}

// Errors of rule loading.
var (
	// ErrInvalidRules is wrapped by every error about a rule file.
	ErrInvalidRules = errors.New("invalid diagnosis rules")
)

func newParser() parser.Parser { return parser.NewParser(parser.Options{}) }

// parseRuleFile parses content as a Prometheus rule file named name; errors
// carry the file name and, from rulefmt, the line and column.
func parseRuleFile(name string, content []byte) (ruleFile, error) {
	rgs, errs := rulefmt.Parse(content, false, model.UTF8Validation, newParser(), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = name + ": " + e.Error()
		}
		return ruleFile{}, fmt.Errorf("%w: %s", ErrInvalidRules, strings.Join(msgs, "; "))
	}
	return ruleFile{name: name, groups: rgs.Groups}, nil
}

// DefaultPackFiles lists the default pack's rule files (without tests), as
// embedded, in evaluation order: derived.yml (the pack's recording rules)
// first, so the rules after it read this minute's derived signals, then the
// others by name.
func DefaultPackFiles() ([]string, error) {
	var out []string
	err := fs.WalkDir(defaultrules.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".yml") && !strings.HasSuffix(p, ".test.yml") {
			out = append(out, p)
		}
		return nil
	})
	slices.SortFunc(out, func(a, b string) int {
		if (a == "derived.yml") != (b == "derived.yml") {
			if a == "derived.yml" {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return out, err
}

// CheckRules loads and checks the rule files cfg names (the default pack
// with its disabled_rules and runbook_urls, and rule_files) as New does,
// without an engine, and returns how many groups and rules they hold: for
// `strata check config`.
func CheckRules(cfg Config) (groups, rules int, err error) {
	files, err := loadRuleFiles(cfg)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range files {
		groups += len(f.groups)
		for _, g := range f.groups {
			rules += len(g.Rules)
		}
	}
	return groups, rules, nil
}

// loadRuleFiles returns, in evaluation order, the default pack (minus the
// disabled rules) and the operator's files.
func loadRuleFiles(cfg Config) ([]ruleFile, error) {
	var files []ruleFile
	if cfg.DefaultPack {
		names, err := DefaultPackFiles()
		if err != nil {
			return nil, fmt.Errorf("list default rule pack: %w", err)
		}
		for _, n := range names {
			b, err := fs.ReadFile(defaultrules.FS, n)
			if err != nil {
				return nil, fmt.Errorf("read default rule pack: %w", err)
			}
			f, err := parseRuleFile(path.Join("diagnose/rules", n), b)
			if err != nil {
				return nil, err
			}
			f.pack = true
			files = append(files, f)
		}
	}
	if err := disable(files, cfg.DisabledRules); err != nil {
		return nil, err
	}
	if err := setRunbooks(files, cfg.RunbookURLs); err != nil {
		return nil, err
	}
	for _, pat := range cfg.RuleFiles {
		matches, err := filepath.Glob(pat)
		if err != nil {
			return nil, fmt.Errorf("%w: rule_files pattern %q: %w", ErrInvalidRules, pat, err)
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("%w: rule_files pattern %q matches no file", ErrInvalidRules, pat)
		}
		slices.Sort(matches)
		for _, fn := range matches {
			rgs, errs := rulefmt.ParseFile(fn, false, model.UTF8Validation, newParser(), slog.New(slog.DiscardHandler))
			if len(errs) > 0 {
				msgs := make([]string, len(errs))
				for i, e := range errs {
					msgs[i] = e.Error()
				}
				return nil, fmt.Errorf("%w: %s", ErrInvalidRules, strings.Join(msgs, "; "))
			}
			files = append(files, ruleFile{name: fn, groups: rgs.Groups})
		}
	}
	return files, checkGroups(files)
}

// disable removes the named rules from the default pack; a name that is
// not in it is an error (a typo would otherwise leave the rule on).
func disable(files []ruleFile, names []string) error {
	found := map[string]bool{}
	for _, n := range names {
		found[n] = false
	}
	for fi := range files {
		for gi := range files[fi].groups {
			g := &files[fi].groups[gi]
			g.Rules = slices.DeleteFunc(g.Rules, func(r rulefmt.Rule) bool {
				n := r.Alert + r.Record
				if _, ok := found[n]; ok {
					found[n] = true
					return true
				}
				return false
			})
		}
	}
	var missing []string
	for n, ok := range found {
		if !ok {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("%w: disabled_rules names rules that are not in the default pack: %s", ErrInvalidRules, strings.Join(missing, ", "))
	}
	return nil
}

// setRunbooks sets the runbook_url of the named default-pack alerts.
func setRunbooks(files []ruleFile, urls map[string]string) error {
	left := maps.Clone(urls)
	for fi := range files {
		for gi := range files[fi].groups {
			for ri := range files[fi].groups[gi].Rules {
				r := &files[fi].groups[gi].Rules[ri]
				if u, ok := urls[r.Alert]; ok && r.Alert != "" {
					r.Annotations = maps.Clone(r.Annotations)
					r.Annotations["runbook_url"] = u
					delete(left, r.Alert)
				}
			}
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("%w: runbook_urls names alerts that are not in the default pack: %s", ErrInvalidRules, strings.Join(slices.Sorted(maps.Keys(left)), ", "))
	}
	return nil
}

// checkGroups enforces what the engine relies on: one evaluation a minute,
// and diagnosis labels on the default pack's alerts.
func checkGroups(files []ruleFile) error {
	seen := map[string]string{}
	for _, f := range files {
		for _, g := range f.groups {
			if prev, ok := seen[g.Name]; ok {
				return fmt.Errorf("%w: %s: group %q is also defined in %s", ErrInvalidRules, f.name, g.Name, prev)
			}
			seen[g.Name] = f.name
			if g.Interval != 0 && time.Duration(g.Interval) != time.Minute {
				return fmt.Errorf("%w: %s: group %q: interval must be 1m or unset (diagnosis rules run once per minute window), got %s", ErrInvalidRules, f.name, g.Name, g.Interval)
			}
			if g.QueryOffset != nil && *g.QueryOffset != 0 {
				return fmt.Errorf("%w: %s: group %q: query_offset is not supported (minutes are evaluated once final)", ErrInvalidRules, f.name, g.Name)
			}
			for i, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				where := fmt.Sprintf("%s: group %q, rule %d (%s)", f.name, g.Name, i+1, r.Alert)
				typ := r.Labels["alert_type"]
				if f.pack && typ != "cause" && typ != "symptom" {
					return fmt.Errorf("%w: %s: label alert_type must be cause or symptom", ErrInvalidRules, where)
				}
				if typ == "cause" {
					if r.Labels["diagnosis"] == "" {
						return fmt.Errorf("%w: %s: a cause rule needs a diagnosis label", ErrInvalidRules, where)
					}
					if f.pack && !slices.Contains(Causes, r.Labels["diagnosis"]) {
						return fmt.Errorf("%w: %s: unknown diagnosis %q", ErrInvalidRules, where, r.Labels["diagnosis"])
					}
					if _, err := parseActions(r.Annotations["actions"]); err != nil {
						return fmt.Errorf("%w: %s: annotation actions: %w", ErrInvalidRules, where, err)
					}
				}
			}
		}
	}
	return nil
}

// sloYAML renders the objectives as recording rules: one series per
// configured model and the default for every other model the signals show.
func sloYAML(c SLOConfig) []byte {
	var b strings.Builder
	b.WriteString("groups:\n  - name: strata_diagnose_slo\n    interval: 1m\n    rules:\n")
	models := make([]string, 0, len(c.Models))
	for m := range c.Models {
		models = append(models, m)
	}
	slices.Sort(models)
	emit := func(record, signal string, get func(SLO) float64) {
		var terms []string
		for _, m := range models {
			terms = append(terms, fmt.Sprintf(`label_replace(vector(%s), "model_name", %s, "", "")`, fmtFloat(get(c.forModel(m))), strconv.Quote(m)))
		}
		terms = append(terms, fmt.Sprintf(`(0 * group by (model_name) (%s) + %s)`, signal, fmtFloat(get(c.Default))))
		fmt.Fprintf(&b, "      - record: %s\n        expr: %s\n", record, strconv.Quote(strings.Join(terms, " or on (model_name) ")))
	}
	emit("strata:slo:ttft_seconds:p99", "strata:ttft_seconds:p99", func(s SLO) float64 { return time.Duration(s.TTFTP99).Seconds() })
	emit("strata:slo:tpot_seconds:p99", "strata:tpot_seconds:p99", func(s SLO) float64 { return time.Duration(s.TPOTP99).Seconds() })
	emit("strata:slo:e2e_latency_seconds:p99", "strata:e2e_latency_seconds:p99", func(s SLO) float64 { return time.Duration(s.E2EP99).Seconds() })
	emit("strata:slo:request_errors:ratio", "strata:request_errors:ratio", func(s SLO) float64 { return s.ErrorRatio })
	return []byte(b.String())
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
