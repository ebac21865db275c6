#!/usr/bin/env bash
# The set-up `attention-ports verify` needs, and nothing more (`make verify` runs only this): a
# virtual environment with the package, PyTorch (the independent oracle), R with rpy2, and Julia.
# Idempotent; a second run takes seconds. What only the tests need (their dev tools, Chromium, the
# Julia system image) is scripts/setup.sh's, which runs this first.
#
# Environment: PYTHON (interpreter for the venv, default python3), VENV (default .venv),
# ATTENTION_PORTS_TORCH (torch requirement, default torch==2.13.0: the CPU build this machine's
# package index serves from local disk; any other version pulls gigabytes).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
TORCH_REQ="${ATTENTION_PORTS_TORCH:-torch==2.13.0}"
say() { echo "setup: $*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
VPY="$ROOT/$VENV/bin/python"

# Re-install the package only when its metadata changed (pip on an editable install costs ~5 s).
stamp="$VENV/.attention-ports-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing attention-ports (editable)"
    "$VPY" -m pip install -q --disable-pip-version-check -e .
    echo "$want" >"$stamp"
fi

if ! "$VPY" -c 'import torch' 2>/dev/null; then
    say "installing $TORCH_REQ (CPU)"
    "$VPY" -m pip install -q --disable-pip-version-check "$TORCH_REQ"
fi

say "R and rpy2"
bash scripts/install_r.sh "$VPY" >&2

# Julia's stock system image is all a verify run needs (a cold Julia worker then compiles for a
# few seconds more); the custom image pays off over make test's many Julia starts (scripts/setup.sh).
say "Julia"
bash scripts/install_julia.sh >&2

# Not "setup: ready": that line is scripts/setup.sh's, printed when everything is set up.
say "verify's set-up is ready: $("$VPY" -c 'import numpy, torch, rpy2; print("numpy", numpy.__version__, "| torch", torch.__version__, "| rpy2", rpy2.__version__)')"
