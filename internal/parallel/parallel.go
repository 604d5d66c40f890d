// Package parallel carries, in a context, how many goroutines one piece of
// a query may keep busy. The query API splits a long range query into parts
// evaluated at once; each part's reads then share the machine with the other
// parts instead of each starting one reader per CPU.
package parallel

import (
	"context"
	"runtime"
)

type budgetKey struct{}

// WithBudget returns ctx carrying a budget of n goroutines (at least 1).
func WithBudget(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, budgetKey{}, max(n, 1))
}

// Budget returns the goroutines ctx allows: its budget, else GOMAXPROCS.
func Budget(ctx context.Context) int {
	if n, ok := ctx.Value(budgetKey{}).(int); ok {
		return n
	}
	return runtime.GOMAXPROCS(0)
}
