"""The transformer's exact truth and error bounds: ``feed_forward``, ``decoder_block``, ``gpt_forward``.

GPT-2's pre-norm decoder (ports/CONTRACT.md, "The transformer"), composed from the engine's
primitives (``exact.Graph``: projections, scores, softmax, weighted values; ``exact.attend_heads``)
and the families' rules (``norms.layer_norm_t``, ``activations.gelu_t``). Every node is a value/bound
matrix ``T``: the bound pass propagates each operand's error bound through every rule and adds the
node's own roundings, under the mixed forward-backward rule of ``bounds`` (docs/truth-and-bounds.md,
"The transformer"). Unit roundoff and constants are read from ``bounds`` at call time (the float32
tier swaps them: ``truth/precision.py``).

**Within a sublayer** (``x + attn(ln_1(x))``, ``x + ffn(ln_2(x))``), node by node, each operand
carrying the bounds of earlier nodes:

* **projections** ``X W + b`` (q, k, v, the output projection, the feed-forward's two layers, the
  LM head): ``bounds.affine``, rigorous with the operands' errors (second-order terms included);
* **gelu** of a hidden unit that carries an error e: ``activations.gelu_carried``, the derivative's
  maximum over ``[x - e, x + e]`` (ball arithmetic, certified) times e, plus the exact-input rule
  evaluated on that ball;
* **layer norm** of inputs that carry errors: ``norms.layer_norm_carried``, the Jacobian
  ``dy_j = r (dx_j - mean(dx) - yhat_j mean(yhat dx))`` bounded entrywise, a certified remainder
  (refused past ``bounds.MAX_FIRST_ORDER``), then the exact-input rule on the ball of perturbed
  inputs, then the affine part;
* **causal multi-head attention**: the scores, softmax and weighted-values rules of ``bounds`` with
  q, k, v carrying their projections' errors (a logit error enters the softmax rule as ``e_S``),
  query i keeping keys 0..i (a removed key has weight exactly 0 and no error);
* **residual adds** ``x + a``: one rounding, ``e = e_x + e_a + u (|x + a| + e_x + e_a)``
  (``bounds.entry_sub``, the same rule for a sum);
* **embeddings** ``wte[t] + wpe[p]``: an exact gather, one rounding for the sum: ``e = u |x|``.

**Across sublayers** (``through``): node by node, an error meets the absolute value of every
weight matrix on its way (``|W_2| diag|gelu'| |W_1|`` where the signs of ``W_2 diag(gelu') W_1``
cancel), which compounds with depth: measured, about 1,000 times a block, a bound of 1e-8
relative on two blocks' logits where correct implementations differ by 1e-15. So the error ``e``
of a sublayer's input x is carried through the sublayer's own Jacobian instead. A correct
implementation computes the sublayer f at some x' with ``|x' - x| <= e``, and::

    |f'(x') - f(x)| <= |f'(x') - f(x')| + |f(x') - f(x)|
                    <= own(x +/- e)      + sum_k max_{x' in x +/- e} |J_ik(x')| e_k

the first term the sublayer's bound with exact inputs, its rules evaluated on the ball
``x +/- e`` (every rule holds for every point of its balls); the second by the mean value
theorem, with J enclosed over the whole ball by forward-mode differentiation in ball arithmetic
(``Tangent``: n d directions, one per input element), so no second-order term is left out.
``decoder_block`` carries its first sublayer's error into the second this way, ``gpt_forward``
every sublayer's and the final norm and head's. The Jacobian costs about (n d) x (n d_ff) entrywise
operations a sublayer: past ``MAX_DIRECTIONS`` input elements the error is carried node by node
(the rules above, ``layer_norm_carried`` and ``gelu_carried`` among them), sound but looser.

**At a storage tier** (bounds.py, "Mixed precision"; ``spec.precision.STORAGE_POINTS``): the
inputs and parameters are storage values, the arithmetic is float32's (float16's at "float16"),
and every tensor a bfloat16 model hands from one torch operation to the next is stored: each layer
norm's output, q, k and v, the attention weights before V (``bounds.weighted_values``), each head's
output, each projection's result (``stored``), gelu's output, the residual stream after each add,
the embedding; a projection's product may also be stored before its bias (``projection``: two
storage tensors' ops, ``x @ W`` then ``+ b``; torch's CPU ``F.linear`` rounds once). Each point is
``bounds.to_storage``: ``e + u_s (|x| + e) + tau_s``. Stored q and k reach the softmax as logit
errors of about ``s u_s |q||k|``, within the storage tiers' first-order guard (2^-3) only for
small scores; the carried error through ``through`` is unchanged (the Jacobian is the exact
function's). The block's output is stored twice (its residual and the engine's output point):
conservative by ``u_s |y|``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flint import arb, arb_mat

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
    """``gelu(x W_1 + b_1) W_2 + b_2``, every rule propagating the errors x carries; at a storage
    tier the hidden pre-activation and gelu's output are stored, and each product may be stored
    before its bias (module docstring, "At a storage tier"; the output is stored by the engine)."""
    hidden = stored(g, projection(g, x, p["w_1"], p["b_1"]))
    return projection(g, stored(g, activations.gelu_t(g, hidden, form)), p["w_2"], p["b_2"])


def stored(g: Graph, t: T) -> T:
    """``t`` at a declared rounding point to storage (``bounds.storage_node``); as it is outside a
    storage tier."""
    return T(t.v, bounds.storage_node(am.eabs(t.v), t.e)) if g.track else t


def projection(g: Graph, x: T, w: T, b: T | None) -> T:
    """``X W + b`` (``Graph.affine``); at a storage tier the product ``X W`` may also be stored
    before its bias is added (two storage tensors' ops: ``x @ W``, then ``+ b``): ``u_s (|X| +
    e_X) |W| + tau_s`` more. torch's CPU ``F.linear`` adds the bias before its one rounding."""
    t = g.affine(x, w, b)
    if not g.track or bounds.STORAGE_U is None:
        return t
    assert t.e is not None
    # float16 arithmetic (ARITH_TINY > 0): each of the k products and k sums may round in the subnormals
    e = t.e + am.full(*t.shape, (2 * x.shape[1] + 1) * bounds.ARITH_TINY)
    return T(t.v, e if b is None else e + _pre_bias(x, w))


