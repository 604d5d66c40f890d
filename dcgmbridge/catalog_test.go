package dcgmbridge

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fixturesDir holds the exporter fixtures (testdata/README.md gives their
// sources).
func fixturesDir(t testing.TB) string {
	t.Helper()
	const dir = "testdata"
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("fixtures not found: %v", err)
	}
	return dir
}

func newTestCatalogue(t testing.TB) *Catalogue {
	t.Helper()
	c, err := NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFieldCatalogueMatchesFixture checks the embedded field table against the
// extracted dcgm_fields.h list and every field named by dcgm-exporter's CSVs.
func TestFieldCatalogueMatchesFixture(t *testing.T) {
	c := newTestCatalogue(t)
	dir := fixturesDir(t)
	f, err := os.Open(filepath.Join(dir, "dcgm_field_ids.csv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs)-1 != len(c.Fields) {
		t.Errorf("fixture has %d fields, catalogue %d", len(recs)-1, len(c.Fields))
	}
	for _, rec := range recs[1:] {
		id, err := strconv.Atoi(rec[2])
		if err != nil {
			t.Fatal(err)
		}
		got, ok := c.Field(id)
		if !ok {
			t.Errorf("field %d (%s) missing", id, rec[0])
			continue
		}
		if got.Legacy != rec[0] || got.DCGM46 != rec[1] {
			t.Errorf("field %d: got %s/%s, fixture %s/%s", id, got.Legacy, got.DCGM46, rec[0], rec[1])
		}
		for _, n := range got.Names() {
			if back, _ := c.FieldByName(n); back.ID != id {
				t.Errorf("name %s resolves to %d, want %d", n, back.ID, id)
			}
		}
	}
	// Every enabled field of the exporter CSVs that DCGM's header lists must
	// carry the exporter's type (the 1.x CSV uses lowercase names).
	for _, name := range []string{"dcgm-exporter_default-counters.csv", "dcgm-exporter_dcp-metrics-included.csv", "dcgm-exporter_1.x-compatibility-metrics.csv"} {
		t.Run(name, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			known := 0
			for line := range strings.SplitSeq(string(b), "\n") {
				line = strings.TrimSpace(line)
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				parts := strings.Split(line, ",")
				field, typ := strings.TrimSpace(parts[0]), strings.TrimSpace(parts[1])
				got, ok := c.FieldByName(field)
				if !ok {
					continue // fields outside dcgm_field_ids.csv are stored as-is
				}
				known++
				if got.Type != typ && (got.ID < 1009 || got.ID > 1010) { // PCIe bytes: counter in 1.x, gauge since
					t.Errorf("%s: exporter type %s, catalogue %s", field, typ, got.Type)
				}
			}
			if known == 0 {
				t.Fatal("no field of the CSV is in the catalogue")
			}
		})
	}
}

func TestLookup(t *testing.T) {
	c := newTestCatalogue(t)
	for _, tc := range []struct {
		name, want string
	}{
		{"vllm:kv_cache_usage_perc", "strata:kv_cache_usage:ratio"},
		{"vllm:gpu_cache_usage_perc", "strata:kv_cache_usage:ratio"},
		{"vllm:time_to_first_token_seconds_bucket", "strata:ttft_seconds:p99"},
		{"DCGM_FI_PROF_SM_UTIL_RATIO", "strata:gpu_sm_active:ratio"},
		{"dcgm_gpu_utilization", "strata:gpu_sm_active:ratio"},
		{"ebpf_exporter_accept_latency_seconds_count", "strata:network_latency_seconds:p99"},
		{"sglang:token_usage", "strata:kv_cache_usage:ratio"},
		{"nv_inference_queue_duration_us", `strata:latency_seconds:component{component="queue"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var all []string
			for _, m := range c.Lookup(tc.name) {
				all = append(all, m.Canonical...)
			}
			if !strings.Contains(strings.Join(all, " "), tc.want) {
				t.Fatalf("%s maps to %v, want %s", tc.name, all, tc.want)
			}
		})
	}
	if got := c.Lookup("vllm:iteration_tokens_total"); len(got) != 1 || got[0].Type != "histogram" {
		t.Fatalf("iteration_tokens_total: %+v", got)
	}
	if got := c.Lookup("no_such_metric"); got != nil {
		t.Fatalf("unknown metric: %+v", got)
	}
}

func TestIsGauge(t *testing.T) {
	c := newTestCatalogue(t)
	cases := []struct {
		name string
		want bool
	}{
		// A DCGM gauge no canonical series uses: known from the field list only.
		{"DCGM_FI_DEV_POWER_USAGE", true},
		{"DCGM_FI_DEV_GPU_UTIL", true},
		{"DCGM_FI_PROF_SM_ACTIVE", true},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", false},
		{"DCGM_FI_DRIVER_VERSION", false}, // a DCGM "label" field
		{"vllm:num_requests_running", true},
		{"vllm:request_success_total", false},
		{"vllm:e2e_request_latency_seconds_bucket", false},
		{"vllm:e2e_request_latency_seconds_sum", false},
		{"vllm:e2e_request_latency_seconds_count", false},
		{"vllm:e2e_request_latency_seconds", false}, // the histogram family name
		{"vllm:num_requests_running_count", false},  // a gauge's name plus a histogram suffix
		{"node_memory_MemFree_bytes", false},        // a gauge, but not in the catalogue
		{"", false},
	}
	for _, tc := range cases {
		if got := c.IsGauge(tc.name); got != tc.want {
			t.Errorf("IsGauge(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestIsGaugeMatchesEntries checks IsGauge against the catalogue entry by
// entry: a name is a gauge exactly when no entry for it says anything but
// gauge.
func TestIsGaugeMatchesEntries(t *testing.T) {
	c := newTestCatalogue(t)
	types := map[string]map[string]bool{}
	note := func(name, typ string) {
		if types[name] == nil {
			types[name] = map[string]bool{}
		}
		types[name][typ] = true
	}
	for _, f := range c.Fields {
		for _, n := range f.Names() {
			note(n, f.Type)
		}
	}
	for _, m := range c.Metrics {
		note(m.Name, m.Type)
	}
	gauges := 0
	for name, ts := range types {
		want := len(ts) == 1 && ts["gauge"]
		if want {
			gauges++
		}
		if got := c.IsGauge(name); got != want {
			t.Errorf("IsGauge(%q) = %v, want %v (catalogue types %v)", name, got, want, ts)
		}
		// A histogram suffix on a listed name gives an unlisted name (the
		// listed ones are checked above): a counter, whatever name's type.
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if _, listed := types[name+suffix]; listed {
				continue
			}
			if c.IsGauge(name + suffix) {
				t.Errorf("IsGauge(%q) = true, want false", name+suffix)
			}
		}
	}
	if gauges < 40 {
		t.Errorf("only %d gauge names in the catalogue", gauges)
	}
}

func TestCatalogueTypeOf(t *testing.T) {
	c, err := NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"DCGM_FI_DEV_GPU_UTIL":                    "gauge",
		"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":    "counter",
		"vllm:request_success_total":              "counter",
		"vllm:time_to_first_token_seconds_bucket": "histogram",
		"vllm:kv_cache_usage_perc":                "gauge",
		"node_memory_MemFree_bytes":               "",
	} {
		if got := c.TypeOf(name); got != want {
			t.Errorf("TypeOf(%s) = %q, want %q", name, got, want)
		}
	}
}
