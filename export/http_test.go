package export_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/export"
	"github.com/strata-dev/strata/tiers"
)

// gatedTier lets its first `free` selects through and holds the others
// until release is closed.
type gatedTier struct {
	export.Tier
	free    int32
	calls   atomic.Int32
	held    chan struct{} // closed when the first call is held
	release chan struct{}
}

func (g *gatedTier) SelectFields(ctx context.Context, mint, maxt int64, fields tiers.WindowFields, ms ...*labels.Matcher) ([]tiers.SeriesWindows, error) {
	if n := g.calls.Add(1); n > g.free {
		if n == g.free+1 {
			close(g.held)
		}
		select {
		case <-g.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Tier.SelectFields(ctx, mint, maxt, fields, ms...)
}

// TestHandlerStreams: the first rows reach the client while the export is
// still reading the tiers (its second read is held until the client has
// them), and the whole table arrives once it goes on.
func TestHandlerStreams(t *testing.T) {
	tt := buildTiers(t, knownWorkload(2), 2, t0+2*dayMs)
	gate := &gatedTier{Tier: tt.hour, free: 1, held: make(chan struct{}), release: make(chan struct{})}
	e := export.New(export.Config{Hour: gate, Typing: export.Typing{Catalogue: catalogue.TypeOf}, ChunkWindows: 24})
	srv := httptest.NewServer(export.NewHandler(e, export.CapacityConfig{}, quietLogger(), nil))
	defer srv.Close()
	q := url.Values{"query": {"DCGM_FI_DEV_GPU_UTIL"}, "by": {"Hostname"}, "step": {"1h"}, "format": {"csv"},
		"from": {time.UnixMilli(t0).UTC().Format(time.RFC3339)}, "to": {time.UnixMilli(t0 + 2*dayMs).UTC().Format(time.RFC3339)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/export?"+q.Encode(), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/csv") {
		t.Fatalf("status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(resp.Body)
	var first []string
	for range 3 { // the header and the first hour's two hosts
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the first rows while the export is held: %v", err)
		}
		first = append(first, line)
	}
	if !strings.HasPrefix(first[0], "Hostname,step_start,step_end,tier,") || !strings.Contains(first[1], "2026-01-05T00:00:00Z") {
		t.Fatalf("first lines %q", first)
	}
	// The rows above came while the export cannot finish: its second
	// read is held until release.
	select {
	case <-gate.held:
	case <-ctx.Done():
		t.Fatal("the export's second read never came")
	}
	close(gate.release)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(first) - 1 + strings.Count(string(rest), "\n"); n != 2*48 {
		t.Fatalf("%d rows, want 2 hosts x 48 hours", n)
	}
}

// TestHandlerErrors: a request the tiers cannot answer is a 400 in the
// Prometheus API's error shape, before any row.
func TestHandlerErrors(t *testing.T) {
	tt := buildTiers(t, knownWorkload(1), 1, t0+dayMs)
	srv := httptest.NewServer(export.NewHandler(tt.exporter(), export.CapacityConfig{}, quietLogger(), nil))
	defer srv.Close()
	for _, q := range []string{
		"query=nope&from=2026-01-05&to=2026-01-06",
		"query=DCGM_FI_DEV_GPU_UTIL&from=2026-01-05&to=2026-01-06&by=pod",
		"query=DCGM_FI_DEV_GPU_UTIL&from=2026-01-05&to=2026-01-06&format=xlsx",
		"query=DCGM_FI_DEV_GPU_UTIL&from=2026-01-05&to=2026-01-06&tz=Mars/Olympus",
		"query=DCGM_FI_DEV_GPU_UTIL&from=2026-01-05&to=2026-01-06&format=png",
	} {
		resp, err := http.Get(srv.URL + "/api/v1/export?" + q)
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Status, ErrorType, Error string }
		err = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusBadRequest || body.Status != "error" || body.ErrorType != "bad_data" || body.Error == "" {
			t.Errorf("%s: %d %+v (%v)", q, resp.StatusCode, body, err)
		}
	}
}
