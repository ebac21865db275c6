"""The example CI workflow (examples/ci/github-actions.yml) runs: its shell steps, taken from the
YAML as they are, executed in order in a temporary folder holding a polyglot team's R port and
Julia port, with the installed wheel standing in for ``ATTENTION_PORTS_PIP``, ``CI=true`` and a
``GITHUB_STEP_SUMMARY`` file as GitHub sets them: the matrix's shard jobs one after another
(``SHARD`` as the matrix sets it), then the merge job; on correct ports (green) and on a wrong R
port (red), where every report must exist as well.

The ``uses:`` steps are GitHub's (check-out, Python, Julia, artifact upload and download); the test
stands in for them: the folder is the check-out, the venv of ``installed_tool`` is the Python, the
checkout's Julia (``$JULIA``) is the Julia, the shard jobs' ``reports/`` folder is the artifacts
downloaded, and the reports the upload would take must exist. A job runs as GitHub runs one: after
a step fails, only the steps marked ``if: always()`` run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries
from tests.wheel_env import ROOT, InstalledTool

WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
STANDS_IN_FOR = {
    "actions/checkout",
    "actions/setup-python",
    "julia-actions/setup-julia",
    "actions/upload-artifact",
    "actions/download-artifact",
}
PORT_SOURCES = {
    "r": sorted((ROOT / "ports" / "r" / "R").glob("*.R")),
    "julia": sorted((ROOT / "ports/julia/src").glob("*.jl")),
}
PORT_FILE = {"r": "attention.R", "julia": "attention.jl"}


def load_workflow() -> tuple[dict[str, str], list[dict], list[dict], list[int]]:
    """The workflow's env, the shard job's steps, the merge job's steps, and the matrix's shards."""
    doc = yaml.safe_load(WORKFLOW.read_text())
    shard_job, merge_job = doc["jobs"]["conformance"], doc["jobs"]["report"]
    env = {k: v for k, v in {**doc.get("env", {}), **shard_job.get("env", {})}.items() if "${{" not in str(v)}
    shards = shard_job["strategy"]["matrix"]["shard"]
    return {k: str(v) for k, v in env.items()}, shard_job["steps"], merge_job["steps"], shards


def test_the_workflow_is_plain_shell_steps_and_known_actions() -> None:
    env, steps, merge_steps, shards = load_workflow()
    assert {"R_PORT", "JULIA_PORT", "ATTENTION_PORTS_PIP", "SHARDS"} <= set(env)
    assert shards == list(range(1, int(env["SHARDS"]) + 1))  # SHARDS is the matrix's length
    assert yaml.safe_load(WORKFLOW.read_text())["jobs"]["report"]["needs"] == "conformance"
    uses = {s["uses"].split("@")[0] for s in steps + merge_steps if "uses" in s}
    assert uses == STANDS_IN_FOR
    runs = [s for s in steps + merge_steps if "run" in s]
    assert len(runs) >= 5
    for step in runs:
        # Nothing GitHub would evaluate before the shell sees it, so the test runs what CI runs
        # (`if: always()` is the one condition run_job knows how to honour).
        assert "${{" not in step["run"] and step.get("if", "always()") == "always()" and "env" not in step, step
    # Each case runs once per run: a second route over the same cases (the pytest plugin) would
    # double the job's time and, skipped after a red verify, leave its report missing on red runs.
    assert not any("pytest" in s["run"] for s in runs)


def one_port_repo(repo: Path, lang: str) -> Path:
    """A team's repository: one file holding a complete port (ours, concatenated: the worker and
    rpy2 load a directory's files into one namespace, so one file behaves the same). A port
    declaration of a single source file would cover only that file, so none is kept, except the
    rotary pairing our Julia port computes (interleaved): the one file computes it too."""
    text = "\n".join(p.read_text() for p in PORT_SOURCES[lang])
    lines = [
        ln
        for ln in text.splitlines()
        if not ln.startswith(("attention_ports <-", "const attention_ports")) or "rope_pairing" in ln
    ]
    path = repo / PORT_FILE[lang]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_step(tool: InstalledTool, repo: Path, env: dict[str, str | None], step: dict) -> subprocess.CompletedProcess:
    """Run one ``run:`` step as GitHub does: bash -eo pipefail, in the repository's folder."""
    return tool.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], repo, **env)


def run_job(
    tool: InstalledTool, repo: Path, env: dict[str, str | None], steps: list[dict], start: str | None = None
) -> dict[str, subprocess.CompletedProcess | None]:
    """Every ``run:`` step in order (from the one named ``start``: the earlier ones have run on
    this machine already), as GitHub runs a job: once a step has failed, only the steps marked
    ``if: always()`` run (the others: None). Each step's process by its name."""
    done: dict[str, subprocess.CompletedProcess | None] = {}
    failed = False
    runs = [s for s in steps if "run" in s]
    if start is not None:
        runs = runs[[s["name"] for s in runs].index(start) :]
    for step in runs:
        if failed and step.get("if") != "always()":
            done[step["name"]] = None
            continue
        done[step["name"]] = proc = run_step(tool, repo, env, step)
        failed = failed or proc.returncode != 0
    return done


def output(proc: subprocess.CompletedProcess | None) -> str:
    assert proc is not None, "the step did not run"
    return proc.stdout + proc.stderr


def all_passed(job: dict[str, subprocess.CompletedProcess | None]) -> dict[str, str]:
    for name, proc in job.items():
        assert proc is not None and proc.returncode == 0, f"step {name!r} failed:\n{proc and output(proc)}"
    return {name: output(proc) for name, proc in job.items()}


