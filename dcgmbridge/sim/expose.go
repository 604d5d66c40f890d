package sim

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"

	"github.com/strata-dev/strata/dcgmbridge"
)

// Scrape jobs of the simulated exporters; also the "job" label of pushed and
// backfilled series.
const (
	JobDCGM = "dcgm-exporter"
	JobVLLM = "vllm"
	JobEBPF = "ebpf-exporter"
)

// target is one simulated /metrics endpoint.
type target struct {
	job      string
	addr     string // host:port, the "instance" label
	path     string
	node     *node
	inst     *instance // vLLM targets only
	families []family
	build    func(t *target) []family
}

// live reports whether the endpoint answers: a vLLM process that is down or
// a scrape-gap decoy makes its series disappear.
func (t *target) live() bool {
	if t.node.gap {
		return false
	}
	if t.inst != nil {
		return !t.inst.down && !t.inst.gap
	}
	return true
}

// family is one metric family with its series in exposition order. fill
// writes the current value of every series into dst (len(series) values).
type family struct {
	name, help, typ string
	series          []series
	fill            func(dst []float64)
}

// series is one exposed sample line's identity, precomputed once: the text
// the exporter prints before the value, the labels Strata stores (with the
// target's job and instance), and the same labels for remote write.
type series struct {
	text string
	lset labels.Labels
	pb   []prompb.Label
	vf   valueFormat
}

// labelStyle is an exporter's label order in the text exposition.
type labelStyle uint8

const (
	styleSorted labelStyle = iota // vLLM (multiprocess mode): alphabetical, le included
	styleGo                       // client_golang: sorted, le last
	styleGiven                    // dcgm-exporter: the order the code adds them
)

// famBuilder collects a target's families.
type famBuilder struct {
	style  labelStyle
	vf     valueFormat
	target []labels.Label // job, instance and other target labels
	fams   []family
}

func (b *famBuilder) makeSeries(name string, pairs []labels.Label, vf valueFormat) series {
	ordered := slices.Clone(pairs)
	switch b.style {
	case styleSorted:
		slices.SortFunc(ordered, func(x, y labels.Label) int { return strings.Compare(x.Name, y.Name) })
	case styleGo:
		slices.SortFunc(ordered, func(x, y labels.Label) int {
			switch {
			case x.Name == labels.BucketLabel:
				return 1
			case y.Name == labels.BucketLabel:
				return -1
			}
			return strings.Compare(x.Name, y.Name)
		})
	}
	lb := labels.NewScratchBuilder(len(pairs) + len(b.target) + 1)
	lb.Add(model.MetricNameLabel, name)
	for _, l := range pairs {
		lb.Add(l.Name, l.Value)
	}
	for _, l := range b.target {
		if !slices.ContainsFunc(pairs, func(p labels.Label) bool { return p.Name == l.Name }) {
			lb.Add(l.Name, l.Value)
		}
	}
	lb.Sort()
	lset := lb.Labels()
	pb := make([]prompb.Label, 0, lset.Len())
	lset.Range(func(l labels.Label) { pb = append(pb, prompb.Label{Name: l.Name, Value: l.Value}) })
	return series{text: seriesText(name, ordered), lset: lset, pb: pb, vf: vf}
}

// seriesText is a sample line's text before its value: name, then the
// labels in the order given (no braces when there are none).
func seriesText(name string, ls []labels.Label) string {
	var sb strings.Builder
	sb.WriteString(name)
	if len(ls) > 0 {
		sb.WriteByte('{')
		for i, l := range ls {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString(l.Name)
			sb.WriteString(`="`)
			sb.WriteString(escapeLabel(l.Value))
			sb.WriteByte('"')
		}
		sb.WriteByte('}')
	}
	return sb.String()
}

func escapeLabel(v string) string {
	if !strings.ContainsAny(v, "\\\"\n") {
		return v
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}

func lbl(kv ...string) []labels.Label {
	out := make([]labels.Label, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, labels.Label{Name: kv[i], Value: kv[i+1]})
	}
	return out
}

