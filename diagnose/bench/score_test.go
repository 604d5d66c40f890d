package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose"
)

// handMade are diagnosis JSON lines in the engine's documented shape
// (docs/diagnosis.md), written by hand for the scorer's test.
const handMade = `{"id":"d-1","cause":"power_cap","state":"resolved","confidence":0.9,"start":"2026-01-16T03:01:00Z","end":"2026-01-16T03:40:00Z","entities":{"host":"gpu-node-0","gpu":"3","uuid":"GPU-a"},"candidates":[{"cause":"power_cap","score":0.9},{"cause":"thermal_throttle","score":0.4}]}
{"id":"d-2","cause":"request_queue_backlog","state":"resolved","confidence":0.7,"start":"2026-01-16T05:02:00Z","end":"2026-01-16T05:30:00Z","entities":{"namespace":"inference","pod":"vllm-b","instance":"gpu-node-1:8002","host":"gpu-node-1"},"candidates":[{"cause":"request_queue_backlog","score":0.7},{"cause":"kv_cache_eviction_storm","score":0.6}]}
{"id":"d-3","cause":"unknown","state":"resolved","confidence":0,"start":"2026-01-10T12:00:00Z","end":"2026-01-10T12:20:00Z","entities":{"namespace":"inference","pod":"vllm-c","host":"gpu-node-2"},"candidates":[]}
{"id":"d-4","cause":"under_batched_gpu","state":"resolved","confidence":0.6,"start":"2026-01-16T08:05:00Z","end":"2026-01-16T08:40:00Z","entities":{"namespace":"inference","pod":"vllm-d","host":"gpu-node-3"},"candidates":[{"cause":"under_batched_gpu","score":0.6}]}
{"id":"d-5","cause":"network_delay","state":"resolved","confidence":0.8,"start":"2026-01-16T10:00:00Z","end":"2026-01-16T10:20:00Z","entities":{"host":"gpu-node-2"},"candidates":[{"cause":"network_delay","score":0.8}]}`

func TestScoreHandMade(t *testing.T) {
	var ds []diagnose.Diagnosis
	for _, l := range strings.Split(handMade, "\n") {
		var d diagnose.Diagnosis
		if err := json.Unmarshal([]byte(l), &d); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	at := func(s string) time.Time { x, _ := time.Parse(time.RFC3339, s); return x }
	g3 := 3
	truth := []sim.Fault{
		{Kind: sim.KindPowerCap, Target: sim.FaultTarget{Node: "gpu-node-0", GPU: &g3, UUID: "GPU-a"}, Start: at("2026-01-16T03:00:00Z"), End: at("2026-01-16T03:30:00Z")},
		{Kind: sim.KindKVCacheStorm, Target: sim.FaultTarget{Node: "gpu-node-1", Instance: "gpu-node-1:8002", Namespace: "inference", Pod: "vllm-b"}, Start: at("2026-01-16T05:00:00Z"), End: at("2026-01-16T05:20:00Z")},
		{Kind: sim.KindXIDGPULost, Target: sim.FaultTarget{Node: "gpu-node-2", GPU: &g3, UUID: "GPU-x"}, Start: at("2026-01-16T07:00:00Z"), End: at("2026-01-16T07:10:00Z")},
		{Kind: sim.KindIdleReplica, Decoy: true, Target: sim.FaultTarget{Node: "gpu-node-3", Instance: "gpu-node-3:8001", Namespace: "inference", Pod: "vllm-d"}, Start: at("2026-01-16T08:00:00Z"), End: at("2026-01-16T08:45:00Z")},
	}
	sc := Scenario{Name: "hand", Cluster: sim.Config{Start: at("2026-01-02T00:00:00Z")}, History: Duration(14 * 24 * time.Hour)}
	fired := map[string]time.Time{"d-1": at("2026-01-16T03:04:00Z"), "d-2": at("2026-01-16T05:05:00Z")}
	outs, falses, js := scoreScenario(scenarioInput{sc: sc, truth: truth, diagnoses: ds, fired: fired, variants: make([]string, len(truth))})
	if len(outs) != 3 {
		t.Fatalf("%d fault outcomes, want 3 (the decoy is not a fault)", len(outs))
	}
	pc, kv, xid := outs[0], outs[1], outs[2]
	if !pc.Detected || !pc.CauseTop1 || !pc.EntityTop1 || pc.TTDSeconds != 240 {
		t.Errorf("power cap: %+v", pc)
	}
	if !kv.Detected || kv.CauseTop1 || !kv.CauseTop3 || !kv.EntityTop1 || kv.Cause != "request_queue_backlog" {
		t.Errorf("kv storm named as the backlog it causes: %+v", kv)
	}
	if xid.Detected || xid.CauseTop3 || xid.EntityTop3 {
		t.Errorf("a missed fault: %+v", xid)
	}
	where := map[string]string{}
	for _, f := range falses {
		where[f.ID] = f.Where
	}
	if len(falses) != 3 || where["d-3"] != "history" || where["d-4"] != "decoy" || where["d-5"] != "incident_period" {
		t.Errorf("false diagnoses %+v", falses)
	}
	s := summarize(outs)
	if s.Faults != 3 || s.Detected != 2 || s.CauseTop1 != 1 || s.CauseTop3 != 2 || s.EntityTop1 != 2 || s.TTDMean != 270 {
		t.Errorf("summary %+v", s)
	}
	bs, ece := reliability(js)
	if len(bs) == 0 || ece <= 0 || ece > 1 {
		t.Errorf("reliability %+v, ECE %v", bs, ece)
	}
	c := confusion(outs)
	if c.Counts[0][0]+c.Counts[1][1] != 0 && c.Counts[indexOf(c.Kinds, "power_cap")][indexOf(c.Causes, "power_cap")] != 1 {
		t.Errorf("confusion %+v", c)
	}
	if c.Counts[indexOf(c.Kinds, "xid_gpu_lost")][len(c.Causes)-1] != 1 {
		t.Errorf("the missed xid fault is not in the missed column: %+v", c.Counts)
	}
}

func indexOf(s []string, x string) int {
	for i, v := range s {
		if v == x {
			return i
		}
	}
	return -1
}
