package tiers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/thanos-io/objstore"

	"github.com/strata-dev/strata/internal/atomicfile"
)

// RemoteConfig puts a rollup tier's partitions in object storage
// (docs/format/hour-parquet.md, "Object storage"): every partition file,
// once written (complete and final), is uploaded under the same name as
// <tier name>/<file name> in Bucket, which a bucket configuration's prefix
// usually scopes to one Strata node (s3://bucket/<shard>/hour/p-*.parquet).
// The local directory then holds the files waiting for upload and a bounded
// cache of uploaded files recently written or read; a partition missing
// locally is downloaded when a query reads it.
type RemoteConfig struct {
	Bucket objstore.Bucket
	// CacheBytes bounds the uploaded files kept locally (least recently
	// used evicted first). Files waiting for upload are never evicted and
	// count against PendingWarnBytes instead.
	CacheBytes int64
	// PendingWarnBytes: when the files waiting for upload exceed it (the
	// bucket has been unreachable for a while), a warning is logged at each
	// failed attempt; they keep waiting, and ingestion is never blocked.
	PendingWarnBytes int64
	// Timeout bounds one upload, download, listing or delete (0: 5 m).
	Timeout time.Duration
}

// remote is a rollup tier's object-storage side: the upload queue, the
// local cache accounting and the downloads.
type remote struct {
	cfg    RemoteConfig
	tier   string // object name prefix: the tier's name
	dir    string
	logger *slog.Logger

	mu      sync.Mutex
	pending map[int64]int64     // partitions waiting for upload: size
	cached  map[int64]*cacheEnt // uploaded partitions present locally
	clock   uint64
	failing bool // the last upload failed (a warning was logged)
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	dropped func(start int64) // closes an evicted file kept open (Rollup.files.drop)

	pendingFiles prometheus.Gauge
	pendingBytes prometheus.Gauge
	cacheBytes   prometheus.Gauge
	uploads      prometheus.Counter
	uploadErrors prometheus.Counter
	downloads    prometheus.Counter
	evictions    prometheus.Counter
}

type cacheEnt struct {
	bytes int64
	used  uint64
}

