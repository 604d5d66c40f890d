package diagnose

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Source is what the HTTP API reads; *Engine implements it.
type Source interface {
	Diagnoses() []Diagnosis
	Diagnosis(id string) (Diagnosis, bool)
}

// Filter selects diagnoses (GET /api/v1/diagnoses parameters, docs/api.md).
type Filter struct {
	// Start and End keep the diagnoses open at some time in [Start, End]
	// (zero: unbounded).
	Start, End time.Time
	State      State
	Cause      string
	Severity   string
	// Entities keeps diagnoses whose entity labels equal these.
	Entities map[string]string
}

// Match reports whether d passes the filter.
func (f Filter) Match(d Diagnosis) bool {
	from, to := f.Start, f.End
	if from.IsZero() {
		from = time.UnixMilli(math.MinInt64 / 2)
	}
	if to.IsZero() {
		to = time.UnixMilli(math.MaxInt64 / 2)
	}
	if !d.Overlaps(from, to) || (f.State != "" && d.State != f.State) || (f.Cause != "" && d.Cause != f.Cause) || (f.Severity != "" && d.Severity != f.Severity) {
		return false
	}
	ent := d.Entities.Map()
	for k, v := range f.Entities {
		if ent[k] != v {
			return false
		}
	}
	return true
}

// EntityLabels are the entity filter parameters.
var EntityLabels = []string{"model", "namespace", "pod", "instance", "host", "gpu", "uuid"}

// ParseTime reads an API or CLI time: RFC 3339, Unix seconds (with a
// fraction), or a duration relative to now ("-2h", "-90m"; "now" is 0).
func ParseTime(s string, now time.Time) (time.Time, error) {
	if s == "now" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		if d, err := time.ParseDuration(s); err == nil {
			return now.Add(d), nil
		}
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		return time.UnixMilli(int64(f * 1000)), nil
	}
	return time.Time{}, fmt.Errorf("invalid time %q: want RFC 3339 (2026-01-05T10:00:00Z), Unix seconds, or a duration before now such as -2h", s)
}

// Select returns the diagnoses of ds that f matches, oldest first (by
// start), as GET /api/v1/diagnoses lists them; never nil.
func (f Filter) Select(ds []Diagnosis) []Diagnosis {
	out := []Diagnosis{}
	for _, d := range ds {
		if f.Match(d) {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b Diagnosis) int { return a.Start.Compare(b.Start) })
	return out
}

// ParseFilter reads the query parameters of GET /api/v1/diagnoses.
func ParseFilter(r *http.Request, now time.Time) (Filter, error) {
	q := r.URL.Query()
	var f Filter
	var err error
	if s := q.Get("start"); s != "" {
		if f.Start, err = ParseTime(s, now); err != nil {
			return f, fmt.Errorf("start: %w", err)
		}
	}
	if s := q.Get("end"); s != "" {
		if f.End, err = ParseTime(s, now); err != nil {
			return f, fmt.Errorf("end: %w", err)
		}
	}
	if !f.Start.IsZero() && !f.End.IsZero() && f.End.Before(f.Start) {
		return f, fmt.Errorf("end %s is before start %s", f.End.UTC().Format(time.RFC3339), f.Start.UTC().Format(time.RFC3339))
	}
	switch s := State(q.Get("state")); s {
	case "", StateFiring, StateResolved:
		f.State = s
	default:
		return f, fmt.Errorf("state must be firing or resolved, got %q", s)
	}
	f.Cause, f.Severity = q.Get("cause"), q.Get("severity")
	for _, l := range EntityLabels {
		if v := q.Get(l); v != "" {
			if f.Entities == nil {
				f.Entities = map[string]string{}
			}
			f.Entities[l] = v
		}
	}
	return f, nil
}

type apiResponse struct {
	Status    string `json:"status"`
	Data      any    `json:"data,omitempty"`
	ErrorType string `json:"errorType,omitempty"`
	Error     string `json:"error,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v apiResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// NewHandler serves GET /api/v1/diagnoses and GET /api/v1/diagnoses/{id}
// (register it for both patterns) in the Prometheus API's envelope.
func NewHandler(src Source, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id := r.PathValue("id"); id != "" {
			d, ok := src.Diagnosis(id)
			if !ok {
				writeJSON(w, http.StatusNotFound, apiResponse{Status: "error", ErrorType: "not_found", Error: "no diagnosis " + id})
				return
			}
			writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: d})
			return
		}
		f, err := ParseFilter(r, now())
		if err != nil {
			writeJSON(w, http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: f.Select(src.Diagnoses())})
	})
}
