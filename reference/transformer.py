"""GPT-2's pre-norm decoder in float64 NumPy: ``feed_forward``, ``decoder_block``, ``gpt_forward``.

Layout: tokens are rows (n x d); weights are (d_in x d_out), applied as ``x @ W + b``. Every piece is
the reference's own: ``layer_norm`` (biased variance, eps inside the square root), ``gelu`` (erf form
or tanh approximation) and ``multi_head_attention`` (heads are contiguous column blocks of d / h
projected features, scale 1/sqrt(d_head)) with a causal mask. ports/CONTRACT.md, "The transformer".

    feed_forward(x) = gelu(x W_1 + b_1) W_2 + b_2
    decoder_block:    h = x + attn(layer_norm_1(x));  y = h + feed_forward(layer_norm_2(h))
    gpt_forward:      x = wte[tokens] + wpe[:n]; every block in order; logits = layer_norm_f(x) W_head

``gpt_forward``'s per-block parameters are stacked along a leading block axis (``w_q``: n_layer x d x
d, ``ln1_w``: n_layer x d). Token ids are 0-based here (1-based in R and Julia).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from attention_ports.reference.activations import gelu
from attention_ports.reference.attention import multi_head_attention
from attention_ports.reference.masks import causal_mask
from attention_ports.reference.norms import layer_norm
from attention_ports.reference.validate import as_float_matrix, check_finite, float_dtype, token_rows

# The members of decoder_block's params, and of gpt_forward's params, in the contract's order
# (attention_ports/spec/ops.py: BLOCK_PARAMS, GPT_PARAMS).
FFN_PARAMS = ("w_1", "b_1", "w_2", "b_2")
BLOCK_PARAMS = (
    "ln1_w",
    "ln1_b",
    "w_q",
    "b_q",
    "w_k",
    "b_k",
    "w_v",
    "b_v",
    "w_o",
    "b_o",
    "ln2_w",
    "ln2_b",
    *FFN_PARAMS,
)
GPT_PARAMS = ("wte", "wpe", *BLOCK_PARAMS, "lnf_w", "lnf_b", "w_head")


def _array(a: object, name: str, shape: tuple[int, ...], dims: str, like: np.ndarray) -> np.ndarray:
    """``a`` as an array of ``shape`` in ``like``'s float dtype, finite; the error names it and ``dims``."""
    arr = np.asarray(a, dtype=float_dtype(like))
    if arr.shape != shape:
        raise ValueError(f"{name} must be {dims} = {shape}; got shape {arr.shape}")
    check_finite(arr, name)
    return arr


def _members(params: object, names: tuple[str, ...], where: str) -> dict[str, object]:
    if not isinstance(params, Mapping):
        raise ValueError(f"{where}: params must be a mapping of {', '.join(names)}; got {type(params).__name__}")
    missing = [n for n in names if n not in params]
    extra = sorted(set(params) - set(names))
    if missing or extra:
        raise ValueError(
            f"{where}: params must hold exactly {', '.join(names)}"
            + (f"; missing {', '.join(missing)}" if missing else "")
            + (f"; unknown {', '.join(extra)}" if extra else "")
        )
    return dict(params)


def _num_heads(num_heads: object, d: int, where: str) -> int:
    if isinstance(num_heads, (bool, np.bool_)) or not isinstance(num_heads, (int, np.integer, float)):
        raise ValueError(f"{where}: num_heads must be a positive integer; got {num_heads!r}")
    if num_heads != int(num_heads) or int(num_heads) < 1 or d % int(num_heads):
        raise ValueError(f"{where}: num_heads = {num_heads!r} must be a positive divisor of d = {d}")
    return int(num_heads)


def _ffn(x: np.ndarray, w_1: np.ndarray, b_1: np.ndarray, w_2: np.ndarray, b_2: np.ndarray, approximate) -> np.ndarray:
    # gelu's erf form is the C library's erf, in float64: back to x's dtype (the float32 tier)
    hidden = gelu(x @ w_1 + b_1, approximate=approximate).astype(x.dtype, copy=False)  # (n, d_ff)
    return hidden @ w_2 + b_2  # (n, d)


