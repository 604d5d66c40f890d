package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
)

// TestStartServerErrorClosesOpenedTiers: when a tier fails to open after
// others did, start-up returns the error (no panic) and releases what it
// opened, so the same directory can be opened again.
func TestStartServerErrorClosesOpenedTiers(t *testing.T) {
	cfg, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Storage.Path = t.TempDir()
	blocker := filepath.Join(cfg.Storage.Path, "minute")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil { // a file where the minute tier's directory goes
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	if _, err := startServer(cfg, logger); err == nil || !strings.Contains(err.Error(), "minute") {
		t.Fatalf("startServer = %v, want an error about the minute tier", err)
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	srv, err := startServer(cfg, logger) // the raw tier's lock was released
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	// Queries start their engine spans from the no-op tracer, which
	// allocates nothing, not from the global tracer's default.
	if tp := otel.GetTracerProvider(); tp != (noop.TracerProvider{}) {
		t.Errorf("tracer provider %T after start-up, want the no-op provider", tp)
	}
	if err := srv.close(); err != nil {
		t.Fatal(err)
	}
}

// TestQueriedRecently: a query through the HTTP API, or a streamed gRPC
// call (StoreAPI Series, Query API), counts the server as queried for
// queryHold; a request that reads no series data (labels, metadata,
// status) does not.
func TestQueriedRecently(t *testing.T) {
	cfg, err := loadConfig("")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Storage.Path = t.TempDir()
	srv, err := startServer(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.close(); err != nil {
			t.Error(err)
		}
	})
	h := srv.handler()
	get := func(path string) {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
		}
	}
	now := time.Now()
	for _, p := range []string{"/api/v1/labels", "/api/v1/metadata", "/api/v1/status/buildinfo", "/api/v1/series?match[]=up"} {
		get(p)
		if srv.queriedRecently(time.Now()) {
			t.Fatalf("queried after GET %s", p)
		}
	}
	get("/api/v1/query?query=up")
	if !srv.queriedRecently(time.Now()) {
		t.Fatal("not queried after an instant query")
	}
	if srv.queriedRecently(time.Now().Add(queryHold)) {
		t.Fatalf("still queried %v after the query", queryHold)
	}

	srv.queried.Store(0)
	called := false
	err = srv.streamReadsData(nil, nil, &grpc.StreamServerInfo{FullMethod: "/thanos.Store/Series"}, func(any, grpc.ServerStream) error {
		called = true
		if !srv.queriedRecently(time.Now()) {
			t.Error("not queried while a stream runs")
		}
		return nil
	})
	if err != nil || !called {
		t.Fatalf("stream handler: called %v, err %v", called, err)
	}
	if at := time.Unix(0, srv.queried.Load()); at.Before(now) {
		t.Fatalf("queried at %v after the stream, want its end", at)
	}
}
