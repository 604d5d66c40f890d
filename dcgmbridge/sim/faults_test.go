package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

const (
	vllmPath = "/gpu-node-0/vllm/8001/metrics" // the instance on GPU 1
	dcgmPath = "/gpu-node-0/dcgm/metrics"
	ebpfPath = "/gpu-node-0/ebpf/metrics"
)

// snapshot is every endpoint of node 0 parsed at one model time; vllm is
// nil when the instance did not answer.
type snapshot struct {
	vllm *parsed
	dcgm parsed
	ebpf parsed
}

func take(t *testing.T, c *Cluster, when time.Time) snapshot {
	t.Helper()
	c.Step(when)
	s := snapshot{dcgm: parseText(t, scrape(t, c, dcgmPath), "text/plain"), ebpf: parseText(t, scrape(t, c, ebpfPath), "text/plain")}
	var buf bytes.Buffer
	if err := c.WriteExposition(&buf, vllmPath); err == nil {
		p := parseText(t, buf.Bytes(), "text/plain")
		s.vllm = &p
	}
	return s
}

func (s snapshot) v(t *testing.T, name string, kv ...string) float64 {
	t.Helper()
	if s.vllm == nil {
		t.Fatalf("vLLM target down when reading %s", name)
	}
	return s.vllm.value(t, name, kv...)
}

func (s snapshot) gpu(t *testing.T, name string) float64 {
	t.Helper()
	return s.dcgm.value(t, name, "gpu", "1")
}

func ratio(t *testing.T, a, b snapshot, num, den string) float64 {
	t.Helper()
	dn := b.v(t, num) - a.v(t, num)
	dd := b.v(t, den) - a.v(t, den)
	if dd <= 0 {
		t.Fatalf("%s did not increase", den)
	}
	return dn / dd
}

