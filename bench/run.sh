#!/usr/bin/env bash
# Runs bench's reference scenario against a freshly started, empty receiver on
# 127.0.0.1 and prints the markdown report. Nothing is left behind but the
# report directory.
#
#   bench/run.sh strata     [outdir]   # builds ./cmd/strata from this tree
#   bench/run.sh prometheus [outdir]   # builds Prometheus from the module Strata depends on
#
# Environment (all optional): BENCH_PORT (19299), BENCH_SERIES (10000),
# BENCH_DURATION (60s), BENCH_REPEATS (3), BENCH_PROTOCOL (v1),
# BENCH_CONCURRENCY (4), BENCH_QUERY_REPEATS (5), BENCH_TIMESTAMPS (wallclock
# or interval), BENCH_BACKFILL (0s; only with interval), PROMETHEUS_BIN (where the
# Prometheus binary is built or found; default /tmp/strata-bench-prometheus).
#
# Until `strata bench` is wired in cmd/strata, the load is driven by the
# env-gated TestExternalTarget in this package.
set -euo pipefail

target=${1:-strata}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-/tmp/strata-bench-$target}
port=${BENCH_PORT:-19299}
promver=$(cd "$repo" && go list -m -f '{{.Version}}' github.com/prometheus/prometheus)
work=$(mktemp -d /tmp/strata-bench-run.XXXXXX)
pid=""

cleanup() {
	if [[ -n "$pid" ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

case "$target" in
strata)
	(cd "$repo" && go build -o "$work/strata" ./cmd/strata)
	"$work/strata" serve --storage.path="$work/db" --web.listen-address="127.0.0.1:$port" \
		--web.enable-pprof >"$work/server.log" 2>&1 &
	pid=$!
	;;
prometheus)
	bin=${PROMETHEUS_BIN:-/tmp/strata-bench-prometheus}
	if [[ ! -x "$bin" ]]; then
		# A throwaway module: building cmd/prometheus inside Strata's module
		# would add its service-discovery dependencies to our go.mod.
		# v0.316.0 needs no replace directive (v0.314.0 did: its go.mod
		# replaces cloud.google.com/go, which `go install` refuses). The web
		# UI is not embedded without -tags builtinassets; the API works.
		mod="$work/prombuild"
		mkdir -p "$mod"
		printf 'module prombuild\n\ngo 1.26\n\nrequire github.com/prometheus/prometheus %s\n' "$promver" >"$mod/go.mod"
		(cd "$mod" && GOFLAGS=-mod=mod go get "github.com/prometheus/prometheus/cmd/prometheus@$promver" &&
			GOFLAGS=-mod=mod go build -o "$bin" github.com/prometheus/prometheus/cmd/prometheus)
	fi
	printf 'global: {}\n' >"$work/prometheus.yml"
	"$bin" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/db" \
		--web.enable-remote-write-receiver --web.listen-address="127.0.0.1:$port" >"$work/server.log" 2>&1 &
	pid=$!
	;;
*)
	echo "usage: $0 strata|prometheus [outdir]" >&2
	exit 2
	;;
esac

# Wait (bounded) until the API answers.
for _ in $(seq 1 120); do
	if curl -fsS "http://127.0.0.1:$port/api/v1/status/buildinfo" >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		echo "server exited:" >&2
		cat "$work/server.log" >&2
		exit 1
	fi
	sleep 0.5
done

# Every directory present at start is measured; "total" is the whole store.
dirs="total=$work/db"
for t in raw minute hour wal; do
	if [[ -d "$work/db/$t" ]]; then
		dirs="$dirs,$t=$work/db/$t"
	fi
done

mkdir -p "$out"
cd "$repo"
STRATA_BENCH_URL="http://127.0.0.1:$port/api/v1/write" \
	STRATA_BENCH_PID="$pid" \
	STRATA_BENCH_TIER_DIRS="$dirs" \
	STRATA_BENCH_NAME="$target" \
	STRATA_BENCH_OUT="$out" \
	STRATA_BENCH_CPU_PROFILE="$out/cpu.pprof" \
	STRATA_BENCH_SERIES="${BENCH_SERIES:-10000}" \
	STRATA_BENCH_DURATION="${BENCH_DURATION:-60s}" \
	STRATA_BENCH_REPEATS="${BENCH_REPEATS:-3}" \
	STRATA_BENCH_PROTOCOL="${BENCH_PROTOCOL:-v1}" \
	STRATA_BENCH_CONCURRENCY="${BENCH_CONCURRENCY:-4}" \
	STRATA_BENCH_TIMESTAMPS="${BENCH_TIMESTAMPS:-wallclock}" \
	STRATA_BENCH_BACKFILL="${BENCH_BACKFILL:-0s}" \
	STRATA_BENCH_QUERY_REPEATS="${BENCH_QUERY_REPEATS:-5}" \
	go test -count=1 -timeout 1h -run '^TestExternalTarget$' ./bench >"$out/test.log" 2>&1 || {
	cat "$out/test.log" >&2
	exit 1
}
cat "$out/report.md"
echo
echo "report: $out/report.json, $out/report.md, charts in $out"
