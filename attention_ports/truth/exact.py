"""The exact engine: every operation of ``attention_ports.spec.ops`` in arb ball arithmetic.

Each operation is written once as a computation graph over ``T`` (a ball-valued matrix and,
when tracked, the error bound a float64 implementation may have there; see
``attention_ports.truth.bounds``). ``attention_ports.truth.engine`` runs a graph twice:

* a **value pass** at a working precision of P bits (``Graph(track=False)``): balls that enclose
  the exact mathematical results, to be rounded to float64 with a certificate;
* a **bound pass** at ``BOUND_PREC`` bits (``Graph(track=True)``): the same graph with the error
  analysis's magnitudes and bounds, which do not need the values to more than a few digits.

The math is the reference's (``reference/attention.py``, ``reference/classifier.py``); the scale
``None`` is exactly 1/sqrt(d_k). ``-inf`` never enters a ball (python-flint would turn it into
``[+/- inf]``): masks are split into a boolean "kept" pattern and finite additive offsets, a
removed key's weight is exactly 0, and a query whose keys are all removed follows the
``masked_query`` convention: ``"zeros"`` (zero weights and output: the reference and torch),
``"nan"`` (NaN weights and output row) or ``"uniform"`` (weights 1/n_k, output the mean of the
value rows). The ``softmax`` operation itself returns NaN for an all ``-inf`` slice.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from flint import arb, arb_mat, ctx

from attention_ports.spec.conventions import CONVENTIONS
from attention_ports.spec.ops import CLASSIFIER_PARAMS
from attention_ports.truth import arbmat as am
from attention_ports.truth import bounds

_plus = bounds._plus

BOUND_PREC = 128


class InputError(ValueError):
    """The inputs do not fit the operation; the message names the argument and every shape."""


@dataclass
class T:
    """A ball-valued matrix ``v`` and, in a bound pass, the error bound ``e`` (None: exact)."""

    v: arb_mat
    e: arb_mat | None = None

    @functools.cached_property
    def abs(self) -> arb_mat:
        return am.eabs(self.v)

    @property
    def shape(self) -> tuple[int, int]:
        return am.shape(self.v)

    def transpose(self) -> T:
        t = T(self.v.transpose(), None if self.e is None else self.e.transpose())
        if "abs" in self.__dict__:  # reuse the entrywise bounds already computed (the costly part)
            t.__dict__["abs"] = self.__dict__["abs"].transpose()
        return t

    def cols(self, start: int, stop: int) -> T:
        return T(am.take_cols(self.v, start, stop), None if self.e is None else am.take_cols(self.e, start, stop))


@dataclass
class Out:
    """One output: its value/bound matrix, the array shape it is stored in, rows that are NaN."""

    t: T
    shape: tuple[int, ...]
    nan_rows: frozenset[int] = frozenset()


@dataclass
class Mask:
    """A mask as data balls can use: which keys each query keeps, and finite additive offsets."""

    keep: list[list[bool]] | None  # None: every key kept
    add: arb_mat | None  # finite additive offsets (0 where removed); None: none
    nonzero_add: list[list[bool]] | None = None


@dataclass
class Softmaxed:
    a: T
    dead: list[int]
    err: bounds.SoftmaxErr | None = None  # the weights' error model (bound pass only)


def _exact(a: np.ndarray) -> T:
    return T(am.from_array(a))


def _f64(inputs: Mapping[str, np.ndarray], name: str, ndim: int) -> np.ndarray:
    if name not in inputs:
        raise InputError(f"missing input {name!r}")
    arr = np.asarray(inputs[name])
    if arr.ndim != ndim:
        raise InputError(f"{name} must have {ndim} dimension(s); got shape {arr.shape}")
    if arr.dtype.kind not in "fiu":
        raise InputError(f"{name} must be numeric; got dtype {arr.dtype}")
    arr = arr.astype(np.float64)  # integers and float64 only: the conversion is exact
    if arr.size == 0:
        raise InputError(f"{name} is empty (shape {arr.shape})")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name} (shape {arr.shape}) must be finite")
    return arr


def parse_mask(mask: np.ndarray, shape: tuple[int, int]) -> Mask:
    mask = np.asarray(mask)
    if mask.shape != shape:
        raise InputError(f"mask must have shape (n_q, n_k) = {shape}; got {mask.shape}")
    if mask.dtype == bool:
        return Mask(keep=[[bool(x) for x in row] for row in mask.tolist()], add=None)
    if mask.dtype.kind != "f":
        raise InputError(f"mask must be boolean or float; got dtype {mask.dtype}")
    rows = mask.astype(np.float64).tolist()
    keep, add, nonzero = [], [], []
    for row in rows:
        for x in row:
            if math.isnan(x) or x == math.inf:
                raise InputError(f"additive mask (shape {mask.shape}) may hold finite values and -inf only")
        keep.append([x != -math.inf for x in row])
        add.append([x if x != -math.inf else 0.0 for x in row])
        nonzero.append([x != -math.inf and x != 0.0 for x in row])
    has_add = any(any(r) for r in nonzero)
    return Mask(keep=keep, add=arb_mat(add) if has_add else None, nonzero_add=nonzero if has_add else None)


def _rows(arr: np.ndarray, rows: Sequence[int] | None) -> np.ndarray:
    if rows is None:
        return arr
    idx = list(rows)
    if not idx or any(not 0 <= i < arr.shape[0] for i in idx):
        raise InputError(f"rows {idx[:5]}... must be valid query indices 0..{arr.shape[0] - 1}")
    return arr[idx]


@dataclass
class Graph:
    """The operations with (``track=True``) or without error tracking. Precision is ``ctx.prec``."""

    track: bool
    masked_query: str = "zeros"
    _gammas: dict[int, arb] = field(default_factory=dict)

    # ---------------------------------------------------------------- linear algebra
    def matmul(self, a: T, b: T, extra: int = 0) -> T:
        v = a.v * b.v
        e = bounds.matmul(a.abs, a.e, b.abs, b.e, a.v.ncols(), extra) if self.track else None
        return T(v, e)

    def affine(self, x: T, w: T, b: T | None) -> T:
        v = x.v * w.v
        if b is not None:
            v = v + am.bcast_rows(b.v, x.v.nrows())
        e = None
        if self.track:
            e = bounds.affine(
                x.abs, x.e, w.abs, w.e, None if b is None else b.abs, None if b is None else b.e, x.v.ncols()
            )
        return T(v, e)

    def scale(self, x: T, s: arb, extra: int) -> T:
        """``s * X`` where X came from a k-term product: the scale's roundings go into gamma."""
        v = x.v * s
        e = None
        if self.track:
            # fl(s' X') with X' = X + dX and s' the scale as computed (up to `extra` roundings in
            # all): |s| e_X propagated, plus gamma(extra) |s| (|X| + e_X).
            s_abs = s.abs_upper()
            prop = x.e * s_abs if x.e is not None else None
            e = bounds.gamma(extra) * (am.eabs(v) if prop is None else am.eabs(v) + prop)
            if prop is not None:
                e = e + prop
        return T(v, e)

    def scores(self, q: T, k: T, s: arb, mask: Mask | None) -> T:
        kt = k.transpose()
        v = (q.v * kt.v) * s
        e = None
        if self.track:
            # The error of q_i adds dq_i . k_j to score (i, j); its part dq_i . c (c: the centre of
            # the keys) is the same for every key of row i, which the softmax cancels: the logit
            # error that matters is dq_i . (k_j - c). Scores are only ever consumed by a softmax.
            k_spread = bounds.centred_cols(k.v).transpose()
            e = bounds.matmul(q.abs, None, kt.abs, kt.e, q.v.ncols(), bounds.SCORE_EXTRA)
            if q.e is not None:
                e = e + bounds.gamma(q.v.ncols() + bounds.SCORE_EXTRA) * (q.e * _plus(kt.abs, kt.e))
                e = e + q.e * _plus(k_spread, kt.e)
            e = e * s.abs_upper()
        if mask is not None and mask.add is not None:
            v = v + mask.add
            if self.track:
                ve, ee = v.entries(), e.entries()
                nz = [x for row in mask.nonzero_add for x in row]
                e = am.build(
                    v.nrows(),
                    v.ncols(),
                    [ee[i] + bounds.U * (ve[i].abs_upper() + ee[i]) if nz[i] else ee[i] for i in range(len(ee))],
                )
        return T(v, e)

    # ---------------------------------------------------------------- softmax
    def softmax_rows(self, s: T, keep: list[list[bool]] | None, dead_policy: str) -> Softmaxed:
        """Row softmax over the kept keys; ``dead_policy``: a convention, or "nan" for softmax itself."""
        n_rows, n_cols = s.shape
        rows = am.rows_of(s.v)
        e_rows = am.rows_of(s.e) if self.track and s.e is not None else None
        out_v: list[arb] = []
        parts: dict[str, list] = {"err": [], "norm": [], "eta": [], "eps": [], "second": [], "rho": []}
        dead: list[int] = []
        zero = am.ZERO
        for i, row in enumerate(rows):
            kept = keep[i] if keep is not None else [True] * n_cols
            if not any(kept):
                dead.append(i)
                w = arb(1) / n_cols if dead_policy == "uniform" else zero
                out_v.extend([w] * n_cols)
                if self.track:  # "uniform": 1/n_k with its division's rounding; else exactly 0
                    eps = bounds.C_DIV * bounds.U if dead_policy == "uniform" else zero
                    parts["err"].extend([eps * w] * n_cols)
                    parts["norm"].extend([zero] * n_cols)
                    parts["eta"].extend([zero] * n_cols)
                    parts["eps"].append(eps)
                    parts["second"].append(zero)
                    parts["rho"].append([eps] * n_cols)
                continue
            # Shift by one kept score itself, the one with the largest midpoint (softmax is shift
            # invariant, and every shifted score stays <= its radius, so exp cannot overflow): its own
            # shifted score is then exactly 0 and its exp exactly 1, where a ball minus itself keeps
            # a radius. So a row with one kept key has the weight 1 exactly, and an output that is
            # a midpoint between two doubles (v = 1 + 2^-53) still certifies.
            p = max((j for j in range(n_cols) if kept[j]), key=lambda j: row[j].mid())
            t = [(zero if j == p else row[j] - row[p]) if kept[j] else zero for j in range(n_cols)]
            ex = [t[j].exp() if kept[j] else zero for j in range(n_cols)]
            total = sum((ex[j] for j in range(n_cols) if kept[j]), zero)
            a = [ex[j] / total if kept[j] else zero for j in range(n_cols)]
            out_v.extend(a)
            if self.track:
                # the scores' own sizes and the row's log-sum-exp: where the mixed error rule charges
                # the inputs' relative perturbation and a log-domain normaliser's rounding
                s_abs = [row[j].abs_upper() if kept[j] else zero for j in range(n_cols)]
                lse = (row[p] + total.log()).abs_upper()
                b = bounds.softmax_row(
                    a, [x.abs_upper() for x in t], None if e_rows is None else e_rows[i], kept, s_abs, lse
                )
                for key in ("err", "norm", "eta"):
                    parts[key].extend(b[key])
                parts["eps"].append(b["eps"])
                parts["second"].append(b["second"])
                parts["rho"].append(b["rho"])
        v = am.build(n_rows, n_cols, out_v)
        if not self.track:
            return Softmaxed(T(v), dead)
        err = bounds.SoftmaxErr(
            a=v,
            err=am.build(n_rows, n_cols, parts["err"]),
            norm=am.build(n_rows, n_cols, parts["norm"]),
            eta=am.build(n_rows, n_cols, parts["eta"]),
            eps=am.build(n_rows, 1, parts["eps"]),
            second=am.build(n_rows, 1, parts["second"]),
            rho=parts["rho"],
        )
        return Softmaxed(T(v, err.err), dead, err)

    def weighted(self, sm: Softmaxed, x: T) -> T:
        """``A X`` for softmax weights A (attention output, z): see ``bounds.weighted_values``."""
        v = sm.a.v * x.v
        e = bounds.weighted_values(sm.err, x.abs, x.e, x.v, v) if self.track else None
        return T(v, e)

    def attention_backward(self, sm: Softmaxed, d_a: T, q: T, k: T, s: arb) -> tuple[T, T]:
        """d_q = s dS k and d_k = s dS^T q, dS = A * (dA - rowsum(dA * A)) the softmax's backward."""
        if not self.track:
            a = sm.a.v
            n = a.ncols()
            ds = am.emul(a, d_a.v - am.bcast_cols(am.rowsum(am.emul(d_a.v, a)), n))
            return self.scale(T(ds * k.v), s, 0), self.scale(T(ds.transpose() * q.v), s, 0)
        p, e_p, dsq, e_dsq = bounds.attention_grads(sm.err, d_a.v, d_a.e, q.v, q.e, k.v, k.e, bounds.SCORE_EXTRA)
        return self.scale(T(p, e_p), s, bounds.SCORE_EXTRA), self.scale(T(dsq, e_dsq), s, bounds.SCORE_EXTRA)

    # ---------------------------------------------------------------- attention
    def attention(self, q: T, k: T, v: T, s: arb, mask: Mask | None) -> tuple[T, Softmaxed]:
        scores = self.scores(q, k, s, mask)
        sm = self.softmax_rows(scores, None if mask is None else mask.keep, self.masked_query)
        return self.weighted(sm, v), sm

    def mean_rows(self, f: T) -> T:
        n = f.v.nrows()
        v = am.colsum(f.v) / n
        e = bounds.colsum(f.abs, f.e) / n if self.track else None
        return T(v, e)

    def colsum(self, x: T) -> T:
        v = am.colsum(x.v)
        e = bounds.colsum(x.abs, x.e) if self.track else None
        return T(v, e)


