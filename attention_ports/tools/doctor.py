"""``attention-ports doctor``: what this machine can run, and the command that gets each missing piece.

Each check probes the real thing: torch and rpy2 are imported in a child Python (a broken rpy2
build can crash the process that imports it, and importing torch costs seconds we need not keep),
R and Julia are started and asked for their versions and BLAS. Nothing is installed or changed.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec

from attention_ports.core import paths
from attention_ports.core.io import file_identity

#: What ``--need`` may name; every check belongs to one of these or to "core" (always needed).
NEEDS = ("torch", "r", "julia", "c", "octave", "rust", "javascript", "python")
# A bare `doctor` asks for what `verify` runs by default; a kit's toolchain (the C compiler, Octave,
# rustc, Node, the Python kit's NumPy) only with --need: a machine that runs no C port needs no compiler.
DEFAULT_NEEDS = ("torch", "r", "julia")
PROBE_TIMEOUT_S = 120  # a first Julia start on a cold disk can take a while


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    need: str = "core"  # "core" or one of NEEDS
    fix: str = ""  # the command that provides it, when missing
    optional: bool = False  # reported, never counted (juliacall cannot run on every machine)


def _probe(argv: list[str], env: dict[str, str] | None = None) -> tuple[bool, str]:
    """Run ``argv``; (exit status 0, its stdout, else the last line of what it said)."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env=env,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{type(exc).__name__}: {exc}"
    if proc.returncode == 0:
        return True, proc.stdout.strip()
    said = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
    return False, (said[-1] if said else f"exit status {proc.returncode}")


def _python_probe(code: str) -> tuple[bool, str]:
    return _probe([sys.executable, "-c", code])


def _pip(spec: str) -> str:
    return f"{sys.executable} -m pip install '{spec}'"


def check_python() -> Check:
    return Check("Python", True, f"{platform.python_version()} ({sys.executable})")


def numpy_blas() -> str:
    """NumPy's BLAS library, version and the CPU kernel ("core type") it runs with."""
    try:
        from threadpoolctl import threadpool_info

        blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    except Exception:  # threadpoolctl missing or confused: the build configuration is the fallback
        blas = []
    if blas:
        i = blas[0]
        core = i.get("architecture") or "unknown"
        return f"{i.get('internal_api', '?')} {i.get('version', '?')}, core type {core}, {i.get('num_threads')} threads"
    try:
        import numpy as np

        dep = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        return f"{dep.get('name', '?')} {dep.get('version', '?')} (core type unknown: pip install threadpoolctl)"
    except Exception:
        return "unknown"


def check_numpy() -> Check:
    try:
        import numpy as np
    except ImportError as exc:
        return Check("NumPy", False, str(exc), fix=_pip("numpy>=1.24"))
    forced = os.environ.get("OPENBLAS_CORETYPE")
    note = f" (OPENBLAS_CORETYPE={forced})" if forced else ""
    return Check("NumPy", True, f"{np.__version__}; BLAS: {numpy_blas()}{note}")


def check_fixtures() -> Check:
    from attention_ports.fixtures.store import FixtureError, read_manifest

    where = "installed package" if paths.installed() else "checkout"
    try:
        manifest = read_manifest(paths.FIXTURES)
    except FixtureError as exc:
        return Check("fixtures", False, str(exc), fix="reinstall attention-ports (its wheel carries the fixtures)")
    n = len(manifest.get("cases", []))
    return Check("fixtures", n > 0, f"{n} cases in {paths.FIXTURES} ({where}); contract {paths.CONTRACT}")


def check_torch() -> Check:
    ok, said = _python_probe("import torch; print(torch.__version__)")
    return Check("torch", ok, said if ok else f"cannot import torch: {said}", need="torch", fix=_pip("torch>=2.1"))


def check_c() -> Check:
    """A C compiler for ports on the C kit (docs/protocol.md); the kit itself needs nothing else."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return Check("C compiler", False, "no cc on PATH", need="c", fix="attention-ports setup c")
    ok, said = _probe([cc, "--version"])
    first = said.splitlines()[0] if said else ""
    return Check("C compiler", ok, f"{first} ({cc})" if ok else said, need="c", fix="attention-ports setup c")


def find_octave() -> str | None:
    """The Octave a kit port's manifest runs: ``octave-cli`` (no GUI libraries loaded), else ``octave``."""
    return shutil.which("octave-cli") or shutil.which("octave")


def check_octave() -> Check:
    """GNU Octave for ports on the Octave kit (ports/kits/octave/attention_port.m); started and asked
    its version, the way a port's manifest starts it."""
    fix = "attention-ports setup octave"
    octave = find_octave()
    if octave is None:
        return Check("Octave", False, "no octave-cli or octave on PATH", need="octave", fix=fix)
    ok, said = _probe([octave, "--norc", "--quiet", "--no-history", "--eval", "printf('GNU Octave %s\\n', version())"])
    return Check("Octave", ok, f"{said} ({octave})" if ok else said, need="octave", fix=fix)


