"""The one verify pipeline's precision option (attention_ports/pipeline/verify.py, issue 17):
``verify --precision float32`` is the catalogue source judged on the float32 tier, through the same
selection, runner, report and exit status as every run; a precision that is not one, or a
generated case kept (``--dump``) at a lower tier, is refused before anything runs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.fixtures import store as fixtures
from attention_ports.spec.precision import fixtures_dir


def test_verify_precision_float32_judges_the_reference_on_the_float32_tier(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = {s: tmp_path / f"r.{s}" for s in ("json", "xml", "md", "html")}
    targets = ["--json", out["json"], "--junit", out["xml"], "--markdown", out["md"], "--html", out["html"]]
    argv = ["verify", "--precision", "float32", "--impl", "reference", "--quiet", *map(str, targets)]
    assert cli.main(argv) == 0
    doc = json.loads(out["json"].read_text())
    tier = fixtures_dir("float32")
    assert doc["meta"]["precision"] == "float32"
    assert doc["meta"]["fixtures"]["dir"] == str(tier.resolve())
    n = len(fixtures.read_manifest(tier)["cases"])
    assert doc["summary"]["implementations"] == {"reference": {"pass": n}}
    # float32-sized errors: visible against the float32 bound (a float64 run's are ~1e-10 of it)
    assert doc["summary"]["accuracy"]["reference"]["scaled_dot_product_attention"]["err_over_bound"] > 1e-4
    # gpt_train has no case at float32: every report names it with the reason, and the headline is
    # not "PASS: all" over it (it was, before: a port author read that as "my GPT training is checked")
    why = "no case certifies at float32 (docs/precision.md)"
    headline = f"PASS for the {n} judged cases; not judged at float32: gpt_train (no case certifies at float32)"
    assert doc["summary"]["not_judged"] == {"reference": {"gpt_train": why}}
    assert doc["summary"]["headline"] == headline and not doc["summary"]["complete"] and doc["summary"]["ok"]
    assert f"reference: gpt_train not judged at float32: {why}" in capsys.readouterr().out
    assert f"- reference: gpt_train not judged at float32: {why}" in out["md"].read_text()
    assert f"reference: gpt_train not judged at float32: {why}" in out["html"].read_text()
    suite = ET.parse(out["xml"]).getroot().find("testsuite")
    assert suite is not None
    wanted = {"verdict", "not_judged.gpt_train"}
    props = {p.get("name"): p.get("value") for p in suite.iter("property") if p.get("name") in wanted}
    assert props == {"verdict": headline, "not_judged.gpt_train": why}


def test_a_storage_tier_names_the_operations_it_holds_no_judged_case_of(capsys: pytest.CaptureFixture[str]) -> None:
    """bfloat16: the GPT operations and the attention projections are not judged; the headline
    says so in place of "PASS: all", the summary lines give each one's reason."""
    argv = ["verify", "--precision", "bfloat16/float32", "--impl", "reference", "--case", "softmax_ties"]
    argv += ["--case", "block_*", "--case", "gpt_train_*"]
    assert cli.main([*argv, "--quiet"]) == 0
    out = capsys.readouterr().out
    verdict = next(line for line in out.splitlines() if line.startswith("verdict: "))
    assert verdict.startswith("verdict: PASS for the 1 judged cases; not judged at bfloat16/float32: ")
    assert "gpt_train (no rounding points stated at bfloat16/float32 yet)" in verdict
    assert "decoder_block (all 8 cases not applicable at bfloat16/float32)" in verdict
    assert "PASS: all" not in out


