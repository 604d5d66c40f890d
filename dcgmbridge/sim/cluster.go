package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/strata-dev/strata/dcgmbridge"
)

// Cluster is a simulated inference cluster. All methods are safe for
// concurrent use: Step, rendering and emission serialise on one mutex, so a
// scrape never sees a half-advanced tick.
type Cluster struct {
	mu        sync.Mutex
	cfg       Config
	tick      float64 // seconds
	ticks     int64   // completed ticks; model time = Start + ticks*Tick
	nodes     []*node
	instances []*instance
	models    []modelTraffic
	faults    []*activeFault
	targets   []*target
	shapes    shapes
}

// shapes are the simulated exporters' family shapes (names, types, HELP,
// labels, buckets), from the metric catalogue: the simulator renders them,
// it does not define them.
type shapes struct {
	vllm       dcgmbridge.Exposition // V1's or V0's, per Config.VLLMVersion
	vllmV1     dcgmbridge.Exposition
	dcgm, ebpf dcgmbridge.Exposition
}

func newShapes(cfg Config) (shapes, error) {
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		return shapes{}, err
	}
	vllm := dcgmbridge.SourceVLLMV1
	if cfg.VLLMVersion == "v0" {
		vllm = dcgmbridge.SourceVLLMV0
	}
	var s shapes
	for _, x := range []struct {
		src dcgmbridge.Source
		dst *dcgmbridge.Exposition
	}{{vllm, &s.vllm}, {dcgmbridge.SourceVLLMV1, &s.vllmV1}, {dcgmbridge.SourceDCGM, &s.dcgm}, {dcgmbridge.SourceEBPF, &s.ebpf}} {
		e, ok := cat.Exposition(x.src)
		if !ok {
			return shapes{}, fmt.Errorf("the catalogue has no %s exposition", x.src)
		}
		*x.dst = e
	}
	return s, nil
}

// famShape returns the shape of the family name of e; an unknown name gives an
// empty shape, which New reports.
func famShape(e dcgmbridge.Exposition, name string) dcgmbridge.Family {
	f, _ := e.Family(name)
	return f
}

// modelTraffic is the shared demand process of one served model: instances of
// the model split it, so an instance that goes down pushes its share onto the
// others, as a load balancer would.
type modelTraffic struct {
	name      string
	rng       *rand.Rand
	noise     float64 // AR(1) log-noise
	instances []*instance
}

// New builds a cluster from cfg (defaults applied, then validated).
func New(cfg Config) (*Cluster, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("sim config: %w", err)
	}
	sh, err := newShapes(cfg)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	c := &Cluster{cfg: cfg, tick: cfg.Tick.Seconds(), shapes: sh}
	seedRNG := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	for mi, m := range cfg.Models {
		c.models = append(c.models, modelTraffic{name: m, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(1000+mi)))})
	}
	perNode := cfg.GPUsPerNode / cfg.GPUsPerInstance
	for n := range cfg.Nodes {
		nd := newNode(c, n, rand.New(rand.NewPCG(cfg.Seed, uint64(2000+n))))
		for g := range cfg.GPUsPerNode {
			nd.gpus = append(nd.gpus, newGPU(nd, g, seedRNG))
		}
		for k := range perNode {
			idx := len(c.instances)
			mi := idx % len(cfg.Models)
			in := newInstance(c, idx, nd, nd.gpus[k*cfg.GPUsPerInstance:(k+1)*cfg.GPUsPerInstance], mi,
				rand.New(rand.NewPCG(cfg.Seed, uint64(3000+idx))))
			in.pod = in.podName(0)
			for _, g := range in.gpus {
				g.inst = in
			}
			nd.instances = append(nd.instances, in)
			c.instances = append(c.instances, in)
			c.models[mi].instances = append(c.models[mi].instances, in)
		}
		c.nodes = append(c.nodes, nd)
	}
	for _, spec := range cfg.Faults {
		c.faults = append(c.faults, c.resolveFault(spec))
	}
	c.namePods()
	c.buildTargets()
	for _, t := range c.targets {
		for _, f := range t.families {
			if f.name == "" || f.typ == "" {
				return nil, fmt.Errorf("sim: a family of %s is missing from the catalogue's exposition", t.path)
			}
		}
	}
	return c, nil
}

// Config returns the effective (defaulted) configuration.
func (c *Cluster) Config() Config { return c.cfg }

// Now returns the model time: Start plus the completed ticks.
func (c *Cluster) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now()
}

func (c *Cluster) now() time.Time {
	return c.cfg.Start.Add(time.Duration(c.ticks) * c.cfg.Tick)
}

// Step advances the model to t in whole ticks aligned to Config.Start (the
// last tick ending at or before t). A t at or before the model time is a
// no-op, so stepping is idempotent and Step(a); Step(b) equals Step(b).
func (c *Cluster) Step(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stepTo(t)
}

