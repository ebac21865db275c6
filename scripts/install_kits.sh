#!/usr/bin/env bash
# The port kits' toolchains, for the tests (tests/runtimes/command: the C, Rust, JavaScript and Octave
# kits' walkthrough ports are compiled and run for real): a C and a C++ compiler, rustc, node and
# Octave, each by the installer `attention-ports setup LANG` runs (install_c.sh, install_rust.sh,
# install_javascript.sh, install_octave.sh). A tool already on PATH is used as it is; the missing
# ones come from Debian's packages (as root, or through password-less sudo). Never part of verify's
# set-up (scripts/setup_verify.sh): a user's first command needs none of them. Idempotent.
set -euo pipefail

here=$(dirname "$0")
bash "$here/install_c.sh"
bash "$here/install_debian_tool.sh" install_kits.sh c++ g++
bash "$here/install_rust.sh"
bash "$here/install_javascript.sh"
bash "$here/install_octave.sh"
