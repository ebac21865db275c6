"""Losses in float64 NumPy: ``lm_loss``, the next-token cross-entropy of a language model.

Layout: ``logits`` is (n, vocab), one row of next-token logits per position (the rows of
``gpt_forward``'s output); ``targets`` holds n token ids, 0-based. As
``torch.nn.functional.cross_entropy(logits, targets, ignore_index=..., reduction="mean")``: the
mean, over the positions counted, of ``logsumexp(logits_i) - logits_i[targets_i]``. A position
whose target equals ``ignore_index`` (a padding token's id, or an id outside the vocabulary such
as -1 or torch's -100) is not counted; ``ignore_index`` absent: every position counts.

Every position ignored: the mean over no position is 0 / 0, NaN, as torch returns it (a port that
returns 0 there hides a batch of padding only). The log-sum-exp is stable (the row maximum
subtracted first): logits of order 1e3 overflow a naive ``exp``, logits below -745 underflow it.
"""

from __future__ import annotations

import numbers

import numpy as np
from attention_ports.reference.validate import as_float_matrix, check_finite


def _index(value: object, name: str) -> int:
    """One integer (a 0-D or length-1 array, or a number with an integral value)."""
    if isinstance(value, np.ndarray):
        if value.shape not in ((), (1,)):
            raise ValueError(f"{name} must be a single integer token id; got an array of shape {value.shape}")
        value = value.reshape(()).item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not float(value).is_integer():
        raise ValueError(f"{name} must be an integer token id; got {value!r}")
    return int(value)


def _targets(targets: object, n: int, vocab: int, ignore: int | None) -> np.ndarray:
    arr = np.asarray(targets)
    if arr.shape != (n,):
        raise ValueError(
            f"targets must be a vector of n = {n} token ids (logits is {n} x {vocab}); got shape {arr.shape}"
        )
    if arr.dtype.kind not in "iuf" or (arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr)))):
        raise ValueError(f"targets must hold integer token ids; got {arr!r}")
    ids = arr.astype(np.int64)
    counted = ids != ignore if ignore is not None else np.ones(n, dtype=bool)
    bad = counted & ((ids < 0) | (ids >= vocab))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"targets[{i}] = {ids[i]} is not a token id in [0, {vocab - 1}]"
            + (f" nor ignore_index = {ignore}" if ignore is not None else " (no ignore_index given)")
        )
    return ids


def lm_loss(logits: np.ndarray, targets: np.ndarray, ignore_index: int | np.ndarray | None = None) -> np.ndarray:
    """Mean over the counted positions of ``logsumexp(logits_i) - logits_i[targets_i]`` (NaN if none),
    as a 0-D array of the logits' float type."""
    z = as_float_matrix(logits, "logits")
    n, vocab = z.shape
    if n == 0 or vocab == 0:
        raise ValueError(f"logits must hold at least one position and one token; got shape {z.shape}")
    check_finite(z, "logits")
    ignore = None if ignore_index is None else _index(ignore_index, "ignore_index")
    ids = _targets(targets, n, vocab, ignore)
    rows = np.flatnonzero(ids != ignore) if ignore is not None else np.arange(n)
    if rows.size == 0:
        return np.array(np.nan, dtype=z.dtype)  # the mean over no position: 0 / 0, as torch
    kept = z[rows]
    peak = kept.max(axis=1)
    lse = peak + np.log(np.exp(kept - peak[:, None]).sum(axis=1))
    losses = lse - kept[np.arange(rows.size), ids[rows]]
    return np.asarray(losses.sum() / z.dtype.type(rows.size))
