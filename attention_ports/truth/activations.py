"""The activations' exact truth and error bounds: ``gelu`` (erf form and tanh approximation).

**Values**, element by element: ``approximate = "none"``: ``y = 0.5 x erfc(-x / sqrt(2))`` (the
same number as ``0.5 x (1 + erf(x / sqrt(2)))``, without the cancellation a ball would carry for
x << 0); ``"tanh"``: ``y = x / (1 + exp(-2a))``, ``a = sqrt(2 / pi) (x + 0.044715 x^3)`` (the same
as ``0.5 x (1 + tanh(a))``), with the cubic coefficient the decimal 0.044715 exactly.

**Bounds (the mixed forward-backward rule of ``bounds``, docs/truth-and-bounds.md, "Activations").**
Every input perturbed relatively by ``C_IN u``, every result rounded at the size of its operands,
``erf`` and ``tanh`` within ``C_EXP`` ulps; derivatives are taken at the end of the perturbed
interval where they are largest. The standard formulation's ``1 + erf`` (``1 + tanh``) rounds at
the size of its operands, about 1, so a far negative x is charged ``u |x|`` absolute, however small
the result: the erfc and sigmoid formulations are more accurate and pass too.

* erf form: ``z = x / sqrt(2)`` (a division, or a product by a rounded constant):
  ``E_z = (C_IN + 2) u |z|``; ``e_erf = 2 / sqrt(pi) exp(-(|z| - E_z)^2) E_z + C_EXP u |erf z|``;
* tanh form: ``p = x + c x^3`` with ``E_p = 6u |c x^3| + 2u |x| + C_IN u |x| |1 + 3c x^2|``
  (x^3, the coefficient and its product, the sum; x's perturbation); ``a = k p`` with k = sqrt(2/pi)
  rounded up to 3 times: ``E_a = k E_p + 4u k (|p| + E_p)``; ``e_t = (1 - tanh(|a| - E_a)^2) E_a +
  C_EXP u |tanh a|``;
* then ``s = 1 + f`` (f = erf or tanh, error e_f): ``e_s = e_f + u (1 + |f| + e_f)``, and
  ``y = 0.5 x s``: ``e_y = 0.5 |x| e_s + (C_IN + 1) u (|y| + 0.5 |x| e_s)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flint import arb

from attention_ports.reference.activations import APPROXIMATIONS
from attention_ports.truth import arbmat as am
from attention_ports.truth import bounds, exact
from attention_ports.truth.exact import Graph, InputError, Out, T


def _cubic() -> arb:
    """The decimal 0.044715 at the working precision (a ball made once would keep its radius at
    every precision): a port's literal rounds it, charged in E_p."""
    return arb("0.044715")


def _form(options: Mapping[str, Any]) -> str:
    form = options.get("approximate")
    form = "none" if form is None else form
    if form not in APPROXIMATIONS:
        raise InputError(f"approximate must be one of {', '.join(map(repr, APPROXIMATIONS))} or None; got {form!r}")
    return form


def erf_form_error(x: arb, y: arb) -> arb:
    """The error bound of ``0.5 x (1 + erf(x / sqrt(2)))`` at x (exact result y): the module's rule."""
    u = bounds.U
    z = (x / arb(2).sqrt()).abs_upper()
    e_z = (bounds.C_IN + 2) * u * z
    near = z - e_z if z > e_z else arb(0)
    e_f = 2 / arb.pi().sqrt() * (-(near * near)).exp() * e_z + bounds.C_EXP * u * x.erf().abs_upper()
    return _outer(x, y, x.erf().abs_upper(), e_f)


def tanh_form_error(x: arb, y: arb) -> arb:
    """The error bound of ``0.5 x (1 + tanh(sqrt(2/pi) (x + c x^3)))`` at x: the module's rule."""
    u = bounds.U
    c = _cubic()
    xa = x.abs_upper()
    cube = c * xa**3
    k = (2 / arb.pi()).sqrt()
    p = (x + c * x**3).abs_upper()
    e_p = 6 * u * cube + 2 * u * xa + bounds.C_IN * u * xa * (1 + 3 * c * xa * xa)
    e_a = k * e_p + 4 * u * k * (p + e_p)
    a = k * p
    near = a - e_a if a > e_a else arb(0)
    t = (k * (x + c * x**3)).tanh().abs_upper()
    e_f = (1 - near.tanh() ** 2) * e_a + bounds.C_EXP * u * t
    return _outer(x, y, t, e_f)


def _outer(x: arb, y: arb, f_abs: arb, e_f: arb) -> arb:
    u = bounds.U
    e_s = e_f + u * (1 + f_abs + e_f)
    half = x.abs_upper() / 2 * e_s
    return half + (bounds.C_IN + 1) * u * (y.abs_upper() + half)


def gelu(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x_arr = exact._f64(inputs, "x", 2)
    form = _form(options)
    xs = am.from_array(x_arr).entries()
    if form == "tanh":
        k, c = (2 / arb.pi()).sqrt(), _cubic()
        ys = [x / (1 + (-2 * k * (x + c * x**3)).exp()) for x in xs]
    else:
        ys = [x * (-x / arb(2).sqrt()).erfc() / 2 for x in xs]
    e = None
    if g.track:
        rule = tanh_form_error if form == "tanh" else erf_form_error
        e = am.build(*x_arr.shape, [rule(x, y) for x, y in zip(xs, ys, strict=True)])
    return {"y": Out(T(am.build(*x_arr.shape, ys), e), x_arr.shape)}


exact.register_graph("gelu", gelu)
