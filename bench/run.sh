#!/usr/bin/env bash
# The side-by-side benchmark: wasmgate against a direct connection, nginx,
# nginx + Lua (the same policy as wasmgate's filters), HAProxy, and wasmgate
# itself in several configurations, all on loopback, on one core each.
#
#   bench/run.sh                 the full run (3 rounds, 2 s warm-up, 10 s runs),
#                                results in bench/results/<date>.{tsv,json,md}
#   bench/run.sh --smoke         a few seconds per target (direct, nginx,
#                                wasmgate-pass, wasmgate-full-pooled); asserts
#                                zero errors and loose ratios; exits non-zero
#                                otherwise; writes nothing to the repository
#
# Options (full run unless said):
#   --rounds N          rounds, targets interleaved (default 3)
#   --warmup S          warm-up before every measured run (default 2)
#   --duration S        length of each measured run (default 10)
#   --connections N     wrk connections for the throughput runs (default 64)
#   --rate R            open-loop rate, requests/s (default: half the slowest
#                       target's median throughput, rounded down to 100)
#   --targets a,b,...   measure only these targets (names below)
#   --extra NAME=FILE   one more wasmgate target run on the manifest FILE
#                       (rendered like bench/manifests/*.toml); repeatable
#   --workers N         tokio worker threads of wasmgate (default 1)
#   --no-install        do not install missing tools
#   --no-build          use the binaries already built
#   --binary FILE       serve the wasmgate targets with this binary (the one
#                       bench/pgo.sh prints, say) instead of the release build
#   --binary-label TEXT what the results and the table call the binary
#                       (default: --binary's path, or "cargo build --release"),
#                       e.g. "bench/pgo.sh's of $(git rev-parse --short HEAD)"
#   --no-openloop       skip the open-loop (oha) phase
#   --quiet-load L      wait until the 1-minute load average is below L,
#   --quiet-steal P     and until the hypervisor steals less than P% of
#                       CPU 0 from a 2-s busy loop on it ...
#   --quiet-wait S      ... for at most S seconds, then run anyway (default 1.5, 5, 1200)
#   --profile           after the run, profiles of nginx and wasmgate (pass-
#                       through, full chain pooled with and without caches): perf record (cpu-clock) where perf
#                       works, and valgrind --tool=callgrind (instructions and
#                       the simulated caches' misses, its last level sized as
#                       one core's L2), summarised in
#                       bench/results/<date>.profile.txt (--rounds 0 --profile:
#                       the profiles alone)
#   --update-readme     put the table into bench/README.md's "Side by side"
#                       section (between its table markers)
#   --keep-temp         keep the run's temp dir (configs, logs, raw rows)
#   --cold-code         start every wasmgate target with an empty compiled-
#                       code cache of its own (XDG_CACHE_HOME in the temp
#                       dir), as on a fresh machine: it compiles its
#                       components at start
#
# Targets: direct, nginx, nginx-lua, nginx-lua-many-users (nginx + Lua with
# the 10,000 users of wasmgate-full-pooled-many-users, and its mix), haproxy, hyper-proxy (a bare hyper
# proxy: the floor of wasmgate's stack), hyper-raw-client (hyper's server,
# the upstream spoken to without an HTTP library), raw-proxy (a proxy with no HTTP
# library between the sockets: what a leaner engine than hyper could
# reach), raw-proxy-typed (the same, building the http crate's typed
# request and response from each head as well), wasmgate-pass,
# wasmgate-full-per-request, wasmgate-full-pooled (both with the decision
# caches on), wasmgate-full-pooled-nocache (caches off),
# wasmgate-full-pooled-many-users (caches on, each request one of 10,000
# users' tokens), wasmgate-full-python (the pooled chain plus the Python
# abac-authz filter), nginx-tls, wasmgate-pass-tls.
#
# Every throughput row also records what explains a Wasm row's variance from
# machine to machine: the target's minor and major page faults per request
# (/proc/PID/stat), the decision caches' hit ratio in the window (from
# /metrics), the share of CPU 0 the hypervisor stole in the window, and, per
# wasmgate target, where its compiled code came from at start (compiled now,
# or read from the disk cache), and what the shared cache gave the core just
# before the window (bench/probe.c's 4 MiB chase: tens of ns when the L3
# serves it, 140 and more when it goes to memory). The run's meta adds the probe's
# full figures at its start and end (the clock, a chase from 32 KiB to
# 512 MiB), the CPU's identity and caches, the kernel's mitigations and the
# uptime.
#
# Placement: every target runs pinned to CPU 0; the load generators (wrk, oha)
# and the upstream run pinned to CPU 1. The one-connection latency runs put
# everything (target, upstream, wrk) on CPU 0. Every process this script
# starts is recorded and stopped by its PID on exit; every wait is bounded.
#
# Environment: CARGO_TARGET_DIR (default ~/.cache/wasmgate/target) for the
# gateway; the upstream builds into ~/.cache/wasmgate/bench-target and oha is
# installed (cargo install --locked) into ~/.cache/wasmgate/bench-tools. The
# binaries are looked for where cargo says it put them (cargo metadata), so
# a cargo wrapper that picks its own target dir is followed.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
CACHE_DIR="${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/wasmgate"
GATEWAY_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE_DIR/target}"
UPSTREAM_TARGET_DIR="$CACHE_DIR/bench-target"
TOOLS_DIR="$CACHE_DIR/bench-tools"
COMMAND_LINE="bench/run.sh${*:+ $*}"

ROUNDS=3 WARMUP=2 DURATION=10 CONNECTIONS=64 RATE=auto WORKERS=1
OPEN_CONNECTIONS=16 INSTALL=1 BUILD=1 OPENLOOP=1 SMOKE=0 PROFILE=0
QUIET_LOAD=1.5 QUIET_STEAL=5 QUIET_WAIT=1200 UPDATE_README=0 KEEP_TEMP=0 COLD_CODE=0
TARGETS_ARG="" EXTRA=() BINARY="" BINARY_LABEL=""
ALL_TARGETS=(direct nginx nginx-lua nginx-lua-many-users haproxy hyper-proxy hyper-raw-client raw-proxy raw-proxy-typed wasmgate-pass wasmgate-full-per-request wasmgate-full-pooled wasmgate-full-pooled-nocache wasmgate-full-pooled-many-users wasmgate-full-python nginx-tls wasmgate-pass-tls)

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[bench] error: %s\n' "$*" >&2; exit 1; }
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2; exit "${1:-0}"; }

while (($#)); do
    case "$1" in
        --smoke) SMOKE=1 ;;
        --rounds) ROUNDS="${2:?}"; shift ;;
        --warmup) WARMUP="${2:?}"; shift ;;
        --duration) DURATION="${2:?}"; shift ;;
        --connections) CONNECTIONS="${2:?}"; shift ;;
        --rate) RATE="${2:?}"; shift ;;
        --targets) TARGETS_ARG="${2:?}"; shift ;;
        --extra) EXTRA+=("${2:?}"); shift ;;
        --workers) WORKERS="${2:?}"; shift ;;
        --no-install) INSTALL=0 ;;
        --no-build) BUILD=0 ;;
        --binary) BINARY="${2:?}"; shift ;;
        --binary-label) BINARY_LABEL="${2:?}"; shift ;;
        --no-openloop) OPENLOOP=0 ;;
        --quiet-load) QUIET_LOAD="${2:?}"; shift ;;
        --quiet-steal) QUIET_STEAL="${2:?}"; shift ;;
        --quiet-wait) QUIET_WAIT="${2:?}"; shift ;;
        --profile) PROFILE=1 ;;
        --update-readme) UPDATE_README=1 ;;
        --keep-temp) KEEP_TEMP=1 ;;
        --cold-code) COLD_CODE=1 ;;
        -h | --help) usage 0 ;;
        *) log "unknown argument: $1"; usage 2 ;;
    esac
    shift
