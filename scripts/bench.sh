#!/usr/bin/env bash
# `make bench`: the reference scenario. Starts a fresh strata serve on
# loopback, drives `strata bench run` at it (10k series, 3 x 40 s by default:
# a few minutes on 2 cores), prints the markdown report and stops the server
# by PID. BENCH_SERIES, BENCH_DURATION, BENCH_REPEATS, BENCH_OUT override;
# BENCH_INTERVAL=1s paces the load (every series one sample per second).
set -euo pipefail
cd "$(dirname "$0")/.."
port=${BENCH_PORT:-19291}
out=${BENCH_OUT:-bench-report}
work=$(mktemp -d /tmp/strata-bench.XXXXXX)
pid=""
cleanup() {
	if [[ -n "$pid" ]]; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

./strata serve --storage.path="$work/data" --web.listen-address="127.0.0.1:$port" --web.enable-pprof >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do
	curl -fs "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 && break
	sleep 0.2
done
./strata bench run --url="http://127.0.0.1:$port/api/v1/write" --pid="$pid" \
	--series="${BENCH_SERIES:-10000}" --duration="${BENCH_DURATION:-40s}" --repeats="${BENCH_REPEATS:-3}" \
	--tier-dir=raw="$work/data/raw" --tier-dir=minute="$work/data/minute" --tier-dir=hour="$work/data/hour" \
	${BENCH_INTERVAL:+--interval="$BENCH_INTERVAL"} \
	--query-repeats=3 --cpu-profile="$out/cpu.pprof" --name=strata --out="$out" --log.level=warn
