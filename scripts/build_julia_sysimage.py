"""Build the custom Julia system image the Julia worker starts on (a step of ``make setup``).

    python scripts/build_julia_sysimage.py [--force]

Why and how it is used: attention_ports/runtimes/julia/sysimage.py. The steps:

1. trace: every catalogue case (and a few calls that raise, so error reporting is compiled too)
   runs through the Julia worker on the *stock* image with ``--trace-compile``, which lists every
   method instance julia had to compile, and records each case's verdict; so does every case of
   the float32 tier with the port run in Float32 (``verify --precision float32`` and the mutation
   kit's float32 half: without them each Float32 worker compiled Base's Float32 methods afresh);
2. build: ``julia -J STOCK --output-o sys.o scripts/julia_sysimage.jl WORKER PORT TRACE`` compiles
   those into a copy of the stock image (the slow step: ~2 CPU-minutes, about 3 minutes on a busy
   2-core machine);
3. link: ``gcc -shared`` makes sys.so of it;
4. check: the catalogue runs again on the new image; every verdict must equal the stock run's,
   or the image is thrown away;
5. the image goes, with meta.json (its keys, the timings), into
   ``.local/julia-sysimage/<build key>/`` (atomically), older images are removed.

Idempotent: nothing is done when an image for the current build key exists. Never fails set-up:
without julia, without a C compiler, or when any step fails, it says so and exits 0; the worker
then uses julia's stock image (correct, only slower to start). ``--strict`` exits 1 instead.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PROGRAM = HERE / "julia_sysimage.jl"
BUILD_TIMEOUT = 30 * 60  # seconds; ~3 minutes is usual
PROBE = (
    "using Libdl; println(unsafe_string(Base.JLOptions().image_file)); "
    'println(first(filter(p -> occursin(r"/libjulia\\.so", p), Libdl.dllist()))); println(VERSION)'
)


class Skip(Exception):
    """The image cannot be built here; the message says why and what it costs."""


def say(msg: str) -> None:
    print(f"julia sysimage: {msg}", file=sys.stderr, flush=True)


def probe(julia: str) -> tuple[str, str, str]:
    """(stock image, libjulia, version) of ``julia``."""
    try:
        out = subprocess.run(
            [julia, "--startup-file=no", "--history-file=no", "-e", PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError) as exc:
        raise Skip(f"cannot ask {julia} where its stock image is ({exc})") from None
    stock, libjulia, version = (line.strip() for line in out[:3])
    return stock, libjulia, version


def program_digests() -> dict[str, str]:
    """The build's own programs; and the native runner, which the image holds compiled (an image
    of an older runner would still be correct, the runner's guard then defining it afresh)."""
    from attention_ports.runtimes.julia import sysimage as jsi

    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (PROGRAM, Path(__file__).resolve(), jsi.RUNNER)}


# --- the catalogue through the worker -------------------------------------------------------------
# The precisions whose catalogue is traced: float64's, and the float32 tier (the mutation kit's).
TRACED = ("float64", "float32")


def catalogue_verdicts(trace: Path | None, sysimage: str | Path) -> tuple[dict[str, str], float]:
    """Every case of each :data:`TRACED` precision on our Julia port run in that precision
    ({"float64:case id": status, ...}), and the seconds the float64 run took (the figure meta.json
    has always kept); ``trace``: where the compiled methods are listed (--trace-compile)."""
    from attention_ports.fixtures.store import iter_entries, load_case
    from attention_ports.judge.runner import judge
    from attention_ports.runtimes.julia.adapter import JuliaImplementation
    from attention_ports.spec import precision as formats

    verdicts: dict[str, str] = {}
    seconds = 0.0
    parts = []
    for fmt in TRACED:
        fixtures = formats.fixtures_dir(fmt)
        cases = [load_case(fixtures, e) for e in iter_entries(fixtures)]
        part = trace.with_suffix(f".{fmt}.jl") if trace is not None else None  # one file per worker process
        flags = (f"--trace-compile={part}",) if part is not None else ()
        precision = None if fmt == formats.DEFAULT else fmt
        start = time.perf_counter()
        with JuliaImplementation(sysimage=sysimage, julia_flags=flags, precision=precision) as impl:
            for case in cases:
                results = judge("julia", case, impl)
                worst = max((r.status for r in results), key=["pass", "missing", "fail", "error"].index)
                verdicts[f"{fmt}:{case.id}"] = worst
            if fmt == formats.DEFAULT:
                seconds = time.perf_counter() - start
                _error_paths(impl)
        if part is not None:
            parts.append(part.read_text())
    if trace is not None:
        trace.write_text("\n".join(parts))
    return verdicts, seconds


