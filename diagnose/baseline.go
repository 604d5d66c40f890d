package diagnose

import (
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
)

// Names of the baseline series (docs/diagnosis.md, "Baselines"). Each
// carries the tracked signal's labels and metric="<signal name>".
const (
	BaselineMedianSeries = "strata:baseline:median"
	BaselineSigmaSeries  = "strata:baseline:sigma"
	AnomalyZScoreSeries  = "strata:anomaly:zscore"
	// BaselineKSeries is one series without labels whose value is
	// diagnose.baseline.k, so that rules written as
	// `strata:anomaly:zscore{...} > scalar(strata:baseline:k)` follow the
	// configuration.
	BaselineKSeries = "strata:baseline:k"
)

// baselineNames are the series the baseline step writes.
var baselineNames = []string{BaselineMedianSeries, BaselineSigmaSeries, AnomalyZScoreSeries, BaselineKSeries}

// Where a baseline came from, best first. The confidence of a diagnosis
// whose evidence rests on a weaker source is lowered (score).
type baselineSource uint8

const (
	sourceNone       baselineSource = iota
	sourceHourOfWeek                // the same hour of the week, over min_history or more
	sourceSameHour                  // the same hour of the last days (young series)
	sourceRecent                    // the last hours (younger still)
	sourceReplicas                  // the other replicas of the model at the same minute
)

func (s baselineSource) String() string {
	switch s {
	case sourceHourOfWeek:
		return "hour_of_week"
	case sourceSameHour:
		return "same_hour_recent_days"
	case sourceRecent:
		return "last_hours"
	case sourceReplicas:
		return "replicas"
	}
	return ""
}

// DefaultBaselineSignals are the canonical signals tracked by default, with
// the absolute sigma floor of each (in the signal's unit): the smallest
// change worth a sigma whatever the history says.
var DefaultBaselineSignals = map[string]float64{
	"strata:gpu_sm_active:ratio":               0.02,
	"strata:gpu_memory_bandwidth_active:ratio": 0.02,
	"strata:serving_gpu_sm_active:ratio":       0.02,
	"strata:gpu_sm_clock_mhz":                  15,
	"strata:gpu_power_watts":                   10,
	"strata:gpu_temperature_celsius":           1,
	"strata:requests_running":                  1,
	"strata:requests_waiting":                  1,
	"strata:requests:rate":                     0.05,
	"strata:generation_tokens:rate":            1,
	"strata:prompt_tokens:rate":                5,
	"strata:kv_cache_usage:ratio":              0.02,
	"strata:prefix_cache_hit:ratio":            0.02,
	"strata:preemptions:rate":                  0.002,
	"strata:spec_decode_acceptance:ratio":      0.02,
	"strata:ttft_seconds:p99":                  0.005,
	"strata:tpot_seconds:p99":                  0.001,
	"strata:e2e_latency_seconds:p99":           0.01,
	"strata:queue_time_seconds:p99":            0.005,
	"strata:request_errors:ratio":              0.002,
	"strata:network_latency_seconds:p99":       0.0005,
	"strata:tcp_retransmits:rate":              0.1,
}

// absFloor is a signal's absolute sigma floor: the default list's, or one
// guessed from the name's unit for an operator's signal.
func absFloor(name string) float64 {
	if f, ok := DefaultBaselineSignals[name]; ok {
		return f
	}
	switch {
	case strings.HasSuffix(name, ":ratio"):
		return 0.01
	case strings.Contains(name, "_seconds"):
		return 0.001
	}
	return 1e-6
}

// Tracker constants.
const (
	// minHourPoints: an hour with fewer minute values (a scrape gap, a
	// series born late) leaves no summary.
	minHourPoints = 10
	// sameHourDays and recentHours bound the young-series fallbacks.
	sameHourDays = 7
	recentHours  = 3
	// minReplicas: the replica fallback needs this many other replicas.
	minReplicas = 2
	mad2sigma   = 1.4826
	hourMs      = int64(time.Hour / time.Millisecond)
	week        = 7 * 24
)

// summary is one hour of one series: the median and MAD of its minute
// values (float32: a few bytes per series and hour, so weeks of a large
// fleet fit in memory). Which hour it summarises is its slot in the ring.
type summary struct {
	m, d float32
}

