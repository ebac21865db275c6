"""The same run gives the same report, byte for byte: repeated, and side by side or one after another.

The JSON report holds no timing and nothing of the machine's state but its runtimes' versions, so
any difference between two runs on one machine is a real nondeterminism (a race between concurrent
implementations, an unordered merge, a reply matched to the wrong request, a port's state leaking
between runs).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries
from attention_ports.judge.runner import load_cases, run_suite
from attention_ports.report import write_json
from attention_ports.runtimes import registry
from tests.faults.conftest import check_runtime

RUNS = 20


def test_twenty_full_runs_give_byte_identical_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Run 1 is the real command (its own R worker); runs 2-20 reuse one live R worker (starting R
    twenty times would only re-test start-up), each writing its report the same way."""
    check_runtime("r")
    first = tmp_path / "run01.json"
    assert cli.main(["verify", "--impl", "reference", "--impl", "r", "--quiet", "--json", str(first)]) == 0
    capsys.readouterr()
    want = first.read_bytes()
    summary = json.loads(want)["summary"]
    assert summary["ok"] is True and set(summary["implementations"]) == {"reference", "r"}
    meta = cli.verify_meta(["reference", "r"], {}, REPO_FIXTURES.resolve(), selection=[])  # what the command wrote
    # The manifest and the cases, read and validated once (run 1 read them itself): reading a file
    # again would only re-test reading it, as starting R would re-test start-up.
    entries = list(iter_entries(REPO_FIXTURES))
    loaded = load_cases(REPO_FIXTURES, entries)
    assert len(loaded) == len(entries)
    with registry.create("r") as r:
        for i in range(2, RUNS + 1):
            results = run_suite(REPO_FIXTURES, ["reference", "r"], live={"r": r}, entries=entries, loaded=loaded)
            path = tmp_path / f"run{i:02d}.json"
            write_json(results, path, meta)
            assert path.read_bytes() == want, f"run {i} differs from run 1"


def test_side_by_side_gives_the_same_report_as_one_after_another(tmp_path: Path, capsys) -> None:
    """All four implementations (a user's partial port among them, so missing cases and their
    messages are compared too), concurrent and sequential: the same JSON, byte for byte."""
    for lang in ("r", "julia"):
        check_runtime(lang)
    softmax_only = Path(__file__).resolve().parents[1] / "data" / "ports" / "r" / "softmax_only.R"
    common = ["verify", "--impl", "reference", "--impl", "torch", "--impl", "julia", "--port", f"r={softmax_only}"]
    common += ["--quiet"] + [a for g in ("seed*", "softmax_*", "sdpa_*", "mha_*", "clf_step_n*") for a in ("--case", g)]
    side = tmp_path / "side.json"
    seq = tmp_path / "seq.json"
    assert cli.main([*common, "--json", str(side)]) == 0
    assert cli.main([*common, "--sequential", "--json", str(seq)]) == 0
    capsys.readouterr()
    doc = json.loads(side.read_bytes())
    assert [r["impl"] for r in doc["results"]] == sorted(
        (r["impl"] for r in doc["results"]), key=["reference", "torch", "julia", "r"].index
    )  # merged in the order named, not the order they finished
    assert doc["summary"]["implementations"]["r"].get("missing", 0) > 0  # the partial port's cases
    assert side.read_bytes() == seq.read_bytes()
