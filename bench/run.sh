#!/usr/bin/env bash
# Runs bench's scenario against freshly started, empty receivers on 127.0.0.1
# and prints the markdown reports. Nothing is left behind but the report
# directories.
#
#   bench/run.sh compare         [outdir]  # Prometheus, VictoriaMetrics (with VM_BIN), then Strata, back to back
#   bench/run.sh strata          [outdir]  # builds ./cmd/strata from this tree
#   bench/run.sh prometheus      [outdir]  # builds Prometheus from the module Strata depends on
#   bench/run.sh victoriametrics [outdir]  # the binary at VM_BIN
#   bench/run.sh overload        [outdir]  # Strata's capacity, then an overload of it
#
# `compare` writes each target's report to outdir/<round>/<target>/ and the
# comparison (`strata bench compare`: Strata against each peer) to
# outdir/<round>/comparison.md, with the machine's load average before and
# after each target in outdir/<round>/uptime.txt. Even rounds run the
# targets' loads in reverse order. Each target's server stays up (on
# BENCH_PORT + its index) after its load, and the dashboards of all of them
# are measured at the end of the round interleaved (`strata bench
# dashboard`: each panel execution on every target in turn), so that the
# machine's other work slows them alike. Dashboard latencies compare only
# over the same data: paced (BENCH_INTERVAL), where every target holds the
# same samples; unpaced, the faster receiver holds more and the comparison
# says so.
#
# `overload` measures Strata's capacity (an unpaced run of
# BENCH_CAPACITY_DURATION, 60s, at BENCH_CONCURRENCY senders), then offers
# BENCH_OVERLOAD_FACTOR (2) times that rate for BENCH_DURATION (5m here) from
# BENCH_OVERLOAD_SENDERS (128, above the receiver's in-flight limit of 64)
# senders against the same server, and writes outdir/overload.md: RSS and
# accepted samples/s over the first and the last minute, and the 2xx, 429
# and 5xx counts (docs/bench.md, "Overload").
#
# Environment (all optional): BENCH_INTERVAL (empty: as fast as the target
# accepts; 1s or 15s: paced, every series one sample per interval in real
# time), BENCH_SERIES (10000), BENCH_DURATION (60s), BENCH_REPEATS (3),
# BENCH_PROTOCOL (v1, v2, or otlp: OTLP/HTTP to each receiver's OTLP path,
# Prometheus started with --web.enable-otlp-receiver), BENCH_CONCURRENCY (4),
# BENCH_QUERY_REPEATS (5),
# BENCH_TIMESTAMPS (wallclock or interval), BENCH_BACKFILL (0s; only with
# interval), BENCH_SKIP_QUERIES (set: no dashboard queries), BENCH_ROUNDS (compare: 1;
# more alternate the targets again), BENCH_PORT (19299), PROMETHEUS_BIN (where
# the Prometheus binary is built or found; default
# /tmp/strata-bench-prometheus), VM_BIN (a victoria-metrics binary, e.g. from
# `GOBIN=/tmp/vmbin go install
# github.com/VictoriaMetrics/VictoriaMetrics/app/victoria-metrics@v1.150.0`),
# STRATA_BIN (a strata binary to use instead of building one), STRATA_FLAGS
# (more `strata serve` flags, e.g. --storage.raw.wal-compression=zstd),
# PROMETHEUS_RULES (set: Prometheus also evaluates rules/canonical.rules.yml,
# the canonical recording rules Strata runs by default, so that both store
# the same derived series).
#
# Each target's outdir gets du.txt, the bytes of every file and directory of
# its store two levels down, taken when its load ends: where the disk bytes
# per sample go. The report gives them per part of the store (see "parts"
# below): Strata's raw tier beside Prometheus' whole store, the rollup tiers
# apart.
set -euo pipefail

target=${1:-strata}
mode=$target
if [[ "$mode" == overload ]]; then
	target=strata
fi
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${2:-/tmp/strata-bench-$target}
port=${BENCH_PORT:-19299}
work=$(mktemp -d /tmp/strata-bench-run.XXXXXX)
pid=""

kept=() # compare: servers left running for the dashboard, as pidfile prefixes

