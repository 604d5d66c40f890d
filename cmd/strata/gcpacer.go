package main

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// The garbage collector's heap goal is GOGC percent above the heap its last
// collection marked live. A collection that runs while a burst is live (the
// diagnosis engine's minute snapshot, a canonical rule's query in flight)
// marks the burst too, and the goal it sets lets the heap grow by half of
// the burst more than the steady heap needs; whatever allocates next fills
// it, and that sets the peak RSS (docs/rollups.md, "Memory"). The heap pacer
// caps the goal where the steady live heap puts it: it sets the runtime's
// soft memory limit to a headroom above the lowest live heap of the last
// few collections, plus the runtime's memory outside the heap. The headroom
// (--runtime.heap-pacer.headroom) may be below GOGC's: a paced fleet
// leaves the process CPU to spare, and a collection more often buys a
// heap that stays closer to the live one. Where GOGC alone would collect
// more often than heapPacerMinInterval (heavy ingest), the pacer steps
// aside and the goal is GOGC's.

// defaultPacerHeadroom is --runtime.heap-pacer.headroom's default. On a
// paced 50,000-series fleet 0.35 took the peak RSS 26-34 MiB below GOGC
// 50's headroom for 8-9 % more CPU; 0.25 cost twice that and left the peak
// where it was, which the bursts set through the latest live heap's floor
// (docs/bench.md, issue 13, s12-pacer).
const defaultPacerHeadroom = 0.35

// defaultPacerInterval is --runtime.heap-pacer.interval's default: memory
// before CPU where collections at the configured headroom would come more
// than 3 s apart (a large paced fleet; effectiveHeadroom), as Prometheus
// chooses with its GOGC of 75 (config.DefaultGoGCPercentage).
const defaultPacerInterval = 3 * time.Second

// defaultPacerRise is --runtime.heap-pacer.rise's default: the time
// constant with which a rise of the allocation rate reaches the pacer's
// decisions. A partition's write and the diagnosis engine's work around it
// allocate several times the steady rate for a few minutes; read at once,
// that rate raised the paced headroom (and could switch the pacer off)
// just when the live heap was largest, and the heap filled the extra
// headroom (50,000 paced series: 0.2 to 0.33 at the first partition's
// write, which set the peak). Read through this time constant, such a
// burst is collected more often instead (at most twice the configured
// headroom's collections: the headroom never goes below half of it); a
// lasting rise is followed within a few time constants, and a fall at
// once. Beside 0 at 50,000 series: peak RSS 321.9 against 331.7 MiB for
// 3 % more CPU, in a run that ended during both writes; at 500,000
// series of 15 s no difference, the headroom sitting at its floor there
// (docs/bench.md, stop 50).
const defaultPacerRise = 10 * time.Minute

// heapPacerWindow is how many collections the baseline is the minimum of.
// A burst lasts a few collections; a lasting rise of the live heap (a new
// fleet) raises the baseline once this many collections have seen it: in a
// paced run a collection comes every 2-7 s, so within two minutes.
const heapPacerWindow = 16

// heapPacerMinInterval is the pacer's CPU budget: it caps the goal only
// while GOGC alone would give collections at most one per this interval,
// that is while the heap allocated over the window's time, spread over
// GOGC's headroom above its mean live heap, takes this long to fill. Under
// heavy ingest the collector already runs every second or so, the live
// heap swings by a fifth with the requests in flight, and a cap on it
// doubled the collections (docs/bench.md, issue 13, s11-gc); there the
// goal is GOGC's. The decision reads the allocation rate, not how often
// the collections came: a limit below GOGC's goal makes them come more
// often by its own doing, and a decision on their pace would switch the
// pacer off for what it did itself.
const heapPacerMinInterval = 3 * time.Second

// heapPacerMargin is the share added above the baseline's goal: the runtime
// aims 3% below the limit.
const heapPacerMargin = 0.05

// heapPacerMinHeadroomDiv bounds how often the limit can make the collector
// run: the limit always leaves the latest live heap at least half of the
// pacer's headroom, so a live heap that grows faster than the baseline
// follows costs at most about twice the collections, never a death spiral
// (and Go's limiter caps the collector at half the CPU anyway).
const heapPacerMinHeadroomDiv = 2

// heapPacerPeriod is how often the pacer reads the runtime's metrics.
const heapPacerPeriod = time.Second

// heapPacerRecord is what the pacer read after a collection.
type heapPacerRecord struct {
	at     time.Time
	cycles uint64 // the runtime's count of completed collections
	live   uint64
	allocs uint64 // bytes allocated since the process started
}

