#!/usr/bin/env bash
# The port kits' toolchains, for the tests (tests/runtimes/command: the C, Rust, JavaScript and Octave
# kits' walkthrough ports are compiled and run for real): a C and a C++ compiler, rustc, node and
# Octave (Debian's octave without its recommends, as scripts/install_octave.sh installs it). A tool
# already on PATH is used as it is; the missing ones come from Debian's packages (as root, or
# through password-less sudo). Never part of verify's set-up (scripts/setup_verify.sh): a user's
# first command needs none of them. Idempotent.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc libc6-dev)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v rustc >/dev/null 2>&1 || need+=(rustc)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v octave-cli >/dev/null 2>&1 || command -v octave >/dev/null 2>&1 || need+=(octave)
if [ "${#need[@]}" -eq 0 ]; then
    echo "install_kits.sh: cc, c++, rustc, node and octave are there"
    exit 0
fi
AS_ROOT=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        AS_ROOT=(sudo -n)
    else
        echo "install_kits.sh: missing ${need[*]}, and no root rights to install them" >&2
        exit 1
    fi
fi
echo "install_kits.sh: apt-get install -y ${need[*]}"
"${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" || {
    "${AS_ROOT[@]}" apt-get update
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
}
