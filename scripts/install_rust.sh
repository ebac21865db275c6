#!/usr/bin/env bash
# Provide rustc for ports written on the Rust kit (ports/kits/rust/attention_port.rs: the standard
# library only, no cargo): a `rustc` on PATH is used as it is; otherwise Debian's rustc package.
# Idempotent. Prints rustc's version last.
set -euo pipefail
bash "$(dirname "$0")/install_debian_tool.sh" install_rust.sh rustc rustc
rustc --version
