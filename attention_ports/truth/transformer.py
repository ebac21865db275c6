"""The transformer's exact truth and error bounds: ``feed_forward``, ``decoder_block``, ``gpt_forward``.

GPT-2's pre-norm decoder (ports/CONTRACT.md, "The transformer"), composed from the engine's
primitives (``exact.Graph``: projections, scores, softmax, weighted values; ``exact.attend_heads``)
and the families' rules (``norms.layer_norm_t``, ``activations.gelu_t``). Every node is a value/bound
matrix ``T``: the bound pass propagates each operand's error bound through every rule and adds the
node's own roundings, under the mixed forward-backward rule of ``bounds`` (docs/truth-and-bounds.md,
"The transformer"). Unit roundoff and constants are read from ``bounds`` at call time (the float32
tier swaps them: ``truth/precision.py``).

What each node charges, its operands carrying the bounds ``e`` of earlier nodes:

* **projections** ``X W + b`` (q, k, v, the output projection, the feed-forward's two layers, the
  LM head): ``bounds.affine``, rigorous with the operands' errors (second-order terms included);
* **gelu** of a hidden unit that carries an error e: ``activations.gelu_carried``, the derivative's
  maximum over ``[x - e, x + e]`` (ball arithmetic, certified) times e, plus the exact-input rule
  evaluated on that ball;
* **layer norm** of a hidden state that carries errors: ``norms.layer_norm_carried``, the Jacobian
  ``dy_j = r (dx_j - mean(dx) - yhat_j mean(yhat dx))`` bounded entrywise, a certified remainder
  (refused past ``bounds.MAX_FIRST_ORDER``), then the exact-input rule on the ball of perturbed
  inputs, then the affine part;
* **causal multi-head attention**: the scores, softmax and weighted-values rules of ``bounds`` with
  q, k, v carrying their projections' errors (a logit error enters the softmax rule as ``e_S``),
  query i keeping keys 0..i (a removed key has weight exactly 0 and no error);
* **residual adds** ``x + a``: one rounding, ``e = e_x + e_a + u (|x + a| + e_x + e_a)``
  (``bounds.entry_sub``, the same rule for a sum);
* **embeddings** ``wte[t] + wpe[p]``: an exact gather, one rounding for the sum: ``e = u |x|``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flint import arb

from attention_ports.spec.ops import BLOCK_PARAMS, FFN_PARAMS
from attention_ports.truth import activations, bounds, exact, norms
from attention_ports.truth import arbmat as am
from attention_ports.truth.exact import Graph, InputError, Mask, Out, T


def _matrix(inputs: Mapping[str, np.ndarray], name: str, shape: tuple[int, int]) -> T:
    arr = exact._f64(inputs, name, 2)
    if arr.shape != shape:
        raise InputError(f"{name} must have shape {shape}; got {arr.shape}")
    return exact._exact(arr)


def _vector(inputs: Mapping[str, np.ndarray], name: str, width: int) -> T:
    arr = exact._f64(inputs, name, 1)
    if arr.shape != (width,):
        raise InputError(f"{name} must be a vector of length {width}; got shape {arr.shape}")
    return exact._exact(arr)


def ffn_params(inputs: Mapping[str, np.ndarray], d: int, prefix: str = "") -> dict[str, T]:
    """w_1 (d x d_ff), b_1 (d_ff), w_2 (d_ff x d), b_2 (d): d_ff read from w_1."""
    w_1 = exact._f64(inputs, f"{prefix}w_1", 2)
    if w_1.shape[0] != d:
        raise InputError(f"{prefix}w_1 must be (d x d_ff) with d = {d}; got shape {w_1.shape}")
    d_ff = w_1.shape[1]
    return {
        "w_1": exact._exact(w_1),
        "b_1": _vector(inputs, f"{prefix}b_1", d_ff),
        "w_2": _matrix(inputs, f"{prefix}w_2", (d_ff, d)),
        "b_2": _vector(inputs, f"{prefix}b_2", d),
    }


def feed_forward_t(g: Graph, x: T, p: Mapping[str, T], form: str) -> T:
    """``gelu(x W_1 + b_1) W_2 + b_2``, every rule propagating the errors x carries."""
    hidden = g.affine(x, p["w_1"], p["b_1"])
    return g.affine(activations.gelu_t(g, hidden, form), p["w_2"], p["b_2"])


def block_shapes(d: int, d_ff: int) -> dict[str, tuple[int, ...]]:
    """Every block parameter's shape (ops.BLOCK_PARAMS), d_ff read from w_1."""
    return {
        **{n: (d, d) for n in ("w_q", "w_k", "w_v", "w_o")},
        **{n: (d,) for n in ("ln1_w", "ln1_b", "b_q", "b_k", "b_v", "b_o", "ln2_w", "ln2_b", "b_2")},
        "w_1": (d, d_ff),
        "b_1": (d_ff,),
        "w_2": (d_ff, d),
    }


