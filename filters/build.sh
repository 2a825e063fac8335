#!/usr/bin/env bash
# Builds wasmgate's filter components into filters/dist/<name>.wasm.
#
# This is the one build entry point for filters; the gateway's tests call it.
# It is safe to run concurrently (an flock serializes the work) and quick when
# nothing changed (cargo's own incremental checks for Rust; for the other
# languages, a digest of the sources, the WIT and the tool versions).
#
#   filters/build.sh                 build every filter, print the .wasm paths
#   filters/build.sh --only python   build only the filters of one language
#                                    (rust, python, js, c, wat; repeatable)
#   filters/build.sh DIR...          build only the filters in these folders
#                                    (the language is told from the files)
#   filters/build.sh --dist DIR      put the components in DIR, not filters/dist
#   filters/build.sh --test          run the filters' unit tests on the host
#   filters/build.sh --verify        build, then check each component's world
#                                    and imports with wasm-tools
#   filters/build.sh --tools         only install (or check) every language's tools
#
# Each language's tools are installed on first use, pinned, into a cache
# outside the repo (Debian packages for C with apt-get); a missing tool that
# cannot be installed stops the build with its name. Components are rebuilt
# only when their sources, the WIT or the tools changed.
#
# Environment:
#   WASMGATE_FILTER_TARGET_DIR  build outputs, kept outside the repo
#                               (default: ~/.cache/wasmgate/filters-target)
#   WASMGATE_TOOLS_DIR          the tool cache (default: ~/.cache/wasmgate/tools)
#   CARGO_BUILD_JOBS            cargo's parallelism, as usual
#
# Standard output carries only the built components' paths, one a line;
# progress and the tools' output go to standard error.
set -euo pipefail

FILTERS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
WIT_DIR="$(dirname "$FILTERS_DIR")/wit"
# The contract the Python, JavaScript and C filters are built against, the
# current one (the Rust ones name theirs in their wit_bindgen::generate!,
# through the SDK: 0.4.0 too; the compat-* fixtures an older one). wit/ also
# holds 0.3.0, 0.2.0 and 0.1.0, which the gateway still loads.
WIT_FILE="$WIT_DIR/filter-0.4.0.wit"
DIST_DIR="$FILTERS_DIR/dist"
# The guards every Python and JavaScript component is built with (a raised
# exception or thrown value is the filter's error outcome, not a trap).
RUNTIME_DIR="$FILTERS_DIR/runtime"
# Where build.sh was started: error messages name files relative to it.
CALLER_DIR="$PWD"
TARGET_DIR="${WASMGATE_FILTER_TARGET_DIR:-${HOME:?HOME is not set}/.cache/wasmgate/filters-target}"
TOOLS_DIR="${WASMGATE_TOOLS_DIR:-$HOME/.cache/wasmgate/tools}"
RUST_TARGET="wasm32-wasip2"
LANGUAGES=(rust python js c wat)

# Pinned tool versions. Bumping one rebuilds that language's components.
COMPONENTIZE_PY_VERSION=0.25.1        # PyPI componentize-py
COMPONENTIZE_JS_VERSION=0.23.0        # npm @bytecodealliance/componentize-js (lock: tools/componentize-js)
WASM_TOOLS_VERSION=1.258.0            # crates.io wasm-tools
WIT_BINDGEN_VERSION=0.61.1            # crates.io wit-bindgen-cli (the Rust filters use wit-bindgen 0.61)
WASI_ADAPTER_VERSION=48.0.8           # crates.io wasi-preview1-component-adapter-provider = the gateway's wasmtime
C_APT_PACKAGES=(clang lld wasi-libc libclang-rt-dev-wasm32)
# WASI features the JavaScript engine would import and the host does not link.
COMPONENTIZE_JS_DISABLE=(http fetch-event)

# The interfaces a component may import: the filter contract (0.4.0, 0.3.0,
# 0.2.0, or 0.1.0, which had no cache), and the WASI
# 0.2 interfaces guest runtimes pull in. The host links all of WASI 0.2 and
# grants none of it but clocks and random unless a filter's `wasi` table does
# (never the network).
ALLOWED_IMPORTS_RE='^(wasmgate:filter/(types|host|sink|cache)@0\.[234]\.0|wasmgate:filter/(types|host|sink)@0\.1\.0|wasi:(cli|io|clocks|filesystem|random|sockets)/[a-z-]+@0\.2\.[0-9]+)$'

log() { printf 'filters: %s\n' "$*" >&2; }
die() { printf 'filters: error: %s\n' "$*" >&2; exit 1; }

usage() {
    awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}" >&2
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