func (c *Cluster) stepTo(t time.Time) {
	target := int64(t.Sub(c.cfg.Start) / c.cfg.Tick)
	for c.ticks < target {
		c.advance()
	}
}

// advance runs one tick: faults, demand, instances, then the GPUs and nodes
// whose metrics the instances' load drives.
func (c *Cluster) advance() {
	t0 := float64(c.ticks) * c.tick
	dt := c.tick
	c.applyFaults(t0)
	pattern := c.pattern(t0)
	for mi := range c.models {
		m := &c.models[mi]
		// Log-AR(1) noise with a time constant of ~30 minutes and a
		// stationary spread of ~6%, whatever the tick.
		a := math.Exp(-dt / 1800)
		m.noise = a*m.noise + math.Sqrt(1-a*a)*0.06*m.rng.NormFloat64()
		alive := 0
		for _, in := range m.instances {
			if !in.down {
				alive++
			}
		}
		if alive == 0 {
			continue
		}
		rate := c.cfg.PeakRequestRate * pattern * math.Exp(m.noise) * float64(len(m.instances)) / float64(alive)
		for _, in := range m.instances {
			in.step(t0, dt, rate)
		}
	}
	for _, nd := range c.nodes {
		for _, g := range nd.gpus {
			g.update(dt)
		}
		nd.update(dt)
	}
	c.ticks++
}

// pattern is the deterministic traffic shape at model second t: a diurnal
// cosine with its trough at 04:00 UTC (0.45 of peak) and peak at 16:00, and
// weekends at 70% of weekdays.
func (c *Cluster) pattern(t float64) float64 {
	abs := c.cfg.Start.Add(time.Duration(t * float64(time.Second))).UTC()
	hour := float64(abs.Hour()) + float64(abs.Minute())/60 + float64(abs.Second())/3600
	daily := 0.45 + 0.55*(0.5-0.5*math.Cos(2*math.Pi*(hour-4)/24))
	if wd := abs.Weekday(); wd == time.Saturday || wd == time.Sunday {
		daily *= 0.7
	}
	return daily
}

// resolveFault turns a spec into a ground-truth record bound to the topology.
func (c *Cluster) resolveFault(spec FaultSpec) *activeFault {
	info := kinds()[spec.Kind]
	params := map[string]float64{}
	for k, v := range info.params {
		params[k] = v
	}
	for k, v := range spec.Params {
		params[k] = v
	}
	start := spec.Start
	if start.IsZero() {
		start = c.cfg.Start.Add(spec.At)
	}
	dur := spec.Duration
	if dur == 0 {
		dur = defaultDeployDowntime
	}
	a := &activeFault{
		Fault: Fault{Kind: spec.Kind, Decoy: info.decoy, Start: start.UTC(), End: start.Add(dur).UTC(), Params: params, RootMetric: info.rootMetric},
		info:  info,
		start: start.Sub(c.cfg.Start).Seconds(),
		end:   start.Add(dur).Sub(c.cfg.Start).Seconds(),
		node:  spec.Node,
		gpu:   -1,
	}
	nd := c.nodes[spec.Node]
	a.Target.Node = nd.host
	if spec.GPU != nil {
		g := *spec.GPU
		a.gpu = g
		a.Target.GPU = &g
		a.Target.UUID = nd.gpus[g].uuid
		a.inst = nd.gpus[g].inst
	}
	if a.inst != nil && info.scope != scopeGPU {
		a.Target.Instance = a.inst.addr
		a.Target.Namespace = namespace
		a.Target.Model = a.inst.model
	}
	return a
}

// namePods fills each instance-scoped record's pod: the pod serving at the
// fault's onset, counting the deploys before it (a deploy names the pod it
// replaces).
func (c *Cluster) namePods() {
	for _, a := range c.faults {
		if a.Target.Instance == "" {
			continue
		}
		gen := 0
		for _, d := range c.faults {
			if d.Kind == KindDeploy && d.inst == a.inst && (d.start < a.start || (d.start == a.start && d != a && a.Kind != KindDeploy)) {
				gen++
			}
		}
		a.Target.Pod = a.inst.podName(gen)
	}
}

