"""The reference transformer (reference/transformer.py) against torch's own kernels, and its checks.

Tolerance: the torch oracle (attention_ports/runtimes/torch_impl.py: a fused q/k/v projection,
F.scaled_dot_product_attention(is_causal=True), F.layer_norm, F.gelu) computes the same float64
values in another order, so the two differ by rounding only: a few units of 2^-53 relative to the
largest output per layer. Measured over 200 random cases (d <= 16, up to 4 heads, d_ff <= 64,
n <= 8, 1-2 blocks, eps 1e-12 to 1e-3, inputs of scale up to 10): max |ref - torch| / max |torch| =
7.6e-16 (feed_forward), 1.5e-15 (decoder_block), 2.8e-15 (gpt_forward). The bound below, 1e-13,
leaves room for other BLAS kernels; a wrong formula (a missing residual, the other gelu, no causal
mask) is off by 1e-3 or more.
"""

from __future__ import annotations

import importlib
import os

import attention_ports.reference as reference
import numpy as np
import pytest
from attention_ports.reference import transformer

from attention_ports.runtimes.builtin import call_reference
from attention_ports.spec import ops

AGREEMENT = 1e-13  # relative to the largest |output|: see the module docstring


@pytest.fixture(scope="module")
def torch_impl():
    """torch is optional for users (skip without it) but required on CI (fail without it)."""
    if os.environ.get("CI", "").strip().lower() not in ("true", "1", "yes"):
        pytest.importorskip("torch")
    return importlib.import_module("attention_ports.runtimes.torch_impl").TorchImplementation()


def _block_params(rng: np.random.Generator, d: int, d_ff: int, stack: tuple[int, ...] = ()) -> dict[str, np.ndarray]:
    def draw(*shape: int, scale: float = 0.5, offset: float = 0.0) -> np.ndarray:
        return offset + scale * rng.standard_normal(stack + shape)

    shapes = {"w_1": (d, d_ff), "b_1": (d_ff,), "w_2": (d_ff, d), **{w: (d, d) for w in ("w_q", "w_k", "w_v", "w_o")}}
    params = {n: draw(*shapes.get(n, (d,))) for n in transformer.BLOCK_PARAMS}
    params.update({n: draw(d, scale=0.2, offset=1.0) for n in ("ln1_w", "ln2_w")})
    return params


def _gpt_params(rng: np.random.Generator, d: int, d_ff: int, n_layer: int, vocab: int, n_ctx: int):
    return {
        "wte": rng.standard_normal((vocab, d)),
        "wpe": 0.5 * rng.standard_normal((n_ctx, d)),
        **_block_params(rng, d, d_ff, (n_layer,)),
        "lnf_w": 1.0 + 0.2 * rng.standard_normal(d),
        "lnf_b": 0.2 * rng.standard_normal(d),
        "w_head": 0.5 * rng.standard_normal((d, vocab)),
    }


def _grouped(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"params.{k}": v for k, v in params.items()}


def _assert_agree(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.shape == theirs.shape
    assert np.max(np.abs(ours - theirs)) <= AGREEMENT * np.max(np.abs(theirs))


def test_parameter_names_are_the_ops_tables() -> None:
    assert transformer.FFN_PARAMS == ops.FFN_PARAMS
    assert transformer.BLOCK_PARAMS == ops.BLOCK_PARAMS
    assert transformer.GPT_PARAMS == ops.GPT_PARAMS


@pytest.mark.parametrize(("approximate", "eps", "num_heads"), [(None, None, 1), ("tanh", 1e-3, 2), ("none", 0.0, 4)])
def test_agrees_with_torch(torch_impl, approximate: str | None, eps: float | None, num_heads: int) -> None:
    rng = np.random.default_rng(num_heads)
    d, d_ff, n = 8, 32, 5
    options = {"approximate": approximate, "eps": eps, "num_heads": num_heads}
    x = 3.0 * rng.standard_normal((n, d))
    block = _block_params(rng, d, d_ff)
    ffn = {"x": x, **{k: block[k] for k in transformer.FFN_PARAMS}}
    for op, inputs, out in (
        ("feed_forward", ffn, "y"),
        ("decoder_block", {"x": x, **_grouped(block)}, "y"),
        (
            "gpt_forward",
            {"tokens": np.array([3, 0, 3, 11, 7]), **_grouped(_gpt_params(rng, d, d_ff, 2, 12, 8))},
            "logits",
        ),
    ):
        opts = {k: v for k, v in options.items() if k in (*ops.get(op).options, *ops.get(op).positional_options)}
        _assert_agree(call_reference(op, inputs, opts)[out], torch_impl.run(op, inputs, opts)[out])


def test_feed_forward_is_gelu_between_two_affine_maps() -> None:
    x = np.array([[1.0, -2.0]])
    w_1, b_1 = np.array([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]]), np.array([0.0, 1.0, -1.0])
    w_2, b_2 = np.ones((3, 2)), np.array([0.5, -0.5])
    hidden = reference.gelu(x @ w_1 + b_1, approximate="tanh")
    np.testing.assert_array_equal(reference.feed_forward(x, w_1, b_1, w_2, b_2, approximate="tanh"), hidden @ w_2 + b_2)


