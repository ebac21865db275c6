"""Shards (attention_ports/pipeline/shards.py): ``verify --shard K/N`` and ``merge-reports``.

The split is deterministic and balanced by cost; the merged report of every shard is the report of
the unsharded run (results, cases, summary, agreement identical); reports of different runs,
repeated or overlapping shards, and an incomplete set are refused with the files named.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.pipeline import shards
from attention_ports.pipeline import verify as pipeline
from attention_ports.spec.catalogue import load_catalogue

SAME_RUN = ("results", "cases", "summary", "agreement", "interrupted")


def test_the_split_is_deterministic_balanced_by_cost_and_keeps_the_run_order() -> None:
    units = [pipeline.Unit(f"u{i}", c) for i, c in enumerate([1, 1, 1, 1, 1, 1, 90, 1, 1, 1])]
    parts = shards.split(units, 3)
    assert parts == shards.split(units, 3)
    # the one expensive unit gets a part of its own; the nine cheap ones share the other two
    assert ["u6"] in parts and sorted(u for p in parts for u in p) == sorted(u.id for u in units)
    for p in parts:
        assert p == sorted(p, key=lambda u: int(u[1:]))  # each part in the run's order
    assert sorted(len(p) for p in parts) == [1, 4, 5]


def test_catalogue_shards_balance_the_catalogue_by_its_sizes() -> None:
    units = pipeline.CatalogueSource(REPO_FIXTURES, []).units()
    parts = shards.split(units, 3)
    cost = {u.id: u.cost for u in units}
    loads = [sum(cost[i] for i in p) for p in parts]
    # greedy longest-first: no part exceeds the ideal share by more than the largest case
    assert max(loads) - sum(loads) / 3 <= max(cost.values())
    assert len({len(p) for p in parts}) > 1  # by cost, not by count


@pytest.mark.parametrize("text", ["0/3", "4/3", "1-3", "a/b", "1/0"])
def test_a_bad_shard_is_a_usage_error(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["verify", "--impl", "reference", "--shard", text]) == 2
    assert "--shard takes K/N" in capsys.readouterr().err


def _verify(tmp_path: Path, name: str, *args: str) -> dict:
    path = tmp_path / name
    assert cli.main(["verify", "--quiet", "--json", str(path), *args]) == 0
    return json.loads(path.read_text())


def test_three_catalogue_shards_merged_are_the_whole_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = _verify(tmp_path, "whole.json", "--impl", "reference")
    parts = [_verify(tmp_path, f"s{k}.json", "--impl", "reference", "--shard", f"{k}/3") for k in (1, 2, 3)]
    total = len(load_catalogue(REPO_FIXTURES / "catalogue.toml").cases)
    assert sum(len(p["cases"]) for p in parts) == len(whole["cases"]) == total
    assert all(p["meta"]["shard"]["total"] == 3 for p in parts)
    files = [tmp_path / f"s{k}.json" for k in (3, 1, 2)]  # any order
    out = {s: tmp_path / f"merged.{s}" for s in ("json", "xml", "html", "md")}
    targets = ["--json", out["json"], "--junit", out["xml"], "--html", out["html"], "--markdown", out["md"]]
    code = cli.main(["merge-reports", *map(str, files), *map(str, targets)])
    assert code == 0
    merged = json.loads(out["json"].read_text())
    for key in SAME_RUN:
        assert merged[key] == whole[key], key
    assert "shard" not in merged["meta"] and merged["meta"]["tier"] == "catalogue"
    assert ET.parse(out["xml"]).getroot().get("tests") == str(total)
    assert f"PASS: all {total} cases agree" in out["html"].read_text() and "PASS" in out["md"].read_text()
    assert f"PASS: all {total} cases agree with the truth" in capsys.readouterr().out


def test_random_shards_merged_are_the_whole_generated_run(tmp_path: Path) -> None:
    args = ["--random", "12", "--seed", "7", "--impl", "reference"]
    whole = _verify(tmp_path, "whole.json", *args)
    for k in (1, 2):
        _verify(tmp_path, f"r{k}.json", *args, "--shard", f"{k}/2")
    merged_path = tmp_path / "merged.json"
    assert (
        cli.main(["merge-reports", str(tmp_path / "r1.json"), str(tmp_path / "r2.json"), "--json", str(merged_path)])
        == 0
    )
    merged = json.loads(merged_path.read_text())
    for key in SAME_RUN:
        assert merged[key] == whole[key], key
    assert merged["meta"]["random"] == whole["meta"]["random"]


@pytest.fixture(scope="module")
def two_shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("shards")
    paths = []
    for k in (1, 2):
        path = folder / f"s{k}.json"
        assert cli.main(["verify", "--quiet", "--impl", "reference", "--case", "softmax_*", *_shard(k, 2, path)]) == 0
        paths.append(path)
    return paths


def _shard(k: int, n: int, path: Path) -> list[str]:
    return ["--shard", f"{k}/{n}", "--json", str(path)]


def _refused(capsys: pytest.CaptureFixture[str], *files: Path) -> str:
    assert cli.main(["merge-reports", *map(str, files)]) == 2
    return capsys.readouterr().err


def test_merge_refuses_a_repeated_or_missing_shard(two_shards: list[Path], capsys) -> None:
    s1, _ = two_shards
    err = _refused(capsys, s1, s1)
    assert f"{s1} and {s1} are both shard 1/2" in err
    assert "shard(s) 2/2 missing" in _refused(capsys, s1)


def test_merge_refuses_overlapping_shards(two_shards: list[Path], tmp_path: Path, capsys) -> None:
    s1, s2 = two_shards
    doc = json.loads(s2.read_text())
    doc["meta"]["shard"]["units"].append(json.loads(s1.read_text())["meta"]["shard"]["units"][0])
    bad = tmp_path / "s2_overlapping.json"
    bad.write_text(json.dumps(doc))
    err = _refused(capsys, s1, bad)
    assert f"{s1} and {bad} overlap: both ran" in err


def test_merge_refuses_shards_of_different_runs(two_shards: list[Path], tmp_path: Path, capsys) -> None:
    s1, _ = two_shards
    other = tmp_path / "other_tier.json"
    assert (
        cli.main(["verify", "--quiet", "--random", "6", "--seed", "1", "--impl", "reference", *_shard(2, 2, other)])
        == 0
    )
    err = _refused(capsys, s1, other)
    assert f"{other} and {s1} are not shards of one run: they differ in the tier" in err

    for key, value, what in (
        (("fixtures", "manifest_sha256"), "0" * 64, "the fixtures (manifest hash)"),
        (("implementations",), ["reference", "torch"], "the implementations"),
    ):
        doc = json.loads(s1.read_text())
        doc["meta"]["shard"]["index"] = 2
        node = doc["meta"]
        for k in key[:-1]:
            node = node[k]
        node[key[-1]] = value
        bad = tmp_path / f"changed_{key[-1]}.json"
        bad.write_text(json.dumps(doc))
        assert f"{bad} and {s1} are not shards of one run: they differ in {what}" in _refused(capsys, s1, bad)

    seeded = []
    for seed in (1, 2):
        path = tmp_path / f"seed{seed}.json"
        random = ["--random", "6", "--seed", str(seed), "--impl", "reference"]
        assert cli.main(["verify", "--quiet", *random, *_shard(seed, 2, path)]) == 0
        seeded.append(path)
    assert f"{seeded[1]} and {seeded[0]} are not shards of one run: they differ in the seed" in _refused(
        capsys, *seeded
    )


def test_merge_refuses_a_report_that_is_not_a_shard(tmp_path: Path, capsys) -> None:
    whole = tmp_path / "whole.json"
    assert cli.main(["verify", "--quiet", "--impl", "reference", "--case", "softmax_*", "--json", str(whole)]) == 0
    assert f"{whole}: not a shard's report" in _refused(capsys, whole)
    old = tmp_path / "v3.json"
    old.write_text(json.dumps({**json.loads(whole.read_text()), "version": 3}))
    assert f"{old}: report format 3, merge-reports reads format 4" in _refused(capsys, old)


def test_the_merged_verdict_follows_the_run_rules(two_shards: list[Path], tmp_path: Path, capsys, monkeypatch) -> None:
    """--strict and CI=true's zero-pass rule hold for a merged run as for a whole one."""
    s1, s2 = two_shards
    docs = [json.loads(p.read_text()) for p in two_shards]
    for doc in docs:  # a partial port: every case of the shards 'missing'
        for row in doc["results"] + doc["cases"]:
            row["status"] = "missing"
    paths = []
    for i, doc in enumerate(docs):
        paths.append(tmp_path / f"missing{i}.json")
        paths[-1].write_text(json.dumps(doc))
    assert cli.main(["merge-reports", *map(str, paths), "--strict"]) == 1
    assert "(failing under --strict)" in capsys.readouterr().out
    monkeypatch.setenv("CI", "true")
    assert cli.main(["merge-reports", *map(str, paths)]) == 1
    assert "CI: no case passed on reference" in capsys.readouterr().out
    assert cli.main(["merge-reports", str(s1), str(s2)]) == 0
