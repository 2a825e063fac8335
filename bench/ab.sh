#!/usr/bin/env bash
# A/B of two wasmgate builds: each target's rendered manifest served by one
# build, then the other, one gateway alive at a time, rounds interleaved,
# pinned as bench/run.sh pins (gateway on CPU 0; upstream and wrk on CPU 1),
# 2 s of warm-up then 10 s of bench/wrk/mix.lua at 64 connections (with the
# argument the run sent the target: many-users for
# wasmgate-full-pooled-many-users). Prints each run's req/s and CPU per request, split into user space
# and kernel; a run that fails (a gateway not ready, wrk with no result)
# stops it, saying which (for a gateway, with the end of its log).
#
#   bench/ab.sh A_BINARY B_BINARY RUN_DIR [TARGET ...]
#
# RUN_DIR is the temp dir a `bench/run.sh --keep-temp` run kept: its
# manifests/ (their ports, the upstream's port) are used as they are.
# Targets default to wasmgate-pass and wasmgate-full-pooled; ROUNDS
# (default 3) sets the rounds. Ends with each target's medians: A's and
# B's CPU a request, the median of the rounds' differences (B - A), and in
# how many rounds B used less. Needs wrk and jq, and the bench upstream
# built (bench/run.sh builds it). Every process it starts is stopped by PID.
set -euo pipefail

[[ $# -ge 3 ]] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
A="$1" B="$2" RUN_DIR="$3"
shift 3
if [[ $# -gt 0 ]]; then TARGETS=("$@"); else TARGETS=(wasmgate-pass wasmgate-full-pooled); fi
BENCH_DIR="$(cd "$(dirname "$0")" && pwd)"
UPSTREAM="${BENCH_TARGET_DIR:-$HOME/.cache/wasmgate/bench-target}/release/bench-upstream"
HZ="$(getconf CLK_TCK)"
# shellcheck source=bench/proc.sh
. "$BENCH_DIR/proc.sh"
for target in "${TARGETS[@]}"; do
    [[ -f "$RUN_DIR/manifests/$target.toml" ]] ||
        { echo "ab.sh: $RUN_DIR has no manifests/$target.toml (a bench/run.sh --keep-temp run of that target)" >&2; exit 2; }
done
PIDS=()
# One line a run, "TARGET BUILD ROUND CPU", for the medians at the end.
RUNS="$(mktemp)"
# The running gateway's log (warnings and errors): shown when it fails.
GATEWAY_LOG="$(mktemp)"
trap 'for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -f "$RUNS" "$GATEWAY_LOG"' EXIT

manifest() { echo "$RUN_DIR/manifests/$1.toml"; }
port_of() { sed -nE '0,/^address = /s/^address = "[^"]*:([0-9]+)".*/\1/p' "$1"; }
upstream_port() { sed -nE '0,/^upstream = /s/^upstream = "http:\/\/[^:]*:([0-9]+)".*/\1/p' "$1"; }
# SECONDS of bench/wrk/mix.lua against PORT, with the script argument the
# run sent TARGET (wrk-args/: many-users, one of 10,000 tokens a request).
mix() { # TARGET PORT SECONDS
    local arg=()
    [[ -f "$RUN_DIR/wrk-args/$1" ]] && arg=(-- "$(cat "$RUN_DIR/wrk-args/$1")")
    taskset -c 1 wrk -t1 -c64 -d"$3"s -s "$BENCH_DIR/wrk/mix.lua" "http://127.0.0.1:$2" "${arg[@]}"
}
# Every audit sink the manifest names, emptied before each gateway starts:
# a sink left to grow over the runs (gigabytes at these rates) makes the
# kernel's writeback throttle the later runs' writes.
empty_sinks() { sed -nE 's/^sink = "([^"]+)".*/\1/p' "$1" | while read -r sink; do : >"$sink"; done; }
taskset -c 1 "$UPSTREAM" "127.0.0.1:$(upstream_port "$(manifest "${TARGETS[0]}")")" >/dev/null 2>&1 &
PIDS+=($!)
for round in $(seq "${ROUNDS:-3}"); do
    for build in A B; do
        binary="$A"
        [[ "$build" == B ]] && binary="$B"
        for target in "${TARGETS[@]}"; do
            port="$(port_of "$(manifest "$target")")"
            empty_sinks "$(manifest "$target")"
            RUST_LOG=warn taskset -c 0 "$binary" run --config "$(manifest "$target")" --workers 1 >"$GATEWAY_LOG" 2>&1 &
            gateway=$!
            PIDS+=("$gateway")
            wait_http "$gateway" "http://127.0.0.1:$port/" || {
                echo "ab.sh: round $round, build $build ($binary), $target: exited or no HTTP answer on port $port in 60 s; its log ends:" >&2
                tail -n 5 "$GATEWAY_LOG" >&2
                exit 1
            }
            mix "$target" "$port" 2 >/dev/null ||
                { echo "ab.sh: round $round, build $build, $target: the warm-up's wrk failed" >&2; exit 1; }
            read -r u0 s0 < <(cpu_ticks "$gateway")
            out="$(mix "$target" "$port" 10 | sed -n 's/^WRKJSON //p')"
            [[ -n "$out" ]] || { echo "ab.sh: round $round, build $build, $target: wrk gave no result" >&2; exit 1; }
            read -r u1 s1 < <(cpu_ticks "$gateway")
            kill "$gateway"
            wait "$gateway" 2>/dev/null || true
            # The run's line, then its CPU a request alone, for the medians.
            { read -r shown; read -r cpu; } < <(jq -r --arg r "$round" --arg b "$build" --arg t "$target" \
                --argjson u $((u1 - u0)) --argjson s $((s1 - s0)) --argjson hz "$HZ" '
                (.requests) as $n
                | "\($r) \($b) \($t): \($n / (.duration_us / 1e6) | floor) req/s, CPU \(($u + $s) * 1e6 / $hz / $n * 100 | round / 100) us/req (user \($u * 1e6 / $hz / $n * 100 | round / 100), kernel \($s * 1e6 / $hz / $n * 100 | round / 100)), non-2xx \(.errors.status)",
                  (($u + $s) * 1e6 / $hz / $n)' <<<"$out")
            echo "$shown"
            echo "$target $build $round $cpu" >>"$RUNS"
        done
    done
done
# Each target's medians over the rounds (the rounds of A and B are paired
# by their number: run one after the other, they share the machine's mood).
for target in "${TARGETS[@]}"; do
    awk -v t="$target" '
        function median(v, n,    i, j, x) {
            for (i = 2; i <= n; i++) { x = v[i]; for (j = i - 1; j >= 1 && v[j] > x; j--) v[j + 1] = v[j]; v[j + 1] = x }
            return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        }
        $1 == t { cpu[$2, $3] = $4; if ($3 > rounds) rounds = $3 }
        END {
            for (r = 1; r <= rounds; r++) { a[r] = cpu["A", r]; b[r] = cpu["B", r]; d[r] = b[r] - a[r]; fewer += d[r] < 0 }
            printf "median %s: A %.2f us/req, B %.2f, B - A by round %+.2f (B less in %d of %d rounds)\n",
                t, median(a, rounds), median(b, rounds), median(d, rounds), fewer, rounds
        }' "$RUNS"
done