# The in-tree Rust crates by package name: every crate under rust/ (each a
# workspace member, by the glob in Cargo.toml), the filters and the
# libraries they share.
rust_crates() {
    local manifest
    for manifest in "$FILTERS_DIR"/rust/*/Cargo.toml; do
        [[ -e "$manifest" ]] || continue
        # The package's name, which Cargo.lock records (the SDK's folder,
        # rust/sdk, holds the package wasmgate-filter).
        awk '/^\[/ { in_package = ($0 == "[package]") }
             in_package && /^name *=/ { gsub(/^name *= *"|".*$/, ""); print; exit }' "$manifest"
    done
}

# Whether the crate of manifest $1 is a component: a cdylib. A library (the
# SDK in rust/sdk, rust/faults) is built only as the filters' dependency.
is_cdylib() {
    grep -Eq '^[[:space:]]*crate-type[[:space:]]*=[[:space:]]*\[[^]]*"cdylib"' "$1"
}

# Installs the Debian packages among "$@" that are missing, or fails naming
# them when this process cannot (not root, no apt-get).
apt_ensure() {
    local missing=() pkg
    command -v dpkg-query >/dev/null 2>&1 ||
        die "missing: $* (Debian packages, and this system has no dpkg to install them with)"
    for pkg in "$@"; do
        [[ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null)" == "install ok installed" ]] || missing+=("$pkg")
    done
    ((${#missing[@]})) || return 0
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        die "missing Debian package(s): ${missing[*]}; install them with: sudo apt-get install -y ${missing[*]}"
    fi
    log "installing Debian package(s) ${missing[*]} (apt-get update, then apt-get install)"
    local apt=(apt-get -o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0 -q)
    "${apt[@]}" update >&2 || die "apt-get update failed: cannot install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive "${apt[@]}" install -y --no-install-recommends "${missing[@]}" >&2 ||
        die "apt-get install ${missing[*]} failed"
}

# Runs `cargo install` of a pinned crate into the tool cache, unless its
# binary there already reports that version. Sets nothing; prints nothing.
cargo_tool() {
    local crate="$1" version="$2" binary="$3" features="$4"
    local bin="$TOOLS_DIR/cargo/bin/$binary"
    if [[ -x "$bin" && "$("$bin" --version 2>/dev/null)" == *" $version" ]]; then
        return 0
    fi
    need_tools cargo
    log "installing $crate $version with cargo install --locked into $TOOLS_DIR/cargo (once; a few minutes)"
    # These tools handle small inputs: a light optimisation builds them in
    # half the time, and a shared target dir compiles their common crates once.
    CARGO_PROFILE_RELEASE_OPT_LEVEL=1 CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=256 \
        CARGO_PROFILE_RELEASE_DEBUG=false \
        cargo install --locked --quiet --root "$TOOLS_DIR/cargo" --target-dir "$TOOLS_DIR/cargo-target" \
        --no-default-features --features "$features" "$crate@$version" >&2 ||
        die "cargo install $crate@$version failed (is crates.io reachable?)"
    [[ "$("$bin" --version 2>/dev/null)" == *" $version" ]] ||
        die "cargo installed $bin, but it does not report version $version"
}

ensure_wasm_tools() {
    cargo_tool wasm-tools "$WASM_TOOLS_VERSION" wasm-tools component,validate,print,parse,metadata
    WASM_TOOLS="$TOOLS_DIR/cargo/bin/wasm-tools"
}

# Path $1 as the author typed it: relative to where build.sh was started
# when it is under it.
shown_path() {
    local path="$1"
    [[ "$path" == "$CALLER_DIR/"* ]] && path="${path#"$CALLER_DIR/"}"
    printf '%s\n' "$path"
}

# A digest of runtime file $1, for a build key.
runtime_digest() {
    sha256sum "$RUNTIME_DIR/$1" | cut -c1-16
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

# Which language the filter folder $1 is written in, from its files; empty
# when it is no filter folder.
dir_language() {
    local dir="$1"
    if [[ -f "$dir/Cargo.toml" ]]; then
        if is_cdylib "$dir/Cargo.toml"; then echo rust; fi
    elif [[ -f "$dir/app.py" ]]; then
        echo python
    elif [[ -f "$dir/filter.js" ]]; then
        echo js
    elif [[ -f "$dir/filter.c" ]]; then
        echo c
    elif [[ -f "$dir/component.wat" ]]; then
        echo wat
    fi
}

# The filter folders of language $1: the ones named on the command line, else
# every folder under filters/$1/ that holds such a filter.
filter_dirs() {
    local lang="$1" dir
    if ((${#SELECTED_DIRS[@]})); then
        for dir in "${SELECTED_DIRS[@]}"; do
            [[ "$(dir_language "$dir")" != "$lang" ]] || printf '%s\n' "$dir"
        done
        return 0
    fi
    for dir in "$FILTERS_DIR/$lang"/*/; do
        dir="${dir%/}"
        [[ "$(dir_language "$dir")" != "$lang" ]] || printf '%s\n' "$dir"
    done
}