def check_rust() -> Check:
    """rustc for ports on the Rust kit (the standard library only: no cargo)."""
    fix = "attention-ports setup rust"
    rustc = shutil.which("rustc")
    if rustc is None:
        return Check("rustc", False, "no rustc on PATH", need="rust", fix=fix)
    ok, said = _probe([rustc, "--version"])
    return Check("rustc", ok, f"{said} ({rustc})" if ok else said, need="rust", fix=fix)


def check_javascript() -> Check:
    """Node for ports on the JavaScript kit (no npm dependency)."""
    fix = "attention-ports setup javascript"
    node = shutil.which("node")
    if node is None:
        return Check("Node", False, "no node on PATH", need="javascript", fix=fix)
    ok, said = _probe([node, "--version"])
    return Check("Node", ok, f"Node {said} ({node})" if ok else said, need="javascript", fix=fix)


def check_python_kit() -> Check:
    """The Python kit's ports run with this Python (``verify --port py=PORT.py``) and need NumPy only."""
    ok, said = _python_probe("import numpy; print(numpy.__version__)")
    detail = f"Python {platform.python_version()} ({sys.executable}), NumPy {said}" if ok else said
    return Check("Python kit", ok, detail, need="python", fix=_pip("numpy>=1.24"))


def check_r() -> tuple[Check, Check]:
    fix = "attention-ports setup r"
    rscript = shutil.which("Rscript")
    if rscript is None:
        r = Check("R", False, "Rscript is not on PATH", need="r", fix=fix)
    else:
        ok, said = _probe(
            [rscript, "--vanilla", "-e", 'cat(R.version.string, "| BLAS:", sessionInfo()$BLAS, "\\n")'],
        )
        r = Check("R", ok, said, need="r", fix=fix)
    ok, said = _python_probe(
        "import rpy2, rpy2.robjects as ro; print('rpy2', rpy2.__version__, '| embedded', ro.r('R.version.string')[0])"
    )
    return r, Check("rpy2", ok, said if ok else f"cannot start R through rpy2: {said}", need="r", fix=fix)


# Which OpenBLAS kernel Julia's BLAS really runs with (the wrapper of a Julia unpacked by
# install_julia.sh picks OPENBLAS_CORETYPE from the CPU flags; a stock Julia autodetects).
_JULIA_PROBE = r"""
using Libdl
function corename()
    libs = (Base.libblas_name, "libopenblas64_", "libopenblas")
    for lib in libs, sym in (:openblas_get_corename64_, :openblas_get_corename)
        h = Libdl.dlopen(lib; throw_error = false)
        h === nothing && continue
        p = Libdl.dlsym(h, sym; throw_error = false)
        p === nothing && continue
        return unsafe_string(ccall(p, Cstring, ()))
    end
    return "unknown (not OpenBLAS?)"
end
println(VERSION, "\t", corename(), "\t", get(ENV, "OPENBLAS_CORETYPE", ""))
"""


def check_julia() -> tuple[Check, Check, Check]:
    fix = "attention-ports setup julia"
    try:
        from attention_ports.runtimes.julia.adapter import find_julia

        julia = find_julia()
    except Exception as exc:
        missing = Check("Julia", False, str(exc), need="julia", fix=fix)
        worker = Check("julia worker", False, "needs a Julia", need="julia", fix=fix)
        return missing, worker, _juliacall(None)
    ok, said = _probe([julia, "--startup-file=no", "-e", _JULIA_PROBE])
    if not ok:
        broken = Check("Julia", False, f"{julia} does not run: {said}", need="julia", fix=fix)
        return broken, Check("julia worker", False, "needs a working Julia", need="julia", fix=fix), _juliacall(None)
    jl_version, core, forced = [*said.splitlines()[-1].split("\t"), "", "", ""][:3]
    how = f"OPENBLAS_CORETYPE={forced}" if forced else "OpenBLAS autodetect"
    jl = Check("Julia", True, f"{jl_version} ({julia}); BLAS core type {core} ({how})", need="julia")
    from attention_ports.runtimes.julia import sysimage as julia_sysimage

    try:
        image = julia_sysimage.find(julia)
    except ValueError as exc:  # a bad $ATTENTION_PORTS_JULIA_SYSIMAGE
        image, how = None, str(exc)
    else:
        how = (
            f"system image {image.path}"
            if image is not None
            else "julia's stock system image (`make setup` in a checkout builds one that starts ~2.5x faster)"
        )
    worker = Check(
        "julia worker", True, f"the default transport (a long-lived julia process per port); {how}", need="julia"
    )
    return jl, worker, _juliacall(jl_version)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for p in text.split("-")[0].split("."):
        if not p.isdigit():
            break
        parts.append(int(p))
    return tuple(parts)


