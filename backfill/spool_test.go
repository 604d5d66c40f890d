package backfill

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/internal/timegrid"
)

// textOf renders series in the Prometheus text format (millisecond
// timestamps), each series' samples together as `promtool tsdb
// dump-openmetrics` writes them, series in the order given.
func textOf(series []Series) string {
	var b strings.Builder
	for _, s := range series {
		name := s.Labels.Get(model.MetricNameLabel)
		var ls []string
		s.Labels.Range(func(l labels.Label) {
			if l.Name != model.MetricNameLabel {
				ls = append(ls, l.Name+"="+strconv.Quote(l.Value))
			}
		})
		for _, x := range s.Samples {
			fmt.Fprintf(&b, "%s{%s} %s %d\n", name, strings.Join(ls, ","), strconv.FormatFloat(x.V, 'g', -1, 64), x.T)
		}
	}
	return b.String()
}

// spoolInput is a day and a half of 40 series of 30 s, some samples out of
// order, some timestamps twice (the last one given wins), a series that
// starts late, its lines split over two inputs at the given line.
func spoolInput(seed uint64) (a, b string) {
	r := rand.New(rand.NewPCG(seed, 1))
	var series []Series
	start := histStart + 17_345
	for i := range 40 {
		s := Series{Labels: labels.FromStrings(model.MetricNameLabel, "gpu_util", "gpu", strconv.Itoa(i%8), "host", "h"+strconv.Itoa(i/8))}
		from := start
		if i == 39 {
			from = start + 20*hour
		}
		for ts := from; ts < start+36*hour; ts += 30_000 {
			s.Samples = append(s.Samples, Sample{T: ts, V: float64(r.IntN(100))})
			if r.IntN(50) == 0 { // the same timestamp again
				s.Samples = append(s.Samples, Sample{T: ts, V: r.Float64()})
			}
		}
		// A few swapped neighbours: samples out of order.
		for range 20 {
			j := r.IntN(len(s.Samples) - 1)
			s.Samples[j], s.Samples[j+1] = s.Samples[j+1], s.Samples[j]
		}
		series = append(series, s)
	}
	text := textOf(series)
	lines := strings.SplitAfter(text, "\n")
	cut := len(lines) * 2 / 3
	return strings.Join(lines[:cut], ""), strings.Join(lines[cut:], "")
}

// TestSpoolReadEqualsParseText: whatever range is read, the spool gives
// what a reader of ParseText's series gives (after normalize: the same
// samples, the last of a timestamp's the same), its buffers written often
// or never, the input in one part or two.
func TestSpoolReadEqualsParseText(t *testing.T) {
	a, b := spoolInput(7)
	parsed, err := ParseText([]byte(a+b), "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	ref := &sliceReader{input: parsed}
	var total int
	for _, s := range parsed {
		total += len(s.Samples)
	}
	for _, tc := range []struct {
		name           string
		hour, buffered int
	}{{"defaults", spoolHourBuffer, spoolBuffered}, {"small hour buffers", 10 * spoolRecord, 1 << 30}, {"small total", 1 << 20, 1000}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSpool(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Close(); err != nil {
					t.Error(err)
				}
				if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
					t.Errorf("spool directory left: %v", err)
				}
			}()
			s.hourBuffer, s.bufferLimit = tc.hour, tc.buffered
			if err := s.AddText([]byte(a), "text/plain"); err != nil {
				t.Fatal(err)
			}
			if err := s.AddText([]byte(b), "text/plain"); err != nil {
				t.Fatal(err)
			}
			mint, maxt, ok := s.Range()
			if s.Series() != len(parsed) || s.Samples() != total || !ok {
				t.Fatalf("%d series, %d samples, want %d, %d", s.Series(), s.Samples(), len(parsed), total)
			}
			for _, rg := range [][2]int64{
				{mint, maxt + 1},
				{histStart, histStart + hour},
				{histStart + 5*hour + 17, histStart + 6*hour + 29_999}, // across an hour, unaligned
				{histStart + 20*hour, histStart + 44*hour},
				{histStart - day, histStart}, // nothing
			} {
				got, err := s.Read(context.Background(), rg[0], rg[1])
				if err != nil {
					t.Fatal(err)
				}
				want, _ := ref.read(context.Background(), rg[0], rg[1])
				if !sameInput(got, want) {
					t.Fatalf("[%s, %s): %d series read, want %d", fmtMs(rg[0]), fmtMs(rg[1]), len(got), len(want))
				}
			}
			first := timegrid.Floor(mint, hour)
			n := 0
			for _, x := range parsed {
				for _, y := range x.Samples {
					if y.T < first+10*hour {
						n++
					}
				}
			}
			if got := s.SamplesBefore(first + 10*hour); got != n {
				t.Errorf("SamplesBefore = %d, want %d", got, n)
			}
		})
	}
}

// sameInput reports whether got and want hold the same series and, once
// normalized (sorted, the last of a timestamp kept), the same samples.
func sameInput(got, want []Series) bool {
	return slices.EqualFunc(normalized(got), normalized(want), func(a, b Series) bool {
		return labels.Equal(a.Labels, b.Labels) && slices.Equal(a.Samples, b.Samples)
	})
}