def test_a_run_that_judged_nothing_says_nothing_ran_and_fails_under_ci(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port declaring float32, generated gpt_train cases: the float32 tier has no rules for
    gpt_train, so nothing is drawn. Before: "PASS: all 0 cases agree with the truth", exit 0, under
    CI=true too."""
    from tests.faults.conftest import check_runtime

    check_runtime("julia")
    monkeypatch.setenv("CI", "true")
    port = Path(__file__).resolve().parents[1] / "data" / "ports" / "julia" / "ours_float32.jl"
    argv = ["verify", "--random", "3", "--seed", "1", "--op", "gpt_train", "--port", f"julia={port}"]
    assert cli.main(argv) == cli.EXIT_DISAGREE
    out = capsys.readouterr().out
    assert (
        "FAIL: NOTHING RAN: 0 of 0 cases; julia passed zero cases (CI=true: a run must prove its cases ran); "
        "not judged at float32: gpt_train (no case certifies at float32)"
    ) in out
    assert "CI: no case passed on julia: refusing to call this run green" in out
    assert "PASS" not in out


def test_a_generated_run_of_a_port_that_cannot_load_is_the_ports_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Its load error once, exit 1 (before: exit 3, "a bug in attention-ports": the lazily loaded
    Julia port failed while its declaration was read)."""
    from tests.faults.conftest import check_runtime

    check_runtime("julia")
    bad = Path(__file__).resolve().parents[1] / "data" / "ports" / "julia" / "syntax_error.jl"
    assert cli.main(["verify", "--random", "1", "--seed", "1", "--port", f"julia={bad}"]) == cli.EXIT_DISAGREE
    out = capsys.readouterr().out
    assert out.count(f"cannot load {bad}") == 1 and "FAIL: 1 of 1 cases fail" in out, out


def test_nothing_ran_is_never_pass_and_fails_under_ci_only_on_a_whole_run() -> None:
    from attention_ports.report import Report

    empty = Report([], {"implementations": ["reference"]})
    assert empty.headline() == "NOTHING RAN: 0 of 0 cases" and empty.ok and not empty.complete
    assert not Report([], {"implementations": ["reference"]}, ci=True).ok
    nothing = Report([], {}, ci=True)  # nothing asked at all is nothing judged either
    assert not nothing.ok
    assert nothing.headline() == "FAIL: NOTHING RAN: 0 of 0 cases (CI=true: a run must prove its cases ran)"
    shard = Report([], {"implementations": ["reference"], "shard": {"index": 1, "total": 2}}, ci=True)
    assert shard.ok and shard.headline() == "NOTHING RAN: 0 of 0 cases"  # merge-reports judges the run


def test_a_shard_that_passed_nothing_is_left_to_merge_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A softmax-only port, two shards under CI=true: the one holding only an sdpa case passes
    nothing and fails nothing. Before: exit 1 "no case passed on r", though the merged run passes."""
    from tests.faults.conftest import check_runtime

    check_runtime("r")
    monkeypatch.setenv("CI", "true")
    port = Path(__file__).resolve().parents[1] / "data" / "ports" / "r" / "softmax_only.R"
    argv = ["verify", "--port", f"r={port}", "--case", "softmax_ties", "--case", "sdpa_L2_d3", "--quiet"]
    shard = tmp_path / "s1.json"
    assert cli.main([*argv, "--shard", "2/2", "--json", str(shard)]) == 0
    out = capsys.readouterr().out
    doc = json.loads(shard.read_text())
    assert [c["case"] for c in doc["cases"]] == ["sdpa_L2_d3"] and doc["summary"]["ok"]
    assert "CI: shard 2/2 passed no case on r: the zero-pass rule is the whole run's, left to merge-reports" in out
    assert "refusing" not in out


def test_random_at_a_tier_refuses_an_operation_the_tier_has_no_rules_for(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An operation outside a tier (the float32 tier lacked gpt_train when it came) is a usage
    error when asked for by name, and is not drawn by default: its float32 built-ins do not exist,
    so a draw would fail as "operation not implemented"."""
    from attention_ports.spec import precision

    monkeypatch.setattr(precision, "TIER_OPS", tuple(op for op in precision.TIER_OPS if op != "adamw_step"))
    argv = ["verify", "--impl", "reference", "--precision", "float32", "--random", "3", "--op", "adamw_step"]
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    assert "--op adamw_step: the float32 tier has no rules for it yet" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--precision", "half"], "--precision = 'half' is not a precision"),
        (["--precision", "bfloat16"], "--precision = 'bfloat16' is not a precision"),  # a storage format only
        (["--precision", "float32", "--random", "3", "--dump", "kept"], "--dump writes float64 fixtures"),
        (["--precision", "bfloat16/float32", "--random", "3"], "--random judges float64 and float32: not"),
        (["--precision", "float16", "--tier", "scale"], "--tier scale judges float64 and float32: not"),
        # a case of an operation the tier leaves out: the refusal says why (before: only "no case matches")
        (
            ["--precision", "float32", "--case", "gpt_train*"],
            "matches gpt_train*; gpt_train: no case certifies at float32",
        ),
    ],
)
def test_a_bad_precision_is_refused_before_the_run(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["verify", "--impl", "reference", *argv]) == cli.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err


