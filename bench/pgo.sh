#!/usr/bin/env bash
# The gateway built for the request path: optimised by the profile of its
# own requests (rustc's profile-guided optimisation), then laid out by BOLT
# from a second profile, both gathered by serving bench/run.sh's wasmgate
# targets. cargo-pgo runs the steps; this script installs what they need
# and does the training. Prints the optimised binary's path on stdout.
#
#   bench/pgo.sh [--no-install]
#   bench/run.sh --binary "$(bench/pgo.sh)" \
#       --binary-label "bench/pgo.sh's of $(git rev-parse --short HEAD)" ...
#
# Steps:
#   1. cargo pgo build: the release, instrumented (counters in every branch);
#   2. training: bench/run.sh --binary <it>, one short round of TRAIN_TARGETS;
#   3. cargo pgo bolt build --with-pgo: the release optimised by that
#      profile, linked with its relocations (-Wl,-q), then instrumented by
#      llvm-bolt;
#   4. training again, on that binary;
#   5. cargo pgo bolt optimize --with-pgo: llvm-bolt lays the binary out by
#      the second profile (hot blocks together, cold ones split off, hot
#      functions ordered by their calls);
#   6. the integration tests that run the gateway as a process, run on
#      it (WASMGATE_TEST_BINARY; cargo's own target dir and dev profile for
#      the tests themselves): a binary that fails them is not printed.
# 47 minutes on two cores to step 5, measured (bench/README.md): the
# instrumented build 19, the optimised one 12.5, and step 5 12 more,
# because cargo-pgo merges the profile again there and rustc rebuilds every
# crate whose input it is; 5 GB of memory at the builds' peak. Step 6
# takes about 3 minutes once the tests are built.
#
# Needs llvm-profdata, llvm-bolt and merge-fdata of rustc's LLVM (22; `rustc
# -vV`): Debian's llvm-22 and bolt-22, installed with apt unless
# --no-install; cargo-pgo is installed (cargo install --locked) into
# ~/.cache/wasmgate/bench-tools, as run.sh installs oha. Environment:
# CARGO_TARGET_DIR (default ~/.cache/wasmgate/target-pgo): where the builds
# and their profiles go. TRAIN_TARGETS overrides the training's targets.
set -euo pipefail

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(cd "$BENCH_DIR/.." && pwd)"
CACHE_DIR="${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/wasmgate"
TOOLS_DIR="$CACHE_DIR/bench-tools"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$CACHE_DIR/target-pgo}"
TRAIN_TARGETS="${TRAIN_TARGETS:-wasmgate-pass,wasmgate-full-pooled,wasmgate-full-pooled-nocache,wasmgate-full-pooled-many-users,wasmgate-full-per-request,wasmgate-pass-tls}"
INSTALL=1 RUN_FLAGS=()
LLVM_MAJOR=22

log() { printf '[pgo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[pgo] error: %s\n' "$*" >&2; exit 1; }

case "${1:-}" in
    "") ;;
    --no-install) INSTALL=0 RUN_FLAGS=(--no-install) ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 0 ;;
    *) die "unknown argument: $1 (bench/pgo.sh --help)" ;;
esac

# rustc's LLVM must read the profiles llvm-profdata writes: its major
# version must be the one this script installs.
rustc_llvm="$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')"
[[ "$rustc_llvm" == "$LLVM_MAJOR" ]] ||
    die "rustc is built on LLVM $rustc_llvm, this script installs LLVM $LLVM_MAJOR's tools"

LLVM_BIN="/usr/lib/llvm-$LLVM_MAJOR/bin"
if [[ ! -x "$LLVM_BIN/llvm-profdata" || ! -x "$LLVM_BIN/llvm-bolt" ]]; then
    ((INSTALL)) || die "no LLVM $LLVM_MAJOR tools in $LLVM_BIN (run without --no-install)"
    log "installing llvm-$LLVM_MAJOR and bolt-$LLVM_MAJOR (Debian packages)"
    timeout 600 apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends \
        "llvm-$LLVM_MAJOR" "bolt-$LLVM_MAJOR" >&2 || die "apt-get install llvm-$LLVM_MAJOR bolt-$LLVM_MAJOR failed"