// heapPacer computes the soft memory limit from the live heaps the
// collections found. It is not safe for concurrent use.
type heapPacer struct {
	gcPercent int     // GOGC in force
	headroom  float64 // the paced goal's share above the baseline, at most GOGC's
	ceiling   int64   // the configured soft limit, math.MaxInt64 for none
	// interval is the collection interval the headroom holds at
	// (effectiveHeadroom); 0: the headroom at any interval
	interval time.Duration
	// rise is the time constant with which the allocation rate the
	// decisions read follows a rise of the window's (0: at once).
	rise   time.Duration
	rate   float64   // the allocation rate the decisions read, bytes a second
	rateAt time.Time // when rate was last updated (zero: never)
	recs   [heapPacerWindow]heapPacerRecord
	n      int     // collections recorded, up to heapPacerWindow
	next   int     // where the next one goes in recs
	paced  float64 // the headroom of the latest paced limit (effectiveHeadroom), 0 when not pacing
	// held, when set, steps the pacer aside while it returns true (the
	// server is queried: queriedRecently).
	held func(time.Time) bool
}

// heapReading is what the pacer reads from the runtime once a period.
type heapReading struct {
	cycles  uint64 // completed collections
	live    uint64 // the live heap the latest collection marked
	allocs  uint64 // bytes allocated since the process started
	nonHeap uint64 // memory besides the heap's objects, as the limit counts it
}

// observe records the live heap if a collection ran since the last call and
// returns the limit to set and the baseline it came from. r.nonHeap is the
// runtime's memory besides the heap's objects (stacks, metadata, buffers,
// the unused bytes of the heap's spans), which the soft limit also counts.
// The limit is the ceiling until heapPacerWindow collections are recorded,
// while GOGC alone would collect more often than heapPacerMinInterval, and
// while p.held says so.
func (p *heapPacer) observe(now time.Time, r heapReading) (limit int64, baseline uint64) {
	latest := p.recs[(p.next+heapPacerWindow-1)%heapPacerWindow]
	if r.live > 0 && (p.n == 0 || r.cycles != latest.cycles) {
		latest = heapPacerRecord{at: now, cycles: r.cycles, live: r.live, allocs: r.allocs}
		p.recs[p.next] = latest
		p.next = (p.next + 1) % heapPacerWindow
		p.n = min(p.n+1, heapPacerWindow)
		if p.n == heapPacerWindow {
			p.followRate(now)
		}
	}
	if p.n == 0 {
		return p.ceiling, 0
	}
	baseline = math.MaxUint64
	for _, rec := range p.recs[:p.n] {
		baseline = min(baseline, rec.live)
	}
	p.paced = 0
	if p.n < heapPacerWindow || !p.gogcCollectsSlowly() || p.held != nil && p.held(now) {
		return p.ceiling, baseline
	}
	h := p.effectiveHeadroom(baseline)
	p.paced = h
	heap := max(float64(baseline)*(1+h)*(1+heapPacerMargin), float64(latest.live)*(1+h/heapPacerMinHeadroomDiv))
	l := heap + float64(r.nonHeap)
	if l >= float64(p.ceiling) {
		return p.ceiling, baseline
	}
	// Rounded up to a MiB, so that the runtime's memory outside the heap
	// moving by a few KiB does not reset the limit every period.
	return (int64(l)>>20 + 1) << 20, baseline
}

// followRate updates p.rate from the window's allocation rate, once a new
// collection is recorded in a full window: a fall at once, a rise through
// the time constant p.rise (at once when it is 0 or nothing was read yet).
func (p *heapPacer) followRate(now time.Time) {
	oldest := p.recs[p.next]
	latest := p.recs[(p.next+heapPacerWindow-1)%heapPacerWindow]
	secs := latest.at.Sub(oldest.at).Seconds()
	if secs <= 0 {
		return
	}
	window := float64(latest.allocs-oldest.allocs) / secs
	if p.rateAt.IsZero() || window <= p.rate || p.rise <= 0 {
		p.rate = window
	} else {
		p.rate += (window - p.rate) * -math.Expm1(-now.Sub(p.rateAt).Seconds()/p.rise.Seconds())
	}
	p.rateAt = now
}

// effectiveHeadroom is the paced headroom for the window's allocation rate:
// the configured one (at most GOGC's) where it makes collections come at
// most every p.interval (--runtime.heap-pacer.interval), less where they
// would come less often; the configured one at any rate when p.interval is
// 0. The rate is p.rate, which follows a rise slowly (followRate). The
// default, 3 s (defaultPacerInterval), started together with 0 and
// Prometheus at 500,000 series of 15 s: peak RSS 1.05x Prometheus' instead
// of 1.21x, CPU 1.06x instead of 0.85x; at 50,000 of 1 Hz 0.94x the peak
// of 0 for 1.15x the CPU (docs/bench.md, issue 13, 2026-12-04).
// A collection costs the collector about its live heap's marking, and
// collections come as often as the headroom's bytes take to allocate, so
// the collector's CPU is about the allocation rate over the headroom's
// share, whatever the live heap, while the headroom's memory grows with
// it. A large heap allocated slowly (many series, a long scrape interval)
// gets collections far apart at the configured share, and trades some of
// that interval for memory. By the square-root rule of MemBalancer
// (Kirisame et al., "Optimal heap limits for reducing browser memory use",
// OOPSLA 2022: a heap's extra memory in proportion to the square root of
// its live heap times its allocation rate), the headroom's bytes are
// sqrt(h x baseline x rate x p.interval): the configured share's where it
// collects every p.interval, and where it would collect every
// T > p.interval, collections every sqrt(T x p.interval) (at 3 s, a heap
// the configured share collects every 12 s, every 6 s). Never
// below half the configured share: at most twice its collections at any
// allocation rate (a heap that allocates little, then a burst). The
// latest live heap's floor follows (half of this headroom above it), or
// it would set the limit whenever a collection finds a little more than
// the baseline.
func (p *heapPacer) effectiveHeadroom(baseline uint64) float64 {
	h := min(p.headroom, float64(p.gcPercent)/100)
	if p.interval <= 0 {
		return h
	}
	if baseline == 0 || p.rate <= 0 {
		return h / heapPacerMinHeadroomDiv
	}
	// interval is how often collections come at the configured share.
	interval := h * float64(baseline) / p.rate
	if interval <= p.interval.Seconds() {
		return h
	}
	return max(h*math.Sqrt(p.interval.Seconds()/interval), h/heapPacerMinHeadroomDiv)
}

