"""The normalisation layers' exact truth and error bounds: ``layer_norm`` and ``rms_norm``.

A family's truth lives in one module: its graphs (ball arithmetic, run by ``engine`` like every
graph of ``exact``) and the bound rules they call, registered with ``exact.register_graph``.

**Values.** Row by row, with n the row's length (its features) and S = sum_k x_k (exact: a sum of
doubles in arb), the centred entries are ``c_j = (n x_j - S) / n``, so that a constant row, or a
row of length 1, is centred to exactly 0 (a ball ``x - S/n`` would keep a radius around 0 that no
working precision rounds to a double). ``v = sum c^2 / n`` (biased), ``r = 1 / sqrt(v + eps)``,
``y = c r w + b``; rms_norm: ``ms = sum x^2 / n``, ``r = 1 / sqrt(ms + eps)``, ``y = x r w``.

**Bounds (the mixed forward-backward rule of ``bounds``, docs/truth-and-bounds.md, "Normalisation
layers").** A correct implementation computes each row's statistics as the exact statistics of its
inputs perturbed relatively by ``rho = gamma(n + 2) + C_IN u`` each (a sum of n terms in any order,
the division by n, and the inputs' own relative perturbation: the backward part), and rounds every
result it forms at the size of its operands. Unit roundoff and constants are read from ``bounds``
at call time (the float32 tier swaps them: ``truth/precision.py``). Per row, with
``m1 = mean |x_k|``:

* mean: ``|mu' - mu| <= E_mu = rho m1``;
* centred entries ``c' = fl(x_j - mu')``, x_j itself perturbed by ``C_IN u |x_j|`` (a fused
  ``x_j s - mu s`` formulation rounds there)::

      E_c,j = E_mu + C_IN u |x_j| + u (|c_j| + E_mu + C_IN u |x_j|)

* variance ``v' = fl(mean(c'^2))``, or a one-sweep Welford recurrence (its error, n kappa u
  relative with kappa ~ |mu| / std, Chan, Golub and LeVeque 1983, is the backward term)::

      E_v = 2 mean(|c| E_c) + mean(E_c^2) + gamma(n + 1) mean((|c| + E_c)^2) + 2 rho mean(|c| |x|)

  (rms_norm: ``E_ms = (gamma(n + 1) + 2 rho) ms``: no centring);
* ``s = v + eps`` adds one rounding: ``E_s = E_v + u (v + E_v + eps)``; with ``t = E_s / (v + eps)``
  (refused past ``MAX_FIRST_ORDER``: a row whose variance the rounding can swamp, eps too small to
  rescue it), ``r' = r (1 + theta)``, ``|theta| <= t / 2 + t^2 + C_SQRT u`` (the square root and
  the reciprocal, or an rsqrt within two ulps);
* ``y = c' r'`` rounds once: ``e_y,j = r ((|c_j| + E_c,j)(1 + theta)(1 + u) - |c_j|)``
  (rms_norm: ``c = x`` with ``E_c,j = C_IN u |x_j| (1 + u)``);
* the affine part ``y w + b`` (one or two roundings, in either association with the scale ``r w``):
  ``e = |w| e_y + gamma(k) ((|y| + e_y) |w| + |b|)``, k = 2 with a bias, else 1.

So a correct row is off by about ``n u |mu| / std`` relative where its mean dominates (the
condition of centring), while the one-pass ``mean(x^2) - mean(x)^2`` is off by ``u mu^2 / var``:
on a row with ``|mu| / std = 1e4`` the bound allows ~1e-11 and one-pass errs by ~1e-8.

The rule holds for every point of balls ``x``, ``c``, ``v`` (quantities that grow the bound at
their upper ends, ``v + eps`` in the denominators at its lower end): ``layer_norm_row``.

**Inputs that carry errors** (``layer_norm_carried``: a transformer's hidden states, off by up to
e_k each). A correct implementation computes the rule's formulation at some x' with
``|x'_k - x_k| <= e_k``, so ``|y'(x') - y(x)| <= |y(x') - y(x)| + |y'(x') - y(x')|``:

* the exact change, with ``dc = dx - mean(dx)``, ``|dc_j| <= delta_j = e_j + mean(e)``,
  ``s = v + eps``, ``yhat = c r`` and ``t = (v' - v) / s = (2 mean(c dc) + mean(dc^2)) / s``:
  ``y_j(x') - y_j(x) = dc_j r' + c_j (r' - r)``, ``r' = r (1 + t)^(-1/2)``. Its first-order part
  is the Jacobian ``r (dx_j - mean(dx) - yhat_j mean(yhat dx))`` (``mean(yhat dc) = mean(yhat dx)``:
  yhat sums to 0), bounded entrywise by ``r (delta_j + |yhat_j| mean(|yhat| e))``. The rest, with
  ``|t| <= T = (2 mean(|c| delta) + mean(delta^2)) / s`` and the Taylor remainder
  ``|(1 + t)^(-1/2) - 1 + t/2| <= R = 3/8 T^2 / (1 - T)^(5/2)``::

      r delta_j (T/2 + R) + |yhat_j| (mean(delta^2) / (2 s) + R)

  certified in ball arithmetic; a row with ``T >= MAX_FIRST_ORDER`` is refused (``BoundError``:
  the input errors move its variance too much for the expansion, a nearly constant row);
* the implementation's own rounding at x': the exact-input rule above evaluated on the balls
  ``x_k +/- e_k``, ``c_k +/- delta_k``, ``v +/- T s`` (every x' lies in them);

then the affine part, whose rule already takes ``y``'s error bound.

**At a storage tier** (bounds.py, "Mixed precision"): the rule above at the arithmetic's u, the
output stored by the engine. Where the arithmetic is float16 itself (``bounds.ARITH_TINY`` > 0:
its subnormals start at 6e-5), a rounding may also err by ``tau`` absolute (half the smallest
subnormal, 2^-25), which ``r = 1 / sqrt(v + eps)`` amplifies (316 at eps = 1e-5): each rounding of
the rule is charged ``tau`` more (the mean 2, each centred entry 2, the variance 3, the product
``c r`` 1, the affine part k); and a row whose sum of |x| or of squares passes the arithmetic's
largest value (float16's squares past 256) is refused (``BoundError``: a correct implementation
overflows there).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flint import arb

from attention_ports.reference.norms import DEFAULT_EPS
from attention_ports.truth import arbmat as am
from attention_ports.truth import bounds, exact
from attention_ports.truth.exact import Graph, InputError, Out, T

C_SQRT = 3  # roundings of r = 1 / sqrt(s): the square root and the division (or an rsqrt, 2 ulps)


def _eps(options: Mapping[str, Any]) -> arb:
    eps = options.get("eps")
    if eps is None:
        return arb(DEFAULT_EPS)  # the double nearest 1e-5, as every port's default
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps < 0:
        raise InputError(f"eps must be a finite number >= 0 or None; got {eps!r}")
    return arb(float(eps))


def rho(n: int) -> arb:
    """Relative perturbation of each input in a row's statistics (the backward part of the rule)."""
    return bounds.gamma(n + 2) + bounds.C_IN * bounds.U


