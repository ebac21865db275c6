#!/usr/bin/env bash
# Provide GNU Octave for ports written on the Octave kit (ports/kits/octave/attention_port.m): an
# `octave-cli` (or `octave`) on PATH is used as it is; otherwise Debian's octave package is installed
# (install_debian_tool.sh says how). Idempotent. Prints Octave's version last.
set -euo pipefail

if command -v octave-cli >/dev/null 2>&1 || command -v octave >/dev/null 2>&1; then
    echo "install_octave.sh: $(command -v octave-cli || command -v octave) is there"
else
    bash "$(dirname "${BASH_SOURCE[0]}")/install_debian_tool.sh" install_octave.sh octave-cli octave
fi
"$(command -v octave-cli || command -v octave)" --version | head -n 1