def _pre_bias(x: T, w: T) -> arb_mat:
    """The product's rounding to storage, at an upper bound of its magnitude ``(|X| + e_X) |W|``."""
    product = (x.abs if x.e is None else x.abs + x.e) * w.abs
    return bounds.to_storage(product, None)


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


@dataclass
class NormNode:
    """A layer norm in a graph: its input as balls holding every x' a correct implementation may
    compute there (``enclose``), its output, eps; ``stats`` gives what its backward reads."""

    x: arb_mat
    out: T
    eps: arb
    track: bool

    def stats(self, rounded: bool = True) -> tuple[list[list[arb]], list[arb], list[list[arb]]]:
        """Per row: ``yhat = (x - mu) r`` and ``r = 1 / sqrt(v + eps)``, balls that hold the values
        a correct implementation computes (in a bound pass: the exact values over the input's
        balls, widened by the exact-input rule's bounds, ``norms.layer_norm_row`` and
        ``norms.rstd_error``), and ``(|x_j| + |mu|) r``, upper bounds (an x-space backward's
        magnitudes: transformer_grads' layer norm rule). ``rounded`` False: the exact values over the
        input's balls, not widened (transformer_grads' bare stage)."""
        n = self.x.ncols()
        yhats, rs, xrs = [], [], []
        for row in am.rows_of(self.x):
            total = sum(row, arb(0))
            c = [(n * xj - total) / n for xj in row]  # exactly 0 on a constant row
            v = sum((cj * cj for cj in c), arb(0)) / n
            r = (v + self.eps).rsqrt()
            yhat = [cj * r for cj in c]
            if self.track and rounded:
                low = norms._low(v)
                e_y = norms.layer_norm_row(row, c, v, self.eps, low)
                theta = norms.rstd_error(v.abs_upper(), norms.stat_errors(row, c)[2], self.eps, low)
                yhat = [y + arb(0, e) for y, e in zip(yhat, e_y, strict=True)]
                r = r * (1 + arb(0, theta))
            mu = (total / n).abs_upper()
            r_up = r.abs_upper()
            yhats.append(yhat)
            rs.append(r)
            xrs.append([(xj.abs_upper() + mu) * r_up for xj in row])
        return yhats, rs, xrs


