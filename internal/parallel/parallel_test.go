package parallel

import (
	"context"
	"runtime"
	"testing"
)

func TestBudget(t *testing.T) {
	if got := Budget(context.Background()); got != runtime.GOMAXPROCS(0) {
		t.Errorf("no budget: %d, want GOMAXPROCS %d", got, runtime.GOMAXPROCS(0))
	}
	if got := Budget(WithBudget(context.Background(), 3)); got != 3 {
		t.Errorf("budget 3: got %d", got)
	}
	if got := Budget(WithBudget(context.Background(), 0)); got != 1 {
		t.Errorf("budget 0: got %d, want 1", got)
	}
}
