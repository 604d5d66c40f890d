#!/usr/bin/env bash
# `make demo`: Strata plus a simulated 2-node x 4-GPU vLLM cluster with one
# injected fault (a KV-cache eviction storm), 50 minutes of history pushed in a
# few seconds, then live data. Runs for DEMO_DURATION (default 30m) or until
# Ctrl-C, then stops both processes by PID.
set -euo pipefail
cd "$(dirname "$0")/.."
port=${DEMO_PORT:-9201}
data=${DEMO_DATA:-demo-data}
duration=${DEMO_DURATION:-30m}
fault=${DEMO_FAULT:-kv_cache_eviction_storm}

strata_pid=""
cleanup() {
	[[ -n "$strata_pid" ]] && kill -TERM "$strata_pid" 2>/dev/null && wait "$strata_pid" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

./strata serve --storage.path="$data" --web.listen-address="127.0.0.1:$port" >"$data.log" 2>&1 &
strata_pid=$!
for _ in $(seq 1 100); do
	curl -fs "http://127.0.0.1:$port/-/ready" >/dev/null 2>&1 && break
	sleep 0.2
done
if ! kill -0 "$strata_pid" 2>/dev/null; then
	strata_pid=""
	echo "strata serve did not start (is port $port in use? DEMO_PORT=... picks another):" >&2
	tail -n 5 "$data.log" >&2
	exit 1
fi
echo "Strata is up: http://127.0.0.1:$port (log: $data.log, data: $data/)"

./strata simulate --push.url="http://127.0.0.1:$port/api/v1/write" --push.interval=15s \
	--backfill=50m --fault="$fault" --fault.after=20m --fault.duration=20m \
	--ground-truth="$data/ground-truth.jsonl" --duration="$duration" --log.level=warn &
sim_pid=$!
sleep 15
cat <<MSG

Injected fault (ground truth, $data/ground-truth.jsonl):
$(cat "$data/ground-truth.jsonl")

Try, while the simulated cluster keeps pushing:
  ./strata diagnose --url=http://127.0.0.1:$port --from=-2h
  curl -s http://127.0.0.1:$port/api/v1/diagnoses
  curl -sG http://127.0.0.1:$port/api/v1/query --data-urlencode 'query=max by (pod) (max_over_time(vllm:kv_cache_usage_perc[1h]))'
  curl -sG http://127.0.0.1:$port/api/v1/query --data-urlencode 'query=strata:ttft_seconds:p99'
  curl -sG http://127.0.0.1:$port/api/v1/query --data-urlencode 'query=sum by (component) (strata:latency_seconds:component)'
Grafana: add a Prometheus data source http://127.0.0.1:$port and import dashboards/*.json
(the inference dashboard draws diagnoses as annotations and in its "Diagnoses" panel).

Waiting for Strata to diagnose the fault (it evaluates each minute once the
10-minute lateness window has passed it)...
MSG

# Print the first diagnosis as soon as the engine makes it: bounded wait.
diagnosed=""
for _ in $(seq 1 120); do
	kill -0 "$strata_pid" 2>/dev/null || break
	if curl -fs "http://127.0.0.1:$port/api/v1/diagnoses" 2>/dev/null | grep -q '"cause"'; then
		diagnosed=1
		break
	fi
	sleep 5
done
if [[ -n "$diagnosed" ]]; then
	echo
	echo "Strata's diagnosis (./strata diagnose --url=http://127.0.0.1:$port --from=-2h):"
	./strata diagnose --url="http://127.0.0.1:$port" --from=-2h
else
	echo "No diagnosis after 10 minutes: see $data.log."
fi
echo
echo "Stopping in $duration, or press Ctrl-C."
wait "$sim_pid" || true
