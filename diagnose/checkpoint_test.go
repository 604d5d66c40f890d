package diagnose

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// TestBaselineCheckpoint: a start restores the tracker from the newest
// usable checkpoint at or before its first minute and reads back only the
// minutes after it, and ends with the state, to the bit, of a start that
// read the whole history back. A state at or before the minutes to write
// again comes first; a read-only start (replay) writes nothing; version-1
// files are read. A torn state, a missing summary file and other rules or
// hours held each fall back, to an older state or to the whole read-back;
// other baseline parameters (k) do in a replay, not in a live start.
func TestBaselineCheckpoint(t *testing.T) {
	if testing.Short() {
		t.Skip("evaluates two and a half hours and reads back four hours several times")
	}
	minute, end := fourHours(t)
	tm := end.Add(-7 * time.Minute)
	dir := t.TempDir()
	ctx := context.Background()

	// A run that starts 90 minutes in and evaluates every minute up to tm:
	// its read-back passes the first hour, its live minutes the next two.
	live, err := New(DefaultConfig(), Options{Minute: minute, BaselineDir: dir, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for m := simStart.Add(90 * time.Minute); m.Before(tm); m = m.Add(time.Minute) {
		if err := live.EvalMinute(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	ck := live.base.ckpt
	hour := func(i int) int64 { return simStart.Add(time.Duration(i)*time.Hour).Unix() / 3600 }
	for i := 1; i <= 3; i++ {
		if _, err := os.Stat(ck.statePath(hour(i))); err != nil {
			t.Fatalf("no state before hour %d: %v", i, err)
		}
		if _, err := os.Stat(ck.summaryPath(hour(i - 1))); err != nil {
			t.Fatalf("no summaries of hour %d: %v", i-1, err)
		}
	}

	whole, err := New(DefaultConfig(), Options{Minute: minute, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if err := whole.bootstrap(ctx, tm.UnixMilli()); err != nil {
		t.Fatal(err)
	}
	want := trackerState(t, whole)

	// start bootstraps an engine at tm and returns the first minute its
	// read-back read and its state.
	startIn := func(dir string, cfg Config, readOnly bool) (time.Time, string) {
		t.Helper()
		open := &failingOpen{}
		e, err := New(cfg, Options{Minute: minute, Open: open, BaselineDir: dir, BaselineReadOnly: readOnly, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.bootstrap(ctx, tm.UnixMilli()); err != nil {
			t.Fatal(err)
		}
		if len(open.starts) == 0 {
			t.Fatal("nothing read back")
		}
		return time.UnixMilli(open.starts[0] + e.need).UTC(), trackerState(t, e)
	}
	start := func(cfg Config, readOnly bool) (time.Time, string) {
		t.Helper()
		return startIn(dir, cfg, readOnly)
	}
	check := func(what string, hours int) {
		t.Helper()
		from, got := start(DefaultConfig(), false)
		if wantFrom := simStart.Add(time.Duration(hours) * time.Hour); !from.Equal(wantFrom) {
			t.Fatalf("%s: read back from %s, want %s", what, from, wantFrom)
		}
		if got != want {
			t.Fatalf("%s: the restored baselines differ from the whole read-back's:\n%s", what, firstDiff(got, want))
		}
	}
	check("the newest state", 3)
	// Version-1 files (one fingerprint of everything) are read.
	v1 := t.TempDir()
	toVersion1(t, dir, v1, ck.fp.v1)
	if from, got := startIn(v1, DefaultConfig(), true); !from.Equal(simStart.Add(3*time.Hour)) || got != want {
		t.Fatalf("version 1: read back from %s, want %s; same baselines: %v", from, simStart.Add(3*time.Hour), got == want)
	}
	// A state at or before the first minute whose baselines are written
	// again comes first, newer or not.
	fresh := newTracker(live.cfg.Baseline, nil)
	if c, ok := ck.restore(fresh, 0, tm.UnixMilli(), hour(2)*hourMs+(30*time.Minute).Milliseconds()); !ok || c != hour(2)*hourMs {
		t.Fatalf("restored the state before %s (%v), want the one before hour 2, at or before the minutes to write again", fmtMs(c), ok)
	}

	newest := ck.statePath(hour(3))
	b, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(newest, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	check("a torn newest state", 2)

	if err := os.Remove(ck.summaryPath(hour(1))); err != nil {
		t.Fatal(err)
	}
	check("the summaries of an hour missing", 1)

	// Read-only (replay): restores, and writes nothing as it passes hours.
	for _, h := range []int64{hour(2), hour(3)} {
		if err := os.Remove(ck.statePath(h)); err != nil {
			t.Fatal(err)
		}
	}
	from, got := start(DefaultConfig(), true)
	if wantFrom := simStart.Add(time.Hour); !from.Equal(wantFrom) || got != want {
		t.Fatalf("read-only: read back from %s, want %s; same baselines: %v", from, wantFrom, got == want)
	}
	for _, h := range []int64{hour(2), hour(3)} {
		if _, err := os.Stat(ck.statePath(h)); err == nil {
			t.Fatalf("a read-only start wrote %s", filepath.Base(ck.statePath(h)))
		}
	}

	// Other baseline parameters: a replay reads the whole history back
	// with its own, a live start restores and applies its own from then on.
	cfg := DefaultConfig()
	cfg.Baseline.K = 2.5
	cfg.Baseline.SigmaFloor = 0.05
	if from, _ := start(cfg, true); !from.Equal(simStart) {
		t.Fatalf("read-only with other parameters: read back from %s, want the history's start %s", from, simStart)
	}
	if from, _ := start(cfg, false); !from.Equal(simStart.Add(time.Hour)) {
		t.Fatalf("live with other parameters: read back from %s, want the state before %s", from, simStart.Add(time.Hour))
	}
	// Other rules or hours held: neither restores.
	cfg = DefaultConfig()
	cfg.Baseline.LevelShiftAfter = model.Duration(4 * time.Hour)
	if from, _ := start(cfg, false); !from.Equal(simStart) {
		t.Fatalf("other level-shift hours: read back from %s, want the history's start %s", from, simStart)
	}
}

// toVersion1 writes into dst the checkpoint files of src as version 1
// wrote them: one fingerprint (fp) where version 2 has the data's and,
// in a state, the parameters', and no series listed by labels.
func toVersion1(t *testing.T, src, dst string, fp uint64) {
	t.Helper()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range ents {
		b, err := os.ReadFile(filepath.Join(src, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := zstd.NewReader(bytes.NewReader(b[8:]))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(zr)
		zr.Close()
		if err != nil {
			t.Fatal(err)
		}
		skip := 8 // the data's fingerprint
		if strings.HasPrefix(de.Name(), "state-") {
			skip = 16 // and the parameters'
		} else if body[len(body)-1] == 0 {
			body = body[:len(body)-1] // no series listed by labels
		} else {
			t.Fatalf("%s lists series by labels: version 1 cannot", de.Name())
		}
		out := append(binary.LittleEndian.AppendUint64(nil, fp), body[skip:]...)
		zw, err := zstd.NewWriter(nil)
		if err != nil {
			t.Fatal(err)
		}
		file := append(append(b[:7:7], 1), zw.EncodeAll(out, nil)...)
		if err := os.WriteFile(filepath.Join(dst, de.Name()), file, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckpointRetention: as hours pass, the newest states are kept with
// the summaries they need; the rest is removed.
func TestCheckpointRetention(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig().Baseline
	cfg.History = model.Duration(48 * time.Hour)
	tr := newTracker(cfg, nil)
	tr.ckpt = newCheckpointer(dir, fingerprints{data: 1}, 3, quietLogger(), nil)
	base := simStart.Add(5 * time.Hour)
	passed := int64(3 * 24) // hours passed: states before hours 1..passed
	// A tracker with no series writes nothing as hours pass.
	empty := newTracker(cfg, nil)
	empty.ckpt = newCheckpointer(dir, fingerprints{data: 1}, 3, quietLogger(), nil)
	for m := range 3*60 + 1 {
		empty.minute(base.Add(time.Duration(m)*time.Minute).UnixMilli(), nil)
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
		t.Fatalf("a tracker with no series wrote %d files (%v)", len(ents), err)
	}
	// One series from the first minute on.
	lbls := labels.FromStrings(model.MetricNameLabel, "strata:requests_running", "pod", "a")
	for m := range passed*60 + 1 {
		ts := base.Add(time.Duration(m) * time.Minute).UnixMilli()
		tr.minute(ts, map[string][]sampleAt{"strata:requests_running": {{lbls, float64(m % 7)}}})
	}
	first := base.Unix() / 3600
	last := first + passed // the newest state: before this hour
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	sums, states := map[int64]bool{}, map[int64]bool{}
	for _, de := range ents {
		if h, ok := fileHour(de.Name(), "hour-", ".sum"); ok {
			sums[h] = true
		} else if h, ok := fileHour(de.Name(), "state-", ".ckpt"); ok {
			states[h] = true
		} else {
			t.Errorf("unexpected file %s", de.Name())
		}
	}
	for h := last - 2; h <= last; h++ {
		if !states[h] {
			t.Errorf("state before %s removed", hourName(h))
		}
		delete(states, h)
	}
	for h := range states {
		t.Errorf("state before %s kept", hourName(h))
	}
	for h := last - 2 - int64(tr.hours) + 1; h < last; h++ {
		if !sums[h] {
			t.Errorf("summaries of %s removed", hourName(h))
		}
		delete(sums, h)
	}
	for h := range sums {
		t.Errorf("summaries of %s kept", hourName(h))
	}
}

// firstDiff is the first line two states differ in.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d:\n%s\nwant\n%s", i, g[i], w[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}

// BenchmarkBaselineRestore is a start's restore of a tracker holding a
// full history (the default 28 days plus the level-shift hours) of n
// tracked series (STRATA_CHECKPOINT_BENCH_SERIES, default 20,000; about
// 91,000 at 500,000 active series): the state and every hour's summaries
// loaded, against write-s, the time to write them all once (a live
// engine writes one hour's at a time), and the files' bytes per series.
func BenchmarkBaselineRestore(b *testing.B) {
	n := 20_000
	if v := os.Getenv("STRATA_CHECKPOINT_BENCH_SERIES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	cfg := DefaultBaselineConfig()
	dir := b.TempDir()
	tr := fileTracker(b, cfg)
	tr.ckpt = newCheckpointer(dir, fingerprints{data: 1}, 1, quietLogger(), nil)
	last := floorDiv(tStart, hourMs) + int64(tr.hours) - 1
	first := last - int64(tr.hours) + 1
	vals := fleetSignals(n, first*hourMs)
	tr.minute(first*hourMs, vals)
	for _, list := range tr.byMetric {
		for i, s := range list {
			s.cur = s.cur[:0]
			for h := first; h <= last; h++ {
				v := diurnal(h*hourMs, 10, uint64(i))
				s.ring.set(h, tr.hours, summary{m: float32(v), d: float32(v / 20)}, tr.arena)
			}
		}
	}
	tr.done = (last+1)*hourMs - minute.Milliseconds()
	t0 := time.Now()
	if err := tr.ckpt.write(tr, last); err != nil {
		b.Fatal(err)
	}
	write := time.Since(t0)
	var size int64
	ents, _ := os.ReadDir(dir)
	for _, de := range ents {
		if fi, err := de.Info(); err == nil {
			size += fi.Size()
		}
	}
	for b.Loop() {
		r := fileTracker(b, cfg)
		ck := newCheckpointer(dir, fingerprints{data: 1}, 1, quietLogger(), nil)
		if c, ok := ck.restore(r, 0, (last+1)*hourMs, math.MaxInt64); !ok || c != (last+1)*hourMs || r.len() != tr.len() {
			b.Fatalf("restored %d series before %s, want %d before %s", r.len(), fmtMs(c), tr.len(), fmtMs((last+1)*hourMs))
		}
		r.reset()
	}
	b.ReportMetric(write.Seconds(), "write-s")
	b.ReportMetric(float64(size)/float64(tr.len()), "disk-B/series")
	b.ReportMetric(float64(tr.len()), "series")
}

// TestDropBaselineCheckpoints: the states after the first backfilled
// minute and the summaries of its hour and later go; the rest stays.
func TestDropBaselineCheckpoints(t *testing.T) {
	dir := t.TempDir()
	h0 := simStart.Unix() / 3600
	c := &checkpointer{dir: dir}
	for h := h0; h < h0+4; h++ {
		for _, p := range []string{c.statePath(h), c.summaryPath(h)} {
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	minT := simStart.Add(2*time.Hour + 30*time.Minute).UnixMilli() // in hour h0+2
	n, err := DropBaselineCheckpoints(dir, minT)
	if err != nil {
		t.Fatal(err)
	}
	for h := h0; h < h0+4; h++ {
		for _, f := range []struct {
			path string
			keep bool
		}{{c.statePath(h), h <= h0+2}, {c.summaryPath(h), h < h0+2}} {
			if _, err := os.Stat(f.path); (err == nil) != f.keep {
				t.Errorf("%s: kept %v, want %v", filepath.Base(f.path), err == nil, f.keep)
			}
		}
	}
	if n != 3 {
		t.Errorf("removed %d files, want 3", n)
	}
	if n, err := DropBaselineCheckpoints(filepath.Join(dir, "none"), minT); n != 0 || err != nil {
		t.Errorf("a missing directory: %d, %v", n, err)
	}
}

// TestCheckpointCollisions: series whose label hashes collide are written
// by their labels and restored exactly; a hash that a restored tracker's
// series have come to share since the hour was written leaves both without
// that hour's summary, and restores the rest.
func TestCheckpointCollisions(t *testing.T) {
	cfg := DefaultBaselineConfig()
	lset := func(pod string) labels.Labels {
		return labels.FromStrings(model.MetricNameLabel, "strata:requests_running", "pod", pod)
	}
	a, b, c := lset("a"), lset("b"), lset("c")
	const shared = 42 // a and b's hash
	h := simStart.Unix() / 3600
	sum := func(v float32) summary { return summary{m: v, d: v / 10} }
	write := func(dir string, colliding bool) {
		t.Helper()
		tr := newTracker(cfg, nil)
		tr.ckpt = newCheckpointer(dir, fingerprints{data: 1}, 3, quietLogger(), nil)
		tr.getHash(shared, a).ring.set(h, tr.hours, sum(1), nil)
		if colliding {
			tr.getHash(shared, b).ring.set(h, tr.hours, sum(2), nil)
		}
		tr.get(c).ring.set(h, tr.hours, sum(3), nil)
		if err := tr.ckpt.writeSummaries(tr, h); err != nil {
			t.Fatal(err)
		}
	}
	// load restores hour h into a tracker holding a, b (under the shared
	// hash) and c, and returns their summaries.
	load := func(dir string) [3]summary {
		t.Helper()
		tr := newTracker(cfg, nil)
		ck := newCheckpointer(dir, fingerprints{data: 1}, 3, quietLogger(), nil)
		ss := []*bseries{tr.getHash(shared, a), tr.getHash(shared, b), tr.get(c)}
		if err := ck.loadSummaries(tr, h); err != nil {
			t.Fatal(err)
		}
		var out [3]summary
		for i, s := range ss {
			out[i], _ = s.ring.at(h)
		}
		return out
	}
	dir := t.TempDir()
	write(dir, true)
	if got, want := load(dir), [3]summary{sum(1), sum(2), sum(3)}; got != want {
		t.Fatalf("colliding series restored %v, want %v", got, want)
	}
	dir = t.TempDir()
	write(dir, false)
	if got, want := load(dir), [3]summary{{}, {}, sum(3)}; got != want {
		t.Fatalf("a hash shared since the hour: restored %v, want %v", got, want)
	}
}
