package tiers

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"

	"github.com/strata-dev/strata/internal/mapped"
)

// releasingCompactor is the raw tier's compactor: the TSDB's own leveled
// compactor, with the page mappings of the files it reads released while
// it runs.
//
// A head compaction reads every chunk of the hour it persists through the
// head's chunk file mappings, and each page it reads stays in the resident
// set until the head's truncation unmaps the files after it: at 50,000
// series of 1 Hz that raised Strata's RSS by 510 MB for the 12 s of each
// hour's compaction, its peak (docs/bench.md, stop 56). A merge of blocks
// reads theirs in the same way, three hours' worth at once.
// Raw.ReleaseChunkPages cannot help then: it holds compactions off, so
// that no truncation unmaps a range while it is advised, and so waits for
// the compaction under way.
//
// The TSDB calls Write and Compact with its compaction mutex held (head,
// out-of-order and stale-series compactions, merges, snapshots), and
// unmaps a head chunk file only with that mutex held (the head's
// truncations, after a Write has returned) or once compactions have
// stopped (Close); it closes a block it holds open only with it held too
// (reloads, deletions). So while Write or Compact runs, the head's chunk
// file mappings, and the mappings of the blocks the DB passes Compact
// open, stay where they are, and advising them is safe. The compactor's
// own files (the block being written, the source blocks it opens itself)
// come and go within the call and are left alone.
//
// After a head compaction's Write the TSDB goes on with the compaction
// mutex held: it opens the new block, truncates the head (unmapping the
// chunk files of the hour it persisted) and checkpoints the WAL, then plans
// the merges of blocks (Plan). Neither this compactor's release (Write has
// returned) nor strata serve's (it waits for the whole compaction) runs
// then, and the pages that the new block's opening and the rules' and
// queries' reads map meanwhile set the server's peak: 709 MiB of file pages
// 6 s after the first compaction's Write at 500,000 series, the peak of a
// 120-minute pair at 1.17x Prometheus' (docs/bench.md, stop 61). MADV_DONTNEED
// is not safe there (a chunk file unmapped by the truncation, its range
// reused for anonymous memory, would lose that memory), so from Write's
// end to Plan the compactor asks for the pages to be paged out instead
// (mapped.PageOut), which is safe whatever the range has become.
type releasingCompactor struct {
	tsdb.Compactor
	headChunks string // the head's chunk file directory
	dir        string // the raw tier's directory: the head's chunk files and the blocks
	logger     *slog.Logger

	// newTrigger gives the trigger of the releases during one call.
	newTrigger func() *mapped.Trigger

	mu        sync.Mutex
	endWindow func() // stops the page-outs after a Write; nil: none running
}

// afterWriteMax bounds the page-outs after a Write whose Plan does not come
// (a compaction other than db.Compact's, or one that failed on the way).
const afterWriteMax = 2 * time.Minute

// The releases during a compaction are due, as in strata serve, once 8 MiB
// more of file pages are resident, polled every 50 ms (every 10 ms for 2 s
// after a growth: that compaction mapped 510 MB in 12 s), and at least
// every second.
func compactionReleaseTrigger() *mapped.Trigger {
	return &mapped.Trigger{
		Grow: 8 << 20, Every: time.Second,
		Poll: 50 * time.Millisecond, BurstPoll: 10 * time.Millisecond, Burst: 2 * time.Second,
	}
}

