"""The pytest plugin (attention_ports/pytest_plugin.py, a ``pytest11`` entry point) as a team's own
pytest sees it: run from a folder outside this checkout, on the installed conformance package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SOFTMAX_ONLY = ROOT / "tests" / "data" / "ports" / "r" / "softmax_only.R"
SYNTAX_ERROR = ROOT / "tests" / "data" / "ports" / "r" / "syntax_error.R"
CONFORMANCE = ["--pyargs", "attention_ports.conformance"]


def run_pytest(cwd: Path, *args: str, **env: str | None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if k not in {"CI", "PYTEST_ADDOPTS"}}
    for k, v in env.items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    # hypothesis's own plugin, which this venv has (the random tier) and the conformance package
    # never uses: ~0.2 s of CPU in each of the ~35 sessions and xdist workers these tests start
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _out(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


def test_a_team_runs_the_conformance_package_with_its_own_pytest(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, *CONFORMANCE, "--impl", "reference", "--case", "seed00*", "-v")
    assert proc.returncode == 0, _out(proc)
    assert "test_cases.py::test_case[reference-seed000_four_words] PASSED" in proc.stdout
    assert "fixture cases passed per implementation: reference: 6/6" in proc.stdout
    assert "6 passed" in proc.stdout


def test_port_selects_only_the_users_implementation(tmp_path: Path) -> None:
    proc = run_pytest(
        tmp_path, *CONFORMANCE, "--port", f"r={SOFTMAX_ONLY}", "--case", "softmax_*", "--collect-only", "-q"
    )
    assert proc.returncode == 0, _out(proc)
    ids = [line for line in proc.stdout.splitlines() if "::test_case[" in line]
    assert ids and all("::test_case[r-softmax_" in i for i in ids), ids


def test_a_bad_port_option_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, *CONFORMANCE, "--port", f"r={tmp_path / 'nope.R'}")
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, _out(proc)
    assert f"--port r: no such file: {tmp_path / 'nope.R'}" in proc.stderr


def test_under_ci_an_implementation_that_passed_zero_cases_fails_the_run(tmp_path: Path) -> None:
    # softmax_only.R defines no attention: every sdpa case is a skipped partial-port case, no test
    # fails, and yet the port passed nothing. Locally that is green; under CI=true it must not be.
    args = (*CONFORMANCE, "--port", f"r={SOFTMAX_ONLY}", "--case", "sdpa_L2_d3", "--case", "sdpa_L8_d1")
    local = run_pytest(tmp_path, *args)
    assert local.returncode == 0, _out(local)
    assert "2 skipped" in local.stdout and "fixture cases passed per implementation: r: 0/2" in local.stdout
    ci = run_pytest(tmp_path, *args, CI="true")
    assert ci.returncode == pytest.ExitCode.TESTS_FAILED, _out(ci)
    assert "CI: no fixture case passed on r: refusing to call this run green" in ci.stdout
    # One passing case is enough proof that the cases ran.
    one = run_pytest(tmp_path, *args, "--case", "softmax_ties", CI="true")
    assert one.returncode == 0, _out(one)
    assert "fixture cases passed per implementation: r: 1/3" in one.stdout
    # A pytest-split group of that run that holds only sdpa cases is a part of the run, not the
    # run: no fixture case of the partial port passed in it, and that is no failure (its JUnit
    # says 0 failures too); the rule is the whole run's, and the session says it left it.
    group = run_pytest(tmp_path, *args, "--case", "softmax_ties", "--splits", "3", "--group", "3", CI="true")
    assert group.returncode == 0, _out(group)
    assert "1 skipped, 2 deselected" in group.stdout and "r: 0/1" in group.stdout, _out(group)
    assert "which ran 1 of its 3 selected cases" in group.stdout and "refusing" not in group.stdout


def test_a_port_that_cannot_load_is_an_error_without_ci_too_its_error_printed_once(tmp_path: Path) -> None:
    # An explicitly given port that does not parse is the port's failure, as in verify: not a
    # missing runtime to skip (before: 2 skipped, exit 0). The first case carries the R error, the
    # other points at it.
    proc = run_pytest(tmp_path, *CONFORMANCE, "--port", f"r={SYNTAX_ERROR}", "--case", "softmax_[tr]*")
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, _out(proc)
    assert "2 errors" in proc.stdout and "skipped" not in proc.stdout, _out(proc)
    assert proc.stdout.count(f"r: cannot load port {SYNTAX_ERROR}") == 1, _out(proc)
    assert f"r: the port {SYNTAX_ERROR} did not load: its error is in the failure of " in proc.stdout


def test_the_plugin_loads_by_entry_point_or_by_p_as_one_plugin(tmp_path: Path) -> None:
    args = (*CONFORMANCE, "--impl", "reference", "--case", "softmax_ties")
    # Autoloaded (the entry point) and named with -p at the same time: still one plugin.
    both = run_pytest(tmp_path, "-p", "attention_ports.pytest_plugin", *args)
    assert both.returncode == 0, _out(both)
    # Where autoloading is off, -p alone brings it.
    explicit = run_pytest(tmp_path, "-p", "attention_ports.pytest_plugin", *args, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    assert explicit.returncode == 0, _out(explicit)
    assert "reference: 1/1" in explicit.stdout
    # And without either, pytest does not know the options: the entry point is what loads it.
    neither = run_pytest(tmp_path, *args, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    assert neither.returncode == pytest.ExitCode.USAGE_ERROR and "--impl" in neither.stderr, _out(neither)


def test_under_xdist_the_zero_pass_rule_is_decided_on_the_controller(tmp_path: Path) -> None:
    # Two workers each see only their share of the cases; the controller sees every report. The
    # same verdicts as without xdist, the summary line included.
    args = (*CONFORMANCE, "-n", "2", "--port", f"r={SOFTMAX_ONLY}", "--case", "sdpa_L2_d3", "--case", "sdpa_L8_d1")
    ci = run_pytest(tmp_path, *args, CI="true")
    assert ci.returncode == pytest.ExitCode.TESTS_FAILED, _out(ci)
    assert "2 skipped" in ci.stdout and "fixture cases passed per implementation: r: 0/2" in ci.stdout
    assert "CI: no fixture case passed on r: refusing to call this run green" in ci.stdout
    one = run_pytest(tmp_path, *args, "--case", "softmax_ties", "--case", "softmax_random_3x5", CI="true")
    assert one.returncode == 0, _out(one)
    assert "fixture cases passed per implementation: r: 2/4" in one.stdout
    assert "created: 2/2 workers" in one.stdout
    # A pytest-split group of that run holding only an sdpa case (the third of three): the workers
    # deselected the others, they tell the controller, and the rule is left to the whole run.
    group = run_pytest(tmp_path, *args, "--case", "softmax_ties", "--splits", "3", "--group", "3", CI="true")
    assert group.returncode == 0, _out(group)
    assert "fixture cases passed per implementation: r: 0/1" in group.stdout, _out(group)
    assert "which ran 1 of its 3 selected cases" in group.stdout and "refusing" not in group.stdout


def test_under_xdist_loadgroup_one_worker_runs_all_of_an_implementations_cases(tmp_path: Path) -> None:
    # The plugin groups an implementation's cases (its R or Julia worker starts once per session);
    # so does this repository's conftest for its costly module fixtures. Both break silently if the
    # marks come after pytest-xdist read them, or if xdist cannot rewrite a node id (pytest 9.2).
    proc = run_pytest(
        tmp_path, *CONFORMANCE, "-n", "2", "--dist", "loadgroup", "--impl", "reference", "--case", "seed00*", "-v"
    )
    assert proc.returncode == 0, _out(proc)
    passed = [line.split() for line in proc.stdout.splitlines() if " PASSED " in line]
    assert len(passed) == 6 and len({words[0] for words in passed}) == 1, _out(proc)  # one worker: [gw0] or [gw1]
    assert all(words[-1].endswith("]@impl-reference") for words in passed), _out(proc)


def test_the_contracts_pytest_command_runs_the_fixture_cases(tmp_path: Path) -> None:
    """ports/CONTRACT.md's own pytest line, as a user pastes it (their port's path put in)."""
    from tests.faults.conftest import check_runtime

    check_runtime("r")
    text = (ROOT / "ports" / "CONTRACT.md").read_text()
    (line,) = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("pytest ") and "--port r=" in ln]
    args = line.replace("path/to/my_port.R", str(SOFTMAX_ONLY)).split()[1:]
    proc = run_pytest(tmp_path, *args, "-q")
    assert proc.returncode == 0, _out(proc)  # 5 would be "no tests ran"
    from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries

    n_softmax = sum(e["op"] == "softmax" for e in iter_entries(REPO_FIXTURES))  # all the port declares
    assert f"{n_softmax} passed" in proc.stdout, _out(proc)


# --- the regression gates (--ap-known-failures, --ap-baseline): attention_ports/pipeline/gates.py ---


def test_the_gates_under_xdist_fail_a_listed_case_that_passes_and_a_regression(tmp_path: Path) -> None:
    """The reference, two cases on two workers: one listed as a known failure though it passes, one
    12x less accurate than a crafted baseline says it was (above the floor given). Each fails its own
    test with the line to delete or the numbers; the controller writes the whole session's diff."""
    import json

    from attention_ports import cli

    base = tmp_path / "base.json"
    cases = ("--case", "softmax_ties", "--case", "softmax_large_logits")
    assert cli.main(["verify", "--quiet", "--impl", "reference", *cases, "--json", str(base)]) == 0
    doc = json.loads(base.read_text())
    for row in doc["results"]:
        if row["case"] == "softmax_large_logits":
            row["err_over_bound"] /= 12
    base.write_text(json.dumps(doc))
    known = tmp_path / "reference.known"
    known.write_text("# the reference's known failures\nsoftmax_ties y  # listed, but it passes\n")
    md = tmp_path / "diff.md"
    gates = ("--ap-known-failures", f"reference={known}", "--ap-baseline", str(base), "--ap-baseline-floor", "0.005")
    proc = run_pytest(
        tmp_path, *CONFORMANCE, "-n", "2", "--impl", "reference", *cases, *gates, "--ap-baseline-diff", str(md)
    )
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, _out(proc)
    assert (
        f"{known}:2: reference softmax_ties y now passes: delete the line `softmax_ties y  # listed, but it passes`"
        in proc.stdout
    )
    assert "reference softmax_large_logits y: err/bnd 0.00619 -> 0.0742 (12x" in proc.stdout
    assert "2 failed" in proc.stdout
    assert "**1 worse, 0 better** of 2 outputs compared" in md.read_text()  # both workers' outputs


def test_the_gates_make_a_listed_failure_of_a_port_a_known_failure(tmp_path: Path) -> None:
    """A real R port with a real bug (its causal mask off by one): the case it fails, listed, is
    xfail and the session passes; the case it passes still passes."""
    from tests.faults.conftest import check_runtime

    check_runtime("r")
    port = ROOT / "tests" / "data" / "ports" / "r" / "causal_off_by_one.R"
    known = tmp_path / "r.known"
    known.write_text("sdpa_causal_bool *  # the causal mask is off by one: fixed in the next release\n")
    args = (*CONFORMANCE, "--port", f"r={port}", "--case", "sdpa_causal_bool", "--case", "sdpa_L2_d3", "-rx")
    proc = run_pytest(tmp_path, *args, "--ap-known-failures", f"r={known}")
    assert proc.returncode == 0, _out(proc)
    assert "1 passed, 1 xfailed" in proc.stdout
    assert f"known failure ({known}:1: the causal mask is off by one: fixed in the next release)" in proc.stdout
    assert f"known failure: r sdpa_causal_bool * ({known}:1:" in proc.stdout
