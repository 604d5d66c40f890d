package export

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Format is an output format.
type Format string

// The output formats.
const (
	FormatParquet Format = "parquet"
	FormatCSV     Format = "csv"
	FormatJSON    Format = "jsonl" // JSON lines: one object per row
)

// ParseFormat reads a format name ("parquet", "csv", "jsonl" or "json").
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "parquet":
		return FormatParquet, nil
	case "csv":
		return FormatCSV, nil
	case "jsonl", "json", "ndjson":
		return FormatJSON, nil
	}
	return "", fmt.Errorf("%w: unknown format %q (parquet, csv or jsonl)", ErrBadRequest, s)
}

// ContentType is the format's media type.
func (f Format) ContentType() string {
	switch f {
	case FormatParquet:
		return "application/vnd.apache.parquet"
	case FormatCSV:
		return "text/csv; charset=utf-8"
	}
	return "application/x-ndjson"
}

// Request is what an export asks for. The CLI's flags and the API's
// parameters fill it alike.
type Request struct {
	// From and To bound the export, [From, To). Both are widened to whole
	// steps (From down, To up).
	From, To time.Time
	// Step is "1h", "1d" (midnight to midnight in Location), "1w" (Monday
	// 00:00 to Monday 00:00 in Location), or any other duration that is a
	// whole number of minutes ("15m", "6h"), aligned to the Unix epoch.
	Step string
	// Location draws the day and week boundaries (nil: UTC).
	Location *time.Location
	// Queries are series selectors (one metric name each) or PromQL
	// expressions, each optionally prefixed by "alias=", which names its
	// columns.
	Queries []string
	// By are the labels that make a group; none makes one group per step.
	By []string
	// Preset "capacity" replaces Queries and By (capacity.go).
	Preset string
}

// Errors an export returns for a request it cannot answer; all are the
// caller's to fix (HTTP 4xx). Each wraps ErrBadRequest.
var (
	// ErrBadRequest is a malformed request: a bad time, step, format,
	// selector, alias or time zone.
	ErrBadRequest = errors.New("bad export request")
	// ErrUnknownSelector: a selector matches no series in the range.
	ErrUnknownSelector = fmt.Errorf("%w: unknown selector", ErrBadRequest)
	// ErrUnknownLabel: a group-by label that no selected series carries.
	ErrUnknownLabel = fmt.Errorf("%w: unknown label", ErrBadRequest)
	// ErrStepTooFine: the step is finer than (or not a multiple of) the
	// tier that holds part of the range.
	ErrStepTooFine = fmt.Errorf("%w: step finer than the tier", ErrBadRequest)
	// ErrOutOfRange: the range lies where no tier holds data.
	ErrOutOfRange = fmt.Errorf("%w: range beyond retention", ErrBadRequest)
	// ErrEmpty: the selectors match series, but none has a sample in the range.
	ErrEmpty = fmt.Errorf("%w: empty result", ErrBadRequest)
)

// span is one step: [start, end), ms.
type span struct{ start, end int64 }

// stepper cuts a range into steps.
type stepper struct {
	fixed int64          // ms, for fixed steps
	cal   string         // "1d" or "1w"
	loc   *time.Location // for calendar steps
}

func parseStep(s string, loc *time.Location) (stepper, error) {
	if loc == nil {
		loc = time.UTC
	}
	switch s {
	case "1d", "1w":
		return stepper{cal: s, loc: loc}, nil
	case "":
		return stepper{}, fmt.Errorf("%w: no step (1h, 1d or 1w)", ErrBadRequest)
	}
	d, err := model.ParseDuration(s)
	if err != nil || d <= 0 || time.Duration(d)%time.Minute != 0 {
		return stepper{}, fmt.Errorf("%w: step %q is not 1h, 1d, 1w or a whole number of minutes", ErrBadRequest, s)
	}
	if time.Duration(d)%(7*24*time.Hour) == 0 || time.Duration(d)%(24*time.Hour) == 0 {
		// "7d" or "2d" as a fixed step would cut at UTC midnight whatever
		// the time zone; say what 1d and 1w do instead.
		if time.Duration(d) != 24*time.Hour && time.Duration(d) != 7*24*time.Hour {
			return stepper{}, fmt.Errorf("%w: step %q: use 1d or 1w (calendar days and weeks in --tz)", ErrBadRequest, s)
		}
		return stepper{cal: map[time.Duration]string{24 * time.Hour: "1d", 7 * 24 * time.Hour: "1w"}[time.Duration(d)], loc: loc}, nil
	}
	return stepper{fixed: time.Duration(d).Milliseconds(), loc: loc}, nil
}

