package sim

import (
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/strata-dev/strata/dcgmbridge"
)

// effects are the fault-driven modifiers of one instance for one tick; the
// neutral value leaves the baseline model unchanged.
type effects struct {
	arrivalScale float64
	promptScale  float64
	outputScale  float64
	itlScale     float64
	maxNumSeqs   int     // 0: Config.MaxNumSeqs
	acceptance   float64 // <0: Config.AcceptanceRate
	prefixHit    float64 // <0: Config.PrefixHitRate
	down         bool
}

func defaultEffects() effects {
	return effects{arrivalScale: 1, promptScale: 1, outputScale: 1, itlScale: 1, acceptance: -1, prefixHit: -1}
}

// request is one in-flight request. Times are model seconds since
// Config.Start; a negative time means "not yet".
type request struct {
	arrival, admitted, firstToken float64
	prompt                        float64 // prompt tokens
	cached                        float64 // prefix-cache hit tokens
	prefillLeft                   float64 // tokens still to prefill (recompute after preemption)
	target                        float64 // output tokens the request will produce
	generated                     float64
	maxTokens                     float64
	blocks                        int
	capped                        bool // stopped by max_tokens: finished_reason="length"
}

// vllmState is everything a restart of vLLM resets: counters, histograms and
// the derived gauges.
type vllmState struct {
	promptTokens, genTokens         float64
	prefixQueries, prefixHits       float64
	preemptions                     float64
	success                         [3]float64 // stop, length, abort
	drafts, draftTokens, accepted   float64
	acceptedPerPos                  []float64
	ttft, itl, reqTPOT, e2e, queue  *hist
	inference, prefill, decode      *hist
	promptHist, genHist, maxGenHist *hist
	paramsN, paramsMaxTokens        *hist
	iterTokens                      *hist
	// V0 gauges: exponentially weighted 5 s averages.
	promptTPS, genTPS, acceptRate, efficiency float64
}

// instance is one vLLM server (one engine) on one or more GPUs.
type instance struct {
	c        *Cluster
	idx      int
	node     *node
	gpus     []*gpu
	model    string
	port     int
	addr     string
	pod      string
	podGen   int // deploys so far
	rng      *rand.Rand
	eff      effects
	down     bool
	gap      bool
	waiting  deque
	running  []*request
	pool     []*request
	used     int // KV blocks held by running requests
	s        vllmState
	lastTick tickStats
	// log-space means of the request size distributions
	promptMu, outputMu float64
	// alpha is the per-position acceptance for the overall rate alphaFor
	// at draft length alphaK (cached: solving it costs a bisection).
	alpha, alphaFor float64
	alphaK          int
}

// positionAcceptance returns the per-position acceptance probability a such
// that (a + a^2 + ... + a^k)/k = rate: rate is what vLLM's counters give
// (accepted/draft tokens), while each position is accepted only if the ones
// before it were. For rate 0.62 and k 3 it gives 0.78, and the per-position
// counters then fall 0.78, 0.61, 0.47 like the fixture's.
func positionAcceptance(rate float64, k int) float64 {
	if k <= 0 || rate <= 0 {
		return 0
	}
	if rate >= 1 {
		return 1
	}
	lo, hi := 0.0, 1.0
	for range 60 {
		a := (lo + hi) / 2
		sum, p := 0.0, 1.0
		for range k {
			p *= a
			sum += p
		}
		if sum/float64(k) < rate {
			lo = a
		} else {
			hi = a
		}
	}
	return (lo + hi) / 2
}

// tickStats is what the GPUs read from their instance after a tick.
type tickStats struct {
	busy        float64 // fraction of the tick the engine ran kernels
	prefillFrac float64 // fraction of busy time spent in prefill
	batch       float64 // decoding sequences
	tokens      float64 // prompt + generated tokens this tick
	arrivals    float64
}

func newInstance(c *Cluster, idx int, nd *node, gpus []*gpu, model int, rng *rand.Rand) *instance {
	port := 8000 + len(nd.instances)
	in := &instance{c: c, idx: idx, node: nd, gpus: gpus, model: c.cfg.Models[model], port: port,
		addr: nd.host + ":" + strconv.Itoa(port), rng: rng}
	in.s = newVLLMState(c)
	in.promptMu = logMean(c.cfg.MeanPromptTokens, promptSigma)
	in.outputMu = logMean(c.cfg.MeanOutputTokens, outputSigma)
	in.alphaFor = -1
	return in
}

// Log-space spreads of the request size distributions: prompts vary more
// than outputs (RAG and chat histories against short answers).
const (
	promptSigma = 0.8
	outputSigma = 0.7
)

// maxModelLen is the served context length. It caps prompt lengths; the
// catalogue's vLLM token buckets (dcgmbridge.VLLMTokenBuckets) are vLLM's for
// the same length.
const maxModelLen = 32768

