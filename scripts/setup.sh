#!/usr/bin/env bash
# One idempotent set-up step for everything: a virtual environment with the package and its dev
# tools, PyTorch (the independent oracle), R with rpy2, Julia, and Chromium (a test renders the HTML
# report in it). Both of the README's two commands (`make verify`, `make test`) call it.
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
    say "installing attention-ports (editable) with dev tools"
    "$VPY" -m pip install -q --disable-pip-version-check -e '.[dev]'
    echo "$want" >"$stamp"
fi

if ! "$VPY" -c 'import torch' 2>/dev/null; then
    say "installing $TORCH_REQ (CPU)"
    "$VPY" -m pip install -q --disable-pip-version-check "$TORCH_REQ"
fi

say "R and rpy2"
bash scripts/install_r.sh "$VPY" >&2

say "Julia"
bash scripts/install_julia.sh >&2

say "Chromium (the HTML report's browser test)"
bash scripts/install_chromium.sh

# A custom Julia system image (cold Julia runs ~2.5x faster): rebuilt only when the worker, our
# port or julia changed (~3 minutes when it is); without gcc or on any failure it says so and the
# worker keeps julia's stock image, so this step never fails the set-up.
say "Julia system image"
"$VPY" scripts/build_julia_sysimage.py || say "WARNING: the Julia system image step failed; Julia runs on its stock image"

say "ready: $("$VPY" -c 'import numpy, torch, rpy2; print("numpy", numpy.__version__, "| torch", torch.__version__, "| rpy2", rpy2.__version__)')"
