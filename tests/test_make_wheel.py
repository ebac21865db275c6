"""``make wheel`` builds the pure-Python wheel from a venv with pip alone: it never runs ``make
setup`` (torch, R, Julia, the Julia image), and makes the venv itself when there is none."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.wheel_env import ROOT, source_files


def _copy_sources(dst: Path) -> Path:
    for rel in source_files():
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, dst / rel)
    return dst


def test_make_wheel_without_a_venv_makes_one_and_never_runs_setup(tmp_path: Path) -> None:
    if shutil.which("make") is None:
        pytest.skip("no make")
    src = _copy_sources(tmp_path / "src")
    venv = tmp_path / "fresh"
    # --no-print-directory: under `make test` (MAKELEVEL set) make would add "Entering directory" lines
    plan = subprocess.run(
        ["make", "--no-print-directory", "-n", "wheel", f"VENV={venv}"],
        cwd=src,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = plan.stdout.splitlines()
    assert lines[0] == f"python3 -m venv {venv}"
    assert any(f"{venv}/bin/python -m pip wheel --no-deps" in ln for ln in lines)
    assert "scripts/setup.sh" not in plan.stdout and "julia" not in plan.stdout.lower()


def test_make_wheel_builds_the_wheel_from_a_venv_with_pip_alone(tmp_path: Path) -> None:
    """This interpreter's venv stands for the user's; offline, so its own setuptools builds."""
    if shutil.which("make") is None:
        pytest.skip("no make")
    src = _copy_sources(tmp_path / "src")
    venv = Path(sys.prefix)
    proc = subprocess.run(
        ["make", "wheel", f"VENV={venv}", "PIP_WHEEL_FLAGS=--no-build-isolation"],
        cwd=src,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "setup:" not in proc.stdout + proc.stderr  # scripts/setup.sh's voice
    (wheel,) = (src / "dist").glob("attention_ports-*-py3-none-any.whl")
    assert "attention_ports/cli.py" in zipfile.ZipFile(wheel).namelist()
