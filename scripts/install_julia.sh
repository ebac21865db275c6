#!/usr/bin/env bash
# Provide a `julia` for the Julia port, and print the command to run it (last line of stdout).
#
#   1. $JULIA if set, else a `julia` on PATH: used as they are.
#   2. Otherwise Debian bullseye's julia 1.5.3 is unpacked into $ATTENTION_PORTS_JULIA_PREFIX,
#      default .local/julia in the checkout (gitignored; `attention-ports setup julia` from an
#      installed package passes a per-user data folder), with `apt-get download` + `dpkg -x`,
#      using a private sources list and private apt state/cache directories (next to PREFIX,
#      in julia-apt/): the system's apt configuration is never
#      touched and nothing is installed system-wide except, when missing, libmpfr6,
#      libgfortran5, libgmp10 and libpcre2-8-0 from the system's own (bookworm) sources.
#      bullseye's libunwind8 comes along: bookworm's crashes this julia on any thrown error.
#   3. A wrapper PREFIX/bin/julia-run sets LD_LIBRARY_PATH to the unpacked libraries and
#      OPENBLAS_CORETYPE from the CPU flags (unless the user set one), then execs julia.
#
# Idempotent: a second run finds the working wrapper and only re-checks it.
# Usage: scripts/install_julia.sh [--check-blas]   (--check-blas: time a 512x512 matmul with and
#        without the chosen OPENBLAS_CORETYPE)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX="${ATTENTION_PORTS_JULIA_PREFIX:-$ROOT/.local/julia}"
WRAPPER="$PREFIX/bin/julia-run"
CHECK_BLAS=0
[[ "${1:-}" == "--check-blas" ]] && CHECK_BLAS=1

log() { echo "install_julia: $*" >&2; }

# Smoke test: BLAS, and a thrown error whose backtrace is looked up (exercises libunwind).
SMOKE='using LinearAlgebra; @assert [1.0 2.0; 3.0 4.0] * [1.0, 1.0] == [3.0, 7.0]
f() = error("boom"); try f() catch e; @assert occursin("boom", sprint(showerror, e, catch_backtrace())) end'

blas_check() {  # $1 = julia command; compares matmul time with/without the wrapper's core type
    local jl="$1"
    local prog='A = rand(512, 512); B = rand(512, 512); A * B; t = minimum(@elapsed(A * B) for _ in 1:20); println(round(t * 1e3, digits = 2), " ms")'
    log "BLAS 512x512 matmul (best of 20), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-as the wrapper picks}: $("$jl" --startup-file=no -e "$prog")"
    log "BLAS 512x512 matmul (best of 20), OPENBLAS_CORETYPE=<unset, OpenBLAS autodetect>: $(JULIA_RUN_NO_CORETYPE=1 "$jl" --startup-file=no -e "$prog")"
}

finish() {  # $1 = julia command
    log "version: $("$1" --startup-file=no --version)"
    if [[ $CHECK_BLAS == 1 ]]; then blas_check "$1"; fi
    echo "$1"
}

# 1. A julia the user already has.
if [[ -n "${JULIA:-}" ]]; then
    command -v "$JULIA" >/dev/null || { log "JULIA=$JULIA is not an executable"; exit 1; }
    log "using \$JULIA"
    finish "$(command -v "$JULIA")"
    exit 0
fi
if command -v julia >/dev/null 2>&1; then
    log "using julia on PATH"
    finish "$(command -v julia)"
    exit 0
fi

# 2. Already unpacked here?
if [[ -x "$WRAPPER" ]] && ("$WRAPPER" --startup-file=no -e "$SMOKE") >/dev/null 2>&1; then
    log "already installed in $PREFIX"
    finish "$WRAPPER"
    exit 0
fi

start=$(date +%s)
[[ "$(dpkg --print-architecture)" == amd64 ]] || { log "only amd64 is supported by this installer"; exit 1; }

# System libraries julia links or dlopens (libgfortran5 for its OpenBLAS); from the system's own
# sources, installed only when missing.
missing=()
for pkg in libmpfr6 libgfortran5 libgmp10 libpcre2-8-0; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]} with the system's apt"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Private apt: bullseye only, own lists and cache, system configuration untouched.
APTDIR="$(dirname "$PREFIX")/julia-apt"
mkdir -p "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial" "$APTDIR/debs"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" \
    >"$APTDIR/sources.list"