def scale_error(s: arb, e_s: arb) -> arb:
    """``theta``: the relative error of ``r = 1 / sqrt(s)`` computed from ``s`` with error ``e_s``."""
    t = e_s / s
    if not (t < bounds.MAX_FIRST_ORDER):
        raise bounds.BoundError(
            f"a row's variance plus eps ({s.upper()}) is within {t.upper()} relative of its rounding error: "
            "the first-order analysis does not apply (a nearly constant row with eps too small)"
        )
    return t / 2 + t * t + C_SQRT * bounds.U


def layer_norm_row(x: list[arb], c: list[arb], v: arb, eps: arb, v_low: arb | None = None) -> list[arb]:
    """Error bounds of ``c_j r`` for one row (before the affine part): the module's rule. The
    arguments may be balls (every point of them: ``v_low`` the variance's lower end)."""
    ca, e_c, e_v = stat_errors(x, c)
    return _scaled(ca, e_c, v.abs_upper(), e_v, eps, v_low)


def stat_errors(x: list[arb], c: list[arb]) -> tuple[list[arb], list[arb], arb]:
    """``(|c|, E_c, E_v)`` of one row: the centred entries' and the variance's error bounds (the
    module's rule; x and c may be balls)."""
    n = len(x)
    u, r_n, tiny = bounds.U, rho(n), bounds.ARITH_TINY
    xa = [xi.abs_upper() for xi in x]
    ca = [ci.abs_upper() for ci in c]
    _within_range("sum of |x|", sum(xa, arb(0)))
    e_mu = r_n * sum(xa, arb(0)) / n + 2 * tiny
    e_c = [
        e_mu + bounds.C_IN * u * xj + u * (cj + e_mu + bounds.C_IN * u * xj) + 2 * tiny
        for xj, cj in zip(xa, ca, strict=True)
    ]
    squares = sum(((cj + ej) ** 2 for cj, ej in zip(ca, e_c, strict=True)), arb(0))
    _within_range("sum of squares", squares)
    e_v = (
        2 * sum((cj * ej for cj, ej in zip(ca, e_c, strict=True)), arb(0)) / n
        + sum((ej * ej for ej in e_c), arb(0)) / n
        + bounds.gamma(n + 1) * squares / n
        + 2 * r_n * sum((cj * xj for cj, xj in zip(ca, xa, strict=True)), arb(0)) / n
        + 3 * tiny
    )
    return ca, e_c, e_v


