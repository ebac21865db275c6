"""Argument checks shared by the reference operations."""

from __future__ import annotations

import numpy as np


def float_dtype(a: object) -> type:
    """float32 stays float32 (the float32 tier runs the reference in it); the rest is float64."""
    return np.float32 if getattr(a, "dtype", None) == np.float32 else np.float64


def as_float_matrix(a: object, name: str) -> np.ndarray:
    arr = np.asarray(a, dtype=float_dtype(a))
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (tokens x features); got shape {arr.shape}")
    return arr


def check_finite(arr: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(
            f"{name} (shape {arr.shape}) must be finite; found {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}"
        )


def token_rows(x: object, name: str = "x") -> np.ndarray:
    """A finite matrix of at least one token (row) and one feature, in its float dtype."""
    arr = as_float_matrix(x, name)
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least one token and one feature; got shape {arr.shape}")
    check_finite(arr, name)
    return arr