def norm_node(g: Graph, x: T, w: T, b: T, eps: arb) -> NormNode:
    """A layer norm whose output a storage tier stores (module docstring, "At a storage tier")."""
    if g.track and (w.e is not None or b.e is not None):
        out = _norm_carrying_params(g, x, w, b, eps)
    else:
        out = norms.layer_norm_t(g, x, _entries(w), _entries(b), eps)
    return NormNode(enclose(x), stored(g, out), eps, g.track)


def _norm_carrying_params(g: Graph, x: T, w: T, b: T, eps: arb) -> T:
    """A layer norm whose gain and bias carry error bounds e_w, e_b (gpt_train's parameters after a
    step). A correct implementation computes ``fl(yhat' w' + b')`` with ``|yhat' - yhat| <= e_y``
    (the norm's own rule), ``|w' - w| <= e_w``, ``|b' - b| <= e_b``, so it is off by at most
    ``norms.affine_error`` at the balls ``w +/- e_w``, ``b +/- e_b`` (the rounding, charged at
    their upper ends, and ``|w'| e_y``) plus ``|yhat| e_w + e_b``."""
    bare = norms.layer_norm_t(g, x, None, None, eps)  # yhat and its bound e_y
    n_rows, d = bare.shape
    wv, bv = _entries(w), _entries(b)
    wb, bb = enclose(w).entries(), enclose(b).entries()
    zero = [am.ZERO] * d
    ew = zero if w.e is None else w.e.entries()
    eb = zero if b.e is None else b.e.entries()
    ys, es = bare.v.entries(), bare.e.entries()
    values, errors = [], []
    for i in range(n_rows):
        y, e_y = ys[i * d : (i + 1) * d], es[i * d : (i + 1) * d]
        values.extend(yj * wj + bj for yj, wj, bj in zip(y, wv, bv, strict=True))
        rounding = norms.affine_error(y, e_y, wb, bb)
        errors.extend(r + yj.abs_upper() * a + c for r, yj, a, c in zip(rounding, y, ew, eb, strict=True))
    return T(am.build(n_rows, d, values), am.build(n_rows, d, errors))


@dataclass
class AttentionNodes:
    """``x + attn(ln_1(x))`` node by node (gpt_grads' backward reads them)."""

    ln: NormNode
    q: T
    k: T
    v: T
    heads: exact.Heads
    out: T
    jac: arb_mat | None = None  # |J| of the sublayer over its input's balls (``through``)
    key_shift: arb_mat | None = None  # b_k's carried error bound, kept out of k (``keys_carrying_shift``)


@dataclass
class FfnNodes:
    """``x + ffn(ln_2(x))`` node by node."""

    ln: NormNode
    hidden: T  # before gelu
    act: T  # after gelu
    out: T
    jac: arb_mat | None = None  # |J| of the sublayer over its input's balls (``through``)


def attention_nodes(g: Graph, x: T, p: Mapping[str, T], h: int, eps: arb) -> AttentionNodes:
    """``x + attn(ln_1(x))``: causal multi-head attention with the output projection."""
    ln = norm_node(g, x, p["ln1_w"], p["ln1_b"], eps)
    q, v = (stored(g, projection(g, ln.out, p[f"w_{s}"], p[f"b_{s}"])) for s in "qv")
    shift = p["b_k"].e if g.track else None
    k = (
        projection(g, ln.out, p["w_k"], p["b_k"])
        if shift is None
        else keys_carrying_shift(g, ln.out, p["w_k"], p["b_k"])
    )
    k = stored(g, k)
    # at a storage tier the weights are stored before V (bounds.weighted_values), then each head's output
    heads = exact.attend_heads(g, q, k, v, h, causal_mask(x.shape[0]))
    heads.concat = stored(g, heads.concat)
    out = stored(g, residual(g, x, stored(g, projection(g, heads.concat, p["w_o"], p["b_o"]))))
    return AttentionNodes(ln, q, k, v, heads, out, key_shift=shift)


