"""``attention-ports setup r|julia|c|octave|rust|javascript|python``: run the packaged installers
(scripts/install_r.sh, install_julia.sh, install_c.sh, install_octave.sh, install_rust.sh,
install_javascript.sh, install_python.sh).

The scripts travel in the wheel (attention_ports/core/paths.py says where they are), so an installed
tool sets up its runtimes exactly as a checkout's ``make setup`` does:

- r: R from Debian/Ubuntu packages when missing (root or password-less sudo), OpenBLAS, testthat,
  and the rpy2 series that matches the R, pip-installed into *this* Python's environment.
- julia: ``$JULIA`` or a ``julia`` on PATH when there is one; otherwise Debian bullseye's julia
  1.5.3 unpacked into :func:`attention_ports.paths.julia_prefix` (the checkout's ``.local/julia``,
  or a per-user data folder for an installed package, never site-packages), where the Julia
  adapter looks for it.
- c: a ``cc`` on PATH when there is one; otherwise Debian's gcc and libc6-dev (root or
  password-less sudo), for ports written on the C kit (docs/protocol.md).
- octave: an ``octave-cli`` on PATH when there is one; otherwise Debian's octave package without
  its recommends (root or password-less sudo), for ports written on the Octave kit.
- rust: a ``rustc`` on PATH when there is one; otherwise Debian's rustc (the Rust kit needs no cargo).
- javascript: a ``node`` on PATH when there is one; otherwise Debian's nodejs (no npm dependency).
- python: nothing: the Python kit needs NumPy only, which this tool depends on; the installer checks
  that *this* Python imports it (a JAX or CuPy port brings its own library).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from attention_ports.core import paths

RUNTIMES = ("r", "julia", "c", "octave", "rust", "javascript", "python")


def command(runtime: str) -> tuple[list[str], dict[str, str]]:
    """The installer's command line and environment for ``runtime``."""
    if runtime not in RUNTIMES:
        raise ValueError(f"setup takes one of {', '.join(RUNTIMES)}, not {runtime!r}")
    script = paths.SCRIPTS / f"install_{runtime}.sh"
    env = dict(os.environ)
    if runtime in ("r", "python"):  # R's rpy2 goes into this Python; the Python kit's ports run with it
        return ["bash", str(script), sys.executable], env
    if runtime in ("c", "octave", "rust", "javascript"):
        return ["bash", str(script)], env
    env["ATTENTION_PORTS_JULIA_PREFIX"] = str(paths.julia_prefix())
    return ["bash", str(script)], env


def main(runtime: str) -> int:
    argv, env = command(runtime)
    if not os.path.isfile(argv[1]):
        print(f"attention-ports setup: the installer {argv[1]} is missing from this installation", file=sys.stderr)
        return 3
    if shutil.which("bash") is None:
        print("attention-ports setup: the installers are bash scripts and bash is not on PATH", file=sys.stderr)
        return 2
    print(f"attention-ports setup {runtime}: {' '.join(argv)}", file=sys.stderr, flush=True)
    code = subprocess.call(argv, env=env)
    if code != 0:
        print(f"attention-ports setup {runtime}: the installer failed (exit status {code})", file=sys.stderr)
        return 1
    print(f"attention-ports setup {runtime}: done; `attention-ports doctor --need {runtime}` shows what is there")
    return 0
