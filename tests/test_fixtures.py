"""The fixture store: deterministic, drift-gated, corruption-proof, pickle-free."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

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


def test_generation_is_deterministic_and_matches_the_committed_bytes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    generate(a, REPO_FIXTURES / "catalogue.toml")
    generate(b, REPO_FIXTURES / "catalogue.toml")
    ta, tb = _tree_bytes(a), _tree_bytes(b)
    assert ta == tb
    committed = _tree_bytes(REPO_FIXTURES)
    for rel, data in ta.items():
        if rel != "manifest.json":
            assert committed[rel] == data, rel
    strip = lambda m: {k: v for k, v in json.loads(m).items() if k != "provenance"}  # noqa: E731
    assert strip(ta["manifest.json"]) == strip(committed["manifest.json"])


def test_regenerating_in_place_reports_nothing_written(fixtures_copy: Path) -> None:
    rep = generate(fixtures_copy)
    assert [w for w in rep.written if w != "manifest.json"] == [] and rep.removed == []


def test_manifest_describes_every_file_with_hash_shape_dtype_and_tolerances() -> None:
    manifest = read_manifest(REPO_FIXTURES)
    assert manifest["format_version"] == 1 and manifest["reference_version"]
    assert {"numpy", "python"} <= set(manifest["provenance"]) and manifest["catalogue"]["seed"] == 20261123
    assert len(manifest["cases"]) >= 40
    for case in manifest["cases"]:
        assert case["reason"] and case["flags"]
        for meta in case["expected"].values():
            assert set(meta) == {"file", "shape", "dtype", "sha256", "rtol", "atol"}
            assert 0 < meta["rtol"] <= 1e-12 or "training" in case["flags"]


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
    cat.write_text(cat.read_text().replace("seed = 20261123", "seed = 20261124"))
    problems = check(fixtures_copy)
    assert any("differs from a fresh generation" in p for p in problems)


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
    assert code == 1
    assert "softmax_ties" in out and "fixture error" in out and str(victim) in out
    others = sum(1 for e in read_manifest(fixtures_copy)["cases"] if e["id"].startswith("softmax_")) - 1
    assert f"reference: 1 error, {others} pass" in out


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
            lambda s: s.replace("[tolerances.softmax]\ny = {rtol = 1e-12, atol = 1e-15}", ""),
            "no tolerance for output 'y'",
        ),
        (lambda s: s.replace("format_version = 1", "format_version = 2"), "format_version must be 1"),
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
