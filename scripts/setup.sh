#!/usr/bin/env bash
# The whole set-up, for the tests (`make test`, `make setup`): first what `attention-ports verify`
# needs (scripts/setup_verify.sh: the venv with the package, PyTorch, R with rpy2, Julia), then
# what only the tests need: the package's dev tools (pytest and its plugins, ruff, hypothesis,
# mpmath, pyyaml), the port kits' toolchains (scripts/install_kits.sh), Chromium (a test renders the HTML report in it) and the custom Julia system
# image (it saves seconds on each of the test suite's many Julia starts). Idempotent; a second run
# takes seconds. Environment: as scripts/setup_verify.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="${VENV:-.venv}"
say() { echo "setup: $*" >&2; }

bash scripts/setup_verify.sh
VPY="$ROOT/$VENV/bin/python"

# The dev tools, again only when the package's metadata changed (pip on an editable install costs ~5 s).
stamp="$VENV/.attention-ports-dev-installed"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "installing the dev tools (attention-ports[dev])"
    "$VPY" -m pip install -q --disable-pip-version-check -e '.[dev]'
    echo "$want" >"$stamp"
fi

say "the port kits' toolchains (C, C++, Rust, Node: the kits' tests run real ports)"
bash scripts/install_kits.sh >&2

say "Chromium (the HTML report's browser test)"
bash scripts/install_chromium.sh

# A custom Julia system image (cold Julia runs ~2.5x faster): rebuilt only when the worker, our
# port or julia changed (~3 minutes when it is); without gcc or on any failure it says so and the
# worker keeps julia's stock image, so this step never fails the set-up.
say "Julia system image"
"$VPY" scripts/build_julia_sysimage.py || say "WARNING: the Julia system image step failed; Julia runs on its stock image"

say "ready: $("$VPY" -c 'import numpy, torch, rpy2, pytest; print("numpy", numpy.__version__, "| torch", torch.__version__, "| rpy2", rpy2.__version__, "| pytest", pytest.__version__)')"
