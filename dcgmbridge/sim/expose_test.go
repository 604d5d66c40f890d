package sim

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/dcgmbridge"
)

// fixture reads one of the exporter fixtures of package dcgmbridge
// (../testdata/README.md gives their sources).
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// shape is what must match between a real capture and the simulator: family
// types, the label names of each sample name, and the le set of each
// histogram.
type shape struct {
	types  map[string]string
	labels map[string]string // sample name -> sorted label names
	les    map[string]string // bucket sample name -> le values in order
}

func shapeOf(t *testing.T, body []byte) shape {
	t.Helper()
	p := parseText(t, body, "text/plain")
	s := shape{types: p.types, labels: map[string]string{}, les: map[string]string{}}
	for name, sets := range p.byName {
		var names []string
		seen := map[string]bool{}
		var les []string
		for _, l := range sets {
			l.Range(func(x labels.Label) {
				if x.Name == labels.BucketLabel {
					if !slices.Contains(les, x.Value) {
						les = append(les, x.Value)
					}
					return
				}
				if x.Name != model.MetricNameLabel && !seen[x.Name] {
					seen[x.Name] = true
					names = append(names, x.Name)
				}
			})
		}
		sort.Strings(names)
		s.labels[name] = strings.Join(names, ",")
		if les != nil {
			s.les[name] = strings.Join(les, " ")
		}
	}
	return s
}

func compareShapes(t *testing.T, want, got shape) {
	t.Helper()
	for name, typ := range want.types {
		if got.types[name] != typ {
			t.Errorf("family %s: type %q, want %q", name, got.types[name], typ)
		}
	}
	for name := range got.types {
		if _, ok := want.types[name]; !ok {
			t.Errorf("family %s is not in the fixture", name)
		}
	}
	for name, l := range want.labels {
		if got.labels[name] != l {
			t.Errorf("%s: label names %q, want %q", name, got.labels[name], l)
		}
	}
	for name, le := range want.les {
		if got.les[name] != le {
			t.Errorf("%s: buckets\n got %s\nwant %s", name, got.les[name], le)
		}
	}
}

func TestExpositionMatchesFixtures(t *testing.T) {
	cases := []struct {
		name, fixture, path string
		cfg                 Config
	}{
		{"vllm v1", "vllm_v1_t0_healthy.prom", "/gpu-node-0/vllm/8000/metrics", Config{}},
		{"vllm v0", "vllm_v0_legacy.prom", "/gpu-node-0/vllm/8000/metrics", Config{VLLMVersion: "v0"}},
		{"dcgm default", "dcgm_exporter_default_k8s.prom", "/gpu-node-0/dcgm/metrics", Config{DCGMFields: "default"}},
		{"dcgm profiling", "dcgm_exporter_profiling_k8s.prom", "/gpu-node-0/dcgm/metrics", Config{DCGMFields: "profiling"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := shapeOf(t, fixture(t, tc.fixture))
			tc.cfg.Nodes, tc.cfg.GPUsPerNode, tc.cfg.Seed = 1, 2, 7
			c := mustNew(t, tc.cfg)
			c.Step(at(c, 10*time.Hour+time.Minute))
			compareShapes(t, want, shapeOf(t, scrape(t, c, tc.path)))
		})
	}
}

