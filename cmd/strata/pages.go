package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/strata-dev/strata/diagnose"
)

// The two HTML pages the links in Strata's alerts open, so that an on-call
// engineer who clicks one in Alertmanager or a chat message reads what it
// is about: /diagnoses/<id> (a diagnosis: its cause, evidence, actions)
// and /graph?g0.expr=<query> (Prometheus' link form, which the alerting
// rules' generatorURL takes: the expression's current value as a table).
// Server-rendered, no script; the links between them are relative, so
// they work under a route prefix. Queries go through the query API's own
// handler, with its limits, timeouts and concurrency gate.

// maxTableRows bounds the rows the table page renders.
const maxTableRows = 1000

var pageTemplates = template.Must(template.New("page").Funcs(template.FuncMap{
	"f": func(v *float64) string {
		if v == nil {
			return "-"
		}
		return strconv.FormatFloat(*v, 'g', 4, 64)
	},
	"pct": func(v float64) string { return fmt.Sprintf("%.0f%%", 100*v) },
	"utc": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
	"graph": func(q string, at time.Time) string {
		return "../graph?g0.tab=1&g0.expr=" + url.QueryEscape(q) + "&time=" + strconv.FormatInt(at.Unix(), 10)
	},
}).Parse(`{{define "head"}}<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.}} - Strata</title>
<style>body{font-family:sans-serif;margin:2em;max-width:75em}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}th{background:#f4f4f4}
code{background:#f4f4f4;padding:0 .2em}.num{text-align:right;font-variant-numeric:tabular-nums;white-space:pre-line}</style></head><body>
{{end}}
{{define "diagnosis"}}{{template "head" .D.Cause}}
<h1>{{if .D.Summary}}{{.D.Summary}}{{else}}{{.D.Cause}}{{end}}</h1>
<p><b>{{.D.State}}</b>{{if .D.Severity}}, severity {{.D.Severity}}{{end}}, confidence {{pct .D.Confidence}};
since {{utc .D.Start}}{{with .D.End}}, resolved {{utc .}}{{end}}; last evaluated {{utc .D.Updated}}.
Cause <code>{{.D.Cause}}</code>{{if .D.Rule}} (rule <code>{{.D.Rule}}</code>){{end}}{{if .D.Dimension}}, dimension {{.D.Dimension}}{{end}}.</p>
<table><tr>{{range .Entities}}<th>{{.Name}}</th>{{end}}</tr><tr>{{range .Entities}}<td>{{.Value}}</td>{{end}}</tr></table>
{{if .D.Description}}<p>{{.D.Description}}</p>{{end}}
{{if .D.RunbookURL}}<p>Runbook: <a href="{{.D.RunbookURL}}">{{.D.RunbookURL}}</a></p>{{end}}
<h2>Actions</h2>{{if .D.Actions}}<table><tr><th>action</th><th>effect</th><th>risk</th></tr>
{{range .D.Actions}}<tr><td>{{.Action}}</td><td>{{.Effect}}</td><td>{{.Risk}}</td></tr>{{end}}</table>{{else}}<p>None suggested.</p>{{end}}
<h2>Evidence</h2>{{if .D.Evidence}}<p>Each query opens its values at the last minute evaluated.</p><table><tr><th>metric</th><th>value</th><th>threshold</th><th>baseline</th><th>sigma</th><th>deviation (sigmas)</th><th>baseline from</th><th>query</th></tr>
{{range .D.Evidence}}<tr><td><code>{{.Metric}}</code></td><td class="num">{{f .Value}}</td><td class="num">{{f .Threshold}}</td><td class="num">{{f .Baseline}}</td><td class="num">{{f .Sigma}}</td><td class="num">{{f .DeviationSigma}}</td><td>{{.BaselineSource}}</td><td>{{if .Query}}<a href="{{graph .Query $.D.Updated}}"><code>{{.Query}}</code></a>{{end}}</td></tr>{{end}}</table>{{else}}<p>None.</p>{{end}}
{{if .D.Candidates}}<h2>Candidate causes</h2><table><tr><th>cause</th><th>score</th><th>rule</th></tr>
{{range .D.Candidates}}<tr><td>{{.Cause}}</td><td class="num">{{printf "%.2f" .Score}}</td><td>{{.Rule}}</td></tr>{{end}}</table>{{end}}
{{if .D.Symptoms}}<h2>Symptoms it explains</h2><table><tr><th>alert</th><th>type</th><th>since</th><th>labels</th></tr>
{{range .D.Symptoms}}<tr><td>{{.Alert}}</td><td>{{.Type}}</td><td>{{utc .Since}}</td><td>{{range $k, $v := .Labels}}{{$k}}="{{$v}}" {{end}}</td></tr>{{end}}</table>{{end}}
{{if .D.SimilarCases}}<h2>Similar past cases</h2><table><tr><th>case</th><th>cause</th><th>similarity</th><th>verdict</th></tr>
{{range .D.SimilarCases}}<tr><td>{{.ID}}</td><td>{{.Cause}}</td><td class="num">{{printf "%.2f" .Similarity}}</td><td>{{.Verdict}}</td></tr>{{end}}</table>{{end}}
<p>As JSON: <a href="../api/v1/diagnoses/{{.D.ID}}">api/v1/diagnoses/{{.D.ID}}</a>. Tell Strata whether it was right:
<code>curl -X POST -d '{"verdict":"confirmed"}' {{.Base}}api/v1/diagnoses/{{.D.ID}}/feedback</code> (or <code>rejected</code>, with <code>"cause"</code>).</p>
</body></html>{{end}}
{{define "list"}}{{template "head" "Diagnoses"}}
<h1>Diagnoses</h1>
{{if .Error}}<p><b>Error:</b> {{.Error}}</p>{{end}}
{{if .Rows}}<table><tr><th>state</th><th>since</th><th>cause</th><th>confidence</th><th>severity</th><th>where</th><th>summary</th></tr>
{{range .Rows}}<tr><td>{{.D.State}}</td><td>{{utc .D.Start}}</td><td><a href="diagnoses/{{.D.ID}}">{{.D.Cause}}</a></td><td class="num">{{pct .D.Confidence}}</td><td>{{.D.Severity}}</td><td>{{.Where}}</td><td>{{.D.Summary}}</td></tr>{{end}}</table>
{{else if not .Error}}<p>None{{if .Filtered}} matches the filter{{end}}: the diagnosis engine holds the open diagnoses and those of the last hours{{if not .Enabled}}, and it is off (diagnose.enabled){{end}}.</p>{{end}}
<p>The same filters as <a href="api/v1/diagnoses">api/v1/diagnoses</a> apply (<code>state</code>, <code>cause</code>, <code>severity</code>, <code>start</code>, <code>end</code>, the entity labels), newest first.</p>
</body></html>{{end}}
{{define "graph"}}{{template "head" "Query"}}
<form method="get" action=""><input type="hidden" name="g0.tab" value="1">
<input name="g0.expr" value="{{.Expr}}" size="100" aria-label="PromQL expression">{{if .Time}}
<input type="hidden" name="time" value="{{.Time}}">{{end}} <input type="submit" value="Execute"></form>
{{if .Error}}<p><b>Error:</b> {{.Error}}</p>{{end}}
{{range .Notes}}<p><i>{{.}}</i></p>{{end}}
{{if .Rows}}<p>{{len .Rows}}{{if .Cut}} of {{.Total}}{{end}} results at {{utc .At}}:</p><table><tr><th>series</th><th>value</th></tr>
{{range .Rows}}<tr><td><code>{{.Series}}</code></td><td class="num">{{.Value}}</td></tr>{{end}}</table>
{{else if and .Expr (not .Error)}}<p>Empty result at {{utc .At}}.</p>{{end}}
{{if .Expr}}<p>As JSON: <a href="{{.JSON}}">api/v1/query</a>.</p>{{end}}
</body></html>{{end}}`))

