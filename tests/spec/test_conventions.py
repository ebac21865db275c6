"""Declared conventions for a query whose mask removes every key (attention_ports/spec/conventions.py).

The fixtures hold one full set of expected outputs per convention for every case flagged
``masked_query``; an implementation is judged against the set its declared convention implies.
The ports here run for real: an NNlib-style Julia port (NaN), a CRAN-style R port (uniform), our
own ports (zeros, undeclared) and torch (SDPA zeros, nn.MultiheadAttention NaN).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attention_ports.fixtures import store as fixtures
from attention_ports.fixtures.store import REPO_FIXTURES, FixtureError, iter_entries, load_case
from attention_ports.judge.results import CaseResult
from attention_ports.judge.runner import judge, run_suite
from attention_ports.report import table
from attention_ports.runtimes.impl import Arrays, Implementation
from attention_ports.runtimes.registry import create
from attention_ports.spec import conventions
from attention_ports.spec.catalogue import load_catalogue
from tests.faults.conftest import check_runtime

DATA = Path(__file__).resolve().parents[1] / "data" / "ports"
NNLIB = DATA / "julia" / "nnlib_style.jl"
CRAN = DATA / "r" / "cran_style.R"
OUR_R_ATTENTION = REPO_FIXTURES.parent / "ports" / "r" / "R" / "attention.R"
ENTRIES = {e["id"]: e for e in iter_entries(REPO_FIXTURES)}
FLAGGED = sorted(i for i, e in ENTRIES.items() if conventions.FLAG in e["flags"])
MHA_FLAGGED = [i for i in FLAGGED if ENTRIES[i]["op"] == "multi_head_attention"]
UNFLAGGED = ["sdpa_L2_d3", "self_attn_L5_d8", "mha_causal_h2", "mha_finite_mask_cross_h3"]


def case(case_id: str) -> fixtures.Case:
    return load_case(REPO_FIXTURES, ENTRIES[case_id])


# --- the fixtures ------------------------------------------------------------------------------------
def test_every_attention_operation_has_flagged_cases_multi_head_at_least_two() -> None:
    by_op = {op: [i for i in FLAGGED if ENTRIES[i]["op"] == op] for op in conventions.ATTENTION_OPS}
    assert all(len(ids) >= 2 for ids in by_op.values()), by_op
    assert len(MHA_FLAGGED) >= 2


def test_the_flag_is_exactly_the_cases_with_a_fully_masked_query() -> None:
    for case_id in ENTRIES:
        c = case(case_id)
        dead = conventions.dead_rows(c.op, c.inputs)
        assert (conventions.FLAG in c.flags) == bool(dead), case_id
        assert c.dead_rows == dead, case_id
        assert sorted(c.conventions) == (sorted(conventions.CONVENTIONS) if dead else []), case_id


@pytest.mark.parametrize("cid", MHA_FLAGGED)  # not case_id: the plugin parametrizes that over every case
def test_multi_head_dead_rows_under_each_convention(cid: str) -> None:
    """The contract, the reference and the truth agree: zero weights -> concatenated zeros -> b_o."""
    c = case(cid)
    dead, live = list(c.dead_rows), [i for i in range(c.inputs["query"].shape[0]) if i not in c.dead_rows]
    b_o = c.inputs.get("b_o", np.zeros(c.inputs["query"].shape[1]))
    zeros, nan, uniform = (c.conventions[k] for k in ("zeros", "nan", "uniform"))
    assert zeros is c.expected
    assert (zeros["output"].array[dead] == b_o).all()  # exactly b_o (zero without b_o)
    assert (zeros["weights"].array[:, dead] == 0).all()
    assert np.isnan(nan["output"].array[dead]).all() and np.isnan(nan["weights"].array[:, dead]).all()
    n_k = c.inputs["key"].shape[0]
    assert (uniform["weights"].array[:, dead] == 1 / n_k).all()
    for conv in (nan, uniform):  # a convention changes the dead rows and nothing else
        assert (conv["output"].array[live] == zeros["output"].array[live]).all()
        assert (conv["weights"].array[:, live] == zeros["weights"].array[:, live]).all()
    # The NumPy reference follows the default convention: its b_o rows pass as they are.
    import attention_ports.reference as reference

    got = reference.multi_head_attention(**c.inputs, num_heads=c.options["num_heads"])
    assert (got.output[dead] == b_o).all()


def test_convention_files_are_listed_and_shared_where_they_do_not_differ() -> None:
    entry = ENTRIES["self_attn_padding_bias"]
    section = entry["masked_query"]
    assert section["dead_rows"] == [4]
    assert section["expected"]["zeros"] == entry["expected"]
    for conv in ("nan", "uniform"):
        metas = section["expected"][conv]
        for name in ("q", "k", "v"):  # untouched by the convention: the default's files
            assert metas[name] == entry["expected"][name]
        for name in ("weights", "output"):
            assert metas[name]["file"] == f"cases/self_attn_padding_bias/expected.{name}.{conv}.npy"
            assert metas[name]["bound_file"] == f"cases/self_attn_padding_bias/bound.{name}.{conv}.npy"


def _catalogue(tmp_path: Path, flags: str, mask: str) -> Path:
    path = tmp_path / "catalogue.toml"
    path.write_text(
        "format_version = 2\nseed = 1\n\n[[case]]\n"
        'id = "c"\nop = "scaled_dot_product_attention"\nreason = "a case for the flag checks"\n'
        f"flags = {flags}\n"
        "inputs.q = {normal = [2, 3]}\ninputs.k = {normal = [4, 3]}\ninputs.v = {normal = [4, 2]}\n"
        f"inputs.mask = {mask}\n"
    )
    return path


@pytest.mark.parametrize(
    ("flags", "mask", "message"),
    [
        ('["mask"]', "{padding = [2, 4], valid = 2, dead_rows = [1]}", r"case 'c': queries \[1\] have every key"),
        ('["masked_query"]', "{padding = [2, 4], valid = 2}", r"case 'c': flagged 'masked_query' but no query"),
    ],
)
def test_generation_refuses_a_flag_that_does_not_match_the_inputs(tmp_path, flags, mask, message) -> None:
    with pytest.raises(FixtureError, match=message):
        fixtures.render(load_catalogue(_catalogue(tmp_path, flags, mask)), workers=1)


def test_a_manifest_without_the_conventions_of_a_flagged_case_is_refused() -> None:
    entry = {k: v for k, v in ENTRIES["sdpa_fully_masked_row"].items() if k != "masked_query"}
    with pytest.raises(FixtureError, match=r"'sdpa_fully_masked_row'.*flagged 'masked_query' but has no"):
        load_case(REPO_FIXTURES, entry)


# --- judging ---------------------------------------------------------------------------------------
class JudgedAs(Implementation):
    """A real implementation's outputs, judged as if it declared ``convention``."""

    def __init__(self, inner: Implementation, convention: str) -> None:
        self.inner, self.name, self.convention = inner, inner.name, convention

    def masked_query_for(self, op: str) -> str:
        return self.convention

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        return self.inner.run(op, inputs, options)