// TestExpositionFormatting checks the byte-level conventions of each
// exporter against the fixtures: HELP before TYPE, label order, and the
// value spelling.
func TestExpositionFormatting(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 3})
	c.Step(at(c, 10*time.Hour))
	v1 := string(scrape(t, c, "/gpu-node-0/vllm/8000/metrics"))
	for _, want := range []string{
		"# HELP vllm:num_requests_running Number of requests in model execution batches.\n# TYPE vllm:num_requests_running gauge\n",
		`vllm:request_params_n_bucket{engine="0",le="1.0",model_name="meta-llama/Llama-3.1-8B-Instruct"} `,
		`vllm:request_success_total{engine="0",finished_reason="abort",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.0`,
		`vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name=`,
	} {
		if !strings.Contains(v1, want) {
			t.Errorf("vLLM exposition lacks %q", want)
		}
	}
	// _sum, buckets, _count, as prometheus_client multiprocess mode prints.
	i := strings.Index(v1, "vllm:request_params_n_sum")
	j := strings.Index(v1, "vllm:request_params_n_bucket")
	k := strings.Index(v1, "vllm:request_params_n_count")
	if i < 0 || i > j || j > k {
		t.Errorf("histogram sample order: sum@%d bucket@%d count@%d", i, j, k)
	}
	dcgm := string(scrape(t, c, "/gpu-node-0/dcgm/metrics"))
	if !strings.Contains(dcgm, `DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-`) || !strings.Contains(dcgm, `,modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-0",DCGM_FI_DRIVER_VERSION="550.127.05",container="vllm",namespace="inference",pod="vllm-llama-3-1-8b-instruct-`) {
		t.Errorf("dcgm label order differs from dcgm-exporter:\n%s", dcgm[:600])
	}
	for _, line := range strings.Split(dcgm, "\n") {
		if strings.HasPrefix(line, "DCGM_FI_DEV_POWER_USAGE{") || strings.HasPrefix(line, "DCGM_FI_PROF_SM_ACTIVE{") {
			v := line[strings.LastIndexByte(line, ' ')+1:]
			if d := strings.IndexByte(v, '.'); d < 0 || len(v)-d-1 != 6 {
				t.Errorf("double field not printed with %%f: %q", line)
			}
		}
		if strings.HasPrefix(line, "DCGM_FI_DEV_GPU_TEMP{") && strings.Contains(line[strings.LastIndexByte(line, ' '):], ".") {
			t.Errorf("int field printed as float: %q", line)
		}
	}
	ebpf := string(scrape(t, c, "/gpu-node-0/ebpf/metrics"))
	if !strings.Contains(ebpf, `ebpf_exporter_accept_latency_seconds_bucket{port="8000",le="1.6e-05"} `) {
		t.Errorf("ebpf exposition lacks client_golang style bucket line:\n%s", ebpf[:400])
	}
}

// TestEBPFBucketsMatchConfigs derives the exp2 bucket edges from the
// ebpf_exporter example configs and the formatting from the verbatim
// bio-latency capture.
func TestEBPFBucketsMatchConfigs(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 1, Seed: 3})
	c.Step(at(c, time.Hour))
	got := shapeOf(t, scrape(t, c, "/gpu-node-0/ebpf/metrics"))
	for _, tc := range []struct{ file, metric string }{
		{"ebpf_exporter/accept-latency.yaml", "ebpf_exporter_accept_latency_seconds"},
		{"ebpf_exporter/softirq-latency-net-rx.yaml", "ebpf_exporter_softirq_wait_seconds"},
	} {
		t.Run(tc.metric, func(t *testing.T) {
			y := string(fixture(t, tc.file))
			lo, hi, mult := yamlNum(t, y, "bucket_min:"), yamlNum(t, y, "bucket_max:"), yamlNum(t, y, "bucket_multiplier:")
			var want []string
			for _, b := range dcgmbridge.Exp2Buckets(int(lo), int(hi), mult) {
				want = append(want, strconv.FormatFloat(b, 'g', -1, 64))
			}
			want = append(want, "+Inf")
			if g := got.les[tc.metric+"_bucket"]; g != strings.Join(want, " ") {
				t.Errorf("buckets\n got %s\nwant %s", g, strings.Join(want, " "))
			}
		})
	}
	bio := shapeOf(t, fixture(t, "ebpf_exporter/bio_latency_exposition.prom"))
	want := strings.Fields(bio.les["ebpf_exporter_bio_latency_seconds_bucket"])
	if gotLes := strings.Fields(got.les["ebpf_exporter_accept_latency_seconds_bucket"]); !slices.Equal(gotLes[:27], want[:27]) {
		t.Errorf("exp2 le spelling differs from the real capture:\n got %v\nwant %v", gotLes[:27], want[:27])
	}
}