// GroundTruth returns one record per configured fault and decoy, in onset
// order. The records are copies.
func (c *Cluster) GroundTruth() []Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Fault, 0, len(c.faults))
	for _, a := range c.faults {
		f := a.Fault
		f.Params = make(map[string]float64, len(a.Params))
		for k, v := range a.Params {
			f.Params[k] = v
		}
		out = append(out, f)
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].Start.Before(out[j-1].Start); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// applyFaults sets every entity's effects for the tick starting at t0.
func (c *Cluster) applyFaults(t0 float64) {
	for _, in := range c.instances {
		in.eff = defaultEffects()
		in.gap = false
	}
	for _, nd := range c.nodes {
		nd.delay, nd.retransFactor, nd.gap = 0, 1, false
		for _, g := range nd.gpus {
			g.powerLimit, g.tempOffset, g.lost, g.xidCode = c.cfg.PowerLimitWatts, 0, false, 0
		}
	}
	for _, a := range c.faults {
		active := t0 >= a.start && t0 < a.end
		in := a.inst
		switch a.Kind {
		case KindDeploy:
			if t0 >= a.start {
				if !a.started {
					a.started = true
					in.podGen++
					in.pod = in.podName(in.podGen)
					c.markDirty(in.node)
				}
				in.eff.itlScale *= a.param("itl_scale")
				in.eff.outputScale *= a.param("output_scale")
			}
			if active {
				in.eff.down = true
			}
			continue
		}
		if !active {
			continue
		}
		switch a.Kind {
		case KindKVCacheStorm:
			in.eff.promptScale *= a.param("prompt_scale")
			in.eff.outputScale *= a.param("output_scale")
			in.eff.arrivalScale *= a.param("arrival_scale")
		case KindQueueBacklog:
			in.eff.arrivalScale *= a.param("load_factor")
		case KindUnderBatched:
			in.eff.maxNumSeqs = int(a.param("max_num_seqs"))
			in.eff.arrivalScale *= a.param("load_factor")
		case KindSpecDecodeDrift:
			in.eff.acceptance = a.param("acceptance_rate")
		case KindPrefixCacheDrop:
			in.eff.prefixHit = a.param("hit_rate")
		case KindBenignSpike:
			in.eff.arrivalScale *= a.param("arrival_scale")
		case KindIdleReplica:
			in.eff.arrivalScale = 0
		case KindPowerCap:
			c.nodes[a.node].gpus[a.gpu].powerLimit = a.param("limit_watts")
		case KindThermalThrottle:
			c.nodes[a.node].gpus[a.gpu].tempOffset = a.param("temp_offset_c")
		case KindXIDGPULost:
			g := c.nodes[a.node].gpus[a.gpu]
			g.lost = true
			g.xidCode = a.param("xid")
		case KindNetworkDelay:
			nd := c.nodes[a.node]
			nd.delay += a.param("delay_ms") / 1000
			nd.retransFactor *= a.param("retransmit_factor")
		case KindScrapeGap:
			if in != nil {
				in.gap = true
			} else {
				c.nodes[a.node].gap = true
			}
		}
	}
	for _, in := range c.instances {
		down := in.eff.down
		for _, g := range in.gpus {
			if g.lost {
				down = true
			}
		}
		if in.down && !down {
			in.restart()
		}
		if down && !in.down {
			in.shutdown()
		}
		in.down = down
	}
}

// namespace is the Kubernetes namespace of every simulated vLLM pod.
const namespace = "inference"

// podName returns the instance's pod name after gen deploys. It depends only
// on the seed, the instance and gen, so the ground truth can name the pod a
// fault will hit before the model runs.
func (in *instance) podName(gen int) string {
	return podName(in.model, rand.New(rand.NewPCG(in.c.cfg.Seed^0x9d, uint64(in.idx)<<16|uint64(gen))))
}

// podName returns a Deployment-style pod name for a model, for example
// vllm-llama-3-1-8b-instruct-6d9f7c5b8-x2kqp.
func podName(model string, rng *rand.Rand) string {
	const hexdig = "0123456789abcdef"
	const alnum = "bcdfghjklmnpqrstvwxz2456789"
	slug := model
	if i := strings.LastIndexByte(slug, '/'); i >= 0 {
		slug = slug[i+1:]
	}
	var b strings.Builder
	b.WriteString("vllm-")
	dash := false
	for _, r := range strings.ToLower(slug) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	b.WriteByte('-')
	for range 9 {
		b.WriteByte(hexdig[rng.IntN(len(hexdig))])
	}
	b.WriteByte('-')
	for range 5 {
		b.WriteByte(alnum[rng.IntN(len(alnum))])
	}
	return b.String()
}

func hostName(n int) string { return "gpu-node-" + strconv.Itoa(n) }

// poisson draws a Poisson variate: Knuth's product method for small means,
// a rounded normal approximation above 30 (the error there is far below the
// model's own noise).
func poisson(rng *rand.Rand, mean float64) int {
	if mean <= 0 {
		return 0
	}
	if mean < 30 {
		l := math.Exp(-mean)
		k, p := 0, 1.0
		for {
			p *= rng.Float64()
			if p <= l {
				return k
			}
			k++
		}
	}
	v := math.Round(mean + math.Sqrt(mean)*rng.NormFloat64())
	if v < 0 {
		return 0
	}
	return int(v)
}

// lognormal draws a log-normal variate with log-space mean mu and standard
// deviation sigma; logMean converts a linear mean to mu.
func lognormal(rng *rand.Rand, mu, sigma float64) float64 {
	return math.Exp(mu + sigma*rng.NormFloat64())
}

func logMean(mean, sigma float64) float64 { return math.Log(mean) - sigma*sigma/2 }
