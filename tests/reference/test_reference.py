"""The NumPy reference: the seeds' published numbers, its documented edge cases, its errors."""

from __future__ import annotations

import attention_ports.reference as ref
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

# ----------------------------------------------------------------------------- seed 000 (R)


def to_significant(a: np.ndarray, digits: int) -> np.ndarray:
    """Round like a printout with ``digits`` significant digits (R's print, torch's repr)."""
    return np.vectorize(lambda v: float(f"{v:.{digits}g}"))(a)


WORDS = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=float)
W_Q000 = np.array([[2, 0, 2], [2, 0, 0], [2, 1, 2]], dtype=float)
W_K000 = np.array([[2, 2, 2], [0, 2, 1], [0, 1, 1]], dtype=float)
W_V000 = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 0]], dtype=float)


def test_seed000_scores_as_printed() -> None:
    res = ref.self_attention(WORDS, W_Q000, W_K000, W_V000, scale=1.0)
    np.testing.assert_array_equal(res.q @ res.k.T, [[8, 2, 10, 2], [4, 0, 4, 0], [12, 2, 14, 2], [10, 4, 14, 3]])


def test_seed000_published_output() -> None:
    published = np.array(
        [
            [0.9852202, 1.741741, 0.7565203],
            [0.9096526, 1.409653, 0.5000000],
            [0.9985123, 1.758493, 0.7599811],
            [0.9956039, 1.904073, 0.9084692],
        ]
    )
    out = ref.self_attention(WORDS, W_Q000, W_K000, W_V000).output
    # R prints 7 significant digits: rounded the same way, every number is exactly the printed one.
    np.testing.assert_array_equal(to_significant(out, 7), published)
    # Columns 1 and 3 are below 1, so 7 significant digits are 7 decimals: 1e-7 holds there, and
    # half a unit of the 7th digit (5e-7 for 1.741741) holds everywhere.
    np.testing.assert_allclose(out[:, [0, 2]], published[:, [0, 2]], rtol=0, atol=1e-7)
    np.testing.assert_allclose(out, published, rtol=5e-7, atol=0)


# ----------------------------------------------------------------------------- seed 004 (PyTorch)

X004 = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], dtype=float)
W_K004 = np.array([[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]], dtype=float)
W_Q004 = np.array([[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]], dtype=float)
W_V004 = np.array([[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]], dtype=float)


def test_seed004_projections_scores_and_softmax() -> None:
    res = ref.self_attention(X004, W_Q004, W_K004, W_V004, scale=1.0)
    np.testing.assert_array_equal(res.k, [[0, 1, 1], [4, 4, 0], [2, 3, 1]])
    np.testing.assert_array_equal(res.q, [[1, 0, 2], [2, 2, 2], [2, 1, 3]])
    np.testing.assert_array_equal(res.v, [[1, 2, 3], [2, 8, 0], [2, 6, 3]])
    np.testing.assert_array_equal(res.q @ res.k.T, [[2, 4, 4], [4, 16, 12], [4, 12, 10]])
    printed = np.array(
        [
            [6.3379e-02, 4.6831e-01, 4.6831e-01],
            [6.0337e-06, 9.8201e-01, 1.7986e-02],
            [2.9539e-04, 8.8054e-01, 1.1917e-01],
        ]
    )
    # torch printed 5 significant digits: rounded alike, ours are exactly the printed values.
    np.testing.assert_array_equal(to_significant(res.weights, 5), printed)
    np.testing.assert_array_equal(np.round(res.weights, 1)[0], [0.1, 0.5, 0.5])


# ----------------------------------------------------------------------------- seed 002 (NumPy)

SCALED002 = np.array(
    [
        [0.18618396, -1.62932859, -0.43112993, -1.69749001],
        [-1.0275197, 0.54323613, 1.89425092, -0.61364851],
        [0.11711239, -0.23718061, 0.84006849, -0.77434532],
        [2.30255716, -0.7251629, 0.52931396, -0.75295435],
    ]
)
V002 = np.array(
    [
        [0.81792666, 0.82236399, -0.41895922, 0.22666141, 0.94511862, -0.52021735, -0.64588996, -0.87000742],
        [-2.2491133, -0.31491269, 0.20825982, 0.16776751, -0.37127566, 1.51807949, 0.81790832, -0.86591103],
        [1.25366696, 0.61418601, 0.6933022, -2.28912817, 0.31902434, -0.58075768, -2.21337254, 0.92699907],
        [1.5894821, -0.13651838, 0.79816503, 0.63034682, -0.43592847, 0.11736599, 0.2340575, 0.04262961],
    ]
)