done
for number in "$ROUNDS" "$WARMUP" "$DURATION" "$CONNECTIONS" "$WORKERS" "$QUIET_WAIT"; do
    [[ "$number" =~ ^[0-9]+$ ]] || die "not a whole number: $number"
done
[[ "$RATE" == auto || "$RATE" =~ ^[0-9]+$ ]] || die "--rate takes a number of requests/s"
if [[ -n "$BINARY" ]]; then
    [[ -x "$BINARY" ]] || die "--binary: $BINARY is not an executable file"
    BINARY="$(realpath "$BINARY")"
fi

if ((SMOKE)); then
    ROUNDS=1 WARMUP=1 DURATION=3 OPENLOOP=0 PROFILE=0 UPDATE_README=0 QUIET_WAIT=0
    LATENCY_DURATION=2
    TARGETS=(direct nginx wasmgate-pass wasmgate-full-pooled)
else
    LATENCY_DURATION="$DURATION"
    TARGETS=("${ALL_TARGETS[@]}")
fi
if [[ -n "$TARGETS_ARG" ]]; then
    IFS=',' read -r -a TARGETS <<<"$TARGETS_ARG"
fi
declare -A EXTRA_MANIFEST=()
for extra in "${EXTRA[@]}"; do
    name="${extra%%=*}" file="${extra#*=}"
    [[ "$name" =~ ^[a-z0-9-]+$ && "$name" != "$extra" ]] || die "--extra takes NAME=FILE"
    [[ -f "$file" ]] || die "--extra $name: no file $file"
    EXTRA_MANIFEST[$name]="$(cd "$(dirname "$file")" && pwd)/$(basename "$file")"
    TARGETS+=("$name")
done
for target in "${TARGETS[@]}"; do
    [[ " ${ALL_TARGETS[*]} " == *" $target "* || -n "${EXTRA_MANIFEST[$target]:-}" ]] || die "unknown target $target"
done

# ---------------------------------------------------------------- processes

TMP="$(mktemp -d /tmp/wasmgate-bench.XXXXXX)"
mkdir -p "$TMP/manifests" "$TMP/audit"
PIDS=()
declare -A PID_NAME=()

stop_pid() { # PID [GRACE-SECONDS]
    local pid="$1" grace="${2:-5}" i
    kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < grace * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    log "pid $pid (${PID_NAME[$pid]:-?}) ignored SIGTERM for $grace s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
}

