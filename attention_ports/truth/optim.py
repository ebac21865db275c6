"""The optimizers' exact truth and error bounds: ``adamw_step`` (one step of torch.optim.AdamW).

**Values**, element by element, from the exact inputs (param p, grad g, moments m, v) and the
options as the doubles they are (lr, beta1 = b1, beta2 = b2, eps, weight_decay = wd, step t)::

    M = b1 m + (1 - b1) g                 V = b2 v + (1 - b2) g^2
    c1 = 1 - b1^t                         c2 = 1 - b2^t
    D = sqrt(V / c2) + eps                S = lr M / (c1 D)
    P = p (1 - lr wd) - S

returned as ``param = P``, ``m = M``, ``v = V`` (the contract's formula, ports/CONTRACT.md).

**Bounds (the mixed forward-backward rule of ``bounds``, docs/truth-and-bounds.md, "Optimizer:
adamw_step").** Every correct formulation computes each quantity from its computed operands with a
few roundings, each at the size of its operands. The formulations the rule is written for:
the contract's textbook formula; torch's own (``m.lerp_(g, 1 - b1)``, which is ``m + w (g - m)``
for ``w = 1 - b1 < 1/2`` and ``g - (g - m)(1 - w)`` otherwise; ``v.mul_(b2).addcmul_(g, g,
value=1 - b2)``; the decay first, ``p.mul_(1 - lr wd)``; ``denom = sqrt(v) / sqrt(c2) + eps``;
``p.addcdiv_(m, denom, value=-lr / c1)``); the paper's ``p - lr (wd p + mhat / denom)``; ``b^t``
by ``pow`` (within C_EXP ulps), by a running product or by squaring (at most t - 1 roundings), or
as ``exp(t log b)``; and ``1 - b`` rounded as computed. Unit roundoff and constants are read from
``bounds`` at call time (the float32 tier swaps them: ``truth/precision.py``); gamma(k) = k u /
(1 - k u).

* **Moments.** Every formulation applies coefficients to m and g that are off from b1 and 1 - b1
  by at most gamma(3) relative (products, ``1 - b1``'s rounding, and in the lerp form the
  coefficient ``1 - w (1 + theta)`` of m, whose error ``w theta`` is below ``b1 theta`` because
  ``w < 1/2 < b1`` there), plus, where b1 is recovered as ``1 - fl(1 - b1)``, an absolute
  ``u (1 - b1)`` on m's coefficient; then the result rounds once::

      E_M = gamma(4) (b1 |m| + (1 - b1) |g|) + 2u (1 - b1) |m| + u |M|
      E_V = gamma(5) (b2 v + (1 - b2) g^2) + 2u (1 - b2) v + u V        (g^2 rounds once more)

* **Bias corrections.** ``b^t`` carries a relative error ``rho_t = C_EXP u + gamma(t) + (C_EXP +
  1) t u |ln b|`` (pow or exp within C_EXP ulps; a product of t factors; ``t log b`` rounded and
  met by exp's derivative: each formulation's own term, summed), 0 when b = 0; ``c = 1 - b^t``
  rounds once more::

      E_c = rho_t b^t + u (c + rho_t b^t),      kappa = E_c / c

  This is the cancellation every port meets at small t: at b2 = 0.999, t = 2, ``1 - b2^2`` is
  off by ~500 u relative, whoever computes it.
* **The denominator.** With ``eps_V = E_V / V`` and ``s = (eps_V + kappa_2) / (1 - kappa_2)``
  (refused past ``MAX_FIRST_ORDER``), ``V' / c2'`` is within ``s`` of ``V / c2`` relative, its
  square root within ``sigma = s / 2 + s^2``, and the division and square root(s) add gamma(3)
  (``sqrt(v / c2)``, or torch's ``sqrt(v) / sqrt(c2)``, or a product by ``rsqrt``)::

      theta_Q = sigma + gamma(3) (1 + sigma)
      E_D = theta_Q Q + u (D + theta_Q Q),      delta_D = E_D / D     (Q = sqrt(V / c2))

  V = 0 (g = 0 and v = 0) is computed exactly: Q' = 0 and ``E_D = u D``.
* **The step** ``S = lr M / (c1 D)``, with four roundings in any order (``M / c1``, the product by
  lr, the division by D; torch's ``lr / c1`` and ``addcdiv``; the paper's sum with ``wd p`` and
  product by lr)::

      E_S = lr / (c1 D) ((|M| + E_M) (1 + u)^4 / ((1 - kappa_1)(1 - delta_D)) - |M|)

* **The update** ``P = p k - S``, ``k = 1 - lr wd``: p's coefficient carries ``gamma(3) (lr wd +
  |k|)`` (``lr wd`` and ``1 - lr wd`` rounded and the product; or the paper's ``wd p``, its sum
  and product by lr), then one subtraction::

      E_P = gamma(4) (lr wd + |k|) |p| + (1 + u) E_S + u |P|

Everything is rigorous (the second-order terms are kept by the ``1 / (1 - kappa)`` factors and the
``s^2`` of the square root). A missing bias correction, L2 decay in the gradient, eps inside the
square root, a shifted t, swapped betas or ``|g|`` for ``g^2`` each move a result by 1e-4 relative
or more on the catalogue's cases, against bounds of a few 1e-15.

**At a storage tier** (bounds.py, "Mixed precision"): p, g, m and v are storage values, and every
elementwise operation stores its result (torch's single-tensor AdamW on bfloat16 tensors: lerp_,
mul_, addcmul_, sqrt, the division, add_, mul_, addcdiv_, each computed in float32 and rounded to
bfloat16). So the rule above is evaluated with u replaced by ``u_s + u + u_s u``
(``bounds.storage_arithmetic``: a float32 operation then a storage rounding) and each rounding
charged ``tau_s`` more (``bounds.op_tiny``: the moments 4 and 5, the denominator 3, the update 4).
The bias corrections are scalars, formed in float32 or wider (torch's Python floats, a Float16
port's Float64 keywords): their ``kappa`` at float32's u (``bounds.scalar_arithmetic``), then one
storage rounding (``stored_scalar``). Where eps or ``sqrt(v_hat)`` is in float16's subnormals the
denominator's relative error passes the guard and the case is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flint import arb

from attention_ports.reference import optim as reference_optim
from attention_ports.truth import arbmat as am
from attention_ports.truth import bounds, exact
from attention_ports.truth.exact import Graph, InputError, Out, T

ARRAYS = ("param", "grad", "m", "v")


def _options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The step's number and the scalars as doubles, checked by the reference's own rules."""
    ro = reference_optim
    try:
        t = ro.check_step(options.get("step"))
        got = {
            name: ro._scalar(default if options.get(name) is None else options[name], name, 0.0, high)
            for name, default, high in (
                ("lr", ro.DEFAULT_LR, None),
                ("beta1", ro.DEFAULT_BETA1, 1.0),
                ("beta2", ro.DEFAULT_BETA2, 1.0),
                ("eps", ro.DEFAULT_EPS, None),
                ("weight_decay", ro.DEFAULT_WEIGHT_DECAY, None),
            )
        }
    except ValueError as exc:
        raise InputError(str(exc)) from None
    return {"step": t, **got}


