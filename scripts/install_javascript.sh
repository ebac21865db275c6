#!/usr/bin/env bash
# Provide Node for ports written on the JavaScript kit (ports/kits/node/attention_port.js: no npm
# dependency): a `node` on PATH is used as it is; otherwise Debian's nodejs package. Idempotent.
# Prints Node's version last.
set -euo pipefail
bash "$(dirname "$0")/install_debian_tool.sh" install_javascript.sh node nodejs
echo "Node $(node --version)"