def _error_paths(impl: object) -> None:
    """Calls that raise in the port or miss an operation: error reporting gets traced too."""
    from attention_ports.runtimes.impl import ImplementationError, OperationMissing

    bad = {"q": np.ones((2, 3)), "k": np.ones((2, 4)), "v": np.ones((2, 3))}  # d_k differs: an ArgumentError
    for op, inputs in (("scaled_dot_product_attention", bad), ("softmax", {"x": np.ones(0)})):
        with contextlib.suppress(ImplementationError, OperationMissing):
            impl.run(op, inputs, {})  # type: ignore[attr-defined]


# --- the native runner -------------------------------------------------------------------------
# How the test suite runs ports/julia/conformance.jl (tests/test_native_runners.py): its flags, and
# runs that reach the runner's paths for passing, failing, erroring, missing and bad usage, in
# float64 and float32, writing JSON and JUnit. Ports of tests/data where the checkout has them.
RUNNER_FLAGS = ("--startup-file=no", "-O1")
_USER_PORTS = HERE.parent / "tests" / "data" / "ports" / "julia"
RUNNER_RUNS: tuple[tuple[str, ...], ...] = (
    ("--json", "{out}.json", "--junit", "{out}.xml", "{ours}"),
    ("--case", "softmax_*", "--case", "clf_forward_*", "--case", "clf_step_*", "{user}/seed003_backward_bug.jl"),
    ("--case", "softmax_ties", "--case", "clf_step_n1", "{user}/syntax_error.jl"),
    ("--case", "softmax_ties", "--case", "self_attn_L1", "--case", "sdpa_L1_d1", "{user}/declares_undefined.jl"),
    ("--case", "softmax_*", "--case", "sdpa_*", "--case", "ln_*", "{user}/ours_float32.jl"),
    ("--case", "no_such_case*", "{ours}"),
)


def runner_trace(julia: str, trace: Path, work: Path) -> None:
    """Append to ``trace`` the methods the native runner compiles in :data:`RUNNER_RUNS` (their
    verdicts are the tests' business, so exit codes are not checked here)."""
    from attention_ports.runtimes.julia import sysimage as jsi

    parts = []
    work = work / "runner"  # the runs' reports and traces, not kept with the image
    work.mkdir()
    for i, args in enumerate(RUNNER_RUNS):
        fill = {"out": str(work / f"runner{i}"), "ours": str(jsi.PORT_SOURCES), "user": str(_USER_PORTS)}
        argv = [a.format(**fill) for a in args]
        if any(a.startswith(str(_USER_PORTS)) for a in argv) and not _USER_PORTS.is_dir():
            continue
        part = work / f"runner{i}.trace.jl"
        cmd = [julia, *RUNNER_FLAGS, f"--trace-compile={part}", str(jsi.RUNNER), *argv]
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            subprocess.run(cmd, capture_output=True, timeout=600, check=False)
        if part.is_file():
            parts.append(part.read_text())
    with trace.open("a") as f:
        f.write("\n" + "\n".join(parts))
    shutil.rmtree(work, ignore_errors=True)


# --- the build ------------------------------------------------------------------------------------
@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second set-up waits, then finds the image built
        yield


