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

from attention_ports.spec.ops import FFN_PARAMS
from attention_ports.truth import activations, exact
from attention_ports.truth.exact import Graph, InputError, Out, T


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


# -------------------------------------------------------------------- the graphs


def feed_forward(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x = exact._f64(inputs, "x", 2)
    p = ffn_params(inputs, x.shape[1])
    assert set(p) == set(FFN_PARAMS)
    y = feed_forward_t(g, exact._exact(x), p, activations._form(options))
    return {"y": Out(y, y.shape)}


exact.register_graph("feed_forward", feed_forward)
