"""Error bounds for every row of a large attention call, in float64, certified upward (the scale tier).

The exact truth (``attention_ports.truth.engine``, arb) costs O(L d) per query row in Python, so at
L = 16384 it is computed for sampled rows only. To compare the *other* rows between
implementations, the scale tier needs each element's bound anyway: this module evaluates the same
rules as ``attention_ports.truth.bounds`` (its constants, its graph: ``attention_ports.truth.exact``'s
``scores``, ``softmax_rows``, ``matmul`` and ``affine``) in float64, block by block of query rows,
in O(L^2 d) time and O(block x L) memory, and inflates the result so that it is never below the
bound the arb analysis would give for that element. Why that holds:

* **magnitudes**: the rules take exact magnitudes (|q|, the weights A, the shifted scores |t|).
  Here they come from a float64 evaluation of the same operation (this module's own, independent of
  the implementations under test), which is a correct float64 implementation, so the analysis
  itself bounds its distance to the exact values: |x| <= |x^| + SAFETY e_x for projections and
  outputs, A <= A^ / (1 - rho) <= A^ (1 + 2^-17) (rho < 2^-18 follows from the 2^-20 check ``bounds`` makes),
  |t| <= |t^| (1 + 2u) + 2 max_row e_S. Every rule is monotone in these, so upper bounds in give
  an upper bound out.
* **rounding of the bound's own evaluation**: every term is non-negative, so each float64 sum or
  product of them (BLAS included, in any order) is within a factor (1 + gamma(n)) of its exact
  value, n <= L + d; a few dozen such factors at L <= 2^20 stay below 1 + 2^-30, by which the
  result is multiplied.

The stored form is the fixtures': ``SAFETY * B + RESOLUTION * |expected| + UNDERFLOW``, rounded up
to 8 significant bits. On sampled rows it is therefore at least the arb bound of
``truth.compute(rows=...)``; where the output's softmax spread is evaluated term by term (blocks
of at most ``EXACT_SPREAD`` terms) it is at most 2^-7 above it, and beyond that the spread is
bounded through centres (:func:`_spread`), a little looser: tests/tiers/test_scale.py checks all three,
for every operation.

Supported: scaled_dot_product_attention, self_attention and multi_head_attention with exact
float64 inputs, boolean or 0/-inf masks, the "zeros" convention for a query with no key.

**At a precision tier** (issue 17): ``compute(..., fmt=...)`` evaluates the rules at the format's
constants (:class:`Rules`, from ``spec.precision.Format``: u, C_EXP, resolution, underflow, the
first-order guard, the negligible logit), as ``truth.precision.rules`` does for the arb analysis.
Two roundoffs are then apart: the rules' (the implementation's arithmetic: ``rules.u``) and this
module's own float64 evaluation (``U``: the magnitudes' and the bound's own rounding, ``INFLATE``).
The magnitude argument above still holds: the float64 estimates' errors are within float64's
bounds, which are within the format's (every term is linear or convex in u), and float64's guard
follows from the format's (its logit error bound is at most u64/u times the format's, 2^-37 for
float32's 2^-8), so ``A_UP`` and the 2^-17 of the log-sum-exp stand. float64's bounds are unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from attention_ports.spec.precision import DEFAULT, FORMATS, Format
from attention_ports.truth import bounds

U = 2.0**-53  # this module's own float64 evaluation (and float64's rules: Rules.of below)
C_EXP, C_SHIFT, C_DIV = bounds.C_EXP, bounds.C_SHIFT, bounds.C_DIV
C_IN, C_LSE = bounds.C_IN, bounds.C_LSE
SAFETY = float(bounds.SAFETY)
RESOLUTION = 2.0**-46
UNDERFLOW = 2.0**-1000
MAX_FIRST_ORDER = 2.0**-20
NEGLIGIBLE_LOGIT = bounds.NEGLIGIBLE_LOGIT
# computed weights -> bounds of the exact ones: a correct weight's relative error is at most
# 2 M + R + (1 + r) eps < 3 x 2^-20 < 2^-18 when M + eps < 2^-20 (checked, as bounds does)
A_UP = 1 + 2.0**-17
A_LO = 1 - 2.0**-17
INFLATE = 1 + 2.0**-30  # the float64 evaluation of non-negative terms
EXACT_SPREAD = 1 << 22  # terms of the output's softmax spread evaluated one by one (_spread)
CENTRES = 8  # centres per column for the bounded spread beyond that (each costs one output product)
BLOCK_ELEMENTS = 1 << 24  # query rows x keys per block (128 MiB per float64 temporary)


class ScaleBoundError(ValueError):
    """The first-order analysis does not apply (as bounds.BoundError), naming the operation."""


@dataclass(frozen=True)
class Rules:
    """The analysis's parameters for one format (float64's: the module constants above)."""

    u: float
    c_exp: int
    resolution: float
    underflow: float
    max_first_order: float
    negligible_logit: int
    guard: str  # the guard as the message names it, "2^-20"

    @classmethod
    def of(cls, fmt: Format) -> Rules:
        return cls(
            fmt.u,
            fmt.c_exp,
            2.0**fmt.resolution_exp,
            2.0**fmt.underflow_exp,
            2.0**fmt.max_first_order_exp,
            fmt.negligible_logit,
            f"2^{fmt.max_first_order_exp}",
        )


FLOAT64 = Rules(U, C_EXP, RESOLUTION, UNDERFLOW, MAX_FIRST_ORDER, NEGLIGIBLE_LOGIT, "2^-20")
assert FLOAT64 == Rules.of(FORMATS[DEFAULT])  # the module constants are float64's row of the table


def gamma(n: int, u: float = U) -> float:
    return n * u / (1 - n * u)


@dataclass
class Est:
    """A float64 estimate of an exact quantity and its error bound ``e`` (the analysis's B)."""

    value: np.ndarray
    e: np.ndarray | None  # None: exact (an input)

    def abs_up(self) -> np.ndarray:
        """An upper bound of the exact quantity's magnitude."""
        a = np.abs(self.value)
        return a if self.e is None else a + SAFETY * self.e

    def stored(self, rules: Rules = FLOAT64) -> np.ndarray:
        """The stored-form bound, certified upward and rounded up to the fixtures' 8 significant
        bits, so that on any row it is at least the bound ``truth.compute`` gives that row."""
        e = self.e if self.e is not None else np.zeros_like(self.value)
        return round_up((SAFETY * e + rules.resolution * self.abs_up() + rules.underflow) * INFLATE)


def round_up(x: np.ndarray, bits: int = bounds.BOUND_SIG_BITS) -> np.ndarray:
    """Each positive element rounded up to ``bits`` significant bits (rounding.round_up, vectorised)."""
    m, e = np.frexp(x)  # x = m 2^e, 0.5 <= m < 1
    return np.ldexp(np.ceil(np.ldexp(m, bits)), e - bits)


def _plus(a: np.ndarray, e: np.ndarray | None) -> np.ndarray:
    return a if e is None else a + e


def affine(x: Est, w: np.ndarray, b: np.ndarray | None, rules: Rules = FLOAT64) -> Est:
    """``x W (+ b)`` with exact weights: bounds.affine with e_W = e_b = None."""
    k = x.value.shape[1]
    value = x.value @ w
    x_abs, w_abs = x.abs_up(), np.abs(w)
    base = _plus(x_abs, x.e) @ w_abs
    if b is not None:
        value = value + b
        base = base + np.abs(b)
    e = gamma(k + (b is not None), rules.u) * base
    if x.e is not None:
        e = e + x.e @ w_abs
    return Est(value, e)


def _blocks(n_q: int, n_k: int) -> Iterator[slice]:
    step = max(1, BLOCK_ELEMENTS // max(n_k, 1))
    for start in range(0, n_q, step):
        yield slice(start, min(n_q, start + step))


def attention(
    q: Est,
    k: Est,
    v: Est,
    scale: float,
    keep: np.ndarray | None,
    where: str,
    rows: list[int] | None = None,
    rules: Rules = FLOAT64,
) -> tuple[Est, Est | None]:
    """``softmax(scale q k^T + mask) v`` with its error bound (exact.Graph.attention's rules:
    bounds.matmul and exact.Graph.scores, bounds.softmax_row, bounds.weighted_values), block by
    block of query rows; a query with no key gets 0 (the "zeros" convention). With ``rows``, also
    the weights of those query rows (the rest are never kept). ``rules``: the format's parameters
    (``u`` the implementation's roundoff; ``U`` stays this evaluation's own).

    One rule is evaluated in a bounded form on large blocks: see :func:`_spread`."""
    u, c_exp = rules.u, rules.c_exp
    n_q, d_k = q.value.shape
    n_k = k.value.shape[0]
    s_up = abs(scale) * (1 + 4 * U)  # the scale as a ball's upper end (1/sqrt(d) is not a double)
    g_scores, g_out = gamma(d_k + bounds.SCORE_EXTRA, u), gamma(n_k, u)
    k_up = _plus(k.abs_up(), k.e)  # |k| + e_k
    # exact.Graph.scores: q's error meets |k - c| (c: each column's midrange; a part common to a
    # row's logits cancels in the softmax); the exact k's distance to this c is at most |k^ - c| +
    # SAFETY e_k, and the arb engine's own c (from the exact k) is within SAFETY max e_k of this one.
    centre = (k.value.max(axis=0) + k.value.min(axis=0)) / 2
    k_spread = np.abs(k.value - centre) * (1 + 2 * U)
    if k.e is not None:
        k_spread = k_spread + SAFETY * k.e + 2 * SAFETY * k.e.max(axis=0)
    k_spread_up = _plus(k_spread, k.e)
    v_abs = v.abs_up()
    v_up = _plus(v_abs, v.e)
    centred = Centred.of(v) if n_q * n_k * v.value.shape[1] > EXACT_SPREAD else None
    q_abs = q.abs_up()
    out = np.empty((n_q, v.value.shape[1]))
    err = np.empty_like(out)
    wanted = sorted(rows) if rows is not None else []
    w_rows, w_err = np.empty((len(wanted), n_k)), np.empty((len(wanted), n_k))
    for rows in _blocks(n_q, n_k):
        qb = q.value[rows]
        qb_abs = q_abs[rows]
        eq = None if q.e is None else q.e[rows]
        # scores and their error: bounds.matmul(|q|, None, |k|^T, e_k^T, d_k, SCORE_EXTRA), plus
        # q's error (exact.Graph.scores), times |s|
        s_hat = (qb @ k.value.T) * scale
        e_s = g_scores * (qb_abs @ k_up.T)
        if k.e is not None:
            e_s += qb_abs @ k.e.T
        if eq is not None:
            e_s += g_scores * (eq @ k_up.T) + eq @ k_spread_up.T
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
        e_s_max = np.where(kept, e_s, 0.0).max(axis=1, keepdims=True)
        t_up = np.where(kept, np.abs(t_hat) * (1 + 2 * U) + 2 * e_s_max, 0.0)
        a_up, a_lo = a_hat * A_UP, a_hat * A_LO
        # bounds.softmax_row: eta, eps, the second-order R, norm and err. The exact scores' sizes:
        # |S| <= |S^| + SAFETY e_S (S^ is a correct evaluation); the exact log-sum-exp: the peak is
        # within max e_S of the exact maximum, and log(total^) within 2^-17 of log(total) (total^'s
        # relative error is below 2 (M + eps) < 2^-19 once the 2^-20 check below passes)
        s_up = np.where(kept, np.abs(s_hat) * (1 + 2 * U) + SAFETY * e_s, 0.0)
        eta = np.where(kept, e_s + C_SHIFT * u * t_up + C_IN * u * s_up + c_exp * u, 0.0)
        del e_s, s_up, s_hat, t_hat
        n = kept.sum(axis=1)
        with np.errstate(divide="ignore"):
            lse = np.where(alive[:, None], np.abs(peak + np.log(total)), 0.0)
        lse_up = (lse + SAFETY * e_s_max + 2.0**-17) * (1 + 4 * U)
        eps = (gamma_vec(n, u) + C_DIV * u + 2 * c_exp * u + (c_exp + 1) * u * np.log(np.maximum(n, 1)))[:, None]
        eps = eps + C_LSE * u * lse_up
        live = kept & ~(t_up - eta > rules.negligible_logit)
        big = np.where(live, eta, 0.0).max(axis=1, keepdims=True)
        if np.any(big + eps >= rules.max_first_order):
            raise ScaleBoundError(f"{where}: a softmax row's logit error bound exceeds {rules.guard}")
        if rules != FLOAT64:
            # This evaluation's own float64 weights and log-sum-exp (A_UP, the 2^-17 above) rest on
            # float64's guard, over float64's live logits: its terms are at most U/u times these
            # (linear or convex in u), so this bounds them.
            ratio = U / u
            live64 = kept & ~(t_up - eta * ratio > NEGLIGIBLE_LOGIT)
            big64 = np.where(live64, eta, 0.0).max(axis=1, keepdims=True) * ratio
            if np.any(big64 + eps * ratio >= MAX_FIRST_ORDER):
                raise ScaleBoundError(f"{where}: the float64 evaluation's own logit error bound exceeds 2^-20")
        second = 9 * big * big
        a_eta = a_up * eta
        mean = a_eta.sum(axis=1, keepdims=True)
        # |1 - A_j| eta_j + sum_{l != j} A_l eta_l + R (the subtraction's own rounding: u mean)
        r = np.maximum(1 - a_lo, 0.0) * eta + np.maximum(mean - a_eta, 0.0) + u * mean + second
        norm = a_up * r
        e_a = np.where(kept, a_up * (r + (1 + r) * eps), 0.0)
        del t_up, r
        picked = [i for i, r in enumerate(wanted) if rows.start <= r < rows.stop]
        if picked:
            local = [wanted[i] - rows.start for i in picked]
            w_rows[picked] = a_hat[local]
            w_err[picked] = e_a[local]
        # output: bounds.weighted_values
        y_hat = a_hat @ v.value
        a_all = a_up + e_a
        # |Y^ - Y| before the tight rule is known: the plain product rule, an upper bound of it
        rounding = g_out * (a_all @ v_up)  # the product's own rounding (bounds.weighted_values)
        crude = rounding + e_a @ v_up + (0.0 if v.e is None else a_up @ v.e)
        e_o = _spread(a_eta, mean, v, y_hat, crude, centred)
        e_o += second * (a_up @ v_abs + np.abs(y_hat) + SAFETY * crude)
        e_o += ((a_up + norm) * eps) @ v_abs + rounding
        if v.e is not None:
            e_o += a_all @ v.e
        err[rows] = np.where(alive[:, None], e_o, 0.0)
        out[rows] = np.where(alive[:, None], y_hat, 0.0)
    weights = Est(w_rows, w_err) if rows is not None else None
    return Est(out, err), weights


def _spread(
    a_eta: np.ndarray, mean: np.ndarray, v: Est, y_hat: np.ndarray, crude: np.ndarray, centred: Centred | None
) -> np.ndarray:
    """An upper bound of ``sum_l A_il eta_il |V_lf - Y_if|`` (bounds.spread), with ``a_eta`` upper
    bounds of A eta, ``mean`` their row sums, V^ and Y^ float64 estimates (|Y - Y^| <= SAFETY
    ``crude``).

    Evaluated as written on blocks of at most ``EXACT_SPREAD`` terms (every test size; it is then
    the arb rule's value up to the estimates' corrections). Beyond that it costs n_q n_k d
    entrywise operations without BLAS (minutes at L = 16384), so it is bounded instead through a
    centre c: ``|V_l - Y_i| <= |V_l - c| + |c - Y_i|`` gives ``(A eta) |V - c| + rowsum(A eta)
    |Y_i - c|``, for each of ``CENTRES`` centres per column (V's quantiles) in one matrix product,
    and each element keeps the least of these valid bounds. The triangle inequality makes it an
    upper bound of the arb rule, looser by a measured factor (tests/tiers/test_scale.py)."""
    slack = SAFETY * crude
    n_q, n_k = a_eta.shape
    d = y_hat.shape[1]
    if n_q * n_k * d <= EXACT_SPREAD:
        out = np.empty_like(y_hat)
        for f in range(d):
            dist = np.abs(v.value[None, :, f] - y_hat[:, f, None]) * (1 + 2 * U) + slack[:, f, None]
            if v.e is not None:
                dist += SAFETY * v.e[None, :, f]
            out[:, f] = (a_eta * dist).sum(axis=1)
        return out
    assert centred is not None  # made by attention() whenever a block can exceed EXACT_SPREAD
    through = (a_eta @ centred.distances).reshape(n_q, len(centred.centres), d)
    through += mean[:, :, None] * (np.abs(y_hat[:, None, :] - centred.centres[None]) * (1 + 2 * U) + slack[:, None, :])
    return through.min(axis=1)


@dataclass
class Centred:
    """V's columns seen from ``CENTRES`` centres each: ``distances[:, k d + f]`` bounds |V_lf - c_kf|."""

    centres: np.ndarray  # (CENTRES, d)
    distances: np.ndarray  # (n_k, CENTRES d)

    @classmethod
    def of(cls, v: Est) -> Centred:
        centres = np.quantile(v.value, (np.arange(CENTRES) + 0.5) / CENTRES, axis=0)
        e_v = 0.0 if v.e is None else SAFETY * v.e
        distances = np.hstack([np.abs(v.value - c) * (1 + 2 * U) + e_v for c in centres])
        return cls(centres, distances)


def gamma_vec(n: np.ndarray, u: float = U) -> np.ndarray:
    return n * u / (1 - n * u)


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
    op: str,
    inputs: Mapping[str, np.ndarray],
    options: Mapping[str, Any],
    rows: list[int] | None = None,
    fmt: Format | None = None,
) -> Bounds:
    """The bounds of ``op``'s O(L d) outputs, every row: ``output`` (and ``q``, ``k``, ``v`` for
    self-attention); with ``rows``, also the weights on those query rows (for multi-head
    attention of shape (h, len(rows), n_k)). ``fmt``: the format whose rules (default float64)."""
    r = FLOAT64 if fmt is None else Rules.of(fmt)
    keep = _keep(inputs.get("mask"))
    if op == "scaled_dot_product_attention":
        q, k, v = (Est(np.asarray(inputs[n], dtype=np.float64), None) for n in "qkv")
        scale = options.get("scale")
        scale = 1 / math.sqrt(q.value.shape[1]) if scale is None else float(scale)
        out, w = attention(q, k, v, scale, keep, op, rows, r)
        return Bounds({"output": out.stored(r)}, _pair(w, r))
    if op == "self_attention":
        x = Est(np.asarray(inputs["x"], dtype=np.float64), None)
        q, k, v = (affine(x, inputs[f"w_{n}"], inputs.get(f"b_{n}"), r) for n in "qkv")
        scale = options.get("scale")
        scale = 1 / math.sqrt(q.value.shape[1]) if scale is None else float(scale)
        out, w = attention(q, k, v, scale, keep, op, rows, r)
        full = {"q": q.stored(r), "k": k.stored(r), "v": v.stored(r), "output": out.stored(r)}
        return Bounds(full, _pair(w, r))
    if op == "multi_head_attention":
        h = int(options["num_heads"])
        q, k, v = (
            affine(Est(np.asarray(inputs[src], dtype=np.float64), None), inputs[f"w_{n}"], inputs.get(f"b_{n}"), r)
            for n, src in (("q", "query"), ("k", "key"), ("v", "value"))
        )
        d = q.value.shape[1]
        d_head = d // h
        heads, weights = [], []
        for i in range(h):
            cols = slice(i * d_head, (i + 1) * d_head)
            part = [Est(t.value[:, cols], None if t.e is None else t.e[:, cols]) for t in (q, k, v)]
            out, w = attention(*part, 1 / math.sqrt(d_head), keep, f"{op} head {i}", rows, r)
            heads.append(out)
            weights.append(_pair(w, r))
        concat = Est(np.hstack([o.value for o in heads]), np.hstack([o.e for o in heads]))
        output = affine(concat, inputs["w_o"], inputs.get("b_o"), r).stored(r)
        stacked = None
        if rows is not None:
            stacked = (np.stack([w[0] for w in weights]), np.stack([w[1] for w in weights]))
        return Bounds({"output": output}, stacked)
    raise ValueError(f"the scale tier's bounds cover attention operations, not {op!r}")


def _pair(w: Est | None, rules: Rules = FLOAT64) -> tuple[np.ndarray, np.ndarray] | None:
    """(weights, stored bound): |A| <= A^ (1 + 2^-17) replaces abs_up's correction."""
    if w is None:
        return None
    assert w.e is not None
    return w.value, round_up((SAFETY * w.e + rules.resolution * w.value * A_UP + rules.underflow) * INFLATE)