def feed_forward(
    x: np.ndarray,
    w_1: np.ndarray,
    b_1: np.ndarray,
    w_2: np.ndarray,
    b_2: np.ndarray,
    approximate: str | None = None,
) -> np.ndarray:
    """The position-wise feed-forward ``gelu(x W_1 + b_1) W_2 + b_2``: x (n x d), W_1 (d x d_ff),
    b_1 (d_ff), W_2 (d_ff x d), b_2 (d); returns n x d. ``approximate`` is gelu's ("none" when absent)."""
    x = token_rows(x)  # (n, d)
    d = x.shape[1]
    w_1 = np.asarray(w_1, dtype=float_dtype(x))
    if w_1.ndim != 2 or w_1.shape[0] != d or w_1.shape[1] < 1:
        raise ValueError(f"w_1 must be (d x d_ff) with d = {d} (x is {x.shape}); got shape {w_1.shape}")
    d_ff = w_1.shape[1]
    w_1 = _array(w_1, "w_1", (d, d_ff), "(d x d_ff)", x)
    b_1 = _array(b_1, "b_1", (d_ff,), "a vector of length d_ff", x)
    w_2 = _array(w_2, "w_2", (d_ff, d), "(d_ff x d)", x)
    b_2 = _array(b_2, "b_2", (d,), "a vector of length d", x)
    return _ffn(x, w_1, b_1, w_2, b_2, approximate)  # (n, d)


def _block_params(
    params: Mapping[str, object], d: int, like: np.ndarray, label: Callable[[str], str]
) -> dict[str, np.ndarray]:
    """One block's parameters, each checked against d (and d_ff, w_1's width); errors name ``label(member)``."""
    p = _members(params, BLOCK_PARAMS, "decoder_block")
    w_1 = np.asarray(p["w_1"], dtype=float_dtype(like))
    if w_1.ndim != 2 or w_1.shape[0] != d or w_1.shape[1] < 1:
        raise ValueError(f"{label('w_1')} must be (d x d_ff) with d = {d}; got shape {w_1.shape}")
    d_ff = w_1.shape[1]
    shapes = {
        "w_1": ((d, d_ff), "(d x d_ff)"),
        "b_1": ((d_ff,), "a vector of length d_ff"),
        "w_2": ((d_ff, d), "(d_ff x d)"),
        **{w: ((d, d), "(d x d)") for w in ("w_q", "w_k", "w_v", "w_o")},
    }
    return {n: _array(p[n], label(n), *shapes.get(n, ((d,), "a vector of length d")), like) for n in BLOCK_PARAMS}


def _block(x: np.ndarray, p: Mapping[str, np.ndarray], num_heads: int, eps, approximate) -> np.ndarray:
    n = x.shape[0]
    # An additive mask in x's dtype (0 keeps, -inf removes): a boolean one would become a float64
    # additive mask and lift the float32 tier's scores to float64.
    causal = np.where(causal_mask(n), 0.0, -np.inf).astype(x.dtype)  # (n, n): query i sees keys 0..i
    a = layer_norm(x, p["ln1_w"], p["ln1_b"], eps=eps)  # (n, d)
    attn = multi_head_attention(
        a, a, a, p["w_q"], p["w_k"], p["w_v"], p["w_o"], num_heads,
        b_q=p["b_q"], b_k=p["b_k"], b_v=p["b_v"], b_o=p["b_o"], mask=causal,
    ).output  # fmt: skip  # (n, d)
    h = x + attn  # (n, d): the first residual
    f = layer_norm(h, p["ln2_w"], p["ln2_b"], eps=eps)  # (n, d)
    return h + _ffn(f, p["w_1"], p["b_1"], p["w_2"], p["b_2"], approximate)  # (n, d): the second residual


def decoder_block(
    x: np.ndarray,
    params: Mapping[str, np.ndarray],
    num_heads: int,
    eps: float | None = None,
    approximate: str | None = None,
) -> np.ndarray:
    """One pre-norm decoder block of GPT-2: x (n x d) -> n x d.

    ``params`` holds ``ln1_w ln1_b w_q b_q w_k b_k w_v b_v w_o b_o ln2_w ln2_b w_1 b_1 w_2 b_2``
    (projections d x d, vectors of length d, ``w_1`` d x d_ff, ``b_1`` d_ff, ``w_2`` d_ff x d).
    ``eps`` is the layer norms' (1e-5 when absent), ``approximate`` gelu's ("none" when absent).
    """
    x = token_rows(x)  # (n, d)
    d = x.shape[1]
    heads = _num_heads(num_heads, d, "decoder_block")
    p = _block_params(params, d, x, lambda n: f"params.{n}")
    return _block(x, p, heads, eps, approximate)