// newVLLMState returns a fresh engine's state, its histograms with the
// buckets of the vLLM exposition's families. V0 has only the TTFT, TPOT and
// e2e histograms; the others are kept (with V1's buckets) but not exposed.
func newVLLMState(c *Cluster) vllmState {
	cfg := &c.cfg
	v1, v0 := c.shapes.vllm, c.shapes.vllm
	if cfg.VLLMVersion == "v0" {
		// The histograms V0 does not expose still need buckets.
		v1 = c.shapes.vllmV1
	}
	h := func(e dcgmbridge.Exposition, name string) *hist { return newHist(famShape(e, name).Buckets) }
	s := vllmState{
		reqTPOT: h(v1, "vllm:request_time_per_output_token_seconds"), queue: h(v1, "vllm:request_queue_time_seconds"),
		inference: h(v1, "vllm:request_inference_time_seconds"), prefill: h(v1, "vllm:request_prefill_time_seconds"),
		decode: h(v1, "vllm:request_decode_time_seconds"), promptHist: h(v1, "vllm:request_prompt_tokens"),
		genHist: h(v1, "vllm:request_generation_tokens"),
		paramsN: h(v1, "vllm:request_params_n"), paramsMaxTokens: h(v1, "vllm:request_params_max_tokens"),
		iterTokens: h(v1, "vllm:iteration_tokens_total"),
	}
	// Every request here gets exactly its max generation length's worth of
	// budget, so the two histograms are the same observations.
	s.maxGenHist = s.genHist
	if cfg.VLLMVersion == "v0" {
		s.ttft, s.itl, s.e2e = h(v0, "vllm:time_to_first_token_seconds"), h(v0, "vllm:time_per_output_token_seconds"), h(v0, "vllm:e2e_request_latency_seconds")
	} else {
		s.ttft, s.itl, s.e2e = h(v1, "vllm:time_to_first_token_seconds"), h(v1, "vllm:inter_token_latency_seconds"), h(v1, "vllm:e2e_request_latency_seconds")
	}
	if cfg.SpeculativeTokens > 0 {
		s.acceptedPerPos = make([]float64, cfg.SpeculativeTokens)
	}
	return s
}

// shutdown drops all in-flight work: the process is gone.
func (in *instance) shutdown() {
	for in.waiting.len() > 0 {
		in.free(in.waiting.popFront())
	}
	for _, r := range in.running {
		in.free(r)
	}
	in.running = in.running[:0]
	in.used = 0
	in.lastTick = tickStats{}
}

// restart brings a fresh vLLM process up: every counter starts from zero, as
// a real restart does, so consumers see a counter reset.
func (in *instance) restart() {
	in.shutdown()
	in.s = newVLLMState(in.c)
}

func (in *instance) alloc() *request {
	if n := len(in.pool); n > 0 {
		r := in.pool[n-1]
		in.pool = in.pool[:n-1]
		*r = request{}
		return r
	}
	return &request{}
}

func (in *instance) free(r *request) { in.pool = append(in.pool, r) }

func (in *instance) clock() float64 {
	f := 1.0
	for _, g := range in.gpus {
		f = math.Min(f, g.clock)
	}
	return f
}

func (in *instance) maxNumSeqs() int {
	if in.eff.maxNumSeqs > 0 {
		return in.eff.maxNumSeqs
	}
	return in.c.cfg.MaxNumSeqs
}

// blocksFor is the number of KV blocks r holds with its current tokens. Half
// of a request's prefix-cache hits are assumed shared with other running
// requests (vLLM reference-counts shared blocks).
func (in *instance) blocksFor(r *request) int {
	tokens := r.prompt - r.cached/2 + r.generated
	return int(math.Ceil(tokens / float64(in.c.cfg.BlockSize)))
}

func (in *instance) newRequest(arrival float64) *request {
	r := in.alloc()
	r.arrival, r.admitted, r.firstToken = arrival, -1, -1
	pmu, omu := in.promptMu, in.outputMu
	if in.eff.promptScale != 1 {
		pmu += math.Log(in.eff.promptScale)
	}
	if in.eff.outputScale != 1 {
		omu += math.Log(in.eff.outputScale)
	}
	r.prompt = math.Max(1, math.Round(math.Min(lognormal(in.rng, pmu, promptSigma), maxModelLen/2)))
	// The mix of max_tokens parameters clients send (cumulative p).
	choices := [...]struct{ p, v float64 }{{0.2, 128}, {0.6, 512}, {0.9, 1024}, {1, 2048}}
	u := in.rng.Float64()
	for _, c := range choices {
		if u <= c.p {
			r.maxTokens = c.v
			break
		}
	}
	r.maxTokens *= in.eff.outputScale
	out := math.Max(1, math.Round(lognormal(in.rng, omu, outputSigma)))
	if out >= r.maxTokens {
		out, r.capped = r.maxTokens, true
	}
	r.target = out
	return r
}

