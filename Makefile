# Strata's developer entry points. `make help` lists them.
GO          ?= go
BIN         ?= strata
PKGS        := ./...
# `make test` runs each test once. The packages with concurrency run under the
# race detector, long tests included (backfill since its stream writes
# partitions and reads the next slice in goroutines of their own); every other
# package runs plain: PLAIN_PKGS is computed, so that a new package is never
# left out. The diagnosis engine's long tests replay hours of simulated history
# and would take most of CI's time under the race detector: its short tests (the
# live engine, the notifier, the archive's concurrent writers) run under it, its
# long tests plain.
# RACE_PKGS is in the order go test starts them: the packages whose tests take
# longest first, so that none of them starts last and runs alone.
RACE_PKGS   := ./tiers/... ./cmd/... ./query/... ./downsample/... ./dcgmbridge/... ./remotewrite/... ./backfill/... ./bench/... ./internal/...
RACE_SHORT_PKGS := ./diagnose/...
PLAIN_PKGS   = $(filter-out $(shell $(GO) list $(RACE_PKGS)),$(shell $(GO) list $(PKGS)))
# Tests that run plain inside race packages: TestRollupSizeRatios measures what
# a race build changes (race builds write the rollup files at a faster zstd
# level, tiers/codec_race.go); the tiers' differential tests against raw data
# (35 days of history) and Prometheus' PromQL test files through the query
# engine, plain and with every expression pinned, are computation in one
# goroutine, which the race detector only slows down (the files took 39-92 s
# each under it, 5 s without), and so is the suite answered twice through
# the results cache (TestPromQLAcceptanceCached; the cache's concurrency is
# TestResultsCacheConcurrent's, under it). The files split into parts
# evaluated in parallel (TestPromQLAcceptanceSplit) stay under the race
# detector.
PLAIN_TESTS := ^(TestRollupSizeRatios|TestRollupTiersAgreeWithRaw|TestHourTierIssueFigures|TestPromQLAcceptance|TestPromQLAcceptancePinned|TestPromQLAcceptanceCached)$$
PLAIN_TESTS_PKGS := ./tiers/ ./query/
GOLANGCI    := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
FUZZTIME    ?= 30s
# What `strata --version` and /api/v1/status/buildinfo report, set with
# -ldflags as Prometheus' build does (a plain `go build` reads the module and
# VCS information instead: cmd/strata/version.go).
VERSION     ?= $(shell git describe --tags --always --dirty 2>/dev/null | sed 's/^v//')
REVISION    ?= $(shell git rev-parse HEAD 2>/dev/null)
BRANCH      ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null)
BUILD_USER  ?= $(shell id -un 2>/dev/null)@$(shell hostname 2>/dev/null)
# The commit's date (the clock's outside Git): building the same tree twice gives the same
# binary, and `make run` does not relink every time.
BUILD_DATE  ?= $(shell TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d-%H:%M:%S 2>/dev/null || date -u +%Y%m%d-%H:%M:%S)
VERSION_PKG := github.com/prometheus/common/version
LDFLAGS     := -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Revision=$(REVISION) \
	-X $(VERSION_PKG).Branch=$(BRANCH) -X $(VERSION_PKG).BuildUser=$(BUILD_USER) -X $(VERSION_PKG).BuildDate=$(BUILD_DATE)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the strata binary into ./strata.
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/strata

.PHONY: run
run: build ## Start Strata with the embedded default configuration (data in ./data).
	./$(BIN) serve

.PHONY: demo
demo: build ## Strata plus a simulated vLLM cluster with one fault (KV-cache storm); DEMO_DURATION=30m.
	./scripts/demo.sh

.PHONY: test
test: ## Run every test once, the long ones too, under the race detector where there is concurrency (what CI runs).
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-race test-rest

# The two halves of `make test`, run at once: the race run takes longest, and
# the plain half fills the cores it leaves idle (go test runs two packages at a
# time on two cores, and a package's tests run one after the other). Each
# half's output is printed when it ends.
.PHONY: test-race test-rest
test-race:
	$(GO) test -race -timeout 45m -skip '$(PLAIN_TESTS)' $(RACE_PKGS)

test-rest:
	$(GO) vet $(PKGS)
	$(GO) test -race -short -timeout 20m $(RACE_SHORT_PKGS)
	$(GO) test -timeout 20m -run '$(PLAIN_TESTS)' $(PLAIN_TESTS_PKGS)
	$(GO) test -timeout 20m $(PLAIN_PKGS)

.PHONY: test-short
test-short: ## Quick loop: skip crash, soak and long fuzz tests.
	$(GO) test -short $(PKGS)

.PHONY: bench
bench: build ## Reference scenario: strata bench against a fresh strata serve (a few minutes); prints the report.
	./scripts/bench.sh

.PHONY: bench-diagnose
bench-diagnose: build ## Diagnosis benchmark, both splits, full size (about half an hour on 2 cores); report in diagnose-bench/. SHORT=1 for the CI form.
	./$(BIN) diagnose bench --split=both --out=diagnose-bench $(if $(SHORT),--short,)

.PHONY: bench-go
bench-go: ## Run the Go benchmarks of the hot paths.
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

.PHONY: fuzz
fuzz: ## Fuzz the remote-write decoder, then the OTLP receiver, each for FUZZTIME (default 30s).
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./remotewrite
	$(GO) test -run '^$$' -fuzz FuzzOTLP -fuzztime $(FUZZTIME) ./remotewrite

.PHONY: lint
lint: ## Run golangci-lint v2 with .golangci.yml.
	$(GO) run $(GOLANGCI) run --allow-parallel-runners $(PKGS)
