"""Argument checks shared by the reference operations."""

from __future__ import annotations

import numpy as np


def as_float_matrix(a: object, name: str) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (tokens x features); got shape {arr.shape}")
    return arr


def check_finite(arr: np.ndarray, name: str) -> None:
    if not np.all(np.isfinite(arr)):
        bad = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(
            f"{name} (shape {arr.shape}) must be finite; found {arr[tuple(bad)]} at index {tuple(int(i) for i in bad)}"
        )