// multi adds the family shaped fam with one series per label set; get writes
// the values in the same order.
func (b *famBuilder) multi(fam dcgmbridge.Family, sets [][]labels.Label, vf valueFormat, get func(dst []float64)) {
	f := family{name: fam.Name, help: fam.Help, typ: fam.Type, fill: get}
	for _, s := range sets {
		f.series = append(f.series, b.makeSeries(fam.Name, s, vf))
	}
	b.fams = append(b.fams, f)
}

func (b *famBuilder) scalar(fam dcgmbridge.Family, set []labels.Label, get func() float64) {
	b.multi(fam, [][]labels.Label{set}, b.vf, func(dst []float64) { dst[0] = get() })
}

// histogram adds the classic histogram shaped fam, with its buckets; get
// returns the live *hist (it changes when vLLM restarts) and must have the
// same buckets. Sample order follows the exporter: prometheus_client in
// multiprocess mode prints _sum, buckets, _count; client_golang prints
// buckets, _sum, _count.
func (b *famBuilder) histogram(fam dcgmbridge.Family, set []labels.Label, get func() *hist) {
	name, bounds := fam.Name, fam.Buckets
	f := family{name: name, help: fam.Help, typ: fam.Type}
	bucket := func(i int) series {
		le := "+Inf"
		if i < len(bounds) {
			le = string(appendValue(nil, b.vf, bounds[i]))
		}
		return b.makeSeries(name+"_bucket", append(slices.Clone(set), labels.Label{Name: labels.BucketLabel, Value: le}), b.vf)
	}
	sum := b.makeSeries(name+"_sum", set, b.vf)
	count := b.makeSeries(name+"_count", set, b.vf)
	nb := len(bounds) + 1
	if b.vf == fmtPython {
		f.series = append(f.series, sum)
		for i := range nb {
			f.series = append(f.series, bucket(i))
		}
		f.series = append(f.series, count)
		f.fill = func(dst []float64) {
			h := get()
			dst[0] = h.sum
			h.fillCumulative(dst[1 : 1+nb])
			dst[1+nb] = dst[nb] // _count is the +Inf bucket, bit for bit
		}
	} else {
		for i := range nb {
			f.series = append(f.series, bucket(i))
		}
		f.series = append(f.series, sum, count)
		f.fill = func(dst []float64) {
			h := get()
			h.fillCumulative(dst[:nb])
			dst[nb] = h.sum
			dst[nb+1] = dst[nb-1] // _count is the +Inf bucket, bit for bit
		}
	}
	b.fams = append(b.fams, f)
}

func floor(v float64) float64 { return math.Floor(v + 1e-9) }

// buildTargets creates every endpoint: per node a dcgm-exporter and an
// ebpf_exporter, per instance a vLLM server.
func (c *Cluster) buildTargets() {
	c.targets = c.targets[:0]
	for _, nd := range c.nodes {
		c.targets = append(c.targets, &target{job: JobDCGM, addr: nd.host + ":9400", path: "/" + nd.host + "/dcgm/metrics", node: nd, build: buildDCGM})
		for _, in := range nd.instances {
			c.targets = append(c.targets, &target{job: JobVLLM, addr: in.addr, path: "/" + nd.host + "/vllm/" + strconv.Itoa(in.port) + "/metrics", node: nd, inst: in, build: buildVLLM})
		}
		c.targets = append(c.targets, &target{job: JobEBPF, addr: nd.host + ":9435", path: "/" + nd.host + "/ebpf/metrics", node: nd, build: buildEBPF})
	}
	for _, t := range c.targets {
		t.families = t.build(t)
	}
}

// refresh rebuilds the targets of nodes whose labels changed (a deploy
// renames a pod).
func (c *Cluster) refresh() {
	for _, t := range c.targets {
		if t.node.dirty {
			t.families = t.build(t)
		}
	}
	for _, nd := range c.nodes {
		nd.dirty = false
	}
}

func targetLabels(t *target) []labels.Label {
	out := lbl("job", t.job, "instance", t.addr)
	if t.inst != nil && !t.inst.c.cfg.BareMetal {
		out = append(out, lbl("namespace", namespace, "pod", t.inst.pod)...)
	}
	return out
}

