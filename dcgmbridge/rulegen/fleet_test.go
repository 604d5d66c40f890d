package rulegen

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/dcgmbridge/scrape"
)

// dcgmVariant is one way a dcgm-exporter release spells its labels and
// field names.
type dcgmVariant struct {
	name string
	// labels renames label names of the fixture (Hostname, UUID, pod, namespace).
	labels map[string]string
	// spelling picks which of a field's names the exporter emits: 0 the
	// fixture's, 1 the next spelling (old 1.x or a later rename), and so on.
	spelling int
	// target are the scrape target's own labels, set where the series has
	// none of that name (a Prometheus with honor_labels: false).
	target map[string]string
}

var dcgmVariants = []dcgmVariant{
	{name: "4.x Hostname"},
	{name: "HEAD hostname", labels: map[string]string{"Hostname": "hostname"}},
	{name: "old namespace", labels: map[string]string{"UUID": "uuid", "pod": "pod_name", "namespace": "pod_namespace"}, spelling: 1},
	{name: "1.x names", labels: map[string]string{"container": "container_name"}, spelling: 2},
	// A ServiceMonitor's default: the attribution collides with the target's
	// own namespace and pod (the exporter's), which Prometheus keeps, and
	// becomes exported_*.
	{name: "honor_labels false", labels: map[string]string{"pod": "exported_pod", "namespace": "exported_namespace", "container": "exported_container"},
		target: map[string]string{"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-7xk2p", "container": "nvidia-dcgm-exporter"}},
}

// fleetSeries is one series of a synthetic fleet and its value at the start
// and the end of the scrape sequence.
type fleetSeries struct {
	lset     labels.Labels
	from, to float64
}

// mixedFleet builds a fleet of about n series from the fixtures, close to
// the bench generator's mix (40% DCGM): dcgm-exporter nodes in every label
// and field-name variant (profiling and default field sets), vLLM V1 pods
// (healthy -> KV-cache storm) and V0 pods, each unit with its own host, pod
// and instance.
func mixedFleet(t testing.TB, e *evalEnv, n int) []fleetSeries {
	t.Helper()
	dcgmProf := e.parseFixture("dcgm_exporter_profiling_k8s.prom", nil)
	dcgmDef := e.parseFixture("dcgm_exporter_default_k8s.prom", nil)
	v1a := e.parseFixture("vllm_v1_t0_healthy.prom", nil)
	v1b := e.parseFixture("vllm_v1_t1_kv_storm.prom", nil)
	v0 := e.parseFixture("vllm_v0_legacy.prom", nil)
	var out []fleetSeries
	for unit := 0; len(out) < n; unit++ {
		switch unit % 8 {
		case 0, 1, 2, 3, 4, 5:
			body := dcgmProf
			if unit%2 == 1 {
				body = dcgmDef
			}
			out = append(out, e.dcgmNode(body, unit, dcgmVariants[unit/8%len(dcgmVariants)])...)
		case 6:
			// Serves on the GPUs of the cycle's first node: the join to GPU
			// series matches on its namespace and pod.
			out = append(out, servingPod(v1a, v1b, unit, "vllm", fmt.Sprintf("vllm-llama31-8b-6d9f7c5b8-x2kqp-%04d", unit-6))...)
		default:
			out = append(out, servingPod(v0, grown(v0, 1.1), unit, "vllm-v0", fmt.Sprintf("vllm-v0-pod-%04d", unit))...)
		}
	}
	return out
}

func (e *evalEnv) dcgmNode(body []scrape.Sample, unit int, v dcgmVariant) []fleetSeries {
	host := fmt.Sprintf("gpu-node-%04d", unit)
	out := make([]fleetSeries, 0, len(body))
	for _, s := range body {
		b := labels.NewBuilder(labels.EmptyLabels())
		s.Labels.Range(func(l labels.Label) {
			name, val := l.Name, l.Value
			switch name {
			case "__name__":
				if f, ok := e.cat.FieldByName(val); ok {
					names := f.Names()
					val = names[v.spelling%len(names)]
				}
			case "Hostname":
				val = host
			case "UUID":
				val = fmt.Sprintf("%s-%04d", val, unit)
			case "pod":
				val = fmt.Sprintf("%s-%04d", val, unit)
			}
			if to, ok := v.labels[name]; ok {
				name = to
			}
			b.Set(name, val)
		})
		for name, val := range v.target {
			if b.Get(name) == "" {
				b.Set(name, val)
			}
		}
		b.Set("job", "dcgm")
		b.Set("instance", host+":9400")
		// Counters grow; gauges stay put.
		to := s.Value
		if e.cat.TypeOf(s.Labels.Get("__name__")) == "counter" {
			to = s.Value + 1e6*float64(1+unit%7)
		}
		from := s.Value
		// Blank markers (DCGM_FP64_BLANK and above) that reached storage:
		// on some nodes GPU 1's gauges read blank throughout, on others
		// they turn blank during the window.
		if s.Labels.Get("gpu") == "1" && e.cat.TypeOf(s.Labels.Get("__name__")) == "gauge" {
			switch unit % 3 {
			case 0:
				from, to = blank, blank
			case 1:
				to = 2 * blank
			}
		}
		out = append(out, fleetSeries{lset: b.Labels(), from: from, to: to})
	}
	return out
}

// blank is sentinelFloor, the smallest DCGM blank marker.
const blank = 140737488355328.0

func servingPod(from, to []scrape.Sample, unit int, job, pod string) []fleetSeries {
	end := map[uint64]float64{}
	for _, s := range to {
		end[s.Labels.Hash()] = s.Value
	}
	out := make([]fleetSeries, 0, len(from))
	for _, s := range from {
		v1, ok := end[s.Labels.Hash()]
		if !ok {
			v1 = s.Value
		}
		b := labels.NewBuilder(s.Labels)
		b.Set("job", job)
		b.Set("instance", fmt.Sprintf("10.0.%d.%d:8000", unit/250, unit%250))
		b.Set("namespace", "inference")
		b.Set("pod", pod)
		out = append(out, fleetSeries{lset: b.Labels(), from: s.Value, to: v1})
	}
	return out
}

// appendFleet appends a 15 s scrape sequence of the fleet from t0 to t1 to
// the raw tier, every value moving linearly from its first to its last value.
func (e *evalEnv) appendFleet(fleet []fleetSeries) {
	e.t.Helper()
	seq := make([]scrape.Sample, 0, len(fleet))
	last := make([]scrape.Sample, 0, len(fleet))
	for _, s := range fleet {
		seq = append(seq, scrape.Sample{Labels: s.lset, Value: s.from})
		last = append(last, scrape.Sample{Labels: s.lset, Value: s.to})
	}
	e.scrapeSequence(seq, last)
}

var fleetTimes = []time.Time{t0, t0.Add(30 * time.Second), t1}
