"""The Octave kit (ports/kits/octave): its walkthrough port passes every case of softmax,
scaled_dot_product_attention and multi_head_attention (shapes Octave cannot hold included: MHA
weights of one key, 1 x 1 x 1), check-port finds nothing wrong with it, a failure is told in
Octave's layout and 1-based indices, ``init octave`` writes a skeleton that verifies, and setup,
doctor and the tests' installer know Octave.

Cheap: Octave starts in ~0.3 s and each test starts it a few times (~1 s a test); the CI example's
test runs its steps with the installed wheel (the installed-tool group's, built once for the
packaging tests), ~11 s. Skipped without octave-cli, failed under CI=true (scripts/install_kits.sh
installs it for the tests).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from attention_ports import cli
from attention_ports.core import paths
from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries
from attention_ports.judge.runner import run_suite
from attention_ports.runtimes.command import check
from tests.conftest import require
from tests.runtimes.command.test_command import N_CASES, THREE_OPS
from tests.wheel_env import ROOT, InstalledTool

KIT = paths.PORTS / "kits" / "octave"
PORT = KIT / "example" / "port.toml"
CI_EXAMPLE = ROOT / "examples" / "ci" / "octave-port.yml"


def need_octave() -> None:
    if shutil.which("octave-cli") is None:
        require("octave", "octave-cli is not on PATH (attention-ports setup octave)")


def broken_port(folder: Path, *edits: tuple[str, str]) -> Path:
    """The walkthrough port with ``edits`` (old, new) made, and its manifest, in ``folder``."""
    source = (KIT / "example" / "port.m").read_text()
    for old, new in (*edits, ('fileparts (fileparts (mfilename ("fullpath")))', repr(str(KIT)))):
        assert old in source, old
        source = source.replace(old, new)
    (folder / "bad.m").write_text(source)
    (folder / "bad.toml").write_text(PORT.read_text().replace('"port.m"', '"bad.m"'))
    return folder / "bad.toml"


def test_the_octave_kit_port_passes_every_case_of_its_three_operations() -> None:
    need_octave()
    results = run_suite(REPO_FIXTURES, ["oct"], {"oct": PORT}, THREE_OPS, required={"oct"}, progress=None)
    got = {r.case: r.status for r in results}
    assert len(got) == N_CASES
    assert set(got.values()) == {"pass"}, {k: v for k, v in got.items() if v != "pass"}
    assert {"mha_one_key_h3", "mha_L1_h1_large_logit", "softmax_single_column"} <= set(got)  # (3, 4, 1), ...


def test_check_port_finds_nothing_wrong_with_the_octave_kits_port() -> None:
    need_octave()
    argv, folder = check.resolve([str(PORT)])
    report = check.check(argv, folder=folder)
    lines = [f.line() for f in report.findings]
    assert not report.failed and all(f.level == "ok" for f in report.findings), "\n".join(lines)
    assert len([f for f in report.findings if f.probe.startswith("echo ")]) == 21  # every value type
    assert any(line.startswith("ok    declaration: column-major, 1-based") for line in lines), lines


def test_a_failure_in_an_octave_port_is_told_in_octaves_layout_and_1_based_indices(tmp_path: Path) -> None:
    need_octave()
    bad = broken_port(
        tmp_path,
        ("scale);\n", "scale);\n  out.weights(2, 7) += 1e-6;\n"),  # SDPA's weights, Octave's w(2, 7)
        ("    w(i, :, :) = reshape", "    if (i == 2) wi(3, 1) += 1e-6; endif\n    w(i, :, :) = reshape"),
    )
    cases = ["sdpa_nq3_nk7_dk5_dv2", "mha_cross_nq3_nk7"]  # (3, 7) and (2, 3, 7) attention weights
    run = run_suite(REPO_FIXTURES, ["oct"], {"oct": bad}, cases, required={"oct"}, progress=None)
    results = {r.case: r for r in run}
    sdpa = next(o for o in results["sdpa_nq3_nk7_dk5_dv2"].outputs if o.output == "weights")
    assert sdpa.status == "fail"
    assert "as the port sees it (Octave, 1-based): weights is (3, 7) (query x key)" in sdpa.message
    assert "worst at weights[2, 7]:" in sdpa.message  # Octave's w(2, 7) ...
    assert "reference layout (NumPy, 0-based): shape (3, 7), worst at [1, 6]" in sdpa.message  # ... NumPy's [1, 6]
    mha = next(o for o in results["mha_cross_nq3_nk7"].outputs if o.output == "weights")
    assert "as the port sees it (Octave, 1-based): weights is (2, 3, 7) (head x query x key)" in mha.message
    assert "worst at weights[2, 3, 1]:" in mha.message and "worst at [1, 2, 0]" in mha.message


def test_init_octave_writes_a_skeleton_that_verifies_as_missing_then_passes_softmax_once_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)  # a skeleton passes nothing: under CI=true that fails the run
    path = tmp_path / "mine.m"
    assert cli.main(["init", "octave", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attention_port.m", "mine.m", "mine.toml"]
    assert cli.main(["init", "octave", str(path)]) == 2  # never overwritten
    assert cli.main(["init", "octave", str(tmp_path / "softmax.m")]) == 2  # a script named like its function
    need_octave()
    manifest = tmp_path / "mine.toml"
    capsys.readouterr()
    assert cli.main(["verify", "--quiet", "--port", f"oct={manifest}", "--case", "softmax_ties"]) == 0
    assert "oct: 1 missing" in capsys.readouterr().out
    # softmax written (the walkthrough port's) and listed: its cases pass
    example = (KIT / "example" / "port.m").read_text()
    body = example[example.index("## Along axis") : example.index("## One head:")]
    text = path.read_text()
    stub = text[text.index("function out = softmax (a, dims)") : text.index("## scaled_dot_product_attention(")]
    path.write_text(text.replace(stub, body + "\n").replace("# ops.softmax = @softmax;", "ops.softmax = @softmax;"))
    two = ["--case", "softmax_ties", "--case", "softmax_fully_masked_row"]
    assert cli.main(["verify", "--quiet", "--port", f"oct={manifest}", *two]) == 0
    assert "verdict: PASS" in capsys.readouterr().out


def test_octave_is_known_to_setup_doctor_and_the_tests_installer() -> None:
    from attention_ports.tools import doctor, installers

    argv, _ = installers.command("octave")
    assert argv[0] == "bash" and Path(argv[1]).name == "install_octave.sh" and Path(argv[1]).is_file()
    assert "octave" in doctor.NEEDS and "octave" not in doctor.DEFAULT_NEEDS  # only with --need octave
    found = doctor.check_octave()
    assert found.need == "octave" and found.fix == "attention-ports setup octave"
    assert found.ok == (doctor.find_octave() is not None), found
    if found.ok:
        assert found.detail.startswith("GNU Octave "), found.detail
    kits = (paths.SCRIPTS / "install_kits.sh").read_text()  # the tests' set-up (scripts/setup.sh)
    assert "install_octave.sh" in kits


def test_the_octave_ci_example_passes_a_port_made_with_the_installed_tools_init(
    installed_tool: InstalledTool, user_dir: Path
) -> None:
    """examples/ci/octave-port.yml's run: steps as they are, in order, as GitHub runs them (CI=true,
    bash -eo pipefail), in a team's repository made with the installed wheel's `init octave`
    (the manifest and the kit's copy) holding the walkthrough's three operations."""
    need_octave()
    doc = yaml.safe_load(CI_EXAMPLE.read_text())
    (job,) = doc["jobs"].values()
    steps = job["steps"]
    assert {s["uses"].split("@")[0] for s in steps if "uses" in s} == {
        "actions/checkout",
        "actions/setup-python",
        "actions/upload-artifact",
    }
    made = installed_tool.run(["attention-ports", "init", "octave", "my_port.m"], user_dir)
    assert made.returncode == 0, made.stderr
    walkthrough = (KIT / "example" / "port.m").read_text()
    kit_folder = 'addpath (fileparts (fileparts (mfilename ("fullpath"))));'
    assert kit_folder in walkthrough
    (user_dir / "my_port.m").write_text(
        walkthrough.replace(kit_folder, 'addpath (fileparts (mfilename ("fullpath")));')
    )
    summary = user_dir / "step_summary.md"
    env = {
        **{k: str(v) for k, v in doc["env"].items()},
        "ATTENTION_PORTS_PIP": str(installed_tool.wheel),
        "CI": "true",
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    said = {}
    for step in (s for s in steps if "run" in s):
        assert "${{" not in step["run"], step
        bash = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]]
        proc = installed_tool.run(bash, user_dir, **env)
        said[step["name"]] = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"step {step['name']!r} failed:\n{said[step['name']]}"
    assert "everything required is present" in said["Show what is available"]
    assert "the port speaks the protocol" in said["Check the port's protocol handling"]
    report = json.loads((user_dir / "reports" / "attention-ports.json").read_text())
    n = sum(1 for _ in iter_entries(REPO_FIXTURES))
    assert report["summary"]["implementations"] == {"octave": {"pass": N_CASES, "missing": n - N_CASES}}
    assert (user_dir / "reports" / "attention-ports.xml").is_file()
    assert (user_dir / "reports" / "attention-ports.html").is_file()
    assert "PASS" in summary.read_text()