func buildVLLM(t *target) []family {
	in := t.inst
	cfg := &in.c.cfg
	b := &famBuilder{style: styleSorted, vf: fmtPython, target: targetLabels(t)}
	if cfg.VLLMVersion == "v0" {
		buildVLLMv0(b, in)
		return b.fams
	}
	v1 := func(name string) dcgmbridge.Family { return famShape(in.c.shapes.vllm, name) }
	base := lbl("engine", "0", "model_name", in.model)
	s := func() *vllmState { return &in.s }
	with := func(kv ...string) []labels.Label { return append(slices.Clone(base), lbl(kv...)...) }
	b.scalar(v1("vllm:num_requests_running"), base, func() float64 { return float64(len(in.running)) })
	b.scalar(v1("vllm:num_requests_waiting"), base, func() float64 { return float64(in.waiting.len()) })
	b.multi(v1("vllm:engine_sleep_state"),
		[][]labels.Label{with("sleep_state", "awake"), with("sleep_state", "weights_offloaded"), with("sleep_state", "discard_all")}, fmtPython,
		func(dst []float64) { dst[0], dst[1], dst[2] = 1, 0, 0 })
	b.scalar(v1("vllm:kv_cache_usage_perc"), base, in.kvUsage)
	b.scalar(v1("vllm:prefix_cache_queries_total"), base, func() float64 { return floor(s().prefixQueries) })
	b.scalar(v1("vllm:prefix_cache_hits_total"), base, func() float64 { return floor(s().prefixHits) })
	zero := func() float64 { return 0 }
	b.scalar(v1("vllm:external_prefix_cache_queries_total"), base, zero)
	b.scalar(v1("vllm:external_prefix_cache_hits_total"), base, zero)
	b.scalar(v1("vllm:mm_cache_queries_total"), base, zero)
	b.scalar(v1("vllm:mm_cache_hits_total"), base, zero)
	b.scalar(v1("vllm:num_preemptions_total"), base, func() float64 { return floor(s().preemptions) })
	b.scalar(v1("vllm:prompt_tokens_total"), base, func() float64 { return floor(s().promptTokens) })
	b.scalar(v1("vllm:generation_tokens_total"), base, func() float64 { return floor(s().genTokens) })
	b.multi(v1("vllm:request_success_total"),
		[][]labels.Label{with("finished_reason", "stop"), with("finished_reason", "length"), with("finished_reason", "abort")}, fmtPython,
		func(dst []float64) { copy(dst, s().success[:]) })
	b.histogram(v1("vllm:request_prompt_tokens"), base, func() *hist { return s().promptHist })
	b.histogram(v1("vllm:request_generation_tokens"), base, func() *hist { return s().genHist })
	b.histogram(v1("vllm:iteration_tokens_total"), base, func() *hist { return s().iterTokens })
	b.histogram(v1("vllm:request_max_num_generation_tokens"), base, func() *hist { return s().maxGenHist })
	b.histogram(v1("vllm:request_params_n"), base, func() *hist { return s().paramsN })
	b.histogram(v1("vllm:request_params_max_tokens"), base, func() *hist { return s().paramsMaxTokens })
	b.histogram(v1("vllm:time_to_first_token_seconds"), base, func() *hist { return s().ttft })
	b.histogram(v1("vllm:inter_token_latency_seconds"), base, func() *hist { return s().itl })
	if cfg.VLLMShowDeprecated {
		b.histogram(v1("vllm:time_per_output_token_seconds"), base, func() *hist { return s().itl })
	}
	b.histogram(v1("vllm:request_time_per_output_token_seconds"), base, func() *hist { return s().reqTPOT })
	b.histogram(v1("vllm:e2e_request_latency_seconds"), base, func() *hist { return s().e2e })
	b.histogram(v1("vllm:request_queue_time_seconds"), base, func() *hist { return s().queue })
	b.histogram(v1("vllm:request_inference_time_seconds"), base, func() *hist { return s().inference })
	b.histogram(v1("vllm:request_prefill_time_seconds"), base, func() *hist { return s().prefill })
	b.histogram(v1("vllm:request_decode_time_seconds"), base, func() *hist { return s().decode })
	if k := cfg.SpeculativeTokens; k > 0 {
		b.scalar(v1("vllm:spec_decode_num_drafts_total"), base, func() float64 { return floor(s().drafts) })
		b.scalar(v1("vllm:spec_decode_num_draft_tokens_total"), base, func() float64 { return floor(s().draftTokens) })
		b.scalar(v1("vllm:spec_decode_num_accepted_tokens_total"), base, func() float64 { return floor(s().accepted) })
		var sets [][]labels.Label
		for i := range k {
			sets = append(sets, with("position", strconv.Itoa(i)))
		}
		b.multi(v1("vllm:spec_decode_num_accepted_tokens_per_pos_total"), sets, fmtPython, func(dst []float64) {
			for i, v := range s().acceptedPerPos {
				dst[i] = floor(v)
			}
		})
	}
	info := lbl("block_size", strconv.Itoa(cfg.BlockSize), "cache_dtype", "auto", "calculate_kv_scales", "False", "cpu_offload_gb", "0",
		"enable_prefix_caching", "True", "engine", "0", "gpu_memory_utilization", "0.9", "is_attention_free", "False", "num_cpu_blocks", "None",
		"num_gpu_blocks", strconv.Itoa(cfg.NumGPUBlocks), "num_gpu_blocks_override", "None", "prefix_caching_hash_algo", "sha256",
		"sliding_window", "None", "swap_space", "4", "swap_space_bytes", "4294967296")
	b.scalar(v1("vllm:cache_config_info"), info, func() float64 { return 1 })
	return b.fams
}

