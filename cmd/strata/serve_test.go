package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace/noop"
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
