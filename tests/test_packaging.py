"""The installable tool: a wheel built from this checkout, installed into a fresh venv outside it,
verifies a user's R and Julia port from a temporary folder, runs its pytest plugin, its doctor and
its set-up command, all from its own packaged data.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries
from tests.wheel_env import ROOT, InstalledTool, source_files

USER_PORTS = ROOT / "tests" / "data" / "ports"
SDPA_GLOBS = ["--case", "softmax_*", "--case", "sdpa_*"]


def _n_cases(*prefixes: str) -> int:
    return sum(e["id"].startswith(prefixes) for e in iter_entries(REPO_FIXTURES))


def _out(proc) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"


def test_the_wheel_carries_the_fixtures_contract_ports_and_installers(installed_tool: InstalledTool) -> None:
    names = set(zipfile.ZipFile(installed_tool.wheel).namelist())
    committed = source_files()
    # Every committed fixture file (catalogue, manifest, cases, data, readers) under the asset root.
    fixtures = [p for p in committed if p.startswith("fixtures/")]
    assert {"fixtures/manifest.json", "fixtures/catalogue.toml", "fixtures/data/sentiment.csv"} <= set(fixtures)
    assert any(p.startswith("fixtures/readers/") for p in fixtures)
    assert sorted(f for f in fixtures if f"attention_ports/_assets/{f}" not in names) == []
    # Every case file the manifest names is a committed file, so the wheel has them all.
    manifest = json.loads((REPO_FIXTURES / "manifest.json").read_text())
    listed = {
        f
        for c in manifest["cases"]
        for group in ("inputs", "expected")
        for m in c[group].values()
        for f in (m["file"], m.get("bound_file"))  # fixture format v2 adds an error bound per output
        if f
    }
    assert listed and not {f for f in listed if f"attention_ports/_assets/fixtures/{f}" not in names}
    # The contract, our ports and their native runners, the installers.
    port_files = [p for p in committed if p.startswith("ports/") and p.endswith((".R", ".jl", ".md"))]
    assert "ports/CONTRACT.md" in port_files and "ports/julia/worker.jl" in port_files
    assert sorted(p for p in port_files if f"attention_ports/_assets/{p}" not in names) == []
    assert {"attention_ports/_assets/scripts/install_r.sh", "attention_ports/_assets/scripts/install_julia.sh"} <= names
    # Every committed module of the package and of the reference, which travels inside it as
    # attention_ports.reference (a new subpackage must be added to pyproject).
    modules = [
        p if p.startswith("attention_ports/") else f"attention_ports/{p}"
        for p in committed
        if p.endswith(".py") and p.split("/")[0] in {"attention_ports", "reference"}
    ]
    assert "attention_ports/conformance/test_cases.py" in modules
    assert "attention_ports/reference/attention.py" in modules
    assert sorted(p for p in modules if p not in names) == []
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(installed_tool.wheel).read(entry_points).decode()
    assert "[pytest11]\nattention_ports.pytest_plugin = attention_ports.pytest_plugin" in text
    # the console script is cli.entry: main in a process that is a child subreaper (runtimes/reaper.py)
    assert "attention-ports = attention_ports.cli:entry" in text


def test_the_installed_package_finds_its_data_in_site_packages(installed_tool: InstalledTool, user_dir: Path) -> None:
    code = (
        "from attention_ports.core import paths; import attention_ports.reference.sentiment as s, attention_ports;"
        "print(paths.installed(), paths.FIXTURES, paths.CONTRACT.is_file(), s.CSV_PATH.is_file(),"
        " attention_ports.__file__, paths.PORTS, sep='|')"
    )
    proc = installed_tool.run(["python", "-c", code], user_dir)
    assert proc.returncode == 0, _out(proc)
    installed, fixtures, contract, csv, pkg, ports = proc.stdout.strip().split("|")
    site = str(installed_tool.venv)
    assert installed == "True" and contract == "True" and csv == "True"
    assert fixtures.startswith(site) and fixtures.endswith("attention_ports/_assets/fixtures")
    assert pkg.startswith(site) and ports.startswith(site), "the checkout leaked into the installed venv"
    # The packaged fixtures are read-only: generate wants a folder of its own.
    gen = installed_tool.run(["attention-ports", "generate"], user_dir)
    assert gen.returncode == 2 and "an installed package's fixtures are read-only; pass --out DIR" in gen.stderr


def test_the_installed_wheel_adds_one_top_level_package_and_its_metadata(installed_tool: InstalledTool) -> None:
    """Nothing named ``ports`` or ``reference`` (or anything else) lands in site-packages: the
    reference, the ports and the data travel inside ``attention_ports``."""
    (record,) = installed_tool.venv.glob("lib/python*/site-packages/attention_ports-*.dist-info/RECORD")
    installed = [line.split(",")[0] for line in record.read_text().splitlines() if line]
    # Entries outside site-packages (the console script in bin/) start with "..".
    top = sorted({path.split("/")[0] for path in installed if not path.startswith("..")})
    assert top == ["attention_ports", record.parent.name]
    site = record.parent.parent
    assert not (site / "ports").exists() and not (site / "reference").exists()


# What a port that ignores the scale (user_sdpa_unscaled.*) must get, whatever else the catalogue
# holds: softmax is untouched; a scale of 1 (sdpa_unscaled) or d_k = 1 (sdpa_L1_d1: 1/sqrt(1))
# hides the bug; any other scale shows it.
MUST_PASS_UNSCALED = {"sdpa_unscaled", "sdpa_L1_d1"}
MUST_FAIL_UNSCALED = {"sdpa_L2_d3", "sdpa_L16_d16", "sdpa_custom_scale"}


def case_statuses(report: Path) -> dict[str, set[str]]:
    """case id -> the statuses of its outputs, from a ``verify --json`` report."""
    got: dict[str, set[str]] = {}
    for row in json.loads(report.read_text())["results"]:
        got.setdefault(row["case"], set()).add(row["status"])
    return got


def assert_verdicts(tool: InstalledTool, lang: str, good: str, bad: str, cwd: Path, **env: str) -> None:
    """The correct port passes every selected case; the unscaled one fails where the scale matters."""
    n = _n_cases("softmax_", "sdpa_")
    argv = ["attention-ports", "verify", "--quiet", *SDPA_GLOBS, "--json"]
    ok = tool.run([*argv, "good.json", "--port", f"{lang}={good}"], cwd, **env)
    assert ok.returncode == 0, _out(ok)
    statuses = case_statuses(cwd / "good.json")
    assert len(statuses) == n and all(s == {"pass"} for s in statuses.values()), statuses
    wrong = tool.run([*argv, "bad.json", "--port", f"{lang}={bad}"], cwd, **env)
    assert wrong.returncode == 1, _out(wrong)
    statuses = case_statuses(cwd / "bad.json")
    passed = {c for c, s in statuses.items() if s == {"pass"}}
    failed = {c for c, s in statuses.items() if "fail" in s}
    assert {c for c in statuses if c.startswith("softmax_")} | MUST_PASS_UNSCALED <= passed
    assert MUST_FAIL_UNSCALED <= failed and passed | failed == set(statuses), statuses
    assert f"FAIL [{lang}] sdpa_L2_d3 weights: " in wrong.stdout  # --quiet: one line per failing output


def test_installed_verify_judges_a_users_r_port(installed_tool: InstalledTool, user_dir: Path) -> None:
    for name in ("user_sdpa.R", "user_sdpa_unscaled.R"):
        shutil.copy(USER_PORTS / "r" / name, user_dir / name)
    assert_verdicts(installed_tool, "r", "user_sdpa.R", "user_sdpa_unscaled.R", user_dir)


def test_installed_verify_judges_a_users_julia_port(
    installed_tool: InstalledTool, user_dir: Path, checkout_julia: str
) -> None:
    for name in ("user_sdpa.jl", "user_sdpa_unscaled.jl"):
        shutil.copy(USER_PORTS / "julia" / name, user_dir / name)
    assert_verdicts(installed_tool, "julia", "user_sdpa.jl", "user_sdpa_unscaled.jl", user_dir, JULIA=checkout_julia)


def test_installed_pytest_plugin_runs_the_conformance_suite(installed_tool: InstalledTool, user_dir: Path) -> None:
    for name in ("user_sdpa.R", "user_sdpa_unscaled.R"):
        shutil.copy(USER_PORTS / "r" / name, user_dir / name)
    n = _n_cases("softmax_", "sdpa_")
    argv = ["python", "-m", "pytest", "-p", "no:cacheprovider", "-rf", "--pyargs", "attention_ports.conformance"]
    good = installed_tool.run([*argv, *SDPA_GLOBS, "--port", "r=user_sdpa.R"], user_dir, CI="true")
    assert good.returncode == 0, _out(good)
    assert f"{n} passed" in good.stdout and f"fixture cases passed per implementation: r: {n}/{n}" in good.stdout
    bad = installed_tool.run([*argv, *SDPA_GLOBS, "--port", "r=user_sdpa_unscaled.R"], user_dir, CI="true")
    assert bad.returncode == 1, _out(bad)
    failed = {
        line.split("::test_case[r-")[1].split("]")[0] for line in bad.stdout.splitlines() if line.startswith("FAILED ")
    }
    assert MUST_FAIL_UNSCALED <= failed and not failed & MUST_PASS_UNSCALED, failed


def test_installed_setup_and_doctor_use_a_per_user_julia(installed_tool: InstalledTool, tmp_path: Path) -> None:
    """Outside a checkout, `setup julia` installs into $XDG_DATA_HOME/attention-ports/julia and the
    adapter and doctor find it there. The checkout's unpacked Julia stands in for a fresh download
    (a symlink), so the installer takes its "already installed" path and checks it."""
    local = ROOT / ".local" / "julia"
    if not (local / "bin" / "julia-run").is_file():
        # A machine whose Julia is on PATH or in $JULIA has no unpacked one to borrow; the
        # JULIA route is covered by the verify test above.
        assert os.environ.get("JULIA") or shutil.which("julia"), "no julia at all, yet checkout_julia found one"
        return
    xdg = tmp_path / "xdg"
    (xdg / "attention-ports").mkdir(parents=True)
    (xdg / "attention-ports" / "julia").symlink_to(local, target_is_directory=True)
    path = os.pathsep.join(
        p for p in installed_tool.env()["PATH"].split(os.pathsep) if not (Path(p) / "julia").exists()
    )
    env = {"XDG_DATA_HOME": str(xdg), "JULIA": None, "PATH": path}

    setup = installed_tool.run(["attention-ports", "setup", "julia"], tmp_path, **env)
    assert setup.returncode == 0, _out(setup)
    wrapper = xdg / "attention-ports" / "julia" / "bin" / "julia-run"
    assert f"already installed in {xdg / 'attention-ports' / 'julia'}" in setup.stderr
    assert setup.stdout.splitlines()[0] == str(wrapper)  # the installer's last line: the julia to run

    doctor = installed_tool.run(["attention-ports", "doctor", "--need", "r", "--need", "julia"], tmp_path, **env)
    assert doctor.returncode == 0, _out(doctor)
    lines = doctor.stdout.splitlines()
    assert lines[0].startswith("attention-ports 1.0.0: installed package ")
    julia_line = next(line for line in lines if line.split()[1:2] == ["Julia"])
    assert julia_line.startswith("ok ") and f"({wrapper})" in julia_line and "BLAS core type " in julia_line
    assert any(line.startswith("ok ") and " rpy2 " in line for line in lines)
    assert any(line.startswith("-- ") and " juliacall " in line and "Julia >= 1.10.3" in line for line in lines)
    assert lines[-1] == "everything required is present"

    # Everything is required by default, and this venv has no torch: exit 1, with the command.
    full = installed_tool.run(["attention-ports", "doctor"], tmp_path, **env)
    assert full.returncode == 1, _out(full)
    torch_line = next(i for i, line in enumerate(full.stdout.splitlines()) if line.split()[1:2] == ["torch"])
    assert full.stdout.splitlines()[torch_line].startswith("MISSING ")
    assert "to get it: " in full.stdout.splitlines()[torch_line + 1]
    assert "-m pip install 'torch>=2.1'" in full.stdout.splitlines()[torch_line + 1]
    assert full.stdout.splitlines()[-1].startswith("missing: torch ")