func buildVLLMv0(b *famBuilder, in *instance) {
	v0 := func(name string) dcgmbridge.Family { return famShape(in.c.shapes.vllm, name) }
	base := lbl("model_name", in.model)
	s := func() *vllmState { return &in.s }
	with := func(kv ...string) []labels.Label { return append(slices.Clone(base), lbl(kv...)...) }
	zero := func() float64 { return 0 }
	b.scalar(v0("vllm:num_requests_running"), base, func() float64 { return float64(len(in.running)) })
	b.scalar(v0("vllm:num_requests_waiting"), base, func() float64 { return float64(in.waiting.len()) })
	b.scalar(v0("vllm:num_requests_swapped"), base, zero)
	b.scalar(v0("vllm:gpu_cache_usage_perc"), base, in.kvUsage)
	b.scalar(v0("vllm:cpu_cache_usage_perc"), base, zero)
	if in.c.cfg.SpeculativeTokens > 0 {
		b.scalar(v0("vllm:spec_decode_draft_acceptance_rate"), base, func() float64 { return s().acceptRate })
		b.scalar(v0("vllm:spec_decode_efficiency"), base, func() float64 { return s().efficiency })
	}
	b.scalar(v0("vllm:avg_prompt_throughput_toks_per_s"), base, func() float64 { return s().promptTPS })
	b.scalar(v0("vllm:avg_generation_throughput_toks_per_s"), base, func() float64 { return s().genTPS })
	b.scalar(v0("vllm:num_preemptions_total"), base, func() float64 { return floor(s().preemptions) })
	b.scalar(v0("vllm:prompt_tokens_total"), base, func() float64 { return floor(s().promptTokens) })
	b.scalar(v0("vllm:generation_tokens_total"), base, func() float64 { return floor(s().genTokens) })
	if in.c.cfg.SpeculativeTokens > 0 {
		b.scalar(v0("vllm:spec_decode_num_accepted_tokens_total"), base, func() float64 { return floor(s().accepted) })
		b.scalar(v0("vllm:spec_decode_num_draft_tokens_total"), base, func() float64 { return floor(s().draftTokens) })
		b.scalar(v0("vllm:spec_decode_num_emitted_tokens_total"), base, func() float64 { return floor(s().accepted + s().drafts) })
	}
	// The V0 capture has only stop and length; aborted requests are not
	// exported there.
	b.multi(v0("vllm:request_success_total"),
		[][]labels.Label{with("finished_reason", "stop"), with("finished_reason", "length")}, fmtPython,
		func(dst []float64) { dst[0], dst[1] = s().success[0], s().success[1] })
	b.histogram(v0("vllm:time_to_first_token_seconds"), base, func() *hist { return s().ttft })
	b.histogram(v0("vllm:time_per_output_token_seconds"), base, func() *hist { return s().itl })
	b.histogram(v0("vllm:e2e_request_latency_seconds"), base, func() *hist { return s().e2e })
}

