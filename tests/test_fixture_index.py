"""fixtures/index.tsv: the manifest for the native runners, complete and current (no R or Julia here)."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import pytest

from attention_ports import fixture_index, ops
from attention_ports.fixtures import REPO_FIXTURES, load_case, manifest_bytes, read_manifest


def _case_files(root: Path, manifest: dict) -> dict[str, bytes]:
    files = {}
    for entry in manifest["cases"]:
        by_convention = entry.get("masked_query", {}).get("expected", {}).values()
        for meta in [
            *entry["inputs"].values(),
            *entry["expected"].values(),
            *(m for c in by_convention for m in c.values()),
        ]:
            for key in ("file", "bound_file"):
                if key in meta:
                    files[meta[key]] = (root / meta[key]).read_bytes()
    return files


def _typed(kind: str, text: str) -> object:
    """An option as the runners read it (conformance.R parse_option, conformance.jl option_value)."""
    readers = {"null": lambda t: None, "bool": lambda t: t == "true", "int": int, "float": float, "str": str}
    return ([] if text == "-" else text.split(",")) if kind == "strs" else readers[kind](text)


def _records(text: str) -> list[list[str]]:
    return [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]


@pytest.fixture(scope="module")
def shipped() -> tuple[dict, bytes, dict[str, bytes]]:
    manifest = read_manifest(REPO_FIXTURES)
    return manifest, (REPO_FIXTURES / "manifest.json").read_bytes(), _case_files(REPO_FIXTURES, manifest)


def test_the_shipped_index_is_the_one_its_manifest_gives(shipped) -> None:
    manifest, data, files = shipped
    assert (REPO_FIXTURES / fixture_index.INDEX).read_bytes() == fixture_index.render(manifest, data, files)


def test_the_index_carries_every_case_array_option_and_operation(shipped) -> None:
    manifest, data, files = shipped
    records = _records((REPO_FIXTURES / fixture_index.INDEX).read_text())
    head = records[0]
    assert head == ["index", "1", "2", hashlib.sha256(data).hexdigest(), hashlib.md5(data).hexdigest()]
    assert all("" not in r for r in records)  # '-' stands for none: no field a split could lose
    arrays = {(r[1], r[2], r[3]): r for r in records if r[0] == "array" and r[4] == "-"}
    assert [r[1] for r in records if r[0] == "case"] == [e["id"] for e in manifest["cases"]]
    for entry in manifest["cases"]:
        spec = ops.get(entry["op"])
        case = load_case(REPO_FIXTURES, entry)
        options = {r[2]: (r[3], r[4]) for r in records if r[0] == "option" and r[1] == entry["id"]}
        assert set(options) == set(entry["options"])
        for name, value in entry["options"].items():
            assert _typed(*options[name]) == value and type(_typed(*options[name])) is type(value)
        wanted = [("input", n, a) for n, a in case.inputs.items()]
        wanted += [(k, n, a) for n, e in case.expected.items() for k, a in (("expected", e.array), ("bound", e.bound))]
        # a flagged case's other conventions (attention_ports/conventions.py); its zeros are the own files
        # (outputs every convention shares, self-attention's q, k, v, point at the own files)
        metas = entry.get("masked_query", {}).get("expected", {})
        others = [
            (c, n, e)
            for c, by in case.conventions.items()
            if c != "zeros"
            for n, e in by.items()
            if metas[c][n]["file"].endswith(f".{c}.npy")
        ]
        wanted_conv = [(c, k, n, a) for c, n, e in others for k, a in (("expected", e.array), ("bound", e.bound))]
        conv_rows = {(r[1], r[4], r[2], r[3]): r for r in records if r[0] == "array" and r[4] != "-"}
        assert sorted(k[1:] for k in conv_rows if k[0] == entry["id"]) == sorted(
            (c, k, n) for c, k, n, _ in wanted_conv
        )
        for conv, kind, name, array in wanted_conv:
            row = conv_rows[(entry["id"], conv, kind, name)]
            assert row[6] == "float64" and row[7] == "[" + ",".join(map(str, array.shape)) + "]"
            assert row[8].endswith(f"{kind}.{name}.{conv}.npy") and row[9] == hashlib.sha256(files[row[8]]).hexdigest()
        own = [(r[1], r[2], r[3]) for r in records if r[0] == "array" and r[1] == entry["id"] and r[4] == "-"]
        assert len(own) == len(wanted)
        for kind, name, array in wanted:
            _, _, _, _, convention, layout, dtype, shape, rel, sha, md5 = arrays[(entry["id"], kind, name)]
            assert convention == "-" and layout == spec.role(name).value
            assert dtype == array.dtype.name and shape == "[" + ",".join(map(str, array.shape)) + "]"
            raw = files[rel]
            assert sha == hashlib.sha256(raw).hexdigest() and md5 == hashlib.md5(raw).hexdigest()
    for spec in ops.OPS.values():
        slots = {r[2]: r[3] for r in records if r[0] == "op" and r[1] == spec.name}
        assert slots["args"] == ",".join(spec.args) and slots["outputs"] == ",".join(spec.outputs)
        assert slots["positional_options"] == (",".join(spec.positional_options) or "-")


def _with_nan_convention(manifest: dict, files: dict[str, bytes], nest: str) -> dict:
    """The manifest with a per-convention expected/bound pair for sdpa_L2_d3's weights, nested as
    ``nest`` says (the index must not depend on where the manifest keeps them)."""
    manifest = copy.deepcopy(manifest)
    entry = next(e for e in manifest["cases"] if e["id"] == "sdpa_L2_d3")
    meta = {"file": "cases/sdpa_L2_d3/expected.weights.nan.npy", "bound_file": "cases/sdpa_L2_d3/bound.weights.nan.npy"}
    for key in ("file", "bound_file"):
        files[meta[key]] = f"bytes of {meta[key]}".encode()
    meta["sha256"] = hashlib.sha256(files[meta["file"]]).hexdigest()
    meta["bound_sha256"] = hashlib.sha256(files[meta["bound_file"]]).hexdigest()
    if nest == "per output":
        entry["expected"]["weights"]["conventions"] = {"nan": meta}
    else:  # a case-level list, expected and bound as separate entries
        entry["conventions"] = [
            {"masked_query": "nan", "files": [{"file": meta["file"], "sha256": meta["sha256"]}]},
            {"masked_query": "nan", "files": [{"file": meta["bound_file"], "sha256": meta["bound_sha256"]}]},
        ]
    return manifest


@pytest.mark.parametrize("nest", ["per output", "per case"])
def test_per_convention_files_listed_anywhere_in_a_case_are_indexed(shipped, nest: str) -> None:
    manifest, _, files = shipped
    files = dict(files)
    edited = _with_nan_convention(manifest, files, nest)
    records = _records(fixture_index.render(edited, manifest_bytes(edited), files).decode())
    rows = [r for r in records if r[0] == "array" and r[1] == "sdpa_L2_d3" and r[4] == "nan"]
    assert [(r[2], r[3], r[5], r[6], r[8]) for r in rows] == [
        ("expected", "weights", "scores", "float64", "cases/sdpa_L2_d3/expected.weights.nan.npy"),
        ("bound", "weights", "scores", "float64", "cases/sdpa_L2_d3/bound.weights.nan.npy"),
    ]
    assert rows[0][7] == next(r[7] for r in records if r[:5] == ["array", "sdpa_L2_d3", "expected", "weights", "-"])


def test_a_convention_file_without_its_bound_is_refused(shipped) -> None:
    manifest, _, files = shipped
    files = dict(files)
    edited = _with_nan_convention(manifest, files, "per output")
    del next(e for e in edited["cases"] if e["id"] == "sdpa_L2_d3")["expected"]["weights"]["conventions"]["nan"][
        "bound_file"
    ]
    with pytest.raises(fixture_index.FixtureIndexError, match=r"'sdpa_L2_d3'.*needs both .*bound\.weights\.nan\.npy"):
        fixture_index.render(edited, manifest_bytes(edited), files)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"frozen": ["w_q", "a\tb"]}, r"case 'softmax_ties', option 'frozen': 'a\\tb' cannot be an index field"),
        ({"frozen": ["-"]}, r"'-' cannot be a name"),
        ({"scale": {"a": 1}}, r"option 'scale': .* is not a null, bool, int, float, string or list of strings"),
    ],
)
def test_values_the_index_cannot_carry_are_refused_naming_the_case(shipped, options, pattern: str) -> None:
    manifest, _, files = shipped
    edited = copy.deepcopy(manifest)
    next(e for e in edited["cases"] if e["id"] == "softmax_ties")["options"] = options
    with pytest.raises(fixture_index.FixtureIndexError, match=pattern):
        fixture_index.render(edited, manifest_bytes(edited), files)


def test_option_values_round_trip_as_the_adapters_pass_them(shipped) -> None:
    manifest, _, files = shipped
    edited = copy.deepcopy(manifest)
    values = {"a": None, "b": True, "c": 3, "d": 0.1, "e": float("inf"), "f": float("nan"), "g": "x", "h": []}
    next(e for e in edited["cases"] if e["id"] == "softmax_ties")["options"] = values
    data = json.dumps(edited, allow_nan=True).encode()
    rows = [r for r in _records(fixture_index.render(edited, data, files).decode()) if r[0] == "option"]
    assert [r[2:] for r in rows if r[1] == "softmax_ties"] == [
        ["a", "null", "-"],
        ["b", "bool", "true"],
        ["c", "int", "3"],
        ["d", "float", "0.1"],
        ["e", "float", "inf"],
        ["f", "float", "nan"],
        ["g", "str", "x"],
        ["h", "strs", "-"],
    ]
