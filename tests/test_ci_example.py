"""The example CI workflow (examples/ci/github-actions.yml) runs: its shell steps, taken from the
YAML as they are, executed in order in a temporary folder holding a team's one port, with the
installed wheel standing in for ``ATTENTION_PORTS_PIP`` and ``CI=true`` as GitHub sets it.

The ``uses:`` steps are GitHub's (check-out, Python, Julia, artifact upload); the test stands in
for them: the folder is the check-out, the venv of ``installed_tool`` is the Python, the
checkout's Julia (``$JULIA``) is the Julia, and the report the upload would take must exist.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from attention_ports.fixtures import REPO_FIXTURES, iter_entries
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
    assert {"PORT_LANG", "PORT_FILE", "ATTENTION_PORTS_PIP"} <= set(env)
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


@pytest.mark.parametrize("lang", ["r", "julia"])
def test_the_ci_example_passes_a_correct_port_and_fails_a_wrong_one(
    lang: str, installed_tool: InstalledTool, user_dir: Path, checkout_julia: str
) -> None:
    wf_env, steps = load_workflow()
    one_port_repo(user_dir, lang)
    env: dict[str, str | None] = {
        **wf_env,
        "PORT_LANG": lang,
        "PORT_FILE": PORT_FILE[lang],
        "ATTENTION_PORTS_PIP": str(installed_tool.wheel),
        "CI": "true",
        # setup-julia's part: a julia for `attention-ports setup julia` to find.
        "JULIA": checkout_julia if lang == "julia" else None,
    }
    out = run_steps(installed_tool, user_dir, env, steps)

    n = sum(1 for _ in iter_entries(REPO_FIXTURES))
    assert "everything required is present" in out["Show what is available"]
    assert f"{lang}: {n} pass" in out["Verify the port on every fixture case"]
    pytest_out = out["Conformance suite with pytest"]
    assert f"{n} passed" in pytest_out and f"fixture cases passed per implementation: {lang}: {n}/{n}" in pytest_out
    report = json.loads((user_dir / "attention-ports.json").read_text())  # what upload-artifact keeps
    assert report["summary"]["ok"] is True
    assert report["summary"]["implementations"] == {lang: {"pass": n}}

    # The same verify step on a port with a realistic mistake fails the job.
    wrong = "user_sdpa_unscaled.R" if lang == "r" else "user_sdpa_unscaled.jl"
    (user_dir / wrong).write_text((ROOT / "tests" / "data" / "ports" / lang / wrong).read_text())
    (verify,) = [s for s in steps if s.get("name") == "Verify the port on every fixture case"]
    failed = run_step(installed_tool, user_dir, {**env, "PORT_FILE": wrong}, verify)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    rows = json.loads((user_dir / "attention-ports.json").read_text())["results"]
    assert {r["case"] for r in rows if r["status"] == "fail"} >= {"sdpa_L2_d3", "sdpa_custom_scale"}
    assert {r["status"] for r in rows if r["case"] == "sdpa_unscaled"} == {"pass"}
