"""The regression gates (attention_ports/pipeline/gates.py) through ``verify`` and ``merge-reports``:
a known-failures file strict both ways, a baseline report with its factor and floor, the diff.

Cheap by design: the NumPy reference on a few cases; a real failure is a fixture folder of three
cases in which one expected output is re-pointed at another case's array (the reference then
disagrees with it, as a port with a bug would); a shard's failure or accuracy change is its JSON
report edited (what merge-reports reads). The pytest plugin's route: tests/test_pytest_plugin.py.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from attention_ports import cli
from attention_ports.fixtures.store import REPO_FIXTURES

BROKEN = "sdpa_causal_bool"  # its expected 'output' is sdpa_causal_additive's: the reference fails it
SOFTMAX = ("softmax_ties", "softmax_large_logits", "softmax_masked_overflow_underflow")
CASES = (BROKEN, "sdpa_causal_additive", *SOFTMAX)


def _files(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("file", "bound_file") and isinstance(value, str):
                yield value
            else:
                yield from _files(value)
    elif isinstance(node, list):
        for value in node:
            yield from _files(value)


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fixture folder of CASES in which the reference fails BROKEN's 'output' (and nothing else);
    its manifest is small, so that a run reads and checks it in milliseconds."""
    out = tmp_path_factory.mktemp("fixtures")
    manifest = json.loads((REPO_FIXTURES / "manifest.json").read_text())
    manifest["cases"] = [c for c in manifest["cases"] if c["id"] in CASES]
    for case in manifest["cases"]:
        for rel in _files(case):
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO_FIXTURES / rel, out / rel)
    by_id = {c["id"]: c for c in manifest["cases"]}
    by_id[BROKEN]["expected"]["output"] = by_id["sdpa_causal_additive"]["expected"]["output"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


def _verify(capsys: pytest.CaptureFixture[str], fixtures: Path, *args: str) -> tuple[int, str, str]:
    code = cli.main(["verify", "--quiet", "--impl", "reference", "--dir", str(fixtures), *args])
    got = capsys.readouterr()
    return code, got.out, got.err


def _known(tmp_path: Path, text: str, name: str = "reference.known-failures") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------- known failures, verify


def test_an_unlisted_failure_fails_and_a_listed_one_is_a_known_failure(broken: Path, tmp_path: Path, capsys) -> None:
    empty = _known(tmp_path, "# reference: nothing known\n", "empty.txt")
    code, out, _ = _verify(capsys, broken, "--known-failures", f"reference={empty}")
    assert code == 1
    assert f"NOT LISTED: reference {BROKEN} output fails (not in {empty})" in out
    assert "verdict: FAIL: 1 of 5 cases fail" in out

    listed = _known(tmp_path, f"# the reference's known failures\n{BROKEN} output  # re-pointed on purpose\n")
    report, junit = tmp_path / "r.json", tmp_path / "r.xml"
    gate = ("--known-failures", f"reference={listed}")
    code, out, _ = _verify(capsys, broken, *gate, "--json", str(report), "--junit", str(junit))
    assert code == 0
    assert "verdict: PASS for 4 of 5 cases; 1 known failure (listed, not a pass)" in out
    assert f"known failure: reference {BROKEN} output ({listed}:2: re-pointed on purpose)" in out
    summary = json.loads(report.read_text())["summary"]
    assert summary["ok"] is True and summary["complete"] is False
    assert summary["known_failures"] == [["reference", BROKEN]] and summary["gate_failures"] == []
    (tc,) = [t for t in ET.parse(junit).getroot().iter("testcase") if t.get("name") == BROKEN]
    skipped = tc.find("skipped")
    assert skipped is not None and skipped.get("message") == f"known failure ({listed}:2: re-pointed on purpose)"
    # '*' lists the whole case, as pytest's xfail marks a test
    whole = _known(tmp_path, f"{BROKEN} *  # every output of it\n", "whole.txt")
    assert _verify(capsys, broken, "--known-failures", f"reference={whole}")[0] == 0


def test_a_listed_failure_that_passes_fails_the_run_naming_the_line_to_delete(
    broken: Path, tmp_path: Path, capsys
) -> None:
    listed = _known(tmp_path, f"{BROKEN} output  # re-pointed\n{BROKEN} weights  # was wrong once\n")
    code, out, _ = _verify(capsys, broken, "--known-failures", f"reference={listed}")
    assert code == 1
    assert (
        f"FIXED: reference {BROKEN} weights passes now: delete line 2 of {listed}: {BROKEN} weights  # was wrong once"
        in out
    )
    assert "1 regression gate failure(s)" in out


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("softmax_ties y\n", ":1: no '# reason'"),
        ("softmax_ties  # why\n", ":1: expected 'CASE OUTPUT  # reason'"),
        ("softmax_ties y  #   \n", ":1: no reason after '#'"),
        ("# c\nsoftmax_ties y  # a\nsoftmax_ties y  # b\n", ":3: softmax_ties y is already listed at line 2"),
        ("softmax_tie y  # a typo\n", ":1: no case 'softmax_tie' in the fixtures in"),
        ("softmax_ties output  # the wrong output\n", ":1: case softmax_ties has no output 'output' (its outputs: y)"),
    ],
)
def test_a_bad_known_failures_file_is_bad_input_naming_the_file_and_line(
    broken: Path, text: str, error: str, tmp_path: Path, capsys
) -> None:
    listed = _known(tmp_path, text)
    code, _, err = _verify(capsys, broken, "--case", "softmax_ties", "--known-failures", f"reference={listed}")
    assert code == 2
    assert f"{listed}{error}" in err


