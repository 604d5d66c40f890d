package tiers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// TestLogFilter: the TSDB's compaction toggles are dropped, a compaction
// that Close cancelled is written at info level as such, and any other
// failed compaction stays an error.
func TestLogFilter(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(logFilter{slog.NewTextHandler(&buf, nil)}).With("tier", "raw")

	l.Info("Compactions disabled")
	l.Info("Compactions enabled")
	if buf.Len() != 0 {
		t.Fatalf("compaction toggles logged: %s", buf.String())
	}

	cancelled := fmt.Errorf("compact head: %w", errors.Join(fmt.Errorf("populate block: %w", context.Canceled), context.Canceled))
	l.Error("compaction failed", "err", cancelled)
	got := buf.String()
	if !strings.Contains(got, "level=INFO") || !strings.Contains(got, "compaction stopped by close") ||
		!strings.Contains(got, "tier=raw") || !strings.Contains(got, "populate block: context canceled") {
		t.Errorf("a cancelled compaction logged as %q, want it at info level, said so, its attributes kept", got)
	}

	buf.Reset()
	l.Error("compaction failed", "err", errors.New("write chunks: no space left on device"))
	if got := buf.String(); !strings.Contains(got, "level=ERROR") || !strings.Contains(got, `msg="compaction failed"`) {
		t.Errorf("a failed compaction logged as %q, want it an error as written", got)
	}
}