VERIFY = "Verify the ports on this shard's fixture cases"
MERGE = "Merge the shards' reports"


def merged_reports(reports: Path) -> tuple[dict, ET.Element, str]:
    """The merge job's reports, each of which must exist (what upload-artifact keeps): the JSON,
    the JUnit root and the HTML page."""
    junit = ET.parse(reports / "attention-ports.xml").getroot()
    html = (reports / "attention-ports.html").read_text()
    return json.loads((reports / "attention-ports.json").read_text()), junit, html


def test_the_ci_example_passes_correct_ports_and_fails_a_wrong_one_with_every_report(
    installed_tool: InstalledTool, user_dir: Path, checkout_julia: str
) -> None:
    wf_env, steps, merge_steps, shards = load_workflow()
    for lang in ("r", "julia"):
        one_port_repo(user_dir, lang)
    summary = user_dir / "step_summary.md"
    summary.write_text("## an earlier step\n")
    env: dict[str, str | None] = {
        **wf_env,
        "R_PORT": PORT_FILE["r"],
        "JULIA_PORT": PORT_FILE["julia"],
        "ATTENTION_PORTS_PIP": str(installed_tool.wheel),
        "CI": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
        # setup-julia's part: a julia for `attention-ports setup julia` to find.
        "JULIA": checkout_julia,
    }
    n = sum(1 for _ in iter_entries(REPO_FIXTURES))
    reports = user_dir / "reports"
    shard_cases = []
    for shard in shards:  # the matrix's jobs, one after another
        out = all_passed(run_job(installed_tool, user_dir, {**env, "SHARD": str(shard)}, steps))
        assert "everything required is present" in out["Show what is available"]
        shard_report = json.loads((reports / f"shard-{shard}.json").read_text())
        assert shard_report["meta"]["shard"]["index"] == shard and shard_report["summary"]["ok"] is True
        shard_cases.append(len(shard_report["meta"]["shard"]["units"]))
        assert f"r: {shard_cases[-1]} pass" in out[VERIFY]
    assert sum(shard_cases) == n and all(shard_cases)
    out = all_passed(run_job(installed_tool, user_dir, env, merge_steps))
    assert f"r: {n} pass" in out[MERGE] and f"julia: {n} pass" in out[MERGE]
    # What upload-artifact keeps: the run's one report, in every format, both ports in each.
    report, junit, html = merged_reports(reports)
    assert report["summary"]["ok"] is True
    assert report["summary"]["implementations"] == {"r": {"pass": n}, "julia": {"pass": n}}
    assert junit.get("tests") == str(2 * n) and junit.get("failures") == "0"
    assert "PASS: all" in html
    # The step summary: appended to, not replaced.
    text = summary.read_text()
    assert text.startswith("## an earlier step\n") and text.count("## attention-ports verify: PASS") == 1
    # Another CI system leaves GITHUB_STEP_SUMMARY unset: the step runs as it is (it failed
    # "--markdown .: is a directory"), with the same verdict and no summary.
    (merge,) = [s for s in merge_steps if s.get("name") == MERGE]
    unset = run_step(installed_tool, user_dir, {**env, "GITHUB_STEP_SUMMARY": None}, merge)
    assert unset.returncode == 0 and f"julia: {n} pass" in unset.stdout, unset.stdout + unset.stderr
    assert summary.read_text() == text

    # A wrong R port: the shard jobs run again from their verify step (the set-up steps before it
    # take the same inputs as above, where they passed) and at least one fails there; the upload
    # (if: always()) keeps every shard's report, and the merge job fails with every report
    # written, the failure in each.
    wrong = "user_sdpa_unscaled.R"
    (user_dir / wrong).write_text((ROOT / "tests" / "data" / "ports" / "r" / wrong).read_text())
    shutil.rmtree(reports)
    codes = []
    for shard in shards:
        job = run_job(installed_tool, user_dir, {**env, "R_PORT": wrong, "SHARD": str(shard)}, steps, start=VERIFY)
        assert list(job)[-1] == VERIFY and job[VERIFY] is not None, job  # verify is the job's last run: step
        codes.append(job[VERIFY].returncode)
        assert all(p is not None and p.returncode == 0 for name, p in job.items() if name != VERIFY)
        assert json.loads((reports / f"shard-{shard}.json").read_text())["meta"]["shard"]["index"] == shard
    assert 1 in set(codes) <= {0, 1}, codes
    job = run_job(installed_tool, user_dir, env, merge_steps)
    assert job[MERGE] is not None and job[MERGE].returncode == 1, job[MERGE] and output(job[MERGE])
    report, junit, html = merged_reports(reports)
    rows = report["results"]
    r_rows = [r for r in rows if r["impl"] == "r"]
    failing = {r["case"] for r in r_rows if r["status"] == "fail"}
    assert failing >= {"sdpa_L2_d3", "sdpa_custom_scale"}
    assert {r["status"] for r in r_rows if r["case"] == "sdpa_unscaled"} == {"pass"}
    assert {r["status"] for r in rows if r["impl"] == "julia"} == {"pass"}
    assert report["summary"]["ok"] is False
    assert int(junit.get("failures")) == len(failing) and junit.get("tests") == str(2 * n)
    assert "FAIL" in html and "sdpa_L2_d3" in html
    red = summary.read_text()[len(text) :]
    assert red.lstrip().startswith("## attention-ports verify: FAIL") and "sdpa_L2_d3" in red