# The C sources of a filter folder that are part of the component: every .c
# but the host tests (test_*.c).
c_sources() {
    local file
    for file in "$1"/*.c; do
        [[ -e "$file" && "$(basename "$file")" != test_* ]] && printf '%s\n' "$file"
    done
    return 0
}

# The WIT world a python/js/c filter folder targets, told from the one
# export its code defines (the code cannot target another one anyway): the
# kind's WIT name (`json-auditor`) from its Python class (`JsonAuditor`),
# JavaScript export (`jsonAuditor`) or C export function
# (`exports_wasmgate_filter_json_auditor_audit_json_lines`).
filter_world() {
    local lang="$1" dir="$2" kinds
    case "$lang" in
        python)
            kinds="$(grep -Eo '^class +(Authenticator|Authorizer|Admission|Auditor|JsonAuditor) *\(' "$dir/app.py" |
                sed -E 's/^class +([A-Za-z]+).*/\1/; s/([a-z])([A-Z])/\1-\2/g' | tr 'A-Z' 'a-z' | sort -u || true)"
            ;;
        js)
            kinds="$(grep -Eo '^export +(const|let|var|function) +(authenticator|authorizer|admission|auditor|jsonAuditor)([^A-Za-z0-9_$]|$)' \
                "$dir/filter.js" | sed -E 's/^export +[a-z]+ +([A-Za-z]+).*/\1/; s/([a-z])([A-Z])/\1-\2/g' |
                tr 'A-Z' 'a-z' | sort -u || true)"
            ;;
        c)
            kinds="$(c_sources "$dir" | xargs cat |
                grep -Eo 'exports_wasmgate_filter_(authenticator_authenticate|authorizer_authorize|admission_admit|auditor_audit(_batch)?|json_auditor_audit_json_lines) *\(' |
                sed -E 's/^exports_wasmgate_filter_(json_auditor|[a-z]+)_.*/\1/; s/_/-/g' | sort -u || true)"
            ;;
    esac
    if [[ "$(grep -c . <<<"$kinds")" != 1 ]]; then
        local expected
        case "$lang" in
            python) expected="one class Authenticator, Authorizer, Admission, Auditor or JsonAuditor in app.py" ;;
            js) expected="one 'export const' authenticator, authorizer, admission, auditor or jsonAuditor in filter.js" ;;
            c) expected="one definition of exports_wasmgate_filter_<kind>_<function> in its .c files (<kind> authenticator, authorizer, admission, auditor or json_auditor)" ;;
        esac
        die "$dir: cannot tell which filter world it targets: expected $expected (found: ${kinds:-none})"
    fi
    printf '%s-filter\n' "$kinds"
}

# Kind $1's WIT name (`json-auditor`) as Python names its class
# (`JsonAuditor`, $2 = class) or its guard (`json_auditor`, $2 = function),
# or as JavaScript names its export (`jsonAuditor`, $2 = export).
kind_name() {
    local kind="$1" form="$2" part out=""
    case "$form" in
        function) printf '%s\n' "${kind//-/_}" ;;
        class | export)
            for part in ${kind//-/ }; do out+="${part^}"; done
            [[ "$form" == class ]] || out="${out,}"
            printf '%s\n' "$out"
            ;;
    esac
}

# The files of filter folder $2 (language $1) a component is built from,
# relative to it: not its README, tests or try manifests.
source_files() {
    case "$1" in
        python) find . -type f -name '*.py' ! -name 'test_*.py' ! -path '*/__pycache__/*' ! -path './dist/*' ;;
        js) find . -type f \( -name '*.js' -o -name '*.mjs' -o -name 'package.json' \) ! -name '*.test.js' \
            ! -path './node_modules/*' ! -path './dist/*' ;;
        c) find . -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' \) ! -name 'test_*.c' ;;
        wat) find . -maxdepth 1 -type f -name 'component.wat' ;;
    esac
}

# A digest of everything a component is built from: the sources of filter
# folder $2 (language $1), the WIT and which of its files is the contract
# (the files alone do not say which version a component targets), and the
# further words given (tool versions, the world).
build_key() {
    local lang="$1" dir="$2"
    shift 2
    {
        printf '%s\n' "contract ${WIT_FILE#"$WIT_DIR/"}" "$@"
        (cd "$dir" && source_files "$lang" | LC_ALL=C sort | tr '\n' '\0' | xargs -0 -r sha256sum)
        (cd "$WIT_DIR" && find . -type f -name '*.wit' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum)
    } | sha256sum | cut -c1-24
}

# Builds the component of filter folder $2 (language $1) with the command
# "${@:4}" run in a scratch folder, which must write out.wasm there, unless
# the build output for key $3 exists; then installs it into dist.
build_cached() {
    local lang="$1" dir="$2" key="$3" name out work
    shift 3
    name="$(basename "$dir")"
    out="$TARGET_DIR/$lang/$name-$key.wasm"
    if [[ ! -f "$out" ]]; then
        mkdir -p "$TARGET_DIR/$lang"
        work="$(mktemp -d "$TARGET_DIR/$lang/.work.XXXXXX")"
        if ! (cd "$work" && "$@" >&2) || [[ ! -s "$work/out.wasm" ]]; then
            rm -rf "$work"
            die "building $(shown_path "$dir") failed (see above)"
        fi
        rm -f "$TARGET_DIR/$lang/$name"-*.wasm
        mv "$work/out.wasm" "$out"
        rm -rf "$work"
    fi
    install_file "$out" "$DEST_DIR/$name.wasm"
    BUILT+=("$DEST_DIR/$name.wasm")
}

# ---------------------------------------------------------------------------
# Rust: cargo, wasm32-wasip2
# ---------------------------------------------------------------------------

