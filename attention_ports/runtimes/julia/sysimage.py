"""The custom Julia system image: where it lives, what it is keyed by, and when a worker may use it.

Why: a cold Julia worker spends most of its first seconds compiling, and most of that is not the
port's own code but the Base specialisations it calls (matrix products on ``Matrix{Float64}``,
broadcasting ``exp`` over them, ``maximum(...; dims)``, the protocol's reads and writes). A system
image built once from ``--trace-compile`` output over the catalogue holds those already compiled,
so a worker started with ``-J`` on it compiles little: the catalogue's Julia run drops from ~5 s
to ~1-2 s cold (docs/performance.md, "A custom Julia system image"). A user's port gains too: it
calls the same Base methods on the same types. The image is built by
``scripts/build_julia_sysimage.py`` (a step of ``make setup``); this module only finds it.

Two keys decide whether an image is still good:

- the *runtime* key: what makes using the image correct. The image holds the ``JuliaPortWorker``
  module compiled from ``worker.jl`` and the worker is then started from that copy (``-e``), not
  from the file, so the file's bytes are in the key; so are the julia that built it (its command,
  executable and stock image: path, size, modification time) and the CPU (the image is native code
  for the CPU it was built on). A worker uses an image only when this key matches; otherwise it
  starts on the stock image, as correct and only slower (``describe()`` says which).
- the *build* key: the runtime key plus what the precompiled set depends on (our port's sources,
  the build program). ``make setup`` rebuilds when it changes; until then an image built for
  older port sources is still used: the image also holds our port, loaded and compiled, but the
  worker uses that copy only while every port file is byte for byte the one it was built from
  (``load_port`` in worker.jl compares them) and includes the files afresh otherwise. An image
  changes what must be compiled, never the code that runs (the last bits of a wide sum may differ:
  the image's methods are compiled at -O2, a stock worker's at -O1; docs/performance.md). The same
  holds for the native runner
  (``ports/julia/conformance.jl``, in the build key): the image holds it compiled, and
  ``julia -J IMAGE conformance.jl ...`` (the test suite's many native runs, ``runner_flags``) runs
  that copy only while the file and worker.jl are byte for byte the ones it was built from.

``ATTENTION_PORTS_JULIA_SYSIMAGE``: ``auto`` (default: the matching image if there is one) or
``stock`` (never a custom image).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from attention_ports.core import paths
from attention_ports.core.io import file_identity

ENV = "ATTENTION_PORTS_JULIA_SYSIMAGE"
FORMAT = 1
WORKER = paths.PORTS / "julia" / "worker.jl"
PORT_SOURCES = paths.PORTS / "julia" / "src"
RUNNER = paths.PORTS / "julia" / "conformance.jl"  # the native runner, also held by the image
# How a worker is started from an image: the image already holds JuliaPortWorker (worker.jl, whose
# bytes are in the runtime key), so the file is not included again (that would replace the module
# and throw its compiled methods away).
ENTRY = "JuliaPortWorker.serve(ARGS[1])"
IMAGE = "sys.so"
META = "meta.json"


def directory() -> Path:
    """Where images are cached: the checkout's .local/julia-sysimage, or the per-user data folder."""
    return paths.julia_prefix().parent / "julia-sysimage"


def _cpu() -> str:
    """The CPU model and feature flags: native code built for one CPU may not run on another."""
    model = flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name") and not model:
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                if model and flags:
                    break
    except OSError:
        pass
    return hashlib.sha256(f"{model}\n{flags}".encode()).hexdigest()[:16]


def _digest(parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Julia:
    """The julia an image is for: the command we run and the stock image it loads by default."""

    command: str
    stock_image: str  # Base.JLOptions().image_file of a plain start
    version: str

    def identity(self) -> list[object]:
        return [self.command, file_identity(self.command), file_identity(self.stock_image), self.version]


def runtime_key(julia: Julia) -> str:
    return _digest({"format": FORMAT, "worker": _sha(WORKER), "julia": julia.identity(), "cpu": _cpu()})


def build_key(julia: Julia, extra: dict[str, str]) -> str:
    """The runtime key plus our port's sources and ``extra`` (the build program's own digests)."""
    sources = {p.name: _sha(p) for p in sorted(PORT_SOURCES.glob("*.jl"))}
    return _digest({"runtime": runtime_key(julia), "port": sources, **extra})


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Image:
    path: Path
    meta: dict[str, object]


def images() -> list[Image]:
    """Every built image in the cache, newest first (a folder per build key)."""
    found = []
    root = directory()
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    for folder in entries:
        try:
            meta = json.loads((folder / META).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("format") == FORMAT and (folder / IMAGE).is_file():
            found.append(Image(folder / IMAGE, meta))
    return sorted(found, key=lambda im: str(im.meta.get("built", "")), reverse=True)


def find(julia_command: str) -> Image | None:
    """The newest image whose runtime key matches ``julia_command`` as it is now, or None.

    Cheap (a few stat calls, one 20 KB hash, /proc/cpuinfo): it runs at every worker start.
    ``$ATTENTION_PORTS_JULIA_SYSIMAGE=stock`` turns it off.
    """
    mode = os.environ.get(ENV, "auto") or "auto"
    if mode == "stock":
        return None
    if mode != "auto":
        raise ValueError(f"{ENV}={mode!r}: expected 'auto' or 'stock'")
    for image in images():
        info = image.meta.get("julia")
        if not isinstance(info, dict) or info.get("command") != julia_command:
            continue
        julia = Julia(julia_command, str(info.get("stock_image", "")), str(info.get("version", "")))
        if image.meta.get("runtime_key") == runtime_key(julia):
            return image
    return None


def runner_flags(julia_command: str) -> tuple[str, ...]:
    """``("-J", image)`` for running the native runner on the matching image (its guard decides
    whether the copy inside may be used), or ``()``: the flags tests add to ``julia conformance.jl``."""
    image = find(julia_command)
    return ("-J", str(image.path)) if image is not None else ()