func newRemote(cfg RemoteConfig, tier, dir string, logger *slog.Logger, reg prometheus.Registerer) *remote {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	f := promauto.With(reg)
	cl := prometheus.Labels{"tier": tier}
	return &remote{
		cfg: cfg, tier: tier, dir: dir, logger: logger,
		pending: map[int64]int64{}, cached: map[int64]*cacheEnt{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		pendingFiles: f.NewGauge(prometheus.GaugeOpts{Name: "strata_tiers_bucket_pending_uploads", Help: "Rollup partition files written locally and waiting for upload to the bucket.", ConstLabels: cl}),
		pendingBytes: f.NewGauge(prometheus.GaugeOpts{Name: "strata_tiers_bucket_pending_upload_bytes", Help: "Bytes of the partition files waiting for upload.", ConstLabels: cl}),
		cacheBytes:   f.NewGauge(prometheus.GaugeOpts{Name: "strata_tiers_bucket_cache_bytes", Help: "Bytes of uploaded partition files kept locally (bounded cache).", ConstLabels: cl}),
		uploads:      f.NewCounter(prometheus.CounterOpts{Name: "strata_tiers_bucket_uploads_total", Help: "Partition files uploaded to the bucket.", ConstLabels: cl}),
		uploadErrors: f.NewCounter(prometheus.CounterOpts{Name: "strata_tiers_bucket_upload_errors_total", Help: "Failed uploads (retried with backoff).", ConstLabels: cl}),
		downloads:    f.NewCounter(prometheus.CounterOpts{Name: "strata_tiers_bucket_downloads_total", Help: "Partition files downloaded from the bucket for a query.", ConstLabels: cl}),
		evictions:    f.NewCounter(prometheus.CounterOpts{Name: "strata_tiers_bucket_cache_evictions_total", Help: "Uploaded partition files removed from the local cache.", ConstLabels: cl}),
	}
}

func (rm *remote) object(start int64) string { return path.Join(rm.tier, partitionName(start)) }

// list returns the partitions in the bucket.
func (rm *remote) list(ctx context.Context) (map[int64]struct{}, error) {
	ctx, cancel := context.WithTimeout(ctx, rm.cfg.Timeout)
	defer cancel()
	out := map[int64]struct{}{}
	err := rm.cfg.Bucket.Iter(ctx, rm.tier+"/", func(name string) error {
		if start, ok := parsePartitionName(path.Base(name)); ok {
			out[start] = struct{}{}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list bucket %s/%s: %w", rm.cfg.Bucket.Name(), rm.tier, err)
	}
	return out, nil
}

// size returns the size of a partition's object.
func (rm *remote) size(ctx context.Context, start int64) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, rm.cfg.Timeout)
	defer cancel()
	a, err := rm.cfg.Bucket.Attributes(ctx, rm.object(start))
	if err != nil {
		return 0, err
	}
	return a.Size, nil
}

// written records a partition file just written (or found locally at open
// and missing from the bucket): it waits for upload. Size 0 marks a file
// being written: it is neither uploaded nor evicted until written again
// with its size.
func (rm *remote) written(start, size int64) {
	rm.mu.Lock()
	if old, ok := rm.cached[start]; ok {
		delete(rm.cached, start)
		rm.cacheBytes.Sub(float64(old.bytes))
	}
	if old, ok := rm.pending[start]; ok {
		rm.pendingBytes.Sub(float64(old))
	}
	rm.pending[start] = size
	rm.pendingFiles.Set(float64(len(rm.pending)))
	rm.pendingBytes.Add(float64(size))
	rm.mu.Unlock()
	select {
	case rm.kick <- struct{}{}:
	default:
	}
}

// present records an uploaded partition file present locally.
func (rm *remote) present(start, size int64) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	if _, ok := rm.pending[start]; ok {
		return
	}
	if _, ok := rm.cached[start]; !ok {
		rm.cacheBytes.Add(float64(size))
	}
	rm.clock++
	rm.cached[start] = &cacheEnt{bytes: size, used: rm.clock}
}

// touch marks a cached file used (a query read it).
func (rm *remote) touch(start int64) {
	rm.mu.Lock()
	if e, ok := rm.cached[start]; ok {
		rm.clock++
		e.used = rm.clock
	}
	rm.mu.Unlock()
}

// forget drops a partition deleted by retention from the accounting.
func (rm *remote) forget(start int64) {
	rm.mu.Lock()
	if e, ok := rm.cached[start]; ok {
		rm.cacheBytes.Sub(float64(e.bytes))
		delete(rm.cached, start)
	}
	if sz, ok := rm.pending[start]; ok {
		rm.pendingBytes.Sub(float64(sz))
		delete(rm.pending, start)
		rm.pendingFiles.Set(float64(len(rm.pending)))
	}
	rm.mu.Unlock()
}

// evict removes the least recently used uploaded files until the cache
// fits CacheBytes. A query holding one keeps reading it (open descriptor).
func (rm *remote) evict() {
	for {
		rm.mu.Lock()
		var total int64
		var oldest int64
		var oe *cacheEnt
		for s, e := range rm.cached {
			total += e.bytes
			if oe == nil || e.used < oe.used {
				oldest, oe = s, e
			}
		}
		if oe == nil || total <= rm.cfg.CacheBytes {
			rm.mu.Unlock()
			return
		}
		delete(rm.cached, oldest)
		rm.cacheBytes.Sub(float64(oe.bytes))
		rm.mu.Unlock()
		if err := os.Remove(filepath.Join(rm.dir, partitionName(oldest))); err != nil && !errors.Is(err, os.ErrNotExist) {
			rm.logger.Warn("evict cached partition file", "err", err)
		}
		if rm.dropped != nil {
			rm.dropped(oldest)
		}
		rm.evictions.Inc()
	}
}