// hourRing is a series' hourly summaries: hour h in slot h % n, of lap
// h / n, in pages of ringSlots hours allocated when first written (and the
// page table with the first page: a series' first hour writes none). The
// history needs every slot once it is full (the hour of the week over four
// weeks), but a series tracked for a day holds a day.
//
// A page carries its lap once, with a mask of the slots written in that
// lap: 8 bytes a summary instead of 12 with each summary's own hour (after
// four weeks 6.0 KB a series instead of 8.6). Writing a newer lap into a
// page forgets what the page held of older laps, including the hours a gap
// left unwritten in the last lap; those are at least n - ringSlots + 1
// hours older than the hour written. So the ring is the hours asked for
// plus ringSlots - 2, rounded up to whole pages (676 to 702: 26 pages),
// and every hour within the hours asked for before the next one written
// reads back (TestHourRingGaps).
type hourRing struct {
	pages []*ringPage
}

// ringSlots is a page's hours: 27 summaries, the lap and the mask fill a
// 224-byte size class (TestRingPageSize). Larger pages waste more of the
// ring's rounding, smaller ones more page table.
const ringSlots = 27

// ringPage is ringSlots consecutive slots of the ring and which lap its
// written slots are.
type ringPage struct {
	s    [ringSlots]summary
	lap  int32
	mask uint32 // slot i of the page was written in lap
}

// ringPages is the page table's length for a ring that must hold hours
// hours (see hourRing).
func ringPages(hours int) int { return (hours + 2*ringSlots - 3) / ringSlots }

// len is the ring's number of slots (0 before the first write).
func (r *hourRing) len() int64 { return int64(len(r.pages) * ringSlots) }

// at returns hour h's summary, false when it was never written or the
// ring has moved past it.
func (r *hourRing) at(h int64) (summary, bool) {
	if r.pages == nil {
		return summary{}, false
	}
	n := r.len()
	i := int(h % n)
	p := r.pages[i/ringSlots]
	if p == nil || int64(p.lap) != h/n || p.mask&(1<<(i%ringSlots)) == 0 {
		return summary{}, false
	}
	return p.s[i%ringSlots], true
}

// set writes hour h's summary; hours is the history the ring must hold
// (fixed for a ring: it sizes the page table at the first write). Hours
// are written in increasing order. New pages come from a (nil: the heap).
func (r *hourRing) set(h int64, hours int, x summary, a *pageArena) {
	if r.pages == nil {
		r.pages = make([]*ringPage, ringPages(hours))
	}
	n := r.len()
	i := int(h % n)
	p := r.pages[i/ringSlots]
	if p == nil {
		p = a.page()
		r.pages[i/ringSlots] = p
	}
	if lap := int32(h / n); p.lap != lap {
		p.lap, p.mask = lap, 0
	}
	p.s[i%ringSlots] = x
	p.mask |= 1 << (i % ringSlots)
}

// seasonal is a series' seasonal baseline (before any level shift) at one
// hour, kept for the level-shift test of the next hours.
type seasonal struct {
	hour   int32
	m, sig float64
}

// bseries is one tracked series. Its entities and dimension are read from
// its labels when asked for (lookup, deviations), not kept: every byte here
// is paid per tracked series (BenchmarkTrackerSeriesBytes).
type bseries struct {
	metric string
	lbls   labels.Labels // the signal's labels, __name__ included
	peer   string        // replicas share metric and peer key (model_name, else modelName)

	ring hourRing   // hour h at slot h % len
	seas []seasonal // hour h at seas[h % len]; allocated with the first baseline
	// cur is this hour's minute values, as float32: the hour's summary
	// (its median and MAD) is kept as float32 anyway, and the slice, whose
	// capacity is kept from hour to hour, is 256 bytes a tracked series
	// instead of 512 once a series has seen a whole hour.
	cur  []float32
	hour int64 // the Unix hour of cur (0: none yet)

	// The baseline of the current hour (hourly sources), or of the current
	// minute (replicas).
	med, sig float64
	// The hour's baseline from its last hours, kept for the minutes no
	// replica gives one (young series whose model has no other replicas).
	recMed, recSig float64
	recNoise       float64 // the last hours' own minute-to-minute sigma
	// repl says, per minute (minute number % 512), whether the replicas
	// gave that minute's baseline: sourceAt reads it for a minute up to a
	// replay chunk (6 h) behind the tracker.
	repl  [8]uint64
	x     float64 // the value at lastT
	lastT int64
	// srcHour and srcOf are the hourly source of the last hours (hour h
	// at h % len): replay's fast path runs the tracker a chunk ahead of
	// the minute being assembled, which reads what it needs of a minute
	// back from the scratch store and from here (baselineAt). Two arrays,
	// and the one-byte fields together: 320 bytes a series, not 384.
	srcHour [8]int32
	srcOf   [8]baselineSource
	src     baselineSource // of med and sig
	hasRec  bool           // recMed, recSig and recNoise are this hour's
	lastOut int64          // the last minute the outputs were written
	// out are the median, sigma and z-score series, made when the series
	// first has a baseline: a series without one (sourceNone: no history
	// and fewer than minReplicas other replicas) writes nothing, and its
	// three label sets were 3.6 MB at 50,000 active series.
	out *[3]scratchHandle
	// next chains the series whose labels share a hash (tracker.series).
	next *bseries
}

