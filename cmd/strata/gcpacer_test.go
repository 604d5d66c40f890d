package main

import (
	"context"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const mib = 1 << 20

// pacedCollections is how far apart a paced fleet's collections come.
const pacedCollections = 5 * time.Second

// testHeadroom is the paced headroom of the tests, below GOGC's 50 %.
const testHeadroom = 0.25

// Allocation rates in MiB a second: a paced fleet's, at which GOGC 50 alone
// collects a 200 MiB live heap every 5 s and the paced headroom every 2.5 s
// (within heapPacerMinInterval: the configured headroom holds), and heavy
// ingest's, at which GOGC alone collects it every second.
const (
	pacedAllocs = 20
	heavyAllocs = 100
)

// testPacer is a heapPacer with its clock, collection count and allocation
// counter.
type testPacer struct {
	heapPacer
	now    time.Time
	cycles uint64
	allocs uint64
	rate   uint64 // MiB allocated a second
}

func newTestPacer(ceiling int64) *testPacer {
	return &testPacer{
		heapPacer: heapPacer{gcPercent: 50, headroom: testHeadroom, ceiling: ceiling, interval: heapPacerMinInterval, rise: defaultPacerRise},
		now:       time.Unix(0, 0),
		rate:      pacedAllocs,
	}
}

// feed gives the pacer one collection per live heap (in MiB), every
// interval, allocating at p.rate, with 20 MiB outside the heap, and returns
// the limits it chose, in MiB, rounded down.
func (p *testPacer) feed(interval time.Duration, lives ...uint64) []int64 {
	limits := make([]int64, len(lives))
	for i, l := range lives {
		p.now = p.now.Add(interval)
		p.cycles++
		p.allocs += uint64(interval.Seconds() * float64(p.rate*mib))
		limit, _ := p.observe(p.now, heapReading{cycles: p.cycles, live: l * mib, allocs: p.allocs, nonHeap: 20 * mib})
		limits[i] = limit / mib
	}
	return limits
}

// steady feeds a window of collections that found live MiB.
func (p *testPacer) steady(live uint64) {
	for range heapPacerWindow {
		p.feed(pacedCollections, live)
	}
}

// steadyLimit is the limit for a steady live heap of live MiB: the paced
// headroom above it plus the margin, plus 20 MiB outside the heap, rounded
// up.
func steadyLimit(live float64) int64 {
	return steadyLimitAt(live, testHeadroom)
}

// steadyLimitAt is the limit for a steady live heap of live MiB at paced
// headroom h.
func steadyLimitAt(live, h float64) int64 {
	return int64(live*(1+h)*(1+heapPacerMargin)+20) + 1
}

const ceilingMiB = math.MaxInt64 / mib

func TestHeapPacerBurstsDoNotRaiseTheLimit(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	p.steady(200)
	want := steadyLimit(200)
	// A minute: quiet collections, a snapshot-sized burst, rule queries.
	for minute := range 10 {
		for i, got := range p.feed(pacedCollections, 200, 225, 230, 200, 201, 215, 200, 199, 220, 200) {
			if got > want {
				t.Fatalf("minute %d, collection %d: limit %d MiB, want at most %d (the steady heap's)", minute, i, got, want)
			}
		}
	}
	// The steady heap's goal is the paced headroom's, below GOGC's
	// (1.5 x 200 MiB).
	if lim := p.feed(pacedCollections, 200)[0]; lim > want || lim >= 300+20 {
		t.Fatalf("steady limit %d MiB, want at most %d, below GOGC's goal", lim, want)
	}
}

func TestHeapPacerFollowsALastingRise(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	p.steady(200)
	p.rate = 2 * pacedAllocs
	// A new fleet: the live heap doubles and stays, and so does the
	// allocation rate (the same interval between collections, the same
	// headroom). The limit never leaves
	// the latest live heap less than half the paced headroom, and after
	// heapPacerWindow collections it is the new heap's steady limit.
	for i := range heapPacerWindow {
		got := p.feed(pacedCollections, 400)[0]
		if floor := int64(400*(1+testHeadroom/heapPacerMinHeadroomDiv) + 20); got < floor {
			t.Fatalf("collection %d after the rise: limit %d MiB below %d", i, got, floor)
		}
	}
	// The rate that doubled is followed through the time constant: until
	// then the headroom is below the configured one, and then it is the new
	// heap's steady limit.
	if got, want := p.feed(pacedCollections, 400)[0], steadyLimit(400); got > want {
		t.Fatalf("limit %d MiB %d collections after the rise, want at most %d", got, heapPacerWindow, want)
	}
	for range int(3 * defaultPacerRise / pacedCollections) {
		p.feed(pacedCollections, 400)
	}
	if got, want := p.feed(pacedCollections, 400)[0], steadyLimit(400); got != want {
		t.Fatalf("limit %d MiB %s after the rise, want %d", got, 3*defaultPacerRise, want)
	}
	// A fall is followed at once: the baseline is a minimum.
	if got, want := p.feed(pacedCollections, 150)[0], steadyLimit(150); got != want {
		t.Fatalf("limit %d MiB after a fall, want %d", got, want)
	}
}

func TestHeapPacerCeiling(t *testing.T) {
	p := newTestPacer(250 * mib)
	p.rate = pacedAllocs / 2 // a paced fleet's, at half the heap
	if lim, base := p.observe(p.now, heapReading{nonHeap: 20 * mib}); lim != 250*mib || base != 0 {
		t.Fatalf("before any collection: limit %d baseline %d, want the ceiling and none", lim, base)
	}
	p.steady(100)
	for i, got := range p.feed(pacedCollections, 100, 200, 400) {
		if got > 250 {
			t.Fatalf("collection %d: limit %d MiB above the configured 250", i, got)
		}
	}
	p.steady(100)
	if got := p.feed(pacedCollections, 100)[0]; got != steadyLimit(100) {
		t.Fatalf("under the ceiling: limit %d MiB, want %d", got, steadyLimit(100))
	}
}

// TestHeapPacerHeadroomAtMostGOGC: a headroom above GOGC's paces with
// GOGC's, which then only caps the bursts.
func TestHeapPacerHeadroomAtMostGOGC(t *testing.T) {
	lives := []uint64{200, 260, 210, 280, 200, 250, 230, 200, 270, 220, 200, 260, 240, 200, 280, 210, 200, 250}
	over, at := newTestPacer(math.MaxInt64), newTestPacer(math.MaxInt64)
	over.headroom, at.headroom = 0.8, 0.5
	got, want := over.feed(pacedCollections, lives...), at.feed(pacedCollections, lives...)
	for i := heapPacerWindow; i < len(lives); i++ {
		if got[i] != want[i] || got[i] >= int64(200*1.5*(1+heapPacerMargin)+20)+1 {
			t.Fatalf("collection %d: headroom 0.8 at GOGC 50: limit %d MiB, want GOGC's headroom's %d, below GOGC's goal", i, got[i], want[i])
		}
	}
}

// TestHeapPacerIdle: the limit is the ceiling until a window of collections
// is recorded, and while the allocation rate would make GOGC alone collect
// more often than heapPacerMinInterval (heavy ingest), bursts or not: from
// the first window when ingest starts heavy, once the slowly followed rate
// gets there when it becomes heavy later; it caps again as soon as the rate
// falls.
func TestHeapPacerIdle(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	for i, got := range p.feed(pacedCollections, 100, 120, 140, 160, 180, 200, 200, 200, 200, 200, 200, 200, 200, 200, 200) {
		if got != ceilingMiB {
			t.Fatalf("collection %d of the first window: limit %d MiB, want the ceiling", i, got)
		}
	}
	p.steady(200)
	p.rate = heavyAllocs
	heavy := func(n int) []int64 {
		lives := make([]uint64, n)
		for i := range lives {
			lives[i] = uint64(200 + 30*(i%3))
		}
		return p.feed(time.Second, lives...)
	}
	// GOGC 50 collects about 230 MiB every 1.15 s at 100 MiB/s: the pacer
	// steps aside once the followed rate passes 38 MiB/s, 2.5 minutes
	// after the rise at the default time constant, not within 30 s.
	for i, got := range heavy(30) {
		if got == ceilingMiB {
			t.Fatalf("collection %d at %d MiB/s, 30 s after the rise: the ceiling, want a paced limit", i, heavyAllocs)
		}
	}
	for i, got := range heavy(int(defaultPacerRise.Seconds())) {
		if i >= 150 && got != ceilingMiB {
			t.Fatalf("collection %d s after the rise at %d MiB/s: limit %d MiB, want the ceiling", 30+i, heavyAllocs, got)
		}
	}
	p.rate = pacedAllocs
	lims := p.feed(pacedCollections, 230, 230, 230, 230, 230, 230, 230, 230, 230, 230, 230, 230, 230, 230, 230, 230)
	if got, want := lims[len(lims)-1], steadyLimit(230); got != want {
		t.Fatalf("allocation slowed down: limit %d MiB, want %d", got, want)
	}

	// Heavy from the start: the ceiling as soon as the window is full.
	p = newTestPacer(math.MaxInt64)
	p.rate = heavyAllocs
	for i, got := range heavy(3 * heapPacerWindow) {
		if got != ceilingMiB {
			t.Fatalf("collection %d of a heavy start: limit %d MiB, want the ceiling", i, got)
		}
	}
}

// TestHeapPacerAllocationBurst: a few minutes of allocation several times
// the steady rate (an hour's flush, the engine's work around it) raise the
// paced headroom by far less than reading the rate at once does, and do
// not switch the pacer off even where GOGC alone would then collect more
// often than heapPacerMinInterval. --runtime.heap-pacer.rise=0 reads the
// window's rate at once, as before it was added.
func TestHeapPacerAllocationBurst(t *testing.T) {
	burst := func(rise time.Duration, rate uint64) (steady, highest int64) {
		p := newTestPacer(math.MaxInt64)
		p.rise = rise
		p.rate = 30
		p.steady(1000)
		steady = p.feed(pacedCollections, 1000)[0]
		p.rate = rate
		for _, got := range p.feed(pacedCollections, slices.Repeat([]uint64{1000}, int(4*time.Minute/pacedCollections))...) {
			highest = max(highest, got)
		}
		return steady, highest
	}
	// 120 MiB/s, four times the steady 30: read at once, the configured
	// 0.25 holds (collections every 2.1 s at it), 1,332 MiB; followed over
	// 10 minutes the rate is 60 MiB/s after the 4 minutes, 0.21, 1,292.
	steady, at := burst(0, 120)
	_, slow := burst(defaultPacerRise, 120)
	if want := steadyLimitAt(1000, 0.15); steady != want {
		t.Fatalf("steady limit %d MiB, want %d", steady, want)
	}
	if at != steadyLimitAt(1000, testHeadroom) {
		t.Fatalf("a burst read at once: highest limit %d MiB, want %d (the configured headroom)", at, steadyLimitAt(1000, testHeadroom))
	}
	if slow-steady > (at-steady)*2/3 {
		t.Fatalf("a burst followed slowly: highest limit %d MiB, want at most two thirds of the way from %d to %d", slow, steady, at)
	}
	// 200 MiB/s: GOGC 50 alone would collect the 1,000 MiB every 2.5 s.
	// Read at once the pacer steps aside; followed slowly it stays on.
	if _, at := burst(0, 200); at != ceilingMiB {
		t.Fatalf("a heavy burst read at once: highest limit %d MiB, want the ceiling", at)
	}
	if _, slow := burst(defaultPacerRise, 200); slow >= steadyLimitAt(1000, testHeadroom) {
		t.Fatalf("a heavy burst followed slowly: highest limit %d MiB, want below the configured headroom's %d", slow, steadyLimitAt(1000, testHeadroom))
	}
}

// TestHeapPacerDoesNotSwitchItselfOff: the paced limit makes collections
// come more often than heapPacerMinInterval; at the same allocation rate
// the pacer stays on, and its limit stays put.
func TestHeapPacerDoesNotSwitchItselfOff(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	p.steady(200)
	want := steadyLimit(200)
	for i := range 4 * heapPacerWindow {
		if got := p.feed(time.Second, 200)[0]; got != want {
			t.Fatalf("collection %d a second apart at %d MiB/s: limit %d MiB, want %d", i, pacedAllocs, got, want)
		}
	}
}

// TestHeapPacerSameCycle: reads between two collections record nothing, so
// a window is always heapPacerWindow collections, however often it is read.
func TestHeapPacerSameCycle(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	for range 3 * heapPacerWindow {
		p.now = p.now.Add(time.Second)
		p.observe(p.now, heapReading{cycles: 1, live: 300 * mib})
	}
	if p.n != 1 {
		t.Fatalf("%d collections recorded from one", p.n)
	}
}

// TestHeapPacerOff: --runtime.heap-pacer=false or GOGC=off leave the limit
// alone and export no pacer metrics; on, the pacer restores the configured
// limit when it stops.
func TestHeapPacerOff(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(123 * mib))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	t.Setenv("GOGC", "")
	for _, tc := range []struct {
		name   string
		policy memoryPolicy
		gogc   string
		on     bool
	}{
		{"on", memoryPolicy{gogc: 50, pacer: true, pacerHeadroom: testHeadroom}, "", true},
		{"flag off", memoryPolicy{gogc: 50, pacer: false}, "", false},
		{"GOGC=off", memoryPolicy{gogc: 50, pacer: true, pacerHeadroom: testHeadroom}, "off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GOGC", tc.gogc)
			reg := prometheus.NewRegistry()
			tc.policy.paceHeap(ctx, reg, nil)
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			if on := len(mfs) > 0; on != tc.on {
				t.Fatalf("pacer metrics exported: %v, want %v", on, tc.on)
			}
			if got := debug.SetMemoryLimit(-1); got != 123*mib {
				t.Fatalf("limit %d after the pacer, want the configured 123 MiB", got)
			}
		})
	}
}

