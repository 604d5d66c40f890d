package downsample

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/strata-dev/strata/tiers"
)

// sameWindow reports whether a and b are equal bit for bit (NaN included).
func sameWindow(a, b tiers.Window) bool {
	return a.Start == b.Start && a.FirstT == b.FirstT && a.LastT == b.LastT &&
		a.Count == b.Count && a.Resets == b.Resets && a.Stale == b.Stale &&
		sameBits(a.First, b.First) && sameBits(a.Last, b.Last) && sameBits(a.Min, b.Min) &&
		sameBits(a.Max, b.Max) && sameBits(a.Sum, b.Sum) && sameBits(a.Increase, b.Increase)
}

// encodeBlock encodes ws as one block of hour h.
func encodeBlock(h int64, ws []tiers.Window) []byte {
	c := windowCodec{h: h}
	var b []byte
	for _, w := range ws {
		b = c.appendWindow(b, w)
	}
	return b
}

// decodeBlock decodes n windows of hour h and reports whether b had
// exactly their bytes.
func decodeBlock(h int64, b []byte, n int) ([]tiers.Window, error) {
	d := newSpillReader(bufio.NewReader(bytes.NewReader(b)), windowCodec{h: h})
	out := make([]tiers.Window, 0, n)
	for range n {
		w := d.window()
		if d.Err != nil {
			return out, d.Err
		}
		out = append(out, w)
	}
	if _, err := d.R.ReadByte(); err == nil {
		return out, errors.New("bytes left after the block's windows")
	}
	return out, nil
}

func TestSpillWindowCodec(t *testing.T) {
	const h = int64(1_796_180_400_000)
	nan := math.NaN()
	cases := []struct {
		name string
		w    tiers.Window
	}{
		{"counter, 1 Hz", tiers.Window{Start: h + 5*MinuteRes, FirstT: h + 5*MinuteRes + 431, LastT: h + 6*MinuteRes - 569, Count: 60,
			First: 34510, Last: 34615, Min: 34510, Max: 34615, Sum: 2_073_123, Increase: 105}},
		{"same fields as the previous window", tiers.Window{Start: h + 5*MinuteRes, FirstT: h + 5*MinuteRes + 431, LastT: h + 6*MinuteRes - 569, Count: 60,
			First: 56492, Last: 56699, Min: 56492, Max: 56699, Sum: 3_395_880, Increase: 207}},
		{"gauge, fractional", tiers.Window{Start: h + 59*MinuteRes, FirstT: h + 59*MinuteRes, LastT: h + 59*MinuteRes + 45_000, Count: 4,
			First: 0.4537, Last: 0.4012, Min: 0.3999, Max: 0.6125, Sum: 1.8673, Increase: 0.4012 - 0.4537}},
		{"counter reset, increase not derived", tiers.Window{Start: h, FirstT: h + 1, LastT: h + 59_999, Count: 1 << 31, Resets: 3,
			First: 1e300, Last: 2, Min: 0, Max: 1e300, Sum: math.Inf(1), Increase: 12.5}},
		{"NaN and signed zeros", tiers.Window{Start: h + MinuteRes, FirstT: h + MinuteRes + 7, LastT: h + MinuteRes + 7, Count: 1,
			First: math.Copysign(0, -1), Last: 0, Min: nan, Max: math.Float64frombits(0x7ff8000000000001), Sum: nan, Increase: nan}},
		{"gauge, increase +0", tiers.Window{Start: h + 59*MinuteRes, FirstT: h + 59*MinuteRes + 20, LastT: h + 59*MinuteRes + 45_020, Count: 4,
			First: 61, Last: 64, Min: 61, Max: 65, Sum: 251}},
		{"gauge, increase -0", tiers.Window{Start: h + 59*MinuteRes, FirstT: h + 59*MinuteRes + 20, LastT: h + 59*MinuteRes + 45_020, Count: 4,
			First: 61, Last: 64, Min: 61, Max: 65, Sum: 251, Increase: math.Copysign(0, -1)}},
		{"stale, one sample", tiers.Window{Start: h + 2*MinuteRes, FirstT: h + 2*MinuteRes + 1000, LastT: h + 2*MinuteRes + 1000, Count: 1,
			First: -7, Last: -7, Min: -7, Max: -7, Sum: -7, Stale: true}},
		{"extremes", tiers.Window{Start: h + 3*MinuteRes, FirstT: h + 3*MinuteRes, LastT: h + 4*MinuteRes - 1, Count: math.MaxUint32, Resets: math.MaxUint32,
			First: math.SmallestNonzeroFloat64, Last: math.MaxFloat64, Min: math.Inf(-1), Max: math.Inf(1), Sum: -math.MaxFloat64, Increase: math.Float64frombits(1)}},
	}
	var all []tiers.Window
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeBlock(h, encodeBlock(h, []tiers.Window{c.w}), 1)
			if err != nil {
				t.Fatal(err)
			}
			if !sameWindow(got[0], c.w) {
				t.Errorf("decoded %+v\n want %+v", got[0], c.w)
			}
		})
		all = append(all, c.w)
	}
	// In one block each window is encoded against the one before.
	all = append(all, all...)
	checkBlock(t, h, encodeBlock(h, all), all)
}