def power_error(b: arb, t: int) -> arb:
    """``rho_t``: the relative error bound of a computed ``b^t`` (the module's rule); 0 for b = 0."""
    if b == 0:
        return arb(0)
    u = bounds.U
    return bounds.C_EXP * u + bounds.gamma(t) + (bounds.C_EXP + 1) * t * u * b.log().abs_upper()


def correction(b: arb, t: int) -> tuple[arb, arb]:
    """``c = 1 - b^t`` and its relative error bound ``kappa`` (refused past the first-order guard)."""
    bt = b**t
    c = 1 - bt
    e_bt = power_error(b, t) * bt.abs_upper()
    kappa = (e_bt + bounds.U * (c.abs_upper() + e_bt)) / c
    if not (kappa < bounds.MAX_FIRST_ORDER):
        raise bounds.BoundError(
            f"1 - beta^t = {c.mid()} is within {kappa.upper()} relative of its rounding error (beta = {b.mid()}, "
            f"t = {t}): the first-order analysis does not apply"
        )
    return c, kappa


def moment_error(b: arb, old: arb, new_term: arb, result: arb, roundings: int) -> arb:
    """``E_M`` (roundings = 4: ``new_term = |g|``) or ``E_V`` (roundings = 5: ``new_term = g^2``)."""
    u = bounds.U
    old_a = old.abs_upper()
    return (
        bounds.gamma(roundings) * (b * old_a + (1 - b) * new_term.abs_upper())
        + 2 * u * (1 - b) * old_a
        + u * result.abs_upper()
        + roundings * bounds.op_tiny()
    )


def denominator_error(v_new: arb, e_v: arb, q: arb, d: arb, kappa2: arb) -> arb:
    """``E_D``, the bound of the computed ``sqrt(V / c2) + eps`` (the module's rule); raises
    ``bounds.BoundError`` where V is within its relative rounding error of 0."""
    u, g3 = bounds.U, bounds.gamma(3)
    if v_new == 0:
        e_d = u * d.abs_upper()
    else:
        ratio = (e_v / v_new.abs_lower() + kappa2) / (1 - kappa2)
        if not (ratio < bounds.MAX_FIRST_ORDER):
            raise bounds.BoundError(
                f"v / (1 - beta2^t) is within {ratio.upper()} relative of its rounding error: "
                "the first-order analysis does not apply"
            )
        sigma = ratio / 2 + ratio * ratio
        theta = sigma + g3 * (1 + sigma)
        qa = q.abs_upper()
        e_d = theta * qa + u * (d.abs_upper() + theta * qa)
    return e_d + 3 * bounds.op_tiny()  # a storage tier's subnormals: sqrt, the division, + eps