def _token_ids(tokens: object, vocab: int) -> np.ndarray:
    """A non-empty vector of 0-based token ids in [0, vocab): integers, or integral floats (fixtures)."""
    arr = np.asarray(tokens)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"tokens must be a non-empty vector of token ids; got shape {arr.shape}")
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise ValueError(f"tokens must hold integer token ids; got dtype {arr.dtype}")
    as_float = arr.astype(np.float64)
    if not np.all(np.isfinite(as_float)) or np.any(as_float != np.round(as_float)):
        raise ValueError(f"tokens must hold integer token ids; got {arr.tolist()}")
    ids = as_float.astype(np.int64)
    bad = np.flatnonzero((ids < 0) | (ids >= vocab))
    if bad.size:
        raise ValueError(
            f"tokens must be 0-based ids in [0, {vocab - 1}] (wte has vocab = {vocab} rows); "
            f"tokens[{bad[0]}] = {ids[bad[0]]}"
        )
    return ids


def gpt_forward(
    tokens: np.ndarray,
    params: Mapping[str, np.ndarray],
    num_heads: int,
    eps: float | None = None,
    approximate: str | None = None,
) -> np.ndarray:
    """GPT-2's forward pass: n token ids -> logits (n x vocab), one row of next-token logits per position.

    ``params``: ``wte`` (vocab x d), ``wpe`` (n_ctx x d, n <= n_ctx), every block's parameters
    stacked along a leading block axis (``w_q`` n_layer x d x d, ``ln1_w`` n_layer x d, ``w_1``
    n_layer x d x d_ff, ...), the final norm ``lnf_w``, ``lnf_b`` (d) and the LM head ``w_head``
    (d x vocab, untied from ``wte``).
    """
    p = _members(params, GPT_PARAMS, "gpt_forward")
    wte = as_float_matrix(p["wte"], "params.wte")
    if wte.shape[0] < 1 or wte.shape[1] < 1:
        raise ValueError(f"params.wte must be (vocab x d) with vocab, d >= 1; got shape {wte.shape}")
    check_finite(wte, "params.wte")
    vocab, d = wte.shape
    wpe = as_float_matrix(p["wpe"], "params.wpe")
    if wpe.shape[1] != d or wpe.shape[0] < 1:
        raise ValueError(f"params.wpe must be (n_ctx x d) with d = {d} (wte is {wte.shape}); got shape {wpe.shape}")
    check_finite(wpe, "params.wpe")
    ids = _token_ids(tokens, vocab)  # (n,)
    n = ids.size
    if n > wpe.shape[0]:
        raise ValueError(f"tokens: {n} tokens, more than the n_ctx = {wpe.shape[0]} positions of params.wpe")
    heads = _num_heads(num_heads, d, "gpt_forward")
    ln1_w = np.asarray(p["ln1_w"])
    if ln1_w.ndim != 2 or ln1_w.shape[0] < 1:
        raise ValueError(f"params.ln1_w must be (n_layer x d) with n_layer >= 1; got shape {ln1_w.shape}")
    n_layer = ln1_w.shape[0]
    stacks = {}
    for name in BLOCK_PARAMS:
        arr = np.asarray(p[name])
        if arr.ndim < 1 or arr.shape[0] != n_layer:
            raise ValueError(
                f"params.{name} must be stacked along a leading block axis of n_layer = {n_layer} "
                f"(ln1_w is {ln1_w.shape}); got shape {arr.shape}"
            )
        stacks[name] = arr
    lnf_w = _array(p["lnf_w"], "params.lnf_w", (d,), "a vector of length d", wte)
    lnf_b = _array(p["lnf_b"], "params.lnf_b", (d,), "a vector of length d", wte)
    w_head = _array(p["w_head"], "params.w_head", (d, vocab), "(d x vocab)", wte)

    x = wte[ids] + wpe[:n]  # (n, d): token and position embeddings
    for b in range(n_layer):
        block = _block_params({m: stacks[m][b] for m in BLOCK_PARAMS}, d, wte, lambda m, b=b: f"params.{m}[block {b}]")
        x = _block(x, block, heads, eps, approximate)  # (n, d)
    return layer_norm(x, lnf_w, lnf_b, eps=eps) @ w_head  # (n, vocab)
