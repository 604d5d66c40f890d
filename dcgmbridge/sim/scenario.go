package sim

import (
	"math/rand/v2"
	"sort"
	"time"
)

// durationRange is the span a generated fault of one kind lasts.
type durationRange struct{ lo, hi time.Duration }

func generatedDurations() map[Kind]durationRange {
	return map[Kind]durationRange{
		KindKVCacheStorm:    {15 * time.Minute, 40 * time.Minute},
		KindQueueBacklog:    {15 * time.Minute, 40 * time.Minute},
		KindUnderBatched:    {20 * time.Minute, 60 * time.Minute},
		KindSpecDecodeDrift: {20 * time.Minute, 60 * time.Minute},
		KindPowerCap:        {15 * time.Minute, 60 * time.Minute},
		KindThermalThrottle: {15 * time.Minute, 60 * time.Minute},
		KindXIDGPULost:      {10 * time.Minute, 30 * time.Minute},
		KindPrefixCacheDrop: {20 * time.Minute, 60 * time.Minute},
		KindNetworkDelay:    {10 * time.Minute, 30 * time.Minute},
		KindBenignSpike:     {2 * time.Minute, 5 * time.Minute},
		KindDeploy:          {defaultDeployDowntime, defaultDeployDowntime},
		KindScrapeGap:       {time.Minute, 5 * time.Minute},
		KindIdleReplica:     {30 * time.Minute, 2 * time.Hour},
	}
}

// GenerateFaults returns n faults and decoys drawn deterministically from
// seed over [from, to) for the topology of cfg: kinds uniformly from Kinds(),
// targets uniformly over nodes and GPUs, kind-specific durations, default
// parameters. Faults may overlap (two simultaneous faults are a case a
// diagnosis must handle). Append the result to Config.Faults before New.
func GenerateFaults(cfg Config, from, to time.Time, n int, seed uint64) []FaultSpec {
	cfg = cfg.Defaults()
	rng := rand.New(rand.NewPCG(seed, 0xfa17))
	ks := Kinds()
	durs := generatedDurations()
	info := kinds()
	var out []FaultSpec
	for range n {
		k := ks[rng.IntN(len(ks))]
		d := durs[k]
		dur := d.lo + time.Duration(rng.Int64N(int64(d.hi-d.lo)+1))
		span := to.Sub(from) - dur
		if span <= 0 {
			continue
		}
		start := from.Add(time.Duration(rng.Int64N(int64(span)))).Truncate(time.Second)
		spec := FaultSpec{Kind: k, Node: rng.IntN(cfg.Nodes), Start: start, Duration: dur}
		if g := rng.IntN(cfg.GPUsPerNode); info[k].scope != scopeNode {
			spec.GPU = &g
		}
		out = append(out, spec)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
}
