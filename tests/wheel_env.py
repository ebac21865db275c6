"""attention-ports as a user gets it: a wheel built from this checkout, installed into a fresh venv.

The wheel is built from a copy of the files git would commit (tracked, plus untracked ones that
are not ignored), so a file that exists only in this working tree, or a data folder missing from
the package configuration, shows up as a failure here rather than on a user's machine. The venv
lives outside the checkout and has nothing of it on its path: every command runs from a
temporary folder with the venv's ``bin`` first on PATH, as in a team's CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_SKIP_DIRS = {".git", ".venv", ".local", "build", "dist", "__pycache__", ".pytest_cache", ".ruff_cache"}
PIP_QUIET = ["--disable-pip-version-check", "--quiet"]


def source_files(root: Path = ROOT) -> list[str]:
    """Repository-relative paths of the files a commit would hold."""
    if (root / ".git").exists():
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode()
        return sorted(p for p in out.split("\0") if p and (root / p).is_file())
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS and not d.endswith(".egg-info")]
        files += [str(Path(dirpath, f).relative_to(root)) for f in filenames]
    return sorted(files)


def _has_setuptools(major: int) -> bool:
    try:
        from importlib.metadata import version

        return int(version("setuptools").split(".")[0]) >= major
    except Exception:
        return False


def build_wheel(out_dir: Path, work: Path) -> Path:
    src = work / "src"
    for rel in source_files():
        dst = src / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst)
    # Build with this interpreter's setuptools when it is recent enough (saves pip's ~3 s isolated
    # build environment); otherwise as pip does by default.
    no_isolation = ["--no-build-isolation"] if _has_setuptools(64) else []
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", *PIP_QUIET, *no_isolation, "--no-deps", "-w", str(out_dir), str(src)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"building the wheel failed:\n{proc.stdout}\n{proc.stderr}"
    (wheel,) = out_dir.glob("attention_ports-*.whl")
    return wheel


@dataclass
class InstalledTool:
    """A venv holding the wheel; ``run`` executes a command the way a user's shell would."""

    venv: Path
    wheel: Path
    seconds: dict[str, float] = field(default_factory=dict)
    data_home: Path | None = None  # its $XDG_DATA_HOME (see install)

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}}
        ours = str(ROOT / ".venv" / "bin")
        path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours]
        env["PATH"] = os.pathsep.join([str(self.bin), *path])
        env["VIRTUAL_ENV"] = str(self.venv)
        if self.data_home is not None:
            env["XDG_DATA_HOME"] = str(self.data_home)
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def run(
        self, argv: list[str], cwd: Path, timeout: float = 600, **extra: str | None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=cwd, env=self.env(**extra), capture_output=True, text=True, timeout=timeout, check=False
        )


def install(work: Path) -> InstalledTool:
    """Build the wheel, make a venv under ``work`` and install the wheel, pytest and (by the
    packaged ``attention-ports setup r``) rpy2 into it. ``work`` must be outside the checkout."""
    assert not work.resolve().is_relative_to(ROOT), f"{work} is inside the checkout"
    seconds = {}
    t = time.perf_counter()
    wheel = build_wheel(work / "dist", work)
    seconds["build wheel"] = time.perf_counter() - t

    t = time.perf_counter()
    venv = work / "venv"
    # No ensurepip (~5 s): this interpreter's pip installs into the new venv (pip >= 22.3 has
    # --python), pip itself included, since `attention-ports setup r` and users need one there.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
    # The checkout's Julia system image, where the installed tool looks for one (its user data
    # folder): the tests hand it the checkout's Julia, so the image's runtime key matches, and every
    # Julia start of the CI example and packaging tests skips recompiling the worker (the image
    # gives the stock one's verdicts; docs/performance.md says which last bits may differ). A user's first
    # runs are on the stock image; what these tests check is verdicts and reports, not start-up.
    data_home = work / "data"
    (data_home / "attention-ports").mkdir(parents=True)
    images = ROOT / ".local" / "julia-sysimage"
    if images.is_dir():
        (data_home / "attention-ports" / "julia-sysimage").symlink_to(images, target_is_directory=True)
    tool = InstalledTool(venv, wheel, seconds, data_home)
    # --no-compile: pip would byte-compile every module of the wheel and its dependencies (half of
    # this step, ~3.5 s idle); Python compiles what the tests import when they import it.
    python = str(venv / "bin" / "python")
    argv = [sys.executable, "-m", "pip", "--python", python, "install", *PIP_QUIET, "--no-compile"]
    pip = tool.run([*argv, str(wheel), "pytest", "pip"], work)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    seconds["venv + pip install wheel, pytest"] = time.perf_counter() - t

    t = time.perf_counter()
    setup = tool.run(["attention-ports", "setup", "r"], work)
    assert setup.returncode == 0, f"attention-ports setup r failed:\n{setup.stdout}\n{setup.stderr}"
    seconds["attention-ports setup r (rpy2)"] = time.perf_counter() - t
    return tool
