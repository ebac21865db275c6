"""Attention forward operations in float64 NumPy: the suite's oracle.

Layout: tokens are rows (n x d); projection weights are (d_in x d_out) and applied as ``x @ w``
(seeds 000, 002 and 004). Every function validates its arguments and raises ``ValueError``
naming the argument and every shape involved, because a port author debugging a mismatch
needs the sizes more than a traceback.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from attention_ports.reference.masks import as_additive_mask
from attention_ports.reference.validate import as_float_matrix, check_finite, float_dtype


class AttentionResult(NamedTuple):
    output: np.ndarray  # (n_q, d_v)
    weights: np.ndarray  # (n_q, n_k), rows sum to 1 (or are all zero when fully masked)


class SelfAttentionResult(NamedTuple):
    q: np.ndarray  # (n, d_k)
    k: np.ndarray  # (n, d_k)
    v: np.ndarray  # (n, d_v)
    weights: np.ndarray  # (n, n)
    output: np.ndarray  # (n, d_v)


class MultiHeadResult(NamedTuple):
    output: np.ndarray  # (n_q, d_model)
    weights: np.ndarray  # (h, n_q, n_k)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax along ``axis``.

    The maximum is subtracted first so that scores of 1e3 do not overflow. A slice that is
    entirely ``-inf`` has no defined distribution: it comes back as NaN (0/0), the same as
    ``torch.softmax``; attention handles fully masked rows itself (see
    ``scaled_dot_product_attention``).
    """
    x = np.asarray(x, dtype=np.float32 if getattr(x, "dtype", None) == np.float32 else np.float64)
    if x.ndim == 0:
        raise ValueError("softmax: x must have at least one dimension, got a scalar")
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"softmax: x (shape {x.shape}) contains NaN or +inf")
    peak = np.max(x, axis=axis, keepdims=True)
    with np.errstate(invalid="ignore"):  # -inf - -inf on fully masked slices is the NaN we document
        e = np.exp(x - peak)
        return e / np.sum(e, axis=axis, keepdims=True)


def _default_scale(d_k: int) -> float:
    return float(1.0 / np.sqrt(d_k))  # a Python float: it keeps a float32 product float32


def scaled_dot_product_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    scale: float | None = None,
) -> AttentionResult:
    """``weights = softmax(scale * q k^T + mask)``, ``output = weights v``.

    ``mask`` is boolean (True = keep) or additive float (0 keeps, -inf removes), shape
    (n_q, n_k). ``scale=None`` means 1/sqrt(d_k); ``scale=1.0`` is seed 004's unscaled product.
    A query row whose mask removes every key gets zero weights and a zero output (PyTorch's
    ``scaled_dot_product_attention`` does the same) instead of NaN, so padded batches stay finite.
    """
    q = as_float_matrix(q, "q")
    k = as_float_matrix(k, "k")
    v = as_float_matrix(v, "v")
    for name, arr in (("q", q), ("k", k), ("v", v)):
        check_finite(arr, name)
    if q.shape[1] != k.shape[1]:
        raise ValueError(
            f"scaled_dot_product_attention: q and k need the same feature size d_k; "
            f"got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if k.shape[0] != v.shape[0]:
        raise ValueError(
            f"scaled_dot_product_attention: k and v need the same number of tokens n_k; "
            f"got q {q.shape}, k {k.shape}, v {v.shape}"
        )
    if scale is None:
        scale = _default_scale(q.shape[1])
    elif not np.isfinite(scale):
        raise ValueError(f"scaled_dot_product_attention: scale must be finite, got {scale}")

    scores = (q @ k.T) * scale  # (n_q, n_k)
    if mask is not None:
        scores = scores + as_additive_mask(mask, (q.shape[0], k.shape[0]))
    dead = np.all(np.isneginf(scores), axis=-1)  # (n_q,) queries with nothing to attend to
    weights = softmax(scores, axis=-1)
    weights[dead] = 0.0
    return AttentionResult(output=weights @ v, weights=weights)


def _project(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, name: str) -> np.ndarray:
    w = as_float_matrix(w, f"w_{name}")
    check_finite(w, f"w_{name}")
    if w.shape[0] != x.shape[1]:
        raise ValueError(
            f"w_{name} must be (d_in x d_out) with d_in = x's feature size; got x {x.shape}, w_{name} {w.shape}"
        )
    out = x @ w
    if b is None:
        return out
    b = np.asarray(b, dtype=float_dtype(b))
    if b.shape != (w.shape[1],):
        raise ValueError(f"b_{name} must be a vector of length {w.shape[1]}; got shape {b.shape}")
    check_finite(b, f"b_{name}")
    return out + b


def self_attention(
    x: np.ndarray,
    w_q: np.ndarray,
    w_k: np.ndarray,
    w_v: np.ndarray,
    b_q: np.ndarray | None = None,
    b_k: np.ndarray | None = None,
    b_v: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    scale: float | None = None,
) -> SelfAttentionResult:
    """Project ``x`` (n x d_in) to q, k, v and attend; every stage is returned so a failing port
    can be told which one diverged first."""
    x = as_float_matrix(x, "x")
    check_finite(x, "x")
    q = _project(x, w_q, b_q, "q")
    k = _project(x, w_k, b_k, "k")
    v = _project(x, w_v, b_v, "v")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"w_q and w_k must project to the same d_k; got w_q {np.shape(w_q)}, w_k {np.shape(w_k)}")
    out = scaled_dot_product_attention(q, k, v, mask=mask, scale=scale)
    return SelfAttentionResult(q=q, k=k, v=v, weights=out.weights, output=out.output)


