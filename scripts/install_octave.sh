#!/usr/bin/env bash
# Provide GNU Octave for ports written on the Octave kit (ports/kits/octave/attention_port.m): an
# `octave-cli` (or `octave`) on PATH is used as it is; otherwise Debian's octave package is installed
# without its recommends (as root, or through password-less sudo). Idempotent. Prints Octave's
# version last.
set -euo pipefail

if command -v octave-cli >/dev/null 2>&1 || command -v octave >/dev/null 2>&1; then
    echo "install_octave.sh: $(command -v octave-cli || command -v octave) is there"
else
    AS_ROOT=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            AS_ROOT=(sudo -n)
        else
            echo "install_octave.sh: no octave on PATH, and no root rights to install it: ask for 'apt-get install --no-install-recommends octave'" >&2
            exit 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install_octave.sh: no octave on PATH and no apt-get: install GNU Octave (>= 6) so that octave-cli is on PATH" >&2
        exit 1
    fi
    echo "install_octave.sh: apt-get install -y --no-install-recommends octave"
    "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends octave || {
        "${AS_ROOT[@]}" apt-get update
        "${AS_ROOT[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends octave
    }
fi
"$(command -v octave-cli || command -v octave)" --version | head -n 1