// checkBlock decodes block b of partition h and compares it, window for
// window and bit for bit, with want.
func checkBlock(t *testing.T, h int64, b []byte, want []tiers.Window) {
	t.Helper()
	got, err := decodeBlock(h, b, len(want))
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !sameWindow(got[i], want[i]) {
			t.Fatalf("window %d in a block: decoded %+v\n want %+v", i, got[i], want[i])
		}
	}
}

// TestSpillWindowSize: a minute of a 1 Hz fleet of integer-valued counters
// (irregular increments) in one block, as the tick writes it, takes at most
// 13.5 bytes a window: 32.75 in format version 1 (8 for each of Last, First
// and Sum, up to 3 for each time offset), 15.79 in version 2 (17.84 with Sum
// encoded against 0 instead of sumRef), 12.96 in version 3 (Last against the
// previous window's, one flag byte where both repeat).
func TestSpillWindowSize(t *testing.T) {
	const (
		h      = int64(1_796_180_400_000)
		series = 1000
	)
	ws := make([]tiers.Window, series)
	for i := range ws {
		bl := newBuilder(MinuteRes, KindCounter)
		v := float64(10_000 + 97*i)
		for s := range 60 {
			bl.add(h+10*MinuteRes+int64(i%4)*250+int64(s)*1000, v)
			v += float64((i*7 + s*s*13) % 97)
		}
		ws[i] = bl.finish()
	}
	b := encodeBlock(h, ws)
	if per := float64(len(b)) / series; per > 13.5 {
		t.Errorf("%.2f bytes a window, want at most 13.5", per)
	}
	checkBlock(t, h, b, ws)
}

// TestSpillFlagsRepeat: a window whose flag bytes are the previous
// window's writes one byte for both, and a first flag byte that no window
// has (Min equal to both First and Last, or Max) is corrupt.
func TestSpillFlagsRepeat(t *testing.T) {
	const h = int64(1_796_180_400_000)
	w := tiers.Window{Start: h + MinuteRes, FirstT: h + MinuteRes + 20, LastT: h + MinuteRes + 45_020, Count: 4,
		First: 10, Last: 14, Min: 10, Max: 14, Sum: 48, Increase: 4}
	one := encodeBlock(h, []tiers.Window{w})
	two := encodeBlock(h, []tiers.Window{w, w})
	three := encodeBlock(h, []tiers.Window{w, w, w})
	second, third := two[len(one):], three[len(two):]
	if third[0] != flagsRepeat || len(third) != len(second)-1 {
		t.Errorf("the same window a third time: % x after % x, want the flag bytes as one byte %#x", third, second, flagsRepeat)
	}
	checkBlock(t, h, three, []tiers.Window{w, w, w})
	for _, f := range []byte{flagMinIsFirst | flagMinIsLast | flagStale, flagMaxIsFirst | flagMaxIsLast} {
		if _, err := decodeBlock(h, append([]byte{f, 0}, one[2:]...), 1); !errors.Is(err, errCorruptSpill) {
			t.Errorf("flags %#x: %v, want a corrupt spill", f, err)
		}
	}
}

// FuzzSpillWindow: any window survives the spill bit for bit, and no input
// makes the decoder panic.
func FuzzSpillWindow(f *testing.F) {
	f.Add(uint8(3), uint32(431), uint32(59_000), uint32(60), uint32(0), uint64(0x40e0e6e000000000), uint64(0x40e0d9c000000000), uint64(0), uint64(0x413fa1a300000000), false, []byte{0x7f, 0, 1})
	f.Fuzz(func(t *testing.T, minute uint8, firstOff, span, count, resets uint32, last, first, minmax, sum uint64, stale bool, junk []byte) {
		const h = int64(1_796_180_400_000)
		start := h + int64(minute%60)*MinuteRes
		w := tiers.Window{Start: start, FirstT: start + int64(firstOff), LastT: start + int64(firstOff) + int64(span), Count: count, Resets: resets,
			Last: math.Float64frombits(last), First: math.Float64frombits(first), Min: math.Float64frombits(minmax),
			Max: math.Float64frombits(minmax ^ last), Sum: math.Float64frombits(sum), Increase: math.Float64frombits(sum ^ first), Stale: stale}
		ws := []tiers.Window{w, w, {Start: start, FirstT: start, LastT: start, Count: 1, Last: w.Sum, First: w.Sum, Min: w.Sum, Max: w.Sum, Sum: w.Sum}}
		got, err := decodeBlock(h, encodeBlock(h, ws), len(ws))
		if err != nil {
			t.Fatal(err)
		}
		for i := range ws {
			if !sameWindow(got[i], ws[i]) {
				t.Fatalf("window %d: decoded %+v\n want %+v", i, got[i], ws[i])
			}
		}
		// Arbitrary bytes decode or fail, never panic.
		_, _ = decodeBlock(h, junk, 4)
	})
}