def test_known_failures_of_an_implementation_not_in_the_run_is_bad_input(broken: Path, tmp_path: Path, capsys) -> None:
    listed = _known(tmp_path, "softmax_ties y  # a\n")
    code, _, err = _verify(capsys, broken, "--case", "softmax_ties", "--known-failures", f"r={listed}")
    assert code == 2 and f"--known-failures r={listed}: r is not an implementation of this run (reference)" in err


def test_an_entry_for_a_case_not_selected_is_not_judged(broken: Path, tmp_path: Path, capsys) -> None:
    listed = _known(tmp_path, "sdpa_causal_bool output  # of another selection\n")
    code, out, _ = _verify(capsys, broken, "--case", "softmax_ties", "--known-failures", f"reference={listed}")
    assert code == 0
    why = "its case did not run (not selected in this run)"
    assert f"not judged: 1 entry, {why}: {listed}:1 (sdpa_causal_bool output)" in out


# --------------------------------------------------------------------- baseline, verify


@pytest.fixture(scope="module")
def softmax_run(broken: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("baseline") / "softmax.json"
    args = [
        "verify",
        "--quiet",
        "--impl",
        "reference",
        "--dir",
        str(broken),
        "--case",
        "softmax_*",
        "--json",
        str(path),
    ]
    assert cli.main(args) == 0
    return json.loads(path.read_text())


def _baseline(doc: dict[str, Any], path: Path, **scaled: float) -> Path:
    """``doc`` with the err/bnd of each case in ``scaled`` divided by its factor: the baseline of a
    run that was that much more accurate there."""
    doc = json.loads(json.dumps(doc))
    for row in doc["results"]:
        if row["case"] in scaled:
            row["err_over_bound"] /= scaled[row["case"]]
    path.write_text(json.dumps(doc))
    return path


def test_a_10x_accuracy_regression_above_the_floor_fails_and_the_diff_says_so(
    broken: Path, softmax_run: dict[str, Any], tmp_path: Path, capsys
) -> None:
    now = {r["case"]: r["err_over_bound"] for r in softmax_run["results"]}
    assert 0.07 < now["softmax_large_logits"] < 0.08  # the reference's own err/bnd here: 12x the baseline's
    base = _baseline(softmax_run, tmp_path / "base.json", softmax_large_logits=12)
    md, js = tmp_path / "diff.md", tmp_path / "diff.json"
    run = ("--case", "softmax_*", "--baseline", str(base))
    diff = ("--baseline-diff", str(md), "--baseline-diff", str(js))
    code, out, _ = _verify(capsys, broken, *run, "--baseline-floor", "0.005", *diff)
    assert code == 1
    assert (
        "WORSE: reference softmax_large_logits y: err/bnd 0.00619 -> 0.0742 (12x; past 10 x max(baseline, floor 0.005))"
        in out
    )
    assert "verdict: FAIL: 1 regression gate failure(s)" in out
    assert "1 worse, 0 better of 3 outputs compared" in out
    doc = json.loads(js.read_text())
    assert doc["ok"] is False and [(c["case"], c["output"]) for c in doc["worse"]] == [("softmax_large_logits", "y")]
    assert doc["worse"][0]["before"]["err_over_bound"] == pytest.approx(now["softmax_large_logits"] / 12)
    assert "| reference | softmax_large_logits | y | pass 0.00619 | pass 0.0742 |" in md.read_text()
    # At the default floor (0.01) the same 12x is a change from below the floor: 0.0742 is under
    # 10 x 0.01, rounding-level for the reference, and does not fail.
    code, out, _ = _verify(capsys, broken, *run)
    assert code == 0 and "0 worse, 0 better of 3 outputs compared" in out
    # A 12x gain is "better" (the baseline was the worse run)
    better = _baseline(softmax_run, tmp_path / "better.json", softmax_large_logits=1 / 12)
    code, out, _ = _verify(
        capsys, broken, "--case", "softmax_*", "--baseline", str(better), "--baseline-floor", "0.005"
    )
    assert code == 0 and "better: reference softmax_large_logits y: err/bnd 0.891 -> 0.0742 (1/12)" in out


def test_a_50x_change_of_rounding_noise_below_the_floor_does_not_fail(
    broken: Path, softmax_run: dict[str, Any], tmp_path: Path, capsys
) -> None:
    now = {r["case"]: r["err_over_bound"] for r in softmax_run["results"]}
    assert 1e-4 < now["softmax_masked_overflow_underflow"] < 1e-3  # rounding-level
    base = _baseline(softmax_run, tmp_path / "base.json", softmax_masked_overflow_underflow=50)
    code, out, _ = _verify(capsys, broken, "--case", "softmax_*", "--baseline", str(base))
    assert code == 0 and "0 worse" in out
    # without the floor the same noise would trip the gate: the floor is what keeps it quiet
    code, out, _ = _verify(capsys, broken, "--case", "softmax_*", "--baseline", str(base), "--baseline-floor", "0")
    assert code == 1 and "WORSE: reference softmax_masked_overflow_underflow y" in out and "(50x;" in out


def test_an_output_that_passed_in_the_baseline_and_fails_now_fails(broken: Path, tmp_path: Path, capsys) -> None:
    report = tmp_path / "now.json"
    assert _verify(capsys, broken, "--json", str(report))[0] == 1
    doc = json.loads(report.read_text())
    for row in doc["results"]:  # the baseline: every output passed
        row["status"], row["err_over_bound"] = "pass", 0.5 if row["case"] == BROKEN else row["err_over_bound"]
    base = tmp_path / "base.json"
    base.write_text(json.dumps(doc))
    listed = _known(tmp_path, f"{BROKEN} output  # accepted in this PR\n")
    code, out, _ = _verify(capsys, broken, "--baseline", str(base))
    assert code == 1 and f"WORSE: reference {BROKEN} output: passed in the baseline, now fails" in out
    # listed as a known failure, the regression is accepted (the file is the reviewed record)
    code, out, _ = _verify(capsys, broken, "--baseline", str(base), "--known-failures", f"reference={listed}")
    assert code == 0 and f"worse, accepted by {listed}:1: reference {BROKEN} output" in out


def test_a_bad_baseline_is_bad_input_naming_the_file_and_field(
    broken: Path, softmax_run: dict[str, Any], tmp_path: Path, capsys
) -> None:
    run = ("--case", "softmax_ties", "--baseline")
    code, _, err = _verify(capsys, broken, *run, str(tmp_path))
    assert code == 2 and f"{tmp_path}: not a regular file (a directory)" in err
    for path, mutate, error in (
        (
            "bad_eob.json",
            lambda d: d["results"][2].update(err_over_bound=[1]),
            "results[2].err_over_bound: expected a number",
        ),
        ("bad_status.json", lambda d: d["results"][0].update(status="ok"), "results[0].status: 'ok' is not one of"),
        ("bad_version.json", lambda d: d.update(version=99), "version: 99; a baseline is a JSON report of format 3 to"),
        ("scale.json", lambda d: d["meta"].update(tier="scale"), "meta.tier is 'scale', this run's is 'catalogue'"),
    ):
        doc = json.loads(json.dumps(softmax_run))
        mutate(doc)
        (tmp_path / path).write_text(json.dumps(doc))
        code, _, err = _verify(capsys, broken, *run, str(tmp_path / path))
        assert code == 2 and f"{tmp_path / path}: {error}" in err, err
    (tmp_path / "half.json").write_text(json.dumps(softmax_run)[:100])
    code, _, err = _verify(capsys, broken, *run, str(tmp_path / "half.json"))
    assert code == 2 and f"{tmp_path / 'half.json'}: not a JSON report" in err
    code, _, err = _verify(capsys, broken, "--case", "softmax_ties", "--baseline-factor", "5")
    assert code == 2 and "--baseline-factor, --baseline-floor and --baseline-diff go with --baseline" in err


def test_a_baseline_of_other_fixtures_is_compared_with_a_warning(
    broken: Path, softmax_run: dict[str, Any], tmp_path: Path, capsys
) -> None:
    doc = json.loads(json.dumps(softmax_run))
    doc["meta"]["fixtures"]["manifest_sha256"] = "0" * 64
    (tmp_path / "other.json").write_text(json.dumps(doc))
    code, out, _ = _verify(capsys, broken, "--case", "softmax_*", "--baseline", str(tmp_path / "other.json"))
    assert code == 0
    assert f"warning: the baseline {tmp_path / 'other.json'} judged other fixtures (manifest sha256 000000000000" in out
    assert "0 worse, 0 better of 3 outputs compared" in out


# --------------------------------------------------------------------- shards and merge-reports


@pytest.fixture(scope="module")
def shards(broken: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("gated-shards")
    paths = [folder / f"s{k}.json" for k in (1, 2)]
    for k, path in enumerate(paths, 1):
        args = [
            "verify",
            "--quiet",
            "--impl",
            "reference",
            "--dir",
            str(broken),
            "--case",
            "softmax_*",
            "--shard",
            f"{k}/2",
            "--json",
            str(path),
        ]
        assert cli.main(args) == 0
    return paths


def _edited(path: Path, out: Path, **rows: dict[str, Any]) -> Path:
    """A shard's report with the outputs ``rows`` names (case -> fields) changed, as a port's would be."""
    doc = json.loads(path.read_text())
    for row in doc["results"]:
        row.update(rows.get(row["case"], {}))
    for row in doc["cases"]:
        row["status"] = rows.get(row["case"], {}).get("status", row["status"])
    out.write_text(json.dumps(doc))
    return out


def test_a_shard_leaves_entries_of_other_shards_to_merge_reports(
    broken: Path, shards: list[Path], tmp_path: Path, capsys
) -> None:
    units = [json.loads(p.read_text())["meta"]["shard"]["units"] for p in shards]
    passing = units[0][0]  # a case of shard 1 that passes
    listed = _known(tmp_path, f"{passing} y  # listed, and passes\n")
    gate = ("--known-failures", f"reference={listed}")
    code, out, _ = _verify(capsys, broken, "--case", "softmax_*", "--shard", "2/2", *gate)
    assert code == 0 and "1 entry names cases of other shards: merge-reports judges them" in out
    assert _verify(capsys, broken, "--case", "softmax_*", "--shard", "1/2", *gate)[0] == 1
    assert cli.main(["merge-reports", *map(str, shards), *gate]) == 1
    assert f"delete line 1 of {listed}: {passing} y  # listed, and passes" in capsys.readouterr().out


def test_merge_reports_judges_known_failures_and_the_baseline_on_the_whole_run(
    broken: Path, shards: list[Path], tmp_path: Path, capsys
) -> None:
    whole = tmp_path / "whole.json"
    args = [
        "verify",
        "--quiet",
        "--impl",
        "reference",
        "--dir",
        str(broken),
        "--case",
        "softmax_*",
        "--json",
        str(whole),
    ]
    assert cli.main(args) == 0
    capsys.readouterr()
    failing = {"status": "fail", "err_over_bound": 3.5, "mismatches": 2}
    # the shards as a port's run: softmax_ties fails, softmax_large_logits 12x less accurate (0.074 ->
    # 0.89, above the default floor), softmax_masked_overflow_underflow 45x noisier (2.2e-04 -> 9.8e-03,
    # below it)
    changes = {
        "softmax_ties": failing,
        "softmax_large_logits": {"err_over_bound": 0.891},
        "softmax_masked_overflow_underflow": {"err_over_bound": 9.8e-3},
    }
    now = [str(_edited(path, tmp_path / f"now-{path.name}", **changes)) for path in shards]
    code = cli.main(["merge-reports", *now])
    assert code == 1 and "verdict: FAIL: 1 of 3 cases fail" in capsys.readouterr().out
    listed = _known(tmp_path, "softmax_ties y  # a known, tracked difference\n")
    md = tmp_path / "diff.md"
    gate = ["--known-failures", f"reference={listed}", "--baseline", str(whole), "--baseline-diff", str(md)]
    code = cli.main(["merge-reports", *now, *gate])
    out = capsys.readouterr().out
    assert code == 1
    assert f"known failure: reference softmax_ties y ({listed}:1: a known, tracked difference)" in out
    assert "WORSE: reference softmax_large_logits y: err/bnd 0.0742 -> 0.891 (12x" in out
    assert "softmax_masked_overflow_underflow" not in out  # 45x, under the floor: noise
    assert "worse, accepted by" in out and "softmax_ties y: passed in the baseline, now fails" in out
    assert "**2 worse, 0 better** of 3 outputs compared" in md.read_text()
    # with the accuracy back, the merged run passes as one with a known failure
    fixed = [str(_edited(path, tmp_path / f"fixed-{path.name}", softmax_ties=failing)) for path in shards]
    code = cli.main(["merge-reports", *fixed, *gate[:4]])
    assert (
        code == 0 and "verdict: PASS for 2 of 3 cases; 1 known failure (listed, not a pass)" in capsys.readouterr().out
    )


def test_the_diff_is_appended_to_the_github_step_summary(
    broken: Path, softmax_run: dict[str, Any], tmp_path: Path, capsys, monkeypatch
) -> None:
    """GitHub's step summary file has no extension: named by $GITHUB_STEP_SUMMARY, the diff is
    markdown, appended after what earlier steps wrote (and beside --markdown on the same file)."""
    summary = tmp_path / "step_summary_0a1b"
    summary.write_text("## an earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    base = _baseline(softmax_run, tmp_path / "base.json", softmax_large_logits=12)
    args = ("--case", "softmax_*", "--baseline", str(base), "--baseline-floor", "0.005")
    code, _, _ = _verify(capsys, broken, *args, "--markdown", str(summary), "--baseline-diff", str(summary))
    assert code == 1
    text = summary.read_text()
    assert text.startswith("## an earlier step\n")
    assert text.index("## attention-ports verify: FAIL") < text.index("## attention-ports against the baseline: FAIL")
    assert "| reference | softmax_large_logits | y | pass 0.00619 | pass 0.0742 |" in text
