# Strata's developer entry points. `make help` lists them.
GO          ?= go
BIN         ?= strata
PKGS        := ./...
# Packages with concurrency: the race detector runs on these in `make test`.
RACE_PKGS   := ./remotewrite/... ./tiers/... ./downsample/... ./query/... ./backfill/... ./dcgmbridge/... ./bench/...
GOLANGCI    := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
FUZZTIME    ?= 30s

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build the strata binary into ./strata.
	$(GO) build -o $(BIN) ./cmd/strata

.PHONY: run
run: build ## Start Strata with the embedded default configuration (data in ./data).
	./$(BIN) serve

.PHONY: demo
demo: build ## Strata plus a simulated vLLM cluster with one fault (KV-cache storm); DEMO_DURATION=30m.
	./scripts/demo.sh

.PHONY: test
test: ## Run every test, the long ones too, and the race detector on concurrent packages (what CI runs).
	$(GO) vet $(PKGS)
	$(GO) test -timeout 20m $(PKGS)
	$(GO) test -race -short -timeout 20m $(RACE_PKGS)

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
fuzz: ## Fuzz the remote-write decoder for FUZZTIME (default 30s).
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME) ./remotewrite

.PHONY: lint
lint: ## Run golangci-lint v2 with .golangci.yml.
	$(GO) run $(GOLANGCI) run --allow-parallel-runners $(PKGS)
