package rulegen

import (
	"syscall"
	"testing"
	"time"
)

// BenchmarkCanonicalGroupEval is one evaluation of the canonical rule group,
// as rules.Manager runs it every 15 s, over a mixed fleet of about 10,000
// series (dcgm-exporter nodes in every label and field-name spelling, vLLM V1
// and V0 pods) in the raw tier: the exported form (label_replace chains, as a
// Prometheus loading the rule file runs it) and the internal form `strata
// serve` runs, with its expressions pinned in the engine's parser (parsed
// once) or, internal-parse, parsed by the engine at every evaluation as
// before they were pinned. cpu-ns/op is the process's CPU time (garbage collection
// included) per evaluation, steadier than ns/op on a shared machine.
func BenchmarkCanonicalGroupEval(b *testing.B) {
	for _, form := range []struct {
		name            string
		internal, noPin bool
	}{{"exported", false, false}, {"internal", true, false}, {"internal-parse", true, true}} {
		b.Run(form.name, func(b *testing.B) {
			e := newEvalEnv(b)
			e.noPin = form.noPin
			fleet := mixedFleet(b, e, 10000)
			e.appendFleet(fleet)
			g := e.group(DefaultConfig(), form.internal)
			b.ReportMetric(float64(len(fleet)), "series")
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				g.eval(t1)
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
			for _, r := range g.Rules() {
				if err := r.LastError(); err != nil {
					b.Fatalf("rule %s: %v", r.Name(), err)
				}
			}
		})
	}
}

// cpuTime is the user and system CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