def _within_range(what: str, value: arb) -> None:
    """A row's intermediate (its sum, its sum of squares) past the arithmetic's largest finite value
    overflows in a correct implementation (float16's squares past 256): the case is refused."""
    if not value.is_finite():  # the errors carried into the row already have no bound
        raise bounds.BoundError(f"a row's {what} is unbounded: the errors carried into it have no finite bound")
    if not (value < bounds.MAX_FINITE):
        raise bounds.BoundError(
            f"a row's {what} reaches {_short(value)}, beyond the arithmetic's range ({_short(bounds.MAX_FINITE)})"
        )


def rstd_error(v: arb, e_v: arb, eps: arb, v_low: arb | None = None) -> arb:
    """``theta``, the relative error bound of the computed ``r = 1 / sqrt(v + eps)`` from a variance
    off by ``e_v`` (``v`` its upper end, ``v_low`` its lower end where it is a ball): the rule's
    ``s = v + eps`` with its rounding, then the square root and the reciprocal."""
    s = v + eps
    s_low = s if v_low is None else v_low + eps
    return scale_error(s_low, e_v + bounds.U * (s + e_v))


def layer_norm_carried(x: list[arb], e: list[arb], c: list[arb], v: arb, eps: arb) -> list[arb]:
    """Error bounds of ``c_j r`` for a row whose entries carry errors ``e`` (before the affine
    part): first order through the Jacobian, the certified remainder, and ``layer_norm_row`` on
    the ball of perturbed inputs (module docstring, "Inputs that carry errors")."""
    n = len(x)
    s = v + eps
    r = s.rsqrt().abs_upper()
    ca = [cj.abs_upper() for cj in c]
    ya = [(cj * s.rsqrt()).abs_upper() for cj in c]  # |yhat|, the normalised row
    mean_e = sum(e, arb(0)) / n
    delta = [ej + mean_e for ej in e]  # bounds of |dx_j - mean(dx)|
    mean_ye = sum((y * ej for y, ej in zip(ya, e, strict=True)), arb(0)) / n
    first = [r * (dj + y * mean_ye) for dj, y in zip(delta, ya, strict=True)]
    # the remainder: t = (v' - v) / s with |v' - v| <= dv = 2 mean(|c| delta) + mean(delta^2)
    sq = sum((dj * dj for dj in delta), arb(0)) / n
    dv = 2 * sum((cj * dj for cj, dj in zip(ca, delta, strict=True)), arb(0)) / n + sq
    big_t = (dv / s).abs_upper()
    if not (big_t < bounds.MAX_FIRST_ORDER):
        raise bounds.BoundError(
            f"a layer norm row's input errors move its variance by {_short(big_t)} relative: the first-order "
            "analysis does not apply (a nearly constant row, or errors carried from earlier layers too large)"
        )
    rem = arb(3) / 8 * big_t * big_t / (1 - big_t) ** arb(2.5)  # |(1 + t)^(-1/2) - 1 + t/2|
    half_sq = (sq / (2 * s)).abs_upper()
    second = [r * dj * (big_t / 2 + rem) + y * (half_sq + rem) for dj, y in zip(delta, ya, strict=True)]
    # the rounding of a correct implementation at the perturbed inputs x' (every point of the balls)
    xb = [xj + arb(0, ej) for xj, ej in zip(x, e, strict=True)]
    cb = [cj + arb(0, dj) for cj, dj in zip(c, delta, strict=True)]
    vb = v + arb(0, dv)
    rnd = layer_norm_row(xb, cb, vb, eps, _low(vb))
    return [(f + q + z).abs_upper() for f, q, z in zip(first, second, rnd, strict=True)]


def _low(v: arb) -> arb:
    """The lower end of a variance's ball, at least 0 (a variance is)."""
    return v.lower() if v.lower() > 0 else arb(0)


def _short(x: arb) -> str:
    return f"{float(x.upper()):.4g}"


def rms_norm_row(x: list[arb], ms: arb, eps: arb) -> list[arb]:
    """Error bounds of ``x_j r`` for one row of rms_norm (before the weight): the module's rule."""
    n = len(x)
    u = bounds.U
    xa = [xi.abs_upper() for xi in x]
    _within_range("sum of squares", n * ms.abs_upper())
    e_ms = (bounds.gamma(n + 1) + 2 * rho(n)) * ms.abs_upper() + 3 * bounds.ARITH_TINY
    e_c = [bounds.C_IN * u * xj * (1 + u) + bounds.ARITH_TINY for xj in xa]
    return _scaled(xa, e_c, ms.abs_upper(), e_ms, eps)