def keys_carrying_shift(g: Graph, a: T, w_k: T, b_k: T) -> T:
    """``k = a W_k + b_k`` where b_k carries an error bound delta (gpt_train's parameters after a
    step). A correct implementation holds ``b_k' = b_k + d``, ``|d| <= delta``, and computes
    ``k' = K + 1 d^T`` with K within the affine rule's bound (charged at the magnitudes of the ball
    ``b_k +/- delta``) of ``a W_k + b_k``: every key shifted by one vector d, which adds ``q_i . d``
    to every score of row i, a shift the softmax ignores exactly (the loss does not depend on
    b_k). So d is kept out of k's error: only what its size adds to the roundings is, ``gamma(d +
    SCORE_EXTRA + 4) delta`` on k (the scores' products and scale at magnitudes grown by
    ``|q| delta``, and a log-domain normaliser's rounding at ``|lse| + |q . d|``, each at most that
    times |q|, which the scores' rule meets as an error of k). Its one other reader, the backward's
    ``dq = s dS k'``, adds ``s (dS 1) d^T`` (``transformer_grads.attention_back``)."""
    widened = T(b_k.v)
    widened.__dict__["abs"] = am.eabs(ball(b_k))  # the roundings at the magnitudes b_k' may have
    k = projection(g, a, w_k, widened)
    assert k.e is not None and b_k.e is not None
    pad = bounds.gamma(a.shape[1] + bounds.SCORE_EXTRA + 4) * b_k.e
    return T(k.v, k.e + am.bcast_rows(pad, k.shape[0]))


def ffn_nodes(g: Graph, x: T, p: Mapping[str, T], eps: arb, form: str) -> FfnNodes:
    """``x + ffn(ln_2(x))``."""
    ln = norm_node(g, x, p["ln2_w"], p["ln2_b"], eps)
    hidden = stored(g, projection(g, ln.out, p["w_1"], p["b_1"]))
    act = stored(g, activations.gelu_t(g, hidden, form))
    return FfnNodes(ln, hidden, act, stored(g, residual(g, x, stored(g, projection(g, act, p["w_2"], p["b_2"])))))


def attention_sublayer(g: Graph, x: T, p: Mapping[str, T], h: int, eps: arb) -> T:
    return attention_nodes(g, x, p, h, eps).out


def ffn_sublayer(g: Graph, x: T, p: Mapping[str, T], eps: arb, form: str) -> T:
    return ffn_nodes(g, x, p, eps, form).out


def block_t(g: Graph, x: T, p: Mapping[str, T], h: int, eps: arb, form: str) -> T:
    """GPT-2's pre-norm block: ``h = x + attn(ln_1(x))``, ``y = h + ffn(ln_2(h))``. An error
    entering a sublayer is carried through its Jacobian (``through``), not node by node."""
    return block_nodes(g, x, p, h, eps, form)[1].out


def block_nodes(g: Graph, x: T, p: Mapping[str, T], h: int, eps: arb, form: str) -> tuple[AttentionNodes, FfnNodes]:
    """``block_t`` with its sublayers' nodes: in a bound pass those of ``through``'s own pass (the
    sublayer on the balls of its input), whose values and bounds enclose what a correct
    implementation computes there."""
    att = captured(
        g, x, lambda g_, x_: attention_nodes(g_, x_, p, h, eps), lambda t: t_attention_sublayer(t, p, h, eps)
    )
    ffn = captured(
        g, att.out, lambda g_, x_: ffn_nodes(g_, x_, p, eps, form), lambda t: t_ffn_sublayer(t, p, eps, form)
    )
    return att, ffn


# -------------------------------------------------------------------- errors carried across blocks


@dataclass
class Tangent:
    """Values ``v`` (n x w, balls) and their derivatives along m input directions, stacked:
    row ``k n + i`` of ``d`` is the derivative of row i along direction k."""

    v: arb_mat
    d: arb_mat
    m: int

    @staticmethod
    def seed(x: arb_mat) -> Tangent:
        """The identity: direction k = i w + j is the input element (i, j)."""
        n, w = am.shape(x)
        m = n * w
        one, zero = arb(1), am.ZERO
        d = am.build(m * n, w, [one if k == i * w + j else zero for k in range(m) for i in range(n) for j in range(w)])
        return Tangent(x, d, m)


def _rows_to_blocks(d: arb_mat, m: int, n: int) -> arb_mat:
    """Stacked (m n x c) -> side by side (n x m c): column block k is direction k."""
    c = d.ncols()
    e = d.entries()
    return am.build(n, m * c, [e[(k * n + i) * c + j] for i in range(n) for k in range(m) for j in range(c)])


def _blocks_to_rows(b: arb_mat, m: int, c: int) -> arb_mat:
    """Side by side (n x m c) -> stacked (m n x c)."""
    n = b.nrows()
    e = b.entries()
    return am.build(m * n, c, [e[i * m * c + k * c + j] for k in range(m) for i in range(n) for j in range(c)])


