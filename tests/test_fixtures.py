"""The fixture store: deterministic, drift-gated, corruption-proof, pickle-free."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import flint
import numpy as np
import pytest

from attention_ports import cli
from attention_ports.catalogue import CatalogueError, load_catalogue
from attention_ports.fixtures import REPO_FIXTURES, FixtureError, check, generate, load_array, read_manifest
from attention_ports.runner import run_suite


@pytest.fixture
def fixtures_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "fixtures"
    shutil.copytree(REPO_FIXTURES, dst)
    return dst


def _tree_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_committed_fixtures_pass_the_drift_gate() -> None:
    assert check(REPO_FIXTURES) == []


def test_generation_matches_the_committed_bytes_manifest_included(tmp_path: Path) -> None:
    # Generation is a pure function of the catalogue: every file, the manifest too, byte for byte
    # (tests/test_truth_bytes.py repeats this under other BLAS kernels and SIMD levels).
    a = tmp_path / "a"
    generate(a, REPO_FIXTURES / "catalogue.toml")
    generated = _tree_bytes(a)
    committed = _tree_bytes(REPO_FIXTURES)
    assert {r for r in generated if r.startswith("cases/")} == {r for r in committed if r.startswith("cases/")}
    for rel, data in generated.items():  # the catalogue copy, the manifest and every case file
        assert committed[rel] == data, rel


def test_regenerating_in_place_reports_nothing_written(tmp_path: Path) -> None:
    # A small catalogue: that the whole one regenerates to the committed bytes is proved above.
    from tests.test_cli import small_catalogue

    small_catalogue(tmp_path / "fx")
    first = generate(tmp_path / "fx")
    assert "cases/sdpa_L2_d3/bound.output.npy" in first.written
    rep = generate(tmp_path / "fx")
    assert rep.written == [] and rep.removed == [] and "manifest.json" in rep.unchanged


def test_manifest_describes_every_file_its_bound_and_how_the_truth_was_made() -> None:
    manifest = read_manifest(REPO_FIXTURES)
    assert manifest["format_version"] == 2 and manifest["catalogue"]["seed"] == 20261123
    assert "provenance" not in manifest  # nothing that depends on the machine or a NumPy build
    t = manifest["truth"]
    assert t["library"] == "python-flint" and t["version"] == flint.__version__
    assert t["method"] == "arb ball arithmetic, certified round-to-nearest"
    assert t["bounds"]["safety_factor"] == 2
    assert len(manifest["cases"]) >= 40
    for case in manifest["cases"]:
        assert case["reason"] and case["flags"]
        assert isinstance(case["truth"]["precision_bits"], int) and case["truth"]["precision_bits"] >= 128
        for name, meta in case["expected"].items():
            assert set(meta) == {"file", "shape", "dtype", "sha256", "bound_file", "bound_sha256"}
            assert meta["file"] == f"cases/{case['id']}/expected.{name}.npy"
            assert meta["bound_file"] == f"cases/{case['id']}/bound.{name}.npy"
            assert meta["dtype"] == "float64"
    precisions = {c["id"]: c["truth"]["precision_bits"] for c in manifest["cases"]}
    assert precisions["sdpa_L2_d3"] == 128  # certified at the bound pass's precision
    assert precisions["clf_step_n1"] > 1075  # exact zeros need a radius below 2**-1075
    assert precisions["clf_train_sentiment_30_epochs"] > 1500  # ~1.3 bits lost per SGD step


def test_flipping_one_byte_is_named_by_check_fixtures(fixtures_copy: Path, capsys) -> None:
    victim = fixtures_copy / "cases" / "sdpa_L2_d3" / "input.q.npy"
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0x01
    victim.write_bytes(bytes(data))
    assert cli.main(["check-fixtures", "--dir", str(fixtures_copy)]) == 1
    out = capsys.readouterr().out
    assert f"DRIFT {victim}: sha256 differs from the manifest" in out
    assert out.count("DRIFT") == 1


def test_a_changed_catalogue_is_drift(fixtures_copy: Path) -> None:
    cat = fixtures_copy / "catalogue.toml"
    text = cat.read_text()
    edited = text.replace("[7.0, 7.0, 7.0, 7.0, 7.0]", "[7.0, 7.0, 7.0, 7.0, 7.5]")
    assert edited != text
    cat.write_text(edited)
    problems = check(fixtures_copy)
    victims = {p.split(":")[0] for p in problems if "differs from a fresh generation" in p}
    case = fixtures_copy / "cases" / "softmax_ties"
    assert {str(case / "input.x.npy"), str(case / "expected.y.npy"), str(case / "bound.y.npy")} <= victims
    assert any(p.startswith(f"{fixtures_copy / 'manifest.json'}:") for p in problems)


def test_a_tampered_bound_is_named_by_check_fixtures(fixtures_copy: Path) -> None:
    victim = fixtures_copy / "cases" / "sdpa_L2_d3" / "bound.weights.npy"
    arr = np.load(victim)
    np.save(victim, arr * 10)  # a loosened tolerance is drift like any other
    index = fixtures_copy / "index.tsv"  # the native runners' copy of the manifest (fixture_index.py)
    index.write_text(index.read_text().replace("\tfloat\t0.3\n", "\tfloat\t0.31\n", 1))
    problems = check(fixtures_copy)
    assert f"{victim}: sha256 differs from the manifest" in problems
    assert f"{index}: differs from a fresh generation (run `attention-ports generate`)" in problems


def test_truncated_array_is_an_error_for_that_case_only(fixtures_copy: Path) -> None:
    victim = fixtures_copy / "cases" / "sdpa_L2_d3" / "expected.output.npy"
    victim.write_bytes(victim.read_bytes()[:-8])
    results = run_suite(fixtures_copy, ["reference"], case_globs=["sdpa_*"], progress=None)
    by_case = {r.case: r for r in results}
    assert by_case["sdpa_L2_d3"].status == "error"
    assert str(victim) in by_case["sdpa_L2_d3"].message()
    assert all(r.status == "pass" for c, r in by_case.items() if c != "sdpa_L2_d3")


def test_verify_cli_reports_truncated_file_and_runs_the_rest(fixtures_copy: Path, capsys) -> None:
    victim = fixtures_copy / "cases" / "softmax_ties" / "input.x.npy"
    victim.write_bytes(victim.read_bytes()[:40])
    code = cli.main(["verify", "--impl", "reference", "--dir", str(fixtures_copy), "--case", "softmax_*"])
    out = capsys.readouterr().out
    assert code == 2  # bad input, not a disagreement; the other cases still ran and are reported
    assert "softmax_ties" in out and "fixture error" in out and str(victim) in out
    assert f"{victim}: sha256 does not match the manifest" in out
    others = sum(1 for e in read_manifest(fixtures_copy)["cases"] if e["id"].startswith("softmax_")) - 1
    assert f"reference: 1 error, {others} pass" in out
    assert f"bad fixture files in {fixtures_copy} for case(s) softmax_ties: exit 2" in out


def test_arrays_are_loaded_without_pickles(tmp_path: Path) -> None:
    path = tmp_path / "obj.npy"
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    path.write_bytes(buf.getvalue())
    import hashlib

    meta = {"file": "obj.npy", "sha256": hashlib.sha256(buf.getvalue()).hexdigest(), "dtype": "object", "shape": [1]}
    with pytest.raises(FixtureError, match=r"not a readable \.npy file"):
        load_array(tmp_path, meta)


def test_missing_manifest_and_bad_json_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match="no manifest"):
        read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(FixtureError, match=r"manifest\.json: not valid JSON"):
        read_manifest(tmp_path)


@pytest.mark.parametrize(
    ("edit", "pattern"),
    [
        (lambda s: s.replace('op = "softmax"', 'op = "sofmax"', 1), "unknown op 'sofmax'"),
        (lambda s: s.replace('id = "sdpa_L2_d3"', 'id = "sdpa_L1_d1"'), "case id 'sdpa_L1_d1' appears twice"),
        (lambda s: s.replace('flags = ["random", "stability"]', 'flags = ["shiny"]', 1), "unknown flags \\['shiny'\\]"),
        (
            lambda s: s.replace('reason = "Plain rows', 'reason = "x"\nnote = "Plain rows', 1),
            "every case needs a 'reason'|unknown fields",
        ),
        (
            lambda s: s.replace("seed = 20261123", "seed = 20261123\n[tolerances.softmax]\ny = {rtol = 1e-12}"),
            "a \\[tolerances\\] table is not allowed",
        ),
        (
            lambda s: s.replace('op = "softmax"', 'op = "softmax"\ntolerances.y = {rtol = 1e-9}', 1),
            "'tolerances' is not allowed: bounds come from the error analysis",
        ),
        (lambda s: s.replace("format_version = 2", "format_version = 1"), "format_version must be 2"),
    ],
)
def test_malformed_catalogue_names_the_case_and_field(tmp_path: Path, edit, pattern: str) -> None:
    cat = tmp_path / "catalogue.toml"
    cat.write_text(edit((REPO_FIXTURES / "catalogue.toml").read_text()))
    with pytest.raises(CatalogueError, match=pattern):
        load_catalogue(cat)


def test_generate_leaves_no_temp_files(fixtures_copy: Path) -> None:
    generate(fixtures_copy)
    assert not [p for p in fixtures_copy.rglob("*.tmp")]