def test_seed002_masked_weights_and_outputs() -> None:
    mask = ref.as_additive_mask(ref.causal_mask(4), (4, 4))
    weights = ref.softmax(SCALED002 + mask)
    published_weights = np.array(
        [
            [1.0, 0.0, 0.0, 0.0],
            [0.17210867, 0.82789133, 0.0, 0.0],
            [0.26580301, 0.18650582, 0.54769117, 0.0],
            [0.79032266, 0.0382721, 0.13418213, 0.03722311],
        ]
    )
    np.testing.assert_allclose(weights, published_weights, rtol=0, atol=1e-7)
    published_out = np.array(
        [
            [0.81792666, 0.82236399, -0.41895922, 0.22666141, 0.94511862, -0.52021735, -0.64588996, -0.87000742],
            [-1.72124914, -0.11917752, 0.10030999, 0.17790366, -0.14471279, 1.16727093, 0.56597595, -0.86661605],
            [0.48455696, 0.49623802, 0.30719654, -1.16219838, 0.35669711, -0.17322052, -1.23137942, 0.11496116],
            [0.78773285, 0.71521167, -0.20040347, -0.09814017, 0.75931991, -0.42659804, -0.7674411, -0.59475329],
        ]
    )
    np.testing.assert_allclose(weights @ V002, published_out, rtol=0, atol=1e-7)


def test_seed002_unmasked_softmax_as_printed() -> None:
    printed = np.array(
        [
            [0.53932303, 0.08777723, 0.29090618, 0.08199356],
            [0.03861438, 0.18574606, 0.71722906, 0.05841051],
            [0.23967928, 0.1681756, 0.49386282, 0.0982823],
            [0.79032266, 0.0382721, 0.13418213, 0.03722311],
        ]
    )
    np.testing.assert_allclose(ref.softmax(SCALED002), printed, rtol=0, atol=1e-7)


def test_seed002_naive_softmax_overflows_where_ours_does_not() -> None:
    big = np.array([[1000.0, 999.0, 0.0]])
    with np.errstate(over="ignore", invalid="ignore"):
        naive = np.exp(big) / np.exp(big).sum(axis=-1, keepdims=True)
    assert np.isnan(naive).any()
    np.testing.assert_allclose(
        ref.softmax(big), [[1 / (1 + np.exp(-1)), np.exp(-1) / (1 + np.exp(-1)), 0.0]], rtol=1e-15
    )


# ----------------------------------------------------------------------------- seed 001 (multi-head)


def test_seed001_per_head_layout_converts_to_packed() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 16))
    w_q, w_k, w_v = (rng.uniform(size=(4, 16, 4)) for _ in range(3))
    w_o = rng.uniform(size=(16, 16))
    # Seed 001's own computation, einsum for einsum.
    q, k, v = (np.einsum("sd,hde->hse", x, w) for w in (w_q, w_k, w_v))
    scores = np.einsum("hse,hke->hsk", q, k) / 4**0.5
    weights = ref.softmax(scores, axis=-1)
    heads = np.einsum("hij,hjk->hik", weights, v)
    seed_out = heads.transpose(1, 0, 2).reshape(5, -1) @ w_o

    packed = [ref.heads_to_packed(w) for w in (w_q, w_k, w_v)]
    res = ref.multi_head_attention(x, x, x, *packed, w_o, num_heads=4)
    np.testing.assert_allclose(res.output, seed_out, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(res.weights, weights, rtol=1e-13, atol=1e-15)


def test_single_head_mha_is_self_attention_then_projection() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 6))
    w = [rng.standard_normal((6, 6)) for _ in range(4)]
    mha = ref.multi_head_attention(x, x, x, *w, num_heads=1)
    sa = ref.self_attention(x, *w[:3])
    np.testing.assert_allclose(mha.output, sa.output @ w[3], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(mha.weights[0], sa.weights, rtol=1e-13, atol=1e-15)


# ----------------------------------------------------------------------------- documented semantics


def test_softmax_fully_neg_inf_row_is_nan_and_others_unaffected() -> None:
    out = ref.softmax(np.array([[-np.inf, -np.inf], [0.0, -np.inf]]))
    assert np.isnan(out[0]).all()
    np.testing.assert_array_equal(out[1], [1.0, 0.0])


def test_attention_fully_masked_query_gets_zero_weights_and_output() -> None:
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((4, 5))
    keep = np.ones((3, 4), dtype=bool)
    keep[1] = False
    res = ref.scaled_dot_product_attention(q, k, v, mask=keep)
    np.testing.assert_array_equal(res.weights[1], 0.0)
    np.testing.assert_array_equal(res.output[1], 0.0)
    np.testing.assert_allclose(res.weights.sum(axis=1), [1.0, 0.0, 1.0], rtol=1e-15)


def test_bool_and_additive_masks_agree() -> None:
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((5, 3)) for _ in range(3))
    keep = ref.causal_mask(5)
    a = ref.scaled_dot_product_attention(q, k, v, mask=keep)
    b = ref.scaled_dot_product_attention(q, k, v, mask=ref.as_additive_mask(keep, (5, 5)))
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(np.triu(a.weights, 1), 0.0)