def block_params(inputs: Mapping[str, np.ndarray], d: int, stacked: bool) -> list[dict[str, T]]:
    """Each block's parameters from ``params.<name>``: one block's own (decoder_block), or the
    stacks of gpt_forward, every array with a leading block axis (n_layer from params.w_q)."""
    lead = exact._f64(inputs, "params.w_q", 3).shape[:1] if stacked else ()
    d_ff = exact._f64(inputs, "params.w_1", len(lead) + 2).shape[-1]
    arrays = {}
    for name, shape in block_shapes(d, d_ff).items():
        key = f"params.{name}"
        arr = exact._f64(inputs, key, len(lead) + len(shape))
        if arr.shape != (*lead, *shape):
            want = f"(n_layer, {', '.join(map(str, shape))})" if stacked else str(shape)
            raise InputError(f"{key} must have shape {want} (d = {d}, d_ff = {d_ff}); got {arr.shape}")
        arrays[name] = arr
    assert set(arrays) == set(BLOCK_PARAMS)
    if not stacked:
        return [{name: exact._exact(arr) for name, arr in arrays.items()}]
    return [{name: exact._exact(arr[b]) for name, arr in arrays.items()} for b in range(lead[0])]


def causal_mask(n: int) -> Mask:
    """Query i keeps keys 0..i."""
    return Mask(keep=[[j <= i for j in range(n)] for i in range(n)], add=None)


def residual(g: Graph, x: T, a: T) -> T:
    """``x + a`` entrywise: both errors and one rounding (``bounds.entry_sub``'s rule)."""
    v = x.v + a.v
    return T(v, bounds.entry_sub(am.eabs(v), x.e, a.e) if g.track else None)


def _entries(t: T) -> list[arb]:
    return t.v.entries()


def block_t(g: Graph, x: T, p: Mapping[str, T], h: int, eps: arb, form: str) -> T:
    """GPT-2's pre-norm block: ``h = x + attn(ln_1(x))``, ``y = h + ffn(ln_2(h))``."""
    a = norms.layer_norm_t(g, x, _entries(p["ln1_w"]), _entries(p["ln1_b"]), eps)
    q, k, v = (g.affine(a, p[f"w_{s}"], p[f"b_{s}"]) for s in "qkv")
    heads = exact.attend_heads(g, q, k, v, h, causal_mask(x.shape[0]))
    mid = residual(g, x, g.affine(heads.concat, p["w_o"], p["b_o"]))
    m = norms.layer_norm_t(g, mid, _entries(p["ln2_w"]), _entries(p["ln2_b"]), eps)
    return residual(g, mid, feed_forward_t(g, m, p, form))


# -------------------------------------------------------------------- the graphs


def feed_forward(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x = exact._f64(inputs, "x", 2)
    p = ffn_params(inputs, x.shape[1])
    assert set(p) == set(FFN_PARAMS)
    y = feed_forward_t(g, exact._exact(x), p, activations._form(options))
    return {"y": Out(y, y.shape)}


def decoder_block(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x = exact._f64(inputs, "x", 2)
    d = x.shape[1]
    h = exact.num_heads(options, d, "decoder_block")
    (p,) = block_params(inputs, d, stacked=False)
    y = block_t(g, exact._exact(x), p, h, norms._eps(options), activations._form(options))
    return {"y": Out(y, y.shape)}


exact.register_graph("feed_forward", feed_forward)
exact.register_graph("decoder_block", decoder_block)
