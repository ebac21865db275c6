#!/usr/bin/env bash
# The ports' own test suites, in their own languages (testthat for R, the Test stdlib for Julia),
# then the native conformance runners (ports/r/conformance.R, ports/julia/conformance.jl) over the
# whole fixture catalogue for our two ports, with --strict (nothing may be missing from a port we
# ship). Each prints a closing "LABEL: N passed, M failed" line; a suite that ran zero tests fails
# here, so a misnamed test file cannot pass silently (the CRAN `attention` package's fate).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
status=0

run_suite() {  # $1 = the label of its closing line, rest = command
    local lang="$1"; shift
    local log
    log="$(mktemp)"
    if ! "$@" 2>&1 | tee "$log"; then
        echo "native tests: $lang suite failed" >&2
        status=1
    fi
    local line
    line="$(grep -E "^$lang: [0-9]+ passed, [0-9]+ failed" "$log" | tail -1 || true)"
    if [ -z "$line" ] || [ "$(echo "$line" | sed -E 's/^[^:]+: ([0-9]+) passed.*/\1/')" = "0" ]; then
        echo "native tests: $lang ran no test (no '$lang: N passed, M failed' line with N > 0)" >&2
        status=1
    fi
    rm -f "$log"
}

run_suite r Rscript ports/r/run_tests.R
JULIA_CMD="$(bash scripts/install_julia.sh 2>/dev/null | tail -n 1)"
run_suite julia "$JULIA_CMD" --startup-file=no ports/julia/test/runtests.jl
# warn = 2 and lifecycle errors: a deprecated API in the runner (base R's .Deprecated, testthat's
# lifecycle warnings) fails here; the port's own warnings are the bridge's to report, not affected.
STRICT_PROFILE="$(mktemp)"
echo 'options(warn = 2, lifecycle_verbosity = "error")' > "$STRICT_PROFILE"
R_PROFILE_USER="$STRICT_PROFILE" run_suite "r conformance" Rscript ports/r/conformance.R --strict --reporter check ports/r/R
rm -f "$STRICT_PROFILE"
# --depwarn=error: a deprecated API in the runner, the worker code it shares or our port fails here
# (Julia removes nothing before 2.0, so this is the check that newer 1.x keep running it).
run_suite "julia conformance" "$JULIA_CMD" --startup-file=no --depwarn=error ports/julia/conformance.jl --strict ports/julia/src
# A declared precision (the declaration's `precision` field) is judged on its tier, fixtures/precision/<name>/.
# tests/test_native_runners.py checks a few float32 cases of our port against `verify`; the whole
# tier is not run here, to keep `make test` in its budget (it takes ~11 s):
#   julia ports/julia/conformance.jl --strict tests/data/ports/julia/ours_float32.jl
exit $status
