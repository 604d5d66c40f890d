package archive

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSimilar is the similar-case search over an archive of 100,000
// cases (issue 12 asks for under 50 ms).
func BenchmarkSimilar(b *testing.B) {
	a := open(b, filepath.Join(b.TempDir(), FileName), Config{}, func() time.Time { return t0 })
	rng := rand.New(rand.NewPCG(1, 2))
	causes := []string{"kv_cache_eviction_storm", "power_cap", "prefix_cache_collapse", "request_queue_backlog"}
	ctx := context.Background()
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100_000 {
		c := causes[i%len(causes)]
		d := diag(fmt.Sprintf("d-%06d", i), c, t0.Add(time.Duration(i)*time.Minute))
		fp := fpFor(c, rng)
		if _, err := tx.Exec(`INSERT INTO cases (id, cause, state, start_ms, first_seen_ms, updated_ms, diagnosis, fingerprint, vector) VALUES (?, ?, 'resolved', ?, ?, ?, '{}', '{}', ?)`,
			d.ID, c, d.Start.UnixMilli(), d.Start.UnixMilli(), d.Start.UnixMilli(), encodeVector(Vector(fp))); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	if err := a.load(); err != nil {
		b.Fatal(err)
	}
	if a.Len() != 100_000 {
		b.Fatalf("%d cases", a.Len())
	}
	q := fpFor("power_cap", rng)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if got := a.Similar(q, 3); len(got) != 3 || got[0].Cause != "power_cap" {
			b.Fatalf("similar: %+v", got)
		}
	}
}
