"""Error bounds for every row of a large attention call, in float64, certified upward (the scale tier).

The exact truth (``attention_ports.truth``, arb) costs O(L d) per query row in Python, so at
L = 16384 it is computed for sampled rows only. To compare the *other* rows between
implementations, the scale tier needs each element's bound anyway: this module evaluates the same
rules as ``attention_ports.bounds`` (its constants, its graph: ``attention_ports.exact``'s
``scores``, ``softmax_rows``, ``matmul`` and ``affine``) in float64, block by block of query rows,
in O(L^2 d) time and O(block x L) memory, and inflates the result so that it is never below the
bound the arb analysis would give for that element. Why that holds:

* **magnitudes**: the rules take exact magnitudes (|q|, the weights A, the shifted scores |t|).
  Here they come from a float64 evaluation of the same operation (this module's own, independent of
  the implementations under test), which is a correct float64 implementation, so the analysis
  itself bounds its distance to the exact values: |x| <= |x^| + SAFETY e_x for projections and
  outputs, A <= A^ / (1 - rho) <= A^ (1 + 2^-19) (rho <= 2^-20 is checked, as ``bounds`` does),
  |t| <= |t^| (1 + 2u) + 2 max_row e_S. Every rule is monotone in these, so upper bounds in give
  an upper bound out.
* **rounding of the bound's own evaluation**: every term is non-negative, so each float64 sum or
  product of them (BLAS included, in any order) is within a factor (1 + gamma(n)) of its exact
  value, n <= L + d; a few dozen such factors at L <= 2^20 stay below 1 + 2^-30, by which the
  result is multiplied.

The stored form is the fixtures': ``SAFETY * B + RESOLUTION * |expected| + UNDERFLOW``, rounded up
to 8 significant bits. On sampled rows it is therefore at least the arb bound of
``truth.compute(rows=...)`` and at most 2^-7 above it: tests/test_scale.py checks both, for every
operation.

Supported: scaled_dot_product_attention, self_attention and multi_head_attention with exact
float64 inputs, boolean or 0/-inf masks, the "zeros" convention for a query with no key.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from attention_ports import bounds

U = 2.0**-53
C_EXP, C_SHIFT, C_DIV = bounds.C_EXP, bounds.C_SHIFT, bounds.C_DIV
SAFETY = float(bounds.SAFETY)
RESOLUTION = 2.0**-46
UNDERFLOW = 2.0**-1000
MAX_FIRST_ORDER = 2.0**-20
NEGLIGIBLE_LOGIT = bounds.NEGLIGIBLE_LOGIT
A_UP = 1 + 2.0**-19  # computed weights -> an upper bound of the exact ones (rho <= 2^-20)
INFLATE = 1 + 2.0**-30  # the float64 evaluation of non-negative terms
BLOCK_ELEMENTS = 1 << 24  # query rows x keys per block (128 MiB per float64 temporary)


class ScaleBoundError(ValueError):
    """The first-order analysis does not apply (as bounds.BoundError), naming the operation."""


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


@dataclass
class Est:
    """A float64 estimate of an exact quantity and its error bound ``e`` (the analysis's B)."""

    value: np.ndarray
    e: np.ndarray | None  # None: exact (an input)

    def abs_up(self) -> np.ndarray:
        """An upper bound of the exact quantity's magnitude."""
        a = np.abs(self.value)
        return a if self.e is None else a + SAFETY * self.e

    def stored(self) -> np.ndarray:
        """The stored-form bound, certified upward and rounded up to the fixtures' 8 significant
        bits, so that on any row it is at least the bound ``truth.compute`` gives that row."""
        e = self.e if self.e is not None else np.zeros_like(self.value)
        return round_up((SAFETY * e + RESOLUTION * self.abs_up() + UNDERFLOW) * INFLATE)


def round_up(x: np.ndarray, bits: int = bounds.BOUND_SIG_BITS) -> np.ndarray:
    """Each positive element rounded up to ``bits`` significant bits (rounding.round_up, vectorised)."""
    m, e = np.frexp(x)  # x = m 2^e, 0.5 <= m < 1
    return np.ldexp(np.ceil(np.ldexp(m, bits)), e - bits)


def _plus(a: np.ndarray, e: np.ndarray | None) -> np.ndarray:
    return a if e is None else a + e


def affine(x: Est, w: np.ndarray, b: np.ndarray | None) -> Est:
    """``x W (+ b)`` with exact weights: bounds.affine with e_W = e_b = None."""
    k = x.value.shape[1]
    value = x.value @ w
    x_abs, w_abs = x.abs_up(), np.abs(w)
    base = _plus(x_abs, x.e) @ w_abs
    if b is not None:
        value = value + b
        base = base + np.abs(b)
    e = gamma(k + (b is not None)) * base
    if x.e is not None:
        e = e + x.e @ w_abs
    return Est(value, e)


def _blocks(n_q: int, n_k: int) -> Iterator[slice]:
    step = max(1, BLOCK_ELEMENTS // max(n_k, 1))
    for start in range(0, n_q, step):
        yield slice(start, min(n_q, start + step))


def attention(
    q: Est, k: Est, v: Est, scale: float, keep: np.ndarray | None, where: str, rows: list[int] | None = None
) -> tuple[Est, Est | None]:
    """``softmax(scale q k^T + mask) v`` with its error bound (exact.Graph.attention's rules),
    block by block of query rows; a query with no key gets 0 (the "zeros" convention). With
    ``rows``, also the weights of those query rows (the rest are never kept)."""
    n_q, d_k = q.value.shape
    n_k = k.value.shape[0]
    s_up = abs(scale) * (1 + 4 * U)  # the scale as a ball's upper end (1/sqrt(d) is not a double)
    g_scores, g_out = gamma(d_k + bounds.SCORE_EXTRA), gamma(n_k)
    k_up = _plus(k.abs_up(), k.e)  # |k| + e_k
    v_abs = v.abs_up()
    v_up = _plus(v_abs, v.e)
    q_abs = q.abs_up()
    out = np.empty((n_q, v.value.shape[1]))
    err = np.empty_like(out)
    wanted = sorted(rows) if rows is not None else []
    w_rows, w_err = np.empty((len(wanted), n_k)), np.empty((len(wanted), n_k))
    for rows in _blocks(n_q, n_k):
        qb = q.value[rows]
        qb_abs = q_abs[rows]
        eq = None if q.e is None else q.e[rows]
        # scores and their error: bounds.matmul(|q|, e_q, |k|^T, e_k^T, d_k, SCORE_EXTRA) * |s|
        s_hat = (qb @ k.value.T) * scale
        e_s = g_scores * (_plus(qb_abs, eq) @ k_up.T)
        if k.e is not None:
            e_s += qb_abs @ k.e.T
        if eq is not None:
            e_s += eq @ k_up.T
        e_s *= s_up
        kept = np.ones_like(s_hat, dtype=bool) if keep is None else keep[rows]
        s_hat[~kept] = -np.inf
        alive = kept.any(axis=1)
        peak = np.where(alive, s_hat.max(axis=1, initial=-np.inf), 0.0)[:, None]
        t_hat = s_hat - peak  # -inf on removed keys
        with np.errstate(invalid="ignore", divide="ignore"):
            a_hat = np.exp(t_hat)
            total = a_hat.sum(axis=1, keepdims=True)
            a_hat = np.where(alive[:, None], a_hat / total, 0.0)
        del s_hat
        e_s_max = np.where(kept, e_s, 0.0).max(axis=1, keepdims=True)
        t_up = np.where(kept, np.abs(t_hat) * (1 + 2 * U) + 2 * e_s_max, 0.0)
        del t_hat
        a_up = a_hat * A_UP
        # bounds.softmax_row: rel, common, rho, e_A = A rho
        rel = np.where(kept, e_s + C_SHIFT * U * t_up + C_EXP * U, 0.0)
        del e_s
        n = kept.sum(axis=1)
        common = (a_up * rel).sum(axis=1) + n * U / (1 - n * U) + C_DIV * U  # + gamma(n)
        rho = np.where(kept, rel + common[:, None], 0.0)
        del rel
        checked = kept & (t_up - rho <= NEGLIGIBLE_LOGIT)
        if checked.any() and rho[checked].max() >= MAX_FIRST_ORDER:
            raise ScaleBoundError(f"{where}: a softmax weight's relative error bound exceeds 2^-20")
        e_a = a_up * rho
        del rho, t_up
        picked = [i for i, r in enumerate(wanted) if rows.start <= r < rows.stop]
        if picked:
            local = [wanted[i] - rows.start for i in picked]
            w_rows[picked] = a_hat[local]
            w_err[picked] = e_a[local]
        # output: bounds.matmul(A, e_A, |v|, e_v, n_k)
        out[rows] = a_hat @ v.value
        e_o = g_out * ((a_up + e_a) @ v_up) + e_a @ v_up
        if v.e is not None:
            e_o += a_up @ v.e
        err[rows] = np.where(alive[:, None], e_o, 0.0)
        out[rows] = np.where(alive[:, None], out[rows], 0.0)
    weights = Est(w_rows, w_err) if rows is not None else None
    return Est(out, err), weights


def _keep(mask: np.ndarray | None) -> np.ndarray | None:
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype == bool:
        return mask
    if np.isnan(mask).any() or np.isposinf(mask).any() or not np.all((mask == 0) | np.isneginf(mask)):
        raise ValueError("the scale tier's bounds take boolean or 0/-inf masks only")
    return mask == 0


@dataclass
class Bounds:
    """``full``: {output: stored-form bound of every element} for the O(L d) outputs; ``weights``:
    this module's own weights on the requested query rows and their stored-form bounds."""

    full: dict[str, np.ndarray]
    weights: tuple[np.ndarray, np.ndarray] | None = None


def compute(
    op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], rows: list[int] | None = None
) -> Bounds:
    """The bounds of ``op``'s O(L d) outputs, every row: ``output`` (and ``q``, ``k``, ``v`` for
    self-attention); with ``rows``, also the weights on those query rows (for multi-head
    attention of shape (h, len(rows), n_k))."""
    keep = _keep(inputs.get("mask"))
    if op == "scaled_dot_product_attention":
        q, k, v = (Est(np.asarray(inputs[n], dtype=np.float64), None) for n in "qkv")
        scale = options.get("scale")
        scale = 1 / math.sqrt(q.value.shape[1]) if scale is None else float(scale)
        out, w = attention(q, k, v, scale, keep, op, rows)
        return Bounds({"output": out.stored()}, _pair(w))
    if op == "self_attention":
        x = Est(np.asarray(inputs["x"], dtype=np.float64), None)
        q, k, v = (affine(x, inputs[f"w_{n}"], inputs.get(f"b_{n}")) for n in "qkv")
        scale = options.get("scale")
        scale = 1 / math.sqrt(q.value.shape[1]) if scale is None else float(scale)
        out, w = attention(q, k, v, scale, keep, op, rows)
        return Bounds({"q": q.stored(), "k": k.stored(), "v": v.stored(), "output": out.stored()}, _pair(w))
    if op == "multi_head_attention":
        h = int(options["num_heads"])
        q, k, v = (
            affine(Est(np.asarray(inputs[src], dtype=np.float64), None), inputs[f"w_{n}"], inputs.get(f"b_{n}"))
            for n, src in (("q", "query"), ("k", "key"), ("v", "value"))
        )
        d = q.value.shape[1]
        d_head = d // h
        heads, weights = [], []
        for i in range(h):
            cols = slice(i * d_head, (i + 1) * d_head)
            part = [Est(t.value[:, cols], None if t.e is None else t.e[:, cols]) for t in (q, k, v)]
            out, w = attention(*part, 1 / math.sqrt(d_head), keep, f"{op} head {i}", rows)
            heads.append(out)
            weights.append(_pair(w))
        concat = Est(np.hstack([o.value for o in heads]), np.hstack([o.e for o in heads]))
        output = affine(concat, inputs["w_o"], inputs.get("b_o")).stored()
        stacked = None
        if rows is not None:
            stacked = (np.stack([w[0] for w in weights]), np.stack([w[1] for w in weights]))
        return Bounds({"output": output}, stacked)
    raise ValueError(f"the scale tier's bounds cover attention operations, not {op!r}")


def _pair(w: Est | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(weights, stored bound): |A| <= A^ (1 + 2^-19) replaces abs_up's correction."""
    if w is None:
        return None
    assert w.e is not None
    return w.value, round_up((SAFETY * w.e + RESOLUTION * w.value * A_UP + UNDERFLOW) * INFLATE)