def step_error(p: arb, m_new: arb, e_m: arb, d: arb, e_d: arb, s: arb, k: arb, o) -> arb:
    """``E_P`` of one element from the moment's error ``e_m`` and the denominator's ``e_d``."""
    u = bounds.U
    delta = e_d / d.abs_lower()
    if not (delta < bounds.MAX_FIRST_ORDER):
        raise bounds.BoundError(f"sqrt(v_hat) + eps is within {delta.upper()} relative of its rounding error")
    ma = m_new.abs_upper()
    e_s = (
        o["lr"]
        / (o["c1"].abs_lower() * d.abs_lower())
        * ((ma + e_m) * (1 + u) ** 4 / ((1 - o["kappa1"]) * (1 - delta)) - ma)
    )
    lr_wd = o["lr"] * o["weight_decay"]
    return (
        bounds.gamma(4) * (lr_wd + k.abs_upper()) * p.abs_upper()
        + (1 + u) * e_s
        + u * (p * k - s).abs_upper()
        + 4 * bounds.op_tiny()
    )


def element_errors(p: arb, m_new: arb, v_new: arb, e_m: arb, e_v: arb, q: arb, d: arb, s: arb, k: arb, o) -> arb:
    """``E_P`` of one element from the exact intermediates and the moments' errors (the module's rule)."""
    return step_error(p, m_new, e_m, d, denominator_error(v_new, e_v, q, d, o["kappa2"]), s, k, o)


def adamw_step(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    first = np.asarray(inputs.get("param", np.zeros(0)))
    arrs = {name: exact._f64(inputs, name, max(first.ndim, 1)) for name in ARRAYS}
    shape = arrs["param"].shape
    if any(a.shape != shape for a in arrs.values()):
        sizes = ", ".join(f"{n} {a.shape}" for n, a in arrs.items())
        raise InputError(f"param, grad, m and v must have one shape; got {sizes}")
    if np.any(arrs["v"] < 0):
        raise InputError("v (the second moment, a mean of squares) must be >= 0")
    opts = _options(options)
    # a storage tier (module docstring): the scalars formed in float32 or wider, then stored; every
    # elementwise operation stored
    b1, b2 = arb(opts["beta1"]), arb(opts["beta2"])
    with bounds.scalar_arithmetic():
        corrections = (correction(b1, opts["step"]), correction(b2, opts["step"]))
    with bounds.storage_arithmetic():
        return _adamw_step(g, arrs, opts, [(c, stored_scalar(kappa)) for c, kappa in corrections])


def stored_scalar(kappa: arb) -> arb:
    """A scalar's relative error bound ``kappa`` after its rounding to storage (a storage tier's
    ``u_s`` more, compounded; unchanged elsewhere)."""
    if bounds.STORAGE_U is None:
        return kappa
    return kappa + bounds.STORAGE_U * (1 + kappa)


def _adamw_step(
    g: Graph, arrs: dict[str, np.ndarray], opts: dict[str, Any], corrections: list[tuple[arb, arb]]
) -> dict[str, Out]:
    shape = arrs["param"].shape
    b1, b2, eps = arb(opts["beta1"]), arb(opts["beta2"]), arb(opts["eps"])
    lr, wd = arb(opts["lr"]), arb(opts["weight_decay"])
    (c1, kappa1), (c2, kappa2) = corrections
    k = 1 - lr * wd
    mats = {name: am.from_array(a) for name, a in arrs.items()}
    rows, cols = am.shape(mats["param"])
    ps, gs, ms, vs = (mats[n].entries() for n in ARRAYS)
    o = {"lr": lr, "weight_decay": wd, "c1": c1, "kappa1": kappa1, "kappa2": kappa2}
    out_p, out_m, out_v, e_p, e_m, e_v = [], [], [], [], [], []
    for p, gr, m, v in zip(ps, gs, ms, vs, strict=True):
        m_new = b1 * m + (1 - b1) * gr
        v_new = b2 * v + (1 - b2) * gr * gr
        q = (v_new / c2).sqrt() if v_new != 0 else arb(0)
        d = q + eps
        if d == 0:
            raise InputError("eps = 0 with v = 0 and grad = 0 at an element: the step divides by zero")
        s = lr * m_new / (c1 * d)
        out_p.append(p * k - s)
        out_m.append(m_new)
        out_v.append(v_new)
        if g.track:
            em = moment_error(b1, m, gr, m_new, 4)
            ev = moment_error(b2, v, gr * gr, v_new, 5)
            e_m.append(em)
            e_v.append(ev)
            e_p.append(element_errors(p, m_new, v_new, em, ev, q, d, s, k, o))

    def out(values: list[arb], errors: list[arb]) -> Out:
        return Out(T(am.build(rows, cols, values), am.build(rows, cols, errors) if g.track else None), shape)

    return {"param": out(out_p, e_p), "m": out(out_m, e_m), "v": out(out_v, e_v)}


exact.register_graph("adamw_step", adamw_step)