fi
if [[ ! -x "$TOOLS_DIR/bin/cargo-pgo" ]]; then
    ((INSTALL)) || die "cargo-pgo is missing at $TOOLS_DIR/bin (run without --no-install)"
    log "installing cargo-pgo into $TOOLS_DIR (cargo install --locked; cached)"
    CARGO_TARGET_DIR="$TOOLS_DIR/target" timeout 1800 cargo install --locked --root "$TOOLS_DIR" cargo-pgo >&2 ||
        die "cargo install cargo-pgo failed"
fi
# cargo-pgo finds llvm-profdata, llvm-bolt and merge-fdata on the PATH;
# Debian's /usr/bin/llvm-profdata may be another LLVM's.
export PATH="$LLVM_BIN:$TOOLS_DIR/bin:$PATH"

# cargo-pgo builds for the host triple named explicitly, so build scripts
# and proc macros are left uninstrumented; its artifacts go there.
RELEASE_DIR="$CARGO_TARGET_DIR/$(rustc -vV | sed -n 's/^host: //p')/release"

# One short round of the training targets, served by BINARY (run.sh builds
# the filters and its upstream, not the gateway): the profile counts what
# the requests run, not how fast, so no quiet machine is needed.
train() { # BINARY
    log "training $(basename "$1") on $TRAIN_TARGETS"
    "$BENCH_DIR/run.sh" --binary "$1" "${RUN_FLAGS[@]}" --no-openloop --rounds 1 --warmup 1 --duration 5 \
        --quiet-wait 0 --targets "$TRAIN_TARGETS" >"$CARGO_TARGET_DIR/train.log" 2>&1 ||
        die "training failed: $CARGO_TARGET_DIR/train.log"
    # A training run is not a measurement: its results are not kept.
    sed -nE 's#^\[bench [0-9:]+\] results: bench/results/([^ ]+)\.tsv.*#\1#p' "$CARGO_TARGET_DIR/train.log" |
        while read -r stamp; do rm -f "$BENCH_DIR/results/$stamp".*; done
}

cd "$REPO_DIR"
mkdir -p "$CARGO_TARGET_DIR"

log "1/6 the instrumented release (cargo pgo build; target dir $CARGO_TARGET_DIR)"
timeout 3600 cargo pgo build -- --bin wasmgate >&2 || die "cargo pgo build failed"
log "2/6 the first profile"
train "$RELEASE_DIR/wasmgate"
log "3/6 the release optimised by it, instrumented by BOLT (cargo pgo bolt build --with-pgo)"
timeout 3600 cargo pgo bolt build --with-pgo -- --bin wasmgate >&2 || die "cargo pgo bolt build failed"
log "4/6 the second profile"
train "$RELEASE_DIR/wasmgate-bolt-instrumented"
log "5/6 the layout (cargo pgo bolt optimize --with-pgo)"
timeout 3600 cargo pgo bolt optimize --with-pgo -- --bin wasmgate >&2 || die "cargo pgo bolt optimize failed"
BUILT="$RELEASE_DIR/wasmgate-bolt-optimized"
[[ -x "$BUILT" ]] || die "no $BUILT"
log "built: $BUILT"
log "6/6 the integration tests on it (WASMGATE_TEST_BINARY)"
# The tests are built where `cargo test` builds them, the clone's own
# target/, not in a dir shared with other checkouts: they compile the
# clone's path in (CARGO_MANIFEST_DIR), and cargo judges freshness by
# mtimes, so a checkout whose files are older than a shared dir's test
# binary gets that binary, built for another checkout (tried on
# 2026-12-06: 178 of 301 failed, looking for filters/build.sh in a
# checkout since removed).
WASMGATE_TEST_BINARY="$BUILT" timeout 3600 env -u CARGO_TARGET_DIR cargo test --test it \
    >"$CARGO_TARGET_DIR/test.log" 2>&1 || die "the tests failed on $BUILT: $CARGO_TARGET_DIR/test.log"
log "tested: $(grep -E '^test result' "$CARGO_TARGET_DIR/test.log" | tail -n1)"
echo "$BUILT"