// step advances the instance by dt seconds from t0 with a mean arrival rate
// (requests per second) before fault effects.
func (in *instance) step(t0, dt, rate float64) {
	if in.down {
		return
	}
	cfg := &in.c.cfg
	s := &in.s
	n := poisson(in.rng, rate*in.eff.arrivalScale*dt)
	for range n {
		in.waiting.pushBack(in.newRequest(t0 + dt*in.rng.Float64()))
	}
	stats := tickStats{arrivals: float64(n)}

	// Clients give up after RequestTimeout; vLLM counts them as aborted.
	deadline := t0 - cfg.RequestTimeout.Seconds()
	for in.waiting.len() > 0 && in.waiting.front().arrival < deadline {
		in.free(in.waiting.popFront())
		s.success[2]++
	}

	clock := in.clock()
	ngpu := float64(len(in.gpus))
	prefillRate := cfg.PrefillTokensPerSecond * ngpu * clock
	// Chunked prefill shares each iteration with decode; prefill never takes
	// more than 85% of the GPU time.
	budget := prefillRate * dt * 0.85
	usedPrefill := 0.0
	hitRate := cfg.PrefixHitRate
	if in.eff.prefixHit >= 0 {
		hitRate = in.eff.prefixHit
	}

	prefillOne := func(r *request) {
		take := math.Min(r.prefillLeft, budget-usedPrefill)
		if take <= 0 {
			return
		}
		usedPrefill += take
		r.prefillLeft -= take
		if r.prefillLeft > 1e-9 {
			return
		}
		r.prefillLeft = 0
		if r.firstToken < 0 {
			r.firstToken = math.Max(t0+usedPrefill/prefillRate, r.admitted+take/prefillRate)
			r.generated = 1
			s.genTokens++
			s.ttft.observe(r.firstToken-r.arrival, 1)
		}
	}
	for _, r := range in.running {
		if r.prefillLeft > 0 {
			prefillOne(r)
		}
	}

	// Admission: FIFO, bounded by max_num_seqs and by free KV blocks (with
	// vLLM's 1% watermark).
	total := cfg.NumGPUBlocks
	watermark := total / 100
	maxSeqs := in.maxNumSeqs()
	for in.waiting.len() > 0 && len(in.running) < maxSeqs {
		r := in.waiting.front()
		first := r.admitted < 0
		if first {
			r.cached = math.Round(r.prompt * math.Min(0.98, hitRate*(0.6+0.8*in.rng.Float64())))
		}
		need := in.blocksFor(r)
		if in.used+need > total-watermark {
			break
		}
		in.waiting.popFront()
		if first {
			r.admitted = math.Max(r.arrival, t0+usedPrefill/prefillRate)
			r.prefillLeft = r.prompt - r.cached
			s.promptTokens += r.prompt
			s.prefixQueries += r.prompt
			s.prefixHits += r.cached
			s.queue.observe(r.admitted-r.arrival, 1)
		} else {
			// Recompute after preemption: the prompt's cached part is
			// still in the prefix cache, the rest is prefilled again.
			r.prefillLeft = r.prompt - r.cached + r.generated
		}
		r.blocks = need
		in.used += need
		in.running = append(in.running, r)
		prefillOne(r)
	}

	prefillTime := usedPrefill / prefillRate
	decodeTime := dt - prefillTime
	stats.tokens = usedPrefill
	batch := 0
	for _, r := range in.running {
		if r.prefillLeft == 0 {
			batch++
		}
	}
	stats.batch = float64(batch)
	busy := prefillTime
	if batch > 0 {
		busy = dt
		in.decode(t0, prefillTime, decodeTime, batch, &stats)
	}
	stats.busy = busy / dt
	if busy > 0 {
		stats.prefillFrac = prefillTime / busy
	}
	in.growKV()
	in.lastTick = stats

	// V0's throughput and acceptance gauges are 5 s moving averages.
	a := 1 - math.Exp(-dt/5)
	s.promptTPS += a * (usedPrefill/dt - s.promptTPS)
	s.genTPS += a * ((stats.tokens-usedPrefill)/dt - s.genTPS)
}

