"""Normalisation layers in float64 NumPy: ``layer_norm`` and ``rms_norm`` (the transformer's norms).

Layout: tokens are rows (n x d); each row is normalised over its d features, as
``torch.nn.functional.layer_norm(x, (d,))`` and ``torch.nn.functional.rms_norm(x, (d,))``. The
optional ``weight`` (gain) and ``bias`` are vectors of length d. ``eps`` is added to the variance
(or the mean square) *inside* the square root, and the variance is the biased one (divided by d).

The variance is computed in two passes (the mean first, then the mean of the squared deviations):
the one-pass ``mean(x^2) - mean(x)^2`` loses every digit on a nearly constant row with a large
mean, which is the porting bug the catalogue's cancellation cases catch.
"""

from __future__ import annotations

import numpy as np
from attention_ports.reference.validate import check_finite, token_rows

DEFAULT_EPS = 1e-5  # torch's default for both layer_norm and rms_norm (nn.LayerNorm, nn.RMSNorm)


def _vector(a: object, name: str, d: int, x: np.ndarray) -> np.ndarray:
    arr = np.asarray(a, dtype=x.dtype)
    if arr.shape != (d,):
        raise ValueError(f"{name} must be a vector of length d = {d} (x is {x.shape}); got shape {arr.shape}")
    check_finite(arr, name)
    return arr


def _eps(eps: float | None) -> float:
    eps = DEFAULT_EPS if eps is None else eps
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not np.isfinite(eps) or eps < 0:
        raise ValueError(f"eps must be a finite number >= 0; got {eps!r}")
    return float(eps)


def layer_norm(
    x: np.ndarray, weight: np.ndarray | None = None, bias: np.ndarray | None = None, eps: float | None = None
) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` per row; var is the biased variance (over d)."""
    x = token_rows(x)
    d = x.shape[1]
    e = _eps(eps)
    mean = np.mean(x, axis=1, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=1, keepdims=True)  # two passes: no cancellation
    y = centred / np.sqrt(var + e)
    if weight is not None:
        y = y * _vector(weight, "weight", d, x)
    if bias is not None:
        y = y + _vector(bias, "bias", d, x)
    return y


def rms_norm(x: np.ndarray, weight: np.ndarray | None = None, eps: float | None = None) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * weight`` per row (no centring, no bias)."""
    x = token_rows(x)
    d = x.shape[1]
    e = _eps(eps)
    y = x / np.sqrt(np.mean(x * x, axis=1, keepdims=True) + e)
    if weight is not None:
        y = y * _vector(weight, "weight", d, x)
    return y
