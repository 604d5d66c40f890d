package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/diagnose"
)

type fakeDiagnoses map[string]diagnose.Diagnosis

func (f fakeDiagnoses) Diagnoses() []diagnose.Diagnosis {
	var out []diagnose.Diagnosis
	for _, d := range f {
		out = append(out, d)
	}
	return out
}
func (f fakeDiagnoses) Diagnosis(id string) (diagnose.Diagnosis, bool) {
	d, ok := f[id]
	return d, ok
}

// TestDiagnosisPage: the page a diagnosis alert links to shows its cause,
// confidence, entities, actions and evidence, links each evidence query to
// the table page (relative, so under a route prefix too), escapes what the
// fleet's labels hold, and answers 404 for an unknown id.
func TestDiagnosisPage(t *testing.T) {
	v, th := 0.99, 0.9
	d := diagnose.Diagnosis{
		ID: "d-00000000000000ab", Cause: "kv_cache_eviction_storm", State: diagnose.StateFiring, Severity: "critical",
		Confidence: 0.8, Start: time.Date(2026, 12, 7, 13, 7, 0, 0, time.UTC), Updated: time.Date(2026, 12, 7, 13, 20, 0, 0, time.UTC),
		Entities: diagnose.Entities{Namespace: "inference", Pod: "vllm-<script>alert(1)</script>"},
		Summary:  "KV cache eviction storm on vllm-a",
		Evidence: []diagnose.Evidence{{Metric: "strata:kv_cache_usage:ratio", Value: &v, Threshold: &th, Query: `strata:kv_cache_usage:ratio{pod="vllm-a"}`}},
		Actions:  []diagnose.Action{{Action: "lower max_num_seqs", Effect: "fewer preemptions", Risk: "lower throughput"}},
	}
	h := diagnosisPage(fakeDiagnoses{d.ID: d}, func() string { return "https://strata.example.com/" })
	mux := http.NewServeMux()
	mux.HandleFunc("GET /diagnoses/{id}", h)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Body)
		return rec.Code, string(b)
	}
	code, body := get("/diagnoses/" + d.ID)
	if code != 200 {
		t.Fatalf("%d %s", code, body)
	}
	for _, want := range []string{
		"KV cache eviction storm on vllm-a", "kv_cache_eviction_storm", "80%", "2026-12-07 13:07:00 UTC", "lower max_num_seqs", "lower throughput",
		`href="../graph?g0.tab=1&amp;g0.expr=strata%3Akv_cache_usage%3Aratio%7Bpod%3D%22vllm-a%22%7D&amp;time=1796649600"`, "0.99", "0.9",
		"vllm-&lt;script&gt;", `href="../api/v1/diagnoses/d-00000000000000ab"`, "https://strata.example.com/api/v1/diagnoses/d-00000000000000ab/feedback",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "<script>") {
		t.Error("a label's markup is not escaped")
	}
	if code, body := get("/diagnoses/d-00000000000000ff"); code != 404 || !strings.Contains(body, "no diagnosis d-00000000000000ff") {
		t.Errorf("an unknown id: %d %s", code, body)
	}
}

// TestGraphPage: the page an alerting rule's generatorURL opens evaluates
// its expression through the query API and shows the result as a table,
// or the API's error, with the expression escaped.
func TestGraphPage(t *testing.T) {
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Query().Get("query") {
		case "up":
			_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"__name__":"up","job":"vllm"},"value":[1796663448.652,"1"]},{"metric":{"__name__":"up","job":"dcgm"},"value":[1796663448.652,"0"]}]},"infos":["PromQL info: strata: served by tiers minute,raw"]}`)
		case "1+1":
			_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"scalar","result":[1796663448.652,"2"]}}`)
		default:
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"status":"error","errorType":"bad_data","error":"1:4: parse error: unexpected <by>"}`)
		}
	})
	get := func(expr string) string {
		rec := httptest.NewRecorder()
		graphPage(api).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/graph?g0.tab=1&g0.expr="+strings.NewReplacer("+", "%2B", " ", "+", "<", "%3C").Replace(expr), nil))
		return rec.Body.String()
	}
	for expr, wants := range map[string][]string{
		"up":        {`up{job=&#34;vllm&#34;}`, `up{job=&#34;dcgm&#34;}`, "2 results", "served by tiers minute,raw", `href="api/v1/query?query=up"`},
		"1+1":       {"scalar", ">2<"},
		"up <by> x": {"Error:", "parse error: unexpected &lt;by&gt;", `value="up &lt;by&gt; x"`},
		"":          {`name="g0.expr"`},
	} {
		body := get(expr)
		for _, want := range wants {
			if !strings.Contains(body, want) {
				t.Errorf("%q: the page lacks %q:\n%s", expr, want, body)
			}
		}
	}
}

// TestGraphPageAtTime: a time given (a diagnosis' evidence link) reaches the
// query API and stays in the form.
func TestGraphPageAtTime(t *testing.T) {
	var got string
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.URL.Query().Get("time")
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	})
	rec := httptest.NewRecorder()
	graphPage(api).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/graph?g0.expr=up&time=1796649600", nil))
	if body := rec.Body.String(); got != "1796649600" || !strings.Contains(body, `name="time" value="1796649600"`) || !strings.Contains(body, "Empty result at 2026-12-07 13:20:00 UTC") {
		t.Fatalf("time %q reached the API; page:\n%s", got, body)
	}
}

// TestDiagnosesPage: /diagnoses lists the engine's diagnoses newest first,
// each linked to its page, with the API's filters; a bad filter is a 400.
func TestDiagnosesPage(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 13, 0, 0, 0, time.UTC)
	end := t0.Add(time.Hour)
	src := fakeDiagnoses{
		"d-01": {ID: "d-01", Cause: "power_cap", State: diagnose.StateResolved, Start: t0, End: &end, Entities: diagnose.Entities{Host: "gpu-node-1", GPU: "3"}},
		"d-02": {ID: "d-02", Cause: "kv_cache_eviction_storm", State: diagnose.StateFiring, Start: t0.Add(30 * time.Minute), Entities: diagnose.Entities{Namespace: "inference", Pod: "vllm-a"}},
	}
	get := func(query string) (int, string) {
		rec := httptest.NewRecorder()
		diagnosesPage(src, true).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/diagnoses"+query, nil))
		return rec.Code, rec.Body.String()
	}
	code, body := get("")
	first, second := strings.Index(body, `href="diagnoses/d-02"`), strings.Index(body, `href="diagnoses/d-01"`)
	if code != 200 || first < 0 || second < 0 || first > second || !strings.Contains(body, "host=gpu-node-1 gpu=3") || !strings.Contains(body, "namespace=inference pod=vllm-a") {
		t.Fatalf("%d %s", code, body)
	}
	if _, body := get("?state=resolved"); strings.Contains(body, "d-02") || !strings.Contains(body, "d-01") {
		t.Errorf("state=resolved:\n%s", body)
	}
	if _, body := get("?cause=thermal_throttle"); !strings.Contains(body, "None matches the filter") {
		t.Errorf("a filter matching none:\n%s", body)
	}
	if code, body := get("?state=maybe"); code != 400 || !strings.Contains(body, "state must be firing or resolved") {
		t.Errorf("a bad filter: %d %s", code, body)
	}
}
