"""Small helpers over python-flint's ``arb_mat``: building, slicing, entrywise maps, sums.

Every quantity of the exact engine is a 2-D ``arb_mat`` (a vector is 1 x n, a scalar 1 x 1);
``arb_mat`` multiplies matrices (rigorously, in C), and the entrywise work here goes through
Python lists of ``arb``. Inputs enter as Python floats from ``ndarray.tolist()``: a double is an
exact ``arb``, so no NumPy floating-point operation ever touches a value the engine computes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from flint import arb, arb_mat

ZERO = arb(0)
ONE = arb(1)


def from_array(a: np.ndarray) -> arb_mat:
    """A finite float64 array (0-D, 1-D as one row, or 2-D) as an exact ``arb_mat``."""
    a = np.asarray(a)
    if a.ndim == 0:
        rows = [[float(a.item())]]
    elif a.ndim == 1:
        rows = [[float(v) for v in a.tolist()]]
    elif a.ndim == 2:
        rows = [[float(v) for v in row] for row in a.tolist()]
    else:
        raise ValueError(f"expected at most 2 dimensions, got shape {a.shape}")
    for row in rows:
        for v in row:
            if not math.isfinite(v):
                raise ValueError(f"non-finite value {v} cannot enter ball arithmetic")
    n_cols = len(rows[0]) if rows else 0
    if n_cols == 0 or not rows:
        raise ValueError(f"empty array (shape {a.shape})")
    return arb_mat(rows)


def build(n_rows: int, n_cols: int, entries: Sequence[arb]) -> arb_mat:
    return arb_mat(n_rows, n_cols, list(entries))


def shape(m: arb_mat) -> tuple[int, int]:
    return m.nrows(), m.ncols()


def full(n_rows: int, n_cols: int, value: arb | int | float) -> arb_mat:
    return arb_mat(n_rows, n_cols, [arb(value)] * (n_rows * n_cols))


def zeros(n_rows: int, n_cols: int) -> arb_mat:
    return arb_mat(n_rows, n_cols)


def emap(m: arb_mat, f: Callable[[arb], arb]) -> arb_mat:
    return arb_mat(m.nrows(), m.ncols(), [f(x) for x in m.entries()])


def emul(a: arb_mat, b: arb_mat) -> arb_mat:
    """The entrywise (Hadamard) product."""
    if shape(a) != shape(b):
        raise ValueError(f"entrywise product of shapes {shape(a)} and {shape(b)}")
    return arb_mat(a.nrows(), a.ncols(), [x * y for x, y in zip(a.entries(), b.entries(), strict=True)])


def eabs(m: arb_mat) -> arb_mat:
    """Entrywise upper bounds of ``|m|`` (exact non-negative numbers)."""
    return arb_mat(m.nrows(), m.ncols(), [x.abs_upper() for x in m.entries()])


def rowsum(m: arb_mat) -> arb_mat:
    """(r x c) -> (r x 1): the sum of each row, as one rigorous matrix product with ones."""
    return m * full(m.ncols(), 1, 1)


def colsum(m: arb_mat) -> arb_mat:
    """(r x c) -> (1 x c): the sum of each column."""
    return full(1, m.nrows(), 1) * m


def bcast_rows(row: arb_mat, n_rows: int) -> arb_mat:
    """A (1 x c) row repeated ``n_rows`` times (exact: a product with a column of ones)."""
    return full(n_rows, 1, 1) * row


def bcast_cols(col: arb_mat, n_cols: int) -> arb_mat:
    """A (r x 1) column repeated ``n_cols`` times."""
    return col * full(1, n_cols, 1)


def take_cols(m: arb_mat, start: int, stop: int) -> arb_mat:
    c = m.ncols()
    e = m.entries()
    return arb_mat(m.nrows(), stop - start, [e[i * c + j] for i in range(m.nrows()) for j in range(start, stop)])


def take_rows(m: arb_mat, rows: Sequence[int]) -> arb_mat:
    c = m.ncols()
    e = m.entries()
    return arb_mat(len(rows), c, [e[i * c + j] for i in rows for j in range(c)])


def hcat(blocks: Sequence[arb_mat]) -> arb_mat:
    r = blocks[0].nrows()
    ents = [b.entries() for b in blocks]
    widths = [b.ncols() for b in blocks]
    out = []
    for i in range(r):
        for e, w in zip(ents, widths, strict=True):
            out.extend(e[i * w : (i + 1) * w])
    return arb_mat(r, sum(widths), out)


def vcat(blocks: Sequence[arb_mat]) -> arb_mat:
    c = blocks[0].ncols()
    out = []
    for b in blocks:
        out.extend(b.entries())
    return arb_mat(sum(b.nrows() for b in blocks), c, out)


def rows_of(m: arb_mat) -> list[list[arb]]:
    c = m.ncols()
    e = m.entries()
    return [e[i * c : (i + 1) * c] for i in range(m.nrows())]


def diag(values: Sequence[arb]) -> arb_mat:
    n = len(values)
    return arb_mat(n, n, [values[i] if i == j else ZERO for i in range(n) for j in range(n)])
