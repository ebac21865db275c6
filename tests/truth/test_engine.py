"""The exact engine against an independent oracle: the same math in mpmath at 60 digits.

Every expected value must be the exact result correctly rounded, so it must equal, bit for bit,
the mpmath result rounded through ``Fraction`` (60 digits is ~10^-60: a correctly rounded double
cannot be told apart from it unless the exact value sits within 10^-44 of a rounding boundary,
which these random inputs do not). The classifier's gradients are checked against central
differences of an mpmath loss, so the backward formulas are tested, not just their arithmetic.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from flint import arb

from attention_ports.spec.ops import CLASSIFIER_PARAMS
from attention_ports.truth import bounds
from attention_ports.truth import engine as truth
from attention_ports.truth.bounds import BoundError
from attention_ports.truth.exact import InputError

MP = mpmath.mp
DPS = 60


def rounded(x) -> float:
    """An mpmath number rounded to the nearest double (via exact rationals)."""
    if mpmath.isnan(x):
        return math.nan
    x = mpmath.mpf(x)
    m, e = abs(x).man_exp  # man_exp carries no sign
    value = float(Fraction(int(m)) * Fraction(2) ** int(e)) if m else 0.0
    return -value if x < 0 else value


def rounded_array(a) -> np.ndarray:
    return np.vectorize(rounded, otypes=[float])(np.array(a, dtype=object))


def mp_softmax_row(row: list, keep: list[bool] | None = None) -> list:
    keep = keep or [True] * len(row)
    kept = [x for x, k in zip(row, keep, strict=True) if k]
    if not kept:
        return [mpmath.nan] * len(row)
    m = max(kept)
    ex = [mpmath.exp(x - m) if k else mpmath.mpf(0) for x, k in zip(row, keep, strict=True)]
    total = mpmath.fsum(ex)
    return [e / total for e in ex]


def mp_matmul(a, b):
    return [[mpmath.fsum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def to_mp(a: np.ndarray):
    return np.vectorize(lambda v: mpmath.mpf(float(v)), otypes=[object])(np.asarray(a, dtype=np.float64)).tolist()


def mp_attention(q, k, v, scale, mask=None, policy="zeros"):
    d = len(q[0])
    s = 1 / mpmath.sqrt(d) if scale is None else mpmath.mpf(scale)
    scores = [[s * mpmath.fsum(qi[t] * kj[t] for t in range(d)) for kj in k] for qi in q]
    weights = []
    for i, row in enumerate(scores):
        keep = None
        if mask is not None:
            m = mask[i]
            keep = [bool(x) if isinstance(x, (bool, np.bool_)) else x != -math.inf for x in m]
            if not isinstance(m[0], (bool, np.bool_)):
                row = [r + (x if x != -math.inf else 0) for r, x in zip(row, m, strict=True)]
        if keep is not None and not any(keep):
            n_k = len(row)
            weights.append(
                {"zeros": [mpmath.mpf(0)] * n_k, "nan": [mpmath.nan] * n_k}.get(policy, [mpmath.mpf(1) / n_k] * n_k)
            )
        else:
            weights.append(mp_softmax_row(row, keep))
    return mp_matmul(weights, v), weights


@pytest.fixture(autouse=True)
def _precision():
    old = MP.dps
    MP.dps = DPS
    yield
    MP.dps = old


def assert_exact(got: np.ndarray, want) -> None:
    want = rounded_array(want)
    np.testing.assert_array_equal(got, want.reshape(got.shape))


def test_softmax_is_the_exact_result_correctly_rounded_with_masks_and_large_logits() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 7)) * np.array([[1], [1e3], [30], [1], [1]])
    x[0, 2] = -np.inf
    x[3] = -np.inf  # a fully masked slice: NaN
    x[4] = 2.5  # ties
    res = truth.compute("softmax", {"x": x}, {})
    y, bound = res["y"]
    keep = [[v != -np.inf for v in row] for row in x.tolist()]
    want = [mp_softmax_row(to_mp(np.where(np.isinf(r), 0, r)), k) for r, k in zip(x, keep, strict=True)]
    assert_exact(y, want)
    assert y[0, 2] == 0.0 and np.isnan(y[3]).all() and (y[4] == rounded(mpmath.mpf(1) / 7)).all()
    assert (bound[3] == 0).all() and (bound[~np.isnan(y)] > 0).all()


@pytest.mark.parametrize("scale", [None, 1.0, 0.3])
def test_attention_is_exact_for_every_scale_and_mask_form(scale) -> None:
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((4, 5)), rng.standard_normal((6, 5)), rng.standard_normal((6, 3))
    additive = rng.standard_normal((4, 6))
    additive[1, 3] = -np.inf
    for mask in (None, np.tril(np.ones((4, 6), dtype=bool)), additive):
        inputs = {"q": q, "k": k, "v": v} | ({} if mask is None else {"mask": mask})
        res = truth.compute("scaled_dot_product_attention", inputs, {"scale": scale})
        out, w = mp_attention(to_mp(q), to_mp(k), to_mp(v), scale, None if mask is None else mask.tolist())
        assert_exact(res["output"][0], out)
        assert_exact(res["weights"][0], w)


@pytest.mark.parametrize("policy", ["zeros", "nan", "uniform"])
def test_a_fully_masked_query_follows_the_convention(policy: str) -> None:
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((4, 3))
    mask = np.ones((3, 4), dtype=bool)
    mask[1] = False
    mask[2, 0] = False
    res = truth.compute("scaled_dot_product_attention", {"q": q, "k": k, "v": v, "mask": mask}, {}, masked_query=policy)
    out, w = mp_attention(to_mp(q), to_mp(k), to_mp(v), None, mask.tolist(), policy)
    for name, want in (("output", out), ("weights", w)):
        got, bound = res[name]
        assert_exact(got, want)
        if policy == "nan":
            assert np.isnan(got[1]).all() and (bound[1] == 0).all()
    if policy == "uniform":
        assert (res["weights"][0][1] == 0.25).all()
        np.testing.assert_array_equal(
            res["output"][0][1], rounded_array([mpmath.fsum(c) / 4 for c in zip(*to_mp(v), strict=True)])
        )
    if policy == "zeros":
        assert (res["weights"][0][1] == 0).all() and (res["output"][0][1] == 0).all()


@pytest.mark.parametrize("policy", ["zeros", "nan", "uniform"])
def test_multi_head_attention_is_exact_and_conventions_pass_through_the_output_projection(policy: str) -> None:
    rng = np.random.default_rng(4)
    d, h = 4, 2
    x = {n: rng.standard_normal((n_, d)) for n, n_ in (("query", 3), ("key", 5), ("value", 5))}
    w = {f"w_{s}": rng.standard_normal((d, d)) * 0.5 for s in "qkvo"}
    b = {f"b_{s}": rng.standard_normal(d) for s in "qkvo"}
    mask = np.ones((3, 5), dtype=bool)
    mask[2] = False
    res = truth.compute("multi_head_attention", {**x, **w, **b, "mask": mask}, {"num_heads": h}, masked_query=policy)
    proj = {
        s: [
            [a + bb for a, bb in zip(r, to_mp(b[f"b_{s}"]), strict=True)]
            for r in mp_matmul(to_mp(x[n]), to_mp(w[f"w_{s}"]))
        ]
        for s, n in (("q", "query"), ("k", "key"), ("v", "value"))
    }
    heads, weights = [], []
    for i in range(h):
        cols = slice(i * 2, (i + 1) * 2)
        o, a = mp_attention(*[[r[cols] for r in proj[s]] for s in "qkv"], None, mask.tolist(), policy)
        heads.append(o)
        weights.append(a)
    concat = [[x for hh in heads for x in hh[r]] for r in range(3)]
    out = [[a + bb for a, bb in zip(r, to_mp(b["b_o"]), strict=True)] for r in mp_matmul(concat, to_mp(w["w_o"]))]
    assert_exact(res["output"][0], out)
    assert_exact(res["weights"][0], weights)
    if policy == "zeros":
        np.testing.assert_array_equal(res["output"][0][2], b["b_o"])  # zero heads: the output is b_o
    if policy == "nan":
        assert np.isnan(res["output"][0][2]).all() and not np.isnan(res["output"][0][:2]).any()


def test_a_subset_of_query_rows_equals_those_rows_of_the_full_result() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 4))
    inputs = {"x": x, **{f"w_{s}": rng.standard_normal((4, 4)) for s in "qkv"}, "mask": np.tril(np.ones((9, 9), bool))}
    full = truth.compute("self_attention", inputs, {})
    rows = [0, 4, 8]
    part = truth.compute("self_attention", inputs, {}, rows=rows)
    for name in ("q", "weights", "output"):
        for i in (0, 1):
            np.testing.assert_array_equal(part[name][i], full[name][i][rows])
    for name in ("k", "v"):
        np.testing.assert_array_equal(part[name][0], full[name][0])


# ---------------------------------------------------------------- the classifier


def mp_params(inputs) -> dict:
    return {n: to_mp(inputs[f"params.{n}"]) for n in CLASSIFIER_PARAMS}


def mp_forward(x_emb, p):
    x = [[*r, mpmath.mpf(i)] for i, r in enumerate(x_emb)]
    d = len(x[0])

    def aff(w, b):
        return [[a + bb for a, bb in zip(r, b, strict=True)] for r in mp_matmul(x, w)]

    q, k, v = aff(p["w_q"], p["b_q"]), aff(p["w_k"], p["b_k"]), aff(p["w_v"], p["b_v"])
    z, _ = mp_attention(q, k, v, None)
    f = [[a + bb for a, bb in zip(r, p["b_f"], strict=True)] for r in mp_matmul(z, p["w_f"])]
    pooled = [mpmath.fsum(c) / len(f) for c in zip(*f, strict=True)]
    assert d
    return pooled


def mp_loss(x_emb, label, p):
    pooled = mp_forward(x_emb, p)
    m = max(pooled)
    return mpmath.log(mpmath.fsum(mpmath.exp(t - m) for t in pooled)) - (pooled[label] - m)


def _step_inputs(n: int = 3, e: int = 2, seed: int = 6):
    rng = np.random.default_rng(seed)
    d = e + 1
    inputs = {"x_emb": rng.standard_normal((n, e)), "label": np.array(1)}
    for name in CLASSIFIER_PARAMS:
        shape = {"w_f": (d, 3), "b_f": (3,)}.get(name, (d,) if name.startswith("b_") else (d, d))
        inputs[f"params.{name}"] = rng.standard_normal(shape) * 0.4
    return inputs


def test_classifier_step_gradients_are_the_exact_derivatives() -> None:
    inputs = _step_inputs()
    options = {"lr": 0.1, "frozen": ["b_f"]}
    res = truth.compute("classifier_step", inputs, options)
    x, label, p = to_mp(inputs["x_emb"]), 1, mp_params(inputs)
    assert res["loss"][0] == rounded(mp_loss(x, label, p))
    h = mpmath.mpf(10) ** -25
    for name in CLASSIFIER_PARAMS:
        flat = p[name] if isinstance(p[name][0], list) else [p[name]]
        grads = []
        for row in flat:
            for c in range(len(row)):
                orig = row[c]
                row[c] = orig + h
                up = mp_loss(x, label, p)
                row[c] = orig - h
                down = mp_loss(x, label, p)
                row[c] = orig
                grads.append((up - down) / (2 * h))  # error O(h^2) = 1e-50
        got = res[f"grads.{name}"][0].reshape(-1)
        np.testing.assert_array_equal(got, rounded_array(grads), err_msg=name)
        want_new = (
            inputs[f"params.{name}"]
            if name in options["frozen"]
            else rounded_array(
                [
                    mpmath.mpf(float(a)) - mpmath.mpf(0.1) * g
                    for a, g in zip(inputs[f"params.{name}"].reshape(-1), grads, strict=True)
                ]
            ).reshape(inputs[f"params.{name}"].shape)
        )
        np.testing.assert_array_equal(res[f"params.{name}"][0], want_new, err_msg=name)


def test_values_that_are_exactly_zero_certify_as_plus_zero() -> None:
    # One token: the softmax Jacobian vanishes, so every query/key gradient is exactly 0; and b_k's
    # gradient is 0 for any n (a shift of every key leaves each softmax row unchanged).
    one = _step_inputs(n=1)
    res = truth.compute_detailed("classifier_step", one, {"lr": 0.1})
    for name in ("w_q", "b_q", "w_k", "b_k"):
        g = res.outputs[f"grads.{name}"][0]
        assert (g == 0).all() and not np.signbit(g).any(), name
    assert res.precision_bits > 1075  # a zero certifies only once the radius is below 2**-1075
    many = truth.compute("classifier_step", _step_inputs(n=4), {"lr": 0.1})
    assert (many["grads.b_k"][0] == 0).all() and (many["grads.w_q"][0] != 0).all()


def test_a_short_trajectory_is_exact() -> None:
    rng = np.random.default_rng(7)
    base = _step_inputs()
    inputs = {k: v for k, v in base.items() if k.startswith("params.")}
    inputs |= {"tokens": rng.standard_normal((5, 2)), "lengths": np.array([2, 0, 3]), "labels": np.array([0, 2, 1])}
    options = {"lr": 0.2, "epochs": 2, "frozen": ["w_f"]}
    res = truth.compute("classifier_train", inputs, options)
    p = mp_params(inputs)
    sentences = [(to_mp(inputs["tokens"][:2]), 0), (to_mp(inputs["tokens"][2:]), 1)]
    h = mpmath.mpf(10) ** -25
    losses = []
    for _ in range(2):
        total = mpmath.mpf(0)
        for x, y in sentences:
            total += mp_loss(x, y, p)
            new = {}
            for name in CLASSIFIER_PARAMS:
                rows = p[name] if isinstance(p[name][0], list) else [p[name]]
                out_rows = []
                for row in rows:
                    out = []
                    for c in range(len(row)):
                        orig = row[c]
                        row[c] = orig + h
                        up = mp_loss(x, y, p)
                        row[c] = orig - h
                        down = mp_loss(x, y, p)
                        row[c] = orig
                        out.append(
                            orig if name in options["frozen"] else orig - mpmath.mpf(0.2) * (up - down) / (2 * h)
                        )
                    out_rows.append(out)
                new[name] = out_rows if isinstance(p[name][0], list) else out_rows[0]
            p = new
        losses.append(total / 2)
    np.testing.assert_array_equal(res["epoch_losses"][0], rounded_array(losses))
    for name in CLASSIFIER_PARAMS:
        np.testing.assert_array_equal(res[f"params.{name}"][0], rounded_array(p[name]), err_msg=name)
    np.testing.assert_array_equal(res["params.w_f"][0], inputs["params.w_f"])


# ---------------------------------------------------------------- errors and determinism


def test_bad_inputs_are_named_errors() -> None:
    q = np.ones((2, 3))
    with pytest.raises(InputError, match=r"q, k need the same d_k.*q \(2, 3\), k \(2, 4\)"):
        truth.compute("scaled_dot_product_attention", {"q": q, "k": np.ones((2, 4)), "v": q}, {})
    with pytest.raises(InputError, match=r"mask must have shape \(n_q, n_k\) = \(2, 2\); got \(3, 2\)"):
        truth.compute("scaled_dot_product_attention", {"q": q, "k": q, "v": q, "mask": np.ones((3, 2), bool)}, {})
    with pytest.raises(InputError, match="masked_query must be one of zeros, nan, uniform"):
        truth.compute("scaled_dot_product_attention", {"q": q, "k": q, "v": q}, {}, masked_query="ignore")
    with pytest.raises(InputError, match=r"my_case: softmax: x .* contains NaN or \+inf"):
        truth.compute("softmax", {"x": np.array([[1.0, np.nan]])}, {}, label="my_case")


def test_an_ill_conditioned_case_is_refused_rather_than_given_a_false_bound() -> None:
    # Scores of 2e12 that differ by O(1): every float64 implementation's weights are off by ~1e-4
    # relative, beyond the first-order analysis (2^-20): no honest bound, so no fixture. (With
    # k[1] = 1e6 + 1 they differ by 1e6 instead: the first key's weight is below e^-745 however
    # the scores err, and the second's is 1; test_a_row_with_one_live_key_... says why that case is
    # refused too.)
    q = np.array([[1e6, 1e6]])
    k = np.array([[1e6, 1e6], [1e6, 1e6 + 2.0**-20]])
    with pytest.raises(BoundError, match="exceed 2\\^-20"):
        truth.compute("scaled_dot_product_attention", {"q": q, "k": k, "v": k}, {"scale": 1.0})


def test_a_row_with_one_live_key_certifies_whatever_its_logit_errors() -> None:
    # Logits 0 and -1e6 carrying errors of 1e-3 (a trajectory's carried parameter errors reach a
    # saturated output softmax so): the second key's weight is below e^-745 however they err, so
    # the first's is 1 within the underflow allowance, and there is no first-order expansion to
    # guard (bounds.softmax_row), although 1e-3 is far past 2^-20.
    a = [arb(1) / (1 + arb(-1e6).exp()), arb(-1e6).exp() / (1 + arb(-1e6).exp())]
    t_abs, s_abs = [arb(0), arb(1e6)], [arb(0), arb(1e6)]
    row = bounds.softmax_row(a, t_abs, [arb(1e-3), arb(1e-3)], [True, True], s_abs, arb(0))
    assert row["err"][0].upper() < 1e-13
    # with two live keys the same logit errors are past the first-order regime: refused
    with pytest.raises(BoundError, match="first-order terms exceed 2\\^-20"):
        bounds.softmax_row([arb(0.5), arb(0.5)], [arb(0), arb(0)], [arb(1e-3), arb(1e-3)], [True, True], t_abs, arb(0))
    # Scores of 2e12 that differ by 1e6 are one live key too, but the log-domain normaliser lse
    # rounds at u |lse| ~ 4e-4 there (C_LSE): not certified, and said so
    q = np.array([[1e6, 1e6]])
    k = np.array([[1e6, 1e6], [1e6, 1e6 + 1]])
    with pytest.raises(BoundError, match="logit error bound 0, unnormalised relative error"):
        truth.compute("scaled_dot_product_attention", {"q": q, "k": k, "v": k}, {"scale": 1.0})


def test_a_weight_that_underflows_needs_no_first_order_guarantee() -> None:
    # -1e12 (a "large negative" mask value some code uses instead of -inf): its weight is e^-1e12,
    # 0 in every float64 implementation, whatever the huge relative error bound of its logit.
    y, bound = truth.compute("softmax", {"x": np.array([[0.0, -1e12, 1.0]])}, {})["y"]
    assert y[0, 1] == 0.0 and bound[0, 1] < 1e-300
    assert y[0, 2] == rounded(1 / (1 + mpmath.exp(-1)))


def test_results_do_not_depend_on_the_worker_count() -> None:
    rng = np.random.default_rng(9)
    jobs = [
        (
            f"c{i}",
            "scaled_dot_product_attention",
            {"q": rng.standard_normal((3, 2)), "k": rng.standard_normal((4, 2)), "v": rng.standard_normal((4, 2))},
            {},
        )
        for i in range(3)
    ]
    serial = truth.compute_many(jobs, workers=1, memo=False)
    parallel = truth.compute_many(jobs, workers=2, memo=False)
    for a, b in zip(serial, parallel, strict=True):
        for name in a.outputs:
            for x, y in zip(a.outputs[name], b.outputs[name], strict=True):
                assert x.tobytes() == y.tobytes()
