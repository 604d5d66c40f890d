package diagnose

import (
	"context"
	"testing"
	"time"

	"github.com/strata-dev/strata/dcgmbridge/sim"
)

// replayBareMetal is replaySim for a fleet without Kubernetes labels
// (sim.Config.BareMetal): vLLM and dcgm-exporter scraped by static_configs,
// so a replica is known by its job and instance only.
func replayBareMetal(t *testing.T, cfg sim.Config, from, end time.Time) ([]Diagnosis, sim.Fault) {
	t.Helper()
	cfg.BareMetal = true
	minute := simHistory(t, cfg, end)
	ds, err := Replay(context.Background(), DefaultConfig(), Options{Minute: minute, Logger: quietLogger()}, from, end)
	if err != nil {
		t.Fatal(err)
	}
	c, err := sim.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ds, c.GroundTruth()[0]
}

// TestBareMetalFaultsAreDiagnosed: without namespace and pod labels, four
// replicas on one node (one GPU each) stay apart. Every fault a replica's
// own series or its GPU's show is diagnosed once, as its cause, on its
// instance (or GPU, or host); the two whose rules need to know which GPU
// serves which replica (queue backlog, under-batched), which no label
// tells here, name no wrong cause.
func TestBareMetalFaultsAreDiagnosed(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates and replays 9 scenarios")
	}
	unattributed := map[string]bool{"request_queue_backlog": true, "under_batched_gpu": true}
	for _, kind := range Causes {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			onset := simStart.Add(faultAt)
			dur := 20 * time.Minute
			ds, gt := replayBareMetal(t, smallCluster(sim.FaultSpec{Kind: sim.Kind(kind), Node: 0, GPU: gpu(1), At: faultAt, Duration: dur}),
				onset.Add(-20*time.Minute), onset.Add(dur+25*time.Minute))
			if unattributed[kind] {
				for _, d := range ds {
					if d.Cause != kind && d.Cause != CauseUnknown {
						t.Fatalf("diagnosed %s:%s", d.Cause, describe(ds))
					}
				}
				return
			}
			if len(ds) != 1 || ds[0].Cause != kind {
				t.Fatalf("want exactly one %s:%s", kind, describe(ds))
			}
			e := ds[0].Entities
			switch gt.Kind {
			case sim.KindNetworkDelay:
				if e.Host != gt.Target.Node {
					t.Errorf("diagnosis on %+v, fault on host %s", e, gt.Target.Node)
				}
			case sim.KindPowerCap, sim.KindThermalThrottle, sim.KindXIDGPULost:
				if e.UUID != gt.Target.UUID {
					t.Errorf("diagnosis on %+v, fault on GPU %s", e, gt.Target.UUID)
				}
			default:
				if e.Instance != gt.Target.Instance || e.Pod != "" {
					t.Errorf("diagnosis on %+v, fault on instance %s", e, gt.Target.Instance)
				}
				for _, ev := range ds[0].Evidence {
					if ev.Value == nil {
						t.Errorf("evidence %s has no value (query %s)", ev.Metric, ev.Query)
					}
				}
				// The replica's own baselines, not its neighbours' too.
				if c := ds[0].Confidence; c < 0.5 {
					t.Errorf("confidence %.2f, as where the replicas' series were mixed", c)
				}
			}
		})
	}
}

// TestBareMetalOnePerNode: one vLLM per node spanning its four GPUs and no
// Kubernetes labels: the canonical join finds the replica's GPUs by its
// host, so the two causes that need them, a queue backlog behind saturated
// GPUs and an under-batched GPU, are named on the replica's instance.
func TestBareMetalOnePerNode(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates and replays 2 scenarios")
	}
	for _, kind := range []sim.Kind{sim.KindQueueBacklog, sim.KindUnderBatched} {
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			onset := simStart.Add(faultAt)
			dur := 20 * time.Minute
			cfg := smallCluster(sim.FaultSpec{Kind: kind, Node: 0, GPU: gpu(1), At: faultAt, Duration: dur})
			cfg.GPUsPerInstance = 4
			ds, gt := replayBareMetal(t, cfg, onset.Add(-20*time.Minute), onset.Add(dur+25*time.Minute))
			if len(ds) != 1 || ds[0].Cause != string(kind) {
				t.Fatalf("want exactly one %s:%s", kind, describe(ds))
			}
			if e := ds[0].Entities; e.Instance != gt.Target.Instance {
				t.Errorf("diagnosis on %+v, fault on instance %s", e, gt.Target.Instance)
			}
		})
	}
}

// TestReplicaKey: a pod is a replica; without a pod, a model's serving
// instance is; a GPU, a host exporter (eBPF: an instance, no model) and an
// instance that is a GPU's are not. The same entities are one replica for
// the causal links, and two instances of one host are two.
func TestReplicaKey(t *testing.T) {
	pod := Entities{Model: "m", Namespace: "ns", Pod: "p", Instance: "10.0.0.1:8000"}
	bare := Entities{Model: "m", Instance: "h:8000", Host: "h"}
	for _, tc := range []struct {
		e    Entities
		want string
	}{
		{pod, "pod ns/p"},
		{bare, "instance h:8000"},
		{Entities{Host: "h", GPU: "1", UUID: "GPU-1"}, ""},
		{Entities{Instance: "h:9435", Host: "h"}, ""},
		{Entities{Model: "m", Instance: "h:9400", Host: "h", GPU: "1"}, ""},
	} {
		if got := tc.e.ReplicaKey(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.e, got, tc.want)
		}
	}
	// SameReplica is the keys' equality, for every pair of a set of
	// entities that differ in each field the key reads.
	var all []Entities
	for _, ns := range []string{"", "ns", "ns2"} {
		for _, pod := range []string{"", "p", "q"} {
			for _, m := range []string{"", "m"} {
				for _, inst := range []string{"", "h:8000", "h:8001"} {
					for _, gpu := range []string{"", "1"} {
						for _, uuid := range []string{"", "GPU-1"} {
							all = append(all, Entities{Namespace: ns, Pod: pod, Model: m, Instance: inst, GPU: gpu, UUID: uuid, Host: "h"})
						}
					}
				}
			}
		}
	}
	for _, a := range all {
		for _, b := range all {
			ka, kb := a.ReplicaKey(), b.ReplicaKey()
			if want := ka != "" && ka == kb; a.SameReplica(b) != want {
				t.Fatalf("%+v, %+v: SameReplica %v, keys %q and %q", a, b, !want, ka, kb)
			}
		}
	}
	if !sameEntity(bare, Entities{Model: "m", Instance: "h:8000", Host: "h"}) || sameEntity(bare, Entities{Model: "m", Instance: "h:8001", Host: "h"}) {
		t.Error("instances of one host: want the same one to be one replica, another to be another")
	}
	if sameEntity(Entities{Instance: "h:9435", Host: "h"}, Entities{Instance: "h:9435", Host: "h"}) {
		t.Error("a host exporter's entity is no replica")
	}
}
