package query

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/storage"
	"github.com/strata-dev/strata/tiers"
)

// promqlSkips names the upstream .test files Strata does not run, and why.
// Every other file of Prometheus' PromQL acceptance suite must pass.
var promqlSkips = map[string]string{
	// Start timestamps need Prometheus' experimental st-storage TSDB options
	// (XOR2 chunks with start times) and the engine's use-start-timestamps
	// feature; the raw tier stores no start timestamps, remote write 2.0's
	// are not kept yet.
	"testdata/start_timestamps.test": "raw tier does not store start timestamps (st-storage)",
}

// skippingTB runs RunBuiltinTestsWithStorage's per-file subtests, turning the
// files named in skips into skipped subtests that say why.
type skippingTB struct {
	*testing.T
	skips map[string]string
}

func (s skippingTB) Run(name string, f func(*testing.T)) bool {
	if reason, ok := s.skips[name]; ok {
		return s.T.Run(name, func(t *testing.T) { t.Skip(reason) })
	}
	return s.T.Run(name, f)
}

// TestPromQLAcceptance runs Prometheus' own PromQL test suite
// (promql/promqltest/testdata/*.test, embedded in the module) through the
// engine New builds and over a raw tier opened by tiers.OpenRaw, the storage
// `strata serve` queries.
func TestPromQLAcceptance(t *testing.T) {
	start := time.Now()
	cfg := acceptanceConfig()
	api := newAcceptanceAPI(t, cfg)

	// The whole suite takes about 30 s on two cores, so -short runs it all.
	promqltest.RunBuiltinTestsWithStorage(skippingTB{T: t, skips: promqlSkips}, api.Engine(), newRawTestStorage)
	t.Logf("PromQL acceptance suite took %s", time.Since(start).Round(time.Millisecond))
}

// TestPromQLAcceptanceSplit runs the suite again with every range query of
// two steps or more split into up to three parts evaluated in parallel
// (production splits only queries of 2,000 steps or more): the joined
// results, annotations and errors must be what the suite expects of one
// evaluation.
func TestPromQLAcceptanceSplit(t *testing.T) {
	cfg := acceptanceConfig()
	api := newAcceptanceAPI(t, cfg)
	split := &splitEngine{QueryEngine: api.engine, parser: parser.NewParser(cfg.parserOptions()), parts: 3, minSteps: 1, maxSamples: cfg.MaxSamples}
	promqltest.RunBuiltinTestsWithStorage(skippingTB{T: t, skips: promqlSkips}, split, newRawTestStorage)
}

// TestPromQLAcceptanceCached runs the suite again with every range query
// answered by the results cache twice: the first evaluation keeps its steps
// (every step of the suite's 1970 data is far behind the freshness horizon)
// and the second, which the suite checks, comes from the cache where the
// first could be kept. A load between them changes the generation.
func TestPromQLAcceptanceCached(t *testing.T) {
	cfg := acceptanceConfig()
	api := newAcceptanceAPI(t, cfg)
	src := &acceptanceCacheSource{}
	cache := newCacheEngine(api.split, parser.NewParser(cfg.parserOptions()), src, cfg, prometheus.NewRegistry())
	open := func(tb testing.TB) storage.Storage {
		st := newRawTestStorage(tb)
		raw := st.(rawTestStorage).Raw
		raw.TrackLateAppends(cfg.ResultsCacheFreshness, nil)
		src.set(raw)
		return st
	}
	promqltest.RunBuiltinTestsWithStorage(skippingTB{T: t, skips: promqlSkips}, twiceEngine{cache}, open)
	hits := testutil.ToFloat64(cache.hits)
	if hits == 0 {
		t.Error("no range query of the suite was answered from the cache")
	}
	t.Logf("range queries answered from the cache: %v (bypassed %v)", hits, testutil.ToFloat64(cache.bypassed))
}

// acceptanceCacheSource is the CacheSource of the suite's current storage:
// each file (and each clear) opens a new raw tier, and an answer over one
// must never serve another, so the store's number is in the generation.
type acceptanceCacheSource struct {
	mu    sync.Mutex
	raw   *tiers.Raw
	store uint64
}

