package bench

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestExternalTarget runs a Scenario against a real receiver named by
// environment variables, until `strata bench` is the front door. It is how
// docs/bench.md's figures were taken (see bench/prometheus.sh):
//
//	STRATA_BENCH_URL          remote-write URL (required; the test skips without it)
//	STRATA_BENCH_PID          server PID for CPU and memory
//	STRATA_BENCH_TIER_DIRS    tier=dir[,tier=dir...] for bytes on disk
//	STRATA_BENCH_OUT          directory for report.json, report.md and charts
//	STRATA_BENCH_NAME, _SERIES, _DURATION, _REPEATS, _PROTOCOL, _CONCURRENCY,
//	_TIMESTAMPS, _BACKFILL, _QUERY_REPEATS, _CPU_PROFILE (a path)
func TestExternalTarget(t *testing.T) {
	target := os.Getenv("STRATA_BENCH_URL")
	if testing.Short() || target == "" {
		t.Skip("set STRATA_BENCH_URL (and run without -short) to bench a real receiver")
	}
	env := func(k string) string { return os.Getenv("STRATA_BENCH_" + k) }
	atoi := func(k string) int {
		if env(k) == "" {
			return 0
		}
		n, err := strconv.Atoi(env(k))
		if err != nil {
			t.Fatalf("STRATA_BENCH_%s: %v", k, err)
		}
		return n
	}
	dur := func(k string) time.Duration {
		if env(k) == "" {
			return 0
		}
		d, err := time.ParseDuration(env(k))
		if err != nil {
			t.Fatalf("STRATA_BENCH_%s: %v", k, err)
		}
		return d
	}
	sc := Scenario{
		Name: env("NAME"),
		Load: LoadConfig{
			URL: target, Protocol: Protocol(env("PROTOCOL")), Series: atoi("SERIES"),
			Concurrency: atoi("CONCURRENCY"), Duration: dur("DURATION"), Backfill: dur("BACKFILL"),
			Timestamps: env("TIMESTAMPS"),
		},
		Repeats:        atoi("REPEATS"),
		PID:            atoi("PID"),
		QueryRepeats:   atoi("QUERY_REPEATS"),
		CPUProfilePath: env("CPU_PROFILE"),
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, nil)),
	}
	if dirs := env("TIER_DIRS"); dirs != "" {
		sc.TierDirs = map[string]string{}
		for _, kv := range strings.Split(dirs, ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("STRATA_BENCH_TIER_DIRS: %q is not tier=dir", kv)
			}
			sc.TierDirs[k] = v
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	rep, err := Run(ctx, sc)
	if err != nil {
		t.Fatal(err)
	}
	out := env("OUT")
	if out == "" {
		out = t.TempDir()
	}
	paths, err := rep.WriteFiles(out)
	if err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %v\n%s", paths, md.String())
	if rep.Summary.AcceptedSamplesPerSecond.Median <= 0 {
		t.Fatalf("the target accepted nothing: %v", rep.Runs[0].Load.Errors)
	}
}

// TestCompareReports prints bench.Compare of two JSON reports named by
// STRATA_BENCH_COMPARE="a.json,b.json", until `strata bench compare` is wired.
func TestCompareReports(t *testing.T) {
	pair := os.Getenv("STRATA_BENCH_COMPARE")
	if pair == "" {
		t.Skip("set STRATA_BENCH_COMPARE=a.json,b.json to compare two reports")
	}
	pa, pb, ok := strings.Cut(pair, ",")
	if !ok {
		t.Fatalf("STRATA_BENCH_COMPARE=%q: want a.json,b.json", pair)
	}
	a, err := LoadReport(pa)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadReport(pb)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + Compare(a, b))
}