def _scaled(ca: list[arb], e_c: list[arb], v: arb, e_v: arb, eps: arb, v_low: arb | None = None) -> list[arb]:
    """``v``: the variance's upper end; ``v_low`` its lower end where it is a ball (an input
    carrying errors): the relative error ``t`` and ``r`` are largest there."""
    u = bounds.U
    theta = rstd_error(v, e_v, eps, v_low)
    r = ((v + eps) if v_low is None else (v_low + eps)).rsqrt().abs_upper()
    tiny = bounds.ARITH_TINY
    return [r * ((cj + ej) * (1 + theta) * (1 + u) - cj) + tiny for cj, ej in zip(ca, e_c, strict=True)]


def affine_error(y: list[arb], e_y: list[arb], w: list[arb] | None, b: list[arb] | None) -> list[arb]:
    """Error of ``y w + b`` entrywise (w, b absent: 1, 0), from y's error bound."""
    k = (w is not None) + (b is not None)
    out = []
    for j, (yj, ej) in enumerate(zip(y, e_y, strict=True)):
        wa = w[j].abs_upper() if w is not None else arb(1)
        ba = b[j].abs_upper() if b is not None else arb(0)
        out.append(
            wa * ej + (bounds.gamma(k) * ((yj.abs_upper() + ej) * wa + ba) + k * bounds.ARITH_TINY if k else arb(0))
        )
    return out


# -------------------------------------------------------------------- the graphs


def _x(inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, list[list[arb]]]:
    x = exact._f64(inputs, "x", 2)
    return x, am.rows_of(am.from_array(x))


def _vec(inputs: Mapping[str, np.ndarray], name: str, d: int) -> list[arb] | None:
    t = exact._bias(inputs, name, d)
    return None if t is None else t.v.entries()


def _affine_rows(g: Graph, shape: tuple[int, int], y: list[arb], e_y: list[arb] | None, w, b) -> T:
    d = shape[1]
    out = []
    for i, yi in enumerate(y):
        j = i % d
        if w is not None:
            yi = yi * w[j]
        if b is not None:
            yi = yi + b[j]
        out.append(yi)
    e = None
    if g.track:
        e_rows = [
            affine_error(y[i : i + d], e_y[i : i + d], w, b)  # type: ignore[index]
            for i in range(0, len(y), d)
        ]
        e = am.build(shape[0], d, [x for row in e_rows for x in row])
    return T(am.build(shape[0], d, out), e)


def layer_norm_t(g: Graph, x: T, w: list[arb] | None, b: list[arb] | None, eps: arb) -> T:
    """layer_norm of the rows of a value/bound matrix: ``layer_norm_row`` where the inputs are
    exact, ``layer_norm_carried`` where they carry errors (a transformer's hidden states)."""
    n_rows, d = x.shape
    e_rows = am.rows_of(x.e) if g.track and x.e is not None else None
    y: list[arb] = []
    e_y: list[arb] = []
    for i, row in enumerate(am.rows_of(x.v)):
        total = sum(row, arb(0))
        c = [(d * xj - total) / d for xj in row]  # exactly 0 on a constant row
        v = sum((cj * cj for cj in c), arb(0)) / d
        r = (v + eps).rsqrt()
        y.extend(cj * r for cj in c)
        if g.track:
            if e_rows is None:  # the inputs are exact, or balls whose every point the rule covers
                e_y.extend(layer_norm_row(row, c, v, eps, _low(v)))
            else:
                e_y.extend(layer_norm_carried(row, e_rows[i], c, v, eps))
    return _affine_rows(g, (n_rows, d), y, e_y if g.track else None, w, b)


def layer_norm(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x_arr = exact._f64(inputs, "x", 2)
    d = x_arr.shape[1]
    w, b, eps = _vec(inputs, "weight", d), _vec(inputs, "bias", d), _eps(options)
    return {"y": Out(layer_norm_t(g, exact._exact(x_arr), w, b, eps), x_arr.shape)}


def rms_norm(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x_arr, rows = _x(inputs)
    n_rows, d = x_arr.shape
    w, eps = _vec(inputs, "weight", d), _eps(options)
    y: list[arb] = []
    e_y: list[arb] = []
    for row in rows:
        ms = sum((xj * xj for xj in row), arb(0)) / d
        r = (ms + eps).rsqrt()
        y.extend(xj * r for xj in row)
        if g.track:
            e_y.extend(rms_norm_row(row, ms, eps))
    return {"y": Out(_affine_rows(g, (n_rows, d), y, e_y if g.track else None, w, None), (n_rows, d))}


exact.register_graph("layer_norm", layer_norm)
exact.register_graph("rms_norm", rms_norm)