type entityCell struct{ Name, Value string }

// diagnosisPage serves GET /diagnoses/{id} from src; base is the external
// URL with a trailing slash.
func diagnosisPage(src diagnose.Source, base func() string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		d, ok := src.Diagnosis(id)
		if !ok {
			http.Error(w, "no diagnosis "+id+" (the diagnosis engine holds the open ones and those of the last hours; the case archive keeps older ones: strata diagnose archive export)", http.StatusNotFound)
			return
		}
		render(w, http.StatusOK, "diagnosis", struct {
			D        diagnose.Diagnosis
			Entities []entityCell
			Base     string
		}{d, entityCells(d.Entities), base()})
	}
}

// entityCells are e's labels that are set, in a fixed order.
func entityCells(e diagnose.Entities) []entityCell {
	var out []entityCell
	for _, k := range []entityCell{{"model", e.Model}, {"namespace", e.Namespace}, {"pod", e.Pod},
		{"instance", e.Instance}, {"host", e.Host}, {"gpu", e.GPU}, {"uuid", e.UUID}} {
		if k.Value != "" {
			out = append(out, k)
		}
	}
	return out
}

type listRow struct {
	D     diagnose.Diagnosis
	Where string
}

// diagnosesPage serves GET /diagnoses: the engine's diagnoses, newest
// first, with GET /api/v1/diagnoses' filters; enabled says whether the
// engine runs.
func diagnosesPage(src diagnose.Source, enabled bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page := struct {
			Rows              []listRow
			Error             string
			Filtered, Enabled bool
		}{Filtered: r.URL.RawQuery != "", Enabled: enabled}
		f, err := diagnose.ParseFilter(r, time.Now())
		if err != nil {
			page.Error = err.Error()
			render(w, http.StatusBadRequest, "list", page)
			return
		}
		ds := f.Select(src.Diagnoses())
		for _, d := range slices.Backward(ds) { // newest first
			var where []string
			for _, c := range entityCells(d.Entities) {
				if c.Name != "model" && c.Name != "uuid" {
					where = append(where, c.Name+"="+c.Value)
				}
			}
			page.Rows = append(page.Rows, listRow{D: d, Where: strings.Join(where, " ")})
		}
		render(w, http.StatusOK, "list", page)
	}
}

