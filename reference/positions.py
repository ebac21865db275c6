"""Position operations in NumPy: sinusoidal encodings and rotary embeddings (RoPE).

Layout: tokens are rows (n x d). Positions are the tokens' position *values* (0 for the first
token by default), not indices: the angle of token p and frequency i is ``p * theta_i`` with
``theta_i = base^(-2i/d)``, i = 0 .. d/2 - 1.

Rotary embeddings rotate pairs of features by those angles. Which features form a pair is a
convention (ports/CONTRACT.md, "Rotary pairing"):

- ``"halves"``: feature i with feature i + d/2 (GPT-NeoX, Llama in Hugging Face: ``rotate_half``);
- ``"interleaved"``: features 2i and 2i + 1 (GPT-J, the RoFormer paper, Meta's Llama as complex
  numbers).
"""

from __future__ import annotations

import numpy as np
from attention_ports.reference.validate import as_float_matrix, check_finite, float_dtype

PAIRINGS = ("halves", "interleaved")


def _even_width(d: int, name: str) -> None:
    if d < 2 or d % 2:
        raise ValueError(f"{name} must be even and at least 2 (features are rotated in pairs); got {d}")


def _base(base: float) -> float:
    if isinstance(base, bool) or not np.isfinite(base) or base <= 0:
        raise ValueError(f"base must be a finite positive number; got {base!r}")
    return float(base)


def _inverse_frequencies(d: int, base: float, dtype: type) -> np.ndarray:
    """theta_i = base^(-2i/d) for i = 0 .. d/2 - 1, in ``dtype``."""
    exponents = np.arange(0, d, 2, dtype=dtype) / dtype(d)
    return dtype(1) / np.power(dtype(base), exponents)


def sinusoidal_positions(n: int, d: int, base: float = 10000.0) -> np.ndarray:
    """The (n, d) table of Vaswani et al.: PE[p, 2i] = sin(p theta_i), PE[p, 2i+1] = cos(p theta_i)."""
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n (the number of positions) must be a positive integer; got {n!r}")
    if isinstance(d, bool) or int(d) != d:
        raise ValueError(f"d (the number of features) must be an integer; got {d!r}")
    n, d = int(n), int(d)
    _even_width(d, "d")
    angles = np.outer(np.arange(n, dtype=np.float64), _inverse_frequencies(d, _base(base), np.float64))
    out = np.empty((n, d))
    out[:, 0::2] = np.sin(angles)
    out[:, 1::2] = np.cos(angles)
    return out


def rotary_embedding(
    x: np.ndarray, positions: np.ndarray | None = None, base: float = 10000.0, pairing: str = "halves"
) -> np.ndarray:
    """RoPE: x (n tokens x d features, d even) with each feature pair rotated by p * theta_i.

    ``positions``: one position value per token (default 0 .. n - 1). A pair (a, b) becomes
    (a cos - b sin, b cos + a sin); ``pairing`` says which features form the pairs.
    """
    x = as_float_matrix(x, "x")
    check_finite(x, "x")
    n, d = x.shape
    _even_width(d, "x's number of features")
    if pairing not in PAIRINGS:
        raise ValueError(f"pairing must be one of {', '.join(PAIRINGS)}; got {pairing!r}")
    dtype = float_dtype(x)
    if positions is None:
        pos = np.arange(n, dtype=dtype)
    else:
        pos = np.asarray(positions, dtype=dtype)
        if pos.shape != (n,):
            raise ValueError(f"positions must have one value per token of x (shape ({n},)); got shape {pos.shape}")
        check_finite(pos, "positions")
    angles = np.outer(pos, _inverse_frequencies(d, _base(base), dtype))
    cos, sin = np.cos(angles), np.sin(angles)
    if pairing == "halves":
        a, b = x[:, : d // 2], x[:, d // 2 :]
    else:
        a, b = x[:, 0::2], x[:, 1::2]
    ra, rb = a * cos - b * sin, b * cos + a * sin
    out = np.empty_like(x)
    if pairing == "halves":
        out[:, : d // 2], out[:, d // 2 :] = ra, rb
    else:
        out[:, 0::2], out[:, 1::2] = ra, rb
    return out