func yamlNum(t *testing.T, y, key string) float64 {
	t.Helper()
	i := strings.Index(y, key)
	if i < 0 {
		t.Fatalf("no %s", key)
	}
	f := strings.Fields(y[i+len(key):])
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	return v
}

func TestDeterminism(t *testing.T) {
	cfg := Config{Nodes: 2, GPUsPerNode: 2, Seed: 42, Faults: []FaultSpec{
		{Kind: KindKVCacheStorm, Node: 0, GPU: intp(1), At: 20 * time.Minute, Duration: 10 * time.Minute},
		{Kind: KindDeploy, Node: 1, GPU: intp(0), At: 25 * time.Minute},
	}}
	render := func(c *Cluster) []byte {
		var all bytes.Buffer
		for _, tg := range c.Targets() {
			_ = c.WriteExposition(&all, tg.Path)
		}
		return all.Bytes()
	}
	a, b := mustNew(t, cfg), mustNew(t, cfg)
	end := at(a, 40*time.Minute)
	a.Step(end)
	// b gets there in uneven steps: stepping must not depend on the calls.
	for _, d := range []time.Duration{time.Second, 7 * time.Minute, 7*time.Minute + 500*time.Millisecond, 33 * time.Minute, 40 * time.Minute} {
		b.Step(at(b, d))
	}
	ra, rb := render(a), render(b)
	if !bytes.Equal(ra, rb) {
		t.Fatal("same seed and end time gave different expositions")
	}
	cfg.Seed = 43
	c := mustNew(t, cfg)
	c.Step(end)
	if bytes.Equal(ra, render(c)) {
		t.Fatal("a different seed gave identical output")
	}
}