def build(julia: str, *, force: bool) -> Path:
    from attention_ports.runtimes.julia import sysimage as jsi

    stock, libjulia, version = probe(julia)
    jl = jsi.Julia(julia, stock, version)
    key = jsi.build_key(jl, program_digests())
    root = jsi.directory()
    final = root / key[:16]
    with locked(root):
        if not force and (final / jsi.META).is_file() and (final / jsi.IMAGE).is_file():
            say(f"up to date ({final})")
            return final / jsi.IMAGE
        cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
        if cc is None:
            raise Skip("no C compiler (gcc) to link the image")
        if not os.path.isfile(stock) or not os.path.isfile(libjulia):
            raise Skip(f"julia's stock image or libjulia not found ({stock}, {libjulia})")
        started = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
        work.chmod(0o755)
        try:
            trace = work / "trace.jl"
            say(f"tracing the catalogue on {julia} {version} (stock image)")
            stock_verdicts, stock_seconds = catalogue_verdicts(trace, "stock")
            say("tracing the native runner (ports/julia/conformance.jl)")
            runner_trace(julia, trace, work)
            statements = sum(1 for line in trace.read_text().splitlines() if line.startswith("precompile("))
            say(f"{statements} precompile statements; building the image (a few minutes)")
            obj = work / "sys.o"
            t = time.perf_counter()
            program = [str(PROGRAM), str(jsi.WORKER), str(jsi.PORT_SOURCES), str(trace), str(jsi.RUNNER)]
            flags = ["--startup-file=no", "--history-file=no", "-J", stock, f"--output-o={obj}"]
            run([julia, *flags, *program], BUILD_TIMEOUT)
            build_seconds = time.perf_counter() - t
            image = work / jsi.IMAGE
            run([cc, "-shared", "-o", str(image), "-Wl,--whole-archive", str(obj), "-Wl,--no-whole-archive", libjulia])
            obj.unlink()
            new_verdicts, new_seconds = catalogue_verdicts(None, image)
            differ = sorted(c for c in stock_verdicts if new_verdicts.get(c) != stock_verdicts[c])
            if differ:
                raise Skip(f"the new image changes the verdicts of {', '.join(differ[:5])}; not used")
            meta = {
                "format": jsi.FORMAT,
                "runtime_key": jsi.runtime_key(jl),
                "build_key": key,
                "julia": {"command": julia, "stock_image": stock, "version": version},
                "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                "precompile_statements": statements,
                "seconds": {
                    "total": round(time.perf_counter() - started, 1),
                    "build": round(build_seconds, 1),
                    "catalogue_stock_image": round(stock_seconds, 2),
                    "catalogue_this_image": round(new_seconds, 2),
                },
            }
            (work / jsi.META).write_text(json.dumps(meta, indent=1) + "\n")
            if final.exists():
                shutil.rmtree(final)
            os.replace(work, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for other in root.iterdir():  # older images (other keys) and failed builds' leftovers
            if other.is_dir() and other != final:
                shutil.rmtree(other, ignore_errors=True)
        secs = meta["seconds"]
        say(
            f"built {final / jsi.IMAGE} in {secs['total']:.0f} s; the catalogue on our Julia port, "  # type: ignore[index]
            f"cold: {secs['catalogue_stock_image']:.1f} s on the stock image, "  # type: ignore[index]
            f"{secs['catalogue_this_image']:.1f} s on this one"  # type: ignore[index]
        )
        return final / jsi.IMAGE


def run(argv: list[str], timeout: float = 600) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as exc:
        raise Skip(f"{Path(argv[0]).name} failed: {exc}") from None
    for line in proc.stdout.splitlines():
        say(line)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise Skip(f"{Path(argv[0]).name} exited with status {proc.returncode}:\n  " + "\n  ".join(tail))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the image is up to date")
    parser.add_argument("--strict", action="store_true", help="exit 1 when no image could be built")
    args = parser.parse_args(argv)
    from attention_ports.runtimes.impl import ImplementationUnavailable
    from attention_ports.runtimes.julia.adapter import find_julia

    try:
        try:
            julia = find_julia()
        except ImplementationUnavailable as exc:
            raise Skip(str(exc)) from None
        build(julia, force=args.force)
    except Skip as exc:
        say(
            f"not built: {exc}\njulia sysimage: the Julia worker uses julia's stock system image: correct, "
            "but a cold run compiles for ~3 s more"
        )
        return 1 if args.strict else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