// dcgmField is one field the simulated dcgm-exporter exposes: its name (the
// catalogue's dcgm-exporter exposition gives its type and HELP), how DCGM
// prints its value (int64 fields %d, doubles %f) and the GPU state it reads.
type dcgmField struct {
	name string
	vf   valueFormat
	get  func(g *gpu) float64
}

// dcgmFields returns the field list of a field set, in default-counters.csv
// order (the order dcgm-exporter's fixture captures show).
func dcgmFields(set string) []dcgmField {
	i, f := fmtDCGMInt, fmtDCGMFloat
	zero := func(*gpu) float64 { return 0 }
	out := []dcgmField{
		{"DCGM_FI_DEV_SM_CLOCK", i, func(g *gpu) float64 { return g.smClock }},
		{"DCGM_FI_DEV_MEM_CLOCK", i, func(g *gpu) float64 { return g.memClock }},
		{"DCGM_FI_DEV_MEMORY_TEMP", i, func(g *gpu) float64 { return g.memTemp }},
		{"DCGM_FI_DEV_GPU_TEMP", i, func(g *gpu) float64 { return g.temp }},
		{"DCGM_FI_DEV_POWER_USAGE", f, func(g *gpu) float64 { return g.power }},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", i, func(g *gpu) float64 { return math.Floor(g.energy) }},
		{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", i, zero},
		{"DCGM_FI_DEV_GPU_UTIL", i, func(g *gpu) float64 { return g.util }},
		{"DCGM_FI_DEV_MEM_COPY_UTIL", i, func(g *gpu) float64 { return g.memCopy }},
		{"DCGM_FI_DEV_ENC_UTIL", i, zero},
		{"DCGM_FI_DEV_DEC_UTIL", i, zero},
		{"DCGM_FI_DEV_XID_ERRORS", i, func(g *gpu) float64 { return g.xid }},
		{"DCGM_FI_DEV_FB_FREE", i, func(g *gpu) float64 { return fbTotalMiB - fbReservedMiB - g.fbUsed }},
		{"DCGM_FI_DEV_FB_USED", i, func(g *gpu) float64 { return g.fbUsed }},
		{"DCGM_FI_DEV_FB_RESERVED", i, func(*gpu) float64 { return fbReservedMiB }},
		{"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", i, func(g *gpu) float64 { return math.Floor(g.nvlinkCtr) }},
		{"DCGM_FI_DEV_VGPU_LICENSE_STATUS", i, zero},
		{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", i, zero},
		{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", i, zero},
		{"DCGM_FI_DEV_ROW_REMAP_FAILURE", i, zero},
		{"DCGM_FI_PROF_GR_ENGINE_ACTIVE", f, func(g *gpu) float64 { return g.grEngine }},
		{"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", f, func(g *gpu) float64 { return g.tensor }},
		{"DCGM_FI_PROF_DRAM_ACTIVE", f, func(g *gpu) float64 { return g.dram }},
		{"DCGM_FI_PROF_PCIE_TX_BYTES", i, func(g *gpu) float64 { return g.pcieTx }},
		{"DCGM_FI_PROF_PCIE_RX_BYTES", i, func(g *gpu) float64 { return g.pcieRx }},
	}
	if set == "default" {
		return out
	}
	out = append(out,
		dcgmField{"DCGM_FI_PROF_SM_ACTIVE", f, func(g *gpu) float64 { return g.smActive }},
		dcgmField{"DCGM_FI_PROF_SM_OCCUPANCY", f, func(g *gpu) float64 { return g.smOcc }},
		dcgmField{"DCGM_FI_PROF_NVLINK_TX_BYTES", i, func(g *gpu) float64 { return g.nvlinkTx }},
		dcgmField{"DCGM_FI_PROF_NVLINK_RX_BYTES", i, func(g *gpu) float64 { return g.nvlinkRx }},
	)
	if set == "profiling" {
		return out
	}
	return append(out,
		dcgmField{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", i, func(g *gpu) float64 { return g.reasons }},
		dcgmField{"DCGM_FI_DEV_POWER_VIOLATION", i, func(g *gpu) float64 { return g.powerViolation }},
		dcgmField{"DCGM_FI_DEV_THERMAL_VIOLATION", i, func(g *gpu) float64 { return g.thermalViolate }},
	)
}

// driverVersion is the DCGM_FI_DRIVER_VERSION label of every GPU.
const driverVersion = "550.127.05"

func buildDCGM(t *target) []family {
	nd := t.node
	cfg := &nd.c.cfg
	b := &famBuilder{style: styleGiven, vf: fmtDCGMInt, target: targetLabels(t)}
	sets := make([][]labels.Label, len(nd.gpus))
	xidSets := make([][]labels.Label, len(nd.gpus))
	for i, g := range nd.gpus {
		// dcgm-exporter's order: gpu, UUID, pci_bus_id, device, modelName,
		// Hostname, the label-type fields, then the sorted attributes (pod
		// attribution; err_code and err_msg on the XID field).
		base := lbl("gpu", strconv.Itoa(g.idx), "UUID", g.uuid, "pci_bus_id", g.pci, "device", "nvidia"+strconv.Itoa(g.idx),
			"modelName", cfg.GPUModel, "Hostname", nd.host, "DCGM_FI_DRIVER_VERSION", driverVersion)
		sets[i], xidSets[i] = slices.Clone(base), slices.Clone(base)
		if g.inst != nil && !cfg.BareMetal {
			sets[i] = append(sets[i], lbl("container", "vllm", "namespace", namespace, "pod", g.inst.pod)...)
			xidSets[i] = append(xidSets[i], lbl("container", "vllm")...)
		}
		xidSets[i] = append(xidSets[i], lbl("err_code", strconv.Itoa(int(g.xid)), "err_msg", xidMessage(g.xid))...)
		if g.inst != nil && !cfg.BareMetal {
			xidSets[i] = append(xidSets[i], lbl("namespace", namespace, "pod", g.inst.pod)...)
		}
	}
	for _, fd := range dcgmFields(cfg.DCGMFields) {
		get := fd.get
		fs := sets
		if fd.name == "DCGM_FI_DEV_XID_ERRORS" {
			fs = xidSets
		}
		b.multi(famShape(nd.c.shapes.dcgm, fd.name), fs, fd.vf, func(dst []float64) {
			for i, g := range nd.gpus {
				dst[i] = get(g)
			}
		})
	}
	return b.fams
}

// xidMessage is dcgm-exporter's err_msg for the XID codes the simulator
// produces.
func xidMessage(code float64) string {
	switch code {
	case 0:
		return "No Error"
	case 79:
		return "GPU has fallen off the bus"
	case 48:
		return "Double Bit ECC Error"
	default:
		return "Unknown Error"
	}
}

func buildEBPF(t *target) []family {
	nd := t.node
	b := &famBuilder{style: styleGo, vf: fmtGo, target: targetLabels(t)}
	ebpf := func(name string) dcgmbridge.Family { return famShape(nd.c.shapes.ebpf, name) }
	// client_golang gathers families sorted by name.
	b.histogram(ebpf("ebpf_exporter_accept_latency_seconds"), lbl("port", "8000"), func() *hist { return nd.accept })
	b.multi(ebpf("ebpf_exporter_enabled_configs"),
		[][]labels.Label{lbl("name", "accept-latency"), lbl("name", "softirq-latency-net-rx"), lbl("name", "tcp-retransmit")}, fmtGo,
		func(dst []float64) { dst[0], dst[1], dst[2] = 1, 1, 1 })
	b.scalar(ebpf("ebpf_exporter_softirq_raised_total"), nil, func() float64 { return floor(nd.softirqRaised) })
	b.scalar(ebpf("ebpf_exporter_softirq_serviced_total"), nil, func() float64 { return floor(nd.softirqServiced) })
	b.histogram(ebpf("ebpf_exporter_softirq_wait_seconds"), nil, func() *hist { return nd.softirqWait })
	b.multi(ebpf("ebpf_exporter_tcp_retransmit_ipv4_packets_total"),
		[][]labels.Label{
			lbl("local_ip", nd.ip, "main_port", "8000", "peer_ip", routerIP, "type", "retransmit"),
			lbl("local_ip", nd.ip, "main_port", "8000", "peer_ip", routerIP, "type", "tail_loss_probe"),
		}, fmtGo, func(dst []float64) { dst[0], dst[1] = floor(nd.retransmits[0]), floor(nd.retransmits[1]) })
	return b.fams
}
