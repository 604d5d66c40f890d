package dcgmbridge

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// capturedFamily is what a fixture shows of one family.
type capturedFamily struct {
	typ, help string
	labels    map[string]bool // label names of its series, le excluded
	les       []float64       // bucket edges, +Inf excluded, in order
}

// captureFamilies parses an exposition fixture with Prometheus' text parser.
func captureFamilies(t *testing.T, name string) map[string]*capturedFamily {
	t.Helper()
	body, err := os.ReadFile(filepath.Join(fixturesDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	p, err := textparse.New(body, "text/plain", labels.NewSymbolTable(), textparse.ParserOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*capturedFamily{}
	fam := func(name string) *capturedFamily {
		if out[name] == nil {
			out[name] = &capturedFamily{labels: map[string]bool{}}
		}
		return out[name]
	}
	var lset labels.Labels
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch e {
		case textparse.EntryType:
			n, typ := p.Type()
			fam(string(n)).typ = string(typ)
		case textparse.EntryHelp:
			n, help := p.Help()
			fam(string(n)).help = string(help)
		case textparse.EntrySeries:
			p.Labels(&lset)
			name := lset.Get(model.MetricNameLabel)
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok && out[base] != nil && out[base].typ == "histogram" {
					name = base
				}
			}
			f := fam(name)
			lset.Range(func(l labels.Label) {
				switch l.Name {
				case model.MetricNameLabel:
				case model.BucketLabel:
					if l.Value == "+Inf" {
						return
					}
					le, err := strconv.ParseFloat(l.Value, 64)
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Contains(f.les, le) {
						f.les = append(f.les, le)
					}
				default:
					f.labels[l.Name] = true
				}
			})
		}
	}
}

// TestExpositionsMatchFixtures checks each exporter's shapes against real or
// source-derived captures: every family a capture shows has the same type,
// HELP, label names and bucket edges in the catalogue.
func TestExpositionsMatchFixtures(t *testing.T) {
	c := newTestCatalogue(t)
	for _, tc := range []struct {
		src      Source
		fixtures []string
	}{
		{SourceVLLMV1, []string{"vllm_v1_t0_healthy.prom"}},
		{SourceVLLMV0, []string{"vllm_v0_legacy.prom"}},
		{SourceDCGM, []string{"dcgm_exporter_default_k8s.prom", "dcgm_exporter_profiling_k8s.prom"}},
		{SourceEBPF, []string{"ebpf_exporter/bio_latency_exposition.prom"}},
	} {
		exp, ok := c.Exposition(tc.src)
		if !ok {
			t.Fatalf("no exposition for %s", tc.src)
		}
		for _, fixture := range tc.fixtures {
			t.Run(fixture, func(t *testing.T) {
				captured := captureFamilies(t, fixture)
				if len(captured) == 0 {
					t.Fatal("no families")
				}
				for name, got := range captured {
					want, ok := exp.Family(name)
					if !ok {
						t.Errorf("%s: not in the %s exposition", name, tc.src)
						continue
					}
					if got.typ != want.Type || got.help != want.Help {
						t.Errorf("%s: TYPE %q HELP %q, catalogue %q %q", name, got.typ, got.help, want.Type, want.Help)
					}
					var names []string
					for l := range got.labels {
						if !slices.Contains(exp.Optional, l) {
							names = append(names, l)
						}
					}
					slices.Sort(names)
					if !slices.Equal(names, want.Labels) {
						t.Errorf("%s: labels %v, catalogue %v", name, names, want.Labels)
					}
					if !slices.Equal(got.les, want.Buckets) {
						t.Errorf("%s: buckets %v, catalogue %v", name, got.les, want.Buckets)
					}
				}
			})
		}
	}
}

// TestExpositionTypesAgreeWithCatalogue: a family whose type contradicts the
// catalogue's entries is refused, so the shapes and the catalogue cannot
// drift apart.
func TestExpositionTypesAgreeWithCatalogue(t *testing.T) {
	c := newTestCatalogue(t)
	for _, f := range []Family{
		{Name: "vllm:num_requests_running", Type: "counter"},
		{Name: "DCGM_FI_DEV_GPU_UTIL", Type: "counter"},
	} {
		if err := c.checkFamily(f); err == nil {
			t.Errorf("%s as a %s accepted", f.Name, f.Type)
		}
	}
	if err := c.checkFamily(Family{Name: "vllm:num_requests_running", Type: "gauge"}); err != nil {
		t.Error(err)
	}
	// The tables returned are copies.
	a, _ := c.Exposition(SourceVLLMV1)
	a.Families[0].Labels[0] = "changed"
	b, _ := c.Exposition(SourceVLLMV1)
	if b.Families[0].Labels[0] == "changed" {
		t.Error("Exposition returned the catalogue's own slices")
	}
}

func TestBucketLayouts(t *testing.T) {
	if got := VLLMTokenBuckets(32768); !slices.Equal(got, []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000}) {
		t.Errorf("VLLMTokenBuckets(32768) = %v", got)
	}
	if got := Exp2Buckets(0, 3, 1e-6); !slices.Equal(got, []float64{1e-6, 2e-6, 4e-6, 8e-6}) {
		t.Errorf("Exp2Buckets(0, 3, 1e-6) = %v", got)
	}
}