def _tile(a: arb_mat, m: int) -> arb_mat:
    return am.vcat([a] * m)


def t_affine(x: Tangent, w: T, b: T | None) -> Tangent:
    v = x.v * w.v
    if b is not None:
        v = v + am.bcast_rows(b.v, x.v.nrows())
    return Tangent(v, x.d * w.v, x.m)


def t_add(x: Tangent, y: Tangent) -> Tangent:
    return Tangent(x.v + y.v, x.d + y.d, x.m)


def t_gelu(x: Tangent, form: str) -> Tangent:
    xs = x.v.entries()
    size = len(xs)
    der = [activations._derivative(xi, form) for xi in xs]
    de = x.d.entries()
    d = am.build(x.d.nrows(), x.d.ncols(), [de[t] * der[t % size] for t in range(len(de))])
    return Tangent(am.build(*am.shape(x.v), [activations._value(xi, form) for xi in xs]), d, x.m)


def t_layer_norm(x: Tangent, w: T, b: T, eps: arb) -> Tangent:
    """Row i's derivative is ``dx M_i``, ``M_i = r (I - 1 1^T / n - yhat yhat^T / n) diag(w)``."""
    n_rows, n = am.shape(x.v)
    wv, bv = w.v.entries(), b.v.entries()
    values: list[arb] = []
    parts: list[arb_mat] = []
    de = x.d.entries()
    for i, row in enumerate(am.rows_of(x.v)):
        total = sum(row, arb(0))
        c = [(n * xj - total) / n for xj in row]
        r = (sum((cj * cj for cj in c), arb(0)) / n + eps).rsqrt()
        yhat = [cj * r for cj in c]
        values.extend(yj * wj + bj for yj, wj, bj in zip(yhat, wv, bv, strict=True))
        m_i = am.build(n, n, [r * ((j == k) - (1 + yhat[j] * yhat[k]) / n) * wv[k] for j in range(n) for k in range(n)])
        rows_i = am.build(x.m, n, [de[(k * n_rows + i) * n + j] for k in range(x.m) for j in range(n)])
        parts.append(rows_i * m_i)  # (m x n): row k is direction k's derivative of row i
    pe = [p.entries() for p in parts]
    d = am.build(x.m * n_rows, n, [pe[i][k * n + j] for k in range(x.m) for i in range(n_rows) for j in range(n)])
    return Tangent(am.build(n_rows, n, values), d, x.m)


def t_attention(
    q: Tangent, k: Tangent, v: Tangent, h: int, mask: Mask, weights: list[Tangent] | None = None
) -> Tangent:
    """Causal multi-head attention and its derivative: per head, ``dS = s (dQ K^T + Q dK^T)``,
    ``dA = A * (dS - rowsum(A * dS))``, ``dZ = dA V + A dV``. ``weights``: a list that receives
    each head's weights A with their derivative (gpt_grads' node enclosures)."""
    g0 = Graph(track=False)
    n, d = am.shape(q.v)
    m, dh = q.m, d // h
    s = arb(dh).rsqrt()
    outs_v, outs_d = [], []
    for hd in range(h):
        lo, hi = hd * dh, (hd + 1) * dh
        qv, kv, vv = (am.take_cols(t.v, lo, hi) for t in (q, k, v))
        dq, dk, dv = (am.take_cols(t.d, lo, hi) for t in (q, k, v))
        sm = g0.softmax_rows(T((qv * kv.transpose()) * s), mask.keep, "zeros")
        a = sm.a.v
        ds = (dq * kv.transpose() + _blocks_to_rows(qv * dk.transpose(), m, n)) * s
        a_rep = _tile(a, m)
        ads = am.emul(a_rep, ds)
        da = ads - am.emul(a_rep, am.bcast_cols(am.rowsum(ads), n))
        if weights is not None:
            weights.append(Tangent(a, da, m))
        outs_v.append(a * vv)
        outs_d.append(da * vv + _blocks_to_rows(a * _rows_to_blocks(dv, m, n), m, dh))
    return Tangent(am.hcat(outs_v), am.hcat(outs_d), m)