// tracker computes the baselines of the tracked signals, minute by minute
// (docs/diagnosis.md, "Baselines"). Every baseline at minute T is a pure
// function of the signal values before T's hour (and, for the replica
// fallback, of the other replicas' values at T), so live evaluation and a
// replay that starts anywhere agree once the history is read back
// (bootstrap.go).
type tracker struct {
	cfg      BaselineConfig
	k        float64
	floors   map[string]float64
	names    []string
	hours    int // ring length: history + level-shift hours + 1
	weeks    int // weeks of history
	minWeeks int // weeks needed for the hour-of-week source
	shiftN   int // hours a shift must hold

	series   map[uint64]*bseries // by labels hash, collisions chained by next
	byMetric map[string][]*bseries
	// peers interns the replica keys built from a GPU model name
	// ("gpu:<modelName>"): one string per model, not one per series.
	peers   map[string]string
	seen    []*bseries // at the minute being processed
	done    int64      // last minute processed (ms)
	started bool
	kOut    *scratchHandle
	booted  bool
	lastGC  int64
	// arena holds the rings' pages out of the heap (nil: on the heap).
	arena *pageArena
	// buf is the hour summaries' scratch space (bseries.finish).
	buf []float64
	// firstHour is the hour of the first minute the tracker (or the run
	// whose checkpoint it was restored from) processed: it has no
	// summaries before it.
	firstHour int64
	// ckpt writes a checkpoint as each hour passes (nil: none; replay).
	ckpt *checkpointer
}

// newTracker makes a tracker whose rings' pages are kept in arena (nil:
// on the heap); the arena is closed once the tracker is unreachable.
func newTracker(cfg BaselineConfig, arena *pageArena) *tracker {
	t := &tracker{arena: arena,
		cfg: cfg, k: cfg.K, floors: map[string]float64{},
		series: map[uint64]*bseries{}, byMetric: map[string][]*bseries{}, peers: map[string]string{},
		weeks:  int(time.Duration(cfg.History) / (week * time.Hour)),
		shiftN: max(1, int(time.Duration(cfg.LevelShiftAfter)/time.Hour)),
		kOut:   &scratchHandle{lbls: labels.FromStrings(model.MetricNameLabel, BaselineKSeries)},
	}
	t.minWeeks = max(1, int(time.Duration(cfg.MinHistory)/(week*time.Hour)))
	t.hours = int(time.Duration(cfg.History)/time.Hour) + t.shiftN + 1
	names := cfg.Signals
	if len(names) == 0 {
		for n := range DefaultBaselineSignals {
			names = append(names, n)
		}
	}
	for _, n := range names {
		t.floors[n] = absFloor(n)
	}
	t.names = slices.Sorted(func(yield func(string) bool) {
		for n := range t.floors {
			if !yield(n) {
				return
			}
		}
	})
	if arena != nil {
		runtime.AddCleanup(t, (*pageArena).close, arena)
	}
	return t
}

// readBack is how far before the first evaluated minute's hour the
// summaries a baseline may use reach: the history and the level-shift hours.
func (t *tracker) readBack() time.Duration {
	return time.Duration(t.hours-1) * time.Hour
}