def _nan_rows(dead: list[int], policy: str, offset: int = 0) -> frozenset[int]:
    return frozenset(offset + i for i in dead) if policy == "nan" else frozenset()


def _check_policy(masked_query: str) -> None:
    if masked_query not in CONVENTIONS:
        raise InputError(f"masked_query must be one of {', '.join(CONVENTIONS)}; got {masked_query!r}")


def _scale(options: Mapping[str, Any], d_k: int) -> arb:
    scale = options.get("scale")
    if scale is None:
        return arb(d_k).rsqrt()  # exactly 1/sqrt(d_k), as a ball
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise InputError(f"scale must be a finite number or None; got {scale!r}")
    return arb(float(scale))


# -------------------------------------------------------------------- operation graphs


def softmax(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x = np.asarray(inputs["x"])
    if x.ndim == 0 or x.size == 0:
        raise InputError(f"softmax: x must have at least one dimension and one element; got shape {x.shape}")
    if x.dtype.kind != "f":
        raise InputError(f"softmax: x must be float; got {x.dtype}")
    flat = x.astype(np.float64).reshape(-1, x.shape[-1]).tolist()
    keep, finite = [], []
    for row in flat:
        for v in row:
            if math.isnan(v) or v == math.inf:
                raise InputError(f"softmax: x (shape {x.shape}) contains NaN or +inf")
        keep.append([v != -math.inf for v in row])
        finite.append([v if v != -math.inf else 0.0 for v in row])
    s = T(arb_mat(finite))
    sm = g.softmax_rows(s, keep, "nan")
    return {"y": Out(sm.a, x.shape, frozenset(sm.dead))}


def scaled_dot_product_attention(
    g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], rows: Sequence[int] | None = None
) -> dict[str, Out]:
    q_arr = _f64(inputs, "q", 2)
    k_arr, v_arr = _f64(inputs, "k", 2), _f64(inputs, "v", 2)
    if q_arr.shape[1] != k_arr.shape[1] or k_arr.shape[0] != v_arr.shape[0]:
        raise InputError(
            f"scaled_dot_product_attention: q, k need the same d_k and k, v the same n_k; "
            f"got q {q_arr.shape}, k {k_arr.shape}, v {v_arr.shape}"
        )
    mask = None
    if inputs.get("mask") is not None:
        mask = parse_mask(
            _rows(np.asarray(inputs["mask"]), rows), (len(rows) if rows else q_arr.shape[0], k_arr.shape[0])
        )
    q = _exact(_rows(q_arr, rows))
    out, sm = g.attention(q, _exact(k_arr), _exact(v_arr), _scale(options, q_arr.shape[1]), mask)
    nan = _nan_rows(sm.dead, g.masked_query)
    return {"output": Out(out, am.shape(out.v), nan), "weights": Out(sm.a, sm.a.shape, nan)}