def t_attention_sublayer(x: Tangent, p: Mapping[str, T], h: int, eps: arb) -> Tangent:
    a = t_layer_norm(x, p["ln1_w"], p["ln1_b"], eps)
    q, k, v = (t_affine(a, p[f"w_{s}"], p[f"b_{s}"]) for s in "qkv")
    return t_add(x, t_affine(t_attention(q, k, v, h, causal_mask(x.v.nrows())), p["w_o"], p["b_o"]))


def t_ffn_sublayer(x: Tangent, p: Mapping[str, T], eps: arb, form: str) -> Tangent:
    m = t_layer_norm(x, p["ln2_w"], p["ln2_b"], eps)
    hidden = t_gelu(t_affine(m, p["w_1"], p["b_1"]), form)
    return t_add(x, t_affine(hidden, p["w_2"], p["b_2"]))


# The Jacobian has one direction per input element and costs about directions x n d_ff entrywise
# operations a sublayer: past this many directions (n d = 1024: 32 tokens of 32 features) the
# error is carried node by node instead, a looser bound (module docstring).
MAX_DIRECTIONS = 1024


def ball(x: T) -> arb_mat:
    """Every x' with ``|x' - x| <= e``, as balls."""
    assert x.e is not None
    return am.build(*x.shape, [v + arb(0, e) for v, e in zip(x.v.entries(), x.e.entries(), strict=True)])


def enclose(x: T) -> arb_mat:
    """Balls holding every value a correct implementation may compute for x (``ball``; x.v when exact)."""
    return x.v if x.e is None else ball(x)


def jacobian(x: T, tangent: Callable[[Tangent], Tangent]) -> tuple[arb_mat, tuple[int, int]]:
    """``|J|`` of ``tangent``'s function enclosed over the whole ball ``x +/- e``, as (m x n w): row
    k is input element k's derivative of every output element (row-major); and the output's shape."""
    out = tangent(Tangent.seed(ball(x)))
    n, w = am.shape(out.v)
    jac = am.build(out.m, n * w, [z.abs_upper() for z in out.d.entries()])
    if not all(z.is_finite() for z in jac.entries()):
        # e.g. a layer norm whose row is constant somewhere in the ball, with eps = 0
        raise bounds.BoundError("a sublayer's Jacobian is unbounded over its input's error ball")
    return jac, (n, w)


def carried(x: T, tangent: Callable[[Tangent], Tangent], jac: tuple[arb_mat, tuple[int, int]] | None = None) -> arb_mat:
    """``sum_k |J_ik| e_k``, J the Jacobian of ``tangent``'s function enclosed over the whole
    ball ``x +/- e``: by the mean value theorem, a bound of ``|f(x') - f(x)|`` for every x' in it
    (``jac``: ``jacobian``'s result, when already computed)."""
    assert x.e is not None
    m, (n, w) = jacobian(x, tangent) if jac is None else jac
    return am.build(n, w, (am.build(1, m.nrows(), x.e.entries()) * m).entries())


def through(
    g: Graph,
    x: T,
    graph: Callable[[Graph, T], T],
    tangent: Callable[[Tangent], Tangent],
    keep: list[arb_mat] | None = None,
) -> T:
    """``graph`` applied to x, whose error a stack of blocks carries: the value at x, the bound
    ``graph``'s own (its exact-input rules on the ball x +/- e) plus ``carried``. ``keep``: a list
    that receives the Jacobian's ``|J|`` (gpt_grads carries the backward's errors through it)."""
    if not g.track or x.e is None or x.shape[0] * x.shape[1] > MAX_DIRECTIONS:
        return graph(g, x)  # node by node: every rule propagates the error x carries
    own = graph(g, T(ball(x)))
    value = graph(Graph(track=False), T(x.v))
    assert own.e is not None
    jac = jacobian(x, tangent)
    if keep is not None:
        keep.append(jac[0])
    return T(value.v, own.e + carried(x, tangent, jac))


def captured(g: Graph, x: T, nodes: Callable[[Graph, T], Any], tangent: Callable[[Tangent], Tangent]) -> Any:
    """``through`` for a graph that returns its nodes (``.out`` the result): the nodes of the pass
    on ``g`` (the own pass on the balls of x, or node by node), their ``out`` replaced by
    ``through``'s result."""
    box: list[Any] = []
    jac: list[arb_mat] = []

    def graph(g_: Graph, x_: T) -> T:
        made = nodes(g_, x_)
        if g_ is g:
            box.append(made)
        return made.out

    out = through(g, x, graph, tangent, jac)
    (made,) = box
    made.out = out
    made.jac = jac[0] if jac else None
    return made