# Records workspace members missing from Cargo.lock (a crate just added under
# rust/), so the --locked build below accepts them. Offline first: a new
# crate usually uses only dependencies the lockfile already has.
ensure_rust_lock() {
    local name missing=()
    while read -r name; do
        grep -qx "name = \"$name\"" "$FILTERS_DIR/Cargo.lock" || missing+=("$name")
    done < <(rust_crates)
    ((${#missing[@]})) || return 0
    log "recording the new crate(s) ${missing[*]} in filters/Cargo.lock (commit it)"
    (cd "$FILTERS_DIR" && { cargo update --workspace --offline >&2 2>/dev/null || cargo update --workspace >&2; }) ||
        die "cargo update --workspace failed: cannot record ${missing[*]} in filters/Cargo.lock"
}

# Other checkouts of the repo build into the same target dir, and cargo
# tells a workspace crate's builds apart by its path within the workspace,
# not by the checkout: after another checkout's build, this one's crates
# count as built (from the other's sources) and it would install the other's
# components. So when another checkout built last, the workspace's crates $@
# (the filters and the libraries they share; crates.io dependencies stay)
# are cleaned first, and this checkout is recorded as the one they are of.
claim_rust_outputs() {
    local owner="$TARGET_DIR/$RUST_TARGET/release/.wasmgate-checkout" crate packages=()
    [[ "$(cat "$owner" 2>/dev/null)" == "$FILTERS_DIR" ]] && return 0
    for crate in "$@"; do packages+=(-p "$crate"); done
    (cd "$FILTERS_DIR" && cargo clean --release --target "$RUST_TARGET" \
        --target-dir "$TARGET_DIR" "${packages[@]}" >&2 2>/dev/null) ||
        die "cargo clean of the Rust filters failed"
    mkdir -p "$(dirname "$owner")"
    printf '%s\n' "$FILTERS_DIR" >"$owner"
}

build_rust() {
    need_tools cargo rustc
    ensure_rust_target "$RUST_TARGET"
    local dir name artifact in_tree=() standalone=() packages=()
    while read -r dir; do
        if [[ "$(cd "$dir/.." && pwd)" == "$FILTERS_DIR/rust" ]]; then
            in_tree+=("$(basename "$dir")")
        else
            standalone+=("$dir")
        fi
    done < <(filter_dirs rust)
    if ((${#in_tree[@]})); then
        ensure_rust_lock
        if ((${#SELECTED_DIRS[@]})); then
            for name in "${in_tree[@]}"; do packages+=(-p "$name"); done
        else
            packages=(--workspace)
        fi
        log "building the Rust filters (cargo target dir $TARGET_DIR)"
        local crates
        mapfile -t crates < <(rust_crates)
        claim_rust_outputs "${crates[@]}"
        (cd "$FILTERS_DIR" && cargo build --locked --release "${packages[@]}" \
            --target "$RUST_TARGET" --target-dir "$TARGET_DIR" >&2) ||
            die "cargo build of the Rust filters failed"
        for name in "${in_tree[@]}"; do
            artifact="$TARGET_DIR/$RUST_TARGET/release/${name//-/_}.wasm"
            [[ -f "$artifact" ]] || die "cargo built no $artifact (is the package named $name?)"
            install_file "$artifact" "$DEST_DIR/$name.wasm"
            BUILT+=("$DEST_DIR/$name.wasm")
        done
    fi
    # A crate outside filters/rust/ is its own workspace, with its own target dir.
    for dir in "${standalone[@]}"; do
        name="$(basename "$dir")"
        log "building the Rust filter $dir"
        cargo build --release --manifest-path "$dir/Cargo.toml" --target "$RUST_TARGET" \
            --target-dir "$TARGET_DIR/standalone" >&2 || die "cargo build of $dir failed"
        artifact="$TARGET_DIR/standalone/$RUST_TARGET/release/${name//-/_}.wasm"
        [[ -f "$artifact" ]] || die "cargo built no $artifact (is the package named $name?)"
        install_file "$artifact" "$DEST_DIR/$name.wasm"
        BUILT+=("$DEST_DIR/$name.wasm")
    done
}

test_rust() {
    need_tools cargo rustc
    local host
    host="$(host_triple)"
    [[ -n "$host" ]] || die "cannot tell the host target from rustc -vV"
    ensure_rust_lock
    log "testing the Rust filters on $host"
    (cd "$FILTERS_DIR" && cargo test --locked --workspace \
        --target "$host" --target-dir "$TARGET_DIR") ||
        die "the Rust filters' tests failed"
}

tools_rust() {
    need_tools cargo rustc
    ensure_rust_target "$RUST_TARGET"
}

# ---------------------------------------------------------------------------
# Python: componentize-py, in a venv in the tool cache
# ---------------------------------------------------------------------------

tools_python() {
    local venv="$TOOLS_DIR/componentize-py-$COMPONENTIZE_PY_VERSION"
    COMPONENTIZE_PY="$venv/bin/componentize-py"
    [[ -f "$venv/.installed" && -x "$COMPONENTIZE_PY" ]] && return 0
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
        apt_ensure python3 python3-venv
    fi
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1 ||
        die "python3 cannot make a venv (missing: the venv/ensurepip modules; Debian: python3-venv)"
    log "installing componentize-py $COMPONENTIZE_PY_VERSION into $venv (once)"
    rm -rf "$TOOLS_DIR"/componentize-py-* # other pins' venvs
    python3 -m venv "$venv" >&2 || die "python3 -m venv $venv failed"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
        "componentize-py==$COMPONENTIZE_PY_VERSION" >&2 ||
        die "pip install componentize-py==$COMPONENTIZE_PY_VERSION failed (is PyPI reachable?)"
    [[ "$("$COMPONENTIZE_PY" --version 2>/dev/null)" == *" $COMPONENTIZE_PY_VERSION" ]] ||
        die "$COMPONENTIZE_PY does not report version $COMPONENTIZE_PY_VERSION"
    touch "$venv/.installed"
}

# The entry module of a Python component: the filter's app.py, its class
# exported through the guard of world $1 (see runtime/wasmgate_guard.py).
python_entry() {
    local kind="$1"
    printf '"""Generated by filters/build.sh: app.py, its export guarded (wasmgate_guard.py)."""\n'
    local class
    class="$(kind_name "$kind" class)"
    printf 'import app\nimport wasmgate_guard\n\n%s = wasmgate_guard.%s(app.%s)\n' "$class" "$(kind_name "$kind" function)" "$class"
}

# Reports the Python syntax errors of filter folder $1 as file:line:column,
# with the line and a caret; fails when there are any. Run by the host's
# python3, only once componentize-py failed on a syntax error (so a host
# Python older than the component's never rejects a valid filter).
python_syntax_errors() {
    local dir="$1" file args=()
    while read -r file; do
        args+=("$dir/$file" "$(shown_path "$dir/${file#./}")")
    done < <(cd "$dir" && source_files python | LC_ALL=C sort)
    ! python3 - "${args[@]}" <<'PY'
import sys

found = False
for path, shown in zip(sys.argv[1::2], sys.argv[2::2]):
    with open(path, encoding="utf-8", errors="replace") as source:
        text = source.read()
    try:
        compile(text, shown, "exec", dont_inherit=True)
    except SyntaxError as error:
        found = True
        line, column = error.lineno or 1, error.offset or 1
        print(f"{shown}:{line}:{column}: {type(error).__name__}: {error.msg}")
        if error.text:
            code = error.text.rstrip("\n")
            pad = "".join(c if c == "\t" else " " for c in code[: column - 1])
            print(f"    {code}\n    {pad}^")
    except ValueError as error:
        found = True
        print(f"{shown}: {error}")
sys.exit(1 if found else 0)
PY
}

# What the author needs from componentize-py's output $2 on filter folder
# $1: the Python traceback of their code, with their paths (the component
# sees the sources as /0/), without the tool's own frames, the generated
# entry module, or the repeated "Caused by".
python_failure() {
    local dir="$1" log="$2"
    if grep -Eq '^(Syntax|Indentation|Tab)Error|(Syntax|Indentation|Tab)Error: ' "$log" &&
        python_syntax_errors "$dir" >&2; then
        return 0
    fi
    awk -v shown="$(shown_path "$dir")/" '
        /^Traceback \(most recent call last\):$/ && !started { wrapper = 1; next }
        wrapper && /^AssertionError: / { sub(/^AssertionError: /, ""); wrapper = 0; started = 1 }
        wrapper { next }
        /^Caused by:$/ || /^Stack backtrace:$/ { exit }
        /^  File "\/0\/wasmgate_(entry|guard)\.py"/ { skip = 1; next }
        skip && /^    / { next }
        { skip = 0; gsub(/"\/0\//, "\"" shown); print }
    ' "$log" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >&2
}

# Run in build_cached's scratch folder. componentize-py imports the module
# with a native CPython, which writes __pycache__ beside the sources: it gets
# a copy of them, with the guard and the entry module.
componentize_python() {
    local dir="$1" world="$2"
    mkdir src && (cd "$dir" && source_files python | tar -cf - -T -) | (cd src && tar -xf -) &&
        cp "$RUNTIME_DIR/wasmgate_guard.py" src/ &&
        python_entry "${world%-filter}" >src/wasmgate_entry.py || return 1
    # No Rust backtrace of the tool itself: the author needs their traceback.
    RUST_LIB_BACKTRACE=0 "$COMPONENTIZE_PY" --quiet -d "$WIT_FILE" -w "$world" componentize wasmgate_entry \
        -p src -o out.wasm 2>tool.log || {
        python_failure "$dir" tool.log
        return 1
    }
    cat tool.log
}

build_python() {
    local dir world
    [[ -n "$(filter_dirs python)" ]] || return 0
    tools_python
    while read -r dir; do
        world="$(filter_world python "$dir")"
        log "python: $(basename "$dir") ($world)"
        build_cached python "$dir" \
            "$(build_key python "$dir" "componentize-py $COMPONENTIZE_PY_VERSION" "$world" \
                "guard $(runtime_digest wasmgate_guard.py)")" \
            componentize_python "$dir" "$world"
    done < <(filter_dirs python)
}

# Each filter's pure-Python unit tests (test_*.py, importing no bindings),
# with the system's python3.
test_python() {
    local dir
    while read -r dir; do
        compgen -G "$dir/test_*.py" >/dev/null || continue
        need_tools python3
        log "testing the Python filter $(basename "$dir")"
        (cd "$dir" && PYTHONDONTWRITEBYTECODE=1 python3 -m unittest discover -s . -p 'test_*.py' >&2) ||
            die "the tests of $dir failed"
    done < <(filter_dirs python)
}

# ---------------------------------------------------------------------------
# JavaScript: componentize-js (its own CLI; `jco componentize` 1.35 is broken)
# ---------------------------------------------------------------------------

tools_js() {
    local pinned="$FILTERS_DIR/tools/componentize-js" stamp dir
    stamp="$(cat "$pinned/package.json" "$pinned/package-lock.json" | sha256sum | cut -c1-12)"
    dir="$TOOLS_DIR/componentize-js-$COMPONENTIZE_JS_VERSION-$stamp"
    COMPONENTIZE_JS="$dir/node_modules/.bin/componentize-js"
    [[ -f "$dir/.installed" && -x "$COMPONENTIZE_JS" ]] && return 0
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
        apt_ensure nodejs npm
    fi
    need_tools node npm
    local major
    major="$(node -p 'process.versions.node.split(".")[0]')"
    ((major >= 18)) || die "componentize-js needs Node.js 18 or later; node is $(node --version)"
    log "installing componentize-js $COMPONENTIZE_JS_VERSION into $dir with npm ci (once)"
    rm -rf "$TOOLS_DIR"/componentize-js-* # other pins' installs
    mkdir -p "$dir"
    cp "$pinned/package.json" "$pinned/package-lock.json" "$dir/"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) ||
        die "npm ci of componentize-js $COMPONENTIZE_JS_VERSION failed (is the npm registry reachable?)"
    [[ "$("$COMPONENTIZE_JS" --version 2>&1)" == "$COMPONENTIZE_JS_VERSION" ]] ||
        die "$COMPONENTIZE_JS does not run or is not version $COMPONENTIZE_JS_VERSION: $("$COMPONENTIZE_JS" --version 2>&1 | tail -n 3)"
    touch "$dir/.installed"
}

# The entry module of a JavaScript component: the filter's filter.js, its
# export wrapped by the guard of world $1 (see runtime/wasmgate-guard.js).
js_entry() {
    local kind
    kind="$(kind_name "$1" export)"
    printf '// Generated by filters/build.sh: filter.js, its export guarded (wasmgate-guard.js).\n'
    printf "import { %s as implementation } from './filter.js';\n" "$kind"
    printf "import { guard } from './wasmgate-guard.js';\n\n"
    printf "export const %s = guard('%s', implementation);\n" "$kind" "$kind"
}

# Reports the JavaScript syntax errors of filter folder $1 as
# file:line:column, with the line and a caret; fails when there are any.
# `node --check` parses each source as an ES module (a copy named .mjs: a
# filter is one whatever its package.json says).
js_syntax_errors() {
    local dir="$1" file check out line code caret before column message found=0
    check="$(mktemp -d)"
    while read -r file; do
        [[ "$file" == *.js || "$file" == *.mjs ]] || continue
        cp "$dir/$file" "$check/source.mjs"
        out="$(node --check "$check/source.mjs" 2>&1)" && continue
        found=1
        line="$(sed -n '1s/.*:\([0-9][0-9]*\)$/\1/p' <<<"$out")"
        code="$(sed -n 2p <<<"$out")"
        caret="$(sed -n 3p <<<"$out")"
        column=1
        if [[ "$caret" == *^* ]]; then
            before="${caret%%^*}"
            column=$((${#before} + 1))
        fi
        message="$(grep -m 1 -E '^[A-Za-z]*Error: ' <<<"$out" || printf '%s' "$out" | sed -n 1p)"
        printf '%s:%s:%s: %s\n' "$(shown_path "$dir/${file#./}")" "${line:-1}" "$column" "$message"
        [[ -z "$code" ]] || printf '    %s\n    %s\n' "$code" "$caret"
    done < <(cd "$dir" && source_files js | LC_ALL=C sort)
    rm -rf "$check"
    ((found))
}

# What the author needs from componentize-js's output $2 on filter folder
# $1: their syntax errors as file:line:column, else the tool's message
# without its Node.js stack.
js_failure() {
    local dir="$1" log="$2"
    if js_syntax_errors "$dir" >&2; then
        return 0
    fi
    grep -Ev '^    at .*(node_modules|node:internal)|^Node\.js v[0-9]|^file:///.*node_modules/.*:[0-9]+$' "$log" |
        sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >&2
}

# Run in build_cached's scratch folder: a copy of the sources, the guard and
# the entry module, componentized together.
componentize_js() {
    local dir="$1" world="$2"
    (cd "$dir" && source_files js | tar -cf - -T -) | tar -xf - &&
        cp "$RUNTIME_DIR/wasmgate-guard.js" . &&
        js_entry "${world%-filter}" >wasmgate-entry.js || return 1
    "$COMPONENTIZE_JS" wasmgate-entry.js -w "$WIT_FILE" -n "$world" -d "${COMPONENTIZE_JS_DISABLE[@]}" \
        -o out.wasm >tool.log 2>&1 || {
        js_failure "$dir" tool.log
        return 1
    }
    cat tool.log
}

build_js() {
    local dir world
    [[ -n "$(filter_dirs js)" ]] || return 0
    tools_js
    while read -r dir; do
        world="$(filter_world js "$dir")"
        log "js: $(basename "$dir") ($world)"
        build_cached js "$dir" \
            "$(build_key js "$dir" "componentize-js $COMPONENTIZE_JS_VERSION" "$world" "${COMPONENTIZE_JS_DISABLE[*]}" \
                "guard $(runtime_digest wasmgate-guard.js)")" \
            componentize_js "$dir" "$world"
    done < <(filter_dirs js)
}

# Each filter's unit tests (*.test.js, importing no bindings), with node's
# own test runner.
test_js() {
    local dir tests
    while read -r dir; do
        tests=("$dir"/*.test.js)
        [[ -e "${tests[0]}" ]] || continue
        need_tools node
        log "testing the JavaScript filter $(basename "$dir")"
        node --test "${tests[@]}" >&2 || die "the tests of $dir failed"
    done < <(filter_dirs js)
}

# ---------------------------------------------------------------------------
# C: Debian's clang and wasi-libc, wit-bindgen c, wasm-tools component new
# with the WASI preview-1 adapter of the gateway's wasmtime
# ---------------------------------------------------------------------------

CLANG="${WASMGATE_CLANG:-clang}"

# Compiles and links an empty reactor for wasm32-wasi: proves clang, wasm-ld,
# wasi-libc and the wasm32 builtins are all there.
c_probe() {
    local work="$1"
    printf 'int wasmgate_probe(int x) { return x + 1; }\n' >"$work/probe.c"
    "$CLANG" --target=wasm32-wasi -mexec-model=reactor -O2 -o "$work/probe.wasm" "$work/probe.c" >"$work/probe.log" 2>&1
}

ensure_wasi_adapter() {
    local dir="$TOOLS_DIR/wasi-adapter-$WASI_ADAPTER_VERSION" crate="wasi-preview1-component-adapter-provider"
    WASI_ADAPTER="$dir/wasi_snapshot_preview1.reactor.wasm"
    [[ -f "$WASI_ADAPTER" ]] && return 0
    need_tools cargo
    log "fetching $crate $WASI_ADAPTER_VERSION for its WASI preview-1 reactor adapter (once)"
    mkdir -p "$dir/helper/src"
    cat >"$dir/helper/Cargo.toml" <<TOML
[package]
name = "wasmgate-wasi-adapter"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$crate = "=$WASI_ADAPTER_VERSION"

[workspace]
TOML
    : >"$dir/helper/src/lib.rs"
    (cd "$dir/helper" && cargo fetch --quiet >&2) || die "cargo fetch of $crate $WASI_ADAPTER_VERSION failed (is crates.io reachable?)"
    local manifest
    manifest="$(cd "$dir/helper" && cargo metadata --format-version 1 --offline 2>/dev/null |
        grep -o "\"manifest_path\":\"[^\"]*/$crate-$WASI_ADAPTER_VERSION/Cargo.toml\"" |
        sed -n '1{s/^"manifest_path":"//; s/"$//; p}')"
    local source="${manifest%/Cargo.toml}/artefacts/wasi_snapshot_preview1.reactor.wasm"
    [[ -n "$manifest" && -f "$source" ]] || die "cannot find the reactor adapter in $crate $WASI_ADAPTER_VERSION (looked at ${source})"
    install_file "$source" "$WASI_ADAPTER"
}

tools_c() {
    local work
    work="$(mktemp -d)"
    if ! c_probe "$work"; then
        apt_ensure "${C_APT_PACKAGES[@]}"
        c_probe "$work" || {
            cat "$work/probe.log" >&2
            rm -rf "$work"
            die "$CLANG cannot build for wasm32-wasi (needs clang, wasm-ld, wasi-libc and the wasm32 compiler-rt builtins: Debian packages ${C_APT_PACKAGES[*]})"
        }
    fi
    rm -rf "$work"
    cargo_tool wit-bindgen-cli "$WIT_BINDGEN_VERSION" wit-bindgen c
    WIT_BINDGEN="$TOOLS_DIR/cargo/bin/wit-bindgen"
    ensure_wasm_tools
    ensure_wasi_adapter
}

# Run in build_cached's scratch folder: bindings, compile, link, componentize.
compile_c_filter() {
    local dir="$1" world="$2" sources
    mapfile -t sources < <(c_sources "$dir")
    { "$WIT_BINDGEN" c "$WIT_FILE" --world "$world" --out-dir gen >bindgen.log 2>&1 || { cat bindgen.log; false; }; } &&
        "$CLANG" --target=wasm32-wasi -mexec-model=reactor -O2 -Wall -Wextra -Igen -I"$dir" \
            -o core.wasm "${sources[@]}" gen/*.c gen/*_component_type.o -Wl,--strip-debug &&
        "$WASM_TOOLS" component new core.wasm --adapt "wasi_snapshot_preview1=$WASI_ADAPTER" -o out.wasm
}

build_c() {
    local dir world
    [[ -n "$(filter_dirs c)" ]] || return 0
    tools_c
    while read -r dir; do
        world="$(filter_world c "$dir")"
        log "c: $(basename "$dir") ($world)"
        build_cached c "$dir" \
            "$(build_key c "$dir" "$("$CLANG" --version | sed -n 1p)" "wit-bindgen $WIT_BINDGEN_VERSION" \
                "wasm-tools $WASM_TOOLS_VERSION" "adapter $WASI_ADAPTER_VERSION" "$world")" \
            compile_c_filter "$dir" "$world"
    done < <(filter_dirs c)
}

# Each filter's host tests: its sources but filter.c (the WIT glue) and its
# test_*.c, compiled with the system's cc and run.
test_c() {
    local dir name sources tests
    while read -r dir; do
        tests=("$dir"/test_*.c)
        [[ -e "${tests[0]}" ]] || continue
        need_tools cc
        name="$(basename "$dir")"
        mapfile -t sources < <(c_sources "$dir" | grep -v '/filter\.c$')
        log "testing the C filter $name"
        mkdir -p "$TARGET_DIR/c"
        cc -std=c11 -Wall -Wextra -O1 -I"$dir" -o "$TARGET_DIR/c/test-$name" "${sources[@]}" "${tests[@]}" >&2 &&
            "$TARGET_DIR/c/test-$name" >&2 || die "the tests of $dir failed"
    done < <(filter_dirs c)
}

# ---------------------------------------------------------------------------
# WAT: a component written by hand in the WebAssembly text format
# (component.wat), parsed and validated with wasm-tools. The test fixtures
# that need what no language toolchain makes on request (several core
# instances with their own memories, a table grown at will) are written so.
# ---------------------------------------------------------------------------

# Run in build_cached's scratch folder.
parse_wat() {
    "$WASM_TOOLS" parse "$1/component.wat" -o out.wasm && "$WASM_TOOLS" validate out.wasm
}

build_wat() {
    local dir
    [[ -n "$(filter_dirs wat)" ]] || return 0
    tools_wat
    while read -r dir; do
        log "wat: $(basename "$dir")"
        build_cached wat "$dir" "$(build_key wat "$dir" "wasm-tools $WASM_TOOLS_VERSION")" parse_wat "$dir"
    done < <(filter_dirs wat)
}

tools_wat() {
    ensure_wasm_tools
}

# A component in WAT has no unit tests of its own: the gateway's tests run it.
test_wat() { :; }

# ---------------------------------------------------------------------------

# Checks that each built component exports one filter interface and imports
# nothing beyond the contract and WASI.
verify_components() {
    ensure_wasm_tools
    local wasm wit imports bad exports failed=0
    for wasm in "${BUILT[@]}"; do
        "$WASM_TOOLS" validate "$wasm" ||
            { log "$wasm: not a valid component"; failed=1; continue; }
        wit="$("$WASM_TOOLS" component wit "$wasm")"
        exports="$(sed -n 's/^  export \(.*\);$/\1/p' <<<"$wit")"
        imports="$(sed -n 's/^  import \(.*\);$/\1/p' <<<"$wit")"
        bad="$(grep -Ev "$ALLOWED_IMPORTS_RE" <<<"$imports" || true)"
        if ! grep -Eqx 'wasmgate:filter/(authenticator|authorizer|admission|auditor)@0\.[1234]\.0|wasmgate:filter/json-auditor@0\.4\.0' <<<"$exports"; then
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
    local mode=build verify=0 only=() dir lang
    SELECTED_DIRS=()
    DEST_DIR="$DIST_DIR"
    while (($#)); do
        case "$1" in
            --test) mode=test ;;
            --tools) mode=tools ;;
            --verify) verify=1 ;;
            --only)
                (($# >= 2)) || die "--only needs a language (${LANGUAGES[*]})"
                only+=("$2")
                shift
                ;;
            --only=*) only+=("${1#--only=}") ;;
            --dist)
                (($# >= 2)) || die "--dist needs a folder"
                DEST_DIR="$2"
                shift
                ;;
            --dist=*) DEST_DIR="${1#--dist=}" ;;
            -h | --help) usage 0 ;;
            -*) log "unknown argument: $1"; usage 2 ;;
            *)
                [[ -d "$1" ]] || die "$1 is not a folder"
                dir="$(cd "$1" && pwd)"
                [[ -n "$(dir_language "$dir")" ]] ||
                    die "$1 holds no filter (Cargo.toml of a cdylib, app.py, filter.js or filter.c)"
                SELECTED_DIRS+=("$dir")
                ;;
        esac
        shift
    done
    if ((${#only[@]} == 0)); then
        if ((${#SELECTED_DIRS[@]})); then
            for dir in "${SELECTED_DIRS[@]}"; do
                lang="$(dir_language "$dir")"
                [[ " ${only[*]} " == *" $lang "* ]] || only+=("$lang")
            done
        else
            only=("${LANGUAGES[@]}")
        fi
    fi
    for lang in "${only[@]}"; do
        [[ " ${LANGUAGES[*]} " == *" $lang "* ]] || die "unknown language $lang (known: ${LANGUAGES[*]})"
    done

    need_tools flock mktemp cmp sed grep awk find sort sha256sum xargs
    mkdir -p "$TARGET_DIR" "$DEST_DIR" "$TOOLS_DIR"
    DEST_DIR="$(cd "$DEST_DIR" && pwd)"
    # One build at a time across processes; the lock is released on exit.
    exec 9>"$TARGET_DIR/.wasmgate-filters.lock"
    flock 9

    BUILT=()
    for lang in "${only[@]}"; do
        "${mode}_${lang}"
    done
    if [[ "$mode" == build ]]; then
        ((verify == 0)) || verify_components
        log "components are in $DEST_DIR"
        printf '%s\n' "${BUILT[@]}"
    fi
}

main "$@"
