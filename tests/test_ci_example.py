"""The example CI workflow (examples/ci/github-actions.yml) runs: its shell steps, taken from the
YAML as they are, executed in order in a temporary folder holding a polyglot team's R port and
Julia port, with the installed wheel standing in for ``ATTENTION_PORTS_PIP``, ``CI=true`` and a
``GITHUB_STEP_SUMMARY`` file as GitHub sets them: the matrix's shard jobs one after another
(``SHARD`` as the matrix sets it), then the merge job.

The ``uses:`` steps are GitHub's (check-out, Python, Julia, artifact upload and download); the test
stands in for them: the folder is the check-out, the venv of ``installed_tool`` is the Python, the
checkout's Julia (``$JULIA``) is the Julia, the shard jobs' ``reports/`` folder is the artifacts
downloaded, and the report the upload would take must exist. pip cannot download pytest-split here
(no network): the checkout's installed copy is put in the venv, so the install step finds it.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
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
    assert len(runs) == 8
    for step in runs:
        # Nothing GitHub would evaluate before the shell sees it, so the test runs what CI runs.
        assert "${{" not in step["run"] and "if" not in step and "env" not in step, step


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


def run_step(tool: InstalledTool, repo: Path, env: dict[str, str | None], step: dict):
    """Run one ``run:`` step as GitHub does: bash -eo pipefail, in the repository's folder."""
    return tool.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], repo, **env)


def with_pytest_split(tool: InstalledTool) -> None:
    """Stands in for pip's download of pytest-split: the checkout's installed copy, in the venv."""
    dist = importlib.metadata.distribution("pytest-split")
    site = next((tool.venv / "lib").glob("python3*/site-packages"))
    for top in {str(f).split("/")[0] for f in dist.files or []}:
        src = Path(dist.locate_file(top))
        if src.is_dir() and not (site / top).exists():
            shutil.copytree(src, site / top)


def run_steps(tool: InstalledTool, repo: Path, env: dict[str, str | None], steps: list[dict]) -> dict[str, str]:
    """Every ``run:`` step in order, each of which must succeed; their output by step name."""
    outputs = {}
    for step in (s for s in steps if "run" in s):
        proc = run_step(tool, repo, env, step)
        outputs[step["name"]] = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"step {step['name']!r} exited {proc.returncode}:\n{outputs[step['name']]}"
    return outputs


def test_the_ci_example_passes_correct_ports_and_fails_a_wrong_one(
    installed_tool: InstalledTool, user_dir: Path, checkout_julia: str
) -> None:
    wf_env, steps, merge_steps, shards = load_workflow()
    with_pytest_split(installed_tool)
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
        out = run_steps(installed_tool, user_dir, {**env, "SHARD": str(shard)}, steps)
        assert "everything required is present" in out["Show what is available"]
        shard_report = json.loads((reports / f"shard-{shard}.json").read_text())
        assert shard_report["meta"]["shard"]["index"] == shard and shard_report["summary"]["ok"] is True
        shard_cases.append(len(shard_report["meta"]["shard"]["units"]))
        assert f"r: {shard_cases[-1]} pass" in out["Verify the ports on this shard's fixture cases"]
        pytest_out = out["Conformance suite with pytest"]
        assert f"[pytest-split] Running group {shard}/{len(shards)}" in pytest_out
    assert sum(shard_cases) == n and all(shard_cases)
    pytest_tests = [int(ET.parse(reports / f"pytest-{k}.xml").getroot().find("testsuite").get("tests")) for k in shards]
    assert sum(pytest_tests) == 2 * n and all(pytest_tests)
    out = run_steps(installed_tool, user_dir, env, merge_steps)
    assert f"r: {n} pass" in out["Merge the shards' reports"] and f"julia: {n} pass" in out["Merge the shards' reports"]
    # What upload-artifact keeps: the run's one report, in every format, both ports in each.
    report = json.loads((reports / "attention-ports.json").read_text())
    assert report["summary"]["ok"] is True
    assert report["summary"]["implementations"] == {"r": {"pass": n}, "julia": {"pass": n}}
    junit = ET.parse(reports / "attention-ports.xml").getroot()
    assert junit.get("tests") == str(2 * n) and junit.get("failures") == "0"
    assert "PASS: all" in (reports / "attention-ports.html").read_text()
    # The step summary: appended to, not replaced.
    text = summary.read_text()
    assert text.startswith("## an earlier step\n") and "## attention-ports verify: PASS" in text

    # The same verify steps on an R port with a realistic mistake fail a shard's job and the merge.
    wrong = "user_sdpa_unscaled.R"
    (user_dir / wrong).write_text((ROOT / "tests" / "data" / "ports" / "r" / wrong).read_text())
    (verify,) = [s for s in steps if s.get("name") == "Verify the ports on this shard's fixture cases"]
    codes = [run_step(installed_tool, user_dir, {**env, "R_PORT": wrong, "SHARD": str(k)}, verify) for k in shards]
    assert 1 in {c.returncode for c in codes} <= {0, 1}, [c.stdout + c.stderr for c in codes]
    (merge,) = [s for s in merge_steps if s.get("name") == "Merge the shards' reports"]
    failed = run_step(installed_tool, user_dir, env, merge)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    rows = json.loads((reports / "attention-ports.json").read_text())["results"]
    r_rows = [r for r in rows if r["impl"] == "r"]
    assert {r["case"] for r in r_rows if r["status"] == "fail"} >= {"sdpa_L2_d3", "sdpa_custom_scale"}
    assert {r["status"] for r in r_rows if r["case"] == "sdpa_unscaled"} == {"pass"}
    assert {r["status"] for r in rows if r["impl"] == "julia"} == {"pass"}
