package tiers_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // database/sql driver "duckdb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/thanos-io/objstore"

	"github.com/strata-dev/strata/tiers"
)

// shardView is the DuckDB view over many shards' hour files that
// docs/format/hour-parquet.md documents ("Many shards' files as one
// dataset"), read from that document so that the test checks what users
// are told to run.
func shardView(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "format", "hour-parquet.md"))
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)
	i := strings.Index(sec, "### Many shards' files as one dataset")
	if i < 0 {
		t.Fatal("hour-parquet.md has no section \"Many shards' files as one dataset\"")
	}
	m := regexp.MustCompile("(?s)```sql\n(.*?)```").FindStringSubmatch(sec[i:])
	if m == nil {
		t.Fatal("that section has no SQL block")
	}
	var view []string
	for _, l := range strings.Split(m[1], "\n") {
		if strings.HasPrefix(l, "INSTALL httpfs") { // the network part: a local mirror instead
			continue
		}
		view = append(view, l)
	}
	return strings.Join(view, "\n")
}

// TestBucketShardsDuckDB: two shards' hour tiers uploaded to one S3 bucket
// (gofakes3) under their own prefixes, the bucket mirrored to a local
// directory (DuckDB's httpfs needs the network), and DuckDB running the
// documented multi-shard view over the mirror: every shard's rows, named by
// their prefix, with the aggregates the tiers wrote (including those the
// files store as nulls and the view derives).
func TestBucketShardsDuckDB(t *testing.T) {
	open := fakeS3Server(t)
	now := time.UnixMilli(T0 + 5*dayMs)
	type want struct {
		rows, series                  int
		sum, min, max, increase, last float64
	}
	wants := map[string]*want{}
	for s, shard := range []string{"shard-0", "shard-1"} {
		b := open(shard)
		r := openHour(t, t.TempDir(), b, 1<<30, prometheus.NewRegistry(), now)
		w := &want{min: math.Inf(1), max: math.Inf(-1)}
		wants[shard] = w
		for d := range 2 {
			p := T0 + int64(d)*dayMs
			var sws []tiers.SeriesWindows
			for g := range 3 + s { // shard-1 holds one series more
				sw := tiers.SeriesWindows{Labels: labels.FromStrings("__name__", "gpu_temp", "Hostname", fmt.Sprintf("node-%d", s), "gpu", fmt.Sprint(g))}
				for h := range int64(24) {
					st := p + h*hourMs
					v := float64(100*s + 10*g + int(h%7))
					win := tiers.Window{Start: st, FirstT: st, LastT: st + 59*minMs, Count: 60, Sum: 60 * v, Min: v, Max: v, First: v, Last: v}
					if h%3 == 0 { // a window whose aggregates the file must store
						win.First, win.Min, win.Max, win.Sum, win.Increase = v-1, v-2, v+3, 60*v+1, 1
					}
					sw.Windows = append(sw.Windows, win)
					w.rows++
					w.sum += win.Sum
					w.min, w.max = min(w.min, win.Min), max(w.max, win.Max)
					w.increase += win.Increase
					w.last += win.Last
				}
				sws = append(sws, sw)
				if d == 0 {
					w.series++
				}
			}
			slices.SortFunc(sws, func(a, b tiers.SeriesWindows) int { return labels.Compare(a.Labels, b.Labels) })
			if err := r.WritePartition(p, sws); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, shard+"'s two partitions uploaded", func() bool { return len(objects(t, b, "hour/")) == 2 })
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}

	// The mirror: every object of the bucket under its own name.
	mirror := t.TempDir()
	root := open("")
	var names []string
	if err := root.Iter(context.Background(), "", func(n string) error { names = append(names, n); return nil }, objstore.WithRecursiveIter()); err != nil {
		t.Fatal(err)
	}
	if len(names) != 4 {
		t.Fatalf("bucket holds %v, want two shards' two hour partitions", names)
	}
	for _, n := range names {
		mirrorObject(t, root, n, filepath.Join(mirror, filepath.FromSlash(n)))
	}

	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	view := strings.ReplaceAll(shardView(t), "s3://bucket/", filepath.ToSlash(mirror)+"/")
	if _, err := db.Exec(view); err != nil {
		t.Fatalf("the documented view over the mirror:\n%s\n%v", view, err)
	}
	rows, err := db.Query(`SELECT shard, count(*), count(DISTINCT series_id), sum("sum"), min("min"), max("max"), sum(increase), sum(last)
FROM hour_all WHERE metric_name = 'gpu_temp' GROUP BY shard ORDER BY shard`)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rows.Close() }()
	var shards []string
	for rows.Next() {
		var shard string
		var got want
		if err := rows.Scan(&shard, &got.rows, &got.series, &got.sum, &got.min, &got.max, &got.increase, &got.last); err != nil {
			t.Fatal(err)
		}
		shards = append(shards, shard)
		w, ok := wants[shard]
		if !ok {
			t.Errorf("a shard %q the tiers did not write", shard)
			continue
		}
		if got != *w {
			t.Errorf("%s through DuckDB: %+v, want %+v", shard, got, *w)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(shards, []string{"shard-0", "shard-1"}) {
		t.Errorf("DuckDB sees shards %v, want shard-0 and shard-1", shards)
	}
}

// mirrorObject copies one object of b to path (as `aws s3 sync` would).
func mirrorObject(t *testing.T, b objstore.Bucket, name, path string) {
	t.Helper()
	rc, err := b.Get(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }()
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path) //nolint:gosec // the test's own temp dir
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
