package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
)

// TestSnapshotRestores: POST /api/v1/admin/tsdb/snapshot (with
// --web.enable-admin-api) of a server holding imported history in its raw
// head, raw blocks and minute and hour partitions writes a directory that
// `strata serve --storage.path` starts from and answers the same as the
// server it was taken from, over raw and over the rollups; its partition
// files are hard links of the server's.
func TestSnapshotRestores(t *testing.T) {
	if testing.Short() {
		t.Skip("snapshot end-to-end: skipped under -short")
	}
	dir := t.TempDir()
	om := filepath.Join(dir, "history.om")
	runStrata(t, "simulate", "--nodes=1", "--gpus-per-node=1", "--backfill=50h", "--push.interval=60s", "--openmetrics="+om)
	data := filepath.Join(dir, "data")
	runStrata(t, "backfill", "--storage.path="+data, "--no-progress-bar", om)

	p := startStrata(t, data, "--web.enable-admin-api")
	// Metadata arrives by remote write (the import carries none).
	pushed := testSeries{lbls: labels.FromStrings("__name__", "snapshot_pushed_total", "job", "e2e"), typ: model.MetricTypeCounter,
		help: "A counter pushed before the snapshot.", samples: []prompb.Sample{{Value: 1, Timestamp: time.Now().UnixMilli()}}}
	if _, err := newWriteClient(t, p, remoteapi.WriteV1MessageType).Store(context.Background(), encodeV1(t, []testSeries{pushed}), 0); err != nil {
		t.Fatal(err)
	}
	// What a snapshot interrupted by a crash leaves; the next removes it.
	crashed := filepath.Join(data, snapshotsDir, ".20260101T000000Z-8000000000000000.tmp")
	if err := os.MkdirAll(filepath.Join(crashed, "raw"), 0o750); err != nil {
		t.Fatal(err)
	}
	code, answer := p.post("/api/v1/admin/tsdb/snapshot", "", "")
	var body struct {
		Status string `json:"status"`
		Data   struct {
			Name string `json:"name"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(answer), &body); err != nil || code != http.StatusOK || body.Status != "success" || body.Data.Name == "" {
		t.Fatalf("snapshot: %d %s %v\n%s", code, answer, err, p.output())
	}
	snap := filepath.Join(data, snapshotsDir, body.Data.Name)

	for _, tier := range []string{"minute", "hour"} {
		live, _ := filepath.Glob(filepath.Join(data, tier, "*.parquet"))
		copied, _ := filepath.Glob(filepath.Join(snap, tier, "*.parquet"))
		if len(copied) == 0 || len(copied) > len(live) {
			t.Fatalf("%s tier: %d partitions in the snapshot, %d in the server", tier, len(copied), len(live))
		}
		a, errA := os.Stat(copied[0])
		b, errB := os.Stat(filepath.Join(data, tier, filepath.Base(copied[0])))
		if errA != nil || errB != nil || !os.SameFile(a, b) {
			t.Errorf("%s partition %s is not a hard link of the server's: %v %v", tier, filepath.Base(copied[0]), errA, errB)
		}
	}
	if entries, _ := os.ReadDir(filepath.Join(snap, "raw")); len(entries) == 0 {
		t.Fatal("no raw block in the snapshot")
	}
	if leftovers, _ := filepath.Glob(filepath.Join(data, snapshotsDir, ".*")); len(leftovers) > 0 {
		t.Errorf("temporary snapshot directories left: %v", leftovers)
	}

	q := startStrata(t, snap)
	ctx := context.Background()
	end := time.Now().Add(-time.Minute).Truncate(time.Minute)
	for _, c := range []struct {
		query string
		r     promv1.Range
	}{
		// The last hours: the raw tier (head and blocks).
		{`sum by (gpu) (DCGM_FI_DEV_GPU_UTIL)`, promv1.Range{Start: end.Add(-90 * time.Minute), End: end, Step: 30 * time.Second}},
		{`sum(rate(vllm:prompt_tokens_total[2m]))`, promv1.Range{Start: end.Add(-90 * time.Minute), End: end, Step: 30 * time.Second}},
		// The whole history at a coarse step: the rollups.
		{`max by (gpu) (DCGM_FI_DEV_GPU_UTIL)`, promv1.Range{Start: end.Add(-48 * time.Hour), End: end, Step: time.Hour}},
	} {
		want, _, _, err := newAPIClient(t, p).QueryRange(ctx, c.query, c.r)
		if err != nil {
			t.Fatal(err)
		}
		got, _, _, err := newAPIClient(t, q).QueryRange(ctx, c.query, c.r)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() || len(want.String()) < 100 {
			t.Errorf("%s over %s..%s: the snapshot's server answered\n%s\nthe server it was taken from\n%s", c.query, c.r.Start, c.r.End, got, want)
		}
	}
	// The pushed family's metadata, saved then linked into the snapshot
	// (what the servers' self-scrape gives is not stored).
	want, err := newAPIClient(t, p).Metadata(ctx, "snapshot_pushed_total", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := newAPIClient(t, q).Metadata(ctx, "snapshot_pushed_total", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != 1 || !reflect.DeepEqual(got, want) {
		t.Errorf("metadata of snapshot_pushed_total: the snapshot's server has %v, the server it was taken from %v", got, want)
	}
}

// TestSnapshotEndpoint: the snapshot endpoint answers as Prometheus' does
// without --web.enable-admin-api (503, "admin APIs disabled"), to a GET
// (405) and to a skip_head that is not a boolean (400), and takes no
// snapshot then.
func TestSnapshotEndpoint(t *testing.T) {
	for _, c := range []struct {
		enabled bool
		method  string
		query   string
		code    int
		errText string
	}{
		{false, http.MethodPost, "", http.StatusServiceUnavailable, "admin APIs disabled"},
		{true, http.MethodGet, "", http.StatusMethodNotAllowed, "POST"},
		{true, http.MethodPost, "?skip_head=maybe", http.StatusBadRequest, "skip_head"},
	} {
		s := &server{}
		s.cfg.Storage.Path = t.TempDir()
		s.cfg.Web.EnableAdminAPI = c.enabled
		rec := httptest.NewRecorder()
		s.snapshotHandler().ServeHTTP(rec, httptest.NewRequest(c.method, "/api/v1/admin/tsdb/snapshot"+c.query, nil))
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.errText) || !strings.Contains(rec.Body.String(), `"status":"error"`) {
			t.Errorf("%+v: %d %s", c, rec.Code, rec.Body.String())
		}
		if _, err := os.Stat(filepath.Join(s.cfg.Storage.Path, snapshotsDir)); err == nil {
			t.Errorf("%+v: a snapshot directory was written", c)
		}
	}
}
