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
