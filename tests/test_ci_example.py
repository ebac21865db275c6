"""The example CI workflow (examples/ci/github-actions.yml) runs: its shell steps, taken from the
YAML as they are, executed in order in a temporary folder holding a polyglot team's R port and
Julia port, with the installed wheel standing in for ``ATTENTION_PORTS_PIP``, ``CI=true`` and a
``GITHUB_STEP_SUMMARY`` file as GitHub sets them.

The ``uses:`` steps are GitHub's (check-out, Python, Julia, artifact upload); the test stands in
for them: the folder is the check-out, the venv of ``installed_tool`` is the Python, the
checkout's Julia (``$JULIA``) is the Julia, and the report the upload would take must exist.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import yaml

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries
from tests.wheel_env import ROOT, InstalledTool

WORKFLOW = ROOT / "examples" / "ci" / "github-actions.yml"
STANDS_IN_FOR = {"actions/checkout", "actions/setup-python", "julia-actions/setup-julia", "actions/upload-artifact"}
PORT_SOURCES = {
    "r": sorted((ROOT / "ports" / "r" / "R").glob("*.R")),
    "julia": sorted((ROOT / "ports/julia/src").glob("*.jl")),
}
PORT_FILE = {"r": "attention.R", "julia": "attention.jl"}


def load_workflow() -> tuple[dict[str, str], list[dict]]:
    doc = yaml.safe_load(WORKFLOW.read_text())
    (job,) = doc["jobs"].values()
    env = {**doc.get("env", {}), **job.get("env", {})}
    return {k: str(v) for k, v in env.items()}, job["steps"]


def test_the_workflow_is_plain_shell_steps_and_known_actions() -> None:
    env, steps = load_workflow()
    assert {"R_PORT", "JULIA_PORT", "ATTENTION_PORTS_PIP"} <= set(env)
    uses = {s["uses"].split("@")[0] for s in steps if "uses" in s}
    assert uses == STANDS_IN_FOR
    runs = [s for s in steps if "run" in s]
    assert len(runs) == 5
    for step in runs:
        # Nothing GitHub would evaluate before the shell sees it, so the test runs what CI runs.
        assert "${{" not in step["run"] and "if" not in step and "env" not in step, step


def one_port_repo(repo: Path, lang: str) -> Path:
    """A team's repository: one file holding a complete port (ours, concatenated: the worker and
    rpy2 load a directory's files into one namespace, so one file behaves the same). A port
    declaration of a single source file would cover only that file, so none is kept."""
    text = "\n".join(p.read_text() for p in PORT_SOURCES[lang])
    lines = [ln for ln in text.splitlines() if not ln.startswith(("attention_ports <-", "const attention_ports"))]
    path = repo / PORT_FILE[lang]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_step(tool: InstalledTool, repo: Path, env: dict[str, str | None], step: dict):
    """Run one ``run:`` step as GitHub does: bash -eo pipefail, in the repository's folder."""
    return tool.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], repo, **env)


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
    wf_env, steps = load_workflow()
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
    out = run_steps(installed_tool, user_dir, env, steps)

    n = sum(1 for _ in iter_entries(REPO_FIXTURES))
    assert "everything required is present" in out["Show what is available"]
    verify_out = out["Verify the ports on every fixture case"]
    assert f"r: {n} pass" in verify_out and f"julia: {n} pass" in verify_out
    pytest_out = out["Conformance suite with pytest"]
    assert f"{2 * n} passed" in pytest_out
    assert f"r: {n}/{n}" in pytest_out and f"julia: {n}/{n}" in pytest_out
    # What upload-artifact keeps: every report, both ports in each.
    reports = user_dir / "reports"
    report = json.loads((reports / "attention-ports.json").read_text())
    assert report["summary"]["ok"] is True
    assert report["summary"]["implementations"] == {"r": {"pass": n}, "julia": {"pass": n}}
    junit = ET.parse(reports / "attention-ports.xml").getroot()
    assert junit.get("tests") == str(2 * n) and junit.get("failures") == "0"
    assert ET.parse(reports / "pytest.xml").getroot().find("testsuite").get("tests") == str(2 * n)
    assert "PASS: all" in (reports / "attention-ports.html").read_text()
    # The step summary: appended to, not replaced.
    text = summary.read_text()
    assert text.startswith("## an earlier step\n") and "## attention-ports verify: PASS" in text

    # The same verify step on an R port with a realistic mistake fails the job.
    wrong = "user_sdpa_unscaled.R"
    (user_dir / wrong).write_text((ROOT / "tests" / "data" / "ports" / "r" / wrong).read_text())
    (verify,) = [s for s in steps if s.get("name") == "Verify the ports on every fixture case"]
    failed = run_step(installed_tool, user_dir, {**env, "R_PORT": wrong}, verify)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    rows = json.loads((reports / "attention-ports.json").read_text())["results"]
    r_rows = [r for r in rows if r["impl"] == "r"]
    assert {r["case"] for r in r_rows if r["status"] == "fail"} >= {"sdpa_L2_d3", "sdpa_custom_scale"}
    assert {r["status"] for r in r_rows if r["case"] == "sdpa_unscaled"} == {"pass"}
    assert {r["status"] for r in rows if r["impl"] == "julia"} == {"pass"}