# -------------------------------------------------------------------- the graphs


def feed_forward(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x = exact._f64(inputs, "x", 2)
    p = ffn_params(inputs, x.shape[1])
    assert set(p) == set(FFN_PARAMS)
    y = feed_forward_t(g, exact._exact(x), p, activations._form(options))
    return {"y": Out(y, y.shape)}


def block_rows_t(g: Graph, x: T, p: Mapping[str, T], h: int, eps: arb, form: str, rows: Sequence[int]) -> T:
    """``block_t``'s output on the token rows ``rows`` only (the scale tier's sampled rows).

    Query row i reads the keys and values of tokens 0..i, so ln_1, k and v are computed for every
    token; q, the attention, the residuals and the feed-forward for ``rows`` alone. The bounds are
    ``block_t``'s rules: the attention sublayer node by node (its input x is exact), the
    feed-forward sublayer ``through`` its Jacobian one row at a time. That is ``block_t``'s
    whole-sublayer Jacobian, which is block diagonal (the sublayer maps each row on its own: row
    i's output depends on row i's input alone, so every other block is exactly 0), taken block by
    block: d directions a row instead of n d, which keeps it within ``MAX_DIRECTIONS`` at any
    length (d <= 1024), where ``block_t`` falls back to node-by-node carrying past n d > 1024 (at
    d = 512 that bound is ~70 times wider: docs/truth-and-bounds.md, "The transformer at scale")."""
    ln = norms.layer_norm_t(g, x, _entries(p["ln1_w"]), _entries(p["ln1_b"]), eps)
    k, v = (g.affine(ln, p[f"w_{s}"], p[f"b_{s}"]) for s in "kv")
    q = g.affine(take_rows(ln, rows), p["w_q"], p["b_q"])
    mask = Mask(keep=[[j <= i for j in range(x.shape[0])] for i in rows], add=None)
    heads = exact.attend_heads(g, q, k, v, h, mask)
    mid = residual(g, take_rows(x, rows), g.affine(heads.concat, p["w_o"], p["b_o"]))
    out = [
        captured(
            g,
            take_rows(mid, [i]),
            lambda g_, x_: ffn_nodes(g_, x_, p, eps, form),
            lambda t: t_ffn_sublayer(t, p, eps, form),
        ).out
        for i in range(len(rows))
    ]
    return T(am.vcat([o.v for o in out]), am.vcat([o.e for o in out]) if g.track else None)


def take_rows(t: T, rows: Sequence[int]) -> T:
    return T(am.take_rows(t.v, rows), None if t.e is None else am.take_rows(t.e, rows))


def decoder_block(
    g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], rows: Sequence[int] | None = None
) -> dict[str, Out]:
    """The block; with ``rows``, its output on those token rows only (``block_rows_t``)."""
    x = exact._f64(inputs, "x", 2)
    d = x.shape[1]
    h = exact.num_heads(options, d, "decoder_block")
    (p,) = block_params(inputs, d, stacked=False)
    eps, form = norms._eps(options), activations._form(options)
    if rows is None:
        y = block_t(g, exact._exact(x), p, h, eps, form)
    else:
        exact._rows(x, rows)  # the indices' check
        y = block_rows_t(g, exact._exact(x), p, h, eps, form, list(rows))
    return {"y": Out(y, y.shape)}


def _tokens(inputs: Mapping[str, np.ndarray], vocab: int, n_ctx: int) -> list[int]:
    if "tokens" not in inputs:
        raise InputError("missing input 'tokens'")
    arr = np.asarray(inputs["tokens"])
    ok = (
        arr.ndim == 1
        and arr.size > 0
        and (arr.dtype.kind in "iu" or (arr.dtype.kind == "f" and np.all(arr == np.round(arr))))
    )
    if not ok:
        raise InputError(
            f"tokens must be a non-empty vector of integer token ids; got shape {arr.shape}, dtype {arr.dtype}"
        )
    ids = [int(t) for t in arr.tolist()]
    if min(ids) < 0 or max(ids) >= vocab:
        raise InputError(
            f"tokens must be 0-based ids in [0, {vocab - 1}] (params.wte has {vocab} rows); got {min(ids)}..{max(ids)}"
        )
    if len(ids) > n_ctx:
        raise InputError(f"tokens holds {len(ids)} positions, more than params.wpe's n_ctx = {n_ctx}")
    return ids