def _judge_all(name: str, impl: Implementation, ids: list[str]) -> dict[str, CaseResult]:
    out = {}
    for case_id in ids:
        res = CaseResult(name, case_id, ENTRIES[case_id]["op"])
        res.outputs = judge(name, case(case_id), impl)
        out[case_id] = res
    return out


def _assert_judged(results: dict[str, CaseResult], declared: str, follows: str) -> None:
    for case_id, res in results.items():
        if case_id not in FLAGGED:
            assert res.status == "pass" and res.masked_query is None, (case_id, res.message())
            continue
        assert res.masked_query == declared, case_id
        if declared == follows:
            assert res.status == "pass", (case_id, declared, res.message())
            continue
        assert res.status == "fail", (case_id, declared)
        text = res.message()
        # said once, by the diagnosis (in the port's language) or by the convention note
        assert (
            f"the port follows the {follows!r} convention there" in text and f"is judged by {declared!r}" in text
        ) or (
            f"is judged by its convention {declared!r}" in text
            and f"the outputs follow the {follows!r} convention instead" in text
        ), text
        assert f'masked_query = "{follows}"' in text, text
        # only the outputs the convention decides fail: self-attention's q, k, v still pass
        for o in res.outputs:
            if o.output in ("q", "k", "v"):
                assert o.status == "pass", (case_id, o.output)


def test_torch_declares_its_conventions_per_operation_and_passes_as_them() -> None:
    torch_impl = create("torch")
    assert torch_impl.masked_query_for("scaled_dot_product_attention") == "zeros"
    assert torch_impl.masked_query_for("self_attention") == "zeros"
    assert torch_impl.masked_query_for("multi_head_attention") == "nan"
    results = _judge_all("torch", torch_impl, FLAGGED + UNFLAGGED)
    for case_id in FLAGGED:
        expected = "nan" if case_id in MHA_FLAGGED else "zeros"
        assert results[case_id].status == "pass", results[case_id].message()
        assert results[case_id].masked_query == expected
    assert "pass:NaN" in table(list(results.values())) and "pass:0" in table(list(results.values()))
    # nn.MultiheadAttention really returns NaN there: judged as zeros, its multi-head cases fail.
    _assert_judged(_judge_all("torch", JudgedAs(torch_impl, "zeros"), MHA_FLAGGED), "zeros", "nan")


