#!/usr/bin/env bash
# Provide a C compiler for ports written on the C kit (ports/kits/c/attention_port.h): a `cc` on
# PATH is used as it is; otherwise Debian's gcc and libc6-dev are installed (as root, or through
# password-less sudo). Idempotent. Prints the compiler's version last.
set -euo pipefail

if command -v cc >/dev/null 2>&1; then
    echo "install_c.sh: $(command -v cc) is there"
else
    AS_ROOT=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            AS_ROOT=(sudo -n)
        else
            echo "install_c.sh: no cc on PATH, and no root rights to install gcc: ask for 'apt-get install gcc libc6-dev'" >&2
            exit 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install_c.sh: no cc on PATH and no apt-get: install a C99 compiler as cc" >&2
        exit 1
    fi
    echo "install_c.sh: apt-get install -y gcc libc6-dev"
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev || {
        "${AS_ROOT[@]}" apt-get update
        "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev
    }
fi
cc --version | head -n 1
