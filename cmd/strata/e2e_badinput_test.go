package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/prompb"

	"github.com/strata-dev/strata/internal/diskspace"
)

// TestBadInputEndToEnd sends each kind of bad remote-write request to a running
// strata serve and checks the exact status, that the message names the
// problem, that the server keeps serving, and that data accepted before is
// still there.
func TestBadInputEndToEnd(t *testing.T) {
	p := startStrata(t, t.TempDir())
	now := time.Now().Truncate(time.Second)
	good := func(name string, v float64, ts time.Time) []testSeries {
		return []testSeries{{lbls: labels.FromStrings("__name__", name, "job", "e2e"), samples: []prompb.Sample{{Value: v, Timestamp: ts.UnixMilli()}}}}
	}
	rawSeries := func(lbls []prompb.Label, ts time.Time) []byte {
		req := &prompb.WriteRequest{Timeseries: []prompb.TimeSeries{{Labels: lbls, Samples: []prompb.Sample{{Value: 1, Timestamp: ts.UnixMilli()}}}}}
		b, err := req.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return snappy.Encode(nil, b)
	}
	// A snappy block whose header claims 4 GiB of output, followed by a few bytes.
	// (4 GiB itself is past what a snappy block can hold and is refused as corrupt.)
	hugeClaim := binary.AppendUvarint(nil, 4<<30-1)
	hugeClaim = append(hugeClaim, make([]byte, 16)...)
	valid := encodeV1(t, good("e2e_good", 42, now.Add(-time.Minute)))

	post := func(body []byte, contentType, encoding string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, p.url("/api/v1/write"), bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Content-Encoding", encoding)
		req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(msg)
	}
	if code, msg := post(valid, "application/x-protobuf", "snappy"); code != http.StatusNoContent {
		t.Fatalf("valid request = %d %s", code, msg)
	}

	for _, tc := range []struct {
		name        string
		body        []byte
		contentType string
		encoding    string
		wantCode    int
		wantMsg     string // a substring of the reply that names the problem
	}{
		{"truncated snappy", valid[:len(valid)/2], "application/x-protobuf", "snappy", 400, "snappy"},
		{"garbage protobuf", snappy.Encode(nil, []byte("\xff\xff\xff\xff not a protobuf")), "application/x-protobuf", "snappy", 400, "proto"},
		{"huge claimed length", hugeClaim, "application/x-protobuf", "snappy", 413, "decompressed body too large"},
		{"duplicate label", rawSeries([]prompb.Label{{Name: "__name__", Value: "e2e_bad"}, {Name: "a", Value: "1"}, {Name: "a", Value: "2"}}, now), "application/x-protobuf", "snappy", 400, "duplicate"},
		{"empty label name", rawSeries([]prompb.Label{{Name: "__name__", Value: "e2e_bad"}, {Name: "", Value: "1"}}, now), "application/x-protobuf", "snappy", 400, "empty"},
		{"far future", encodeV1(t, good("e2e_future", 1, now.Add(24*time.Hour))), "application/x-protobuf", "snappy", 400, "ahead"},
		{"too old", encodeV1(t, good("e2e_old", 1, now.Add(-6*time.Hour))), "application/x-protobuf", "snappy", 400, "old"},
		{"wrong content type", valid, "application/json", "snappy", 415, "application/json"},
		{"wrong encoding", valid, "application/x-protobuf", "gzip", 415, "gzip"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, msg := post(tc.body, tc.contentType, tc.encoding)
			if code != tc.wantCode || !strings.Contains(strings.ToLower(msg), strings.ToLower(tc.wantMsg)) {
				t.Errorf("status %d, body %q; want %d and a body naming %q", code, msg, tc.wantCode, tc.wantMsg)
			}
		})
	}

	// Accepted: unsorted labels (stored sorted), NaN and ±Inf values, stale markers.
	unsorted := rawSeries([]prompb.Label{{Name: "job", Value: "e2e"}, {Name: "__name__", Value: "e2e_unsorted"}}, now.Add(-time.Minute))
	if code, msg := post(unsorted, "application/x-protobuf", "snappy"); code != http.StatusNoContent {
		t.Errorf("unsorted labels = %d %s, want 204", code, msg)
	}
	special := []testSeries{{
		lbls: labels.FromStrings("__name__", "e2e_special", "job", "e2e"),
		samples: []prompb.Sample{
			{Value: math.NaN(), Timestamp: now.Add(-40 * time.Second).UnixMilli()},
			{Value: math.Inf(1), Timestamp: now.Add(-30 * time.Second).UnixMilli()},
			{Value: math.Inf(-1), Timestamp: now.Add(-20 * time.Second).UnixMilli()},
			{Value: math.Float64frombits(value.StaleNaN), Timestamp: now.Add(-10 * time.Second).UnixMilli()},
		},
	}}
	if code, msg := post(encodeV1(t, special), "application/x-protobuf", "snappy"); code != http.StatusNoContent {
		t.Errorf("NaN/Inf/stale samples = %d %s, want 204", code, msg)
	}

	client := newAPIClient(t, p)
	ctx := context.Background()
	v, _, _, err := client.Query(ctx, `e2e_good`, now)
	if err != nil {
		t.Fatal(err)
	}
	if vec, ok := v.(model.Vector); !ok || len(vec) != 1 || vec[0].Value != 42 {
		t.Errorf("sample accepted before the bad requests: %v, want 42", v)
	}
	v, _, _, err = client.Query(ctx, `e2e_unsorted{job="e2e"}`, now)
	if err != nil {
		t.Fatal(err)
	}
	if vec, ok := v.(model.Vector); !ok || len(vec) != 1 {
		t.Errorf("unsorted-label series not queryable: %v", v)
	}
	// The range vector holds NaN, +Inf, -Inf; the stale marker ends the series
	// and is not returned, as in Prometheus.
	v, _, _, err = client.Query(ctx, `e2e_special[1m]`, now)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := v.(model.Matrix)
	if !ok || len(m) != 1 || len(m[0].Values) != 3 {
		t.Fatalf("special values = %v, want NaN, +Inf, -Inf", v)
	}
	got := fmt.Sprint(m[0].Values[0].Value, m[0].Values[1].Value, m[0].Values[2].Value)
	if got != "NaN +Inf -Inf" {
		t.Errorf("special values = %s", got)
	}
	v, _, _, err = client.Query(ctx, `e2e_special`, now)
	if err != nil {
		t.Fatal(err)
	}
	if vec, ok := v.(model.Vector); !ok || len(vec) != 0 {
		t.Errorf("instant query after a stale marker = %v, want nothing (the series is stale)", v)
	}
	resp, err := http.Get(p.url("/-/healthy"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("server not healthy after bad input: %d", resp.StatusCode)
	}
}

