"""The normalisation layers' truth and bound rule (attention_ports/truth/norms.py) on the committed
fixtures: every correct formulation passes every case, the one-pass variance fails the
cancellation cases, and the rule follows the unit roundoff it is given."""

from __future__ import annotations

import numpy as np
import pytest

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries, load_case
from attention_ports.judge.compare import compare
from attention_ports.spec import ops
from attention_ports.spec.precision import FORMATS
from attention_ports.truth import bounds, engine, exact, precision
from attention_ports.truth.exact import InputError

NORM_CASES = {
    e["id"]: load_case(REPO_FIXTURES, e) for e in iter_entries(REPO_FIXTURES) if e["op"] in ("layer_norm", "rms_norm")
}


def _affine(y: np.ndarray, inputs: dict[str, np.ndarray]) -> np.ndarray:
    if "weight" in inputs:
        y = y * inputs["weight"]
    return y + inputs["bias"] if "bias" in inputs else y


def _eps(options: dict) -> float:
    return 1e-5 if options.get("eps") is None else options["eps"]


def two_pass(x, eps):
    c = x - x.mean(axis=1, keepdims=True)
    return c / np.sqrt((c * c).mean(axis=1, keepdims=True) + eps)


def welford(x, eps):
    var = np.empty((x.shape[0], 1))
    for i, row in enumerate(x):
        m = s = 0.0
        for k, v in enumerate(row, start=1):
            delta = v - m
            m += delta / k
            s += delta * (v - m)
        var[i] = s / len(row)
    return (x - x.mean(axis=1, keepdims=True)) / np.sqrt(var + eps)


def fused(x, eps):  # torch's CPU kernel: x s - mu s with s = 1 / sqrt(var + eps)
    mu = x.mean(axis=1, keepdims=True)
    s = 1.0 / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + eps)
    return x * s - mu * s


def one_pass(x, eps):
    mu = x.mean(axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        return (x - mu) / np.sqrt((x * x).mean(axis=1, keepdims=True) - mu * mu + eps)


def test_the_fixtures_hold_both_operations() -> None:
    assert {c.op for c in NORM_CASES.values()} == {"layer_norm", "rms_norm"}
    assert {op for op, spec in ops.OPS.items() if spec.family == "norm"} == {"layer_norm", "rms_norm"}


@pytest.mark.parametrize("formulation", [two_pass, welford, fused])
def test_every_correct_layer_norm_formulation_passes_every_case(formulation) -> None:
    for case_id, case in NORM_CASES.items():
        if case.op != "layer_norm":
            continue
        got = _affine(formulation(case.inputs["x"], _eps(case.options)), case.inputs)
        exp = case.expected["y"]
        res = compare(exp.array, got, exp.bound)
        assert res.ok, f"{formulation.__name__}: {res.describe(case_id, 'y')}"


def test_the_one_pass_variance_fails_exactly_the_cancellation_cases() -> None:
    failing = set()
    for case_id, case in NORM_CASES.items():
        if case.op == "layer_norm":
            got = _affine(one_pass(case.inputs["x"], _eps(case.options)), case.inputs)
            if not compare(case.expected["y"].array, got, case.expected["y"].bound).ok:
                failing.add(case_id)
    assert failing == {"ln_cancellation_mean1e6", "ln_cancellation_eps0"}


def test_rms_norm_times_rsqrt_passes_and_the_centred_statistic_fails() -> None:
    centred_fails = 0
    for case_id, case in NORM_CASES.items():
        if case.op != "rms_norm":
            continue
        x, eps, exp = case.inputs["x"], _eps(case.options), case.expected["y"]
        good = _affine(x * (1.0 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)), case.inputs)
        assert compare(exp.array, good, exp.bound).ok, case_id
        bad = _affine(x / np.sqrt(x.var(axis=1, keepdims=True) + eps), case.inputs)
        centred_fails += not compare(exp.array, bad, exp.bound).ok
    assert centred_fails >= 2


def test_the_bound_follows_the_unit_roundoff_read_at_call_time() -> None:
    inputs = {"x": np.array([[1.0, 2.0, 4.0], [10.0, 10.5, 11.25]])}

    def bound() -> np.ndarray:
        out = exact.run_graph("layer_norm", inputs, {}, prec=engine.BOUND_PREC, track=True)["y"]
        return np.array([float(e.upper()) for e in out.t.e.entries()])

    base = bound()
    with precision.rules(FORMATS["float32"]):  # the float32 tier's constants, u = 2^-24 among them
        wide = bound()
    assert np.all(wide > 1e8 * base)


def test_a_constant_row_without_eps_is_refused_not_bounded() -> None:
    with pytest.raises(bounds.BoundError, match="first-order analysis does not apply"):
        exact.run_graph("layer_norm", {"x": np.full((1, 3), 2.0)}, {"eps": 0.0}, prec=128, track=True)


def test_bad_inputs_are_named() -> None:
    with pytest.raises(InputError, match="eps must be a finite number >= 0"):
        exact.run_graph("rms_norm", {"x": np.ones((2, 2))}, {"eps": -1.0}, prec=128, track=False)
    with pytest.raises(InputError, match="weight must be a vector of length 2"):
        exact.run_graph("layer_norm", {"x": np.ones((2, 2)), "weight": np.ones(3)}, {}, prec=128, track=False)


def test_a_graph_is_registered_once() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        exact.register_graph("layer_norm", exact.GRAPHS["layer_norm"])
