#!/usr/bin/env bash
# install_python.sh PYTHON: the Python kit (ports/kits/python/attention_port.py) needs NumPy only,
# which attention-ports itself depends on, so nothing is installed: this checks that PYTHON (the one
# `verify --port py=PORT.py` starts a port with) imports NumPy, and prints its version. A port in JAX
# or CuPy brings its own library (JAX's CPU wheel: PYTHON -m pip install jax).
set -euo pipefail
python=${1:-python3}
echo "install_python.sh: the Python kit needs NumPy only; nothing to install"
"$python" -c 'import sys, numpy; print(f"Python {sys.version.split()[0]} ({sys.executable}), NumPy {numpy.__version__}")'