def embed(g: Graph, ids: list[int], wte: T, wpe: T) -> T:
    """``wte[t_i] + wpe[i]``: an exact gather, one rounding for the sum (``u |x|``); tables that
    carry error bounds (gpt_train's, after a step) add theirs: ``e + u (|x| + e)``."""
    n, d = len(ids), wte.shape[1]
    tv, pv = wte.v.entries(), wpe.v.entries()
    v = am.build(n, d, [tv[t * d + j] + pv[i * d + j] for i, t in enumerate(ids) for j in range(d)])
    if not g.track:
        return T(v)
    if wte.e is None and wpe.e is None:
        return stored(g, T(v, bounds.U * am.eabs(v)))
    te = wte.e.entries() if wte.e is not None else [am.ZERO] * len(tv)
    pe = wpe.e.entries() if wpe.e is not None else [am.ZERO] * len(pv)
    carried = am.build(n, d, [te[t * d + j] + pe[i * d + j] for i, t in enumerate(ids) for j in range(d)])
    return stored(g, T(v, carried + bounds.U * (am.eabs(v) + carried)))


@dataclass
class GptInputs:
    """gpt_forward's inputs, validated: token ids, tables, heads, options, blocks, final norm, head."""

    ids: list[int]
    wte: T  # (vocab x d)
    wpe: T  # (n_ctx x d)
    h: int
    eps: arb
    form: str
    blocks: list[dict[str, T]]
    lnf_w: T
    lnf_b: T
    head: T


def gpt_inputs(inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], op: str = "gpt_forward") -> GptInputs:
    wte = exact._f64(inputs, "params.wte", 2)
    vocab, d = wte.shape
    wpe = exact._f64(inputs, "params.wpe", 2)
    if wpe.shape[1] != d:
        raise InputError(f"params.wpe must be (n_ctx x d) with d = {d} (params.wte is {wte.shape}); got {wpe.shape}")
    ids = _tokens(inputs, vocab, wpe.shape[0])
    h = exact.num_heads(options, d, op)
    eps, form = norms._eps(options), activations._form(options)
    blocks = block_params(inputs, d, stacked=True)
    lnf_w, lnf_b = _vector(inputs, "params.lnf_w", d), _vector(inputs, "params.lnf_b", d)
    w_head = exact._f64(inputs, "params.w_head", 2)
    if w_head.shape != (d, vocab):
        raise InputError(f"params.w_head must have shape (d, vocab) = {(d, vocab)}; got {w_head.shape}")
    return GptInputs(
        ids, exact._exact(wte), exact._exact(wpe), h, eps, form, blocks, lnf_w, lnf_b, exact._exact(w_head)
    )


@dataclass
class HeadNodes:
    """The final layer norm and the LM head."""

    ln: NormNode
    out: T  # the logits
    jac: arb_mat | None = None  # |J| of the sublayer over its input's balls (``through``)


@dataclass
class GptNodes:
    blocks: list[tuple[AttentionNodes, FfnNodes]]
    final: HeadNodes


def gpt_nodes(g: Graph, gi: GptInputs) -> GptNodes:
    """The embedding, the blocks and the head, with every sublayer's nodes (``block_nodes``)."""
    x = embed(g, gi.ids, gi.wte, gi.wpe)
    blocks = []
    for p in gi.blocks:
        att, ffn = block_nodes(g, x, p, gi.h, gi.eps, gi.form)
        blocks.append((att, ffn))
        x = ffn.out

    def head(g_: Graph, x_: T) -> HeadNodes:
        ln = norm_node(g_, x_, gi.lnf_w, gi.lnf_b, gi.eps)
        return HeadNodes(ln, projection(g_, ln.out, gi.head, None))

    final = captured(g, x, head, lambda t: t_affine(t_layer_norm(t, gi.lnf_w, gi.lnf_b, gi.eps), gi.head, None))
    return GptNodes(blocks, final)


def gpt_forward(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    logits = gpt_nodes(g, gpt_inputs(inputs, options)).final.out
    return {"logits": Out(logits, logits.shape)}


exact.register_graph("feed_forward", feed_forward)
exact.register_graph("decoder_block", decoder_block, rows=True)
exact.register_graph("gpt_forward", gpt_forward)