APT_OPTS=(
    -o "Dir::Etc::SourceList=$APTDIR/sources.list"
    -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$APTDIR/lists"
    -o "Dir::Cache=$APTDIR/cache"
    -o "APT::Sandbox::User=root"
    -o "Dir::State::status=/dev/null"
    -o "Debug::NoLocking=1"
)
log "fetching bullseye package lists into $APTDIR"
apt-get "${APT_OPTS[@]}" update -qq

PACKAGES=(julia libjulia1 julia-common libllvm9 libgit2-1.1 libmbedtls12 libmbedcrypto3 libmbedx509-0
    libopenlibm3 libdsfmt-19937-1 libutf8proc2 libhttp-parser2.9 libffi7 libz3-4
    # bookworm's libunwind 1.6 segfaults when julia 1.5 unwinds through JIT frames (any throw
    # whose backtrace is looked up); bullseye's 1.3 is the one this julia was built against.
    libunwind8)
log "downloading ${PACKAGES[*]}"
(cd "$APTDIR/debs" && rm -f ./*.deb && apt-get "${APT_OPTS[@]}" download -qq "${PACKAGES[@]}")

rm -rf "$PREFIX"
mkdir -p "$PREFIX"
for deb in "$APTDIR"/debs/*.deb; do
    dpkg -x "$deb" "$PREFIX"
done

LIBDIR="$PREFIX/usr/lib/x86_64-linux-gnu"
SYSLIB=/usr/lib/x86_64-linux-gnu
# julia 1.5 dlopens "libmpfr" unversioned; the system only ships the versioned file.
ln -sf "$SYSLIB/libmpfr.so.6" "$LIBDIR/libmpfr.so"
# lib/julia's links to system libraries (../libgmp.so.10, ../libpcre2-8.so.0, ...) point into our
# folder: give each a link to the system's copy when it has one.
for link in "$LIBDIR"/julia/*.so; do
    if [[ -L "$link" && ! -e "$link" ]]; then
        target="$(basename "$(readlink "$link")")"
        if [[ -e "$SYSLIB/$target" ]]; then ln -sf "$SYSLIB/$target" "$LIBDIR/$target"; fi
    fi
done

mkdir -p "$PREFIX/bin"
cat >"$WRAPPER" <<'EOF'
#!/bin/sh
# Project-local Debian julia 1.5.3 (written by scripts/install_julia.sh).
here=$(cd "$(dirname "$0")/.." && pwd)
lib="$here/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$lib:$lib/julia${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# OpenBLAS may not recognise a newer CPU and fall back to a slow generic kernel: pick a core type
# the CPU really has (never one it lacks); a user's own OPENBLAS_CORETYPE wins.
if [ -z "${OPENBLAS_CORETYPE:-}" ] && [ -z "${JULIA_RUN_NO_CORETYPE:-}" ]; then
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true) "
    has() { for f in "$@"; do case "$flags" in *" $f "*) ;; *) return 1 ;; esac; done; }
    if has avx512f avx512bw avx512dq avx512vl avx512cd; then
        export OPENBLAS_CORETYPE=SkylakeX
    elif has avx2 fma; then
        export OPENBLAS_CORETYPE=Haswell
    fi
fi
exec "$here/usr/bin/julia" "$@"
EOF
chmod +x "$WRAPPER"

# Nothing may be missing from the dynamic links.
for bin in "$PREFIX/usr/bin/julia" "$LIBDIR/libjulia.so.1"; do
    if LD_LIBRARY_PATH="$LIBDIR:$LIBDIR/julia" ldd "$bin" | grep -q 'not found'; then
        log "missing libraries for $bin:"
        LD_LIBRARY_PATH="$LIBDIR:$LIBDIR/julia" ldd "$bin" | grep 'not found' >&2
        exit 1
    fi
done
"$WRAPPER" --startup-file=no -e "$SMOKE" || { log "the unpacked julia fails its smoke test"; exit 1; }
log "installed into $PREFIX in $(($(date +%s) - start)) s; OPENBLAS_CORETYPE in the wrapper: $(
    "$WRAPPER" --startup-file=no -e 'print(get(ENV, "OPENBLAS_CORETYPE", "<unset>"))')"
finish "$WRAPPER"