// decode runs the tick's decode iterations for the batch of sequences that
// finished prefill, completing the requests that reach their length.
func (in *instance) decode(t0, prefillTime, decodeTime float64, batch int, stats *tickStats) {
	cfg := &in.c.cfg
	s := &in.s
	k := max(cfg.SpeculativeTokens, 0)
	rate := cfg.AcceptanceRate
	if in.eff.acceptance >= 0 {
		rate = in.eff.acceptance
	}
	if rate != in.alphaFor || k != in.alphaK {
		in.alpha, in.alphaFor, in.alphaK = positionAcceptance(rate, k), rate, k
	}
	alpha := in.alpha
	// With k draft tokens accepted position by position with probability
	// alpha, an iteration emits 1 + sum(alpha^i) tokens per sequence and
	// costs 10% more per draft token.
	expAccepted, cost := 0.0, 1.0
	p := 1.0
	for range k {
		p *= alpha
		expAccepted += p
	}
	if k > 0 {
		cost += 0.1 * float64(k)
	}
	b := float64(batch)
	ngpu := float64(len(in.gpus))
	tau := (cfg.DecodeStepSeconds + cfg.DecodeStepPerSeqSeconds*b/math.Sqrt(ngpu)) * cost * in.eff.itlScale / in.clock()
	iters := decodeTime / tau
	perSeq := iters * (1 + expAccepted)
	tokenLatency := tau / (1 + expAccepted)

	produced := 0.0
	j := 0
	for _, r := range in.running {
		if r.prefillLeft > 0 {
			in.running[j] = r
			j++
			continue
		}
		remaining := r.target - r.generated
		if remaining > perSeq {
			r.generated += perSeq
			produced += perSeq
			in.running[j] = r
			j++
			continue
		}
		produced += remaining
		r.generated = r.target
		finish := math.Max(t0+prefillTime+decodeTime*remaining/perSeq, r.firstToken+remaining*tokenLatency)
		in.finish(r, finish)
	}
	clear(in.running[j:])
	in.running = in.running[:j]

	s.genTokens += produced
	stats.tokens += produced
	s.itl.spread(tokenLatency, produced, 0.6, 1.8)
	s.iterTokens.observe(b*(1+expAccepted)+stats.tokens/math.Max(iters, 1), iters)
	if k > 0 {
		drafts := iters * b
		s.drafts += drafts
		s.draftTokens += drafts * float64(k)
		s.accepted += drafts * expAccepted
		p := 1.0
		for i := range k {
			p *= alpha
			s.acceptedPerPos[i] += drafts * p
		}
		a := 1 - math.Exp(-in.c.tick/5)
		s.acceptRate += a * (expAccepted/float64(k) - s.acceptRate)
		s.efficiency += a * ((1+expAccepted)/float64(k+1) - s.efficiency)
	}
}

func (in *instance) finish(r *request, at float64) {
	s := &in.s
	in.used -= r.blocks
	s.e2e.observe(at-r.arrival, 1)
	s.inference.observe(at-r.admitted, 1)
	s.prefill.observe(r.firstToken-r.admitted, 1)
	s.decode.observe(at-r.firstToken, 1)
	if r.generated > 1 {
		s.reqTPOT.observe((at-r.firstToken)/(r.generated-1), 1)
	}
	s.promptHist.observe(r.prompt, 1)
	s.genHist.observe(r.generated, 1)
	s.paramsN.observe(1, 1)
	s.paramsMaxTokens.observe(r.maxTokens, 1)
	if r.capped {
		s.success[1]++
	} else {
		s.success[0]++
	}
	in.free(r)
}

// growKV recounts the blocks the running requests hold after decoding and,
// when the cache is over capacity, preempts the newest requests (vLLM V1's
// recompute preemption) until it fits.
func (in *instance) growKV() {
	used := 0
	for _, r := range in.running {
		r.blocks = in.blocksFor(r)
		used += r.blocks
	}
	in.used = used
	total := in.c.cfg.NumGPUBlocks
	for in.used > total && len(in.running) > 0 {
		r := in.running[len(in.running)-1]
		in.running[len(in.running)-1] = nil
		in.running = in.running[:len(in.running)-1]
		in.used -= r.blocks
		r.blocks = 0
		in.s.preemptions++
		in.waiting.pushFront(r)
	}
}

// kvUsage is vLLM's kv_cache_usage_perc: the fraction of blocks in use.
func (in *instance) kvUsage() float64 {
	return float64(in.used) / float64(in.c.cfg.NumGPUBlocks)
}

// deque is a ring buffer of requests: FIFO admission, with preempted
// requests going back to the front.
type deque struct {
	buf  []*request
	head int
	n    int
}

func (d *deque) len() int { return d.n }

func (d *deque) grow() {
	nb := make([]*request, max(16, 2*len(d.buf)))
	for i := range d.n {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(r *request) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.n)%len(d.buf)] = r
	d.n++
}

func (d *deque) pushFront(r *request) {
	if d.n == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = r
	d.n++
}

func (d *deque) front() *request { return d.buf[d.head] }

func (d *deque) popFront() *request {
	r := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.n--
	return r
}