// run uploads pending files, oldest partition first, retrying failures
// with backoff (1 s doubling to 1 m), until stop.
func (rm *remote) run() {
	defer close(rm.done)
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			select {
			case <-rm.stop:
				return
			case <-time.After(backoff):
			}
		}
		start, size, ok := rm.next()
		if !ok {
			select {
			case <-rm.stop:
				return
			case <-rm.kick:
				continue
			}
		}
		if err := rm.upload(start); errors.Is(err, os.ErrNotExist) {
			// No local file (a write that failed, or retention deleted it
			// meanwhile): nothing to upload.
			rm.forget(start)
			continue
		} else if err != nil {
			rm.uploadErrors.Inc()
			backoff = min(max(2*backoff, time.Second), time.Minute)
			rm.mu.Lock()
			var pb int64
			for _, sz := range rm.pending {
				pb += sz
			}
			first := !rm.failing
			rm.failing = true
			rm.mu.Unlock()
			if first || (rm.cfg.PendingWarnBytes > 0 && pb > rm.cfg.PendingWarnBytes) {
				rm.logger.Warn("bucket upload failed; partition files wait locally and are retried (ingestion goes on)",
					"bucket", rm.cfg.Bucket.Name(), "partition", partitionName(start), "pending_bytes", pb, "retry_in", backoff, "err", err)
			}
			continue
		}
		backoff = 0
		rm.mu.Lock()
		if cur, ok := rm.pending[start]; ok && cur == size {
			delete(rm.pending, start)
			rm.pendingFiles.Set(float64(len(rm.pending)))
			rm.pendingBytes.Sub(float64(size))
			rm.clock++
			rm.cached[start] = &cacheEnt{bytes: size, used: rm.clock}
			rm.cacheBytes.Add(float64(size))
		}
		if rm.failing {
			rm.failing = false
			rm.logger.Info("bucket uploads resumed", "bucket", rm.cfg.Bucket.Name())
		}
		rm.mu.Unlock()
		rm.uploads.Inc()
		rm.evict()
	}
}

func (rm *remote) next() (start, size int64, ok bool) {
	rm.mu.Lock()
	defer rm.mu.Unlock()
	for s, sz := range rm.pending {
		if sz == 0 {
			continue // being written (WritePartition)
		}
		if !ok || s < start {
			start, size, ok = s, sz, true
		}
	}
	return start, size, ok
}

func (rm *remote) upload(start int64) (err error) {
	f, err := os.Open(filepath.Join(rm.dir, partitionName(start))) //nolint:gosec // our own partition file
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, f.Close()) }()
	ctx, cancel := context.WithTimeout(context.Background(), rm.cfg.Timeout)
	defer cancel()
	go func() {
		select {
		case <-rm.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return rm.cfg.Bucket.Upload(ctx, rm.object(start), f)
}

// fetch downloads partition p's file into the local directory (written to
// a temporary name and renamed, like every partition file) and opens it.
// The file is opened before its rename and before the local cache counts
// it: a query reads through the descriptor whatever happens to the path
// (another query's fetch evicts too, and may download the same partition
// and count and evict it in between). A fetch that opened the path after
// counting it could find it evicted, and a missing file reads to a select
// as a partition retention deleted: the partition was skipped.
func (rm *remote) fetch(p PartitionInfo) (*openFile, error) {
	f, n, err := rm.download(p)
	if err != nil {
		return nil, err
	}
	of, err := openPartitionFile(f, p.Path)
	// Counted even when it does not open (a damaged object): the cache
	// evicts it like any other file, and a later read fetches it again.
	rm.present(p.Start, n)
	rm.evict()
	if err != nil {
		return nil, err
	}
	return of, nil
}

// download writes partition p's object to its local path and returns the
// file open for reading, and its size; the caller counts it in the cache
// (present).
func (rm *remote) download(p PartitionInfo) (rd *os.File, n int64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), rm.cfg.Timeout)
	defer cancel()
	rc, err := rm.cfg.Bucket.Get(ctx, rm.object(p.Start))
	if err != nil {
		return nil, 0, fmt.Errorf("download %s: %w", rm.object(p.Start), err)
	}
	defer func() {
		err = errors.Join(err, rc.Close())
		if err != nil && rd != nil {
			_ = rd.Close()
			rd = nil
		}
	}()
	f, err := atomicfile.Create(p.Path, tempPrefix+"*"+partitionSuffix)
	if err != nil {
		return nil, 0, err
	}
	if n, err = io.Copy(f, rc); err != nil {
		return nil, 0, errors.Join(fmt.Errorf("download %s: %w", rm.object(p.Start), err), f.Abort())
	}
	if rd, err = f.OpenRead(); err != nil {
		return nil, 0, errors.Join(fmt.Errorf("download %s: %w", rm.object(p.Start), err), f.Abort())
	}
	if err := f.Commit(); err != nil {
		return nil, 0, errors.Join(err, rd.Close())
	}
	rm.downloads.Inc()
	return rd, n, nil
}