def test_causal_a_later_token_never_changes_an_earlier_position() -> None:
    rng = np.random.default_rng(7)
    params = _gpt_params(rng, 8, 16, 2, 12, 6)
    tokens = np.array([1, 4, 4, 9, 2, 0])
    changed = tokens.copy()
    changed[4] = 10
    a = reference.gpt_forward(tokens, params, 2)
    b = reference.gpt_forward(changed, params, 2)
    np.testing.assert_array_equal(a[:4], b[:4])  # rows are computed independently: bit for bit
    assert np.max(np.abs(a[4:] - b[4:])) > 1e-3


def test_gpt_forward_is_the_blocks_in_order_then_the_final_norm_and_head() -> None:
    rng = np.random.default_rng(3)
    p = _gpt_params(rng, 8, 16, 2, 12, 8)
    tokens = np.array([5, 5, 2])
    x = p["wte"][tokens] + p["wpe"][:3]
    for b in range(2):
        x = reference.decoder_block(x, {m: p[m][b] for m in transformer.BLOCK_PARAMS}, 4, eps=1e-3)
    expected = reference.layer_norm(x, p["lnf_w"], p["lnf_b"], eps=1e-3) @ p["w_head"]
    np.testing.assert_array_equal(reference.gpt_forward(tokens.astype(float), p, 4, eps=1e-3), expected)
    assert reference.gpt_forward(tokens[:1], p, 4).shape == (1, 12)  # one token: one row of logits


def _bad(**change):
    rng = np.random.default_rng(0)
    p = _gpt_params(rng, 8, 16, 2, 12, 4)
    block = {m: p[m][0] for m in transformer.BLOCK_PARAMS}
    x = rng.standard_normal((3, 8))
    if "ffn" in change:
        args = {"x": x, **{k: block[k] for k in transformer.FFN_PARAMS}, **change["ffn"]}
        return lambda: reference.feed_forward(**args)
    if "block" in change:
        params = {**block, **change["block"]}
        return lambda: reference.decoder_block(change.get("x", x), params, change.get("heads", 2))
    params = {**p, **change.get("gpt", {})}
    params = {k: v for k, v in params.items() if v is not None}
    return lambda: reference.gpt_forward(change.get("tokens", np.array([0, 1, 2])), params, change.get("heads", 2))


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (_bad(ffn={"w_1": np.ones((7, 16))}), r"w_1 must be \(d x d_ff\) with d = 8 .*\(7, 16\)"),
        (_bad(ffn={"b_1": np.ones(8)}), r"b_1 must be a vector of length d_ff = \(16,\); got shape \(8,\)"),
        (_bad(ffn={"w_2": np.ones((16, 7))}), r"w_2 must be \(d_ff x d\) = \(16, 8\); got shape \(16, 7\)"),
        (_bad(ffn={"x": np.ones(8)}), r"x must be a 2-D matrix .* got shape \(8,\)"),
        (_bad(block={"w_o": np.ones((8, 4))}), r"params\.w_o must be \(d x d\) = \(8, 8\); got shape \(8, 4\)"),
        (_bad(block={"ln2_b": np.full(8, np.nan)}), r"params\.ln2_b \(shape \(8,\)\) must be finite"),
        (_bad(block={}, heads=3), r"decoder_block: num_heads = 3 must be a positive divisor of d = 8"),
        (_bad(block={"w_extra": np.ones(2)}), r"params must hold exactly .*unknown w_extra"),
        (_bad(gpt={"w_head": None}), r"params must hold exactly .*missing w_head"),
        (_bad(tokens=np.array([0, 12])), r"tokens must be 0-based ids in \[0, 11\] .* tokens\[1\] = 12"),
        (_bad(tokens=np.array([0.5])), r"tokens must hold integer token ids"),
        (_bad(tokens=np.arange(5)), r"tokens: 5 tokens, more than the n_ctx = 4 positions of params\.wpe"),
        (
            _bad(gpt={"w_2": np.ones((3, 16, 8))}),
            r"params\.w_2 must be stacked along a leading block axis of n_layer = 2",
        ),
        (_bad(gpt={"b_q": np.ones((2, 7))}), r"params\.b_q\[block 0\] must be a vector of length d = \(8,\)"),
        (_bad(gpt={"w_head": np.ones((8, 11))}), r"params\.w_head must be \(d x vocab\) = \(8, 12\)"),
    ],
)
def test_bad_input_raises_value_error_naming_argument_and_shapes(call, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        call()
