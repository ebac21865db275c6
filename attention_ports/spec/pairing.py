"""Declared convention: which features a rotary embedding (RoPE) rotates together.

Correct implementations differ here, as ports of different models do (ports/CONTRACT.md,
"Rotary pairing"), so a port declares its pairing instead of being called wrong:

- ``halves`` (the default): feature i with feature i + d/2: GPT-NeoX, Llama and Mistral in
  Hugging Face transformers (``rotate_half``), torchtune's Llama 3;
- ``interleaved``: features 2i and 2i + 1: GPT-J, the RoFormer paper, Meta's own Llama code
  (the pairs as complex numbers).

A case's truth is computed for the pairing its option ``pairing`` names. The reference and torch
take that option as an argument; a port implements one pairing and declares it
(``rope_pairing`` in its ``attention_ports`` object), its function taking no ``pairing`` argument.
The two pairings differ only by a permutation of the features, which is exact, so a port is
judged on every case whatever its pairing: where the case's pairing is the other one,
:func:`for_port` gives the port the features permuted into its pairing and permutes its output
back. Judged against one set of expected outputs, each case needs no second truth.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from attention_ports.reference.positions import PAIRINGS  # the names; the first is the default

DEFAULT = PAIRINGS[0]
OPTION = "pairing"  # the case option naming the pairing of the case's truth
FIELD = "rope_pairing"  # the declaration's field (attention_ports/runtimes/declaration.py)
OPS = ("rotary_embedding",)

MEANING = {
    "halves": "feature i paired with feature i + d/2 (rotate_half)",
    "interleaved": "features 2i and 2i + 1 paired",
}
USED_BY = {
    "halves": "GPT-NeoX; Llama and Mistral in Hugging Face transformers (rotate_half)",
    "interleaved": "GPT-J; the RoFormer paper; Meta's Llama code (complex numbers)",
}

Arrays = dict[str, np.ndarray]


def case_pairing(options: Mapping[str, Any]) -> str:
    return options.get(OPTION) or DEFAULT


def sources(d: int, want: str, port: str) -> np.ndarray:
    """Columns ``src`` such that ``port``'s pairing of ``x[:, src]`` is ``want``'s pairing of ``x``."""
    half = d // 2
    interleaved_to_halves = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    if want == port:
        return np.arange(d)
    if (want, port) == ("interleaved", "halves"):  # port pair (i, i + d/2) = case pair (2i, 2i + 1)
        return interleaved_to_halves
    assert half * 2 == d
    return np.argsort(interleaved_to_halves)  # port pair (2i, 2i + 1) = case pair (i, i + d/2)


def for_port(
    op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], declared: str | None
) -> tuple[Mapping[str, np.ndarray], Mapping[str, Any], Callable[[Arrays], Arrays]]:
    """The call an implementation gets for a case, and how to read its outputs back.

    ``declared`` is the implementation's pairing (None: it takes the ``pairing`` option itself,
    as the reference and torch do). Other operations pass through unchanged.
    """
    if op not in OPS or declared is None:
        return inputs, options, lambda out: out
    rest = {k: v for k, v in options.items() if k != OPTION}
    x = np.asarray(inputs["x"])
    want = case_pairing(options)
    if want == declared or x.ndim != 2 or x.shape[1] % 2:
        return inputs, rest, lambda out: out  # nothing to permute (a bad x is the port's to reject)
    src = sources(x.shape[1], want, declared)
    back = np.argsort(src)

    def undo(out: Arrays) -> Arrays:
        y = out.get("output")
        if y is None or np.ndim(y) != 2 or np.shape(y)[1] != len(src):
            return out  # a wrong shape is judged as it is
        return {**out, "output": np.asarray(y)[:, back]}

    return {**inputs, "x": x[:, src]}, rest, undo


def declaration_hint(pairing: str) -> str:
    """How a port says it pairs features as ``pairing`` (ports/CONTRACT.md, "Rotary pairing")."""
    return f'R: attention_ports <- list({FIELD} = "{pairing}"); Julia: const attention_ports = ({FIELD} = "{pairing}",)'
