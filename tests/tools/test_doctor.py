"""``attention-ports doctor`` and ``setup`` in this checkout: real probes of the real runtimes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attention_ports.core import paths
from attention_ports.tools import installers
from tests.conftest import require

ROOT = Path(__file__).resolve().parents[2]
DOCTOR = [sys.executable, "-m", "attention_ports.cli", "doctor"]


def doctor(*args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    full = dict(os.environ)
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    return subprocess.run([*DOCTOR, *args], capture_output=True, text=True, env=full, timeout=600, check=False)


def line_of(out: str, name: str) -> str:
    return next(line for line in out.splitlines() if line.split()[1:2] == [name] or line.split()[1:3] == name.split())


def test_doctor_reports_every_runtime_of_this_checkout() -> None:
    proc = doctor()
    out = proc.stdout
    assert out.splitlines()[0] == f"attention-ports 1.0.0: checkout {ROOT}"
    assert line_of(out, "Python").startswith("ok ") and sys.executable in line_of(out, "Python")
    assert line_of(out, "NumPy").startswith("ok ") and "core type " in line_of(out, "NumPy")
    assert f"cases in {ROOT / 'fixtures'} (checkout)" in line_of(out, "fixtures")
    for name in ("torch", "R", "rpy2", "Julia", "julia worker"):
        line = line_of(out, name)
        if line.startswith("MISSING"):
            require(name, line)  # make setup provides them; under CI=true a missing one fails here
    assert line_of(out, "juliacall").startswith("-- ") and "Julia >= 1.10.3" in line_of(out, "juliacall")
    assert proc.returncode == 0, out
    assert out.splitlines()[-1] == "everything required is present"


@pytest.mark.parametrize("core", ["Sandybridge", "Haswell"])
def test_doctor_names_the_blas_kernel_numpy_and_julia_really_use(core: str) -> None:
    proc = doctor("--need", "julia", OPENBLAS_CORETYPE=core)
    numpy_line = line_of(proc.stdout, "NumPy")
    assert f"core type {core}" in numpy_line and f"(OPENBLAS_CORETYPE={core})" in numpy_line
    julia_line = line_of(proc.stdout, "Julia")
    if julia_line.startswith("MISSING"):
        require("julia", julia_line)
    assert f"BLAS core type {core} (OPENBLAS_CORETYPE={core})" in julia_line


def test_a_missing_runtime_fails_only_when_needed_and_says_how_to_get_it(tmp_path: Path) -> None:
    no_julia = {"JULIA": str(tmp_path / "no-julia")}  # $JULIA wins over every other julia
    needed = doctor("--need", "julia", **no_julia)
    assert needed.returncode == 1, needed.stdout
    lines = needed.stdout.splitlines()
    i = lines.index(line_of(needed.stdout, "Julia"))
    assert lines[i].startswith("MISSING ") and f"$JULIA={no_julia['JULIA']!r} is not an executable" in lines[i]
    assert lines[i + 1].split() == ["to", "get", "it:", "attention-ports", "setup", "julia"]
    assert lines[-1].startswith("missing: Julia, julia worker ")
    # Not asked for, it is not probed and cannot fail the run.
    other = doctor("--need", "r", **no_julia)
    assert line_of(other.stdout, "Julia").split(None, 2) == ["--", "Julia", "not checked (not asked for with --need)"]
    if line_of(other.stdout, "rpy2").startswith("MISSING"):
        require("rpy2", line_of(other.stdout, "rpy2"))
    assert other.returncode == 0, other.stdout


def test_setup_runs_the_installers_from_the_asset_root() -> None:
    argv, env = installers.command("r")
    assert argv == ["bash", str(paths.SCRIPTS / "install_r.sh"), sys.executable]
    argv, env = installers.command("julia")
    assert argv == ["bash", str(ROOT / "scripts" / "install_julia.sh")]
    # In a checkout Julia goes where make setup puts it; an installed package uses a per-user folder.
    assert env["ATTENTION_PORTS_JULIA_PREFIX"] == str(ROOT / ".local" / "julia")
    with pytest.raises(ValueError, match="setup takes one of r, julia"):
        installers.command("perl")


def test_a_report_asks_an_unchanged_runtime_its_version_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """runtime_versions (every report's meta.versions) asks the Rscript on PATH; again only when that
    file changed or its last answer was a failure."""
    from attention_ports.tools import doctor as doctor_module

    asked = tmp_path / "asked"
    rscript = tmp_path / "Rscript"

    def fake(answer: str, status: int = 0) -> None:
        rscript.write_text(f"#!/bin/sh\necho x >> {asked}\necho '{answer}'\nexit {status}\n")
        rscript.chmod(0o755)

    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    fake("R version 9.9.9", status=1)
    assert doctor_module.runtime_versions(["r"])["r"] == "unknown: R version 9.9.9"
    fake("R version 9.9.9")
    for _ in range(3):
        assert doctor_module.runtime_versions(["r"])["r"] == "R version 9.9.9"
    assert asked.read_text().count("x") == 2  # the failure, then one answer for three reports
    fake("R version 10.0.0 (another build)")  # an upgrade: a new file
    assert doctor_module.runtime_versions(["r"])["r"] == "R version 10.0.0 (another build)"
    assert asked.read_text().count("x") == 3
