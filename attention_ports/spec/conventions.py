"""Declared conventions: what a query whose mask removes every key gets.

Here, and only here, correct implementations genuinely differ, so the suite does not call the
difference a bug (Wycheproof's "acceptable" outcomes). A case whose mask removes every key of a
query carries the flag ``masked_query`` and one expected set of outputs per convention; each
implementation is judged against the set its declared convention implies (``impl.masked_query_for``).

- ``zeros`` (the default, the reference's): zero weights and a zero attention output in that row;
  for multi-head attention the concatenated head outputs are zero, so the output row is ``b_o``
  (zero without ``b_o``). PyTorch's ``F.scaled_dot_product_attention`` (torch >= 2.5).
- ``nan``: NaN weights and NaN outputs in that row (softmax of an all ``-Inf`` row is 0/0):
  NNlib.jl, torch < 2.5's SDPA, and torch's ``nn.MultiheadAttention`` today.
- ``uniform``: weights 1/n_k and the mean of the value rows: the CRAN ``attention`` package.

Softmax has no convention: a slice that is entirely ``-Inf`` is NaN by definition (the contract).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# The one home of the names (a port's declaration, the truth engine, the fixture store, index and
# schema, the diagnoses and the reports all take them from here); the first is the default.
CONVENTIONS: tuple[str, ...] = ("zeros", "nan", "uniform")
DEFAULT = "zeros"
FLAG = "masked_query"  # the catalogue flag of a case whose expected outputs depend on the convention
ATTENTION_OPS = ("scaled_dot_product_attention", "self_attention", "multi_head_attention")

# What each convention means for a fully masked query, in the words a failure message uses.
MEANING = {
    "zeros": "zero weights and a zero attention output (multi-head: the output row is b_o)",
    "nan": "NaN weights and NaN outputs in that row",
    "uniform": "weights 1/n_k and the mean of the value rows (multi-head: that, through w_o and b_o)",
}
# Who follows each convention (the tables of docs/fixtures.md, "Conventions", and ports/CONTRACT.md say
# the same).
USED_BY = {
    "zeros": "the reference; PyTorch's F.scaled_dot_product_attention (torch >= 2.5)",
    "nan": "NNlib.jl; torch < 2.5's scaled_dot_product_attention; torch's nn.MultiheadAttention",
    "uniform": "the CRAN attention package",
}


def dead_rows(op: str, inputs: Mapping[str, np.ndarray]) -> tuple[int, ...]:
    """The query rows whose mask removes every key (empty for softmax and the classifier).

    A boolean mask removes a key with False, an additive one with -inf; a finite additive value,
    however negative, keeps the key (its weight may underflow, but the row is still defined).
    """
    if op not in ATTENTION_OPS or inputs.get("mask") is None:
        return ()
    mask = np.asarray(inputs["mask"])
    if mask.ndim != 2 or mask.shape[1] == 0:
        return ()
    keep = mask if mask.dtype == bool else ~np.isneginf(mask)
    return tuple(int(i) for i in np.flatnonzero(~keep.any(axis=1)))


def declaration_hint(convention: str) -> str:
    """How a port says it follows ``convention`` (ports/CONTRACT.md, "Declaring what a port offers")."""
    return (
        f'R: attention_ports <- list(masked_query = "{convention}"); '
        f'Julia: const attention_ports = (masked_query = "{convention}",)'
    )
