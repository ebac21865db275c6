"""Shards (attention_ports/pipeline/shards.py): ``verify --shard K/N`` and ``merge-reports``.

The split is deterministic and balanced by cost; the merged report of every shard is the report of
the unsharded run (results, cases, summary, agreement identical); reports of different runs,
repeated or overlapping shards, and an incomplete set are refused with the files named.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.core import paths, validate
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.results import OutputResult
from attention_ports.pipeline import shards
from attention_ports.pipeline import verify as pipeline
from attention_ports.report import html_page, json_report
from attention_ports.report.model import STATUSES
from attention_ports.spec.catalogue import load_catalogue
from attention_ports.spec.conventions import CONVENTIONS

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


def _write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _take_case(doc: dict, case: str) -> tuple[list[dict], list[dict]]:
    """Remove ``case`` from a report's ``cases`` and ``results``; returns what was removed."""
    cases = [c for c in doc["cases"] if c["case"] == case]
    rows = [r for r in doc["results"] if r["case"] == case]
    doc["cases"] = [c for c in doc["cases"] if c["case"] != case]
    doc["results"] = [r for r in doc["results"] if r["case"] != case]
    return cases, rows


def test_merge_refuses_overlapping_shards(two_shards: list[Path], tmp_path: Path, capsys) -> None:
    s1, s2 = two_shards
    doc, other = json.loads(s2.read_text()), json.loads(s1.read_text())
    unit = other["meta"]["shard"]["units"][0]
    cases, rows = _take_case(other, unit)
    doc["meta"]["shard"]["units"].append(unit)
    doc["cases"] += cases
    doc["results"] += rows
    bad = _write(tmp_path / "s2_overlapping.json", doc)
    err = _refused(capsys, s1, bad)
    assert f"{s1} and {bad} overlap: both ran" in err


