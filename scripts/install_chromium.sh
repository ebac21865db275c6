#!/usr/bin/env bash
# Install Debian's chromium, the headless browser tests/report/test_formats.py renders the HTML
# report in (screenshot and DOM). Idempotent; only a test needs it, so without root or apt it says
# so and succeeds: the browser test then skips locally and fails under CI=true.
set -euo pipefail

if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
AS_ROOT=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        AS_ROOT=(sudo -n)
    else
        echo "install_chromium.sh: no chromium and no root to install it (apt-get install -y chromium)" >&2
        exit 0
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_chromium.sh: no chromium and no apt-get; install a chromium to run the HTML report's test" >&2
    exit 0
fi
echo "install_chromium.sh: apt-get install -y chromium" >&2
"${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2 || {
    "${AS_ROOT[@]}" apt-get update >&2  # a stale package index is the usual cause on fresh containers
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium >&2 ||
        echo "install_chromium.sh: apt-get could not install chromium; the HTML report's browser test needs it" >&2
}