// TestSpoolAddFile: files are read through a mapping that is let go of
// behind the parser (more than one release for a file of 2 MB), with the
// content type from the name or the "# EOF" at the end; an empty file adds
// nothing; a missing file or a directory is an error naming it.
func TestSpoolAddFile(t *testing.T) {
	a, b := spoolInput(11)
	dir := t.TempDir()
	prom := filepath.Join(dir, "history.prom")
	if err := os.WriteFile(prom, []byte(a+b), 0o600); err != nil {
		t.Fatal(err)
	}
	// OpenMetrics has second timestamps; the same samples, found by the
	// "# EOF" in a file without the extension.
	var om strings.Builder
	parsed, err := ParseText([]byte(a+b), "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.SplitAfter(textOf(parsed[:3]), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			ms, _ := strconv.ParseInt(f[2], 10, 64)
			fmt.Fprintf(&om, "%s %s %s\n", f[0], f[1], strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64))
		}
	}
	om.WriteString("# EOF\n")
	omFile := filepath.Join(dir, "other.txt")
	if err := os.WriteFile(omFile, []byte(om.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.prom")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	s, err := NewSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var calls, last int
	if err := s.AddFile(context.Background(), prom, func(done, size int) { calls, last = calls+1, done }); err != nil {
		t.Fatal(err)
	}
	if calls < 3 || last != len(a+b) {
		t.Errorf("%d progress calls, the last at %d of %d", calls, last, len(a+b))
	}
	if err := s.AddFile(context.Background(), empty, nil); err != nil {
		t.Fatal(err)
	}
	n := s.Samples()
	if err := s.AddFile(context.Background(), omFile, nil); err != nil {
		t.Fatal(err)
	}
	// The OpenMetrics file repeats three series' samples: the same series,
	// the same timestamps.
	if s.Series() != len(parsed) || s.Samples() <= n {
		t.Errorf("%d series (want %d), %d samples after %d", s.Series(), len(parsed), s.Samples(), n)
	}
	got, err := s.Read(context.Background(), histStart-day, histStart+3*day)
	if err != nil {
		t.Fatal(err)
	}
	ref := &sliceReader{input: parsed}
	want, _ := ref.read(context.Background(), histStart-day, histStart+3*day)
	if !sameInput(got, want) {
		t.Errorf("the files read back differ from ParseText's series")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.AddFile(ctx, prom, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled parse: %v", err)
	}
	for _, bad := range []string{filepath.Join(dir, "missing.prom"), dir} {
		if err := s.AddFile(context.Background(), bad, nil); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("AddFile(%s): %v", bad, err)
		}
	}
	garbage := filepath.Join(dir, "garbage.prom")
	if err := os.WriteFile(garbage, []byte("x 1 1000\nnot a line {{{\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.AddFile(context.Background(), garbage, nil); err == nil || !strings.Contains(err.Error(), garbage) {
		t.Errorf("garbage: %v", err)
	}
}

// TestRunSlicedSpoolEqualsRun: three days of history written as text, then
// imported from a spool in slices, give what Run gives for ParseText's
// series of the same text.
func TestRunSlicedSpoolEqualsRun(t *testing.T) {
	now := histEnd + 15*minute
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(now) }
	text := []byte(textOf(streamInput(histStart, histEnd)))
	input, err := ParseText(text, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	ref := openEnv(t, true)
	want, err := Run(context.Background(), cfg, input, ref.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ref.raw = reopenRaw(t, ref.raw)

	e := openEnv(t, true)
	s, err := NewSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AddText(text, "text/plain"); err != nil {
		t.Fatal(err)
	}
	mint, maxt, _ := s.Range()
	got, err := RunSliced(context.Background(), cfg, s.Read, mint, maxt+1, 2*time.Hour, e.targets(), nil)
	if err != nil {
		t.Fatal(err)
	}
	got.Phase, got.Done, got.Total = want.Phase, want.Done, want.Total
	if got != want {
		t.Errorf("RunSliced from the spool\n%+v\nRun\n%+v", got, want)
	}
	sameRollups(t, ref, e)
	e.raw = reopenRaw(t, e.raw)
	if a, b := rawDump(t, ref.raw), rawDump(t, e.raw); a != b {
		t.Errorf("raw holds\n%.2000s\nwant\n%.2000s", b, a)
	}
}

// TestSpoolBuffersBounded: a file that sweeps many hours series after
// series (as a year's dump does) holds at most the buffer limit in its
// hours' buffers, and none of its samples are lost when they are let go of.
func TestSpoolBuffersBounded(t *testing.T) {
	s, err := NewSpool(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.hourBuffer, s.bufferLimit = 4<<10, 64<<10
	const hours, series, perHour = 500, 20, 6
	highest := 0
	for i := range series {
		if s.seriesIndex(labels.FromStrings(model.MetricNameLabel, "x", "i", strconv.Itoa(i))) != i {
			t.Fatal("series index")
		}
		for hr := range int64(hours) {
			for k := range int64(perHour) {
				if err := s.sample(i, histStart+hr*hour+k*10*minute, float64(i)); err != nil {
					t.Fatal(err)
				}
			}
			held := 0
			for _, h := range s.hours {
				held += cap(h.buf)
			}
			highest = max(highest, held)
		}
	}
	if highest > s.bufferLimit+s.hourBuffer {
		t.Errorf("the buffers held %d bytes, the limit is %d", highest, s.bufferLimit)
	}
	got, err := s.Read(context.Background(), histStart, histStart+hours*hour)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, x := range got {
		n += len(x.Samples)
	}
	if len(got) != series || n != series*hours*perHour {
		t.Errorf("read %d series, %d samples", len(got), n)
	}
}

// TestSpoolAddGzipFile: a .gz file is read as the file it compresses (its
// type from the name under the .gz), its decompressed copy removed after;
// a file that is not gzip is an error naming it.
func TestSpoolAddGzipFile(t *testing.T) {
	a, b := spoolInput(13)
	dir := t.TempDir()
	gz := func(name, text string) string {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write([]byte(text)); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, buf.Bytes(), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain, err := NewSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.AddText([]byte(a+b), "text/plain"); err != nil {
		t.Fatal(err)
	}
	s, err := NewSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AddFile(context.Background(), gz("history.prom.GZ", a+b), nil); err != nil {
		t.Fatal(err)
	}
	// An OpenMetrics file without "# EOF" fails as OpenMetrics: its type
	// came from the name under .gz.
	if err := s.AddFile(context.Background(), gz("broken.om.gz", "g 1 1\n"), nil); err == nil || !strings.Contains(err.Error(), "EOF") {
		t.Errorf("an OpenMetrics file without # EOF: %v", err)
	}
	notGzip := filepath.Join(dir, "plain.prom.gz")
	if err := os.WriteFile(notGzip, []byte(a), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.AddFile(context.Background(), notGzip, nil); err == nil || !strings.Contains(err.Error(), notGzip) {
		t.Errorf("not gzip: %v", err)
	}
	if left, _ := filepath.Glob(filepath.Join(s.dir, "input-*")); len(left) != 0 {
		t.Errorf("decompressed copies left: %v", left)
	}
	mint, maxt, _ := plain.Range()
	want, err := plain.Read(context.Background(), mint, maxt+1)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Read(context.Background(), mint, maxt+1)
	if err != nil {
		t.Fatal(err)
	}
	if !sameInput(got, want) {
		t.Errorf("the gzip file read back differs from its text")
	}
}

// TestSpoolFingerprint: the spool's fingerprint, a backfill's InputID,
// does not depend on the order of the files, and changes with the series,
// with a sample more, and with a sample moved to another hour.
func TestSpoolFingerprint(t *testing.T) {
	const (
		a = "x{i=\"1\"} 1 1772341200000\nx{i=\"1\"} 2 1772341230000\n"
		b = "x{i=\"2\"} 1 1772341200000\n"
	)
	fp := func(texts ...string) string {
		t.Helper()
		s, err := NewSpool(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, x := range texts {
			if err := s.AddText([]byte(x), "text/plain"); err != nil {
				t.Fatal(err)
			}
		}
		return s.Fingerprint()
	}
	ab := fp(a, b)
	if ba := fp(b, a); ba != ab {
		t.Errorf("files in another order: %s, want %s", ba, ab)
	}
	for name, texts := range map[string][]string{
		"another series":         {a, "x{i=\"3\"} 1 1772341200000\n"},
		"a sample more":          {a, b, "x{i=\"2\"} 5 1772341260000\n"},
		"a sample an hour later": {a, "x{i=\"2\"} 1 1772344800000\n"},
	} {
		if got := fp(texts...); got == ab {
			t.Errorf("%s: the same fingerprint %s", name, got)
		}
	}
}

// TestRemoveSpools: the spools of imports killed before their end are
// removed, with their bytes counted; the spool kept, other directories and
// files are not touched.
func TestRemoveSpools(t *testing.T) {
	dir := t.TempDir()
	left, err := NewSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := left.AddText([]byte("x 1 1772341200000\nx 2 1772341230000\n"), "text/plain"); err != nil {
		t.Fatal(err)
	}
	if err := left.flush(); err != nil {
		t.Fatal(err)
	}
	kept, err := NewSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer kept.Close()
	other := filepath.Join(dir, "hour-build-1.windows")
	if err := os.WriteFile(other, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	n, bytes, err := RemoveSpools(dir, kept.Dir())
	if err != nil || n != 1 || bytes != 2*spoolRecord {
		t.Errorf("RemoveSpools = %d, %d bytes, %v; want 1, %d bytes", n, bytes, err, 2*spoolRecord)
	}
	for _, p := range []string{kept.Dir(), other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(left.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the leftover spool is still there: %v", err)
	}
	if n, _, err := RemoveSpools(filepath.Join(dir, "none"), ""); n != 0 || err != nil {
		t.Errorf("RemoveSpools of a missing directory = %d, %v", n, err)
	}
}