cleanup() {
    local status=$? i
    trap - EXIT INT TERM
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        stop_pid "${PIDS[$i]}"
    done
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        wait "${PIDS[$i]}" 2>/dev/null || true
    done
    if ((KEEP_TEMP)) || ((status != 0)); then
        log "temp dir kept: $TMP"
    else
        rm -rf "$TMP"
    fi
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start NAME CPU LOG CMD...: starts CMD in the background pinned to CPU,
# records its PID (taskset execs CMD, so the PID is CMD's). Sets STARTED.
start() {
    local name="$1" cpu="$2" logfile="$3"
    shift 3
    taskset -c "$cpu" "$@" >"$logfile" 2>&1 </dev/null &
    STARTED=$!
    PIDS+=("$STARTED")
    PID_NAME[$STARTED]="$name"
}

# Records a PID this script did not fork itself (an nginx worker) so that it
# is stopped too.
adopt() {
    PIDS+=("$1")
    PID_NAME[$1]="$2"
}

declare -A USED_PORT=()
# Sets PORT to a free random port on 127.0.0.1 below the kernel's
# ephemeral range (ip_local_port_range). A port in that range can be any
# client socket's (wrk's, a gateway's to the upstream), and one left in
# TIME_WAIT there makes a listener's bind fail: bench/ab.sh restarts each
# gateway on its port every round, and two of its runs stopped, most
# likely on a gateway that could not listen. When the range starts too
# low to leave room below it, ports come from below Linux's default start
# (32768), guarded by the check of the sockets in use alone.
pick_port() {
    local i candidate in_use low
    low="$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || true)"
    [[ "$low" =~ ^[0-9]+$ && "$low" -gt 12000 ]] || low=32768
    in_use="$(ss -Htan 2>/dev/null | awk '{print $4}')"
    for ((i = 0; i < 500; i++)); do
        candidate=$((10000 + RANDOM % (low - 10000)))
        [[ -n "${USED_PORT[$candidate]:-}" ]] && continue
        grep -q ":$candidate\$" <<<"$in_use" && continue
        USED_PORT[$candidate]=1
        PORT="$candidate"
        return 0
    done
    die "no free port found"
}

# ---------------------------------------------------------------- tools

need_tools() {
    local missing=() tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    ((${#missing[@]} == 0)) || die "missing tool(s): ${missing[*]}"
}

install_tools() {
    local packages=()
    command -v nginx >/dev/null || packages+=(nginx)
    [[ -f /usr/lib/nginx/modules/ngx_http_lua_module.so ]] || packages+=(libnginx-mod-http-lua)
    # nginx-lua's admission and audit event encode JSON with it.
    [[ -f /usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so ]] || packages+=(lua-cjson)
    command -v haproxy >/dev/null || packages+=(haproxy)
    command -v wrk >/dev/null || packages+=(wrk)
    command -v jq >/dev/null || packages+=(jq)
    command -v taskset >/dev/null || packages+=(util-linux)
    command -v ss >/dev/null || packages+=(iproute2)
    command -v openssl >/dev/null || packages+=(openssl)
    command -v curl >/dev/null || packages+=(curl)
    command -v cc >/dev/null || packages+=(gcc)
    if ((PROFILE)); then
        command -v valgrind >/dev/null || packages+=(valgrind)
    fi
    if ((${#packages[@]})); then
        ((INSTALL)) || die "missing packages (run without --no-install): ${packages[*]}"
        log "installing ${packages[*]} (Debian packages; the services are not started or enabled by this script)"
        timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || die "apt-get update failed"
        DEBIAN_FRONTEND=noninteractive timeout 900 apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${packages[@]}" >&2 ||
            die "apt-get install ${packages[*]} failed"
    fi
    OHA="$TOOLS_DIR/bin/oha"
    if ((OPENLOOP)) && [[ ! -x "$OHA" ]]; then
        ((INSTALL)) || die "oha is missing at $OHA (run without --no-install, or with --no-openloop)"
        log "installing oha into $TOOLS_DIR (cargo install --locked; cached)"
        mkdir -p "$TOOLS_DIR"
        CARGO_TARGET_DIR="$TOOLS_DIR/target" timeout 3000 cargo install --locked --root "$TOOLS_DIR" oha >&2 ||
            die "cargo install oha failed"
    fi
    need_tools nginx haproxy wrk jq taskset ss openssl curl python3 awk cc
}

# The target dir cargo uses in DIR when told DEFAULT (a wrapper may choose
# another).
cargo_target_dir() { # DIR DEFAULT
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo metadata --format-version 1 --no-deps 2>/dev/null | jq -r .target_directory) ||
        echo "$2"
}

build() {
    GATEWAY_TARGET_DIR="$(cargo_target_dir "$REPO_DIR" "$GATEWAY_TARGET_DIR")"
    UPSTREAM_TARGET_DIR="$(cargo_target_dir "$BENCH_DIR/upstream" "$UPSTREAM_TARGET_DIR")"
    WASMGATE="${BINARY:-$GATEWAY_TARGET_DIR/release/wasmgate}"
    UPSTREAM="$UPSTREAM_TARGET_DIR/release/bench-upstream"
    HYPER_PROXY="$UPSTREAM_TARGET_DIR/release/bench-hyper-proxy"
    RAW_PROXY="$UPSTREAM_TARGET_DIR/release/bench-raw-proxy"
    if ((BUILD)); then
        log "building the filters (filters/build.sh)"
        timeout 3000 "$REPO_DIR/filters/build.sh" >/dev/null || die "filters/build.sh failed"
        if [[ -z "$BINARY" ]]; then
            log "building wasmgate (cargo build --release, target dir $GATEWAY_TARGET_DIR; waits for other cargos' lock)"
            (cd "$REPO_DIR" && CARGO_TARGET_DIR="$GATEWAY_TARGET_DIR" timeout 3000 cargo build --release --bin wasmgate >&2) ||
                die "cargo build --release failed"
        fi
        log "building the bench upstream (bench/upstream, target dir $UPSTREAM_TARGET_DIR)"
        (cd "$BENCH_DIR/upstream" && CARGO_TARGET_DIR="$UPSTREAM_TARGET_DIR" timeout 1800 cargo build --release >&2) ||
            die "cargo build of bench/upstream failed"
    fi
    [[ -x "$WASMGATE" ]] || die "no $WASMGATE (run without --no-build, or build it)"
    [[ -x "$UPSTREAM" ]] || die "no $UPSTREAM (run without --no-build)"
}

# The share (%) of a 2-s busy loop on CPU 0 that the hypervisor stole: an
# idle guest is not run, so it shows no steal; only a busy one can tell how
# much of its core another guest takes (25-69% in some windows: what moves every
# row, the Wasm rows' larger working set most).
cpu0_steal_probe() {
    local s0 s1
    s0="$(cpu0_steal)"
    timeout 2 taskset -c 0 sh -c 'while :; do :; done' || true
    s1="$(cpu0_steal)"
    awk -v d=$((s1 - s0)) -v hz="$CLK_TCK" 'BEGIN { printf "%.0f", 100 * d / (2 * hz) }'
}

# Waits (bounded) for a quieter machine: the 1-minute load average below
# QUIET_LOAD and CPU 0's steal below QUIET_STEAL%, polled every 30 s for at
# most QUIET_WAIT seconds.
wait_for_quiet() {
    local waited=0 load steal
    LOAD_BEFORE_WAIT="$(cut -d' ' -f1-3 /proc/loadavg)"
    QUIET_OUTCOME="no wait"
    ((QUIET_WAIT > 0)) || return 0
    while :; do
        load="$(cut -d' ' -f1 /proc/loadavg)"
        steal="$(cpu0_steal_probe)"
        if awk -v l="$load" -v q="$QUIET_LOAD" -v s="$steal" -v t="$QUIET_STEAL" 'BEGIN { exit !(l < q && s < t) }'; then
            QUIET_OUTCOME="load $load < $QUIET_LOAD, steal ${steal}% < ${QUIET_STEAL}% after ${waited} s of waiting"
            return 0
        fi
        if ((waited >= QUIET_WAIT)); then
            QUIET_OUTCOME="load $load, steal ${steal}% (quiet: < $QUIET_LOAD, < ${QUIET_STEAL}%) after ${waited} s: ran anyway"
            log "$QUIET_OUTCOME"
            return 0
        fi
        log "load average $load, steal ${steal}% (quiet: < $QUIET_LOAD, < ${QUIET_STEAL}%): waiting for a quieter machine (${waited}/${QUIET_WAIT} s)"
        sleep 30
        waited=$((waited + 30))
    done
}

# ---------------------------------------------------------------- targets

declare -A URL=() CPU_PID=() SCHEME=() AUDIT_FILE=() WRK_ARGS=() COMPILED_CODE=()

render() { # TEMPLATE OUT PORT
    sed -e "s#@PORT@#$3#g; s#@UPSTREAM_PORT@#$UPSTREAM_PORT#g; s#@TMP@#$TMP#g" "$1" >"$2"
}

# Renders a wasmgate manifest: its own address, the bench upstream, absolute
# component paths, the audit sink and TLS files in the run's temp dir.
render_manifest() { # SOURCE OUT PORT AUDIT_FILE
    local source_dir
    source_dir="$(cd "$(dirname "$1")" && pwd)"
    sed -E \
        -e "s#^address = \"[^\"]*\"#address = \"127.0.0.1:$3\"#" \
        -e "s#^upstream = \"[^\"]*\"#upstream = \"http://127.0.0.1:$UPSTREAM_PORT\"#" \
        -e "s#^sink = \"[^\"]*\"#sink = \"$4\"#" \
        -e "s#^cert = \"[^\"]*\"#cert = \"$TMP/tls/bench.crt\"#" \
        -e "s#^key = \"[^\"]*\"#key = \"$TMP/tls/bench.key\"#" \
        -e "s#^component = \"([^/\"][^\"]*)\"#component = \"$source_dir/\\1\"#" \
        "$1" >"$2"
}

# bench/probe.c, built into the temp dir: how fast the targets' core runs
# code, and what the shared cache gives it (the machine's state, which the
# proxies' figures alone do not tell apart from the proxies' own costs).
build_probe() {
    PROBE="$TMP/probe"
    cc -O2 -o "$PROBE" "$BENCH_DIR/probe.c" || die "cannot build bench/probe.c"
}

# The full probe, pinned to the targets' core: one line of JSON (null in a
# smoke run, which keeps no meta).
probe_machine() {
    if ((SMOKE)); then echo null; else taskset -c 0 "$PROBE"; fi
}

# One load of a chase over 4 MiB, in ns: tens when the shared L3 serves it
# (bench/probe.c says how many where), 140 and more when it goes to memory.
probe_shared_cache() {
    taskset -c 0 "$PROBE" --shared-cache
}

make_certificate() {
    mkdir -p "$TMP/tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj "/CN=127.0.0.1" -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
        -keyout "$TMP/tls/bench.key" -out "$TMP/tls/bench.crt" >/dev/null 2>&1 || die "openssl could not make a certificate"
}

start_upstreams() {
    pick_port
    UPSTREAM_PORT="$PORT"
    start upstream 1 "$TMP/upstream.log" "$UPSTREAM" "127.0.0.1:$UPSTREAM_PORT"
    UPSTREAM_PID="$STARTED"
    wait_http "$UPSTREAM_PID" "http://127.0.0.1:$UPSTREAM_PORT/" || die "the upstream did not start: $(cat "$TMP/upstream.log")"
}

start_target() {
    local target="$1" port
    pick_port
    port="$PORT"
    SCHEME[$target]=http
    case "$target" in
        direct)
            # The upstream itself, a second instance, on the target's core.
            start "$target" 0 "$TMP/$target.log" "$UPSTREAM" "127.0.0.1:$port"
            CPU_PID[$target]="$STARTED"
            ;;
        nginx | nginx-lua | nginx-lua-many-users | nginx-tls)
            local conf="$TMP/$target.conf" master i worker=""
            case "$target" in
                nginx) render "$BENCH_DIR/conf/nginx-proxy.conf" "$conf" "$port" ;;
                nginx-lua-many-users)
                    # nginx-lua's conf, its files (pid, log, temp paths)
                    # named after this target, its users where the marker is.
                    render "$BENCH_DIR/conf/nginx-lua.conf" "$conf" "$port"
                    sed -i "s#$TMP/nginx-lua\.#$TMP/$target.#g" "$conf"
                    many_users_lua >"$TMP/many-users.lua"
                    sed -i -e "/@MANY_USERS@/r $TMP/many-users.lua" -e '/@MANY_USERS@/d' "$conf"
                    WRK_ARGS[$target]=many-users
                    ;;
                *) render "$BENCH_DIR/conf/$target.conf" "$conf" "$port" ;;
            esac
            [[ "$target" == nginx-tls ]] && SCHEME[$target]=https
            start "$target" 0 "$TMP/$target.log" nginx -p "$TMP" -c "$conf" -e "$TMP/$target.error.log"
            master="$STARTED"
            for ((i = 0; i < 100; i++)); do
                worker="$(pgrep -P "$master" 2>/dev/null | head -n1 || true)"
                [[ -n "$worker" ]] && break
                kill -0 "$master" 2>/dev/null || break
                sleep 0.1
            done
            [[ -n "$worker" ]] || die "$target started no worker: $(cat "$TMP/$target.error.log" "$TMP/$target.log" 2>/dev/null)"
            adopt "$worker" "$target-worker"
            CPU_PID[$target]="$worker"
            [[ "$target" == nginx-lua* ]] && AUDIT_FILE[$target]="$TMP/$target.audit.jsonl"
            ;;
        haproxy)
            render "$BENCH_DIR/conf/haproxy.cfg" "$TMP/haproxy.cfg" "$port"
            start "$target" 0 "$TMP/$target.log" haproxy -db -f "$TMP/haproxy.cfg"
            CPU_PID[$target]="$STARTED"
            ;;
        hyper-proxy | hyper-raw-client | raw-proxy | raw-proxy-typed)
            local proxy="$RAW_PROXY" mode=()
            [[ "$target" == hyper-* ]] && proxy="$HYPER_PROXY"
            [[ "$target" == hyper-raw-client ]] && mode=(raw-client)
            [[ "$target" == raw-proxy-typed ]] && mode=(typed)
            start "$target" 0 "$TMP/$target.log" "$proxy" "127.0.0.1:$port" "127.0.0.1:$UPSTREAM_PORT" "${mode[@]}"
            CPU_PID[$target]="$STARTED"
            ;;
        *)
            local manifest
            case "$target" in
                wasmgate-pass) manifest="$BENCH_DIR/manifests/passthrough.toml" ;;
                wasmgate-full-per-request) manifest="$BENCH_DIR/manifests/full-per-request.toml" ;;
                wasmgate-full-pooled) manifest="$BENCH_DIR/manifests/full-pooled.toml" ;;
                wasmgate-full-pooled-nocache) manifest="$BENCH_DIR/manifests/full-pooled-nocache.toml" ;;
                wasmgate-full-pooled-many-users)
                    manifest="$BENCH_DIR/manifests/full-pooled-many-users.toml"
                    WRK_ARGS[$target]=many-users
                    # Kept with the manifests for bench/ab.sh, which sends
                    # each target the mix run.sh sends it.
                    mkdir -p "$TMP/wrk-args" && echo many-users >"$TMP/wrk-args/$target"
                    ;;
                wasmgate-full-python) manifest="$BENCH_DIR/manifests/full-python.toml" ;;
                wasmgate-pass-tls) manifest="$BENCH_DIR/manifests/tls.toml"; SCHEME[$target]=https ;;
                *) manifest="${EXTRA_MANIFEST[$target]}" ;;
            esac
            # The manifests get a folder of their own, and the audit files
            # another: the gateway watches its manifest's folder for
            # changes, and a sink written there would wake its watcher
            # thread at every event.
            AUDIT_FILE[$target]="$TMP/audit/$target.audit.jsonl"
            render_manifest "$manifest" "$TMP/manifests/$target.toml" "$port" "${AUDIT_FILE[$target]}"
            if grep -q '@MANY_USERS@' "$TMP/manifests/$target.toml"; then
                many_users >"$TMP/many-users.toml"
                sed -i -e "/@MANY_USERS@/r $TMP/many-users.toml" -e '/@MANY_USERS@/d' "$TMP/manifests/$target.toml"
            fi
            if grep -q '^\[listen\.tls\]' "$TMP/manifests/$target.toml"; then SCHEME[$target]=https; fi
            grep -q '^sink = ' "$TMP/manifests/$target.toml" || unset 'AUDIT_FILE[$target]'
            local cache_home="${XDG_CACHE_HOME:-$HOME/.cache}"
            ((COLD_CODE)) && cache_home="$TMP/cold-cache-$target"
            start "$target" 0 "$TMP/$target.log" \
                env RUST_LOG="${RUST_LOG:-warn}" XDG_CACHE_HOME="$cache_home" \
                "$WASMGATE" run --config "$TMP/manifests/$target.toml" --workers "$WORKERS"
            CPU_PID[$target]="$STARTED"
            ;;
    esac
    URL[$target]="${SCHEME[$target]}://127.0.0.1:$port"
    wait_http "$STARTED" "${URL[$target]}/" -k || die "$target did not start: $(tail -n 20 "$TMP/$target.log" 2>/dev/null)"
    if [[ "$target" == wasmgate-* ]]; then
        # Where the components' compiled code came from at start: a cold
        # compiled-code cache compiles them now.
        COMPILED_CODE[$target]="$(scrape "$target" | awk -F'[{}"= ]+' '/^wasmgate_components_loaded_total\{/ { printf "%s%s=%s", sep, $3, $4; sep = " " }')"
    fi
}

