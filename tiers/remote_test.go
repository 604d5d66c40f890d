package tiers_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/thanos-io/objstore"

	"github.com/strata-dev/strata/internal/bucket"
	"github.com/strata-dev/strata/tiers"
)

// fakeS3 starts an S3 server (gofakes3, in memory) on a loopback port with
// a bucket "strata", and returns a client for it scoped to prefix, opened
// from an objstore.yml as strata serve opens it, and one for the whole
// bucket.
func fakeS3(t testing.TB, prefix string) (objstore.Bucket, objstore.Bucket) {
	t.Helper()
	open := fakeS3Server(t)
	return open(prefix), open("")
}

// fakeS3Server starts fakeS3's server and returns an opener of clients for
// it, each scoped to a prefix ("" for the whole bucket).
func fakeS3Server(t testing.TB) func(prefix string) objstore.Bucket {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket("strata"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	open := func(prefix string) objstore.Bucket {
		conf := fmt.Sprintf("type: S3\nprefix: %q\nconfig:\n  bucket: strata\n  endpoint: %s\n  insecure: true\n  access_key: test\n  secret_key: testtest\n  bucket_lookup_type: path\n  max_retries: 1\n", prefix, u.Host)
		b, err := bucket.Open(context.Background(), []byte(conf), quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	return open
}

// flakyBucket fails every upload while down is set: an unreachable bucket.
type flakyBucket struct {
	objstore.Bucket
	down atomic.Bool
}

var errUnreachable = errors.New("bucket unreachable (test)")

func (f *flakyBucket) Upload(ctx context.Context, name string, r io.Reader, opts ...objstore.ObjectUploadOption) error {
	if f.down.Load() {
		return errUnreachable
	}
	return f.Bucket.Upload(ctx, name, r, opts...)
}

func objects(t *testing.T, b objstore.Bucket, dir string) []string {
	t.Helper()
	var out []string
	if err := b.Iter(context.Background(), dir, func(n string) error { out = append(out, n); return nil }); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func localFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "p-*.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// eventually polls cond (bounded: 30 s) for the tier's background uploads.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for range 600 {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("not within 30s: %s", what)
}

func hourDays(days int) (map[int64][]tiers.SeriesWindows, []tiers.SeriesWindows) {
	parts := map[int64][]tiers.SeriesWindows{}
	var all []tiers.SeriesWindows
	for s := range 3 {
		sw := tiers.SeriesWindows{Labels: labels.FromStrings("__name__", "gpu_temp", "gpu", fmt.Sprint(s))}
		for d := range days {
			for h := range 24 {
				st := T0 + int64(d)*dayMs + int64(h)*hourMs
				v := float64(s*1000 + d*24 + h)
				sw.Windows = append(sw.Windows, tiers.Window{Start: st, FirstT: st, LastT: st + 59*minMs, Count: 60, Sum: 60 * v, Min: v, Max: v, First: v, Last: v})
			}
		}
		all = append(all, sw)
		for d := range days {
			p := T0 + int64(d)*dayMs
			var ws []tiers.Window
			for _, w := range sw.Windows {
				if w.Start >= p && w.Start < p+dayMs {
					ws = append(ws, w)
				}
			}
			parts[p] = append(parts[p], tiers.SeriesWindows{Labels: sw.Labels, Windows: ws})
		}
	}
	return parts, all
}

// T0 is the first day of the bucket tests' hour tier (2026-01-01T00:00Z).
const T0 = int64(1767225600000)

func openHour(t *testing.T, dir string, b objstore.Bucket, cacheBytes int64, reg prometheus.Registerer, now time.Time) *tiers.Rollup {
	t.Helper()
	cfg := tiers.DefaultHourConfig(dir)
	cfg.Remote = &tiers.RemoteConfig{Bucket: b, CacheBytes: cacheBytes, PendingWarnBytes: 1}
	r, err := tiers.OpenRollup(cfg, quietLogger(), reg, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRemoteTierConcurrentFetches: queries at once over partitions that
// are only in the bucket, with a local cache that holds none, each get
// every partition's windows. A fetch used to count its download in the
// cache before opening it, so another query's eviction could remove the
// file in between, and the select skipped the partition as one retention
// had deleted: a window of the answer silently missing.
func TestRemoteTierConcurrentFetches(t *testing.T) {
	b, _ := fakeS3(t, "shard-0")
	dir := t.TempDir()
	r := openHour(t, dir, b, 1, prometheus.NewRegistry(), time.UnixMilli(T0+5*dayMs))
	defer r.Close()
	parts, want := hourDays(3)
	for p, sws := range parts {
		if err := r.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "three partitions uploaded and evicted locally", func() bool {
		return len(objects(t, b, "hour/")) == 3 && len(localFiles(t, dir)) == 0
	})
	const queriers, rounds = 4, 8
	errs := make(chan error, queriers)
	for range queriers {
		go func() {
			for range rounds {
				got, err := r.Select(context.Background(), T0, T0+3*dayMs, labels.MustNewMatcher(labels.MatchEqual, "__name__", "gpu_temp"))
				if err != nil {
					errs <- err
					return
				}
				if len(got) != len(want) {
					errs <- fmt.Errorf("read back %d series, want %d", len(got), len(want))
					return
				}
				for i := range want {
					if !slices.Equal(got[i].Windows, want[i].Windows) {
						errs <- fmt.Errorf("series %s: %d windows read back, want %d", want[i].Labels, len(got[i].Windows), len(want[i].Windows))
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for range queriers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestRemoteTierS3: partitions are uploaded under their own names, evicted
// from a small local cache, read back from the bucket by queries, and
// deleted there by retention.
func TestRemoteTierS3(t *testing.T) {
	b, root := fakeS3(t, "shard-0")
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	now := time.UnixMilli(T0 + 5*dayMs)
	r := openHour(t, dir, b, 1, reg, now) // keeps no uploaded file locally
	defer r.Close()
	parts, want := hourDays(3)
	for p, sws := range parts {
		if err := r.WritePartition(p, sws); err != nil {
			t.Fatal(err)
		}
	}
	wantObjs := []string{"hour/p-20260101T0000Z.parquet", "hour/p-20260102T0000Z.parquet", "hour/p-20260103T0000Z.parquet"}
	eventually(t, "three partitions uploaded and evicted locally", func() bool {
		return slices.Equal(objects(t, b, "hour/"), wantObjs) && len(localFiles(t, dir)) == 0
	})
	// The bucket is one dataset across shards: the unprefixed bucket shows
	// shard-0/hour/p-*.parquet.
	if got := objects(t, root, "shard-0/hour/"); len(got) != 3 || !strings.HasPrefix(got[0], "shard-0/hour/p-") {
		t.Errorf("objects under shard-0/hour/: %v", got)
	}

	got, err := r.Select(context.Background(), T0, T0+3*dayMs, labels.MustNewMatcher(labels.MatchEqual, "__name__", "gpu_temp"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("read back %d series, want %d", len(got), len(want))
	}
	for i := range want {
		if !slices.Equal(got[i].Windows, want[i].Windows) {
			t.Fatalf("series %s read back from the bucket differs", want[i].Labels)
		}
	}
	if n := testutil.ToFloat64(metric(t, reg, "strata_tiers_bucket_downloads_total")); n != 3 {
		t.Errorf("downloads %g, want 3", n)
	}

	// A fresh open of an empty local directory lists the bucket.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := openHour(t, t.TempDir(), b, 1<<30, prometheus.NewRegistry(), now.Add(363*24*time.Hour))
	defer r2.Close()
	eventually(t, "the bucket's partitions listed", func() bool { return len(r2.Partitions()) == 3 })
	n, err := r2.ApplyRetention()
	if err != nil || n != 3 {
		t.Fatalf("retention deleted %d (%v), want 3", n, err)
	}
	if objs := objects(t, b, "hour/"); len(objs) != 0 {
		t.Errorf("retention left %v in the bucket", objs)
	}
}

// TestRemoteTierUnreachable: while the bucket is unreachable writes go on,
// the files wait locally (counted), and a restart uploads what a crash left
// behind.
func TestRemoteTierUnreachable(t *testing.T) {
	b, _ := fakeS3(t, "shard-1")
	fb := &flakyBucket{Bucket: b}
	fb.down.Store(true)
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	now := time.UnixMilli(T0 + 5*dayMs)
	r := openHour(t, dir, fb, 0, reg, now)
	parts, _ := hourDays(2)
	for p, sws := range parts {
		done := make(chan error, 1)
		go func() { done <- r.WritePartition(p, sws) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WritePartition blocked on an unreachable bucket")
		}
	}
	eventually(t, "uploads failing and counted", func() bool {
		return testutil.ToFloat64(metric(t, reg, "strata_tiers_bucket_upload_errors_total")) >= 1
	})
	if n := testutil.ToFloat64(metric(t, reg, "strata_tiers_bucket_pending_uploads")); n != 2 {
		t.Errorf("pending uploads %g, want 2", n)
	}
	if got := localFiles(t, dir); len(got) != 2 {
		t.Errorf("local files %v: pending files must stay", got)
	}
	// A crash now (the process ends with both files not uploaded), then a
	// restart with the bucket back.
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	fb.down.Store(false)
	r2 := openHour(t, dir, fb, 1<<30, prometheus.NewRegistry(), now)
	defer r2.Close()
	eventually(t, "the files left behind uploaded on restart", func() bool { return len(objects(t, fb, "hour/")) == 2 })
	if got := localFiles(t, dir); len(got) != 2 {
		t.Errorf("local files %v: a large cache keeps them", got)
	}
}

func metric(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return collectorFunc(func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				var sum float64
				for _, m := range mf.GetMetric() {
					sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
				return sum
			}
		}
		return 0
	})
}

// collectorFunc is a gauge whose value is computed when collected.
func collectorFunc(f func() float64) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "value", Help: "test"}, f)
}

// BenchmarkHourTierBucketWarm compares a 30-day select of 1,000 series'
// hour windows from a tier on local disk with the same from a tier in an S3
// bucket whose local cache holds the files (warm: read once before).
func BenchmarkHourTierBucketWarm(b *testing.B) {
	const series, days = 1000, 30
	parts := map[int64][]tiers.SeriesWindows{}
	for s := range series {
		l := labels.FromStrings("__name__", "gpu_temp", "gpu", fmt.Sprint(s%8), "host", fmt.Sprintf("node-%03d", s/8))
		for d := range days {
			p := T0 + int64(d)*dayMs
			sw := tiers.SeriesWindows{Labels: l}
			for h := range 24 {
				st := p + int64(h)*hourMs
				v := float64(s + h)
				sw.Windows = append(sw.Windows, tiers.Window{Start: st, FirstT: st, LastT: st + 59*minMs, Count: 240, Sum: 240 * v, Min: v - 1, Max: v + 1, First: v, Last: v})
			}
			parts[p] = append(parts[p], sw)
		}
	}
	for p := range parts {
		slices.SortFunc(parts[p], func(a, b tiers.SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
	}
	open := func(b *testing.B, remote *tiers.RemoteConfig) *tiers.Rollup {
		cfg := tiers.DefaultHourConfig(b.TempDir())
		cfg.Remote = remote
		r, err := tiers.OpenRollup(cfg, quietLogger(), prometheus.NewRegistry(), func() time.Time { return time.UnixMilli(T0 + days*dayMs) })
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = r.Close() })
		for p, sws := range parts {
			if err := r.WritePartition(p, sws); err != nil {
				b.Fatal(err)
			}
		}
		return r
	}
	m := labels.MustNewMatcher(labels.MatchEqual, "__name__", "gpu_temp")
	run := func(b *testing.B, r *tiers.Rollup) {
		b.ReportAllocs()
		for b.Loop() {
			got, err := r.Select(context.Background(), T0, T0+days*dayMs-1, m)
			if err != nil || len(got) != series {
				b.Fatalf("%d series, %v", len(got), err)
			}
		}
	}
	b.Run("local", func(b *testing.B) { run(b, open(b, nil)) })
	b.Run("bucket-warm", func(b *testing.B) {
		bkt, _ := fakeS3(b, "bench")
		r := open(b, &tiers.RemoteConfig{Bucket: bkt, CacheBytes: 1 << 30})
		waitUploaded(b, bkt, days)
		run(b, r)
	})
	b.Run("bucket-cold", func(b *testing.B) {
		bkt, _ := fakeS3(b, "bench")
		r := open(b, &tiers.RemoteConfig{Bucket: bkt, CacheBytes: 1}) // nothing kept: every read downloads
		waitUploaded(b, bkt, days)
		run(b, r)
	})
}

func waitUploaded(b *testing.B, bkt objstore.Bucket, n int) {
	b.Helper()
	for range 600 {
		var got int
		if err := bkt.Iter(context.Background(), "hour/", func(string) error { got++; return nil }); err != nil {
			b.Fatal(err)
		}
		if got == n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	b.Fatalf("%d partitions not uploaded within 30s", n)
}