// newReleasingCompactor returns a tsdb.NewCompactorFunc that builds the
// compactor tsdb.Open would build, wrapped in a releasingCompactor, which
// it also stores in *built.
func newReleasingCompactor(dir string, logger *slog.Logger, built **releasingCompactor) tsdb.NewCompactorFunc {
	return func(ctx context.Context, r prometheus.Registerer, l *slog.Logger, ranges []int64, pool chunkenc.Pool, opts *tsdb.Options) (tsdb.Compactor, error) {
		// The same options as tsdb.Open's own; the float chunk encoding
		// is the one the TSDB was opened with (the raw tier never reloads
		// it).
		enc := opts.FloatChunkEncoding
		if enc == chunkenc.EncNone {
			enc = chunkenc.EncXOR
		}
		c, err := tsdb.NewLeveledCompactorWithOptions(ctx, r, l, ranges, pool, tsdb.LeveledCompactorOptions{
			MaxBlockChunkSegmentSize:    opts.MaxBlockChunkSegmentSize,
			EnableOverlappingCompaction: opts.EnableOverlappingCompaction,
			PD:                          opts.PostingsDecoderFactory,
			UseUncachedIO:               opts.UseUncachedIO,
			BlockExcludeFilter:          opts.BlockCompactionExcludeFunc,
			FloatChunkEncoding:          func() chunkenc.Encoding { return enc },
		})
		if err != nil {
			return nil, err
		}
		if !mapped.Supported {
			return c, nil
		}
		*built = &releasingCompactor{
			Compactor:  c,
			headChunks: filepath.Join(dir, "chunks_head"),
			dir:        dir,
			logger:     logger,
			newTrigger: compactionReleaseTrigger,
		}
		return *built, nil
	}
}

// Write persists b into blocks, releasing the head's chunk pages it reads
// meanwhile, and pages out what is mapped after it until Plan.
func (c *releasingCompactor) Write(dest string, b tsdb.BlockReader, mint, maxt int64, base *tsdb.BlockMeta) ([]ulid.ULID, error) {
	c.stopAfterWrite()
	ids, err := c.write(dest, b, mint, maxt, base)
	if err == nil && len(ids) > 0 {
		c.startAfterWrite()
	}
	return ids, err
}

func (c *releasingCompactor) write(dest string, b tsdb.BlockReader, mint, maxt int64, base *tsdb.BlockMeta) ([]ulid.ULID, error) {
	defer c.releaseWhile([]string{c.headChunks})()
	return c.Compactor.Write(dest, b, mint, maxt, base)
}

// Plan ends the page-outs after a Write: the TSDB plans the merges once
// the head is truncated and its WAL checkpointed.
func (c *releasingCompactor) Plan(dir string) ([]string, error) {
	c.stopAfterWrite()
	return c.Compactor.Plan(dir)
}

// startAfterWrite pages out the mappings under the raw tier's directory
// whenever the trigger says so, until stopAfterWrite or afterWriteMax.
func (c *releasingCompactor) startAfterWrite() {
	ctx, cancel := context.WithTimeout(context.Background(), afterWriteMax)
	var wg sync.WaitGroup
	wg.Go(func() {
		c.newTrigger().Run(ctx, func() {
			if _, err := mapped.PageOut(c.dir); err != nil {
				c.logger.Warn("page out mappings after a compaction's write", "err", err)
			}
		})
	})
	c.mu.Lock()
	c.endWindow = func() {
		cancel()
		wg.Wait()
	}
	c.mu.Unlock()
}

// stopAfterWrite stops the page-outs after a Write, if they run, and
// returns once none runs any more. Raw.Close calls it too.
func (c *releasingCompactor) stopAfterWrite() {
	c.mu.Lock()
	end := c.endWindow
	c.endWindow = nil
	c.mu.Unlock()
	if end != nil {
		end()
	}
}

// Compact merges the blocks in dirs, releasing the pages it reads
// meanwhile: the head's chunk files' and those of the blocks in dirs that
// the DB holds open (all of them when the DB calls it).
func (c *releasingCompactor) Compact(dest string, dirs []string, open []*tsdb.Block) ([]ulid.ULID, error) {
	release := []string{c.headChunks}
	held := make(map[string]bool, len(open))
	for _, b := range open {
		held[filepath.Clean(b.Dir())] = true
	}
	for _, d := range dirs {
		if held[filepath.Clean(d)] {
			release = append(release, d)
		}
	}
	defer c.releaseWhile(release)()
	return c.Compactor.Compact(dest, dirs, open)
}

// releaseWhile starts releasing the mappings under dirs whenever the
// trigger says so; the function it returns stops it and returns once no
// release runs any more, before the caller's call returns to the TSDB.
func (c *releasingCompactor) releaseWhile(dirs []string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		c.newTrigger().Run(ctx, func() {
			if _, _, err := mapped.Release(dirs...); err != nil {
				c.logger.Warn("release page mappings during compaction", "err", err)
			}
		})
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