def multi_head_attention(
    query: np.ndarray,
    key: np.ndarray,
    value: np.ndarray,
    w_q: np.ndarray,
    w_k: np.ndarray,
    w_v: np.ndarray,
    w_o: np.ndarray,
    num_heads: int,
    b_q: np.ndarray | None = None,
    b_k: np.ndarray | None = None,
    b_v: np.ndarray | None = None,
    b_o: np.ndarray | None = None,
    mask: np.ndarray | None = None,
) -> MultiHeadResult:
    """Multi-head attention in ``torch.nn.MultiheadAttention``'s packed layout.

    All four projections are d_model x d_model; head i uses the contiguous block of columns
    ``i*d_head:(i+1)*d_head`` of the projected features, with scale 1/sqrt(d_head). Head
    outputs are concatenated in head order and projected by ``w_o`` (+ ``b_o``).

    A query whose mask removes every key gets zero weights in every head, so its concatenated head
    outputs are zero and its output row is ``b_o`` (zero without ``b_o``): the "zeros" convention
    (ports/CONTRACT.md; torch's ``nn.MultiheadAttention`` gives NaN there instead).
    """
    query = as_float_matrix(query, "query")
    key = as_float_matrix(key, "key")
    value = as_float_matrix(value, "value")
    for name, arr in (("query", query), ("key", key), ("value", value)):
        check_finite(arr, name)
    d_model = query.shape[1]
    if key.shape[1] != d_model or value.shape[1] != d_model or key.shape[0] != value.shape[0]:
        raise ValueError(
            "multi_head_attention: query, key and value need the same d_model, key and value the "
            f"same n_k; got query {query.shape}, key {key.shape}, value {value.shape}"
        )
    if isinstance(num_heads, bool) or int(num_heads) != num_heads or num_heads < 1 or d_model % num_heads:
        raise ValueError(
            f"multi_head_attention: num_heads={num_heads!r} must be a positive divisor of d_model={d_model}"
        )
    num_heads = int(num_heads)
    for name, w in (("w_q", w_q), ("w_k", w_k), ("w_v", w_v), ("w_o", w_o)):
        if np.shape(w) != (d_model, d_model):
            raise ValueError(
                f"multi_head_attention: {name} must be (d_model x d_model) = ({d_model}, {d_model}); got {np.shape(w)}"
            )
    d_head = d_model // num_heads

    q = _project(query, w_q, b_q, "q")  # (n_q, d_model)
    k = _project(key, w_k, b_k, "k")  # (n_k, d_model)
    v = _project(value, w_v, b_v, "v")  # (n_k, d_model)
    heads = []
    weights = []
    for h in range(num_heads):
        cols = slice(h * d_head, (h + 1) * d_head)
        res = scaled_dot_product_attention(q[:, cols], k[:, cols], v[:, cols], mask=mask)
        heads.append(res.output)  # (n_q, d_head)
        weights.append(res.weights)  # (n_q, n_k)
    concat = np.concatenate(heads, axis=1)  # (n_q, d_model)
    output = _project(concat, w_o, b_o, "o")
    return MultiHeadResult(output=output, weights=np.stack(weights))


def heads_to_packed(w_heads: np.ndarray) -> np.ndarray:
    """Seed 001's per-head projection tensor (h, d_model, d_head) -> packed (d_model, h*d_head).

    Seed 001 computes ``einsum('sd,hde->hse', x, w)``; head h of the packed layout must be the
    column block h, so ``x @ packed[:, h*d_head:(h+1)*d_head] == x @ w_heads[h]``.
    """
    w_heads = np.asarray(w_heads, dtype=np.float64)
    if w_heads.ndim != 3:
        raise ValueError(f"heads_to_packed: expected (h, d_model, d_head), got shape {w_heads.shape}")
    h, d_model, d_head = w_heads.shape
    return w_heads.transpose(1, 0, 2).reshape(d_model, h * d_head)