// TestSpillFileVersion: a spill file starts with its format version, and
// spills a previous process left (version 1 had no header) are removed when
// a pipeline starts, their hours recomputed from raw.
func TestSpillFileVersion(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "1796180400000.windows")
	if err := os.WriteFile(old, binary.AppendUvarint(nil, 7), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.SpillDir = dir
	p, err := New(cfg, openTestRaw(t), newMemTier(MinuteRes, HourRes), newMemTier(HourRes, DayLen), nil, prometheus.NewRegistry(), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Fatalf("leftover spill not removed: %v", err)
	}
	sp, err := p.newSpill(1_796_184_000_000, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sp.f.remove(); err != nil {
			t.Error(err)
		}
	}()
	head := make([]byte, len(spillHeader))
	if _, err := sp.f.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if string(head) != spillHeader || sp.size != int64(len(spillHeader)) {
		t.Errorf("spill starts with %q (size %d), want %q", head, sp.size, spillHeader)
	}
}

// BenchmarkSpillBlock encodes and decodes one tick's block as the tee
// writes it: a minute of newFleet's 10,000 series (60 % noisy
// full-precision gauges, 40 % integer counters), in partition order,
// scraped every second (senders' phases 100 ms apart) or every 15 seconds
// (phases spread over the interval, as bench's paced load and Prometheus
// spread them).
func BenchmarkSpillBlock(b *testing.B) {
	b.Run("1s", func(b *testing.B) { benchmarkSpillBlock(b, 1000, 100) })
	b.Run("15s", func(b *testing.B) { benchmarkSpillBlock(b, 15_000, 15_000/7) })
}

func benchmarkSpillBlock(b *testing.B, interval, phase int64) {
	const series = 10_000
	h := time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC).UnixMilli()
	f := newFleet(series)
	ws := make([]tiers.Window, series)
	for i := range series {
		kind := KindCounter
		if f.gauge[i] {
			kind = KindGauge
		}
		bl := newBuilder(MinuteRes, kind)
		off := int64(i%7) * phase
		for t := h + 5*MinuteRes + off; t < h+6*MinuteRes; t += interval {
			bl.add(t, f.next(i))
		}
		ws[i] = bl.finish()
	}
	order := make([]int, series)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, c int) int {
		return tiers.ComparePartitionOrder(f.labels[a], tiers.SeriesID(f.labels[a]), f.labels[c], tiers.SeriesID(f.labels[c]))
	})
	sorted := make([]tiers.Window, series)
	for i, k := range order {
		sorted[i] = ws[k]
	}
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf = buf[:0]
		c := windowCodec{h: h}
		for i, w := range sorted {
			buf = binary.AppendUvarint(buf, uint64(order[i]))
			buf = c.appendWindow(buf, w)
		}
		d := newSpillReader(bufio.NewReaderSize(bytes.NewReader(buf), 8<<10), windowCodec{h: h})
		for range series {
			d.Uvarint()
			d.window()
		}
		if d.Err != nil {
			b.Fatal(d.Err)
		}
	}
	b.SetBytes(int64(len(buf)))
	b.ReportMetric(float64(len(buf))/series, "B/window")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/series, "ns/window")
}

// TestSpillEntryRoundTrip: a minute window comes back from its spill entry
// unchanged, at the bounds a minute window can reach (a sample every
// millisecond, every one a reset, offsets up to 59,999 ms, a minute before
// the epoch, NaN and infinite values) and the entry is 72 bytes.
func TestSpillEntryRoundTrip(t *testing.T) {
	if n := unsafe.Sizeof(spillEntry{}); n != 72 {
		t.Errorf("spillEntry is %d bytes, want 72", n)
	}
	for _, w := range []tiers.Window{
		{Start: 0, FirstT: 0, LastT: MinuteRes - 1, Count: 60000, Resets: 59999, Sum: 1, Min: -1, Max: 2, First: 3, Last: 4, Increase: 5, Stale: true},
		{Start: -MinuteRes, FirstT: -MinuteRes + 7, LastT: -1, Count: 2, Sum: math.NaN(), Min: math.Inf(-1), Max: math.Inf(1), First: math.Copysign(0, -1), Last: 0, Increase: math.NaN()},
		{Start: 1_767_225_600_000, FirstT: 1_767_225_600_000, LastT: 1_767_225_600_000, Count: 1, Sum: 0.1, Min: 0.1, Max: 0.1, First: 0.1, Last: 0.1},
	} {
		e := newSpillEntry(7, w)
		if got := e.window(); !sameWindow(got, w) || e.slot != 7 {
			t.Errorf("round trip of %+v: %+v (slot %d)", w, got, e.slot)
		}
	}
}
