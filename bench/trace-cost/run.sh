#!/usr/bin/env bash
# What tracing costs a request of the pooled chain, in user-space
# instructions under callgrind (bench/README.md § Tracing, "taken apart").
#
#   bench/trace-cost/run.sh [--bin PATH] [--requests N]
#
# The gateway runs bench/manifests/full-pooled.toml on one keep-alive
# connection from client.py (wrk/mix.lua's cycle: 4 lists, 1 create),
# answered by upstream.py; 500 warm-up requests, then N (3000) with
# callgrind's instrumentation on, every thread counted apart. Four runs:
#
#   off    no [tracing] table
#   r0     [tracing] at sampling_rate_per_million = 0: every request is an
#          unsampled one (the client sends no traceparent)
#   r100   every request sampled, exported to receiver.py, a real OTLP/gRPC
#          collector that answers
#   r1     1%, as the issue measures it
#
# A request's expected cost at 1% is then 0.99 x (r0 - off) + 0.01 x
# (r100 - off): at full load the exporter sends full batches (512 spans),
# as in r100, while under callgrind (about 50x slower) r1's exports are
# driven by the 5 s clock and their fixed cost is spread over far fewer
# requests than at full speed. r1 is printed as the direct figure.
#
# Needs valgrind (callgrind_control) and a Python with grpcio and
# opentelemetry-proto: made here, in ~/.cache/wasmgate/tools/otlp-venv.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE="$ROOT/bench/trace-cost"
BIN=""
REQUESTS=3000
while [[ $# -gt 0 ]]; do
    case $1 in
        --bin) BIN=$2; shift 2 ;;
        --requests) REQUESTS=$2; shift 2 ;;
        *) echo "usage: $0 [--bin PATH] [--requests N]" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "needs valgrind (apt-get install valgrind)" >&2; exit 1; }

VENV="$HOME/.cache/wasmgate/tools/otlp-venv"
if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet grpcio opentelemetry-proto
fi
if [[ -z "$BIN" ]]; then
    (cd "$ROOT" && cargo build --release --bin wasmgate >&2)
    BIN="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/release/wasmgate"
fi
"$ROOT/filters/build.sh" >&2

WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
COLLECTOR=$(free_port)
"$VENV/bin/python" "$HERE/receiver.py" "$COLLECTOR" "$WORK/spans.txt" &
PIDS+=($!)

# One run under callgrind: prints "<all threads> <workers> <exporter>",
# instructions per request.
measure() {
    local tag=$1 rate=$2 dir="$WORK/$1"
    mkdir -p "$dir"
    local up gw
    up=$(free_port); gw=$(free_port)
    python3 "$HERE/upstream.py" "$up" &
    local up_pid=$!
    sed -e "s#\.\./\.\./filters/dist/#$ROOT/filters/dist/#" \
        -e "s#^address = .*#address = \"127.0.0.1:$gw\"#" \
        -e "s#^upstream = \"[^\"]*\"#upstream = \"http://127.0.0.1:$up\"#" \
        -e "s#sink = \"[^\"]*\"#sink = \"$dir/audit.jsonl\"#" \
        "$ROOT/bench/manifests/full-pooled.toml" > "$dir/m.toml"
    if [[ -n $rate ]]; then
        # A top-level table: before the first array of tables.
        python3 - "$dir/m.toml" "$rate" "$COLLECTOR" <<'PY'
import sys
path, rate, port = sys.argv[1:]
text = open(path).read()
at = text.index("[authentication]")
table = f'[tracing]\nendpoint = "127.0.0.1:{port}"\nsampling_rate_per_million = {rate}\n\n'
open(path, "w").write(text[:at] + table + text[at:])
PY
    fi
    valgrind --tool=callgrind --separate-threads=yes --instr-atstart=no \
        --callgrind-out-file="$dir/cg.out" "$BIN" run --config "$dir/m.toml" 2>"$dir/gw.log" &
    local gw_pid=$!
    for _ in $(seq 1 600); do
        curl -s -o /dev/null "http://127.0.0.1:$gw/healthz" && break
        kill -0 "$gw_pid" 2>/dev/null || { echo "the gateway did not start:" >&2; cat "$dir/gw.log" >&2; exit 1; }
        sleep 0.5
    done
    python3 "$HERE/client.py" "$gw" 500
    callgrind_control -i on "$gw_pid" >/dev/null
    python3 "$HERE/client.py" "$gw" "$REQUESTS"
    callgrind_control -i off "$gw_pid" >/dev/null
    kill -TERM "$gw_pid"; wait "$gw_pid" || true
    kill "$up_pid" 2>/dev/null || true
    local all=0 workers=0 exporter=0 file n
    for file in "$dir"/cg.out-*; do
        n=$(grep -E '^totals:' "$file" | tail -1 | awk '{print $2}')
        all=$((all + n))
        if grep -q "get_spans_and_export" "$file"; then
            exporter=$((exporter + n))
        elif grep -q "multi_thread::worker::Context::run" "$file"; then
            workers=$((workers + n))
        fi
    done
    echo "$((all / REQUESTS)) $((workers / REQUESTS)) $((exporter / REQUESTS))"
}

declare -A ALL WORKERS EXPORTER
for run in off: r0:0 r100:1000000 r1:10000; do
    tag=${run%%:*}; rate=${run#*:}
    read -r all workers exporter < <(measure "$tag" "$rate")
    ALL[$tag]=$all; WORKERS[$tag]=$workers; EXPORTER[$tag]=$exporter
    echo "$tag: $all a request (workers $workers, exporter thread $exporter)" >&2
done

unsampled=$((ALL[r0] - ALL[off]))
sampled=$((ALL[r100] - ALL[off]))
expected=$(( (99 * unsampled + sampled) / 100 ))
direct=$((ALL[r1] - ALL[off]))
cat <<EOF
| run | instructions / request, all threads | workers | exporter thread |
| --- | ---: | ---: | ---: |
| off | ${ALL[off]} | ${WORKERS[off]} | - |
| rate 0 (every request unsampled) | ${ALL[r0]} | ${WORKERS[r0]} | ${EXPORTER[r0]} |
| rate 1000000 (every request sampled) | ${ALL[r100]} | ${WORKERS[r100]} | ${EXPORTER[r100]} |
| rate 10000 (1%) | ${ALL[r1]} | ${WORKERS[r1]} | ${EXPORTER[r1]} |

an unsampled request: +$unsampled; a sampled one: +$sampled
tracing at 1%, expected (0.99 x unsampled + 0.01 x sampled): +$expected
tracing at 1%, the direct run: +$direct
spans received: $(cat "$WORK/spans.txt" 2>/dev/null || echo 0) (exports, spans)
EOF
