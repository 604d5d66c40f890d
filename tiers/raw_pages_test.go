package tiers

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/strata-dev/strata/internal/mapped"
)

// residentUnder sums the resident bytes of this process's mappings of
// files under the dirs (/proc/self/smaps).
func residentUnder(t testing.TB, dirs ...string) int64 {
	t.Helper()
	prefixes := make([][]byte, len(dirs))
	for i, dir := range dirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			t.Fatal(err)
		}
		prefixes[i] = []byte(abs + string(filepath.Separator))
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var total int64
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Bytes()
		fields := bytes.Fields(line)
		if len(fields) >= 5 && bytes.IndexByte(fields[0], '-') > 0 && !bytes.HasSuffix(fields[0], []byte(":")) {
			in = false
			if len(fields) >= 6 {
				path := bytes.Join(fields[5:], []byte(" "))
				for _, prefix := range prefixes {
					in = in || bytes.HasPrefix(path, prefix)
				}
			}
			continue
		}
		if in && len(fields) >= 2 && string(fields[0]) == "Rss:" {
			kb, err := strconv.ParseInt(string(fields[1]), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			total += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// probeCompactor runs the real compactor's calls, then waits up to 10 s,
// still inside the call (where only the releasingCompactor around it can
// release anything), for the files under watch to hold at most limit
// bytes resident, and records what they held.
type probeCompactor struct {
	tsdb.Compactor
	t     *testing.T
	watch func(dirs []string) []string
	limit int64

	calls []probeCall // the TSDB calls the compactor from one goroutine at a time
}

type probeCall struct {
	what     string
	dirs     []string
	resident int64 // at the end of the wait
}

func (p *probeCompactor) resident(dirs []string) int64 {
	return residentUnder(p.t, p.watch(dirs)...)
}

func (p *probeCompactor) measure(what string, dirs []string) {
	n := p.resident(dirs)
	for deadline := time.Now().Add(10 * time.Second); n > p.limit && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n = p.resident(dirs)
	}
	p.calls = append(p.calls, probeCall{what, dirs, n})
}

func (p *probeCompactor) Write(dest string, b tsdb.BlockReader, mint, maxt int64, base *tsdb.BlockMeta) ([]ulid.ULID, error) {
	ids, err := p.Compactor.Write(dest, b, mint, maxt, base)
	p.measure("write", nil)
	return ids, err
}

func (p *probeCompactor) Compact(dest string, dirs []string, open []*tsdb.Block) ([]ulid.ULID, error) {
	ids, err := p.Compactor.Compact(dest, dirs, open)
	p.measure("compact", dirs)
	return ids, err
}

// TestCompactionReleasesPages: while the TSDB compacts the raw tier's head
// into blocks, and merges those blocks, the mapped pages of the head's
// chunk files and of the merged blocks are released before the call
// ends; before, they stayed resident until the head's truncation or the
// blocks' deletion (at 50,000 series, 510 MB for each hour's compaction,
// docs/bench.md stop 56). A query maps them first, so that what is
// resident does not depend on when the release loop runs. Every sample
// stays readable.
func TestCompactionReleasesPages(t *testing.T) {
	raw := openPagesRaw(t)
	if raw.compactor == nil {
		t.Fatal("the raw tier has no releasing compactor")
	}
	// The TSDB's own compactions are held off (the compactor is replaced
	// while none can run); the test compacts by hand.
	raw.db.DisableCompactions()
	headChunks := filepath.Join(raw.cfg.Dir, "chunks_head")
	probe := &probeCompactor{Compactor: raw.compactor.Compactor, t: t}
	probe.watch = func(dirs []string) []string { return append([]string{headChunks}, dirs...) }
	raw.compactor.Compactor = probe
	appendPagesLoad(t, raw)
	want := pagesSeries * pagesSpan / pagesStep

	// The head's compactions (hours 0-3; the head keeps the last 1.5 h),
	// and the TSDB's merge of hours 0-2.
	if n, _ := readPagesLoad(t, raw); n != want {
		t.Fatalf("%d samples read, want %d", n, want)
	}
	read := probe.resident(nil)
	if read < 64<<10 {
		t.Fatalf("reading the head left %d bytes of its chunk files resident: too little to tell", read)
	}
	probe.limit = read / 4
	if err := raw.db.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	var writes int
	for _, c := range probe.calls {
		if c.what == "write" {
			writes++
		}
		if c.resident > probe.limit {
			t.Errorf("%s: %d bytes of the %d read still resident 10 s after it returned, inside the call: not released", c.what, c.resident, read)
		}
	}
	if writes < 3 {
		t.Fatalf("%d head compactions, want at least 3", writes)
	}

	// A merge of every block, after a query mapped them.
	blocks := raw.db.Blocks()
	dirs := make([]string, len(blocks))
	for i, b := range blocks {
		dirs[i] = b.Dir()
	}
	if n, _ := readPagesLoad(t, raw); n != want {
		t.Fatalf("%d samples read after the compactions, want %d", n, want)
	}
	read = probe.resident(dirs)
	if read < 64<<10 {
		t.Fatalf("reading the blocks left %d bytes of their files resident: too little to tell", read)
	}
	probe.limit = read / 4
	probe.calls = nil
	if _, err := raw.compactor.Compact(t.TempDir(), dirs, blocks); err != nil {
		t.Fatal(err)
	}
	if len(probe.calls) != 1 || probe.calls[0].resident > probe.limit {
		t.Errorf("merge of %d blocks: %+v; want at most %d bytes of the %d read still resident", len(blocks), probe.calls, probe.limit, read)
	}
	if n, _ := readPagesLoad(t, raw); n != want {
		t.Errorf("%d samples readable after the compactions, want %d", n, want)
	}
}

// The load of the page tests: 1,000 series of one sample every 5 s for
// 4 h 40 m from pagesT0, about a megabyte of chunks an hour.
const (
	pagesSeries = 1000
	pagesStep   = 5000
	pagesSpan   = 4*3_600_000 + 40*60_000
	pagesT0     = int64(1_700_000_000_000) / 3_600_000 * 3_600_000
)

// openPagesRaw opens a raw tier of the default configuration for the page
// tests, closed at the test's end; they skip where pages are not released.
func openPagesRaw(t *testing.T) *Raw {
	t.Helper()
	if !mapped.Supported {
		t.Skip("page mappings are released on Linux only")
	}
	raw, err := OpenRaw(DefaultRawConfig(t.TempDir()), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	return raw
}

// appendPagesLoad appends the page tests' load, ten minutes at a time, its
// full chunks moved to the head's chunk files after each.
func appendPagesLoad(t *testing.T, raw *Raw) {
	t.Helper()
	for ts := pagesT0; ts < pagesT0+pagesSpan; ts += 10 * 60_000 {
		app := raw.Appender(context.Background())
		for s := range pagesSeries {
			ls := labels.FromStrings("__name__", "m", "s", strconv.Itoa(s))
			for x := ts; x < ts+10*60_000; x += pagesStep {
				if _, err := app.Append(0, ls, x, float64(x/pagesStep+int64(s))); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		raw.db.ForceHeadMMap()
	}
}

// readPagesLoad reads every sample of the load back: their count and sum.
func readPagesLoad(t *testing.T, raw *Raw) (int, float64) {
	t.Helper()
	q, err := raw.Querier(pagesT0, pagesT0+pagesSpan)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "m"))
	var n int
	var sum float64
	for ss.Next() {
		it := ss.At().Iterator(nil)
		for it.Next() != 0 {
			_, v := it.At()
			n++
			sum += v
		}
	}
	if ss.Err() != nil {
		t.Fatal(ss.Err())
	}
	return n, sum
}

// TestRawReleaseBlockPages: ReleaseChunkPages drops the pages a query
// mapped of the blocks' files too (which stayed until the block was merged
// or deleted, up to a day), and every sample stays readable.
func TestRawReleaseBlockPages(t *testing.T) {
	raw := openPagesRaw(t)
	appendPagesLoad(t, raw)
	if err := raw.db.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	blocks := raw.db.Blocks()
	if len(blocks) == 0 {
		t.Fatal("no block written")
	}
	dirs := make([]string, len(blocks))
	for i, b := range blocks {
		dirs[i] = b.Dir()
	}
	resident := func() int64 { return residentUnder(t, dirs...) }
	n, sum := readPagesLoad(t, raw)
	read := resident()
	if read < 256<<10 {
		t.Fatalf("reading %d blocks left only %d bytes of them resident: the test reads too little to tell", len(blocks), read)
	}
	if _, err := raw.ReleaseChunkPages(); err != nil {
		t.Fatal(err)
	}
	if after := resident(); after > read/4 {
		t.Errorf("%d of the %d bytes of block files read still resident after the release", after, read)
	}
	if n2, sum2 := readPagesLoad(t, raw); n2 != n || sum2 != sum {
		t.Errorf("after the release %d samples summing to %g, before %d summing to %g", n2, sum2, n, sum)
	}
}

// TestCompactionPagesOutUntilPlan: from the end of a head compaction's
// Write until the TSDB plans its merges (the new block opened, the head
// truncated, the WAL checkpointed), the compactor pages out what reads map
// under the raw tier's directory; Plan ends it, and a whole db.Compact
// leaves none running. Every sample stays readable.
func TestCompactionPagesOutUntilPlan(t *testing.T) {
	raw := openPagesRaw(t)
	if raw.compactor == nil {
		t.Fatal("the raw tier has no releasing compactor")
	}
	raw.db.DisableCompactions()
	raw.compactor.newTrigger = func() *mapped.Trigger {
		return &mapped.Trigger{Grow: 1, Every: 10 * time.Millisecond, Poll: 5 * time.Millisecond}
	}
	appendPagesLoad(t, raw)
	headChunks := filepath.Join(raw.cfg.Dir, "chunks_head")
	want := pagesSeries * pagesSpan / pagesStep
	mapHead := func() int64 {
		t.Helper()
		if n, _ := readPagesLoad(t, raw); n != want {
			t.Fatalf("%d samples read, want %d", n, want)
		}
		return residentUnder(t, headChunks)
	}
	read := mapHead()
	if read < 64<<10 {
		t.Fatalf("reading the head left %d bytes of its chunk files resident: too little to tell", read)
	}
	if n, _ := mapped.PageOut(headChunks); n == 0 {
		t.Skip("the kernel has no MADV_PAGEOUT")
	}
	read = mapHead()

	raw.compactor.startAfterWrite() // as Write does when it returns
	n := residentUnder(t, headChunks)
	for deadline := time.Now().Add(10 * time.Second); n > read/4 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n = residentUnder(t, headChunks)
	}
	if n > read/4 {
		t.Errorf("%d of the %d bytes read still resident 10 s into the window after a Write", n, read)
	}
	if _, err := raw.compactor.Plan(raw.cfg.Dir); err != nil {
		t.Fatal(err)
	}
	read = mapHead()
	time.Sleep(200 * time.Millisecond) // twenty of the window's polls
	if after := residentUnder(t, headChunks); after < read/2 {
		t.Errorf("paged out after Plan: %d of %d bytes resident", after, read)
	}

	if err := raw.db.Compact(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw.compactor.mu.Lock()
	running := raw.compactor.endWindow != nil
	raw.compactor.mu.Unlock()
	if running {
		t.Error("page-outs still running after a whole compaction")
	}
	if len(raw.db.Blocks()) == 0 {
		t.Fatal("no block written")
	}
	if n, _ := readPagesLoad(t, raw); n != want {
		t.Errorf("%d samples readable after the compaction, want %d", n, want)
	}
}