// TestHeapPacerRareCollections: a large heap allocated slowly (many
// series, a long scrape interval) would be collected far apart at the
// configured headroom; the pacer trades some of that interval for memory.
// At 1,000 MiB and 30 MiB/s the configured 0.25 would collect every
// 8.3 s; the paced headroom is 0.25 x sqrt(3 s / 8.3 s) = 0.15, 150 MiB,
// collected every 5 s (the square root of 3 s x 8.3 s), and a burst's
// latest live heap keeps half of that above it, not half of 0.25.
func TestHeapPacerRareCollections(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	p.rate = 30
	p.steady(1000)
	want := steadyLimitAt(1000, 0.15) // 1,228 MiB
	if got := p.feed(pacedCollections, 1000)[0]; got != want {
		t.Fatalf("1,000 MiB at 30 MiB/s: limit %d MiB, want %d (headroom 0.15)", got, want)
	}
	// The paced headroom's bytes take 5 s to allocate: never more often
	// than heapPacerMinInterval.
	if every := float64(want-20)/(1+heapPacerMargin) - 1000; every/30 < p.interval.Seconds() {
		t.Fatalf("collections every %.1f s", every/30)
	}
	// A burst: 1,100 MiB live at a collection. Its floor, 1,100 x
	// (1 + 0.15/2) + 20 = 1,203 MiB, is below the steady limit; half of
	// the configured 0.25 would have raised it to 1,258.
	for i, got := range p.feed(pacedCollections, 1100, 1000, 1050, 1000) {
		if got != want {
			t.Fatalf("burst, collection %d: limit %d MiB, want %d", i, got, want)
		}
	}
}

