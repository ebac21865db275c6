"""Diagnoses (attention_ports/diagnose.py): each one named when its mistake is made, and no other.

Two layers. Unit tests hand ``explain`` the array a mistake would produce (the right answer
transposed, scaled, shifted, or recomputed with the mistake) and check the line, and that an
unrelated error gets none. Then real R and Julia ports that make each mistake (KNOWN-BAD ports
under tests/data/ports, and single-bug mutants of our own ports from the mutation kit) run
through ``run_suite`` exactly as ``verify --port`` runs them, and the failure carries the line.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from attention_ports import diagnose, mutation, truth
from attention_ports.builtin import call_reference
from attention_ports.fixtures import REPO_FIXTURES, Case, iter_entries, load_case
from attention_ports.ops import Role
from attention_ports.portview import PortView
from attention_ports.runner import CaseResult, run_suite
from ports import julia_adapter
from tests.faults.conftest import check_runtime

PORTS = Path(__file__).resolve().parent / "data" / "ports"
_ENTRIES = {e["id"]: e for e in iter_entries(REPO_FIXTURES)}


def case(case_id: str) -> Case:
    return load_case(REPO_FIXTURES, _ENTRIES[case_id])


def expected(c: Case, output: str) -> np.ndarray:
    return c.expected[output].array


def julia(name: str, role: Role) -> PortView:
    return PortView("Julia", name, role, lambda ndim: julia_adapter._axes(role, ndim))


# ---------------------------------------------------------------- unit: the right answer, mistaken


def test_a_transposed_matrix_names_the_layout_rule_in_the_ports_language() -> None:
    c = case("sdpa_L2_d3")
    w = expected(c, "weights")
    assert diagnose.explain(c, "weights", w.T) == (
        "weights is the transpose of the expected array: the contract's reference layout: weights is "
        "query x key, one query per row (the port returned key x query)"
    )
    assert diagnose.explain(c, "weights", w.T, julia("weights", Role.SCORES)) == (
        "weights is the transpose of the expected array: the contract's Julia layout: weights is "
        "key x query, one query per column (the port returned query x key)"
    )
    # a wrong shape that is the transpose: the same line
    nonsq = case("sdpa_nq3_nk7_dk5_dv2")
    line = diagnose.explain(nonsq, "weights", expected(nonsq, "weights").T, PortView("R", "weights", Role.SCORES))
    assert line.endswith("R layout: weights is query x key, one query per row (the port returned key x query)")


def test_permuted_head_weights_are_named_axes_permuted() -> None:
    c = case("mha_h4_d16_bias")
    w = expected(c, "weights")  # (h, n_q, n_k)
    line = diagnose.explain(c, "weights", w.transpose(0, 2, 1), julia("weights", Role.HEAD_SCORES))
    assert line == (
        "weights is the expected array with its axes permuted: the contract's Julia layout: weights is "
        "key x query x head (the port returned query x key x head)"
    )


def test_a_symmetric_array_is_not_called_transposed() -> None:
    c = case("sdpa_L2_d3")
    sym = np.array([[0.25, 0.75], [0.75, 0.25]])
    c = replace(c, expected={**c.expected, "weights": replace(c.expected["weights"], array=sym)})
    assert "transpose" not in diagnose.explain(c, "weights", sym + 1e-3)


@pytest.mark.parametrize(
    ("factor", "output", "line"),
    [
        (-1.0, "grads.b_v", "grads.b_v is -1 times the expected values, element by element: the sign is flipped"),
        (3.0, "grads.w_q", "grads.w_q is sqrt(d) = 3 times the expected values, element by element: a 1/sqrt(d)"),
        (
            math.sqrt(2),
            "grads.w_q",
            "grads.w_q is sqrt(2) = 1.41421 times the expected values, element by element: a dimension",
        ),
        (2.0, "grads.b_q", "grads.b_q is 2 times the expected values, element by element: a term counted twice"),
    ],
)
def test_a_constant_multiple_names_the_constant_and_a_cause(factor: float, output: str, line: str) -> None:
    c = case("clf_step_n2")  # d = 9, n = 2
    assert diagnose.explain(c, output, factor * expected(c, output)).startswith(line)


def test_a_constant_that_is_also_a_size_of_the_case_says_so() -> None:
    c = case("clf_step_n2")  # n = 2: a factor 2 may be a sum over the two tokens
    line = diagnose.explain(c, "grads.b_q", 2 * expected(c, "grads.b_q"))
    assert line.endswith("(or a size of the case: n)")


def test_the_scores_scaled_by_another_factor_are_named() -> None:
    c = case("sdpa_nq3_nk7_dk5_dv2")  # d_k = 5, d_v = 2
    for scale, named in [
        (1 / math.sqrt(2), "the scores are scaled by 1/sqrt(d_v) = 0.7071 where this case wants 1/sqrt(d_k) = 0.4472"),
        (1.0, "the scores are scaled by 1 = 1 where this case wants 1/sqrt(d_k) = 0.4472: the scores are never scaled"),
    ]:
        wrong = call_reference(c.op, c.inputs, {**c.options, "scale": scale})
        assert diagnose.explain(c, "weights", wrong["weights"]).startswith(named)
        assert diagnose.explain(c, "output", wrong["output"]).startswith(named)


def test_multi_head_attention_scaled_by_d_model_is_named() -> None:
    c = case("mha_h4_d16_bias")
    wrong = diagnose._mha_scaled(c.inputs, c.options, 1 / math.sqrt(16))
    assert diagnose.explain(c, "output", wrong["output"]).startswith(
        "the scores are scaled by 1/sqrt(d_model) = 0.25 where this case wants 1/sqrt(d_head) = 0.5: "
        "every head scaled by the model width d_model instead of d_head"
    )


@pytest.mark.parametrize("convention", ["nan", "uniform"])
def test_another_masked_query_convention_is_named_with_its_declaration(convention: str) -> None:
    c = case("sdpa_fully_masked_row")  # query 2 (0-based) sees no key
    theirs = truth.compute(c.op, c.inputs, c.options, masked_query=convention)
    for output in ("weights", "output"):
        line = diagnose.explain(c, output, theirs[output][0], PortView("R", output, Role.SCORES))
        assert line.startswith(
            f"wrong only in the query 3, whose mask removes every key: the port follows the {convention!r} convention"
        ), line
        assert line.endswith(
            f'declare it: attention_ports <- list(masked_query = "{convention}") (ports/CONTRACT.md, masked_query)'
        )
    # the convention the port already declared is not suggested again
    nan_weights = truth.compute(c.op, c.inputs, c.options, masked_query="nan")["weights"][0]
    assert "declare" not in diagnose.explain(c, "weights", nan_weights, masked_query="nan")


def test_mask_mistakes_are_recomputed_and_named() -> None:
    c = case("sdpa_additive_bias_mask")  # a finite additive mask, 5 x 7
    mask = c.inputs["mask"]
    for variant, named in [
        (-mask, "right for a different mask: the mask is subtracted instead of added"),
        (None, "right for a different mask: the mask is never applied, or only its -Inf entries"),
    ]:
        inputs = {k: v for k, v in c.inputs.items() if k != "mask"}
        if variant is not None:
            inputs["mask"] = variant
        wrong = call_reference(c.op, inputs, c.options)
        assert diagnose.explain(c, "output", wrong["output"]).startswith(named)


def test_a_causal_mask_off_by_one_diagonal_is_named() -> None:
    c = case("sdpa_causal_additive")
    n = c.inputs["mask"].shape[0]
    sees_next = np.where(np.tri(n, k=1, dtype=bool), 0.0, -np.inf)
    wrong = call_reference(c.op, {**c.inputs, "mask": sees_next}, c.options)
    assert diagnose.explain(c, "weights", wrong["weights"]) == (
        "right for a different mask: the causal mask is off by one diagonal: each query also sees the next key"
    )


def test_a_shift_by_one_query_is_named_in_the_ports_axis() -> None:
    c = case("sdpa_L16_d16")
    out = expected(c, "output")  # (16 tokens, 16 features)
    shifted = np.concatenate([out[1:], out[-1:]])  # row i holds row i + 1's result
    assert diagnose.explain(c, "output", shifted, PortView("R", "output", Role.TOKENS)).startswith(
        "off by one query: row i of output holds what row i+1 should (rows 1..15)"
    )
    later = np.concatenate([out[:1], out[:-1]])
    assert diagnose.explain(c, "output", later, julia("output", Role.TOKENS)).startswith(
        "off by one query: column i of output holds what column i-1 should (columns 2..16)"
    )


def test_wrong_only_where_the_mask_acts_is_localised() -> None:
    c = case("sdpa_causal_additive")  # the last query's mask row is all zeros: untouched
    out = expected(c, "output").copy()
    out[:-1] *= 1.01
    assert diagnose.explain(c, "output", out) == (
        "wrong only in the queries 0, 1, 2, 3, 4, 5, 6 (0-based), where the mask acts; the 1 unmasked query "
        "agrees: the mask is applied wrongly (its sign, its scaling, its orientation, or its -Inf handling)"
    )


def test_an_unrelated_error_gets_no_diagnosis() -> None:
    # A hint that fits nothing is worse than none: noise of 1e-9 relative, a wrong shape that is no
    # permutation, and a wrong single element all go undiagnosed.
    rng = np.random.default_rng(7)
    for case_id, output in [("sdpa_L16_d16", "output"), ("sdpa_causal_additive", "weights"), ("clf_step_n2", "loss")]:
        c = case(case_id)
        e = expected(c, output)
        assert diagnose.explain(c, output, e * (1 + 1e-9 * rng.standard_normal(e.shape))) == "", case_id
    c = case("sdpa_L2_d3")
    assert diagnose.explain(c, "weights", np.zeros((3, 3))) == ""
    one = expected(c, "weights").copy()
    one[0, 0] += 0.1
    assert diagnose.explain(c, "weights", one) == ""


def test_a_check_that_breaks_costs_only_its_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(ctx: diagnose.Context) -> str:
        raise RuntimeError("a bug in a check")

    monkeypatch.setattr(diagnose, "CHECKS", (broken, *diagnose.CHECKS))
    c = case("sdpa_L2_d3")
    assert diagnose.explain(c, "weights", expected(c, "weights").T).startswith("weights is the transpose")


# ---------------------------------------------------------------- real ports making each mistake


def run(lang: str, port: Path, cases: list[str]) -> dict[str, CaseResult]:
    check_runtime(lang)
    results = run_suite(REPO_FIXTURES, [lang], {lang: port}, cases, required={lang}, progress=None)
    return {r.case: r for r in results}


def mutant_port(mutant_id: str, out: Path) -> Path:
    (m,) = [m for m in mutation.load_mutants() if m.id == mutant_id]
    return mutation.materialise(m, out)


def diagnoses(r: CaseResult) -> dict[str, str]:
    return {o.output: o.diagnosis for o in r.outputs if o.status == "fail"}


# (port: a file under tests/data/ports or "mutant:<id>", case, output, the diagnosis starts with)
R_MISTAKES = [
    ("r/output_row_shift.R", "sdpa_L16_d16", "output", "off by one query: row i of output holds what row i+1 should"),
    (
        "r/mask_multiplied.R",
        "sdpa_causal_additive",
        "weights",
        "wrong only in the queries 1, 2, 3, 4, 5, 6, 7, where the mask acts; the 1 unmasked query agrees",
    ),
    (
        "r/causal_off_by_one.R",
        "sdpa_causal_additive",
        "output",
        "right for a different mask: the causal mask is off by one diagonal: each query also sees the next key",
    ),
    (
        "mutant:r_masked_query_nan",
        "sdpa_fully_masked_row",
        "weights",
        "wrong only in the query 3, whose mask removes every key: the port follows the 'nan' convention",
    ),
    (
        "mutant:r_default_scale_d_v",
        "sdpa_nq3_nk7_dk5_dv2",
        "output",
        "the scores are scaled by 1/sqrt(d_v) = 0.7071 where this case wants 1/sqrt(d_k) = 0.4472",
    ),
    (
        "mutant:r_mask_subtracted",
        "sdpa_additive_bias_mask",
        "weights",
        "right for a different mask: the mask is subtracted instead of added",
    ),
    ("mutant:r_clf_grad_b_v_sign", "clf_step_n2", "grads.b_v", "grads$b_v is -1 times the expected values"),
    (
        "mutant:r_weights_returned_transposed",
        "sdpa_nq3_nk7_dk5_dv2",
        "weights",
        "weights is the transpose of the expected array: the contract's R layout: weights is query x key, "
        "one query per row (the port returned key x query)",
    ),
]
JULIA_MISTAKES = [
    (
        "julia/token_major.jl",
        "softmax_non_square_7x2",
        "y",
        "y is the transpose of the expected array: the contract's Julia layout: y is entry x vector, one vector "
        "per column (the port returned vector x entry)",
    ),
    (
        "julia/token_major.jl",
        "sdpa_L2_d3",
        "weights",
        "weights is the transpose of the expected array: the contract's Julia layout: weights is key x query, "
        "one query per column (the port returned query x key)",
    ),
    (
        "julia/mask_transposed.jl",
        "sdpa_causal_additive",
        "weights",
        "right for a different mask: the mask is applied transposed; Julia's mask already is key x query",
    ),
    (
        "mutant:j_masked_query_nan",
        "sdpa_fully_masked_row",
        "output",
        "wrong only in the query 3, whose mask removes every key: the port follows the 'nan' convention",
    ),
    (
        "mutant:j_mha_scale_d_model",
        "mha_h4_d16_bias",
        "output",
        "the scores are scaled by 1/sqrt(d_model) = 0.25 where this case wants 1/sqrt(d_head) = 0.5",
    ),
]


def _by_port(mistakes: list[tuple[str, str, str, str]]) -> dict[str, list[tuple[str, str, str]]]:
    out: dict[str, list[tuple[str, str, str]]] = {}
    for port, case_id, output, line in mistakes:
        out.setdefault(port, []).append((case_id, output, line))
    return out


@pytest.mark.parametrize(
    ("lang", "port"),
    [("r", p) for p in _by_port(R_MISTAKES)] + [("julia", p) for p in _by_port(JULIA_MISTAKES)],
)
def test_a_real_port_making_the_mistake_gets_its_diagnosis(lang: str, port: str) -> None:
    expectations = _by_port(R_MISTAKES if lang == "r" else JULIA_MISTAKES)[port]
    with tempfile.TemporaryDirectory() as tmp:
        path = mutant_port(port.split(":", 1)[1], Path(tmp)) if port.startswith("mutant:") else PORTS / port
        results = run(lang, path, sorted({c for c, _, _ in expectations}))
    for case_id, output, line in expectations:
        r = results[case_id]
        assert r.status == "fail", (port, case_id, r.message())
        got = diagnoses(r).get(output, "")
        assert got.startswith(line), f"{port} {case_id} {output}: {got!r}\n{r.message()}"
        assert f"  diagnosis: {got}" in r.message()
