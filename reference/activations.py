"""Activation functions in float64 NumPy: ``gelu``, in its erf form and its tanh approximation.

Layout: tokens are rows (n x d); the function applies to every element. ``approximate`` is torch's
option: ``"none"`` (the default) is ``x Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))``, ``"tanh"`` is
``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`` (GPT-2's). The two differ by up to ~1e-3,
so which one a port computes is a declared option, never a tolerance.
"""

from __future__ import annotations

import math

import numpy as np
from attention_ports.reference.validate import as_float_matrix, check_finite

APPROXIMATIONS = ("none", "tanh")
TANH_CUBIC = 0.044715  # the cubic coefficient of the tanh approximation (Hendrycks and Gimpel, 2016)

_erf = np.vectorize(math.erf, otypes=[np.float64])  # NumPy has no erf; the C library's, per element


def gelu(x: np.ndarray, approximate: str | None = None) -> np.ndarray:
    """GELU of every element of ``x``; ``approximate`` is ``"none"`` (erf, the default) or ``"tanh"``."""
    x = as_float_matrix(x, "x")
    check_finite(x, "x")
    form = "none" if approximate is None else approximate
    if form not in APPROXIMATIONS:
        raise ValueError(f"approximate must be one of {', '.join(map(repr, APPROXIMATIONS))}; got {approximate!r}")
    if form == "tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + TANH_CUBIC * x**3)))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))
