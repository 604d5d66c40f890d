package sim

import (
	"math"
	"math/rand/v2"
	"strconv"
)

// node is one host: its GPUs, its vLLM instances and the eBPF view of its
// network stack.
type node struct {
	c         *Cluster
	idx       int
	host      string
	ip        string
	rng       *rand.Rand
	gpus      []*gpu
	instances []*instance

	// Fault inputs, set every tick.
	delay         float64 // seconds added to network paths
	retransFactor float64
	gap           bool

	// eBPF state (ebpf_exporter has no restarts here; counters only grow).
	accept          *hist // ebpf_exporter_accept_latency_seconds{port="8000"}
	softirqWait     *hist // ebpf_exporter_softirq_wait_seconds
	softirqRaised   float64
	softirqServiced float64
	retransmits     [2]float64 // type="retransmit", "tail_loss_probe"
	dirty           bool       // pod labels changed: rebuild the DCGM target
}

// routerIP is the peer of every node's inbound inference traffic.
const routerIP = "10.0.0.2"

func newNode(c *Cluster, idx int, rng *rand.Rand) *node {
	return &node{
		c: c, idx: idx, host: hostName(idx), ip: "10.0.1." + strconv.Itoa(10+idx), rng: rng,
		retransFactor: 1,
		accept:        newHist(famShape(c.shapes.ebpf, "ebpf_exporter_accept_latency_seconds").Buckets),
		softirqWait:   newHist(famShape(c.shapes.ebpf, "ebpf_exporter_softirq_wait_seconds").Buckets),
	}
}

// update advances the eBPF histograms: accepts follow the node's request
// arrivals, and a network-delay fault shifts accept-queue and softirq
// latencies up and multiplies TCP retransmissions.
func (nd *node) update(dt float64) {
	arrivals, tokens := 0.0, 0.0
	for _, in := range nd.instances {
		arrivals += in.lastTick.arrivals
		tokens += in.lastTick.tokens
	}
	load := math.Min(1, tokens/(dt*float64(len(nd.gpus))*20000))
	acceptLat := 25e-6*(1+2*load) + nd.delay
	nd.accept.spread(acceptLat, arrivals, 0.4, 3.5)
	raised := dt * (2000 + 30000*load)
	nd.softirqRaised += raised
	nd.softirqServiced += raised
	wait := 3e-6*(1+3*load) + nd.delay/50
	nd.softirqWait.spread(wait, raised, 0.3, 5)
	base := 0.02 * dt * (1 + arrivals/math.Max(dt, 1e-9)/10) * nd.retransFactor
	nd.retransmits[0] += math.Max(0, base*(1+0.3*nd.rng.NormFloat64()))
	nd.retransmits[1] += math.Max(0, base*0.4*(1+0.3*nd.rng.NormFloat64()))
}

// markDirty asks for a node's targets to be rebuilt (pod labels changed).
func (c *Cluster) markDirty(nd *node) { nd.dirty = true }