// TestHeapPacerRareCollectionsFloor: however slowly the heap is allocated,
// the paced headroom is at least half the configured one (at most twice
// its collections, should a burst come).
func TestHeapPacerRareCollectionsFloor(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	p.rate = 1
	p.steady(1000)
	want := steadyLimitAt(1000, testHeadroom/heapPacerMinHeadroomDiv) // 1,202 MiB
	if got := p.feed(pacedCollections, 1000)[0]; got != want {
		t.Fatalf("1,000 MiB at 1 MiB/s: limit %d MiB, want %d (half the headroom)", got, want)
	}
}

// TestHeapPacerIntervalOff: --runtime.heap-pacer.interval=0 keeps the
// configured headroom however slowly the heap is allocated.
func TestHeapPacerIntervalOff(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	p.interval = 0
	p.rate = 30
	p.steady(1000)
	if got, want := p.feed(pacedCollections, 1000)[0], steadyLimitAt(1000, testHeadroom); got != want {
		t.Fatalf("1,000 MiB at 30 MiB/s, no interval: limit %d MiB, want %d (the configured headroom)", got, want)
	}
}

// TestHeapPacerFlagsValidated: a headroom of 0, a negative interval or rise is
// refused before anything is set.
func TestHeapPacerFlagsValidated(t *testing.T) {
	for _, m := range []memoryPolicy{
		{gogc: 50, ratio: 0.9, pacer: true, pacerHeadroom: 0},
		{gogc: 50, ratio: 0.9, pacer: true, pacerHeadroom: testHeadroom, pacerInterval: -time.Second},
		{gogc: 50, ratio: 0.9, pacer: true, pacerHeadroom: testHeadroom, pacerRise: -time.Second},
	} {
		if err := m.apply(memorySources{root: t.TempDir()}, slog.New(slog.DiscardHandler)); err == nil {
			t.Fatalf("%+v: no error", m)
		}
	}
}

// TestHeapPacerHeld: while held (the server is queried) the pacer steps
// aside for the configured limit, and it paces again, from the window it
// kept recording, as soon as the hold ends.
func TestHeapPacerHeld(t *testing.T) {
	p := newTestPacer(math.MaxInt64)
	held := false
	p.held = func(time.Time) bool { return held }
	p.steady(200)
	if got := p.feed(pacedCollections, 200)[0]; got != steadyLimit(200) {
		t.Fatalf("not held: limit %d MiB, want %d", got, steadyLimit(200))
	}
	held = true
	for i, got := range p.feed(pacedCollections, 200, 250, 220) {
		if got != ceilingMiB || p.paced != 0 {
			t.Fatalf("held, collection %d: limit %d MiB (headroom %v), want the ceiling", i, got, p.paced)
		}
	}
	held = false
	if got := p.feed(pacedCollections, 200)[0]; got != steadyLimit(200) {
		t.Fatalf("hold over: limit %d MiB, want %d", got, steadyLimit(200))
	}
}
