#!/usr/bin/env bash
# Runs bench's reference scenario against a freshly started, empty receiver on
# 127.0.0.1 with `strata bench run` and prints the markdown report. Nothing is
# left behind but the report directory.
#
#   bench/run.sh strata     [outdir]   # builds ./cmd/strata from this tree
#   bench/run.sh prometheus [outdir]   # builds Prometheus from the module Strata depends on
#
# Environment (all optional): BENCH_PORT (19299), BENCH_SERIES (10000),
# BENCH_DURATION (60s), BENCH_REPEATS (3), BENCH_PROTOCOL (v1),
# BENCH_CONCURRENCY (4), BENCH_QUERY_REPEATS (5), BENCH_TIMESTAMPS (wallclock
# or interval), BENCH_BACKFILL (0s; only with interval), PROMETHEUS_BIN (where the
# Prometheus binary is built or found; default /tmp/strata-bench-prometheus).
set -euo pipefail

target=${1:-strata}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-/tmp/strata-bench-$target}
port=${BENCH_PORT:-19299}
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

# strata drives the load in both cases.
(cd "$repo" && go build -o "$work/strata" ./cmd/strata)

case "$target" in
strata)
	"$work/strata" serve --storage.path="$work/db" --web.listen-address="127.0.0.1:$port" \
		--web.enable-pprof >"$work/server.log" 2>&1 &
	pid=$!
	;;
prometheus)
	bin=${PROMETHEUS_BIN:-/tmp/strata-bench-prometheus}
	if [[ ! -x "$bin" ]]; then
		# go.mod lists cmd/prometheus as a tool, so it builds at the version
		# Strata depends on. Without -tags builtinassets the web UI is not
		# embedded; the API works.
		(cd "$repo" && go build -o "$bin" github.com/prometheus/prometheus/cmd/prometheus)
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
tierdirs=(--tier-dir="total=$work/db")
for t in raw minute hour wal; do
	if [[ -d "$work/db/$t" ]]; then
		tierdirs+=(--tier-dir="$t=$work/db/$t")
	fi
done

mkdir -p "$out"
"$work/strata" bench run --url="http://127.0.0.1:$port/api/v1/write" --pid="$pid" "${tierdirs[@]}" \
	--name="$target" --out="$out" --cpu-profile="$out/cpu.pprof" \
	--series="${BENCH_SERIES:-10000}" --duration="${BENCH_DURATION:-60s}" --repeats="${BENCH_REPEATS:-3}" \
	--protocol="${BENCH_PROTOCOL:-v1}" --concurrency="${BENCH_CONCURRENCY:-4}" \
	--timestamps="${BENCH_TIMESTAMPS:-wallclock}" --backfill="${BENCH_BACKFILL:-0s}" \
	--query-repeats="${BENCH_QUERY_REPEATS:-5}" --log.level=warn >"$out/run.log" 2>&1 || {
	cat "$out/run.log" >&2
	exit 1
}
cat "$out/report.md"
echo
echo "report: $out/report.json, $out/report.md, charts in $out"
