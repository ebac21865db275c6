"""The one verify pipeline's precision option (attention_ports/pipeline/verify.py, issue 17):
``verify --precision float32`` is the catalogue source judged on the float32 tier, through the same
selection, runner, report and exit status as every run; a precision that is not one, or a
generated case kept (``--dump``) at a lower tier, is refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.fixtures import store as fixtures
from attention_ports.spec.precision import fixtures_dir


def test_verify_precision_float32_judges_the_reference_on_the_float32_tier(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert cli.main(["verify", "--precision", "float32", "--impl", "reference", "--quiet", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    tier = fixtures_dir("float32")
    assert doc["meta"]["precision"] == "float32"
    assert doc["meta"]["fixtures"]["dir"] == str(tier.resolve())
    n = len(fixtures.read_manifest(tier)["cases"])
    assert doc["summary"]["implementations"] == {"reference": {"pass": n}}
    # float32-sized errors: visible against the float32 bound (a float64 run's are ~1e-10 of it)
    assert doc["summary"]["accuracy"]["reference"]["scaled_dot_product_attention"]["err_over_bound"] > 1e-4


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
