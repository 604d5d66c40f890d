package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// gpu holds one GPU's DCGM fields. They are derived from the load of the
// instance it serves, so a fault in vLLM shows in DCGM the way it would on
// real hardware, and GPU faults (power cap, heat, XID) feed back into vLLM
// through the clock factor.
type gpu struct {
	node *node
	idx  int
	uuid string
	pci  string
	inst *instance
	rng  *rand.Rand

	// Fault inputs, set every tick.
	powerLimit float64
	tempOffset float64
	lost       bool
	xidCode    float64

	// State and outputs.
	clock                          float64 // SM clock / max clock; read by the instance next tick
	util, memCopy                  float64 // percent
	grEngine, smActive, smOcc      float64 // ratios
	tensor, dram                   float64
	power, temp, memTemp           float64
	smClock, memClock              float64
	energy                         float64 // mJ
	fbUsed                         float64 // MiB
	xid                            float64
	pcieTx, pcieRx                 float64 // B/s
	nvlinkTx, nvlinkRx, nvlinkCtr  float64
	powerViolation, thermalViolate float64 // ns
	reasons                        float64 // DCGM clock-event-reasons bitmask
}

// Board constants of an H100 SXM (80 GB HBM3) as dcgm-exporter reports them.
const (
	fbTotalMiB    = 81089
	fbReservedMiB = 532
	fbVLLMMiB     = 77156 // gpu_memory_utilization=0.9 preallocates the KV cache
	idleWatts     = 70
	maxSMClock    = 1980
	idleSMClock   = 345
	memClockMHz   = 2619
	ambientC      = 30
)

// DCGM clock-event reason bits (DCGM_CLOCKS_EVENT_REASON_*, NVML's
// nvmlClocksEventReason*).
const (
	reasonGPUIdle   = 0x1
	reasonSWPower   = 0x4
	reasonSWThermal = 0x20
	reasonHWThermal = 0x40
)

func newGPU(nd *node, idx int, seed *rand.Rand) *gpu {
	return &gpu{
		node: nd, idx: idx, rng: nd.rng,
		uuid: fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", seed.Uint32(), seed.Uint32()&0xffff,
			0x4000|seed.Uint32()&0x0fff, 0x8000|seed.Uint32()&0x3fff, seed.Uint64()&0xffffffffffff),
		pci:   fmt.Sprintf("00000000:%02X:00.0", 0x18+0x12*idx),
		clock: 1, temp: ambientC + 3, memTemp: ambientC, memClock: memClockMHz,
	}
}

func (g *gpu) jitter(v, sd float64) float64 { return v + sd*g.rng.NormFloat64() }

// update derives the DCGM fields from the instance's last tick.
func (g *gpu) update(dt float64) {
	var st tickStats
	up := g.inst != nil && !g.inst.down
	if up {
		st = g.inst.lastTick
	}
	if g.xid != g.xidCode {
		// err_code/err_msg labels change with the value.
		g.xid = g.xidCode
		g.node.dirty = true
	}
	if g.lost {
		// The GPU fell off the bus: nothing runs, nothing is drawn.
		g.util, g.memCopy, g.grEngine, g.smActive, g.smOcc, g.tensor, g.dram = 0, 0, 0, 0, 0, 0, 0
		g.power, g.smClock, g.clock, g.fbUsed, g.pcieTx, g.pcieRx, g.nvlinkTx, g.nvlinkRx = 0, 0, 1, 0, 0, 0, 0, 0
		g.cool(0, dt)
		g.reasons = 0
		return
	}
	busy, pf, b := st.busy, st.prefillFrac, st.batch
	// SM activity: prefill is compute bound; decode fills the SMs only with
	// enough sequences in the batch. GPU_UTIL only says "a kernel ran", so it
	// stays high for a tiny batch (sources.md §3).
	smEff := 0.2 + 0.75*(1-math.Exp(-b/8))
	g.smActive = clamp01(g.jitter(busy*(pf*0.95+(1-pf)*smEff), 0.01*busy))
	g.smOcc = clamp01(g.jitter(busy*(0.04+0.3*b/(b+40)+0.1*pf), 0.005*busy))
	g.tensor = clamp01(g.smActive * (0.2 + 0.4*pf))
	g.dram = clamp01(g.jitter(busy*(0.25+0.6*b/(b+20)), 0.01*busy))
	g.grEngine = clamp01(g.jitter(busy*0.98, 0.005*busy))
	g.util = math.Round(100 * clamp01(busy*1.01))
	g.memCopy = math.Round(g.dram * 60)

	uncapped := idleWatts + 560*clamp01(0.25*busy+0.45*g.smActive+0.3*g.dram)
	g.reasons = 0
	powerFactor := 1.0
	g.power = g.jitter(uncapped, 2)
	if uncapped > g.powerLimit {
		// Power scales roughly with the square of the clock at this range.
		powerFactor = math.Sqrt(math.Max(g.powerLimit-idleWatts, 1) / (uncapped - idleWatts))
		g.power = g.powerLimit - math.Abs(g.jitter(0, 1.5))
		g.reasons += reasonSWPower
		g.powerViolation += dt * 1e9
	}
	g.cool(g.power, dt)
	thermalFactor := 1.0
	if g.temp > 85 {
		thermalFactor = math.Max(0.5, 1-(g.temp-85)*0.05)
		g.reasons += reasonSWThermal
		if g.temp > 90 {
			g.reasons += reasonHWThermal
		}
		g.thermalViolate += dt * 1e9
	}
	g.clock = math.Max(0.3, math.Min(powerFactor, thermalFactor))
	if busy < 0.01 {
		g.smClock = idleSMClock
		g.reasons += reasonGPUIdle
	} else {
		g.smClock = math.Round(maxSMClock * g.clock)
	}
	g.energy += g.power * dt * 1000
	if up {
		g.fbUsed = fbVLLMMiB
	} else {
		g.fbUsed = 0
	}
	// PCIe carries token ids and logits; NVLink carries tensor-parallel
	// all-reduces, so it is busy only for multi-GPU instances.
	g.pcieTx = math.Round(g.jitter(8e5+st.tokens/math.Max(dt, 1e-9)*2000, 5e4))
	g.pcieRx = math.Round(g.jitter(1e6+st.tokens/math.Max(dt, 1e-9)*4500, 5e4))
	g.pcieTx, g.pcieRx = math.Max(g.pcieTx, 0), math.Max(g.pcieRx, 0)
	if up && len(g.inst.gpus) > 1 {
		g.nvlinkTx = math.Round(busy * 2.5e10 * (0.3 + 0.7*b/(b+16)))
		g.nvlinkRx = g.nvlinkTx
		g.nvlinkCtr += (g.nvlinkTx + g.nvlinkRx) * dt / 1024
	} else {
		g.nvlinkTx, g.nvlinkRx = 0, 0
	}
}

// cool moves the temperatures towards their steady state for the power
// drawn, with a 40 s time constant; a thermal fault adds a fixed offset
// (failed fan or blocked airflow).
func (g *gpu) cool(power, dt float64) {
	target := ambientC + 0.06*power + g.tempOffset
	a := 1 - math.Exp(-dt/40)
	g.temp += a * (target - g.temp)
	g.memTemp += a * (target - 3 - g.memTemp)
}

func clamp01(v float64) float64 { return math.Max(0, math.Min(1, v)) }
