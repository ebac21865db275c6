#!/usr/bin/env bash
# install_debian_tool.sh WHO COMMAND PACKAGE...: a kit's toolchain from Debian's packages. A COMMAND
# already on PATH is used as it is; otherwise the PACKAGEs are installed without their recommends (as
# root, or through password-less sudo). Idempotent. The one place the kits' installers
# (install_c.sh, install_octave.sh, install_rust.sh, install_javascript.sh, install_kits.sh) say how
# to get a package.
set -euo pipefail

who=$1 tool=$2
shift 2
if command -v "$tool" >/dev/null 2>&1; then
    echo "$who: $(command -v "$tool") is there"
    exit 0
fi
AS_ROOT=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        AS_ROOT=(sudo -n)
    else
        echo "$who: no $tool on PATH, and no root rights to install it: ask for 'apt-get install --no-install-recommends $*'" >&2
        exit 1
    fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "$who: no $tool on PATH and no apt-get: install $* so that $tool is on PATH" >&2
    exit 1
fi
echo "$who: apt-get install -y --no-install-recommends $*"
"${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" || {
    "${AS_ROOT[@]}" apt-get update
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"
}