def small_fixtures(folder: Path, ids: tuple[str, ...]) -> Path:
    """A fixture folder of a few shipped cases (their files and manifest entries): a run over it
    reads and validates a manifest of those cases only."""
    import shutil

    manifest = json.loads((fixtures.REPO_FIXTURES / "manifest.json").read_text())
    manifest["cases"] = [c for c in manifest["cases"] if c["id"] in ids]
    for entry in manifest["cases"]:
        shutil.copytree(fixtures.REPO_FIXTURES / "cases" / entry["id"], folder / "cases" / entry["id"])
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


SMALL = ("gpt_one_token", "gpt_grads_one_token", "softmax_ties")


def test_op_selects_one_operations_catalogue_cases(tmp_path: Path) -> None:
    """``--op NAME`` without ``--random`` (issue 26): that operation's catalogue cases only, with
    ``--case`` the cases both select (``--case 'gpt_*'`` matches gpt_forward, gpt_grads and
    gpt_train; ``--op`` one of them)."""
    folder = small_fixtures(tmp_path / "fx", SMALL)
    out = tmp_path / "r.json"
    argv = ["verify", "--impl", "reference", "--dir", str(folder), "--quiet", "--json", str(out)]
    assert cli.main([*argv, "--op", "gpt_forward", "--op", "softmax", "--case", "*_t*"]) == 0
    doc = json.loads(out.read_text())
    assert [c["case"] for c in doc["cases"]] == ["softmax_ties", "gpt_one_token"]  # manifest order
    assert doc["meta"]["operations"] == ["gpt_forward", "softmax"]


def test_op_selects_a_precision_tiers_own_cases(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    argv = ["verify", "--impl", "reference", "--precision", "float32", "--op", "rms_norm", "--json", str(out)]
    assert cli.main([*argv, "--quiet"]) == 0
    manifest = json.loads((fixtures_dir("float32") / "manifest.json").read_text())["cases"]
    want = [c["id"] for c in manifest if c["op"] == "rms_norm"]
    assert [c["case"] for c in json.loads(out.read_text())["cases"]] == want and want


def test_op_in_the_scale_tier_selects_its_cases() -> None:
    from attention_ports.pipeline import verify as pipeline
    from attention_ports.tiers import scale

    args = cli.build_parser().parse_args(["verify", "--tier", "scale", "--op", "decoder_block"])
    units = pipeline.source_from_args(args).units()
    assert [u.id for u in units] == [c.id for c in scale.load_cases() if c.op == "decoder_block"] and units


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--op", "softmax", "--case", "gpt_*"], "no case matching gpt_* in"),
        (["--op", "softmax", "--tier", "scale"], "is of operation softmax"),
        (["--op", "gpt_train", "--precision", "float32"], "--op gpt_train: the float32 tier has no rules for it"),
    ],
)
def test_op_that_selects_nothing_is_bad_input(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    folder = ["--dir", str(small_fixtures(tmp_path / "fx", SMALL))] if "--tier" not in argv else []
    assert cli.main(["verify", "--impl", "reference", *folder, *argv]) == cli.EXIT_BAD_INPUT
    assert message in capsys.readouterr().err