// gogcCollectsSlowly reports whether GOGC alone would collect at most once
// per heapPacerMinInterval at the allocation rate (p.rate, which follows a
// rise slowly: a burst does not switch the pacer off, heavy ingest that
// lasts does): whether GOGC's headroom above the window's mean live heap
// takes that long to allocate.
// The mean, not the baseline: GOGC's goal follows each collection's live
// heap, and on a paced fleet the minimum of a window is about a third
// below its median (docs/bench.md, s11-gc). The window must be full.
func (p *heapPacer) gogcCollectsSlowly() bool {
	var sum float64
	for _, rec := range p.recs {
		sum += float64(rec.live)
	}
	headroom := sum / heapPacerWindow * float64(p.gcPercent) / 100
	return headroom >= p.rate*heapPacerMinInterval.Seconds()
}

// heapPacerMetrics are the runtime/metrics the pacer reads: the collection
// count, the live heap, the bytes allocated, and what makes up the memory besides the heap's
// objects as the runtime's limit counts it (the total mapped, less the
// heap's released and free pages and its objects).
var heapPacerMetrics = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/live:bytes",
	"/gc/heap/allocs:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/objects:bytes",
}

// paceHeap runs the heap pacer until ctx is done when --runtime.heap-pacer
// is on and GOGC is not off; it steps aside while held (nil: never) says so.
func (m memoryPolicy) paceHeap(ctx context.Context, reg prometheus.Registerer, held func(time.Time) bool) {
	if gcPercent := gcPercentOrDefault(m.gogc); m.pacer && gcPercent > 0 {
		runHeapPacer(ctx, &heapPacer{gcPercent: gcPercent, headroom: m.pacerHeadroom, interval: m.pacerInterval, rise: m.pacerRise, held: held}, reg)
	}
}

// runHeapPacer sets the soft memory limit from a heapPacer every
// heapPacerPeriod until ctx is done, then restores the configured limit.
// It is started after the remote-write handler is created, which reads the
// configured limit for its heap gate: the gate answers 429 on the
// configured limit, never on the pacer's.
func runHeapPacer(ctx context.Context, p *heapPacer, reg prometheus.Registerer) {
	configured := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(configured)
	p.ceiling = configured
	limitGauge := promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name: "strata_gc_paced_memory_limit_bytes",
		Help: "Soft memory limit the heap pacer set (its headroom above the baseline live heap, plus the runtime's memory outside the heap), at most the configured GOMEMLIMIT.",
	})
	baselineGauge := promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name: "strata_gc_baseline_live_heap_bytes",
		Help: "Lowest live heap of the last 16 garbage collections: the heap the pacer's limit follows.",
	})
	headroomGauge := promauto.With(reg).NewGauge(prometheus.GaugeOpts{
		Name: "strata_gc_paced_headroom_ratio",
		Help: "Share of the baseline live heap the heap pacer's limit leaves above it: --runtime.heap-pacer.headroom (at most GOGC's), less where collections would come further apart than --runtime.heap-pacer.interval (3s by default) at the allocation rate; 0 while the pacer does not cap the heap.",
	})
	samples := make([]metrics.Sample, len(heapPacerMetrics))
	for i, name := range heapPacerMetrics {
		samples[i].Name = name
	}
	v := make([]uint64, len(samples))
	set := int64(-1)
	every(ctx, heapPacerPeriod, func() {
		metrics.Read(samples)
		for i, s := range samples {
			if s.Value.Kind() == metrics.KindUint64 {
				v[i] = s.Value.Uint64()
			}
		}
		r := heapReading{cycles: v[0], live: v[1], allocs: v[2]}
		if heap := v[4] + v[5] + v[6]; v[3] > heap {
			r.nonHeap = v[3] - heap
		}
		limit, baseline := p.observe(time.Now(), r)
		baselineGauge.Set(float64(baseline))
		headroomGauge.Set(p.paced)
		limitGauge.Set(float64(limit))
		if limit != set {
			debug.SetMemoryLimit(limit)
			set = limit
		}
	})
}
