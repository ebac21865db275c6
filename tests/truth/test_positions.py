"""The position operations' truth and bound rule (attention_ports/truth/positions.py), the rotary
pairing convention (attention_ports/spec/pairing.py) and its diagnosis. No R or Julia here: the
ports run in `verify` and the native tests; each test costs milliseconds."""

from __future__ import annotations

import math

import attention_ports.reference as reference
import numpy as np
import pytest
from flint import arb, ctx

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries, load_case
from attention_ports.judge import diagnose
from attention_ports.judge.compare import compare
from attention_ports.runtimes import declaration
from attention_ports.runtimes.declaration import DeclarationError
from attention_ports.spec import pairing
from attention_ports.spec.ops import Role
from attention_ports.spec.portview import PortView
from attention_ports.truth import bounds, rounding
from attention_ports.truth import engine as truth

X = np.random.default_rng(3).standard_normal((6, 8))
FAR = np.array([0.0, 1.0, 1023.0, 2048.0, 4095.0, 4096.0])


def test_the_sinusoidal_table_is_sin_and_cos_correctly_rounded() -> None:
    table, _ = truth.compute("sinusoidal_positions", {}, {"n": 3, "d": 4, "base": 100.0})["table"]
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    old, ctx.prec = ctx.prec, 200  # balls narrow enough to round
    try:
        tenth = arb(2) / 10  # the exact angle 2 * 100^(-2/4); not the double 0.2
        exact = [rounding.round_ball(v) for v in (arb(2).sin(), arb(2).cos(), tenth.sin(), tenth.cos())]
    finally:
        ctx.prec = old
    assert table[2].tolist() == exact


@pytest.mark.parametrize("want", pairing.PAIRINGS)
def test_theta_by_exp_of_a_log_or_by_a_reciprocal_power_passes_at_large_positions(want: str) -> None:
    """Three standard ways of computing theta_i, at positions up to 4096: each within the bound."""
    expected, bound = truth.compute("rotary_embedding", {"x": X, "positions": FAR}, {"pairing": want})["output"]
    d = X.shape[1]
    i = np.arange(d // 2)
    for theta in (10000.0 ** (-2 * i / d), np.exp(-(2 * i / d) * math.log(10000.0)), 1 / 10000.0 ** (2 * i / d)):
        ang = np.outer(FAR, theta)
        a, b = pairing_columns(want, d)
        y = np.empty_like(X)
        y[:, a] = X[:, a] * np.cos(ang) - X[:, b] * np.sin(ang)
        y[:, b] = X[:, b] * np.cos(ang) + X[:, a] * np.sin(ang)
        assert compare(expected, y, bound).ok


def pairing_columns(want: str, d: int) -> tuple[np.ndarray, np.ndarray]:
    if want == "halves":
        return np.arange(d // 2), np.arange(d // 2, d)
    return np.arange(0, d, 2), np.arange(1, d, 2)


def test_the_bound_covers_an_angle_off_by_its_allowance_and_is_not_much_more() -> None:
    """An angle perturbed relatively by (C_EXP + 3) u, the most the rule allows at frequency 0, moves
    the output by at most the bound, and by at least a tenth of it at position 4095."""
    pos = np.array([4095.0])
    x = np.array([[0.6, -0.8]])
    expected, bound = truth.compute("rotary_embedding", {"x": x, "positions": pos}, {})["output"]
    rho = (bounds.C_EXP + 3) * 2.0**-53
    phi = arb(4095) * (1 + arb(rho))
    moved = [float(arb(0.6) * phi.cos() - arb(-0.8) * phi.sin()), float(arb(-0.8) * phi.cos() + arb(0.6) * phi.sin())]
    change = np.abs(np.array(moved) - expected[0])
    assert np.all(change <= bound[0]) and np.all(change >= bound[0] / 10)


def test_the_bound_scales_with_the_unit_roundoff_read_at_call_time() -> None:
    inputs, options = {"x": X, "positions": FAR}, {"pairing": "halves"}
    _, b64 = truth.compute_detailed("rotary_embedding", inputs, options, memo=False).outputs["output"]
    saved = bounds.U
    try:
        bounds.U = arb(2.0**-24)
        _, b32 = truth.compute_detailed("rotary_embedding", inputs, options, memo=False).outputs["output"]
    finally:
        bounds.U = saved
    assert np.all(b32 > b64 * 2.0**20)  # the rule's u terms; RESOLUTION (2^-46 relative) is not the rule's


@pytest.mark.parametrize("want", pairing.PAIRINGS)
@pytest.mark.parametrize("port", pairing.PAIRINGS)
def test_a_port_of_either_pairing_is_given_the_features_in_its_own_exactly(want: str, port: str) -> None:
    inputs, options, undo = pairing.for_port("rotary_embedding", {"x": X, "positions": FAR}, {"pairing": want}, port)
    assert pairing.OPTION not in options
    got = undo({"output": reference.rotary_embedding(inputs["x"], FAR, pairing=port)})["output"]
    assert np.array_equal(got, reference.rotary_embedding(X, FAR, pairing=want))


def test_builtins_take_the_pairing_option_and_other_operations_pass_through() -> None:
    inputs, options, _ = pairing.for_port("rotary_embedding", {"x": X}, {"pairing": "interleaved"}, None)
    assert options == {"pairing": "interleaved"} and inputs["x"] is X
    inputs, options, _ = pairing.for_port("softmax", {"x": X}, {}, "interleaved")
    assert inputs["x"] is X and options == {}


def test_the_declaration_reads_rope_pairing_and_names_a_bad_value() -> None:
    assert declaration.parse({"rope_pairing": "interleaved"}, "p.jl", "julia").rope_pairing == "interleaved"
    assert declaration.parse({}, "p.R", "r").rope_pairing == "halves"
    with pytest.raises(DeclarationError, match=r"p\.R: attention_ports\$rope_pairing must be one of 'halves', "):
        declaration.parse({"rope_pairing": "pairs"}, "p.R", "r")


def test_a_port_pairing_the_other_way_is_told_to_declare_it_in_its_language() -> None:
    entry = next(e for e in iter_entries(REPO_FIXTURES) if e["id"] == "rope_halves_far_d64")
    case = load_case(REPO_FIXTURES, entry)
    actual = reference.rotary_embedding(case.inputs["x"], case.inputs["positions"], pairing="interleaved")
    line = diagnose.explain(case, "output", actual, PortView("R", "output", Role.TOKENS))
    assert "your port pairs features as interleaved" in line
    assert 'attention_ports <- list(rope_pairing = "interleaved")' in line