def test_merge_refuses_an_interrupted_shard(two_shards: list[Path], tmp_path: Path, capsys) -> None:
    """A shard SIGTERMed mid-run (a job timeout, a cancel) writes the cases it finished and
    "interrupted": true; merged, it was "PASS for 155 of 245", exit 0, summary.ok true."""
    s1, s2 = two_shards
    doc = json.loads(s2.read_text())
    owed = doc["meta"]["shard"]["units"]
    for case in owed[3:]:
        _take_case(doc, case)
    doc["interrupted"] = True
    bad = _write(tmp_path / "s2_interrupted.json", doc)
    merged = tmp_path / "merged.json"
    assert cli.main(["merge-reports", str(s1), str(bad), "--json", str(merged)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: shard 2/2 was interrupted" in err and f"it holds 3 case(s) of the {len(owed)}" in err
    assert not merged.exists()  # nothing half-written


def test_merge_refuses_a_shard_that_lost_or_gained_cases(two_shards: list[Path], tmp_path: Path, capsys) -> None:
    """A shard whose report lost cases its meta.shard.units owed merged "PASS: all 13 cases",
    summary.complete true, for a run of 18; one holding cases it did not owe is refused too."""
    s1, s2 = two_shards
    doc = json.loads(s2.read_text())
    owed = doc["meta"]["shard"]["units"]
    for case in owed[:2]:
        _take_case(doc, case)
    lost = _write(tmp_path / "s2_lost.json", doc)
    err = _refused(capsys, s1, lost)
    assert f"{lost}: shard 2/2: reference lacks 2 of the {len(owed)} case(s) it owed: {owed[0]}, {owed[1]}" in err

    doc = json.loads(s2.read_text())
    stranger = dict(doc["cases"][0], case="softmax_not_owed")
    doc["cases"].append(stranger)
    doc["results"] += [dict(r, case="softmax_not_owed") for r in doc["results"] if r["case"] == owed[0]]
    gained = _write(tmp_path / "s2_gained.json", doc)
    assert f"{gained}: shard 2/2: reference holds cases it did not owe: softmax_not_owed" in _refused(
        capsys, s1, gained
    )

    doc = json.loads(s2.read_text())  # the case entries kept, their outputs gone
    doc["results"] = [r for r in doc["results"] if r["case"] != owed[0]]
    emptied = _write(tmp_path / "s2_no_outputs.json", doc)
    err = _refused(capsys, s1, emptied)
    assert f"{emptied}: cases[0] (reference, {owed[0]}) says 'pass' but has no output in 'results'" in err


def test_merge_refuses_a_generated_shard_that_lost_cases(tmp_path: Path, capsys) -> None:
    args = ["--random", "6", "--seed", "3", "--impl", "reference"]
    paths = []
    for k in (1, 2):
        paths.append(tmp_path / f"r{k}.json")
        assert cli.main(["verify", "--quiet", *args, *_shard(k, 2, paths[-1])]) == 0
    assert cli.main(["merge-reports", *map(str, paths)]) == 0
    doc = json.loads(paths[1].read_text())
    judged = len(doc["cases"])
    _take_case(doc, doc["cases"][0]["case"])
    lost = _write(tmp_path / "r2_lost.json", doc)
    err = _refused(capsys, paths[0], lost)
    assert f"{lost}: shard 2/2: reference holds {judged - 1} generated case(s), but its search tally" in err
    assert f"says it judged {judged}" in err


def test_merge_refuses_shards_of_different_runs(two_shards: list[Path], tmp_path: Path, capsys) -> None:
    s1, _ = two_shards
    other = tmp_path / "other_tier.json"
    assert (
        cli.main(["verify", "--quiet", "--random", "6", "--seed", "1", "--impl", "reference", *_shard(2, 2, other)])
        == 0
    )
    err = _refused(capsys, s1, other)
    assert f"{other} and {s1} are not shards of one run: they differ in the tier" in err

    s2 = two_shards[1]
    doc = json.loads(s2.read_text())
    doc["meta"]["fixtures"]["manifest_sha256"] = "0" * 64
    bad = _write(tmp_path / "changed_manifest_sha256.json", doc)
    assert f"{bad} and {s1} are not shards of one run: they differ in the fixtures (manifest hash)" in _refused(
        capsys, s1, bad
    )
    doc = json.loads(s2.read_text().replace('"reference"', '"torch"'))  # the same cases, run on torch
    bad = _write(tmp_path / "changed_implementations.json", doc)
    assert f"{bad} and {s1} are not shards of one run: they differ in the implementations" in _refused(capsys, s1, bad)

    seeded = []
    for seed in (1, 2):
        path = tmp_path / f"seed{seed}.json"
        random = ["--random", "6", "--seed", str(seed), "--impl", "reference"]
        assert cli.main(["verify", "--quiet", *random, *_shard(seed, 2, path)]) == 0
        seeded.append(path)
    assert f"{seeded[1]} and {seeded[0]} are not shards of one run: they differ in the seed" in _refused(
        capsys, *seeded
    )


def test_merge_refuses_shards_of_two_commits_of_a_port(two_shards: list[Path], tmp_path: Path, capsys) -> None:
    """Shard 1 of the green commit and shard 2 of the red one merged into "FAIL: 26 of 382", a run
    that never existed: each report now records its port files' sha256 and the run id."""
    port = tmp_path / "attention.R"
    docs = []
    for path, body in zip(two_shards, ("softmax <- function(x) 1\n", "softmax <- function(x) 2\n"), strict=True):
        port.write_text(body)
        doc = json.loads(path.read_text())
        doc["meta"]["ports_sha256"] = shards.port_hashes({"r": port})
        doc["meta"]["run_id"] = shards.run_id(doc["meta"])
        docs.append(_write(tmp_path / f"commit_{len(docs)}_{path.name}", doc))
    old, new = (json.loads(d.read_text())["meta"] for d in docs)
    assert old["run_id"] != new["run_id"]
    err = _refused(capsys, *docs)
    assert f"{docs[1]} and {docs[0]} are not shards of one run: they differ in the port files (sha256)" in err
    assert f"r: attention.R {new['ports_sha256']['r']['attention.R'][:12]} vs " in err


def test_the_run_id_names_the_run_and_every_port_file_is_hashed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(shards.RUN_ID_ENV, raising=False)
    folder = tmp_path / "MyPort"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "MyPort.jl").write_text("module MyPort end\n")
    (folder / "Project.toml").write_text('name = "MyPort"\n')
    file_port = tmp_path / "port.R"
    file_port.write_text("x <- 1\n")

    def meta(**extra: object) -> dict:
        ports = {"julia": folder, "r": file_port}
        return pipeline.verify_meta(
            ["reference"], ports, REPO_FIXTURES, "catalogue", False, **{"selection": [], **extra}
        )

    first = meta()
    assert set(first["ports_sha256"]["julia"]) == {"Project.toml", "src/MyPort.jl"}
    assert first["ports_sha256"]["r"] == {"port.R": hashlib.sha256(b"x <- 1\n").hexdigest()}
    assert meta()["run_id"] == first["run_id"]  # the same inputs: the same run
    assert meta(selection=["softmax_*"])["run_id"] != first["run_id"]
    assert meta(precision="float32")["run_id"] != first["run_id"]
    (folder / "src" / "MyPort.jl").write_text("module MyPort f() = 1 end\n")  # the next commit
    assert meta()["run_id"] != first["run_id"]
    monkeypatch.setenv(shards.RUN_ID_ENV, "pipeline-1234")
    assert meta()["run_id"] == "pipeline-1234"


def test_the_zero_pass_rule_is_the_merged_runs(two_shards: list[Path], tmp_path: Path, capsys, monkeypatch) -> None:
    """CI=true: an implementation that passed zero cases fails the run; a shard in which it passed
    none (every case skipped) does not, when the whole run passes some."""
    s1, s2 = two_shards
    doc = json.loads(s1.read_text())
    for row in doc["results"] + doc["cases"]:
        row["status"] = "unavailable"
    skipped = _write(tmp_path / "s1_missing.json", doc)
    monkeypatch.setenv("CI", "true")
    assert cli.main(["merge-reports", str(skipped), str(s2)]) == 0
    assert "PASS for" in capsys.readouterr().out


def test_merged_junit_keeps_the_times_and_html_says_why_it_has_no_heatmaps(
    two_shards: list[Path], tmp_path: Path
) -> None:
    docs = [json.loads(p.read_text()) for p in two_shards]
    seconds = sum(c["seconds"] for d in docs for c in d["cases"])
    assert seconds > 0
    docs[1]["results"][0]["status"] = "fail"  # a failure, so that the page has its Failures section
    docs[1]["cases"][0]["status"] = "fail"
    paths = [_write(tmp_path / f"t{k}.json", d) for k, d in enumerate(docs)]
    xml, page, merged = tmp_path / "m.xml", tmp_path / "m.html", tmp_path / "m.json"
    assert (
        cli.main(["merge-reports", *map(str, paths), "--junit", str(xml), "--html", str(page), "--json", str(merged)])
        == 1
    )
    root = ET.parse(xml).getroot()
    assert float(root.get("time")) == pytest.approx(seconds, abs=1e-3)
    assert all(
        tc.get("time") == f"{c['seconds']:.3f}" for tc, c in zip(root.iter("testcase"), _by_order(docs), strict=True)
    )
    text = page.read_text()
    assert html.escape(html_page.NO_HEATMAPS) in text and 'class="legend"' not in text
    assert all("seconds" not in c for c in json.loads(merged.read_text())["cases"])  # as an unsharded run's


def _by_order(docs: list[dict]) -> list[dict]:
    order = docs[0]["meta"]["shard"]["order"]
    return sorted((c for d in docs for c in d["cases"]), key=lambda c: order.index(c["case"]))


def test_merge_refuses_a_report_that_is_not_a_shard(tmp_path: Path, capsys) -> None:
    whole = tmp_path / "whole.json"
    assert cli.main(["verify", "--quiet", "--impl", "reference", "--case", "softmax_*", "--json", str(whole)]) == 0
    assert f"{whole}: not a shard's report" in _refused(capsys, whole)
    old = tmp_path / "v4.json"
    old.write_text(json.dumps({**json.loads(whole.read_text()), "version": 4}))
    assert f"{old}: report format 4; this attention-ports reads format 5" in _refused(capsys, old)


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


# --------------------------------------------------------------------- hostile shard reports
def _set(path: tuple, value: object) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return edit


def _drop(path: tuple) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        del node[path[-1]]

    return edit


# Each was exit 3 ("a bug in attention-ports": TypeError, KeyError, AttributeError) or, for
# ``results`` an object, nine cases turned into ERRORs blamed on the reference.
HOSTILE = {
    "meta_a_list": (_set(("meta",), []), "field 'meta': must be of type object, got []"),
    "shard_without_index": (
        _drop(("meta", "shard", "index")),
        "field 'meta.shard': lacks the required field(s) 'index'",
    ),
    "index_a_list": (
        _set(("meta", "shard", "index"), [1]),
        "field 'meta.shard.index': must be of type integer, got [1]",
    ),
    "units_a_number": (_set(("meta", "shard", "units"), 7), "field 'meta.shard.units': must be of type array, got 7"),
    "results_an_object": (_set(("results",), {"a": 1}), "field 'results': must be of type array"),
    "agreement_cell_a_string": (
        _set(("agreement", "reference", "reference"), "all"),
        "field 'agreement.reference.reference': must be of type object, got 'all'",
    ),
    "a_status_unknown": (_set(("results", 0, "status"), "ok"), "results[0] (reference, "),
    "index_past_total": (_set(("meta", "shard", "index"), 3), "field 'meta.shard.index' is larger than"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_malformed_shard_report_is_exit_2_naming_the_file_and_field(
    name: str, two_shards: list[Path], tmp_path: Path, capsys
) -> None:
    edit, message = HOSTILE[name]
    doc = json.loads(two_shards[0].read_text())
    edit(doc)
    bad = _write(tmp_path / f"{name}.json", doc)
    err = _refused(capsys, bad, two_shards[1])
    assert f"{bad}" in err and message in err, err
    assert "Traceback" not in err and "internal error" not in err


def test_a_shard_report_nested_100000_deep_is_refused_before_parsing(tmp_path: Path, capsys) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"version": 5, "meta": ' + "[" * 100_000 + "]" * 100_000 + "}")
    err = _refused(capsys, deep)
    assert f"{deep}: nested" in err and f"at most {json_report.MAX_REPORT_DEPTH} are allowed" in err


def test_a_shard_report_over_the_size_cap_is_not_read(two_shards, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(json_report, "MAX_REPORT_BYTES", 1000)
    err = _refused(capsys, two_shards[0], two_shards[1])
    assert f"{two_shards[0]}: {two_shards[0].stat().st_size} bytes, more than the 1000 a JSON report may have" in err


def test_dev_zero_as_a_shard_report_is_refused_unread(capsys) -> None:
    """It was a MemoryError after eating the machine's memory (a shard report had no size cap)."""
    err = _refused(capsys, Path("/dev/zero"))
    assert "/dev/zero: not a regular file (a character device); refusing to read it" in err


def test_a_fifo_as_a_shard_report_is_refused_at_once(tmp_path: Path, capsys) -> None:
    """merge-reports given a FIFO nobody writes blocked for ever; in a thread with a deadline, so
    that a regression fails this test instead of hanging the suite."""
    fifo = tmp_path / "shard-1.json"
    os.mkfifo(fifo)
    codes: list[int] = []
    worker = threading.Thread(target=lambda: codes.append(cli.main(["merge-reports", str(fifo)])), daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():
        try:  # a writer that closes at once: the blocked open() returns and reads an empty file
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
        worker.join(timeout=20)
        pytest.fail("merge-reports blocked on a FIFO nobody writes")
    assert codes == [2]
    assert f"{fifo}: not a regular file (a FIFO); refusing to read it" in capsys.readouterr().err


def test_the_report_schema_is_the_shipped_file_and_names_the_codes_statuses_and_conventions() -> None:
    shipped = json.loads((paths.FIXTURES / "schemas" / "report.schema.json").read_text(encoding="utf-8"))
    assert validate.REPORT_SCHEMA == shipped
    assert shipped["properties"]["version"]["const"] == json_report.REPORT_VERSION
    assert shipped["$defs"]["status"]["enum"] == list(STATUSES)
    assert shipped["$defs"]["output"]["properties"]["masked_query"]["enum"] == [None, *CONVENTIONS]
    written = set(shipped["$defs"]["output"]["required"])
    assert written == set(OutputResult("i", "c", "o", "pass").as_json()) - set(json_report.CASE_FIELDS)