def test_mask_helpers() -> None:
    np.testing.assert_array_equal(ref.causal_mask(2, 3), [[True, False, False], [True, True, False]])
    np.testing.assert_array_equal(ref.key_padding_mask(2, 3, valid=2), [[True, True, False]] * 2)
    with pytest.raises(ValueError, match="valid=4"):
        ref.key_padding_mask(2, 3, valid=4)


def test_scale_none_is_inverse_sqrt_dk_and_one_is_unscaled() -> None:
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((3, 9)), rng.standard_normal((3, 9)), rng.standard_normal((3, 2))
    default = ref.scaled_dot_product_attention(q, k, v)
    explicit = ref.scaled_dot_product_attention(q, k, v, scale=1 / 3)
    np.testing.assert_array_equal(default.weights, explicit.weights)
    unscaled = ref.scaled_dot_product_attention(q, k, v, scale=1.0)
    np.testing.assert_allclose(unscaled.weights, ref.softmax(q @ k.T), rtol=1e-15)


# ----------------------------------------------------------------------------- properties

finite_rows = arrays(
    np.float64,
    st.tuples(st.integers(1, 6), st.integers(1, 8)),
    elements=st.floats(-1e3, 1e3, allow_nan=False),
)


@settings(max_examples=60, deadline=None)
@given(finite_rows, st.floats(-1e3, 1e3))
def test_softmax_is_a_distribution_and_shift_invariant(x: np.ndarray, shift: float) -> None:
    y = ref.softmax(x)
    assert np.all(y >= 0) and np.all(y <= 1)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-13)
    np.testing.assert_allclose(ref.softmax(x + shift), y, rtol=1e-9, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 6), st.integers(1, 5), st.integers(1, 5), st.integers(0, 2**32 - 1))
def test_attention_output_is_convex_combination_of_values(nq: int, nk: int, dk: int, dv: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((nq, dk)), rng.standard_normal((nk, dk)), rng.standard_normal((nk, dv))
    res = ref.scaled_dot_product_attention(q, k, v)
    assert res.output.shape == (nq, dv) and res.weights.shape == (nq, nk)
    np.testing.assert_allclose(res.weights.sum(axis=1), 1.0, rtol=1e-13)
    assert np.all(res.output <= v.max(axis=0) + 1e-12) and np.all(res.output >= v.min(axis=0) - 1e-12)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (
            lambda: ref.scaled_dot_product_attention(np.ones((2, 3)), np.ones((2, 4)), np.ones((2, 1))),
            r"d_k.*q \(2, 3\), k \(2, 4\)",
        ),
        (
            lambda: ref.scaled_dot_product_attention(np.ones((2, 3)), np.ones((2, 3)), np.ones((3, 1))),
            r"n_k.*v \(3, 1\)",
        ),
        (
            lambda: ref.scaled_dot_product_attention(np.ones(3), np.ones((2, 3)), np.ones((2, 1))),
            r"q must be a 2-D.*\(3,\)",
        ),
        (
            lambda: ref.scaled_dot_product_attention(
                np.ones((2, 2)), np.ones((2, 2)), np.ones((2, 2)), mask=np.ones((3, 2), bool)
            ),
            r"mask must have shape.*\(2, 2\).*\(3, 2\)",
        ),
        (
            lambda: ref.scaled_dot_product_attention(np.full((1, 1), np.nan), np.ones((1, 1)), np.ones((1, 1))),
            r"q \(shape \(1, 1\)\) must be finite",
        ),
        (
            lambda: ref.self_attention(np.ones((2, 3)), np.ones((4, 3)), np.ones((3, 3)), np.ones((3, 3))),
            r"w_q must be \(d_in x d_out\).*x \(2, 3\), w_q \(4, 3\)",
        ),
        (
            lambda: ref.self_attention(
                np.ones((2, 3)), np.ones((3, 3)), np.ones((3, 3)), np.ones((3, 3)), b_q=np.ones(2)
            ),
            r"b_q must be a vector of length 3",
        ),
        (
            lambda: ref.multi_head_attention(*(np.ones((2, 6)),) * 3, *(np.ones((6, 6)),) * 4, num_heads=4),
            r"num_heads=4 must be a positive divisor of d_model=6",
        ),
        (lambda: ref.softmax(np.array([[np.inf, 0.0]])), r"x \(shape \(1, 2\)\) contains NaN or \+inf"),
        (lambda: ref.heads_to_packed(np.ones((4, 4))), r"expected \(h, d_model, d_head\), got shape \(4, 4\)"),
    ],
)
def test_bad_input_raises_value_error_naming_argument_and_shapes(call, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        call()
