package export

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// ParseTime reads a time as RFC 3339, a date (2006-01-02, midnight in
// loc), Unix seconds, or a Prometheus duration meaning that long before now
// ("30d"; "0s" is now).
func ParseTime(s string, now time.Time, loc *time.Location) (time.Time, error) {
	if loc == nil {
		loc = time.UTC
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, loc); err == nil {
		return t, nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(frac*1e9)), nil
	}
	if d, err := model.ParseDuration(s); err == nil {
		return now.Add(-time.Duration(d)), nil
	}
	return time.Time{}, fmt.Errorf("%w: time %q is neither RFC 3339, a date, Unix seconds nor a duration before now", ErrBadRequest, s)
}

// ParseLocation reads an IANA time zone name ("" and "UTC" are UTC).
func ParseLocation(s string) (*time.Location, error) {
	if s == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(s)
	if err != nil {
		return nil, fmt.Errorf("%w: time zone %q: %w", ErrBadRequest, s, err)
	}
	return loc, nil
}

// splitList splits comma-separated values (each value may itself be a
// list), dropping empty ones.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// requestFromQuery reads GET /api/v1/export's parameters, which are the
// CLI's flags: from, to, step, tz, by (comma-separated or repeated),
// query (repeated; match[] is accepted too), format, preset.
func requestFromQuery(v url.Values, now time.Time) (Request, Format, error) {
	var req Request
	loc, err := ParseLocation(v.Get("tz"))
	if err != nil {
		return req, "", err
	}
	req.Location = loc
	from, to := v.Get("from"), v.Get("to")
	if from == "" {
		from = "7d"
	}
	if to == "" {
		to = "0s"
	}
	if req.From, err = ParseTime(from, now, loc); err != nil {
		return req, "", err
	}
	if req.To, err = ParseTime(to, now, loc); err != nil {
		return req, "", err
	}
	req.Step = v.Get("step")
	if req.Step == "" {
		req.Step = "1h"
	}
	req.By = splitList(v["by"])
	req.Queries = append(append([]string{}, v["query"]...), v["match[]"]...)
	req.Preset = v.Get("preset")
	f := FormatCSV
	if s := v.Get("format"); s != "" && (req.Preset == "" || s != "png") {
		if f, err = ParseFormat(s); err != nil {
			return req, "", err
		}
	} else if s == "png" {
		f = "png"
	}
	return req, f, nil
}

// Handler serves GET /api/v1/export: the export's rows stream as they are
// computed (CSV and JSON lines flushed after each step, Parquet after each
// row group), so the first bytes arrive long before a year is done. A bad
// request is a 400 in the Prometheus API's error shape, before any row; an
// error after the first bytes aborts the response (the client sees it cut
// short, without Parquet's footer or the chunked encoding's last chunk).
type Handler struct {
	e      *Exporter
	cap    CapacityConfig
	logger *slog.Logger
	now    func() time.Time
}

// NewHandler returns the handler over e; capacity configures ?preset=capacity.
func NewHandler(e *Exporter, capacity CapacityConfig, logger *slog.Logger, now func() time.Time) *Handler {
	if now == nil {
		now = time.Now
	}
	return &Handler{e: e, cap: capacity, logger: logger, now: now}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("%w: %w", ErrBadRequest, err))
		return
	}
	req, format, err := requestFromQuery(r.Form, h.now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	ctx := r.Context()
	job, err := h.e.Prepare(ctx, req, h.cap)
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, ErrBadRequest) {
			status = http.StatusBadRequest
		}
		writeError(w, status, err)
		return
	}
	if format == "png" {
		if !job.HasChart() {
			writeError(w, http.StatusBadRequest, fmt.Errorf("%w: format png needs preset=capacity", ErrBadRequest))
			return
		}
		w.Header().Set("Content-Type", "image/png")
		if err := job.Run(ctx, discardRows{}, nil); err != nil {
			h.abort(r, err)
		}
		if err := job.WriteChart(w); err != nil {
			h.abort(r, err)
		}
		return
	}
	w.Header().Set("Content-Type", format.ContentType())
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="strata-export.%s"`, format))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	rw, err := NewWriter(format, w, job.Columns(), req.Location)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	rc := http.NewResponseController(w)
	flushRows, _ := rw.(Flusher)
	progress := func(int, int) {
		if format == FormatParquet || flushRows == nil {
			_ = rc.Flush()
			return
		}
		if err := flushRows.Flush(); err == nil {
			_ = rc.Flush()
		}
	}
	if err := job.Run(ctx, rw, progress); err != nil {
		h.abort(r, err)
	}
	if err := rw.Close(); err != nil {
		h.abort(r, err)
	}
}

// abort ends a response whose status is already sent.
func (h *Handler) abort(r *http.Request, err error) {
	if !errors.Is(err, context.Canceled) {
		h.logger.Error("export failed after its first bytes", "url", r.URL.String(), "err", err)
	}
	panic(http.ErrAbortHandler)
}

// writeError writes the Prometheus API's error shape.
func writeError(w http.ResponseWriter, status int, err error) {
	typ := "bad_data"
	if status >= 500 {
		typ = "internal"
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": typ, "error": err.Error()})
}

type discardRows struct{}

func (discardRows) WriteRow([]Cell) error { return nil }
func (discardRows) Close() error          { return nil }
