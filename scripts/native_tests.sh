#!/usr/bin/env bash
# The ports' own test suites, in their own languages (testthat for R, the Test stdlib for Julia).
# Each prints a closing "LANG: N passed, M failed" line; a suite that ran zero tests fails here,
# so a misnamed test file cannot pass silently (the CRAN `attention` package's fate).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
status=0

run_suite() {  # $1 = language, rest = command
    local lang="$1"; shift
    local log
    log="$(mktemp)"
    if ! "$@" 2>&1 | tee "$log"; then
        echo "native tests: $lang suite failed" >&2
        status=1
    fi
    local line
    line="$(grep -E "^$lang: [0-9]+ passed, [0-9]+ failed" "$log" | tail -1 || true)"
    if [ -z "$line" ] || [ "$(echo "$line" | sed -E 's/^[a-z]+: ([0-9]+) passed.*/\1/')" = "0" ]; then
        echo "native tests: $lang ran no test (no '$lang: N passed, M failed' line with N > 0)" >&2
        status=1
    fi
    rm -f "$log"
}

run_suite r Rscript ports/r/run_tests.R
JULIA_CMD="$(bash scripts/install_julia.sh 2>/dev/null | tail -n 1)"
run_suite julia "$JULIA_CMD" --startup-file=no ports/julia/test/runtests.jl
exit $status
