"""The transformer's truth and bound rules (attention_ports/truth/transformer.py), proved both ways.

* the values against an independent computation of the same math in mpmath at 50 digits;
* sound: several correct float64 formulations (NumPy with other layer-norm, gelu and summation
  choices, torch float64's own kernels, fused QKV, Welford's variance, ``x * rsqrt``) are within
  the bound at every element, over several seeds;
* useful: the porting bugs (no causal mask, unbiased variance, eps outside the square root, the
  other gelu, post-norm, a missing residual, heads split interleaved) fail, and so does a 1e-8
  relative error.
Sizes are small (d = 8 or 16, 2 heads, L = 8, vocab 12): the whole module runs in seconds.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from attention_ports.spec.ops import FFN_PARAMS
from attention_ports.spec.precision import FORMATS
from attention_ports.truth import bounds, engine, exact, precision
from attention_ports.truth.exact import InputError

SEEDS = (0, 1, 2)
ERF = np.vectorize(math.erf, otypes=[np.float64])
K_TANH = math.sqrt(2 / math.pi)


# -------------------------------------------------------------------- inputs


def ffn_inputs(rng: np.random.Generator, n: int = 8, d: int = 16, d_ff: int = 64) -> dict[str, np.ndarray]:
    return {
        "x": rng.normal(size=(n, d)),
        "w_1": rng.normal(size=(d, d_ff)) / math.sqrt(d),
        "b_1": rng.normal(size=d_ff) * 0.1,
        "w_2": rng.normal(size=(d_ff, d)) / math.sqrt(d_ff),
        "b_2": rng.normal(size=d) * 0.1,
    }


# -------------------------------------------------------------------- formulations (float64 NumPy)


def gelu_np(x: np.ndarray, form: str, how: str = "plain") -> np.ndarray:
    if form == "tanh":
        a = K_TANH * (x + 0.044715 * x**3)
        if how == "sigmoid":
            return x / (1 + np.exp(np.minimum(-2 * a, 700)))
        return 0.5 * x * (1 + np.tanh(a))
    if how == "phi":  # x Phi(x) through erfc, as R's x * pnorm(x)
        return x * np.vectorize(math.erfc, otypes=[np.float64])(-x / math.sqrt(2)) / 2
    return 0.5 * x * (1 + ERF(x / math.sqrt(2)))


def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, order: str = "blas") -> np.ndarray:
    """``x w + b``: BLAS, or a sequential sum over the inner dimension in reverse, the bias first."""
    if order == "blas":
        y = x @ w
        return y if b is None else y + b
    acc = np.zeros((x.shape[0], w.shape[1])) if b is None else np.tile(b, (x.shape[0], 1))
    for k in reversed(range(w.shape[0])):
        acc = acc + x[:, k : k + 1] * w[k : k + 1, :]
    return acc


def ffn_np(x, p, form, order="blas", gelu_how="plain", wrong_form=False):
    hidden = linear(x, p["w_1"], p["b_1"], order)
    use = ("none" if form == "tanh" else "tanh") if wrong_form else form
    return linear(gelu_np(hidden, use, gelu_how), p["w_2"], p["b_2"], order)


def ffn_torch(x, p, form):
    import torch
    import torch.nn.functional as F

    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in p.items()}
    h = F.linear(torch.tensor(x, dtype=torch.float64), t["w_1"].T, t["b_1"])
    return F.linear(F.gelu(h, approximate=form), t["w_2"].T, t["b_2"]).numpy()


# -------------------------------------------------------------------- helpers


def truth(op: str, inputs: dict, options: dict, out: str) -> tuple[np.ndarray, np.ndarray]:
    res = engine.compute_detailed(op, inputs, options, memo=False).outputs
    return res[out]


def fraction(expected: np.ndarray, got: np.ndarray, bound: np.ndarray) -> float:
    """The worst element's |got - expected| / bound (> 1: outside the bound)."""
    return float(np.max(np.abs(got - expected) / bound))


def rounded(x) -> float:
    """An mpmath number rounded to the nearest double (via exact rationals)."""
    m, e = abs(mpmath.mpf(x)).man_exp
    value = float(Fraction(int(m)) * Fraction(2) ** int(e)) if m else 0.0
    return -value if x < 0 else value


def mp(a: np.ndarray) -> mpmath.matrix:
    return mpmath.matrix(np.atleast_2d(a).tolist())


def mp_gelu(x, form: str):
    if form == "tanh":
        return x / 2 * (1 + mpmath.tanh(mpmath.sqrt(2 / mpmath.pi) * (x + mpmath.mpf("0.044715") * x**3)))
    return x / 2 * (1 + mpmath.erf(x / mpmath.sqrt(2)))


