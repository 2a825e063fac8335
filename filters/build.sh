#!/usr/bin/env bash
# Builds wasmgate's filter components into filters/dist/<name>.wasm.
#
# This is the one build entry point for filters; the gateway's tests call it.
# It is safe to run concurrently (an flock serializes the work) and quick when
# nothing changed (cargo's own incremental checks).
#
#   filters/build.sh                 build every filter, print the .wasm paths
#   filters/build.sh --only rust     build only the filters of one language
#   filters/build.sh --test          run the filters' unit tests on the host
#   filters/build.sh --verify        build, then check each component's world
#                                    and imports with wasm-tools
#
# Environment:
#   WASMGATE_FILTER_TARGET_DIR  cargo's target dir, kept outside the repo
#                               (default: ~/.cache/wasmgate/filters-target)
#   CARGO_BUILD_JOBS            cargo's parallelism, as usual
#
# Standard output carries only the built components' paths, one a line;
# progress and cargo's output go to standard error.
set -euo pipefail

FILTERS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIST_DIR="$FILTERS_DIR/dist"
TARGET_DIR="${WASMGATE_FILTER_TARGET_DIR:-${HOME:?HOME is not set}/.cache/wasmgate/filters-target}"
RUST_TARGET="wasm32-wasip2"
LANGUAGES=(rust)

# The interfaces a component may import: the filter contract, and what Rust's
# wasm32-wasip2 standard library pulls in.
ALLOWED_IMPORTS_RE='^(wasmgate:filter/(types|host|sink)@0\.1\.0|wasi:(cli|io|clocks|filesystem|random)/[a-z-]+@0\.2\.[0-9]+)$'

log() { printf 'filters: %s\n' "$*" >&2; }
die() { printf 'filters: error: %s\n' "$*" >&2; exit 1; }

usage() {
    sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit "${1:-0}"
}

# Fails naming every missing tool.
need_tools() {
    local missing=() tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
    done
    if ((${#missing[@]})); then
        die "missing tool(s): ${missing[*]} (PATH=$PATH)"
    fi
}

# Installs a rustup target when the toolchain lacks it.
ensure_rust_target() {
    local target="$1" sysroot
    sysroot="$(rustc --print sysroot)"
    if [[ -d "$sysroot/lib/rustlib/$target/lib" ]]; then
        return 0
    fi
    command -v rustup >/dev/null 2>&1 ||
        die "the Rust target $target is not installed and rustup is missing to install it"
    log "installing the Rust target $target"
    rustup target add "$target" >&2 || die "rustup target add $target failed"
}

host_triple() {
    rustc -vV | sed -n 's/^host: //p'
}

# The Rust filters: every crate under rust/ (each a workspace member).
rust_filters() {
    local manifest
    for manifest in "$FILTERS_DIR"/rust/*/Cargo.toml; do
        [[ -e "$manifest" ]] || continue
        basename "$(dirname "$manifest")"
    done
}

# Copies $1 to $2 atomically, and only when it changed, so a reader never sees
# a half-written component and unchanged ones keep their timestamps.
install_file() {
    local src="$1" dst="$2" tmp
    if [[ -f "$dst" ]] && cmp -s "$src" "$dst"; then
        return 0
    fi
    tmp="$(mktemp "$dst.tmp.XXXXXX")"
    cp "$src" "$tmp"
    chmod 0644 "$tmp"
    mv -f "$tmp" "$dst"
}

build_rust() {
    need_tools cargo rustc
    ensure_rust_target "$RUST_TARGET"
    log "building the Rust filters (cargo target dir $TARGET_DIR)"
    (cd "$FILTERS_DIR" && cargo build --locked --release --workspace \
        --target "$RUST_TARGET" --target-dir "$TARGET_DIR" >&2) ||
        die "cargo build of the Rust filters failed"
    local name artifact
    while read -r name; do
        artifact="$TARGET_DIR/$RUST_TARGET/release/${name//-/_}.wasm"
        [[ -f "$artifact" ]] || die "cargo built no $artifact"
        install_file "$artifact" "$DIST_DIR/$name.wasm"
        BUILT+=("$DIST_DIR/$name.wasm")
    done < <(rust_filters)
}

test_rust() {
    need_tools cargo rustc
    local host
    host="$(host_triple)"
    [[ -n "$host" ]] || die "cannot tell the host target from rustc -vV"
    log "testing the Rust filters on $host"
    (cd "$FILTERS_DIR" && cargo test --locked --workspace \
        --target "$host" --target-dir "$TARGET_DIR") ||
        die "the Rust filters' tests failed"
}

# Checks that each built component exports one filter world and imports
# nothing beyond the contract and WASI.
verify_components() {
    need_tools wasm-tools
    local wasm wit imports bad exports failed=0
    for wasm in "${BUILT[@]}"; do
        wasm-tools validate "$wasm" ||
            { log "$wasm: not a valid component"; failed=1; continue; }
        wit="$(wasm-tools component wit "$wasm")"
        exports="$(sed -n 's/^  export \(.*\);$/\1/p' <<<"$wit")"
        imports="$(sed -n 's/^  import \(.*\);$/\1/p' <<<"$wit")"
        bad="$(grep -Ev "$ALLOWED_IMPORTS_RE" <<<"$imports" || true)"
        if ! grep -Eqx 'wasmgate:filter/(authenticator|authorizer|admission|auditor)@0\.1\.0' <<<"$exports"; then
            log "$wasm: exports no filter interface (exports: $(tr '\n' ' ' <<<"$exports"))"
            failed=1
        fi
        if [[ -n "$bad" ]]; then
            log "$wasm: unexpected imports: $(tr '\n' ' ' <<<"$bad")"
            failed=1
        fi
        log "$(basename "$wasm"): exports $(tr '\n' ' ' <<<"$exports")| imports $(tr '\n' ' ' <<<"$imports")"
    done
    ((failed == 0)) || die "component verification failed"
}

main() {
    local mode=build verify=0 only=()
    while (($#)); do
        case "$1" in
            --test) mode=test ;;
            --verify) verify=1 ;;
            --only)
                (($# >= 2)) || die "--only needs a language (${LANGUAGES[*]})"
                only+=("$2")
                shift
                ;;
            --only=*) only+=("${1#--only=}") ;;
            -h | --help) usage 0 ;;
            *) log "unknown argument: $1"; usage 2 ;;
        esac
        shift
    done
    local lang
    ((${#only[@]})) || only=("${LANGUAGES[@]}")
    for lang in "${only[@]}"; do
        [[ " ${LANGUAGES[*]} " == *" $lang "* ]] || die "unknown language $lang (known: ${LANGUAGES[*]})"
    done

    need_tools flock mktemp cmp sed grep
    mkdir -p "$TARGET_DIR" "$DIST_DIR"
    # One build at a time across processes; the lock is released on exit.
    exec 9>"$TARGET_DIR/.wasmgate-filters.lock"
    flock 9

    BUILT=()
    for lang in "${only[@]}"; do
        "${mode}_${lang}"
    done
    if [[ "$mode" == build ]]; then
        ((verify == 0)) || verify_components
        log "components are in $DIST_DIR"
        printf '%s\n' "${BUILT[@]}"
    fi
}

main "$@"