# stop_kept stops the servers a target run left running (BENCH_KEEP) and
# removes their data, keeping their logs.
stop_kept() {
	local k p
	for k in "${kept[@]}"; do
		[[ -f "$k.pid" ]] || continue
		p=$(cat "$k.pid")
		kill "$p" 2>/dev/null || true
		for _ in $(seq 1 100); do
			kill -0 "$p" 2>/dev/null || break
			sleep 0.1
		done
		cp "$(cat "$k.work")/server.log" "$k.log" 2>/dev/null || true
		rm -rf "$(cat "$k.work")"
		rm -f "$k.pid" "$k.work"
	done
	kept=()
}

cleanup() {
	if [[ -n "$pid" ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	stop_kept
	rm -rf "$work"
}
trap cleanup EXIT

if [[ -z "${STRATA_BIN:-}" ]]; then
	(cd "$repo" && go build -o "$work/strata" ./cmd/strata)
	export STRATA_BIN="$work/strata"
fi

if [[ "$target" == compare ]]; then
	targets=(prometheus)
	if [[ -n "${VM_BIN:-}" ]]; then
		targets+=(victoriametrics)
	fi
	targets+=(strata)
	index_of() {
		local i
		for i in "${!targets[@]}"; do
			if [[ "${targets[i]}" == "$1" ]]; then
				echo "$i"
				return
			fi
		done
	}
	for round in $(seq 1 "${BENCH_ROUNDS:-1}"); do
		dir="$out/$round"
		mkdir -p "$dir"
		reports=()
		order=("${targets[@]}")
		if ((round % 2 == 0)); then
			# Even rounds run the targets in reverse order, so that a load
			# from other work that rises or falls over a round does not
			# favour the same target every time.
			order=()
			for ((i = ${#targets[@]} - 1; i >= 0; i--)); do
				order+=("${targets[i]}")
			done
		fi
		# Each target gets its own port and stays up after its load, so
		# that the dashboards are measured interleaved at the end.
		for t in "${order[@]}"; do
			echo "== round $round: $t ($(date -u +%H:%M:%S) UTC)" >&2
			echo "$t before: $(uptime)" >>"$dir/uptime.txt"
			keep="$dir/$t.server"
			kept+=("$keep")
			BENCH_PORT=$((port + $(index_of "$t"))) BENCH_KEEP="$keep" BENCH_SKIP_QUERIES=1 "$0" "$t" "$dir/$t" >/dev/null
			echo "$t after:  $(uptime)" >>"$dir/uptime.txt"
		done
		dash=()
		for t in "${targets[@]}"; do
			reports+=("$dir/$t/report.json")
			dash+=("$dir/$t/report.json=http://127.0.0.1:$((port + $(index_of "$t")))=$(cat "$dir/$t.server.pid")")
		done
		if [[ -z "${BENCH_SKIP_QUERIES:-}" ]]; then
			echo "== round $round: dashboards, interleaved ($(date -u +%H:%M:%S) UTC)" >&2
			echo "dashboards before: $(uptime)" >>"$dir/uptime.txt"
			"$STRATA_BIN" bench dashboard --query-repeats="${BENCH_QUERY_REPEATS:-5}" "${dash[@]}" >/dev/null
			echo "dashboards after:  $(uptime)" >>"$dir/uptime.txt"
		fi
		stop_kept
		"$STRATA_BIN" bench compare "${reports[@]}" >"$dir/comparison.md"
		echo "== round $round" && cat "$dir/comparison.md" && echo
	done
	echo "reports and comparisons in $out"
	exit 0
fi

ready=/-/ready
case "$target" in
strata)
	# shellcheck disable=SC2086 # STRATA_FLAGS is a list of flags
	"$STRATA_BIN" serve --storage.path="$work/db" --web.listen-address="127.0.0.1:$port" \
		--web.enable-pprof ${STRATA_FLAGS:-} >"$work/server.log" 2>&1 &
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
	if [[ -n "${PROMETHEUS_RULES:-}" ]]; then
		printf 'rule_files: [%s]\n' "$repo/rules/canonical.rules.yml" >>"$work/prometheus.yml"
	fi
	receivers=(--web.enable-remote-write-receiver)
	if [[ "${BENCH_PROTOCOL:-v1}" == otlp ]]; then
		receivers+=(--web.enable-otlp-receiver)
	fi
	"$bin" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/db" \
		"${receivers[@]}" --web.listen-address="127.0.0.1:$port" >"$work/server.log" 2>&1 &
	pid=$!
	;;
victoriametrics)
	if [[ ! -x "${VM_BIN:-}" ]]; then
		echo "set VM_BIN to a victoria-metrics binary" >&2
		exit 2
	fi
	# Defaults otherwise, as a new user runs it (its query result cache
	# included).
	"$VM_BIN" -storageDataPath="$work/db" -httpListenAddr="127.0.0.1:$port" >"$work/server.log" 2>&1 &
	pid=$!
	ready=/health
	;;
*)
	echo "usage: $0 compare|strata|prometheus|victoriametrics|overload [outdir]" >&2
	exit 2
	;;
esac

# Wait (bounded) until the server answers.
up=""
for _ in $(seq 1 120); do
	if curl -fsS "http://127.0.0.1:$port$ready" >/dev/null 2>&1; then
		up=1
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null; then
		break
	fi
	sleep 0.5
done
if [[ -z "$up" ]]; then
	echo "$target did not come up:" >&2
	cat "$work/server.log" >&2
	exit 1
fi

# Where the load goes: remote write's path, or the receiver's OTLP path.
write_path=/api/v1/write
if [[ "${BENCH_PROTOCOL:-v1}" == otlp ]]; then
	case "$target" in
	victoriametrics) write_path=/opentelemetry/v1/metrics ;;
	*) write_path=/api/v1/otlp/v1/metrics ;;
	esac
