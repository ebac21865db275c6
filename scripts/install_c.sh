#!/usr/bin/env bash
# Provide a C compiler for ports written on the C kit (ports/kits/c/attention_port.h): a `cc` on
# PATH is used as it is; otherwise Debian's gcc and libc6-dev are installed (install_debian_tool.sh
# says how). Idempotent. Prints the compiler's version last.
set -euo pipefail

bash "$(dirname "${BASH_SOURCE[0]}")/install_debian_tool.sh" install_c.sh cc gcc libc6-dev
cc --version | head -n 1