# The 10,000 users of wasmgate-full-pooled-many-users, as lines of
# token-authn's `tokens` list (mix.lua's `many-users` picks among them).
many_users() {
    local i
    for ((i = 0; i < 10000; i++)); do
        printf '  { token = "user-%04d-token", user = "user-%04d", groups = ["many"] },\n' "$i" "$i"
    done
}

# The same users for nginx-lua-many-users, as entries of its Lua table of
# tokens (the group "many" is granted widgets in "default" there, as in the
# manifest).
many_users_lua() {
    local i
    for ((i = 0; i < 10000; i++)); do
        printf '                ["user-%04d-token"] = { username = "user-%04d", groups = { "many", "system:authenticated" } },\n' "$i" "$i"
    done
}

# TARGET's /metrics text (alice may read it in the bench manifests), empty
# for a target without it.
scrape() {
    curl -sk --max-time 5 -H 'Authorization: Bearer alice-token' "${URL[$1]}/metrics" 2>/dev/null || true
}

# The decision caches' hits and misses so far, one "FILTER HITS MISSES" line
# per cached filter.
cache_counts() {
    scrape "$1" | awk '
        /^wasmgate_decision_cache_(hits|misses)_total\{/ {
            split($1, parts, "\""); kind = ($1 ~ /hits/) ? "h" : "m"; n[parts[2], kind] = $2; names[parts[2]] = 1
        }
        END { for (f in names) printf "%s %d %d\n", f, n[f, "h"], n[f, "m"] }' | sort
}

# The window's hit ratio from two cache_counts snapshots: "PCT DETAIL", the
# hits of all cached filters over their lookups, and per filter; "- -"
# without caches.
cache_ratio() { # BEFORE AFTER
    join -a 2 <(printf '%s\n' "$1") <(printf '%s\n' "$2") | awk '
        NF == 5 { h = $4 - $2; m = $5 - $3 } NF == 3 { h = $2; m = $3 }
        NF == 3 || NF == 5 { th += h; tm += m; if (h + m) detail = detail sprintf("%s%s %.1f%%", sep, $1, h * 100 / (h + m)); sep = ", " }
        END { if (th + tm) printf "%.2f\t%s\n", th * 100 / (th + tm), detail; else print "\t" }'
}

# Whether a target runs the bench's policy (the token, the rules, the label
# admission, the audit event): the chains and nginx + Lua. An --extra
# target's manifest may run anything, so it is not asked.
runs_policy() {
    [[ "$1" == nginx-lua* || ( "$1" == wasmgate-full-* && -z "${EXTRA_MANIFEST[$1]:-}" ) ]]
}

# A request of each kind of the mix must be a 200 (or the mix would measure
# error paths), and the create must reach the upstream as the target's policy
# leaves it: labelled by the admission where the policy runs, as sent
# elsewhere (the upstream echoes it back for this one request). A target that
# runs the policy must also answer as kube does: the audit ID in every
# response's Audit-Id header, refusals as Status bodies.
check_target() {
    local target="$1" path=/apis/demo.example.io/v1/namespaces/default/widgets code sent forwarded expected
    local headers="$TMP/$target.headers"
    code="$(curl -sk -o /dev/null -D "$headers" -w '%{http_code}' --max-time 5 -H 'Authorization: Bearer bob-token' "${URL[$target]}$path")"
    [[ "$code" == 200 ]] || die "$target: GET with bob's token answered $code, not 200"
    runs_policy "$target" && check_refusals "$target" "${URL[$target]}$path" "$headers"
    sent='{"metadata":{"name":"w1"}}'
    forwarded="$TMP/$target.forwarded.json"
    code="$(curl -sk -o "$forwarded" -w '%{http_code}' --max-time 5 -H 'Authorization: Bearer alice-token' \
        -H 'Content-Type: application/json' -H 'X-Bench-Echo: 1' -d "$sent" "${URL[$target]}$path")"
    [[ "$code" == 200 ]] || die "$target: POST with alice's token answered $code, not 200"
    [[ -n "${EXTRA_MANIFEST[$target]:-}" ]] && return 0
    expected="$sent"
    runs_policy "$target" && expected='{"metadata":{"name":"w1","labels":{"team":"platform"}}}'
    jq -e --argjson expected "$expected" '. == $expected' "$forwarded" >/dev/null 2>&1 ||
        die "$target: the create reached the upstream as $(head -c 300 "$forwarded"), not as $expected"
}

# A policy target's answers beyond the mix's 200s, as kube's and the chain's:
# the GET's Audit-Id header (the GET of the widgets at URL, its headers in
# HEADERS), an unknown token's 401 and bob's delete's 403 as Status bodies,
# the 403 with kube's message (the chain's RBAC adds its reason after it).
check_refusals() { # TARGET URL HEADERS
    local target="$1" url="$2" body="$TMP/$1.refusal.json" code
    grep -qiE '^audit-id: [0-9a-f-]{36}'$'\r''?$' "$3" || die "$target: its GET answered without an Audit-Id header"
    code="$(curl -sk -o "$body" -w '%{http_code}' --max-time 5 -H 'Authorization: Bearer no-such-token' "$url")"
    jq -e --argjson code "$code" '$code == 401 and .kind == "Status" and .apiVersion == "v1" and .status == "Failure"
        and .reason == "Unauthorized" and .code == 401' "$body" >/dev/null 2>&1 ||
        die "$target: an unknown token was answered $code $(head -c 300 "$body"), not kube's 401 Status"
    code="$(curl -sk -o "$body" -w '%{http_code}' --max-time 5 -X DELETE -H 'Authorization: Bearer bob-token' "$url/w1")"
    jq -e --argjson code "$code" '$code == 403 and .kind == "Status" and .reason == "Forbidden" and .code == 403
        and (.message | startswith("widgets.demo.example.io \"w1\" is forbidden: User \"bob\" cannot delete resource \"widgets\" in API group \"demo.example.io\" in the namespace \"default\""))
        and .details == {"name": "w1", "group": "demo.example.io", "kind": "widgets"}' "$body" >/dev/null 2>&1 ||
        die "$target: bob's delete was answered $code $(head -c 400 "$body"), not kube's 403 Status"
}

# The last event of the mix's requests a policy target wrote in a round (not
# of run.sh's own /metrics reads) must carry what kube's Metadata-level
# ResponseComplete event carries, so that the chains and nginx + Lua are held
# to the same event. The status may be wrk's cut at the window's end (499).
check_audit_event() { # TARGET FILE
    local event
    runs_policy "$1" || return 0
    # Read from the end: a round's file holds hundreds of megabytes of events.
    # grep stops at the first match and tac then dies of SIGPIPE, which
    # pipefail would take for a failure; no event at all fails in jq below.
    event="$(tac "$2" | grep -m 1 'widgets"' || true)"
    jq -e '.kind == "Event" and .apiVersion == "audit.k8s.io/v1" and .level == "Metadata"
        and .stage == "ResponseComplete" and (.auditID | test("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"))
        and (.verb | type == "string") and (.requestURI | type == "string")
        and (.user.username | type == "string") and (.user.groups | type == "array")
        and (.sourceIPs | length == 1) and (.objectRef.resource == "widgets") and (.objectRef.apiGroup == "demo.example.io")
        and (.responseStatus.code | type == "number") and (.requestReceivedTimestamp | type == "string")
        and (.stageTimestamp | type == "string") and (.annotations["authorization.k8s.io/decision"] == "allow")' \
        <<<"$event" >/dev/null 2>&1 || die "$1: its last audit event lacks a field of kube's Metadata event: ${event:0:600}"
}

# ---------------------------------------------------------------- measuring

CLK_TCK="$(getconf CLK_TCK)"

# shellcheck source=bench/proc.sh
. "$BENCH_DIR/proc.sh"

# utime + stime of PID, in clock ticks (all its threads).
ticks() {
    local user kernel
    read -r user kernel < <(cpu_ticks "$1")
    echo $((user + kernel))
}

# read- and write-class system calls of PID so far (all threads).
io_calls() {
    awk '/^sysc[rw]:/ { n += $2 } END { print n + 0 }' "/proc/$1/io" 2>/dev/null || echo 0
}

# Involuntary context switches of PID's live threads so far: the times
# something else was given the core while the target had work (a
# neighbour, or a thread of its own), where the total counts its waits too.
preemptions() {
    cat "/proc/$1"/task/*/status 2>/dev/null | awk '/^nonvoluntary_ctxt_switches:/ { n += $2 } END { print n + 0 }'
}

# Context switches (voluntary and not) of PID's live threads so far.
context_switches() {
    cat "/proc/$1"/task/*/status 2>/dev/null | awk '/ctxt_switches:/ { n += $2 } END { print n + 0 }'
}

# Ticks CPU 0 was stolen by the hypervisor (a virtual machine's noise).
cpu0_steal() {
    awk '$1 == "cpu0" { print $9 + 0; exit }' /proc/stat
}

# Ticks CPU 0 spent running processes (user, nice, system; not interrupts,
# softirqs, steal or idle): minus the target's own, it tells how much else ran
# on the target's core during a window.
cpu0_busy() {
    awk '$1 == "cpu0" { print $2 + $3 + $4; exit }' /proc/stat
}

# wrk_run CPU CONNECTIONS SECONDS URL OUT [SCRIPT-ARG]: closed loop, the mix
# of wrk/mix.lua (with `many-users`, 10,000 users' tokens).
wrk_run() {
    timeout -k 5 $(($3 + 60)) taskset -c "$1" wrk -t1 -c"$2" -d"$3"s --timeout 10s \
        -s "$BENCH_DIR/wrk/mix.lua" "$4" ${6:+-- "$6"} >"$5" 2>&1 || true
    grep -q '^WRKJSON ' "$5" || die "wrk gave no result: $(cat "$5")"
}

wrk_field() { # FILE JQ-EXPRESSION
    sed -n 's/^WRKJSON //p' "$1" | jq -r "$2"
}

audit_reset() {
    local file="${AUDIT_FILE[$1]:-}"
    [[ -n "$file" && -f "$file" ]] && : >"$file"
    return 0
}

audit_settle() {
    local file="${AUDIT_FILE[$1]:-}" size=-1 now i
    [[ -n "$file" && -f "$file" ]] || return 0
    for ((i = 0; i < 40; i++)); do
        sleep 0.5
        now="$(stat -c %s "$file")"
        [[ "$now" == "$size" ]] && return 0
        size="$now"
    done
}

RAW="$TMP/raw.tsv"
RAW_COLUMNS=(round target phase requests seconds rps non2xx socket_errors cpu_us_per_req upstream_cpu_us_per_req
    p50_us p90_us p99_us cpu0_other_pct load1 audited syscalls_per_req ctxsw_per_req cpu0_steal_pct minflt_per_req
    majflt_per_req cache_hit_pct cache_detail user_cpu_us_per_req preempted_per_req shared_cache_ns)
(IFS=$'\t' && printf '%s\n' "${RAW_COLUMNS[*]}") >"$RAW"

# Appends its input's rows to RAW, each padded with empty cells to the
# header's width (a phase leaves the columns it does not measure empty); a
# row wider than the header stops the run.
raw_rows() {
    awk -F'\t' -v OFS='\t' -v width="${#RAW_COLUMNS[@]}" '
        NF > width { print "raw.tsv: a row of " NF " cells for " width " columns: " $0 >"/dev/stderr"; exit 1 }
        { for (i = NF + 1; i <= width; i++) $i = ""; print }' >>"$RAW" || die "a raw row did not fit the columns"
}

measure_throughput() { # ROUND TARGET
    local round="$1" target="$2" out="$TMP/wrk-$1-$2.out" pid="${CPU_PID[$2]}"
    local y0 y1 z0 z1 p0 p1 u0 u1 c0 c1 w0 w1 s0 s1 x0 x1 v0 v1 f0 f1 k0="" k1="" requests seconds non2xx socket audit="" load cache_ns
    local wrk_arg="${WRK_ARGS[$target]:-}"
    wrk_run 1 "$CONNECTIONS" "$WARMUP" "${URL[$target]}" "$TMP/warmup.out" "$wrk_arg"
    audit_reset "$target"
    # What the shared cache gives the target's core just now (bench/probe.c).
    cache_ns="$(probe_shared_cache)"
    load="$(cut -d' ' -f1 /proc/loadavg)"
    [[ "$target" == wasmgate-* ]] && k0="$(cache_counts "$target")"
    read -r y0 z0 < <(cpu_ticks "$pid")
    u0="$(ticks "$UPSTREAM_PID")" c0="$(cpu0_busy)" w0="$(date +%s.%N)"
    s0="$(io_calls "$pid")" x0="$(context_switches "$pid")" p0="$(preemptions "$pid")" v0="$(cpu0_steal)" f0="$(faults "$pid")"
    wrk_run 1 "$CONNECTIONS" "$DURATION" "${URL[$target]}" "$out" "$wrk_arg"
    read -r y1 z1 < <(cpu_ticks "$pid")
    u1="$(ticks "$UPSTREAM_PID")" c1="$(cpu0_busy)" w1="$(date +%s.%N)"
    s1="$(io_calls "$pid")" x1="$(context_switches "$pid")" p1="$(preemptions "$pid")" v1="$(cpu0_steal)" f1="$(faults "$pid")"
    [[ "$target" == wasmgate-* ]] && k1="$(cache_counts "$target")"
    requests="$(wrk_field "$out" .requests)"
    seconds="$(wrk_field "$out" '.duration_us / 1e6')"
    non2xx="$(wrk_field "$out" .errors.status)"
    socket="$(wrk_field "$out" '.errors.connect + .errors.read + .errors.write + .errors.timeout')"
    if [[ -n "${AUDIT_FILE[$target]:-}" ]]; then
        # Batch audit and nginx's buffered log lag: wait (at most 20 s) until
        # the file stops growing, then count the window's audited requests.
        audit_settle "$target"
        audit="$(python3 "$BENCH_DIR/report.py" audit "${AUDIT_FILE[$target]}" "$w0" "$w1")"
        check_audit_event "$target" "${AUDIT_FILE[$target]}"
    fi
    [[ "$target" == direct ]] && u1="$u0" # the shared upstream is idle then
    local cache=$'\t'
    [[ "$target" == wasmgate-* ]] && cache="$(cache_ratio "$k0" "$k1")"
    awk -v r="$round" -v t="$target" -v n="$requests" -v s="$seconds" -v e="$non2xx" -v k="$socket" \
        -v dt=$((y1 + z1 - y0 - z0)) -v dy=$((y1 - y0)) -v dp=$((p1 - p0)) -v du=$((u1 - u0)) -v dc=$((c1 - c0)) -v hz="$CLK_TCK" -v l="$load" -v a="$audit" \
        -v ds=$((s1 - s0)) -v dx=$((x1 - x0)) -v dv=$((v1 - v0)) \
        -v fn=$((${f1% *} - ${f0% *})) -v fj=$((${f1#* } - ${f0#* })) -v cache="$cache" -v cache_ns="$cache_ns" '
        BEGIN {
            rps = n / s; cpu = dt * 1e6 / hz / n; up = du * 1e6 / hz / n
            other = (dc - dt) * 100 / hz / s; if (other < 0) other = 0
            printf "%s\t%s\tthroughput\t%d\t%.3f\t%.1f\t%d\t%d\t%.2f\t%.2f\t\t\t\t%.1f\t%s\t%s\t%.2f\t%.3f\t%.1f\t%.3f\t%.4f\t%s\t%.2f\t%.4f\t%s\n", r, t, n, s, rps, e, k, cpu, up, other, l, a, ds / n, dx / n, dv * 100 / hz / s, fn / n, fj / n, cache, dy * 1e6 / hz / n, dp / n, cache_ns
        }' | raw_rows
    log "round $round $target: $(tail -n1 "$RAW" | awk -F'\t' '{ printf "%s req/s, %s us CPU/req, %s vfs read/write calls/req, %s context switches/req, %s minor faults/req, cache hits %s%%, non-2xx %s, socket errors %s, other load on CPU 0 %s%%, audited %s", $6, $9, $17, $18, $20, $22, $7, $8, $14, $16 }')"
}

measure_one_connection() { # ROUND TARGET
    local round="$1" target="$2" out="$TMP/wrk1-$1-$2.out"
    # Everything on one core: the target is there already; bring the upstream.
    taskset -a -p -c 0 "$UPSTREAM_PID" >/dev/null
    wrk_run 0 1 "$WARMUP" "${URL[$target]}" "$TMP/warmup.out" "${WRK_ARGS[$target]:-}"
    wrk_run 0 1 "$LATENCY_DURATION" "${URL[$target]}" "$out" "${WRK_ARGS[$target]:-}"
    taskset -a -p -c 1 "$UPSTREAM_PID" >/dev/null
    audit_reset "$target"
    {
        printf '%s\t%s\toneconn\t' "$round" "$target"
        sed -n 's/^WRKJSON //p' "$out" | jq -r '[.requests, (.duration_us / 1e6), (.requests / (.duration_us / 1e6)),
            .errors.status, (.errors.connect + .errors.read + .errors.write + .errors.timeout),
            "", "", .latency_us.p50, .latency_us.p90, .latency_us.p99] | @tsv'
    } | raw_rows
    log "round $round $target one connection, one core: $(tail -n1 "$RAW" | awk -F'\t' '{ printf "p50 %s us, p99 %s us", $11, $13 }')"
}

oha_run() { # SECONDS URL OUT
    local insecure=()
    [[ "$2" == https:* ]] && insecure=(--insecure)
    TOKIO_WORKER_THREADS=1 timeout -k 5 $(($1 + 60)) taskset -c 1 "$OHA" --no-tui --output-format json -z "$1s" -q "$RATE" \
        --latency-correction -w -c "$OPEN_CONNECTIONS" "${insecure[@]}" \
        -H 'Authorization: Bearer alice-token' -H 'Accept: application/json' \
        "$2/apis/demo.example.io/v1/namespaces/default/widgets" >"$3" 2>"$3.err" || true
    jq -e .summary "$3" >/dev/null 2>&1 || die "oha gave no result: $(cat "$3" "$3.err" | head -c 2000)"
}

measure_open_loop() { # ROUND TARGET
    local round="$1" target="$2" out="$TMP/oha-$1-$2.json"
    oha_run "$WARMUP" "${URL[$target]}" "$TMP/warmup.json"
    oha_run "$DURATION" "${URL[$target]}" "$out"
    audit_reset "$target"
    {
        printf '%s\t%s\topenloop\t' "$round" "$target"
        jq -r '
            ([.statusCodeDistribution // {} | to_entries[] | .value] | add // 0) as $n
            | ([.statusCodeDistribution // {} | to_entries[] | select((.key | tonumber) >= 400) | .value] | add // 0) as $bad
            | ([.errorDistribution // {} | to_entries[] | .value] | add // 0) as $err
            | [$n, .summary.total, .summary.requestsPerSec, $bad, $err, "", "",
               (.latencyPercentiles.p50 * 1e6), (.latencyPercentiles.p90 * 1e6), (.latencyPercentiles.p99 * 1e6)]
            | @tsv' "$out"
    } | raw_rows
    log "round $round $target open loop at $RATE req/s: $(tail -n1 "$RAW" | awk -F'\t' '{ printf "p50 %s us, p99 %s us, errors %s+%s", $11, $13, $7, $8 }')"
}

# ---------------------------------------------------------------- profile

# Starts a fresh instance of TARGET (wasmgate's rendered manifest, or nginx's
# config in single-process mode) on a new port, under the wrapper command
# given after TAG. Sets PROFILE_PID, PROFILE_URL.
start_profiled() { # TARGET TAG WRAPPER...
    local target="$1" tag="$2" port
    shift 2
    pick_port
    port="$PORT"
    PROFILE_URL="http://127.0.0.1:$port"
    if [[ "$target" == nginx ]]; then
        render "$BENCH_DIR/conf/nginx-proxy.conf" "$TMP/nginx.$tag.conf" "$port"
        sed -i -e "s#nginx-proxy\.pid#nginx-$tag.pid#; s#^daemon off;#daemon off;\nmaster_process off;#" "$TMP/nginx.$tag.conf"
        start "$target-$tag" 0 "$TMP/$target.$tag.log" "$@" nginx -p "$TMP" -c "$TMP/nginx.$tag.conf" -e "$TMP/nginx.$tag.error.log"
    else
        sed -E "s#^address = \"[^\"]*\"#address = \"127.0.0.1:$port\"#" "$TMP/manifests/$target.toml" >"$TMP/manifests/$target.$tag.toml"
        start "$target-$tag" 0 "$TMP/$target.$tag.log" env RUST_LOG=warn "$@" \
            "$WASMGATE" run --config "$TMP/manifests/$target.$tag.toml" --workers "$WORKERS"
    fi
    PROFILE_PID="$STARTED"
    wait_http "$PROFILE_PID" "$PROFILE_URL/"
}

# The CPU's caches, one line a level: name, size of one instance in bytes,
# ways, line size (lscpu's per-instance figures; its summary gives the sum
# over the cores). Empty where lscpu cannot say.
cache_levels() {
    lscpu -C=NAME,ONE-SIZE,WAYS,COHERENCY-SIZE --bytes 2>/dev/null |
        awk 'NR > 1 && $2 ~ /^[0-9]+$/ && $3 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/ { print $1, $2, $3, $4 }'
}

# The caches for the run's meta: "L1d 48 KiB 12-way, L1i 32 KiB 8-way, ...".
cache_summary() {
    cache_levels | awk '{ printf "%s%s %d KiB %d-way", sep, $1, $2 / 1024, $3; sep = ", " }'
}

# callgrind's --LL option sizing its simulated last level as one core's L2,
# so that its misses are the loads that leave the core's own caches: nginx
# has next to none, wasmgate's chain hundreds a request, and their cost is
# what the shared L3 gives the core at the time (bench/probe.c). Nothing,
# and valgrind's own choice of the L3, where lscpu does not say or valgrind
# could not simulate it (sets must be a power of two).
l2_as_last_level() {
    local size ways line
    read -r _ size ways line < <(cache_levels | awk '$1 == "L2"') || return 0
    local sets=$((size / ways / line))
    ((sets > 0 && (sets & (sets - 1)) == 0)) || return 0
    echo "--LL=$size,$ways,$line"
}

# perf (cpu-clock sampling, DWARF call graphs) at full load, and callgrind
# (instruction counts and its simulated L1 and last-level caches' misses,
# user space only) of a slower run, of nginx (for reference) and wasmgate;
# summarised into OUT: self cost by bucket per request, the misses per
# request, and top functions by inclusive and by self cost.
profile() {
    local out="$1" target data perf_ok=0 recorder i last_level last_level_note
    : >"$out"
    last_level="$(l2_as_last_level)"
    last_level_note=": not known here, so valgrind's own choice"
    [[ -n "$last_level" ]] && last_level_note=" ($last_level)"
    if command -v perf >/dev/null 2>&1 &&
        timeout 20 perf record -q -e cpu-clock -o "$TMP/perf-probe.data" -- true >/dev/null 2>&1; then
        perf_ok=1
    fi
    for target in nginx wasmgate-pass wasmgate-full-pooled wasmgate-full-pooled-nocache; do
        [[ "$target" == nginx || -f "$TMP/manifests/$target.toml" ]] || continue
        if ((perf_ok)); then
            log "profile: $target under perf record (cpu-clock, $DURATION s at $CONNECTIONS connections)"
            data="$TMP/$target.perf.data"
            if start_profiled "$target" perf; then
                wrk_run 1 "$CONNECTIONS" "$WARMUP" "$PROFILE_URL" "$TMP/warmup.out"
                start perf-record 1 "$TMP/$target.perf.log" perf record -q -e cpu-clock -F 999 --call-graph dwarf,16384 \
                    -o "$data" -p "$PROFILE_PID" -- sleep "$DURATION"
                recorder="$STARTED"
                wrk_run 1 "$CONNECTIONS" "$DURATION" "$PROFILE_URL" "$TMP/profile-perf-$target.out"
                for ((i = 0; i < 600; i++)); do kill -0 "$recorder" 2>/dev/null || break; sleep 0.1; done
                stop_pid "$recorder"
                stop_pid "$PROFILE_PID"
                (
                    set +o pipefail
                    tidy() { grep -v '^#' | grep -v '^$' | sed -E 's/ +/ /g; s/ - - *$//' | cut -c1-200; }
                    echo "== perf: $target, $(wrk_field "$TMP/profile-perf-$target.out" .requests) requests in $DURATION s (wrk, $CONNECTIONS connections); cpu-clock samples of the target process, kernel included; JIT-compiled Wasm has no symbols"
                    timeout 600 perf report -i "$data" -n --stdio --no-children --sort dso,symbol -g none --no-inline --percent-limit 0 \
                        >"$data.self" 2>/dev/null || true
                    echo "-- self cost by bucket (CPU us per request, from the sample count)"
                    python3 "$BENCH_DIR/profile_summary.py" perf "$data.self" "$(wrk_field "$TMP/profile-perf-$target.out" .requests)"
                    echo "-- by shared object (self)"
                    timeout 600 perf report -i "$data" --stdio --no-children --sort dso -g none 2>/dev/null | tidy | head -n 8
                    echo "-- inclusive (children, self), generic runtime frames left out"
                    timeout 600 perf report -i "$data" --stdio --children --sort symbol -g none --no-inline --percent-limit 1.5 2>/dev/null | tidy |
                        grep -Ev 'tokio::runtime|futures_util|core::ops|core::panic|std::sys|std::thread|clone3|start_thread|0xffffffff|PollFn|TrackedFuture|entry_SYSCALL|do_syscall_64|__rust_begin|call_once' |
                        head -n 45
                    echo "-- self, top symbols"
                    timeout 600 perf report -i "$data" --stdio --no-children --sort dso,symbol -g none --no-inline --percent-limit 0.7 2>/dev/null | tidy | head -n 30
                    echo
                ) >>"$out"
                rm -f "$data"
            else
                stop_pid "$PROFILE_PID"
                log "profile: $target did not start for perf"
            fi
        fi
        if command -v valgrind >/dev/null 2>&1; then
            log "profile: $target under callgrind (slow)"
            data="$TMP/$target.callgrind.out"
            if start_profiled "$target" callgrind valgrind --tool=callgrind --cache-sim=yes $last_level --instr-atstart=no --callgrind-out-file="$data"; then
                wrk_run 1 4 5 "$PROFILE_URL" "$TMP/warmup.out"
                timeout 60 callgrind_control -i on "$PROFILE_PID" >/dev/null || true
                wrk_run 1 4 20 "$PROFILE_URL" "$TMP/profile-callgrind-$target.out"
                timeout 60 callgrind_control -i off "$PROFILE_PID" >/dev/null || true
                stop_pid "$PROFILE_PID" 120 # callgrind writes its data at exit
                wait "$PROFILE_PID" 2>/dev/null || true
                (
                    set +o pipefail
                    tidy() {
                        sed -E 's#/root/\.cargo/registry/src/[^/]*/##g; s#/rustc/[0-9a-f]+/library/##g; s# \[[^]]*/release/wasmgate[^]/]*\]##; s# \[/usr/lib/x86_64-linux-gnu/([^]]*)\]# [\1]#' |
                            cut -c1-220
                    }
                    requests="$(wrk_field "$TMP/profile-callgrind-$target.out" .requests)"
                    timeout 600 callgrind_annotate --show=Ir --inclusive=yes --auto=no "$data" >"$data.inclusive" 2>/dev/null || true
                    timeout 600 callgrind_annotate --show=Ir --threshold=100 --auto=no "$data" >"$data.self" 2>/dev/null || true
                    timeout 600 callgrind_annotate --auto=no "$data" 2>/dev/null | sed -n '1,/PROGRAM TOTALS/p' >"$data.totals" || true
                    echo "== callgrind: $target, $requests requests (wrk, 4 connections, 20 s under valgrind); user-space instructions only"
                    echo "-- self cost by bucket (instructions per request)"
                    python3 "$BENCH_DIR/profile_summary.py" callgrind "$data.self" "$requests"
                    echo "-- simulated caches (callgrind --cache-sim=yes, the L1 sized as this machine's, the last level as one core's L2$last_level_note): misses per request and per thousand instructions; a last-level miss is a load the shared L3 must serve, or memory when the machine's neighbours hold the L3"
                    python3 "$BENCH_DIR/profile_summary.py" cachesim "$data.totals" "$requests"
                    echo "-- inclusive, wasmgate's own functions (a \"'2\" suffix: a recursive cycle through wasmtime's fibers)"
                    grep -E 'wasmgate::' "$data.inclusive" | grep -v "'2" | tidy | head -n 30
                    echo "-- inclusive, everything"
                    sed -n '/^Ir  /,$p' "$data.inclusive" | tidy | head -n 30
                    echo "-- self (???: JIT-compiled Wasm code)"
                    sed -n '/^Ir  /,$p' "$data.self" | tidy | head -n 30
                    echo
                ) >>"$out"
            else
                stop_pid "$PROFILE_PID"
                log "profile: $target did not start under valgrind: $(tail -n 5 "$TMP/$target.callgrind.log")"
            fi
        fi
    done
}

# ---------------------------------------------------------------- main

cd "$REPO_DIR"
install_tools
build
OHA="${OHA:-$TOOLS_DIR/bin/oha}"
wait_for_quiet
make_certificate
build_probe
PROBE_START="$(probe_machine)"
start_upstreams
for target in "${TARGETS[@]}"; do
    start_target "$target"
    check_target "$target"
    log "$target: ${URL[$target]} (pid ${CPU_PID[$target]} measured)"
done

LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
STARTED_AT="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
# How long the machine had been up when the run began: a machine booted
# minutes ago has cold page, disk and compiled-code caches.
UPTIME_AT_START="$(cut -d' ' -f1 /proc/uptime)"
count="${#TARGETS[@]}"
for ((round = 1; round <= ROUNDS; round++)); do
    for ((i = 0; i < count; i++)); do
        # Interleaved, and rotated each round so no target always runs first.
        target="${TARGETS[$(((i + round - 1) % count))]}"
        measure_throughput "$round" "$target"
        measure_one_connection "$round" "$target"
    done
done
if ((ROUNDS == 0)); then
    # --rounds 0 --profile: only the profile.
    if ((PROFILE)); then
        STAMP="$(date -u +%Y-%m-%dT%H%M%SZ)"
        mkdir -p "$BENCH_DIR/results"
        profile "$BENCH_DIR/results/$STAMP.profile.txt"
        log "profile summary: bench/results/$STAMP.profile.txt"
    fi
    exit 0
fi
if ((OPENLOOP)); then
    if [[ "$RATE" == auto ]]; then
        RATE="$(python3 "$BENCH_DIR/report.py" slowest "$RAW")"
        RATE=$((RATE / 2 / 100 * 100))
        ((RATE >= 100)) || RATE=100
    fi
    log "open loop at $RATE req/s (oha, $OPEN_CONNECTIONS connections, latency correction, GET only)"
    for ((round = 1; round <= ROUNDS; round++)); do
        for ((i = 0; i < count; i++)); do
            target="${TARGETS[$(((i + round - 1) % count))]}"
            measure_open_loop "$round" "$target"
        done
    done
fi
LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)"
PROBE_END="$(probe_machine)"

if ((SMOKE)); then
    python3 "$BENCH_DIR/report.py" smoke "$RAW"
    exit $?
fi

STAMP="$(date -u +%Y-%m-%dT%H%M%SZ)"
mkdir -p "$BENCH_DIR/results"
cat >"$TMP/meta.json" <<EOF
{
  "date": "$STARTED_AT",
  "command": $(jq -Rn --arg c "$COMMAND_LINE" '$c'),
  "machine": {
    "nproc": $(nproc),
    "cpu": $(jq -Rn --arg c "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)" '$c'),
    "memory": $(jq -Rn --arg c "$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)" '$c'),
    "cpu_id": $(jq -Rn --arg c "$(awk -F': ' '/^cpu family/ { f = $2 } /^model[[:space:]]*:/ { m = $2 } /^stepping/ { s = $2; exit } END { printf "family %s, model %s, stepping %s", f, m, s }' /proc/cpuinfo)" '$c'),
    "caches": $(jq -Rn --arg c "$(cache_summary)" '$c'),
    "uptime_at_start_s": $UPTIME_AT_START,
    "mitigations": $(jq -Rn --arg c "$(for v in spectre_v2 spec_rstack_overflow; do [[ -r /sys/devices/system/cpu/vulnerabilities/$v ]] && echo "$v: $(cat /sys/devices/system/cpu/vulnerabilities/$v)"; done | paste -sd'|' - | sed 's/|/ | /g')" '$c'),
    "kernel": $(jq -Rn --arg c "$(uname -r)" '$c'),
    "transparent_hugepages": $(jq -Rn --arg c "$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)" '$c')
  },
  "probe": { "start": $PROBE_START, "end": $PROBE_END },
  "versions": {
    "wasmgate": $(jq -Rn --arg c "$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO_DIR" diff --quiet HEAD -- src Cargo.toml 2>/dev/null || echo '+local changes')" '$c'),
    "wasmgate_binary": $(jq -Rn --arg c "${BINARY_LABEL:-${BINARY:-cargo build --release}}" '$c'),
    "nginx": $(jq -Rn --arg c "$(nginx -v 2>&1)" '$c'),
    "haproxy": $(jq -Rn --arg c "$(haproxy -v 2>&1 | head -n1)" '$c'),
    "wrk": $(jq -Rn --arg c "$(wrk -v 2>&1 | head -n1)" '$c'),
    "oha": $(jq -Rn --arg c "$( ((OPENLOOP)) && "$OHA" --version 2>&1 | head -n1)" '$c')
  },
  "settings": {
    "rounds": $ROUNDS, "warmup_s": $WARMUP, "duration_s": $DURATION, "connections": $CONNECTIONS,
    "openloop_rate": $( [[ "$RATE" == auto ]] && echo null || echo "$RATE"), "openloop_connections": $OPEN_CONNECTIONS,
    "wasmgate_workers": $WORKERS, "cold_code": $COLD_CODE
  },
  "load": {
    "before_wait": "$LOAD_BEFORE_WAIT", "quiet_wait": $(jq -Rn --arg c "$QUIET_OUTCOME" '$c'),
    "at_start": "$LOAD_START", "at_end": "$LOAD_END"
  },
  "compiled_code": $(for t in "${!COMPILED_CODE[@]}"; do printf '%s\t%s\n' "$t" "${COMPILED_CODE[$t]}"; done |
      jq -Rn '[inputs | split("\t") | {(.[0]): .[1]}] | add // {}')
}
EOF
python3 "$BENCH_DIR/report.py" full "$RAW" "$TMP/meta.json" "$BENCH_DIR/results/$STAMP" \
    $( ((UPDATE_README)) && echo "--readme=$BENCH_DIR/README.md")
if ((PROFILE)); then
    profile "$BENCH_DIR/results/$STAMP.profile.txt"
    log "profile summary: bench/results/$STAMP.profile.txt"
fi
log "results: bench/results/$STAMP.tsv, .json, .md"
