"""Output one can navigate (issue 26): ``verify --quiet`` says one line per failing output and the
repro command; the HTML page's "failures that share a cause" keep the cause itself."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from attention_ports import cli
from attention_ports.fixtures.store import REPO_FIXTURES, npy_bytes
from attention_ports.judge.results import CaseResult, OutputResult
from attention_ports.report import html_page
from attention_ports.report.model import Report, shared_causes
from attention_ports.report.text import failure_details

CASE = "gpt_grads_two_blocks"
FLIPPED = ("grads.ln1_b", "grads.w_o")


def flipped_gradients(folder: Path) -> Path:
    """A fixture folder of one gpt_grads case whose expected ``FLIPPED`` gradients have their sign
    flipped (the manifest's hashes updated): the reference fails exactly those two, as a port
    with two wrong gradients would, and no foreign runtime is needed."""
    manifest = json.loads((REPO_FIXTURES / "manifest.json").read_text())
    entry = next(c for c in manifest["cases"] if c["id"] == CASE)
    for section in ("inputs", "expected"):
        for meta in entry[section].values():
            for rel in (meta["file"], meta.get("bound_file")):
                if rel:
                    (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(REPO_FIXTURES / rel, folder / rel)
    for name in FLIPPED:
        meta = entry["expected"][name]
        data = npy_bytes(-np.load(folder / meta["file"]))
        (folder / meta["file"]).write_bytes(data)
        meta["sha256"] = hashlib.sha256(data).hexdigest()
    manifest["cases"] = [entry]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_quiet_says_one_line_per_failing_output_and_the_repro(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)  # the verdict line below is the one without CI=true's rule
    folder = flipped_gradients(tmp_path / "fx")
    assert cli.main(["verify", "--impl", "reference", "--dir", str(folder), "--quiet"]) == 1
    lines = capsys.readouterr().out.splitlines()
    failing = [ln for ln in lines if ln.startswith("FAIL ")]
    assert [ln.split(":")[0] for ln in failing] == [f"FAIL [reference] {CASE} {name}" for name in FLIPPED]
    for line, name in zip(failing, FLIPPED, strict=True):
        assert ": worst rel err 2, " in line and " x bound; " in line  # -x for x: a relative error of 2
        assert f"diagnosis: {name} is -1 times the expected values" in line
        assert "what this case tests: One training step of a 2-block GPT" in line
    assert lines[2] == f"  repro: attention-ports verify --impl reference --case {CASE} --dir {folder}"
    # nothing else: the 20 passing outputs, the table, the worst-element lines and the accuracy
    # table are not printed; the counts and the verdict are
    assert [ln for ln in lines[3:] if ln] == ["reference: 1 fail", "verdict: FAIL: 1 of 1 cases fail"]


def _output(case: str, output: str, status: str = "fail", message: str = "", diagnosis: str = "") -> OutputResult:
    return OutputResult("r", case, output, status, message=message, diagnosis=diagnosis, reason="why it exists")


def test_quiet_says_outputs_failing_with_one_message_once_and_keeps_a_localisation() -> None:
    raised = "case 'c1': r raised: subscript out of bounds\n  what the port printed: ..."
    errors = CaseResult("r", "c1", "gpt_grads", [_output("c1", f"grads.{n}", "error", raised) for n in "abc"])
    located = "case 'c2', output 'loss': 1 of 1 elements differ\n  localisation: the first wrong gradient is grads.b"
    loss = _output("c2", "loss", message=located)
    loss.total, loss.mismatches, loss.max_rel_err, loss.err_over_bound = 1, 1, 0.5, 3e6
    fails = CaseResult("r", "c2", "gpt_grads", [loss], repro="attention-ports x")
    text = failure_details(Report([errors, fails]), quiet=True)
    assert text.splitlines() == [
        "ERROR [r] c1 3 outputs (grads.a, grads.b, grads.c): case 'c1': r raised: subscript out of bounds; "
        "what this case tests: why it exists",
        "FAIL [r] c2 loss: worst rel err 0.5, 3e+06 x bound; localisation: the first wrong gradient is grads.b; "
        "what this case tests: why it exists",
        "  repro: attention-ports x",
    ]


def test_quiet_gives_the_cases_localisation_to_the_outputs_no_diagnosis_explains() -> None:
    """The judge puts a case's localisation on its outputs (judge/runner.py), not in their
    messages: --quiet says it in full on the first undiagnosed line and "as above" after it
    (before: a backward bug's --quiet lines had no localisation at all)."""
    where = "along the backward pass, loss agrees; the first wrong gradient going backwards is grads$w_head"
    outs = [_output("c3", f"grads.{n}", message="case 'c3': differs", diagnosis=d) for n, d in
            (("w_head", ""), ("lnf_w", "it is -1 times the expected values"), ("lnf_b", ""))]  # fmt: skip
    for o in outs:
        o.total, o.mismatches, o.max_rel_err, o.err_over_bound, o.localisation = 4, 4, 0.5, 3e6, where
    text = failure_details(Report([CaseResult("r", "c3", "gpt_grads", outs)]), quiet=True)
    assert text.splitlines() == [
        f"FAIL [r] c3 grads.w_head: worst rel err 0.5, 3e+06 x bound; localisation: {where}; "
        "what this case tests: why it exists",
        "FAIL [r] c3 grads.lnf_w: worst rel err 0.5, 3e+06 x bound; diagnosis: it is -1 times the expected values; "
        "what this case tests: why it exists",
        "FAIL [r] c3 grads.lnf_b: worst rel err 0.5, 3e+06 x bound; localisation: as above; "
        "what this case tests: why it exists",
    ]


TRANSPOSED = (
    "params$w_{} is applied transposed: a square weight, so no shape error shows it (torch's nn.Linear "
    "stores out x in); R's weights are d_in x d_out"
)


def test_html_groups_keep_the_cause_itself() -> None:
    """Two failures with w_o applied transposed share that cause, said whole; w_q's is another."""
    results = [
        CaseResult("r", c, "decoder_block", [_output(c, "y", diagnosis=TRANSPOSED.format(w))])
        for c, w in (("c1", "o"), ("c2", "o"), ("c3", "q"))
    ]
    page = html_page.render(Report(results))
    assert f"<b>2 failures</b> share one cause: {TRANSPOSED.format('o').replace(chr(39), '&#x27;')}" in page
    assert page.count("(a cause 2 failures share: see above)") == 2
    (cause,) = shared_causes(results).values()
    assert cause.label == TRANSPOSED.format("o") and [r.case for r in cause.results] == ["c1", "c2"]


def test_a_shared_cause_leaves_out_what_differs_between_the_failures() -> None:
    """This case's factor and the output's name differ; the mistake is the same."""
    said = {
        (
            "c1",
            "output",
        ): "the scores are scaled by 1 = 1 where this case wants 1/sqrt(d_k) = 0.3536: the scale is missing",
        (
            "c2",
            "output",
        ): "the scores are scaled by 1 = 1 where this case wants 1/sqrt(d_k) = 0.25: the scale is missing",
        ("c3", "y"): "y is 2 times the expected values, element by element: a factor n = 2 too many",
        ("c4", "weights"): "weights is 2 times the expected values, element by element: a factor n = 2 too many",
    }
    results = [CaseResult("r", c, "sdpa", [_output(c, o, diagnosis=d)]) for (c, o), d in said.items()]
    causes = list(shared_causes(results).values())
    assert [(c.label, [r.case for r in c.results]) for c in causes] == [
        ("the scale is missing", ["c1", "c2"]),
        ("a factor n = 2 too many", ["c3", "c4"]),
    ]