def _bias(inputs: Mapping[str, np.ndarray], name: str, width: int) -> T | None:
    if inputs.get(name) is None:
        return None
    b = _f64(inputs, name, 1)
    if b.shape != (width,):
        raise InputError(f"{name} must be a vector of length {width}; got shape {b.shape}")
    return _exact(b)


def _weight(inputs: Mapping[str, np.ndarray], name: str, d_in: int, x_name: str, x_shape) -> T:
    w = _f64(inputs, name, 2)
    if w.shape[0] != d_in:
        raise InputError(
            f"{name} must be (d_in x d_out) with d_in = {x_name}'s width; got {x_name} {x_shape}, {name} {w.shape}"
        )
    return _exact(w)


def self_attention(
    g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], rows: Sequence[int] | None = None
) -> dict[str, Out]:
    x_arr = _f64(inputs, "x", 2)
    n, d_in = x_arr.shape
    w = {s: _weight(inputs, f"w_{s}", d_in, "x", x_arr.shape) for s in "qkv"}
    if w["q"].shape[1] != w["k"].shape[1]:
        raise InputError(f"w_q and w_k must project to the same d_k; got w_q {w['q'].shape}, w_k {w['k'].shape}")
    b = {s: _bias(inputs, f"b_{s}", w[s].shape[1]) for s in "qkv"}
    x = _exact(x_arr)
    xq = _exact(_rows(x_arr, rows)) if rows is not None else x
    q = g.affine(xq, w["q"], b["q"])
    k = g.affine(x, w["k"], b["k"])
    v = g.affine(x, w["v"], b["v"])
    mask = None
    if inputs.get("mask") is not None:
        mask = parse_mask(_rows(np.asarray(inputs["mask"]), rows), (q.shape[0], n))
    out, sm = g.attention(q, k, v, _scale(options, q.shape[1]), mask)
    nan = _nan_rows(sm.dead, g.masked_query)
    return {
        "q": Out(q, q.shape),
        "k": Out(k, k.shape),
        "v": Out(v, v.shape),
        "weights": Out(sm.a, sm.a.shape, nan),
        "output": Out(out, out.shape, nan),
    }


