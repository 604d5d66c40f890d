package bench

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/strata-dev/strata/dcgmbridge"
)

// generator holds the precomputed series set and the value state of every
// series. Units are the ownership grain: a unit (one GPU, one vLLM engine, one
// host's eBPF exporter) and all its series belong to one sender, so a series'
// samples are always sent in timestamp order and churn never races.
type generator struct {
	cfg    LoadConfig
	shapes []*shape
	units  []*unit
	// series is every active series; units index into it. A churned unit
	// rewrites its series in place (new labels), so len(series) stays fixed.
	series []seriesDesc
}

// seriesDesc is one series' labels in both wire forms.
type seriesDesc struct {
	lset labels.Labels  // sorted, for RW 2.0 symbolisation
	pb   []prompb.Label // sorted, for RW 1.0
	fam  *family
}

// unit is one GPU, vLLM engine or eBPF host.
type unit struct {
	shape  *shape
	index  int // index among units of the same shape
	gen    int // churn generation: a new pod each time
	rng    *rand.Rand
	groups []*group
	first  int // index of the unit's first series in generator.series
	count  int
}

// group is one family instance of a unit: a gauge or counter (one series) or
// a classic histogram (buckets, _sum, _count).
type group struct {
	fam   *family
	first int // index of the group's first series in generator.series
	level float64
	load  float64   // slowly drifting rate multiplier (0.5-1.5)
	cnt   []float64 // histogram: per-bucket (non-cumulative) totals
	sum   float64
	total float64
	vals  []float64 // current value of each series of the group
}

// newGenerator builds the series set for cfg (which has its defaults).
func newGenerator(cfg LoadConfig) (*generator, error) {
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		return nil, err
	}
	shapes, err := newShapes(cat)
	if err != nil {
		return nil, err
	}
	g := &generator{cfg: cfg, shapes: shapes}
	shares := []float64{cfg.Mix.DCGM, cfg.Mix.VLLM, cfg.Mix.EBPF}
	total := shares[0] + shares[1] + shares[2]
	for i, s := range g.shapes {
		for _, f := range s.families {
			f.prepare()
		}
		if shares[i] == 0 {
			continue
		}
		n := int(math.Round(float64(cfg.Series) * shares[i] / total / float64(s.seriesPerUnit())))
		n = max(n, 1)
		for k := range n {
			u := &unit{
				shape: s,
				index: k,
				rng:   rand.New(rand.NewPCG(cfg.Seed, hash64(s.name, k))),
				first: len(g.series),
				count: s.seriesPerUnit(),
			}
			g.series = append(g.series, make([]seriesDesc, u.count)...)
			g.buildUnit(u)
			g.units = append(g.units, u)
		}
	}
	return g, nil
}

// buildUnit (re)creates the unit's labels and resets its value state, as a
// restarted pod does: counters start again from zero.
func (g *generator) buildUnit(u *unit) {
	base := g.unitLabels(u)
	u.groups = u.groups[:0]
	idx := u.first
	b := labels.NewScratchBuilder(len(base) + 4)
	for _, f := range u.shape.families {
		gr := &group{fam: f, first: idx, load: 0.5 + u.rng.Float64()}
		n := f.seriesCount()
		gr.vals = make([]float64, n)
		if f.kind == kindGauge {
			gr.level = f.gauge.min + u.rng.Float64()*(f.gauge.max-f.gauge.min)
		}
		if f.kind == kindHistogram {
			gr.cnt = make([]float64, len(f.bounds)+1)
		}
		for j := range n {
			name := f.name
			le := ""
			if f.kind == kindHistogram {
				switch {
				case j < len(f.bounds):
					name, le = f.name+"_bucket", strconv.FormatFloat(f.bounds[j], 'g', -1, 64)
				case j == len(f.bounds):
					name, le = f.name+"_bucket", "+Inf"
				case j == len(f.bounds)+1:
					name = f.name + "_sum"
				default:
					name = f.name + "_count"
				}
			}
			b.Reset()
			b.Add(model.MetricNameLabel, name)
			for _, l := range base {
				b.Add(l[0], l[1])
			}
			for _, l := range f.extra {
				b.Add(l[0], l[1])
			}
			if le != "" {
				b.Add("le", le)
			}
			b.Sort()
			lset := b.Labels()
			pb := make([]prompb.Label, 0, lset.Len())
			lset.Range(func(l labels.Label) { pb = append(pb, prompb.Label{Name: l.Name, Value: l.Value}) })
			g.series[idx+j] = seriesDesc{lset: lset, pb: pb, fam: f}
		}
		idx += n
		u.groups = append(u.groups, gr)
	}
}