type tableRow struct{ Series, Value string }

// graphPage serves GET /graph: g0.expr evaluated now (or at time) through
// api, the query API's handler, as a table.
func graphPage(api http.Handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		page := struct {
			Expr, Time, Error, JSON string
			Notes                   []string
			Rows                    []tableRow
			Total                   int
			Cut                     bool
			At                      time.Time
		}{Expr: r.FormValue("g0.expr"), Time: r.FormValue("time"), At: time.Now()}
		if page.Expr != "" {
			q := url.Values{"query": {page.Expr}}
			if page.Time != "" {
				q.Set("time", page.Time)
				if f, err := strconv.ParseFloat(page.Time, 64); err == nil {
					page.At = time.UnixMilli(int64(f * 1000))
				}
			}
			page.JSON = "api/v1/query?" + q.Encode()
			rec := httptest.NewRecorder()
			req := httptest.NewRequestWithContext(r.Context(), http.MethodGet, "/api/v1/query?"+q.Encode(), nil)
			api.ServeHTTP(rec, req)
			var resp struct {
				Error    string   `json:"error"`
				Warnings []string `json:"warnings"`
				Infos    []string `json:"infos"`
				Data     struct {
					Type   model.ValueType `json:"resultType"`
					Result json.RawMessage `json:"result"`
				} `json:"data"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
				page.Error = fmt.Sprintf("the query API answered %d: %s", rec.Code, rec.Body.String())
			} else {
				page.Error = resp.Error
				page.Notes = append(slices.Clip(resp.Warnings), resp.Infos...)
				page.Rows, page.Total, page.At = tableRows(resp.Data.Type, resp.Data.Result, page.At)
				page.Cut = page.Total > len(page.Rows)
			}
		}
		render(w, http.StatusOK, "graph", page)
	}
}

// tableRows turns a query API result into rows (at most maxTableRows) and
// the evaluation time.
func tableRows(typ model.ValueType, raw json.RawMessage, at time.Time) ([]tableRow, int, time.Time) {
	var rows []tableRow
	switch typ {
	case model.ValVector:
		var v model.Vector
		if json.Unmarshal(raw, &v) == nil {
			for _, s := range v {
				val := s.Value.String()
				if s.Histogram != nil {
					val = s.Histogram.String()
				}
				rows = append(rows, tableRow{s.Metric.String(), val})
				at = s.Timestamp.Time()
			}
		}
	case model.ValMatrix:
		var m model.Matrix
		if json.Unmarshal(raw, &m) == nil {
			for _, s := range m {
				var val strings.Builder
				for _, p := range s.Values {
					val.WriteString(p.Value.String() + " @" + p.Timestamp.String() + "\n")
				}
				rows = append(rows, tableRow{s.Metric.String(), val.String()})
			}
		}
	case model.ValScalar:
		var sc model.Scalar
		if json.Unmarshal(raw, &sc) == nil {
			rows, at = []tableRow{{"scalar", sc.Value.String()}}, sc.Timestamp.Time()
		}
	case model.ValString:
		var st model.String
		if json.Unmarshal(raw, &st) == nil {
			rows, at = []tableRow{{"string", st.Value}}, st.Timestamp.Time()
		}
	}
	total := len(rows)
	if total > maxTableRows {
		rows = rows[:maxTableRows]
	}
	return rows, total, at
}

// base is the external URL with a trailing slash ("/" before serve).
func (s *server) base() string {
	if s.ext == nil {
		return "/"
	}
	return s.ext.String() + "/"
}

// render writes the page whole with code, or a 500 if its template fails.
func render(w http.ResponseWriter, code int, name string, data any) {
	var b bytes.Buffer
	if err := pageTemplates.ExecuteTemplate(&b, name, data); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(b.Bytes())
}