// floor returns the start of the step holding t.
func (s stepper) floor(t int64) int64 {
	if s.fixed > 0 {
		return t - ((t%s.fixed)+s.fixed)%s.fixed
	}
	lt := time.UnixMilli(t).In(s.loc)
	day := time.Date(lt.Year(), lt.Month(), lt.Day(), 0, 0, 0, 0, s.loc)
	if s.cal == "1w" {
		back := (int(day.Weekday()) + 6) % 7 // days since Monday
		day = day.AddDate(0, 0, -back)
	}
	return day.UnixMilli()
}

// next returns the start of the step after the one starting at start.
func (s stepper) next(start int64) int64 {
	if s.fixed > 0 {
		return start + s.fixed
	}
	days := 1
	if s.cal == "1w" {
		days = 7
	}
	t := time.UnixMilli(start).In(s.loc)
	// AddDate keeps the wall clock: a day is 23 or 25 hours across DST.
	return time.Date(t.Year(), t.Month(), t.Day()+days, 0, 0, 0, 0, s.loc).UnixMilli()
}

// steps returns the steps covering [from, to), widened to whole steps.
func (s stepper) steps(from, to int64) []span {
	var out []span
	for t := s.floor(from); t < to; {
		n := s.next(t)
		out = append(out, span{t, n})
		t = n
	}
	return out
}

// minLength is the shortest step the stepper makes (for the tier check).
func (s stepper) minLength() int64 {
	switch {
	case s.fixed > 0:
		return s.fixed
	case s.cal == "1w":
		return 7*24*time.Hour.Milliseconds() - time.Hour.Milliseconds()
	}
	return 23 * time.Hour.Milliseconds()
}

// query is one parsed entry of Request.Queries.
type query struct {
	alias string
	text  string
	// A series selector: its matchers and metric name.
	matchers []*labels.Matcher
	name     string
	kind     Kind
	// A PromQL expression (matchers nil).
	expr parser.Expr
	// optional: no series is not an error (the preset's metrics that
	// only some sources have); slotPeak: a counter's columns include its
	// peak window rate (the preset's peak demand).
	optional, slotPeak bool
}

var (
	aliasRe   = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=([^=~].*)$`)
	aliasName = regexp.MustCompile(`[^A-Za-z0-9_]+`)
)

// parseQueries parses each query; a selector's columns are named after
// its metric (characters other than letters, digits and _ become _), an
// expression's expr1, expr2, ..., unless an alias names them.
func parseQueries(qs []string) ([]*query, error) {
	if len(qs) == 0 {
		return nil, fmt.Errorf("%w: no series selector or PromQL expression", ErrBadRequest)
	}
	p := parser.NewParser(parser.Options{})
	var out []*query
	seen := map[string]bool{}
	for i, text := range qs {
		q := &query{text: strings.TrimSpace(text)}
		if m := aliasRe.FindStringSubmatch(q.text); m != nil && !strings.ContainsAny(m[1], "{(") {
			q.alias, q.text = m[1], strings.TrimSpace(m[2])
		}
		expr, err := p.ParseExpr(q.text)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrBadRequest, q.text, err)
		}
		if vs, ok := expr.(*parser.VectorSelector); ok && vs.OriginalOffset == 0 && vs.Timestamp == nil && vs.StartOrEnd == 0 {
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					q.name = m.Value
				}
			}
			if q.name == "" {
				return nil, fmt.Errorf("%w: selector %q names no metric: give one metric name per selector, or a PromQL expression", ErrBadRequest, q.text)
			}
			q.matchers = vs.LabelMatchers
			if q.alias == "" {
				q.alias = strings.Trim(aliasName.ReplaceAllString(q.name, "_"), "_")
			}
		} else {
			if expr.Type() != parser.ValueTypeVector && expr.Type() != parser.ValueTypeScalar {
				return nil, fmt.Errorf("%w: %q is a %s; an export needs an instant vector (a range selector goes inside a function, e.g. rate(x[5m]))", ErrBadRequest, q.text, expr.Type())
			}
			q.expr = expr
			if q.alias == "" {
				q.alias = fmt.Sprintf("expr%d", i+1)
			}
		}
		if seen[q.alias] {
			return nil, fmt.Errorf("%w: two queries named %q: name them with alias=NAME", ErrBadRequest, q.alias)
		}
		seen[q.alias] = true
		out = append(out, q)
	}
	return out, nil
}

// reservedColumns are the columns every row has; a group-by label may not
// take their names.
var reservedColumns = []string{"step_start", "step_end", "tier"}

func checkBy(by []string) error {
	seen := map[string]bool{}
	for _, l := range by {
		if !model.UTF8Validation.IsValidLabelName(l) || l == model.MetricNameLabel {
			return fmt.Errorf("%w: %q is not a label to group by", ErrBadRequest, l)
		}
		if slices.Contains(reservedColumns, l) || seen[l] {
			return fmt.Errorf("%w: label %q given twice or clashing with column %q", ErrBadRequest, l, l)
		}
		seen[l] = true
	}
	return nil
}