func (t *tracker) get(lbls labels.Labels) *bseries {
	return t.getHash(lbls.Hash(), lbls)
}

// getHash is get with lbls' hash given (tests give colliding ones).
func (t *tracker) getHash(h uint64, lbls labels.Labels) *bseries {
	for s := t.series[h]; s != nil; s = s.next {
		if labels.Equal(s.lbls, lbls) {
			// The caller's copy, the scratch store's: the one the tracker
			// held (the read-back's scratch store's, or decoded from a
			// checkpoint) is then no longer held, by the tracker at least.
			s.lbls = lbls
			return s
		}
	}
	name := lbls.Get(model.MetricNameLabel)
	s := &bseries{metric: name, lbls: lbls}
	s.peer = lbls.Get("model_name")
	if s.peer == "" {
		m := lbls.Get("modelName")
		p, ok := t.peers[m]
		if !ok {
			p = "gpu:" + m
			t.peers[m] = p
		}
		s.peer = p
	}
	s.next = t.series[h]
	t.series[h] = s
	t.byMetric[name] = append(t.byMetric[name], s)
	return s
}

// outputs returns s's baseline series handles, made on first use.
func (s *bseries) outputs() *[3]scratchHandle {
	if s.out == nil {
		s.out = new([3]scratchHandle)
		b := labels.NewBuilder(s.lbls)
		b.Set("metric", s.metric)
		for i, n := range []string{BaselineMedianSeries, BaselineSigmaSeries, AnomalyZScoreSeries} {
			b.Set(model.MetricNameLabel, n)
			s.out[i].lbls = b.Labels()
		}
	}
	return s.out
}

// observe adds series lbls' value v at minute ts (ms), rolling its hour
// first: the finished hour becomes a summary and the new hour's baseline
// is computed from the summaries before it.
func (t *tracker) observe(ts int64, lbls labels.Labels, v float64) *bseries {
	s := t.get(lbls)
	h := floorDiv(ts, hourMs)
	if h != s.hour {
		t.arena.touch()
		if s.hour != 0 {
			t.buf = s.finish(s.hour, t.hours, t.arena, t.buf)
		}
		s.hour = h
		t.hourBaseline(s, h)
	}
	s.cur = append(s.cur, float32(v))
	s.x, s.lastT = v, ts
	return s
}

// finish turns the values of hour h into its summary (in a ring of at
// least hours slots, whose new pages come from a). buf is scratch space
// for twice the hour's values, returned grown for the next call: every
// tracked series finishes its hour at the same minute, and a median and a
// MAD allocating an array of the hour's values each made about 90 MB of
// garbage at that minute at 90,914 tracked series (500,000 active).
func (s *bseries) finish(h int64, hours int, a *pageArena, buf []float64) []float64 {
	if n := len(s.cur); n >= minHourPoints {
		buf = slices.Grow(buf[:0], 2*n)[:2*n]
		xs, ds := buf[:n], buf[n:]
		for i, x := range s.cur {
			xs[i] = float64(x)
		}
		slices.Sort(xs)
		m := sortedMedian(xs)
		for i, x := range xs {
			ds[i] = math.Abs(x - m)
		}
		slices.Sort(ds)
		s.ring.set(h, hours, summary{m: float32(m), d: float32(sortedMedian(ds))}, a)
	}
	s.cur = s.cur[:0]
	return buf
}