def _juliacall(julia_version: str | None) -> Check:
    """juliacall (ATTENTION_PORTS_JULIA_TRANSPORT=juliacall): optional, and honest about why not."""
    problems = []
    if find_spec("juliacall") is None:
        problems.append("the juliacall package is not installed")
    if julia_version is None:
        problems.append("no Julia")
    elif _version_tuple(julia_version) < (1, 10, 3):
        problems.append(
            f"it needs Julia >= 1.10.3 and PythonCall from the Julia registry; this Julia is {julia_version}"
        )
    if problems:
        return Check(
            "juliacall",
            False,
            "not available: " + "; ".join(problems) + " (the worker transport does the same job)",
            need="julia",
            fix=f"{_pip('juliacall')} with a Julia >= 1.10.3 that can reach the Julia package registry",
            optional=True,
        )
    try:
        got = version("juliacall")
    except PackageNotFoundError:
        got = "?"
    return Check("juliacall", True, f"juliacall {got} (set ATTENTION_PORTS_JULIA_TRANSPORT=juliacall)", need="julia")


def run_checks(needs: Iterable[str] = NEEDS) -> list[Check]:
    """Core checks, then each needed runtime's, probed concurrently (each is a child process)."""
    wanted = [n for n in NEEDS if n in set(needs)]
    probes: dict[str, Callable[[], Check | tuple[Check, ...]]] = {
        "torch": check_torch,
        "r": check_r,
        "julia": check_julia,
        "c": check_c,
        "octave": check_octave,
        "rust": check_rust,
        "javascript": check_javascript,
        "python": check_python_kit,
    }
    with ThreadPoolExecutor(max_workers=len(NEEDS)) as pool:
        futures = {name: pool.submit(probes[name]) for name in wanted}
        checks = [check_python(), check_numpy(), check_fixtures()]
        for name in NEEDS:
            if name not in futures:
                label = {
                    "r": "R",
                    "julia": "Julia",
                    "c": "C compiler",
                    "octave": "Octave",
                    "rust": "rustc",
                    "javascript": "Node",
                    "python": "Python kit",
                }.get(name, name)
                checks.append(Check(label, False, "not checked (not asked for with --need)", name, optional=True))
                continue
            got = futures[name].result()
            checks += got if isinstance(got, tuple) else (got,)
    return checks


def report(checks: list[Check]) -> tuple[str, bool]:
    """The printed report and whether every required piece is present."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        mark = "ok" if c.ok else ("--" if c.optional else "MISSING")
        lines.append(f"{mark:<8} {c.name:<{width}}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"{'':<8} {'':<{width}}  to get it: {c.fix}")
    missing = [c.name for c in checks if not c.ok and not c.optional]
    if missing:
        lines.append(f"missing: {', '.join(missing)} (run the commands above; `--need` limits what is required)")
    else:
        lines.append("everything required is present")
    return "\n".join(lines), not missing


def tool_version() -> str:
    try:
        return version("attention-ports")
    except PackageNotFoundError:
        return "(not installed)"


def runtime_versions(impls: Iterable[str]) -> dict[str, str]:
    """The versions a report records (its ``meta.versions``): this tool, Python, NumPy, and of torch,
    R and Julia those the run used (asked of the runtime itself; a runtime that does not answer is
    recorded as ``unknown: <why>``). R is the Rscript on PATH, Julia the one the Julia port runs."""
    import numpy as np

    impls = set(impls)
    out = {
        "attention_ports": tool_version(),
        "python": platform.python_version(),
        "numpy": np.__version__,
    }
    if "torch" in impls:
        try:
            out["torch"] = version("torch")
        except PackageNotFoundError:
            out["torch"] = "unknown: not installed"
    if "r" in impls:
        rscript = shutil.which("Rscript")
        ok, said = (
            (False, "Rscript is not on PATH")
            if rscript is None
            else _version_probe([rscript, "--vanilla", "-e", "cat(R.version.string)"])
        )
        out["r"] = said if ok else f"unknown: {said}"
    if "julia" in impls:
        try:
            from attention_ports.runtimes.julia.adapter import find_julia

            ok, said = _version_probe([find_julia(), "--startup-file=no", "--version"])
        except Exception as exc:  # no Julia: the run reported it as unavailable already
            ok, said = False, str(exc)
        out["julia"] = said if ok else f"unknown: {said}"
    return out


# A runtime's answer per executable, as long as that file is unchanged (core/io.file_identity): a
# process that verifies many times (a test session, a notebook) asked R each time (~0.1 s of CPU,
# an R start) for the same answer. A failed probe is asked again.
_VERSIONS: dict[tuple[object, ...], tuple[bool, str]] = {}


def _version_probe(argv: list[str]) -> tuple[bool, str]:
    key = (*argv, *file_identity(argv[0]))
    known = _VERSIONS.get(key)
    if known is None:
        known = _probe(argv)
        if known[0]:
            _VERSIONS[key] = known
    return known


def main(needs: list[str] | None) -> int:
    pkg = tool_version()
    where = f"installed package {paths.PACKAGE_DIR}" if paths.installed() else f"checkout {paths.ASSET_ROOT}"
    print(f"attention-ports {pkg}: {where}")
    text, ok = report(run_checks(needs or DEFAULT_NEEDS))
    print(text)
    return 0 if ok else 1