def test_the_reference_follows_zeros_and_only_zeros() -> None:
    ref = create("reference")
    for conv in conventions.CONVENTIONS:
        _assert_judged(_judge_all("reference", JudgedAs(ref, conv), FLAGGED + UNFLAGGED), conv, "zeros")


# --- real ports, each with its declaration -------------------------------------------------------------
PORTS = {
    # name: (language, file, the convention its code follows)
    "nnlib_style": ("julia", NNLIB, "nan"),
    "cran_style": ("r", CRAN, "uniform"),
}


@pytest.mark.parametrize("port", list(PORTS))
def test_a_port_passes_the_dead_row_cases_only_under_the_convention_its_code_follows(port: str) -> None:
    lang, path, follows = PORTS[port]
    check_runtime(lang)
    with create(lang, path) as impl:
        assert impl.masked_query == follows  # read from its declaration
        results = _judge_all(lang, impl, FLAGGED + UNFLAGGED)
        _assert_judged(results, follows, follows)
        for conv in conventions.CONVENTIONS:  # and judged as any other, the dead rows fail
            _assert_judged(_judge_all(lang, JudgedAs(impl, conv), FLAGGED + UNFLAGGED), conv, follows)


def _redeclared(src: Path, tmp_path: Path, convention: str | None) -> Path:
    """``src`` with its masked_query declaration replaced (None: removed, so the default applies)."""
    text = src.read_text()
    old = next(line for line in text.splitlines() if "masked_query =" in line and "#" not in line)
    new = "" if convention is None else old.replace(old.split('"')[1], convention)
    out = tmp_path / src.name
    out.write_text(text.replace(old, new))
    return out


def test_a_nan_port_without_its_declaration_fails_naming_the_convention(tmp_path: Path) -> None:
    """NNlib-style NaN rows, no masked_query declared: judged as zeros, every dead-row case fails."""
    check_runtime("julia")
    path = _redeclared(NNLIB, tmp_path, None)
    results = run_suite(
        REPO_FIXTURES, ["julia"], {"julia": path}, FLAGGED + UNFLAGGED, required={"julia"}, progress=None
    )
    by_case = {r.case: r for r in results}
    _assert_judged(by_case, "zeros", "nan")
    text = by_case["mha_padding_dead_row_bias_h2"].message()
    assert "NaN found but not expected at output[1, 4]" in text  # the port's layout: Julia, 1-based
    assert "the port follows the 'nan' convention there" in text and "is judged by 'zeros'" in text
    assert 'const attention_ports = (masked_query = "nan",)' in text
    assert text.count('const attention_ports = (masked_query = "nan",)') == 2  # once per output, not twice
    assert "FAIL:0" in table(results)


def test_a_port_declaring_nan_must_return_nan_rows(tmp_path: Path) -> None:
    """Our own R attention (zeros) declared as "nan": the dead-row cases fail, pointing back at zeros."""
    check_runtime("r")
    path = tmp_path / "ours_declared_nan.R"
    path.write_text('attention_ports <- list(masked_query = "nan")\n' + OUR_R_ATTENTION.read_text())
    ids = [i for i in FLAGGED + UNFLAGGED if ENTRIES[i]["op"] != "softmax"]
    results = run_suite(REPO_FIXTURES, ["r"], {"r": path}, ids, required={"r"}, progress=None)
    by_case = {r.case: r for r in results}
    _assert_judged(by_case, "nan", "zeros")
    assert "NaN expected but not found" in by_case["sdpa_fully_masked_row"].message()


def test_the_json_report_names_the_convention(tmp_path: Path) -> None:
    import json

    from attention_ports.report import write_json

    results = run_suite(REPO_FIXTURES, ["torch"], None, ["mha_padding_dead_row_bias_h2", "sdpa_L2_d3"], progress=None)
    write_json(results, tmp_path / "r.json")
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    got = {(r["case"], r["output"]): r["masked_query"] for r in rows}
    assert got[("mha_padding_dead_row_bias_h2", "output")] == "nan"
    assert got[("sdpa_L2_d3", "output")] is None