fi

# The store's parts, each that exists once the server is up: "total" is the
# whole store. "raw" is what holds the raw samples (Strata's raw tier,
# Prometheus' and VictoriaMetrics' whole store), so that the report sets
# Strata's raw tier beside a peer's store and its rollup tiers ("minute",
# "hour") apart; "wal" and "chunks_head" are the TSDB's write-ahead log and
# head chunk files in Strata's raw tier and in Prometheus.
case "$target" in
strata) parts=(raw=raw wal=raw/wal chunks_head=raw/chunks_head minute=minute hour=hour) ;;
prometheus) parts=(raw=. wal=wal chunks_head=chunks_head) ;;
victoriametrics) parts=(raw=. data=data indexdb=indexdb) ;;
esac
dirs=(--tier-dir="total=$work/db")
for p in "${parts[@]}"; do
	if [[ -d "$work/db/${p#*=}" ]]; then
		dirs+=(--tier-dir="${p%%=*}=$work/db/${p#*=}")
	fi
done
args=()
if [[ -n "${BENCH_INTERVAL:-}" ]]; then
	args+=(--interval="$BENCH_INTERVAL")
fi
if [[ -n "${BENCH_SKIP_QUERIES:-}" ]]; then
	args+=(--skip-queries)
fi

mkdir -p "$out"
if [[ "$mode" == overload ]]; then
	common=(--url="http://127.0.0.1:$port$write_path" --pid="$pid" --series="${BENCH_SERIES:-50000}"
		--protocol="${BENCH_PROTOCOL:-v1}" --repeats=1 --skip-queries)
	echo "$(date -u +%H:%M:%S) capacity: $(uptime)" >"$out/uptime.txt"
	"$STRATA_BIN" bench run "${common[@]}" --name=capacity --out="$out/capacity" \
		--duration="${BENCH_CAPACITY_DURATION:-60s}" --concurrency="${BENCH_CONCURRENCY:-4}" >"$out/capacity.log" 2>&1 || {
		cat "$out/capacity.log" >&2
		exit 1
	}
	capacity=$(jq '.runs[0].load.accepted_samples_per_second' "$out/capacity/report.json")
	rate=$(jq -n "$capacity * ${BENCH_OVERLOAD_FACTOR:-2} | floor")
	echo "$(date -u +%H:%M:%S) overload at $rate samples/s: $(uptime)" >>"$out/uptime.txt"
	"$STRATA_BIN" bench run "${common[@]}" --name=overload --out="$out/overload" --rate="$rate" \
		--duration="${BENCH_DURATION:-5m}" --concurrency="${BENCH_OVERLOAD_SENDERS:-128}" >"$out/overload.log" 2>&1 || {
		cat "$out/overload.log" >&2
		exit 1
	}
	echo "$(date -u +%H:%M:%S) done: $(uptime)" >>"$out/uptime.txt"
	cp "$work/server.log" "$out/server.log"
	# Where the resident memory is at the end: anonymous (heap) or file
	# pages (mapped chunks), the Go heap, the raw head.
	{
		grep -E '^(VmRSS|RssAnon|RssFile)' "/proc/$pid/status"
		curl -fsS "http://127.0.0.1:$port/metrics" | grep -E '^(strata_remotewrite_(rejected_total|requests_total|heap_limit_bytes)|go_memstats_heap_(inuse|idle|released)_bytes|strata_raw_prometheus_tsdb_head_(chunks|series|samples_appended_total))' | grep -v ' 0$'
	} >"$out/metrics.txt" || true
	curl -fsS -o "$out/heap.pprof" "http://127.0.0.1:$port/debug/pprof/heap" || true
	# Medians over the first and the last minute of the overload run.
	jq -r --argjson capacity "$capacity" --argjson rate "$rate" '
		def median: sort | if length == 0 then null else .[length / 2 | floor] end;
		def mib: . / 1048576 | . * 10 | round / 10;
		.runs[0] as $r | ($r.load.elapsed_seconds) as $dur |
		"# Overload: \($rate) samples/s offered, \($r.load.series) series, \(.load.concurrency) senders, \($dur | round) s\n",
		"| figure | first minute | last minute |", "|---|---:|---:|",
		"| RSS median (MiB) | \([$r.server.rss_timeline[] | select(.seconds <= 60) | .bytes] | median | mib) | \([$r.server.rss_timeline[] | select(.seconds >= $dur - 60) | .bytes] | median | mib) |",
		"| accepted samples/s median | \([$r.load.timeline[] | select(.seconds <= 60) | .samples_per_second] | median | round) | \([$r.load.timeline[] | select(.seconds >= $dur - 60) | .samples_per_second] | median | round) |",
		"",
		"- capacity (unpaced run before): \($capacity | round) samples/s; accepted under overload: \($r.load.accepted_samples_per_second | round) samples/s (\($r.load.accepted_samples_per_second / $capacity * 100 | round)% of capacity)",
		"- replies: \($r.load.status_2xx) 2xx, \($r.load.status_429) 429, \($r.load.status_5xx) 5xx, \($r.load.status_4xx) other 4xx, \($r.load.network_errors) network errors; samples dropped when the run ended: \($r.load.samples_dropped)",
		"- RSS peak \($r.server.peak_rss_bytes | mib) MiB, start \($r.server.rss_start_bytes | mib) MiB, end \($r.server.rss_end_bytes | mib) MiB; server CPU \($r.server.cpu_cores * 100 | round / 100) cores"
	' "$out/overload/report.json" >"$out/overload.md"
	{ echo; echo '```'; cat "$out/metrics.txt" "$out/uptime.txt"; echo '```'; } >>"$out/overload.md"
	cat "$out/overload.md"
	exit 0