def multi_head_attention(
    g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], rows: Sequence[int] | None = None
) -> dict[str, Out]:
    query, key, value = (_f64(inputs, n, 2) for n in ("query", "key", "value"))
    d = query.shape[1]
    if key.shape[1] != d or value.shape[1] != d or key.shape[0] != value.shape[0]:
        raise InputError(
            "multi_head_attention: query, key and value need the same d_model, key and value the same n_k; "
            f"got query {query.shape}, key {key.shape}, value {value.shape}"
        )
    h = num_heads(options, d, "multi_head_attention")
    w = {}
    for s in "qkvo":
        arr = _f64(inputs, f"w_{s}", 2)
        if arr.shape != (d, d):
            raise InputError(f"multi_head_attention: w_{s} must be (d_model x d_model) = ({d}, {d}); got {arr.shape}")
        w[s] = _exact(arr)
    b = {s: _bias(inputs, f"b_{s}", d) for s in "qkvo"}
    q = g.affine(_exact(_rows(query, rows)), w["q"], b["q"])
    k = g.affine(_exact(key), w["k"], b["k"])
    v = g.affine(_exact(value), w["v"], b["v"])
    n_q, n_k = q.shape[0], key.shape[0]
    mask = None
    if inputs.get("mask") is not None:
        mask = parse_mask(_rows(np.asarray(inputs["mask"]), rows), (n_q, n_k))
    heads = attend_heads(g, q, k, v, h, mask)
    output = g.affine(heads.concat, w["o"], b["o"])
    w_all = heads.weights
    stacked = T(am.vcat([a.v for a in w_all]), am.vcat([a.e for a in w_all]) if g.track else None)
    nan_w = frozenset(i * n_q + r for i in range(h) for r in _nan_rows(heads.dead, g.masked_query))
    return {
        "output": Out(output, output.shape, _nan_rows(heads.dead, g.masked_query)),
        "weights": Out(stacked, (h, n_q, n_k), nan_w),
    }


def num_heads(options: Mapping[str, Any], d: int, op: str) -> int:
    h = options.get("num_heads")
    if isinstance(h, bool) or not isinstance(h, int) or h < 1 or d % h:
        raise InputError(f"{op}: num_heads={h!r} must be a positive divisor of d_model={d}")
    return h


@dataclass
class Heads:
    concat: T  # the heads' outputs side by side (n_q x d), before the output projection
    weights: list[T]  # each head's attention weights
    dead: list[int]  # queries with no key (the same in every head: one mask)


def attend_heads(g: Graph, q: T, k: T, v: T, h: int, mask: Mask | None) -> Heads:
    """Multi-head attention on projected q, k, v: head i is the i-th contiguous block of
    d / h features, scale 1/sqrt(d / h) (multi_head_attention; the transformer's blocks)."""
    d_head = q.shape[1] // h
    s = arb(d_head).rsqrt()
    outs, weights = [], []
    dead: list[int] = []
    for i in range(h):
        lo, hi = i * d_head, (i + 1) * d_head
        out, sm = g.attention(q.cols(lo, hi), k.cols(lo, hi), v.cols(lo, hi), s, mask)
        outs.append(out)
        weights.append(sm.a)
        dead = sm.dead
    concat = T(am.hcat([o.v for o in outs]), am.hcat([o.e for o in outs]) if g.track else None)
    return Heads(concat, weights, dead)


# -------------------------------------------------------------------- seed 003's classifier


