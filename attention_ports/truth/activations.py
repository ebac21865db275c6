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

The rules hold for every point of a ball ``x`` (an input known to within its radius): every
quantity that grows the bound is taken at the ball's upper end, and the distance ``near`` at
which the derivative of erf or tanh is taken at its lower end.

**An input that carries an error** (``gelu_carried``: the feed-forward's hidden layer, computed
from a product that is itself off by up to e): a correct implementation computes the formulation
above at some x' with ``|x' - x| <= e``, so::

    |gelu'(x') - gelu(x)| <= |gelu(x') - gelu(x)| + |gelu'(x') - gelu(x')|
                         <= max_{|t - x| <= e} |gelu'(t)| e  +  max_{|t - x| <= e} rule(t)

the first by the mean value theorem (no second-order term: the maximum over the ball is taken
rigorously, the derivative evaluated in ball arithmetic on ``[x - e, x + e]``), the second the
rule above evaluated on that ball. The derivatives: erf form ``Phi(x) + x phi(x)``; tanh form
``0.5 (1 + tanh a) + 0.5 x (1 - tanh(a)^2) sqrt(2/pi) (1 + 3 c x^2)``.
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
    zb = x / arb(2).sqrt()
    z, z_low = zb.abs_upper(), zb.abs_lower()
    e_z = (bounds.C_IN + 2) * u * z
    near = z_low - e_z if z_low > e_z else arb(0)  # exp(-near^2): largest at the ball's lower end
    e_f = 2 / arb.pi().sqrt() * (-(near * near)).exp() * e_z + bounds.C_EXP * u * x.erf().abs_upper()
    return _outer(x, y, x.erf().abs_upper(), e_f)


def tanh_form_error(x: arb, y: arb) -> arb:
    """The error bound of ``0.5 x (1 + tanh(sqrt(2/pi) (x + c x^3)))`` at x: the module's rule."""
    u = bounds.U
    c = _cubic()
    xa = x.abs_upper()
    cube = c * xa**3
    k = (2 / arb.pi()).sqrt()
    p = (x + c * x * x * x).abs_upper()
    e_p = 6 * u * cube + 2 * u * xa + bounds.C_IN * u * xa * (1 + 3 * c * xa * xa)
    e_a = k * e_p + 4 * u * k * (p + e_p)
    a = k * (x + c * x * x * x)
    a_low = a.abs_lower()  # 1 - tanh(near)^2: largest at the ball's lower end
    near = a_low - e_a if a_low > e_a else arb(0)
    t = a.tanh().abs_upper()
    e_f = (1 - near.tanh() ** 2) * e_a + bounds.C_EXP * u * t
    return _outer(x, y, t, e_f)


def _outer(x: arb, y: arb, f_abs: arb, e_f: arb) -> arb:
    u = bounds.U
    e_s = e_f + u * (1 + f_abs + e_f)
    half = x.abs_upper() / 2 * e_s
    return half + (bounds.C_IN + 1) * u * (y.abs_upper() + half)


def _value(x: arb, form: str) -> arb:
    """gelu(x) in ball arithmetic (the module's formulas: no cancellation for x << 0)."""
    if form == "tanh":
        k, c = (2 / arb.pi()).sqrt(), _cubic()
        return x / (1 + (-2 * k * (x + c * x * x * x)).exp())
    return x * (-x / arb(2).sqrt()).erfc() / 2


def _derivative(x: arb, form: str) -> arb:
    """gelu'(x), an enclosure of its values over the ball x (module docstring)."""
    if form == "tanh":
        k, c = (2 / arb.pi()).sqrt(), _cubic()
        t = (k * (x + c * x * x * x)).tanh()
        return (1 + t) / 2 + x / 2 * (1 - t * t) * k * (1 + 3 * c * x * x)
    return (-x / arb(2).sqrt()).erfc() / 2 + x * (-(x * x) / 2).exp() / (2 * arb.pi()).sqrt()


def gelu_carried(x: arb, e: arb, form: str) -> arb:
    """The error bound of gelu at an input x computed with error at most e: the module's rule."""
    ball = x + arb(0, e)  # every x' with |x' - x| <= e
    rule = tanh_form_error if form == "tanh" else erf_form_error
    return _derivative(ball, form).abs_upper() * e + rule(ball, _value(ball, form)).abs_upper()


def gelu_t(g: Graph, x: T, form: str) -> T:
    """gelu entrywise on a value/bound matrix: ``rule`` for exact inputs, ``gelu_carried`` else."""
    xs = x.v.entries()
    ys = [_value(xi, form) for xi in xs]
    e = None
    if g.track:
        if x.e is None:
            rule = tanh_form_error if form == "tanh" else erf_form_error
            errs = [rule(xi, yi) for xi, yi in zip(xs, ys, strict=True)]
        else:
            errs = [gelu_carried(xi, ei, form) for xi, ei in zip(xs, x.e.entries(), strict=True)]
        e = am.build(*x.shape, errs)
    return T(am.build(*x.shape, ys), e)


def gelu(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x_arr = exact._f64(inputs, "x", 2)
    return {"y": Out(gelu_t(g, exact._exact(x_arr), _form(options)), x_arr.shape)}


exact.register_graph("gelu", gelu)
