"""The attention-ports command line: exit codes, the table, the JSON report, generation."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.spec.catalogue import load_catalogue


def test_verify_reference_passes_and_writes_the_json_report(tmp_path: Path, capsys) -> None:
    report = tmp_path / "report.json"
    code = cli.main(["verify", "--impl", "reference", "--case", "seed*", "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].split() == ["case", "reference"]
    assert "seed000_four_words" in out and "reference: 6 pass" in out
    doc = json.loads(report.read_text())
    assert doc["version"] == 5  # attention_ports/report/json_report.py: what changed from 4
    assert doc["meta"]["tier"] == "catalogue" and doc["meta"]["strict"] is False
    row = doc["results"][0]
    assert set(row) == {
        "impl",
        "case",
        "output",
        "status",
        "max_abs_err",
        "max_rel_err",
        "max_ulp_err",
        "err_over_bound",
        "message",
        "diagnosis",
        "mismatches",
        "total",
        "nonfinite_mismatches",
        "expected_shape",
        "actual_shape",
        "masked_query",  # the convention judged by; None: no query of these cases is fully masked
        "localisation",  # where a composite case goes wrong (judge/localise.py); "" here: they pass
    }  # a case's reason and flags: once, in its "cases" entry (format 5)
    assert all(c["reason"] and c["flags"] for c in doc["cases"])
    assert {r["masked_query"] for r in doc["results"]} == {None}
    assert set(doc) == {"version", "interrupted", "meta", "results", "summary", "agreement", "cases"}
    assert [(c["impl"], c["case"]) for c in doc["cases"]] == list(
        dict.fromkeys((r["impl"], r["case"]) for r in doc["results"])
    )
    assert all(0 <= r["err_over_bound"] <= 1 for r in doc["results"])
    assert {r["case"] for r in doc["results"]} == {
        "seed000_four_words",
        "seed004_illustrated_unscaled",
        "seed002_masked_softmax",
        "seed002_decoder_shape",
        "seed002_encoder_shape",
        "seed001_mha_5tok_d16_h4",
    }
    assert doc["summary"]["ok"] is True and doc["summary"]["implementations"]["reference"] == {"pass": 6}
    acc = doc["summary"]["accuracy"]["reference"]
    assert set(acc) == {"self_attention", "softmax", "scaled_dot_product_attention", "multi_head_attention"}
    assert all(0 <= cell["err_over_bound"] < 1 and cell["ulps"] >= 0 for cell in acc.values())
    assert "worst error vs the truth (ulps / fraction of the bound)" in out


def test_verify_exit_code_is_1_when_a_case_fails(tmp_path: Path, capsys) -> None:
    fixtures = tmp_path / "fx"
    shutil.copytree(REPO_FIXTURES, fixtures)
    # Re-point a case's expected output at another case's array of the same shape and dtype: the
    # reference now disagrees with the fixture, and the report must say where.
    manifest = json.loads((fixtures / "manifest.json").read_text())
    cases = {c["id"]: c for c in manifest["cases"]}
    cases["sdpa_causal_bool"]["expected"]["output"] = cases["sdpa_causal_additive"]["expected"]["output"]
    (fixtures / "manifest.json").write_text(json.dumps(manifest))
    code = cli.main(["verify", "--impl", "reference", "--dir", str(fixtures), "--case", "sdpa_causal_bool"])
    out = capsys.readouterr().out
    assert code == 1
    assert "case 'sdpa_causal_bool', output 'output':" in out and "differ beyond their error bounds" in out
    assert "worst at [" in out
    assert f"repro: attention-ports verify --impl reference --case sdpa_causal_bool --dir {fixtures}" in out


def test_unknown_case_glob_is_a_clear_error(capsys) -> None:
    assert cli.main(["verify", "--impl", "reference", "--case", "no_such_case*"]) == 2
    assert "no case in" in capsys.readouterr().err


def test_port_option_rejects_bad_names_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["verify", "--port", "torch=x.py"])
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["verify", "--port", f"r={tmp_path / 'missing.R'}"])


def small_catalogue(out_dir: Path, ids: tuple[str, ...] = ("softmax_ties", "sdpa_L2_d3", "clf_step_n2")) -> None:
    """A fixture folder whose catalogue holds only ``ids``: generation takes a second, not a minute
    (the whole catalogue's generation is proved byte for byte by tests/fixtures/test_store.py)."""
    out_dir.mkdir()
    text = (REPO_FIXTURES / "catalogue.toml").read_text()
    head, *cases = text.split("\n[[case]]\n")
    keep = [c for c in cases if any(f'id = "{i}"' in c for i in ids)]
    assert len(keep) == len(ids)
    (out_dir / "catalogue.toml").write_text("\n[[case]]\n".join([head, *keep]))


def test_generate_says_which_files_changed(tmp_path: Path, capsys) -> None:
    out_dir = tmp_path / "fx"
    small_catalogue(out_dir)
    assert cli.main(["generate", "--out", str(out_dir)]) == 0
    first = capsys.readouterr().out
    assert f"wrote   {out_dir / 'cases/sdpa_L2_d3/input.q.npy'}" in first
    assert cli.main(["generate", "--out", str(out_dir)]) == 0
    second = capsys.readouterr().out
    assert "wrote   " + str(out_dir / "cases") not in second and "0 removed" in second


def test_console_script_entry_point_runs(tmp_path: Path) -> None:
    # check-fixtures end to end in a fresh process, on a small fixture folder (a full one is
    # regenerated by tests/fixtures/test_bytes.py); not a tty, so progress comes as plain lines.
    out_dir = tmp_path / "fx"
    small_catalogue(out_dir)
    assert cli.main(["generate", "--out", str(out_dir)]) == 0
    proc = subprocess.run(
        [sys.executable, "-m", "attention_ports.cli", "check-fixtures", "--dir", str(out_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "match their manifest and a fresh generation" in proc.stdout
    assert "check-fixtures: 3/3 cases" in proc.stderr


def test_an_operation_missing_from_a_shipped_port_fails_verify(monkeypatch, capsys) -> None:
    import attention_ports.reference as reference

    monkeypatch.delattr(reference, "softmax")  # our own implementation loses an operation
    assert cli.main(["verify", "--impl", "reference", "--case", "softmax_ties"]) == 1
    out = capsys.readouterr().out
    assert "softmax is not defined in reference" in out
    assert "the shipped port(s) reference lack operations" in out


def test_a_repro_line_keeps_a_relative_port_path_relative(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from tests.faults.conftest import check_runtime

    check_runtime("r")
    monkeypatch.chdir(Path(__file__).resolve().parent)
    port = "data/ports/r/mask_multiplied.R"
    code = cli.main(["verify", "--quiet", "--port", f"r={port}", "--case", "sdpa_causal_additive"])
    out = capsys.readouterr().out
    assert code == 1
    assert f"repro: attention-ports verify --impl r --case sdpa_causal_additive --port r={port}\n" in out


def test_quiet_says_a_ports_undeclared_operations_in_one_line(capsys) -> None:
    from tests.faults.conftest import check_runtime

    check_runtime("r")
    port = Path(__file__).resolve().parent / "data" / "ports" / "r" / "mask_multiplied.R"
    assert cli.main(["verify", "--quiet", "--port", f"r={port}"]) == 1
    out = capsys.readouterr().out
    undeclared = [ln for ln in out.splitlines() if "not among the operations" in ln or "not provided" in ln]
    assert len(undeclared) == 1, undeclared
    # every case but SDPA's, the one operation the port declares
    cases = load_catalogue(REPO_FIXTURES / "catalogue.toml").cases
    missing = sum(c.op != "scaled_dot_product_attention" for c in cases)
    assert undeclared[0].startswith(
        f"[r] {missing} case(s) missing, operations not provided: self_attention (16 cases),"
    )
    assert "softmax (12 cases)" in undeclared[0] and "not failures unless --strict" in undeclared[0]
    assert "(e.g. self_attention is not among the operations" in undeclared[0]


def test_an_unusable_r_is_said_once_with_the_installer_a_wheel_user_has(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """A real R worker started against an R_HOME without R: every case is unusable for one reason."""
    monkeypatch.setenv("R_HOME", str(tmp_path))
    port = Path(__file__).resolve().parent / "data" / "ports" / "r" / "mask_multiplied.R"
    assert cli.main(["verify", "--quiet", "--port", f"r={port}"]) == 1
    out = capsys.readouterr().out
    said = [ln for ln in out.splitlines() if "no usable R installation" in ln]
    assert len(said) == 1, said
    total = len(load_catalogue(REPO_FIXTURES / "catalogue.toml").cases)
    assert said[0].startswith(f"[r] {total} cases error (seed000_four_words,")
    assert "`attention-ports setup r`" in said[0] and "install_r.sh" not in out