def _params(inputs: Mapping[str, np.ndarray], e: int) -> dict[str, T]:
    d = e + 1
    out = {}
    for name in CLASSIFIER_PARAMS:
        key = f"params.{name}"
        arr = _f64(inputs, key, 1 if name.startswith("b_") else 2)
        out[name] = _exact(arr)
    shapes = {n: np.shape(inputs[f"params.{n}"]) for n in CLASSIFIER_PARAMS}
    c = shapes["w_f"][1] if len(shapes["w_f"]) == 2 else -1
    want = {
        "w_q": (d, d),
        "w_k": (d, d),
        "w_v": (d, d),
        "b_q": (d,),
        "b_k": (d,),
        "b_v": (d,),
        "w_f": (d, c),
        "b_f": (c,),
    }
    if c < 1 or any(shapes[n] != want[n] for n in CLASSIFIER_PARAMS):
        raise InputError(f"params must fit e = {e} (d = {d}); got {shapes}")
    return out


def with_positions(x_emb: np.ndarray) -> T:
    n = x_emb.shape[0]
    rows = [[*row, float(i)] for i, row in enumerate(x_emb.tolist())]
    return T(arb_mat(rows) if n else arb_mat(0, x_emb.shape[1] + 1))


@dataclass
class Forward:
    x: T
    q: T
    k: T
    v: T
    weights: Softmaxed
    z: T
    f: T
    pooled: T
    probs: Softmaxed


def classifier_forward_graph(g: Graph, x_emb: np.ndarray, p: dict[str, T]) -> Forward:
    x = with_positions(x_emb)
    d = x.shape[1]
    q = g.affine(x, p["w_q"], p["b_q"])
    k = g.affine(x, p["w_k"], p["b_k"])
    v = g.affine(x, p["w_v"], p["b_v"])
    scores = g.scores(q, k, arb(d).rsqrt(), None)
    weights = g.softmax_rows(scores, None, "nan")
    z = g.weighted(weights, v)
    f = g.affine(z, p["w_f"], p["b_f"])
    pooled = g.mean_rows(f)
    probs = g.softmax_rows(pooled, None, "nan")
    return Forward(x, q, k, v, weights, z, f, pooled, probs)


