"""Mask helpers. Boolean masks mean True = keep; additive masks are added to the scores."""

from __future__ import annotations

import numpy as np


def causal_mask(n_q: int, n_k: int | None = None) -> np.ndarray:
    """Boolean (n_q, n_k) mask keeping key j for query i when j <= i (seed 002's tril)."""
    n_k = n_q if n_k is None else n_k
    return np.tril(np.ones((n_q, n_k), dtype=bool))


def key_padding_mask(n_q: int, n_k: int, valid: int) -> np.ndarray:
    """Boolean (n_q, n_k) mask keeping only the first ``valid`` keys (the rest are padding)."""
    if not 0 <= valid <= n_k:
        raise ValueError(f"key_padding_mask: valid={valid} must be in [0, n_k={n_k}]")
    keep = np.zeros((n_q, n_k), dtype=bool)
    keep[:, :valid] = True
    return keep


def as_additive_mask(mask: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """Return ``mask`` as float64 additive form (0 keep, -inf drop) after checking its shape.

    Boolean masks become 0 / -inf. Additive masks may hold any finite values or -inf; NaN and
    +inf are rejected because they cannot mean anything sensible for a score.
    """
    mask = np.asarray(mask)
    if mask.shape != shape:
        raise ValueError(f"mask must have shape (n_q, n_k) = {shape}; got {mask.shape}")
    if mask.dtype == bool:
        return np.where(mask, 0.0, -np.inf)
    mask = mask.astype(np.float32 if mask.dtype == np.float32 else np.float64)
    if np.isnan(mask).any() or np.isposinf(mask).any():
        raise ValueError(f"additive mask (shape {mask.shape}) may hold finite values and -inf only; found NaN or +inf")
    return mask