// delete removes a partition's object (retention).
func (rm *remote) delete(start int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), rm.cfg.Timeout)
	defer cancel()
	err := rm.cfg.Bucket.Delete(ctx, rm.object(start))
	if err != nil && !rm.cfg.Bucket.IsObjNotFoundErr(err) {
		return fmt.Errorf("delete %s from bucket: %w", rm.object(start), err)
	}
	rm.forget(start)
	return nil
}

// close lets the uploader finish the pending files for at most drain while
// uploads succeed, then stops it; files still pending are uploaded at the
// next open.
func (rm *remote) close(drain time.Duration) {
	deadline := time.Now().Add(drain)
	for time.Now().Before(deadline) {
		rm.mu.Lock()
		idle := len(rm.pending) == 0 || rm.failing
		rm.mu.Unlock()
		if idle {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(rm.stop)
	<-rm.done
}

// openRemote lists the tier's bucket: local files missing there (a crash
// between write and upload, or a bucket that was unreachable) wait for
// upload; partitions only in the bucket are listed, read on demand. An
// unreachable bucket is logged and retried in the background: the tier
// opens with its local files, so ingestion goes on.
func (r *Rollup) openRemote(reg prometheus.Registerer) {
	rm := newRemote(*r.cfg.Remote, r.cfg.Name, r.cfg.Dir, r.logger, reg)
	r.remote = rm
	rm.dropped = func(start int64) { _ = r.files.drop(start) }
	r.files.fetch, r.files.touch = rm.fetch, rm.touch
	if r.cfg.ReadOnly {
		if err := r.syncRemote(context.Background()); err != nil {
			r.logger.Warn("list bucket; serving local partitions only", "err", err)
		}
		return
	}
	go rm.run()
	go func() {
		for wait := time.Second; ; wait = min(2*wait, time.Minute) {
			err := r.syncRemote(context.Background())
			if err == nil {
				return
			}
			rm.logger.Warn("list bucket; local partitions are served and uploads wait, retrying", "retry_in", wait, "err", err)
			select {
			case <-rm.stop:
				return
			case <-time.After(wait):
			}
		}
	}()
}

// syncRemote reconciles the local partitions with the bucket's listing.
func (r *Rollup) syncRemote(ctx context.Context) error {
	rm := r.remote
	inBucket, err := rm.list(ctx)
	if err != nil {
		return err
	}
	r.mu.RLock()
	local := make(map[int64]PartitionInfo, len(r.parts))
	for s, p := range r.parts {
		local[s] = p
	}
	r.mu.RUnlock()
	for s, p := range local {
		if _, ok := inBucket[s]; ok {
			if size, err := rm.size(ctx, s); err == nil && size == p.Bytes {
				rm.present(s, p.Bytes)
				continue
			}
		}
		if !r.cfg.ReadOnly {
			rm.written(s, p.Bytes) // missing or different there: upload (again)
		}
	}
	length := r.cfg.PartitionLength.Milliseconds()
	r.mu.Lock()
	for s := range inBucket {
		if _, ok := r.parts[s]; !ok {
			// Rows and Bytes are unknown until the file is read.
			r.parts[s] = PartitionInfo{Start: s, End: s + length, Path: filepath.Join(r.cfg.Dir, partitionName(s))}
			r.generation.Add(1)
		}
	}
	r.mu.Unlock()
	rm.evict()
	return nil
}