def classifier_forward(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x_emb = _f64(inputs, "x_emb", 2)
    fw = classifier_forward_graph(g, x_emb, _params(inputs, x_emb.shape[1]))
    c = fw.probs.a.shape[1]
    return {
        "x": Out(fw.x, fw.x.shape),
        "q": Out(fw.q, fw.q.shape),
        "k": Out(fw.k, fw.k.shape),
        "v": Out(fw.v, fw.v.shape),
        "weights": Out(fw.weights.a, fw.weights.a.shape),
        "z": Out(fw.z, fw.z.shape),
        "f": Out(fw.f, fw.f.shape),
        "pooled": Out(fw.pooled, (c,)),
        "probs": Out(fw.probs.a, (c,)),
    }


def _loss(g: Graph, fw: Forward, label: int) -> T:
    pooled = fw.pooled.v.entries()
    m = functools.reduce(lambda a, b: a.max(b), pooled)
    t = [x - m for x in pooled]
    value = sum((x.exp() for x in t), am.ZERO).log() - t[label]
    e = None
    if g.track:
        e = arb_mat([[bounds.loss(fw.probs.err.rho[0][label], value.abs_upper(), t[label].abs_upper())]])
    return T(arb_mat([[value]]), e)


@dataclass
class Step:
    loss: T
    probs: T
    grads: dict[str, T]
    params: dict[str, T]


def _sub(g: Graph, x: T, y: T) -> T:
    v = x.v - y.v
    return T(v, bounds.entry_sub(am.eabs(v), x.e, y.e) if g.track else None)


def backward(g: Graph, fw: Forward, d_pooled: T, p: dict[str, T]) -> dict[str, T]:
    """Every parameter's gradient from ``d_pooled`` = d loss / d pooled (the reference's formulas)."""
    n, d = fw.x.shape
    # mean pooling: every row of f gets d_pooled / n (one rounding: the division)
    dp_n = d_pooled.v / n
    e_row = None
    if g.track:
        e_row = bounds.U * am.eabs(dp_n) if d_pooled.e is None else d_pooled.e / n + bounds.U * am.eabs(dp_n)
    d_f = T(am.bcast_rows(dp_n, n), am.bcast_rows(e_row, n) if g.track else None)
    grads: dict[str, T] = {}
    grads["w_f"] = g.matmul(fw.z.transpose(), d_f)
    grads["b_f"] = g.colsum(d_f)
    d_z = g.matmul(d_f, p["w_f"].transpose())
    a = fw.weights.a
    d_a = g.matmul(d_z, fw.v.transpose())
    d_v = g.matmul(a.transpose(), d_z)
    # through the softmax (dS_ij = A_ij (dA_ij - sum_l dA_il A_il)) and the scaled scores
    d_q, d_k = g.attention_backward(fw.weights, d_a, fw.q, fw.k, arb(d).rsqrt())
    xt = fw.x.transpose()
    grads["w_q"] = g.matmul(xt, d_q)
    grads["b_q"] = g.colsum(d_q)
    grads["w_k"] = g.matmul(xt, d_k)
    # The b_k gradient is identically zero: b_k adds s q_i . b_k to every score of row i, which the
    # softmax ignores. Its value is set exactly (a ball around 0 certifies only below 2**-1075 and
    # would cost ~1,100 bits through a whole trajectory); its error bound is the computed one, since
    # implementations return rounding noise there.
    grads["b_k"] = T(am.zeros(1, d), g.colsum(d_k).e)
    grads["w_v"] = g.matmul(xt, d_v)
    grads["b_v"] = g.colsum(d_v)
    return grads


def classifier_step_graph(
    g: Graph, x_emb: np.ndarray, label: int, p: dict[str, T], lr: float, frozen: frozenset[str]
) -> Step:
    fw = classifier_forward_graph(g, x_emb, p)
    c = fw.probs.a.shape[1]
    loss = _loss(g, fw, label)
    # d loss / d pooled = probs - onehot(label)
    onehot = am.build(1, c, [arb(1) if j == label else am.ZERO for j in range(c)])
    d_pooled = _sub(g, fw.probs.a, T(onehot))
    # The backward is linear in d_pooled: its error (the forward's, carried by probs) reaches the
    # gradients exactly as sum_c G_c e_c, G_c the gradients for d_pooled = the unit vector c.
    # Propagating it entrywise instead (|.| through every product) would lose the gradients'
    # cancellations and overstate their bounds ~100x (measured on clf_step_longest_n42).
    grads = backward(g, fw, T(d_pooled.v), p)
    if g.track:
        # The backward's own error at the computed d_pooled + delta is at most its error at
        # d_pooled plus sum_c |delta_c| times its error at the unit vector c (every rule is linear
        # in its operands' magnitudes): the unit backwards are tracked too. That term matters when
        # delta dwarfs d_pooled (a saturated softmax: p - 1 ~ 1e-222, computed to ~u) and the
        # parameters carry errors in from earlier steps (bounds.py, "Trajectories").
        e_dp = d_pooled.e.entries()
        sub = g if any(p[n].e is not None for n in p) else Graph(track=False)
        for j in range(c):
            unit = am.build(1, c, [arb(1) if i == j else am.ZERO for i in range(c)])
            for name, gc in backward(sub, fw, T(unit), p).items():
                mag = am.eabs(gc.v) if gc.e is None or sub is not g else am.eabs(gc.v) + gc.e
                grads[name].e = grads[name].e + mag * e_dp[j]
    lr_arb = arb(lr)
    new: dict[str, T] = {}
    for name in CLASSIFIER_PARAMS:
        if name in frozen:
            new[name] = T(p[name].v, p[name].e)
            continue
        gr = grads[name]
        v = p[name].v - gr.v * lr_arb
        new[name] = T(v, bounds.sgd(p[name].abs, p[name].e, gr.abs, gr.e, lr_arb) if g.track else None)
    return Step(loss=loss, probs=fw.probs.a, grads=grads, params=new)


def _label(inputs: Mapping[str, np.ndarray], name: str, c: int) -> int:
    arr = np.asarray(inputs[name])
    value = arr.reshape(()).item() if arr.shape in ((), (1,)) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise InputError(f"{name} must be one 0-based class index; got {arr!r}")
    label = int(value)
    if not 0 <= label < c:
        raise InputError(f"{name} must be in [0, {c - 1}]; got {label}")
    return label


def _lr(options: Mapping[str, Any]) -> float:
    lr = options.get("lr")
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr < 0:
        raise InputError(f"lr must be a finite number >= 0; got {lr!r}")
    return float(lr)


def _frozen(options: Mapping[str, Any]) -> frozenset[str]:
    frozen = options.get("frozen") or ()
    if isinstance(frozen, str):
        frozen = (frozen,)
    bad = [f for f in frozen if f not in CLASSIFIER_PARAMS]
    if bad:
        raise InputError(f"frozen names unknown parameters {bad}; the parameters are {', '.join(CLASSIFIER_PARAMS)}")
    return frozenset(frozen)


def step_outputs(step: Step) -> dict[str, Out]:
    out = {"loss": Out(step.loss, ()), "probs": Out(step.probs, (step.probs.shape[1],))}
    for prefix, group in (("grads", step.grads), ("params", step.params)):
        for name in CLASSIFIER_PARAMS:
            t = group[name]
            out[f"{prefix}.{name}"] = Out(t, (t.shape[1],) if name.startswith("b_") else t.shape)
    return out


def classifier_step(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x_emb = _f64(inputs, "x_emb", 2)
    p = _params(inputs, x_emb.shape[1])
    label = _label(inputs, "label", p["w_f"].shape[1])
    step = classifier_step_graph(g, x_emb, label, p, _lr(options), _frozen(options))
    return step_outputs(step)


GRAPHS = {
    "softmax": softmax,
    "scaled_dot_product_attention": scaled_dot_product_attention,
    "self_attention": self_attention,
    "multi_head_attention": multi_head_attention,
    "classifier_forward": classifier_forward,
    "classifier_step": classifier_step,
}
# the operations whose graph takes ``rows`` (query rows, or the decoder block's token rows:
# truth/transformer.py registers it with register_graph(..., rows=True))
ROW_SUBSET_OPS = ["scaled_dot_product_attention", "self_attention", "multi_head_attention"]


def register_graph(op: str, fn: Callable[..., dict[str, Out]], rows: bool = False) -> None:
    """Add the graph of ``op`` (``fn(g, inputs, options)``): a family of operations keeps its graphs
    and bound rules in its own module (``truth/norms.py``), which registers them on import; the
    engine imports the family modules (``engine.FAMILIES``). ``rows``: ``fn`` takes a fourth
    argument, the rows to compute (``rows=`` of ``run_graph``)."""
    if op in GRAPHS:
        raise ValueError(f"an exact graph for {op!r} is registered twice")
    GRAPHS[op] = fn
    if rows:
        ROW_SUBSET_OPS.append(op)


def run_graph(
    op: str,
    inputs: Mapping[str, np.ndarray],
    options: Mapping[str, Any],
    *,
    prec: int,
    track: bool,
    masked_query: str = "zeros",
    rows: Sequence[int] | None = None,
) -> dict[str, Out]:
    """One pass of operation ``op`` at ``prec`` bits (the trajectory has its own driver)."""
    _check_policy(masked_query)
    if op not in GRAPHS:
        raise InputError(f"no exact graph for operation {op!r}")
    if rows is not None and op not in ROW_SUBSET_OPS:
        raise InputError(f"rows= applies to {', '.join(ROW_SUBSET_OPS)}, not {op}")
    old = ctx.prec
    ctx.prec = prec
    try:
        g = Graph(track=track, masked_query=masked_query)
        fn = GRAPHS[op]
        return fn(g, inputs, options, rows) if op in ROW_SUBSET_OPS else fn(g, inputs, options)
    finally:
        ctx.prec = old


# -------------------------------------------------------------------- trajectories


@dataclass
class Trajectory:
    """The value pass of ``classifier_train``: epoch losses, final parameters, and every step's
    inputs (sentence, label, parameters rounded to ``BOUND_PREC`` bits) for the bound pass."""

    epoch_losses: list[arb]
    params: dict[str, arb_mat]
    steps: list[tuple[int, dict[str, arb_mat]]]  # (sentence index, parameters before the step)
    sentences: list[tuple[np.ndarray, int]]
    counts: int  # sentences trained per epoch


def _dataset(inputs: Mapping[str, np.ndarray], c: int) -> list[tuple[np.ndarray, int]]:
    tokens = _f64(inputs, "tokens", 2)
    lengths = np.asarray(inputs["lengths"])
    labels = np.asarray(inputs["labels"])
    if lengths.ndim != 1 or labels.shape != lengths.shape or lengths.size == 0:
        raise InputError(f"lengths and labels must be vectors of one length; got {lengths.shape}, {labels.shape}")
    counts = [int(v) for v in lengths.tolist()]
    if any(v < 0 for v in counts) or sum(counts) != tokens.shape[0]:
        raise InputError(
            f"lengths must be >= 0 and sum to the token rows; got sum {sum(counts)}, tokens {tokens.shape}"
        )
    out, start = [], 0
    for i, n in enumerate(counts):
        out.append((tokens[start : start + n], _label({"l": labels[i]}, "l", c)))
        start += n
    return out


def trajectory_values(
    inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], prec: int, taper: float = 0.0
) -> Trajectory:
    """The trajectory in balls; step t of T runs at ``prec + taper * T * (1 - (t/T)**2)`` bits.

    Why taper: naive balls lose bits at every step (the wrapping effect: a ball's radius grows by
    a factor each step), so a rounding made early is amplified the most, and step t needs only
    the bits it will lose before the end. The loss rate grows along a trajectory (measured: ~0.1
    bit a step in the first epochs, up to 2.6 late in the lr = 0.05 one), which the quadratic
    profile follows: it starts at ``taper`` bits a step on average and ends losing ``2 taper``.
    Average precision: 2/3 of a constant profile's.
    """
    tokens = _f64(inputs, "tokens", 2)
    p = _params(inputs, tokens.shape[1])
    sentences = _dataset(inputs, p["w_f"].shape[1])
    trained = [i for i, (x, _) in enumerate(sentences) if x.shape[0] > 0]
    epochs = options.get("epochs")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
        raise InputError(f"epochs must be an integer >= 0; got {epochs!r}")
    if epochs and not trained:
        raise InputError("the dataset has no sentence with at least one token")
    lr, frozen = _lr(options), _frozen(options)
    old = ctx.prec
    try:
        ctx.prec = prec
        g = Graph(track=False)
        losses: list[arb] = []
        steps: list[tuple[int, dict[str, arb_mat]]] = []
        n_steps = epochs * len(trained)
        for _ in range(epochs):
            total = am.ZERO
            for i in trained:
                ctx.prec = BOUND_PREC
                steps.append((i, {n: am.emap(t.v, lambda x: (+x.mid()).mid()) for n, t in p.items()}))
                done = (len(steps) - 1) / n_steps
                ctx.prec = prec + math.ceil(taper * n_steps * (1 - done * done))
                x_emb, label = sentences[i]
                step = classifier_step_graph(g, x_emb, label, p, lr, frozen)
                total = total + step.loss.v.entries()[0]
                p = step.params
            ctx.prec = prec
            losses.append(total / len(trained))
    finally:
        ctx.prec = old
    return Trajectory(losses, {n: t.v for n, t in p.items()}, steps, sentences, len(trained))


def _sign(*index: int) -> int:
    """A fixed pseudo-random sign per parameter element (a pattern no direction of the dynamics
    is likely to be orthogonal to, and the same on every machine)."""
    h = 0
    for i in index:
        h = (h * 1_000_003 + i + 1) % 2_147_483_647
    return 1 if (h * 48_271) % 2_147_483_647 % 2 else -1


PROBE_BITS = 40  # the probe's perturbation: 2^-40 of each parameter matrix's largest entry


def trajectory_amplification(
    inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], traj: Trajectory, prec: int, taper: float
) -> arb:
    """``max(1, A)``, A = max |final(p + delta) - final(p)| / max |delta| for the exact trajectory:
    how much the exact dynamics amplify a perturbation of the initial parameters (delta: signs
    ``_sign``, 2^-PROBE_BITS of each matrix's largest entry, or of 1, rounded to float64; small
    enough for the response to be linear, large enough to stand far above the balls' radii)."""
    moved = dict(inputs)
    delta = am.ZERO
    for name in CLASSIFIER_PARAMS:
        key = f"params.{name}"
        arr = np.asarray(inputs[key], dtype=np.float64)
        flat = [float(x) for x in arr.reshape(-1).tolist()]
        step = math.ldexp(max([abs(x) for x in flat] + [1.0]), -PROBE_BITS)
        out = [x + _sign(CLASSIFIER_PARAMS.index(name), i) * step for i, x in enumerate(flat)]
        for x, y in zip(flat, out, strict=True):
            delta = delta.max((arb(y) - arb(x)).abs_upper())  # exact: y - x is a double (Sterbenz)
        moved[key] = np.array(out, dtype=np.float64).reshape(arr.shape)
    other = trajectory_values(moved, options, prec, taper)
    old = ctx.prec
    ctx.prec = BOUND_PREC
    try:
        worst = am.ZERO
        for name in CLASSIFIER_PARAMS:
            for x, y in zip(traj.params[name].entries(), other.params[name].entries(), strict=True):
                worst = worst.max((x - y).abs_upper())
        return (worst / delta).max(arb(1))
    finally:
        ctx.prec = old