def mp_affine(x: mpmath.matrix, w: np.ndarray, b: np.ndarray | None) -> mpmath.matrix:
    y = x * mp(w)
    if b is not None:
        for i in range(y.rows):
            for j in range(y.cols):
                y[i, j] += mpmath.mpf(float(b[j]))
    return y


def mp_ffn(x: mpmath.matrix, p: dict, form: str) -> mpmath.matrix:
    h = mp_affine(x, p["w_1"], p["b_1"])
    return mp_affine(h.apply(lambda v: mp_gelu(v, form)), p["w_2"], p["b_2"])


def to_double(m: mpmath.matrix) -> np.ndarray:
    return np.array([[rounded(m[i, j]) for j in range(m.cols)] for i in range(m.rows)])


# -------------------------------------------------------------------- feed_forward


@pytest.mark.parametrize("form", ["none", "tanh"])
def test_feed_forward_values_are_the_exact_result_rounded(form: str) -> None:
    p = ffn_inputs(np.random.default_rng(7), n=3, d=4, d_ff=8)
    expected, _ = truth("feed_forward", p, {"approximate": form}, "y")
    with mpmath.workdps(50):
        want = to_double(mp_ffn(mp(p["x"]), p, form))
    np.testing.assert_array_equal(expected, want)


FFN_CORRECT = {
    "numpy": lambda x, p, f: ffn_np(x, p, f),
    "reverse sums, bias first": lambda x, p, f: ffn_np(x, p, f, order="seq"),
    "erfc / sigmoid gelu": lambda x, p, f: ffn_np(x, p, f, gelu_how="sigmoid" if f == "tanh" else "phi"),
    "torch": ffn_torch,
}


@pytest.mark.parametrize("form", ["none", "tanh"])
def test_every_correct_feed_forward_is_within_the_bound_and_bugs_are_not(form: str) -> None:
    worst = 0.0
    for seed in SEEDS:
        p = ffn_inputs(np.random.default_rng(seed))
        expected, bound = truth("feed_forward", p, {"approximate": form}, "y")
        x, params = p["x"], {k: p[k] for k in FFN_PARAMS}
        for name, impl in FFN_CORRECT.items():
            frac = fraction(expected, impl(x, params, form), bound)
            assert frac <= 1, f"{name}, seed {seed}: {frac:.3g} of the bound"
            worst = max(worst, frac)
        assert fraction(expected, ffn_np(x, params, form, wrong_form=True), bound) > 1
        assert fraction(expected, expected * (1 + 1e-8), bound) > 1
    assert worst > 1e-3  # the bound is not vacuous: correct formulations use a visible part of it


def test_feed_forward_bad_inputs_are_named() -> None:
    p = ffn_inputs(np.random.default_rng(0), n=2, d=4, d_ff=8)
    with pytest.raises(InputError, match=r"w_2 must have shape \(8, 4\)"):
        exact.run_graph("feed_forward", {**p, "w_2": np.ones((4, 8))}, {}, prec=128, track=False)
    with pytest.raises(InputError, match="w_1 must be"):
        exact.run_graph("feed_forward", {**p, "w_1": np.ones((3, 8))}, {}, prec=128, track=False)
    with pytest.raises(InputError, match="approximate must be one of"):
        exact.run_graph("feed_forward", p, {"approximate": "erf"}, prec=128, track=False)


def test_gelu_with_an_input_error_bounds_every_point_of_its_ball() -> None:
    """The carried rule contains |gelu(x') - gelu(x)| for x' anywhere within e of x."""
    from flint import arb

    from attention_ports.truth import activations

    for form in ("none", "tanh"):
        for x in (-7.5, -1.25, -0.3, 0.0, 0.7, 2.5, 9.0):
            e = 1e-9 * max(abs(x), 1)
            bound = float(activations.gelu_carried(arb(x), arb(e), form).upper())
            with mpmath.workdps(40):
                g0 = mp_gelu(mpmath.mpf(x), form)
                moved = max(abs(mp_gelu(mpmath.mpf(x) + s * mpmath.mpf(e), form) - g0) for s in (-1, 1))
            assert float(moved) <= bound <= 1.05 * float(moved) + 1e-14 * max(abs(x), 1), (form, x)


def test_the_float32_tier_scales_the_feed_forward_bound() -> None:
    p = ffn_inputs(np.random.default_rng(3))
    base = exact.run_graph("feed_forward", p, {}, prec=engine.BOUND_PREC, track=True)["y"].t.e
    with precision.rules(FORMATS["float32"]):
        wide = exact.run_graph("feed_forward", p, {}, prec=engine.BOUND_PREC, track=True)["y"].t.e
    ratio = [float((w / b).mid()) for w, b in zip(wide.entries(), base.entries(), strict=True)]
    assert min(ratio) > 2**28  # u went from 2^-53 to 2^-24
    assert float(bounds.U.mid()) == 2.0**-53  # and back