fi
"$STRATA_BIN" bench run --url="http://127.0.0.1:$port$write_path" --pid="$pid" "${dirs[@]}" "${args[@]}" \
	--name="$target" --out="$out" --cpu-profile="$out/cpu.pprof" --heap-profile="$out/heap.pprof" \
	--series="${BENCH_SERIES:-10000}" --duration="${BENCH_DURATION:-60s}" --repeats="${BENCH_REPEATS:-3}" \
	--protocol="${BENCH_PROTOCOL:-v1}" --concurrency="${BENCH_CONCURRENCY:-4}" \
	--timestamps="${BENCH_TIMESTAMPS:-wallclock}" --backfill="${BENCH_BACKFILL:-0s}" \
	--query-repeats="${BENCH_QUERY_REPEATS:-5}" >"$out/bench.log" 2>&1 || {
	cat "$out/bench.log" >&2
	exit 1
}
if ! kill -0 "$pid" 2>/dev/null; then
	echo "$target exited during the run:" >&2
	tail -20 "$work/server.log" >&2
	exit 1
fi
cp "$work/server.log" "$out/server.log"
du -ab --max-depth=2 "$work/db" | sed "s#$work/db#db#" | sort -k2 >"$out/du.txt"
if [[ -n "${BENCH_KEEP:-}" ]]; then
	# compare measures the dashboard later and stops the server itself.
	echo "$pid" >"$BENCH_KEEP.pid"
	echo "$work" >"$BENCH_KEEP.work"
	pid="" work=""
fi
cat "$out/report.md"
echo
echo "report: $out/report.json, $out/report.md, charts in $out"