def trajectory_bounds(
    traj: Trajectory, options: Mapping[str, Any], amplification: Callable[[], arb] | None = None
) -> tuple[arb_mat, dict[str, arb_mat]]:
    """Error bounds of the epoch losses (1 x epochs) and final parameters (bounds.py, "Trajectories").

    The carried bound (``_carried_bounds``) where it stays first order. A trajectory whose
    worst-case amplification compounds past that gets the summed bound times the amplification
    the exact dynamics show (``amplification()``, see ``trajectory_amplification``); without
    ``amplification`` it raises ``bounds.BoundError``.
    """
    try:
        return _carried_bounds(traj, options)
    except bounds.BoundError:
        if amplification is None:
            raise
        return _summed_bounds(traj, options, amplification())


def _epoch_bounds(traj: Trajectory, loss_err: list[arb], loss_abs: list[arb]) -> arb_mat:
    """An epoch loss is the mean of its steps' losses: their bounds, plus the mean's own rounding."""
    epoch_err = []
    k = traj.counts
    for ep in range(len(traj.epoch_losses)):
        errs, mags = loss_err[ep * k : (ep + 1) * k], loss_abs[ep * k : (ep + 1) * k]
        epoch_err.append((sum(errs, am.ZERO) + bounds.gamma(k) * sum(mags, am.ZERO)) / k)
    return am.build(1, len(epoch_err), epoch_err) if epoch_err else arb_mat(1, 0)