func TestFormatPythonFloat(t *testing.T) {
	cases := []struct {
		in   float64
		want string
	}{
		{0, "0.0"}, {37, "37.0"}, {0.412, "0.412"}, {1602126, "1.602126e+06"}, {23005447, "2.3005447e+07"},
		{601712, "601712.0"}, {1e-05, "1e-05"}, {0.0001, "0.0001"}, {2560, "2560.0"}, {170.26782807277664, "170.26782807277664"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			if got := string(appendPythonFloat(nil, tc.in)); got != tc.want {
				t.Errorf("floatToGoString(%v) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// FuzzAppendValue checks that every exporter's value spelling parses back
// to the value it printed (to the precision the format keeps).
func FuzzAppendValue(f *testing.F) {
	for _, v := range []float64{0, 1, 0.5, 1602126, 1e-7, 123456789012, 3.14159} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		for _, vf := range []valueFormat{fmtPython, fmtGo} {
			s := string(appendValue(nil, vf, v))
			got, err := strconv.ParseFloat(s, 64)
			if err != nil {
				t.Fatalf("format %d: %q does not parse: %v", vf, s, err)
			}
			if got != v && !(got != got && v != v) {
				t.Fatalf("format %d: %v printed as %q", vf, v, s)
			}
		}
	})
}

func TestPositionAcceptance(t *testing.T) {
	cases := []struct {
		rate float64
		k    int
		want float64
	}{{0.62, 3, 0.78}, {0.08, 3, 0.2}, {0.5, 1, 0.5}, {0, 3, 0}, {1, 3, 1}}
	for _, tc := range cases {
		t.Run(strconv.FormatFloat(tc.rate, 'g', -1, 64), func(t *testing.T) {
			a := positionAcceptance(tc.rate, tc.k)
			if a < tc.want-0.02 || a > tc.want+0.02 {
				t.Errorf("positionAcceptance(%v, %d) = %v, want ~%v", tc.rate, tc.k, a, tc.want)
			}
			sum, p := 0.0, 1.0
			for range tc.k {
				p *= a
				sum += p
			}
			if got := sum / float64(tc.k); got < tc.rate-1e-9 || got > tc.rate+1e-9 {
				t.Errorf("overall acceptance %v, want %v", got, tc.rate)
			}
		})
	}
}

// TestExpositionFollowsCatalogue checks every family the simulator renders,
// in every variant (V1 with the deprecated family, V0, the full DCGM field
// set), against the catalogue's shape: the label names its series carry and
// its bucket edges. Names, types, HELP and buckets are taken from the shapes;
// the label values come from the model, so this is where the label names are
// held to the one definition.
func TestExpositionFollowsCatalogue(t *testing.T) {
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []Config{
		{VLLMShowDeprecated: true, DCGMFields: "full"},
		{VLLMVersion: "v0"},
	} {
		cfg.Nodes, cfg.GPUsPerNode, cfg.Seed = 1, 2, 5
		c := mustNew(t, cfg)
		c.Step(at(c, time.Hour))
		vllm := dcgmbridge.SourceVLLMV1
		if cfg.VLLMVersion == "v0" {
			vllm = dcgmbridge.SourceVLLMV0
		}
		for _, tc := range []struct {
			path string
			src  dcgmbridge.Source
		}{
			{"/gpu-node-0/vllm/8000/metrics", vllm},
			{"/gpu-node-0/dcgm/metrics", dcgmbridge.SourceDCGM},
			{"/gpu-node-0/ebpf/metrics", dcgmbridge.SourceEBPF},
		} {
			exp, ok := cat.Exposition(tc.src)
			if !ok {
				t.Fatalf("no %s exposition", tc.src)
			}
			p := parseText(t, scrape(t, c, tc.path), "text/plain")
			for name, typ := range p.types {
				want, ok := exp.Family(name)
				if !ok || want.Type != typ {
					t.Errorf("%s: %s %q, catalogue %+v", tc.path, name, typ, want)
					continue
				}
				samples := []string{name}
				if typ == "histogram" {
					samples = []string{name + "_bucket", name + "_sum", name + "_count"}
				}
				for _, sample := range samples {
					for _, l := range p.byName[sample] {
						var names []string
						var le float64
						l.Range(func(x labels.Label) {
							switch {
							case x.Name == model.MetricNameLabel || slices.Contains(exp.Optional, x.Name):
							case x.Name == labels.BucketLabel:
								le, _ = strconv.ParseFloat(x.Value, 64)
							default:
								names = append(names, x.Name)
							}
						})
						slices.Sort(names)
						if !slices.Equal(names, want.Labels) {
							t.Errorf("%s: %s has labels %v, catalogue %v", tc.path, sample, names, want.Labels)
						}
						if sample == name+"_bucket" && !math.IsInf(le, 1) && !slices.Contains(want.Buckets, le) {
							t.Errorf("%s: %s le %g is not a catalogue bucket", tc.path, sample, le)
						}
					}
				}
			}
		}
	}
}

// TestBareMetalHasNoKubernetesLabels: a bare-metal fleet's series carry no
// namespace, pod or container, and its vLLM targets keep apart by instance.
func TestBareMetalHasNoKubernetesLabels(t *testing.T) {
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	for _, bare := range []bool{false, true} {
		c, err := New(Config{Seed: 3, Nodes: 1, GPUsPerNode: 4, Start: start, BareMetal: bare})
		if err != nil {
			t.Fatal(err)
		}
		kube, instances := 0, map[string]bool{}
		err = c.Backfill(start, start.Add(time.Minute), 15*time.Second, func(l labels.Labels, _ int64, _ float64) error {
			if l.Has("namespace") || l.Has("pod") || l.Has("container") {
				kube++
			}
			if l.Get("job") == JobVLLM {
				instances[l.Get("instance")] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if bare != (kube == 0) {
			t.Errorf("bare_metal %v: %d series with Kubernetes labels", bare, kube)
		}
		if len(instances) != 4 {
			t.Errorf("bare_metal %v: vLLM instances %v, want 4", bare, instances)
		}
	}
}