// TestDiskSpaceLowEndToEnd: a strata serve whose disk has less free space
// than storage.min_free_bytes refuses remote write and OTLP with 503,
// Retry-After and a message naming the setting, says so in its metrics and
// log, and goes on answering queries. (Recovery, and the real disk filling
// up, are internal/diskspace's and the README's: a test cannot fill the
// machine's disk.)
func TestDiskSpaceLowEndToEnd(t *testing.T) {
	if !diskspace.Supported {
		t.Skip("free disk space is not read on this platform")
	}
	// A minimum no disk has free: 1 EiB.
	p := startStrata(t, t.TempDir(), "--storage.min-free-bytes=1EiB")
	body := encodeV1(t, []testSeries{{lbls: labels.FromStrings("__name__", "e2e_disk", "job", "e2e"),
		samples: []prompb.Sample{{Value: 1, Timestamp: time.Now().UnixMilli()}}}})
	for _, tc := range []struct{ path, contentType, encoding string }{
		{"/api/v1/write", "application/x-protobuf", "snappy"},
		{"/api/v1/otlp/v1/metrics", "application/x-protobuf", ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, p.url(tc.path), bytes.NewReader(body))
		req.Header.Set("Content-Type", tc.contentType)
		if tc.encoding != "" {
			req.Header.Set("Content-Encoding", tc.encoding)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(msg), "storage.min_free_bytes") {
			t.Errorf("%s with the disk below the minimum: %d, Retry-After %q: %s", tc.path, resp.StatusCode, resp.Header.Get("Retry-After"), msg)
		}
	}
	if metrics := p.get("/metrics"); !strings.Contains(metrics, "strata_storage_disk_space_low 1") || !strings.Contains(metrics, `strata_remotewrite_rejected_total{reason="disk_space_low"} 2`) {
		var lines []string
		for l := range strings.Lines(metrics) {
			if strings.Contains(l, "strata_storage_") || strings.Contains(l, "rejected_total") {
				lines = append(lines, l)
			}
		}
		t.Errorf("metrics do not show the refusal:\n%s", strings.Join(lines, ""))
	}
	if q := p.get("/api/v1/query?query=vector(1)"); !strings.Contains(q, `"status":"success"`) {
		t.Errorf("a query with the disk below the minimum: %s", q)
	}
	if !strings.Contains(p.output(), "disk space low") {
		t.Errorf("the log does not say why writes are refused:\n%s", p.output())
	}
}

// TestBackfillStopsOnLowDisk: strata backfill below storage.min_free_bytes
// stops before it writes, saying why and how to go on, and the same
// command with room imports.
func TestBackfillStopsOnLowDisk(t *testing.T) {
	if !diskspace.Supported {
		t.Skip("free disk space is not read on this platform")
	}
	dir := t.TempDir()
	in := filepath.Join(dir, "in.om")
	var sb strings.Builder
	sb.WriteString("# TYPE e2e_backfill_disk gauge\n")
	start := time.Now().Add(-2 * time.Hour).Truncate(time.Minute)
	for i := range 60 {
		fmt.Fprintf(&sb, "e2e_backfill_disk{job=\"e2e\"} %d %d\n", i, start.Add(time.Duration(i)*time.Minute).Unix())
	}
	sb.WriteString("# EOF\n")
	if err := os.WriteFile(in, []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, strataBinary, "backfill", "--storage.path="+data, "--storage.min-free-bytes=1EiB", "--no-progress-bar", in).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "backfill stopped: disk space low") ||
		!strings.Contains(string(out), "storage.min_free_bytes") || !strings.Contains(string(out), "rerun the same command") {
		t.Fatalf("a backfill below the minimum: %v\n%s", err, out)
	}
	for _, tier := range []string{"minute", "hour"} {
		if files, _ := filepath.Glob(filepath.Join(data, tier, "*.parquet")); len(files) > 0 {
			t.Fatalf("a backfill below the minimum wrote %v", files)
		}
	}
	out = []byte(runStrata(t, "backfill", "--storage.path="+data, "--storage.min-free-bytes=0", "--no-progress-bar", in))
	if !strings.Contains(string(out), "backfill done") {
		t.Fatalf("the same command with no minimum:\n%s", out)
	}
}