func (s *acceptanceCacheSource) set(raw *tiers.Raw) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.raw, s.store = raw, s.store+1
}

func (s *acceptanceCacheSource) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.Generation() ^ (s.store * 0x9E3779B97F4A7C15)
}

func (s *acceptanceCacheSource) RawFrom(int64) int64            { return math.MinInt64 }
func (s *acceptanceCacheSource) Derived([]*labels.Matcher) bool { return false }

// twiceEngine evaluates every range query once and discards the answer
// before returning the query the caller runs.
type twiceEngine struct{ *cacheEngine }

func (e twiceEngine) NewRangeQuery(ctx context.Context, q storage.Queryable, opts promql.QueryOpts, qs string, start, end time.Time, interval time.Duration) (promql.Query, error) {
	if first, err := e.cacheEngine.NewRangeQuery(ctx, q, opts, qs, start, end, interval); err == nil {
		first.Exec(ctx)
		first.Close()
	}
	return e.cacheEngine.NewRangeQuery(ctx, q, opts, qs, start, end, interval)
}

// newAcceptanceAPI builds the API whose engines the suite runs, over a raw
// tier that only gives New a queryable: each file gets its own tier.
func newAcceptanceAPI(t *testing.T, cfg Config) *API {
	t.Helper()
	api, err := New(cfg, openTestRaw(t), nil, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := api.Close(); err != nil {
			t.Error(err)
		}
	})
	return api
}

// acceptanceConfig is the query configuration of Prometheus' own test
// engine (promqltest.NewTestEngine): the experimental syntax the files use,
// delayed __name__ removal, and its sample limit, which some files exercise.
func acceptanceConfig() Config {
	cfg := DefaultConfig()
	cfg.EnableExperimentalFunctions = promqltest.TestParserOpts.EnableExperimentalFunctions
	cfg.EnableBinopFillModifiers = promqltest.TestParserOpts.EnableBinopFillModifiers
	cfg.EnableUnquotedUTF8Names = promqltest.TestParserOpts.EnableUnquotedUTF8Names
	cfg.EnableDelayedNameRemoval = true
	cfg.MaxSamples = promqltest.DefaultMaxSamplesPerQuery
	return cfg
}

// rawTestStorage is the raw tier as the storage.Storage promqltest loads its
// series into.
type rawTestStorage struct {
	*tiers.Raw
}

// StartTime implements storage.Storage.
func (s rawTestStorage) StartTime() (int64, error) {
	mint, _, ok := s.Bounds()
	if !ok {
		return 0, nil
	}
	return mint, nil
}

// newRawTestStorage opens a raw tier for one test file. The retention is
// widened from 24 h because the files load series spanning days from the
// epoch, and the tier would otherwise drop the older ones when its head is
// compacted during the test. The out-of-order window is widened because the
// files load one series after another: a series that starts at 0 after one
// that ran for hours is "out of order" for a TSDB, which accepts in-order
// samples only within half a block (1 h) of its newest. Prometheus' own test
// storage gets the same effect with 24 h blocks. The TSDB's background
// compactions are off: a file's series load into the head (and its
// out-of-order head) while the TSDB compacted it, and under the race
// detector that once panicked in the TSDB's own chunk file mapper
// ("expected newly cut file to have sequence:offset 1:8, got 2:8", the
// out-of-order compaction cutting a chunk file the appends had cut too; a
// known TSDB race, prometheus/prometheus#10769). The files test PromQL, not
// the TSDB's compactions.
func newRawTestStorage(tb testing.TB) storage.Storage {
	cfg := tiers.DefaultRawConfig(tb.TempDir())
	cfg.Retention = 100 * 365 * 24 * time.Hour
	cfg.OutOfOrderWindow = 100 * 365 * 24 * time.Hour
	raw, err := tiers.OpenRaw(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		tb.Fatal(err)
	}
	raw.DB().DisableCompactions()
	return rawTestStorage{raw}
}
