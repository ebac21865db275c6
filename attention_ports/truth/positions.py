"""Exact truth and error bounds of the position operations (``reference/positions.py``).

The graphs compute ``theta_i = base^(-2i/d)``, the angles ``p theta_i`` and their sines and
cosines in arb ball arithmetic (enclosures of the exact values, rounded by the engine with a
certificate). The bound pass charges what a correct floating-point implementation may differ
by: the rule below, also written in docs/truth-and-bounds.md ("Positions: angles, sin/cos and
the rotation"). Every rule reads the unit roundoff ``bounds.U`` and ``bounds.C_EXP`` at call time,
so a precision tier evaluates the same analysis at its own format.

**Angles.** ``theta_i`` is computed as ``base ** (-2i/d)``, ``1 / base ** (2i/d)`` or
``exp(-(2i/d) log(base))`` (the exponent one or two roundings, log and exp/pow ``C_EXP`` ulps
each, a division one): with ``a_i = (2i/d) |log base|``, its relative error is at most
``rho_theta = (C_EXP + 2) (1 + a_i) u`` (the exponent's relative error times ``a_i`` is the
relative error it gives ``theta_i``). The angle ``p theta_i`` (or ``p / base^(2i/d)``) adds one
rounding: ``e_phi = (rho_theta + u) |phi|`` with ``|phi| = |p| theta_i``; so the angle's absolute
error grows with the position (~4e-13 at p = 4095), which a correct sine must pass on.

**sin / cos** of the computed angle, ``C_EXP`` ulps of their result: by the mean value theorem
``|sin(phi + dphi) - sin(phi)| <= (|cos phi| + |dphi|) |dphi|``, so::

    e_sin = (|cos phi| + e_phi) e_phi + C_EXP u (|sin phi| + e_phi)      (cos: swap sin and cos)

**Rotation** of a pair (a, b): ``a cos - b sin`` and ``b cos + a sin``, two products and a sum
(two roundings, or one with FMA), the inputs exact::

    e_out = |a| e_cos + |b| e_sin + gamma(2) (|a| (|cos| + e_cos) + |b| (|sin| + e_sin))

The sinusoidal table is the sin/cos rule itself. Pairing permutes features only (exact).

**At a storage tier** (bounds.py, "Mixed precision"; ``spec.precision.STORAGE_POINTS``): the table
is computed in float32 and stored (the engine's output rounding); the rotation's inputs are storage
values, and its declared rounding points are the cos and sin tables (Hugging Face's
``cos.to(x.dtype)``) and each of the four products (``x * cos`` on bfloat16 tensors), then the
sum, stored as the output. So ``e_cos`` and ``e_sin`` become ``e + u_s (|t| + e) + tau_s`` and each
product adds ``u_s |a| (|cos| + e_cos) + tau_s`` (``_stored_product``); a kernel that keeps them in
float32 (Meta's complex product in float32, then ``type_as``) rounds at fewer points and is covered.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flint import arb

from attention_ports.spec.pairing import PAIRINGS
from attention_ports.truth import arbmat as am
from attention_ports.truth import bounds, exact
from attention_ports.truth.exact import Graph, InputError, Out, T, _f64

DEFAULT_BASE = 10000.0


def _base(options: Mapping[str, Any]) -> float:
    base = options.get("base")
    if base is None:
        return DEFAULT_BASE
    if isinstance(base, bool) or not isinstance(base, (int, float)) or not math.isfinite(base) or base <= 0:
        raise InputError(f"base must be a finite positive number; got {base!r}")
    return float(base)


def _even(d: int, name: str) -> None:
    if d < 2 or d % 2:
        raise InputError(f"{name} must be even and at least 2 (features are rotated in pairs); got {d}")


def _int_option(options: Mapping[str, Any], name: str) -> int:
    value = options.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise InputError(f"option {name!r} must be a positive integer; got {value!r}")
    return int(value)


class Angles:
    """sin and cos of ``p theta_i`` for every position p and frequency i, with their bounds."""

    def __init__(self, g: Graph, positions: list[float], d: int, base: float) -> None:
        half = d // 2
        log_base = arb(base).log()
        thetas = [arb(base) ** (arb(-2 * i) / d) for i in range(half)]  # exact balls
        self.sin: list[list[arb]] = []
        self.cos: list[list[arb]] = []
        self.e_sin: list[list[arb]] = []
        self.e_cos: list[list[arb]] = []
        u, c_exp = bounds.U, bounds.C_EXP  # read at call time: a tier's format
        for p in positions:
            phis = [arb(p) * t for t in thetas]
            self.sin.append([phi.sin() for phi in phis])
            self.cos.append([phi.cos() for phi in phis])
            if not g.track:
                continue
            es, ec = [], []
            for i, phi in enumerate(phis):
                a_i = (arb(2 * i) / d * log_base).abs_upper()
                rho_theta = (c_exp + 2) * (1 + a_i) * u
                e_phi = (rho_theta + u) * phi.abs_upper()
                s_abs, c_abs = self.sin[-1][i].abs_upper(), self.cos[-1][i].abs_upper()
                es.append((c_abs + e_phi) * e_phi + c_exp * u * (s_abs + e_phi))
                ec.append((s_abs + e_phi) * e_phi + c_exp * u * (c_abs + e_phi))
            self.e_sin.append(es)
            self.e_cos.append(ec)


def sinusoidal_positions(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    n, d = _int_option(options, "n"), _int_option(options, "d")
    _even(d, "d")
    ang = Angles(g, [float(p) for p in range(n)], d, _base(options))
    values: list[arb] = []
    errors: list[arb] = []
    for p in range(n):
        for i in range(d // 2):
            values += [ang.sin[p][i], ang.cos[p][i]]
            if g.track:
                errors += [ang.e_sin[p][i], ang.e_cos[p][i]]
    e = am.build(n, d, errors) if g.track else None
    return {"table": Out(T(am.build(n, d, values), e), (n, d))}


def pair_columns(d: int, pairing: str) -> tuple[list[int], list[int]]:
    """The features (a, b) of each pair i, in the reference layout."""
    half = d // 2
    if pairing == "halves":
        return list(range(half)), list(range(half, d))
    return list(range(0, d, 2)), list(range(1, d, 2))


def rotary_embedding(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    x = _f64(inputs, "x", 2)
    n, d = x.shape
    _even(d, "x's number of features")
    pairing = options.get("pairing") or PAIRINGS[0]
    if pairing not in PAIRINGS:
        raise InputError(f"pairing must be one of {', '.join(PAIRINGS)}; got {pairing!r}")
    if inputs.get("positions") is None:
        positions = [float(p) for p in range(n)]
    else:
        pos = _f64(inputs, "positions", 1)
        if pos.shape != (n,):
            raise InputError(f"positions must have one value per token of x (shape ({n},)); got shape {pos.shape}")
        positions = pos.tolist()
    ang = Angles(g, positions, d, _base(options))
    cols_a, cols_b = pair_columns(d, pairing)
    xs = x.tolist()
    values: list[list[arb]] = [[arb(0)] * d for _ in range(n)]
    errors: list[list[arb]] = [[arb(0)] * d for _ in range(n)]
    two = bounds.gamma(2)
    for p in range(n):
        for i, (ja, jb) in enumerate(zip(cols_a, cols_b, strict=True)):
            a, b = arb(xs[p][ja]), arb(xs[p][jb])
            s, c = ang.sin[p][i], ang.cos[p][i]
            values[p][ja] = a * c - b * s
            values[p][jb] = b * c + a * s
            if g.track:
                a_abs, b_abs = abs(xs[p][ja]), abs(xs[p][jb])
                s_abs, c_abs = s.abs_upper(), c.abs_upper()
                # a storage tier's rounding points (module docstring): the tables stored, then each
                # product; both no-ops outside one
                es, ec = bounds.storage_point(s_abs, ang.e_sin[p][i]), bounds.storage_point(c_abs, ang.e_cos[p][i])
                a_c, a_s = _stored_product(a_abs, c_abs, ec), _stored_product(a_abs, s_abs, es)
                b_c, b_s = _stored_product(b_abs, c_abs, ec), _stored_product(b_abs, s_abs, es)
                errors[p][ja] = (
                    a_abs * ec + b_abs * es + two * (a_abs * (c_abs + ec) + b_abs * (s_abs + es)) + a_c + b_s
                )
                errors[p][jb] = (
                    b_abs * ec + a_abs * es + two * (b_abs * (c_abs + ec) + a_abs * (s_abs + es)) + b_c + a_s
                )
    flat_v = [v for row in values for v in row]
    e = am.build(n, d, [v for row in errors for v in row]) if g.track else None
    return {"output": Out(T(am.build(n, d, flat_v), e), (n, d))}


def _stored_product(x_abs: float, t_abs: arb, e_t: arb) -> arb:
    """The rounding to storage of a product ``x t`` (t off by e_t) at a storage tier: u_s |x| (|t| +
    e_t) + tau_s; 0 elsewhere (module docstring, "Mixed precision")."""
    return bounds.storage_point(x_abs * (t_abs + e_t), arb(0))


exact.register_graph("sinusoidal_positions", sinusoidal_positions)
exact.register_graph("rotary_embedding", rotary_embedding)