var llmModels = []string{"meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "mistralai/Mistral-7B-Instruct-v0.3"}

// unitLabels are the labels every series of the unit carries, as the exporter
// and a Kubernetes scrape would attach them.
func (g *generator) unitLabels(u *unit) [][2]string {
	h := hash64(u.shape.name, u.index)
	// Eight GPUs per node; an eBPF unit is one whole node.
	node := u.index / 8
	if u.shape.name == "ebpf" {
		node = u.index
	}
	host := fmt.Sprintf("gpu-node-%04d", node)
	podHash := fmt.Sprintf("%08x", uint32(h))
	podSuffix := fmt.Sprintf("%05x", uint32(hash64(u.shape.name+"/pod", u.index*1000003+u.gen))&0xfffff)
	ip := func(port int) string {
		return fmt.Sprintf("10.%d.%d.%d:%d", 1+u.index>>16&0xff, u.index>>8&0xff, (u.index+u.gen*37)&0xff, port)
	}
	var out [][2]string
	switch u.shape.name {
	case "dcgm":
		gpu := u.index % 8
		model := llmModels[u.index/8%len(llmModels)]
		out = [][2]string{
			{"job", "dcgm-exporter"}, {"instance", host + ":9400"},
			{"gpu", strconv.Itoa(gpu)}, {"UUID", fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", uint32(h), uint16(h>>32), uint16(h>>48), u.index&0xffff, h&0xffffffffffff)},
			{"pci_bus_id", fmt.Sprintf("00000000:%02X:00.0", 0x18+gpu*0x10)}, {"device", fmt.Sprintf("nvidia%d", gpu)},
			{"modelName", "NVIDIA H100 80GB HBM3"}, {"Hostname", host}, {"DCGM_FI_DRIVER_VERSION", "570.124.06"},
			{"container", "vllm"}, {"namespace", "inference"},
			{"pod", fmt.Sprintf("vllm-%s-%s-%s", shortModel(model), podHash, podSuffix)},
		}
	case "vllm":
		model := llmModels[u.index%len(llmModels)]
		out = [][2]string{
			{"job", "vllm"}, {"instance", ip(8000)}, {"namespace", "inference"},
			{"model_name", model}, {"engine", "0"},
			{"pod", fmt.Sprintf("vllm-%s-%s-%s", shortModel(model), podHash, podSuffix)},
		}
	default:
		out = [][2]string{{"job", "ebpf_exporter"}, {"instance", host + ":9435"}}
	}
	for i := range g.cfg.ExtraLabels {
		v := fmt.Sprintf("v%d-%s-%x", i, u.shape.name, h)
		for len(v) < g.cfg.LabelValueLength {
			v += v
		}
		out = append(out, [2]string{fmt.Sprintf("extra_label_%d", i), v[:max(g.cfg.LabelValueLength, 1)]})
	}
	return out
}

func shortModel(m string) string {
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	return strings.ToLower(strings.ReplaceAll(m, ".", "-"))
}

func hash64(s string, i int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	_, _ = h.Write([]byte(strconv.Itoa(i)))
	return h.Sum64()
}

// churnable reports whether the unit has a pod that can be replaced; eBPF
// exporters run per host and do not churn.
func (u *unit) churnable() bool { return u.shape.name != "ebpf" }

// maybeChurn replaces the unit's pod with probability percent/100; it returns
// whether it did. A churned unit gets new series (new pod label) and its
// counters restart, as after a pod restart.
func (g *generator) maybeChurn(u *unit, percent float64) bool {
	if !u.churnable() || percent <= 0 || u.rng.Float64()*100 >= percent {
		return false
	}
	u.gen++
	g.buildUnit(u)
	return true
}

// advance moves the unit's values forward by dt seconds. Only the owning
// sender calls it, so no locking is needed.
func (u *unit) advance(dt float64) {
	r := u.rng
	for _, gr := range u.groups {
		f := gr.fam
		// The load factor drifts slowly, so rates vary over time instead of
		// being a constant a compressor would flatten.
		gr.load = clamp(gr.load+0.02*r.NormFloat64(), 0.5, 1.5)
		switch f.kind {
		case kindGauge:
			m := f.gauge
			gr.level = reflectInto(gr.level+m.drift*r.NormFloat64(), m.min, m.max)
			v := clamp(gr.level+m.noise*r.NormFloat64(), m.min, m.max)
			if m.decimals >= 0 {
				p := math.Pow10(m.decimals)
				v = math.Round(v*p) / p
			}
			gr.vals[0] = v
		case kindCounter:
			gr.level += poisson(r, f.rate*dt*gr.load)
			gr.vals[0] = gr.level
		case kindHistogram:
			lambda := f.rate * dt * gr.load
			cum := 0.0
			for i, p := range f.probs {
				c := poisson(r, lambda*p)
				gr.cnt[i] += c
				gr.sum += c * f.mids[i] * (0.9 + 0.2*r.Float64())
				gr.total += c
				cum += gr.cnt[i]
				gr.vals[i] = cum
			}
			n := len(f.probs)
			gr.vals[n] = gr.sum
			gr.vals[n+1] = gr.total
		}
	}
}

// poisson draws a Poisson-distributed count with mean lambda: Knuth's method
// for small means, a rounded normal approximation for large ones.
func poisson(r *rand.Rand, lambda float64) float64 {
	switch {
	case lambda <= 0:
		return 0
	case lambda < 30:
		l := math.Exp(-lambda)
		k, p := 0.0, r.Float64()
		for p > l {
			k++
			p *= r.Float64()
		}
		return k
	default:
		return max(0, math.Round(lambda+math.Sqrt(lambda)*r.NormFloat64()))
	}
}

func clamp(v, lo, hi float64) float64 { return math.Max(lo, math.Min(hi, v)) }

// reflectInto folds v back into [lo, hi] so the random walk stays bounded without
// sticking to the edges.
func reflectInto(v, lo, hi float64) float64 {
	if hi <= lo {
		return lo
	}
	for v < lo || v > hi {
		if v < lo {
			v = 2*lo - v
		}
		if v > hi {
			v = 2*hi - v
		}
	}
	return v
}