def _carried_bounds(traj: Trajectory, options: Mapping[str, Any]) -> tuple[arb_mat, dict[str, arb_mat]]:
    """Each step runs the step's graph with its parameters carrying the error bound accumulated so
    far (``T(params, acc)``): the forward, the loss, the backward and the update propagate that
    input error as they propagate any operand's, and add the step's own roundings. The bound after
    the step is the update's (``bounds.sgd``), which contains the bound before it: an error the
    dynamics amplify is amplified in the bound too. Raises ``bounds.BoundError`` where a logit's
    carried error leaves the first-order regime."""
    lr, frozen = _lr(options), _frozen(options)
    old = ctx.prec
    ctx.prec = BOUND_PREC
    try:
        g = Graph(track=True)
        acc: dict[str, arb_mat | None] = {n: None for n in traj.params}  # None: exact (the inputs)
        loss_err: list[arb] = []
        loss_abs: list[arb] = []
        for i, params in traj.steps:
            x_emb, label = traj.sentences[i]
            step = classifier_step_graph(g, x_emb, label, {n: T(m, acc[n]) for n, m in params.items()}, lr, frozen)
            loss_err.append(step.loss.e.entries()[0])
            loss_abs.append(step.loss.abs.entries()[0])
            acc = {n: step.params[n].e for n in CLASSIFIER_PARAMS}
        final = {n: am.zeros(*am.shape(m)) if acc[n] is None else acc[n] for n, m in traj.params.items()}
        return _epoch_bounds(traj, loss_err, loss_abs), final
    finally:
        ctx.prec = old


def _summed_bounds(
    traj: Trajectory, options: Mapping[str, Any], amplification: arb
) -> tuple[arb_mat, dict[str, arb_mat]]:
    """``amplification`` times the sum over steps of each step's own rounding bound, every step
    from exact parameters; a step's loss bound adds ``|g| . D`` (the first-order effect of that
    amplified sum ``D`` so far). Not rigorous: it takes the amplification the exact dynamics show
    in one direction for the amplification of every step's error."""
    lr, frozen = _lr(options), _frozen(options)
    old = ctx.prec
    ctx.prec = BOUND_PREC
    try:
        g = Graph(track=True)
        acc = {n: am.zeros(*am.shape(m)) for n, m in traj.params.items()}
        loss_err: list[arb] = []
        loss_abs: list[arb] = []
        for i, params in traj.steps:
            x_emb, label = traj.sentences[i]
            step = classifier_step_graph(g, x_emb, label, {n: T(m) for n, m in params.items()}, lr, frozen)
            carried = (
                sum(
                    (
                        a * b
                        for n in CLASSIFIER_PARAMS
                        for a, b in zip(step.grads[n].abs.entries(), acc[n].entries(), strict=True)
                    ),
                    am.ZERO,
                )
                * amplification
            )
            loss_err.append(step.loss.e.entries()[0] + carried)
            loss_abs.append(step.loss.abs.entries()[0])
            for n in CLASSIFIER_PARAMS:
                if n not in frozen:
                    acc[n] = acc[n] + step.params[n].e
        return _epoch_bounds(traj, loss_err, loss_abs), {n: m * amplification for n, m in acc.items()}
    finally:
        ctx.prec = old