// TestFaultSignatures injects each fault on GPU 1 of a 1 x 2 cluster and
// checks that the metrics a diagnosis rule reads change as the rule expects,
// comparing the 10 minutes before the onset with minutes 5-15 of the fault.
func TestFaultSignatures(t *testing.T) {
	onset := 2 * time.Hour
	cases := []struct {
		kind   Kind
		params map[string]float64
		fields string
		check  func(t *testing.T, before0, before, during0, during snapshot)
	}{
		{kind: KindKVCacheStorm, check: func(t *testing.T, b0, b, d0, d snapshot) {
			if u := b.v(t, "vllm:kv_cache_usage_perc"); u > 0.9 {
				t.Errorf("kv_cache_usage_perc %v before storm", u)
			}
			if p := d.v(t, "vllm:num_preemptions_total") - d0.v(t, "vllm:num_preemptions_total"); p <= 0 {
				t.Errorf("no preemptions during storm")
			}
			if fb, fb0 := d.gpu(t, "DCGM_FI_DEV_FB_USED"), b.gpu(t, "DCGM_FI_DEV_FB_USED"); fb != fb0 {
				t.Errorf("FB_USED moved %v -> %v: vLLM preallocates the KV cache", fb0, fb)
			}
			if p := b.v(t, "vllm:num_preemptions_total") - b0.v(t, "vllm:num_preemptions_total"); p != 0 {
				t.Errorf("%v preemptions before storm", p)
			}
			ttftB := ratio(t, b0, b, "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count")
			ttftD := ratio(t, d0, d, "vllm:time_to_first_token_seconds_sum", "vllm:time_to_first_token_seconds_count")
			if ttftD < 5*ttftB {
				t.Errorf("mean TTFT %v during storm vs %v before", ttftD, ttftB)
			}
		}},
		{kind: KindQueueBacklog, check: func(t *testing.T, b0, b, d0, d snapshot) {
			if w := d.v(t, "vllm:num_requests_waiting"); w <= 100 || w <= d0.v(t, "vllm:num_requests_waiting") {
				t.Errorf("waiting %v (was %v) during backlog, want > 100 and growing", w, d0.v(t, "vllm:num_requests_waiting"))
			}
			if w := b.v(t, "vllm:num_requests_waiting"); w > 5 {
				t.Errorf("waiting %v before backlog", w)
			}
			if sm := d.gpu(t, "DCGM_FI_PROF_SM_ACTIVE"); sm <= 0.85 {
				t.Errorf("SM active %v during backlog, want saturated > 0.85", sm)
			}
			qB := ratio(t, b0, b, "vllm:request_queue_time_seconds_sum", "vllm:request_queue_time_seconds_count")
			qD := ratio(t, d0, d, "vllm:request_queue_time_seconds_sum", "vllm:request_queue_time_seconds_count")
			if qD < 10*qB+1 {
				t.Errorf("mean queue time %v during backlog vs %v before", qD, qB)
			}
		}},
		{kind: KindUnderBatched, check: func(t *testing.T, b0, b, d0, d snapshot) {
			if sm := d.gpu(t, "DCGM_FI_PROF_SM_ACTIVE"); sm >= 0.6 {
				t.Errorf("SM active %v while under-batched, want < 0.6", sm)
			}
			if sm := b.gpu(t, "DCGM_FI_PROF_SM_ACTIVE"); sm < 0.6 {
				t.Errorf("SM active %v before, want >= 0.6", sm)
			}
			if u := d.gpu(t, "DCGM_FI_DEV_GPU_UTIL"); u < 80 {
				t.Errorf("GPU_UTIL %v: a tiny batch still keeps a kernel running", u)
			}
			rps := (d.v(t, "vllm:request_success_total", "finished_reason", "stop") - d0.v(t, "vllm:request_success_total", "finished_reason", "stop")) / 600
			if rps >= 10 {
				t.Errorf("success rate %v req/s, want < 10", rps)
			}
			if r := d.v(t, "vllm:num_requests_running"); r < 1 || r > 2 {
				t.Errorf("running %v, want 1..2 (max_num_seqs 2)", r)
			}
		}},
		{kind: KindSpecDecodeDrift, check: func(t *testing.T, b0, b, d0, d snapshot) {
			accB := ratio(t, b0, b, "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total")
			accD := ratio(t, d0, d, "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total")
			if math.Abs(accB-0.62) > 0.01 || math.Abs(accD-0.08) > 0.01 {
				t.Errorf("acceptance %v before, %v during; want the configured 0.62 then 0.08", accB, accD)
			}
			itlB := ratio(t, b0, b, "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count")
			itlD := ratio(t, d0, d, "vllm:inter_token_latency_seconds_sum", "vllm:inter_token_latency_seconds_count")
			if itlD < 1.5*itlB {
				t.Errorf("mean ITL %v during drift vs %v before", itlD, itlB)
			}
		}},
		{kind: KindPowerCap, fields: "full", check: func(t *testing.T, b0, b, d0, d snapshot) {
			if p := d.gpu(t, "DCGM_FI_DEV_POWER_USAGE"); p > 300.5 {
				t.Errorf("power %v above the 300 W cap", p)
			}
			if c := d.gpu(t, "DCGM_FI_DEV_SM_CLOCK"); c >= 0.9*maxSMClock {
				t.Errorf("SM clock %v not reduced under the cap", c)
			}
			if r := int(d.gpu(t, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")); r&reasonSWPower == 0 {
				t.Errorf("clock event reasons %#x lack SW power cap", r)
			}
			if v := d.gpu(t, "DCGM_FI_DEV_POWER_VIOLATION") - d0.gpu(t, "DCGM_FI_DEV_POWER_VIOLATION"); v <= 0 {
				t.Errorf("power violation counter did not grow")
			}
		}},
		{kind: KindThermalThrottle, fields: "full", check: func(t *testing.T, b0, b, d0, d snapshot) {
			if temp := d.gpu(t, "DCGM_FI_DEV_GPU_TEMP"); temp <= 85 {
				t.Errorf("temperature %v, want > 85", temp)
			}
			if c := d.gpu(t, "DCGM_FI_DEV_SM_CLOCK"); c >= 0.95*maxSMClock {
				t.Errorf("SM clock %v not reduced by heat", c)
			}
			if r := int(d.gpu(t, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS")); r&reasonSWThermal == 0 {
				t.Errorf("clock event reasons %#x lack thermal slowdown", r)
			}
		}},
		{kind: KindXIDGPULost, check: func(t *testing.T, b0, b, d0, d snapshot) {
			if x := d.dcgm.value(t, "DCGM_FI_DEV_XID_ERRORS", "gpu", "1", "err_code", "79"); x != 79 {
				t.Errorf("XID %v, want 79", x)
			}
			if d.vllm != nil {
				t.Errorf("vLLM instance on the lost GPU still answers")
			}
			if u := d.gpu(t, "DCGM_FI_DEV_GPU_UTIL"); u != 0 {
				t.Errorf("GPU_UTIL %v on a lost GPU", u)
			}
		}},
		{kind: KindPrefixCacheDrop, check: func(t *testing.T, b0, b, d0, d snapshot) {
			hB := ratio(t, b0, b, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
			hD := ratio(t, d0, d, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
			if hB < 0.3 || hD > 0.05 {
				t.Errorf("prefix hit ratio %v before, %v during", hB, hD)
			}
		}},
		{kind: KindNetworkDelay, check: func(t *testing.T, b0, b, d0, d snapshot) {
			mean := func(x0, x snapshot) float64 {
				s := x.ebpf.value(t, "ebpf_exporter_accept_latency_seconds_sum") - x0.ebpf.value(t, "ebpf_exporter_accept_latency_seconds_sum")
				n := x.ebpf.value(t, "ebpf_exporter_accept_latency_seconds_count") - x0.ebpf.value(t, "ebpf_exporter_accept_latency_seconds_count")
				return s / n
			}
			if mB, mD := mean(b0, b), mean(d0, d); mB > 0.001 || mD < 0.04 {
				t.Errorf("mean accept latency %v before, %v during a 50 ms delay", mB, mD)
			}
			rt := func(x0, x snapshot) float64 {
				return x.ebpf.value(t, "ebpf_exporter_tcp_retransmit_ipv4_packets_total", "type", "retransmit") -
					x0.ebpf.value(t, "ebpf_exporter_tcp_retransmit_ipv4_packets_total", "type", "retransmit")
			}
			if rB, rD := rt(b0, b), rt(d0, d); rD < 5*rB+1 {
				t.Errorf("retransmits %v before, %v during", rB, rD)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.kind), func(t *testing.T) {
			spec := FaultSpec{Kind: tc.kind, Node: 0, GPU: intp(1), At: onset, Duration: 20 * time.Minute, Params: tc.params}
			if tc.kind == KindNetworkDelay {
				spec.GPU = nil
			}
			c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 11, DCGMFields: tc.fields, Faults: []FaultSpec{spec}})
			b0 := take(t, c, at(c, onset-10*time.Minute))
			b := take(t, c, at(c, onset-time.Second))
			d0 := take(t, c, at(c, onset+5*time.Minute))
			if tc.kind == KindKVCacheStorm {
				// KV usage saw-tooths as long requests finish and new ones
				// are admitted: sample it every 30 s.
				peak, sum, n := 0.0, 0.0, 0.0
				for s := 30 * time.Second; s <= 10*time.Minute; s += 30 * time.Second {
					u := take(t, c, at(c, onset+5*time.Minute+s)).v(t, "vllm:kv_cache_usage_perc")
					peak, sum, n = max(peak, u), sum+u, n+1
				}
				if peak < 0.95 || sum/n < 0.8 {
					t.Errorf("kv_cache_usage_perc peak %v, mean %v during storm; want >= 0.95 and >= 0.8", peak, sum/n)
				}
			}
			d := take(t, c, at(c, onset+15*time.Minute))
			tc.check(t, b0, b, d0, d)
		})
	}
}

// TestDecoysDoNotLookLikeFaults checks that each decoy leaves the fault
// signatures alone while still being visible.
func TestDecoysDoNotLookLikeFaults(t *testing.T) {
	onset := 2 * time.Hour
	noFaultSignature := func(t *testing.T, d0, d snapshot) {
		t.Helper()
		if d.vllm == nil {
			return
		}
		if u := d.v(t, "vllm:kv_cache_usage_perc"); u >= 0.95 {
			t.Errorf("kv usage %v looks like a storm", u)
		}
		if d0.vllm != nil {
			if p := d.v(t, "vllm:num_preemptions_total") - d0.v(t, "vllm:num_preemptions_total"); p > 0 {
				t.Errorf("%v preemptions", p)
			}
		}
		if w := d.v(t, "vllm:num_requests_waiting"); w > 100 {
			t.Errorf("waiting %v looks like a backlog", w)
		}
		if x := d.gpu(t, "DCGM_FI_DEV_XID_ERRORS"); x != 0 {
			t.Errorf("XID %v", x)
		}
	}
	cases := []struct {
		kind     Kind
		duration time.Duration
		check    func(t *testing.T, d0, d snapshot)
	}{
		{KindBenignSpike, 3 * time.Minute, func(t *testing.T, d0, d snapshot) {
			if r := d.v(t, "vllm:request_success_total", "finished_reason", "stop") - d0.v(t, "vllm:request_success_total", "finished_reason", "stop"); r <= 0 {
				t.Errorf("no traffic during spike")
			}
		}},
		{KindDeploy, 45 * time.Second, func(t *testing.T, d0, d snapshot) {
			if d.vllm == nil {
				t.Fatal("instance not back after deploy")
			}
			if g := d.v(t, "vllm:generation_tokens_total"); g >= d0.v(t, "vllm:generation_tokens_total") {
				t.Errorf("counter did not reset across the restart: %v then %v", d0.v(t, "vllm:generation_tokens_total"), g)
			}
		}},
		{KindScrapeGap, 2 * time.Minute, func(t *testing.T, d0, d snapshot) {
			if d.vllm == nil {
				t.Error("target still missing after the gap")
			}
		}},
		{KindIdleReplica, 20 * time.Minute, func(t *testing.T, d0, d snapshot) {
			if r := d.v(t, "vllm:num_requests_running"); r != 0 {
				t.Errorf("idle replica running %v", r)
			}
			if sm, u := d.gpu(t, "DCGM_FI_PROF_SM_ACTIVE"), d.gpu(t, "DCGM_FI_DEV_GPU_UTIL"); sm != 0 || u != 0 {
				t.Errorf("idle replica SM %v util %v", sm, u)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(string(tc.kind), func(t *testing.T) {
			spec := FaultSpec{Kind: tc.kind, Node: 0, GPU: intp(1), At: onset, Duration: tc.duration}
			c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 5, Faults: []FaultSpec{spec}})
			d0 := take(t, c, at(c, onset-time.Second))
			mid := take(t, c, at(c, onset+tc.duration/2))
			if tc.kind == KindScrapeGap && mid.vllm != nil {
				t.Error("target answers during a scrape gap")
			}
			if tc.kind == KindDeploy && mid.vllm != nil {
				t.Error("target answers while restarting")
			}
			noFaultSignature(t, d0, mid)
			var d snapshot
			if tc.kind == KindIdleReplica {
				d = take(t, c, at(c, onset+10*time.Minute))
			} else {
				d = take(t, c, at(c, onset+tc.duration+5*time.Minute))
			}
			noFaultSignature(t, d0, d)
			tc.check(t, d0, d)
			if tc.kind == KindDeploy {
				gt := c.GroundTruth()[0]
				if !strings.Contains(string(scrape(t, c, dcgmPath)), `pod="`+gt.Target.Pod+`"`) && gt.Target.Pod != "" {
					t.Logf("pod renamed by the deploy (ground truth names the old pod %s)", gt.Target.Pod)
				}
			}
		})
	}
}

func TestGroundTruth(t *testing.T) {
	c := mustNew(t, Config{Nodes: 2, GPUsPerNode: 2, Faults: []FaultSpec{
		{Kind: KindNetworkDelay, Node: 1, At: 2 * time.Hour, Duration: time.Minute},
		{Kind: KindKVCacheStorm, Node: 0, GPU: intp(1), At: time.Hour, Duration: 10 * time.Minute, Params: map[string]float64{"prompt_scale": 6}},
	}})
	gt := c.GroundTruth()
	if len(gt) != 2 || gt[0].Kind != KindKVCacheStorm {
		t.Fatalf("ground truth not in onset order: %+v", gt)
	}
	var buf bytes.Buffer
	if err := WriteGroundTruth(&buf, gt); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	var f Fault
	if err := json.Unmarshal([]byte(lines[0]), &f); err != nil {
		t.Fatal(err)
	}
	want := c.Config().Start.Add(time.Hour)
	if f.Kind != KindKVCacheStorm || !f.Start.Equal(want) || !f.End.Equal(want.Add(10*time.Minute)) ||
		f.Params["prompt_scale"] != 6 || f.Params["arrival_scale"] != 1.2 || f.Target.Instance != "gpu-node-0:8001" ||
		f.Target.Pod == "" || f.Target.Namespace != "inference" || f.RootMetric != "vllm:kv_cache_usage_perc" || f.Decoy {
		t.Errorf("record %s", lines[0])
	}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"defaults", Config{}, ""},
		{"bad version", Config{VLLMVersion: "v2"}, "vllm_version"},
		{"bad tp", Config{GPUsPerNode: 8, GPUsPerInstance: 3}, "gpus_per_instance"},
		{"bad fields", Config{DCGMFields: "all"}, "dcgm_fields"},
		{"tick too coarse", Config{Tick: 15 * time.Second}, "tick"},
		{"unknown kind", Config{Faults: []FaultSpec{{Kind: "meteor", Duration: time.Minute}}}, "unknown kind"},
		{"gpu missing", Config{Faults: []FaultSpec{{Kind: KindKVCacheStorm, Duration: time.Minute}}}, "gpu is required"},
		{"gpu out of range", Config{Faults: []FaultSpec{{Kind: KindPowerCap, GPU: intp(9), Duration: time.Minute}}}, "out of range"},
		{"unknown param", Config{Faults: []FaultSpec{{Kind: KindPowerCap, GPU: intp(0), Duration: time.Minute, Params: map[string]float64{"watts": 1}}}}, "unknown parameter"},
		{"no duration", Config{Faults: []FaultSpec{{Kind: KindPowerCap, GPU: intp(0)}}}, "duration"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestHealthyDayHasNoSignatures runs a fault-free weekday (the daily peak
// included) and checks every 5 minutes that no fault signature appears:
// the baseline must not produce false alerts on its own.
func TestHealthyDayHasNoSignatures(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 17})
	prev := take(t, c, at(c, 0))
	maxWaiting, maxKV, minSM := 0.0, 0.0, 1.0
	for m := 5 * time.Minute; m <= 24*time.Hour; m += 5 * time.Minute {
		s := take(t, c, at(c, m))
		maxWaiting = max(maxWaiting, s.v(t, "vllm:num_requests_waiting"))
		maxKV = max(maxKV, s.v(t, "vllm:kv_cache_usage_perc"))
		if p := s.v(t, "vllm:num_preemptions_total") - prev.v(t, "vllm:num_preemptions_total"); p > 0 {
			t.Errorf("%s: %v preemptions on a healthy day", m, p)
		}
		if acc := ratio(t, prev, s, "vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total"); acc < 0.5 {
			t.Errorf("%s: acceptance %v", m, acc)
		}
		if hit := ratio(t, prev, s, "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"); hit < 0.3 {
			t.Errorf("%s: prefix hit ratio %v", m, hit)
		}
		// The night trough runs small batches: SM active dips towards 0.6
		// (the example rule's threshold, which therefore needs a seasonal
		// baseline), but stays clear of an under-batched GPU's ~0.35.
		sm := s.gpu(t, "DCGM_FI_PROF_SM_ACTIVE")
		if sm < 0.5 {
			t.Errorf("%s: SM active %v would look under-batched", m, sm)
		}
		minSM = min(minSM, sm)
		prev = s
	}
	if maxWaiting > 20 || maxKV >= 0.9 {
		t.Errorf("healthy day peaked at %v waiting and %v KV usage", maxWaiting, maxKV)
	}
	t.Logf("healthy day: max waiting %v, max KV usage %.2f, min SM active %.2f", maxWaiting, maxKV, minSM)
}