// sortedMedian is the median of sorted xs (not empty).
func sortedMedian(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// summaryAt is hour h's summary when h is not before from, the oldest hour
// a baseline may use (readBack: what a replay reads back, so that a
// tracker that has run for longer uses no more).
func (s *bseries) summaryAt(h, from int64) (summary, bool) {
	if h <= 0 || h < from {
		return summary{}, false
	}
	return s.ring.at(h)
}

// hourBaseline computes series s's baseline for hour h from its summaries
// before h: the hour of the week over the last weeks when there are at
// least min_history of them, else the same hour of the last days, else the
// last hours (else none: the replicas may give one each minute). A level
// held beyond k sigma, in one direction, for level_shift_after becomes the
// new normal.
func (t *tracker) hourBaseline(s *bseries, h int64) {
	cands := make([]summary, 0, max(t.weeks, sameHourDays))
	from := h - int64(t.hours-1)
	collect := func(step int64, n int) {
		cands = cands[:0]
		for i := 1; i <= n; i++ {
			if x, ok := s.summaryAt(h-int64(i)*step, from); ok {
				cands = append(cands, x)
			}
		}
	}
	src := sourceHourOfWeek
	if collect(week, t.weeks); len(cands) < t.minWeeks {
		src = sourceSameHour
		if collect(24, sameHourDays); len(cands) == 0 {
			src = sourceRecent
			if collect(1, recentHours); len(cands) == 0 {
				src = sourceNone
			}
		}
	}
	s.src, s.hasRec = src, false
	s.srcHour[int(h%int64(len(s.srcHour)))] = int32(h)
	s.srcOf[int(h%int64(len(s.srcOf)))] = src
	if src == sourceNone {
		return
	}
	s.med, s.sig = t.robust(cands, t.floors[s.metric])
	if src == sourceRecent {
		// The last hours miss the daily cycle: the model's other replicas
		// at the same minute come first (minute).
		ds := make([]float64, len(cands))
		for i, c := range cands {
			ds[i] = float64(c.d)
		}
		s.recMed, s.recSig, s.recNoise, s.hasRec = s.med, s.sig, mad2sigma*median(ds), true
	}
	if s.seas == nil {
		s.seas = make([]seasonal, t.shiftN+1)
	}
	s.seas[int(h%int64(len(s.seas)))] = seasonal{hour: int32(h), m: s.med, sig: s.sig}
	// Level shift: every one of the last shiftN hours' medians beyond k
	// sigma of that hour's own seasonal baseline, on the same side.
	var diffs []float64
	sign := 0
	for j := 1; j <= t.shiftN; j++ {
		x, ok := s.summaryAt(h-int64(j), from)
		b := s.seas[int((h-int64(j))%int64(len(s.seas)))]
		if !ok || int64(b.hour) != h-int64(j) {
			return
		}
		r := (float64(x.m) - b.m) / b.sig
		sg := 0
		switch {
		case r > t.k:
			sg = 1
		case r < -t.k:
			sg = -1
		}
		if sg == 0 || (sign != 0 && sg != sign) {
			return
		}
		sign = sg
		diffs = append(diffs, float64(x.m)-b.m)
	}
	s.med += median(diffs)
}

// robust is the two-pass median and sigma of candidate hours: hours whose
// median lies beyond k sigma of the first pass' median are left out (an
// incident in that hour) before the final median; sigma combines the
// hours' own spread (median MAD) with the spread between them, both as
// 1.4826·MAD, and is floored. The exclusion is not recursive: it depends
// on these candidates alone.
func (t *tracker) robust(cands []summary, absFloor float64) (float64, float64) {
	ms := make([]float64, len(cands))
	ds := make([]float64, len(cands))
	for i, c := range cands {
		ms[i], ds[i] = float64(c.m), float64(c.d)
	}
	floor := func(m float64) float64 { return math.Max(absFloor, t.cfg.SigmaFloor*math.Abs(m)) }
	if len(cands) >= 3 {
		m0 := median(ms)
		s0 := math.Max(mad2sigma*math.Hypot(median(ds), mad(ms, m0)), floor(m0))
		var km, kd []float64
		for i, m := range ms {
			if math.Abs(m-m0) <= t.k*s0 {
				km, kd = append(km, m), append(kd, ds[i])
			}
		}
		ms, ds = km, kd
	}
	m := median(ms)
	return m, math.Max(mad2sigma*math.Hypot(median(ds), mad(ms, m)), floor(m))
}

// replicas gives series s, which has no hourly baseline, the median of
// the other replicas of its model (same metric and peer key) at the
// minute being processed; its sigma is the larger of their spread and the
// series' own minute-to-minute spread over its last hours (a few replicas
// that happen to agree at one minute say little about how much one of them
// wanders). peers holds the minute's values by metric and peer key.
func (t *tracker) replicas(s *bseries, peers *peerValues) bool {
	m, spread, ok := peers.others(s)
	if !ok {
		return false
	}
	sig := mad2sigma * spread
	if s.hasRec {
		sig = math.Max(sig, s.recNoise)
	}
	s.med, s.sig = m, math.Max(sig, math.Max(t.floors[s.metric], t.cfg.SigmaFloor*math.Abs(m)))
	return true
}

// peerKey is a replica group: the series of one metric with one peer key.
type peerKey struct{ metric, peer string }

// peerGroup is a replica group's values at one minute, sorted, and the
// sorted absolute deviations from the medians asked for so far.
type peerGroup struct {
	vals []float64
	devs []deviations
	// exact is false when a value is -0: which zero sorts first then
	// decides the sign of a median, so the group takes the direct path.
	exact bool
}

type deviations struct {
	m float64
	d []float64
}

// peerValues answers, for every series of a minute, the median and MAD of
// the other replicas' values. Asked directly (collect the others, sort),
// that was quadratic in a group's size (every GPU of a fleet shares its
// model's group): 280 MB allocated a minute at 50,000 active series. One
// sorted copy per group gives the same numbers: the others are the group
// without one copy of the series' own value, so their order statistics are
// the group's at shifted indices, and the same holds for the deviations
// from a median, of which a group has at most three (the median of the
// others depends only on which side of the middle the value left out lies).
type peerValues struct {
	groups   map[peerKey]*peerGroup
	byMetric map[string][]*bseries
}

// newPeerValues groups the series seen at a minute (they carry its value
// in x and the minute in lastT); byMetric is the tracker's.
func newPeerValues(seen []*bseries, byMetric map[string][]*bseries) *peerValues {
	p := &peerValues{groups: map[peerKey]*peerGroup{}, byMetric: byMetric}
	for _, s := range seen {
		k := peerKey{s.metric, s.peer}
		g := p.groups[k]
		if g == nil {
			g = &peerGroup{exact: true}
			p.groups[k] = g
		}
		g.vals = append(g.vals, s.x)
		if s.x == 0 && math.Signbit(s.x) {
			g.exact = false
		}
	}
	for _, g := range p.groups {
		slices.Sort(g.vals)
	}
	return p
}

// others is the median and MAD of the values of s's group without s's own;
// false when fewer than minReplicas others.
func (p *peerValues) others(s *bseries) (m, spread float64, ok bool) {
	g := p.groups[peerKey{s.metric, s.peer}]
	if g == nil || len(g.vals)-1 < minReplicas {
		return 0, 0, false
	}
	if !g.exact {
		// The replicas in the tracker's order, as the sort met them.
		var vs []float64
		for _, o := range p.byMetric[s.metric] {
			if o != s && o.peer == s.peer && o.lastT == s.lastT {
				vs = append(vs, o.x)
			}
		}
		m = median(vs)
		return m, mad(vs, m), true
	}
	m = medianWithout(g.vals, s.x)
	return m, medianWithout(g.deviations(m), math.Abs(s.x-m)), true
}

// deviations returns the group's sorted |v - m|.
func (g *peerGroup) deviations(m float64) []float64 {
	for _, d := range g.devs {
		if d.m == m {
			return d.d
		}
	}
	d := make([]float64, len(g.vals))
	for i, v := range g.vals {
		d[i] = math.Abs(v - m)
	}
	slices.Sort(d)
	g.devs = append(g.devs, deviations{m, d})
	return d
}

// medianWithout is the median of sorted without one copy of x (which it
// holds), as median computes it.
func medianWithout(sorted []float64, x float64) float64 {
	j, _ := slices.BinarySearch(sorted, x)
	at := func(k int) float64 {
		if k >= j {
			k++
		}
		return sorted[k]
	}
	n := len(sorted) - 1
	if n%2 == 1 {
		return at(n / 2)
	}
	return (at(n/2-1) + at(n/2)) / 2
}

// current is the baseline of s at its last minute, when it has one.
func (s *bseries) current() (med, sig float64, src baselineSource, ok bool) {
	return s.med, s.sig, s.src, s.src != sourceNone
}

// baselineAt is series s's baseline and z-score at minute tm, read from
// what the tracker wrote to the scratch store (the tracker itself may be
// ahead of tm in replay's fast path); false when s had none at tm.
func (sc *scratch) baselineAt(s *bseries, tm int64) (med, sig, z float64, src baselineSource, ok bool) {
	if s.out == nil {
		return 0, 0, 0, sourceNone, false // never had a baseline
	}
	var v [3]float64
	for i := range s.out {
		x, found := sc.valueOf(&s.out[i], tm)
		if !found {
			return 0, 0, 0, sourceNone, false
		}
		v[i] = x
	}
	return v[0], v[1], v[2], s.sourceAt(tm), true
}

// sourceAt is the source of s's baseline at minute tm (its hourly source,
// or the replicas when the hour's is young); tm must be a minute the
// baseline series were written at.
func (s *bseries) sourceAt(tm int64) baselineSource {
	hr := floorDiv(tm, hourMs)
	i := int(hr % int64(len(s.srcHour)))
	if int64(s.srcHour[i]) != hr {
		return sourceReplicas
	}
	switch s.srcOf[i] {
	case sourceHourOfWeek, sourceSameHour:
		return s.srcOf[i]
	}
	// Replicas or the last hours: which one gave minute tm is kept per
	// minute in the replica flags.
	if s.replicaAt(tm) {
		return sourceReplicas
	}
	return sourceRecent
}

func replicaBit(tm int64) (int, uint64) {
	m := floorDiv(tm, minute.Milliseconds()) & 511
	return int(m >> 6), 1 << (m & 63)
}

func (s *bseries) setReplica(tm int64, on bool) {
	w, b := replicaBit(tm)
	if on {
		s.repl[w] |= b
	} else {
		s.repl[w] &^= b
	}
}

func (s *bseries) replicaAt(tm int64) bool {
	w, b := replicaBit(tm)
	return s.repl[w]&b != 0
}

// zscore of v against s's current baseline.
func (s *bseries) zscore(v float64) float64 { return (v - s.med) / s.sig }

// sink receives the baseline series of a minute.
type baselineSink interface {
	appendDirect(t int64, hs []*scratchHandle, vs []float64)
	// zscores reports whether the sink takes the z-score series too.
	zscores() bool
}

// minute processes minute ts: vals are the tracked signals' values at ts
// (by name; the tracker keeps their labels, the scratch store's own, which
// nobody modifies). With sinks, the baseline series are written at ts
// (median, sigma, z-score per series with a baseline, stale markers for
// series gone since the last minute, and strata:baseline:k).
func (t *tracker) minute(ts int64, vals map[string][]sampleAt, sinks ...baselineSink) {
	if t.started && ts <= t.done {
		return
	}
	if !t.started {
		t.firstHour = floorDiv(ts, hourMs)
	} else if x := floorDiv(t.done, hourMs); floorDiv(ts, hourMs) > x {
		t.passHour(x)
	}
	t.seen = t.seen[:0]
	for _, n := range t.names {
		for _, sa := range vals[n] {
			if math.IsNaN(sa.v) || math.IsInf(sa.v, 0) {
				continue
			}
			t.seen = append(t.seen, t.observe(ts, sa.lbls, sa.v))
		}
	}
	// A young series: the model's other replicas at ts, once every
	// replica's value is in, else its last hours.
	var peers *peerValues
	for _, s := range t.seen {
		if s.src == sourceHourOfWeek || s.src == sourceSameHour {
			continue
		}
		if peers == nil {
			peers = newPeerValues(t.seen, t.byMetric)
		}
		rep := t.replicas(s, peers)
		switch {
		case rep:
			s.src = sourceReplicas
		case s.hasRec:
			s.src, s.med, s.sig = sourceRecent, s.recMed, s.recSig
		default:
			s.src = sourceNone
		}
		s.setReplica(ts, rep)
	}
	if len(sinks) > 0 {
		t.write(ts, sinks)
	}
	t.done, t.started = ts, true
	if ts-t.lastGC >= hourMs {
		t.gc(ts)
		t.lastGC = ts
	}
	t.arena.release()
}

// passHour finishes hour x, the last one a minute was processed in, as a
// later one starts: every series' summary of it is made now, not when the
// series is next seen (which makes no difference to a baseline: summaries
// are read when a series' hour rolls, after it finished its last one), so
// that the checkpoint after x holds every hour up to x whole.
func (t *tracker) passHour(x int64) {
	t.arena.touch()
	for _, list := range t.byMetric {
		for _, s := range list {
			if len(s.cur) > 0 {
				t.buf = s.finish(s.hour, t.hours, t.arena, t.buf)
			}
		}
	}
	if t.ckpt != nil {
		t.ckpt.checkpoint(t, x)
	}
}

func (t *tracker) write(ts int64, sinks []baselineSink) {
	// One array of handles and one of values, sized for the minute's
	// series (counted first), hold the median and sigma of each, then
	// strata:baseline:k, then the z-scores, so that a sink that does not
	// take them gets the head of the same arrays. Grown by append, they
	// were 2.2 MB of garbage a minute at 10,000 tracked series; with the
	// z-scores in slices of their own, 16 bytes a tracked series more.
	prev := ts - minute.Milliseconds()
	n := 0
	for _, s := range t.seen {
		if _, _, _, ok := s.current(); ok {
			s.lastOut = ts
			n++
		}
	}
	gone := func(s *bseries) bool { return s.lastOut == prev && s.out != nil }
	for _, list := range t.byMetric {
		for _, s := range list {
			if gone(s) {
				n++
			}
		}
	}
	hs, vs := make([]*scratchHandle, 3*n+1), make([]float64, 3*n+1)
	i := 0
	put := func(out *[3]scratchHandle, med, sig, z float64) {
		hs[2*i], hs[2*i+1], hs[2*n+1+i] = &out[0], &out[1], &out[2]
		vs[2*i], vs[2*i+1], vs[2*n+1+i] = med, sig, z
		i++
	}
	for _, s := range t.seen {
		if _, _, _, ok := s.current(); ok {
			put(s.outputs(), s.med, s.sig, s.zscore(s.x))
		}
	}
	stale := math.Float64frombits(value.StaleNaN)
	for _, list := range t.byMetric {
		for _, s := range list {
			if gone(s) {
				put(s.out, stale, stale, stale)
			}
		}
	}
	hs[2*n], vs[2*n] = t.kOut, t.k
	lean := 2*n + 1
	for _, sk := range sinks {
		if sk.zscores() {
			sk.appendDirect(ts, hs, vs)
		} else {
			sk.appendDirect(ts, hs[:lean], vs[:lean])
		}
	}
}

// gc forgets series not seen for the whole history.
func (t *tracker) gc(ts int64) {
	cut := ts - int64(t.hours)*hourMs
	for name, list := range t.byMetric {
		t.byMetric[name] = slices.DeleteFunc(list, func(s *bseries) bool {
			if s.lastT < cut {
				t.arena.put(s.ring.pages)
				return true
			}
			return false
		})
		if len(t.byMetric[name]) == 0 {
			delete(t.byMetric, name)
		}
	}
	for h, s := range t.series {
		var keep *bseries
		for s != nil {
			next := s.next
			s.next = nil
			if s.lastT >= cut {
				s.next, keep = keep, s
			}
			s = next
		}
		if keep == nil {
			delete(t.series, h)
		} else {
			t.series[h] = keep
		}
	}
}

// len is the number of series tracked.
func (t *tracker) len() int {
	n := 0
	for _, l := range t.byMetric {
		n += len(l)
	}
	return n
}

// lookup returns the tracked series of metric on entity ent (its pod, its
// GPU, or, for a series of a whole host, its host).
func (t *tracker) lookup(metric string, ent Entities) []*bseries {
	var out []*bseries
	for _, s := range t.byMetric[metric] {
		if seriesOnEntity(entitiesOf(s.lbls), ent) {
			out = append(out, s)
		}
	}
	return out
}

// seriesOnEntity reports whether a series' entity belongs to a diagnosis' root
// entity: the same pod or GPU, or a host-wide series of its host.
func seriesOnEntity(series, root Entities) bool {
	if sameEntity(series, root) {
		return true
	}
	return series.Pod == "" && series.GPU == "" && series.UUID == "" && series.Host != "" && series.Host == root.Host
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// median of xs (xs is left as it is).
func median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// mad is the median absolute deviation of xs from m.
func mad(xs []float64, m float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	d := make([]float64, len(xs))
	for i, x := range xs {
		d[i] = math.Abs(x - m)
	}
	slices.Sort(d)
	n := len(d)
	if n%2 == 1 {
		return d[n/2]
	}
	return (d[n/2-1] + d[n/2]) / 2
}
