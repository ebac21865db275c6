"""A port's optional declaration: which operations it offers, and its masked-query convention.

A port file may define one object named ``attention_ports`` (ports/CONTRACT.md):

    R:     attention_ports <- list(operations = c("softmax", ...), masked_query = "zeros")
    Julia: const attention_ports = (operations = ["softmax", ...], masked_query = "zeros")

The workers only find it and send it as it is (protocol value); this module is the one place
that checks it, for both languages, so both say the same things about the same mistakes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attention_ports.runtimes.protocol import Unsupported
from attention_ports.spec import ops
from attention_ports.spec.conventions import CONVENTIONS as MASKED_QUERY

FIELDS = ("operations", "masked_query")


class DeclarationError(ValueError):
    """A declaration that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Declaration:
    present: bool = False
    operations: frozenset[str] | None = None  # None: every contract function the file defines
    masked_query: str = "zeros"

    def offers(self, op: str) -> bool:
        return self.operations is None or op in self.operations

    def describe(self) -> str:
        if not self.present:
            return ""
        ops_text = "all it defines" if self.operations is None else ", ".join(sorted(self.operations)) or "none"
        return f"declares operations: {ops_text}; masked_query = {self.masked_query}"


NONE = Declaration()


def _kind(value: Any) -> str:
    if isinstance(value, Unsupported):
        return f"a {value.type}"
    if isinstance(value, np.ndarray):
        return f"a numeric array of shape {value.shape}"
    if isinstance(value, dict):
        return "a named list / NamedTuple"
    if isinstance(value, list):
        return f"a vector of {len(value)}"
    return f"{type(value).__name__} {value!r}"


def _strings(value: Any) -> list[str] | None:
    """The strings of a character vector / Vector{String} / a single string; None if not that."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def parse(raw: Any, where: str, language: str) -> Declaration:
    """Check what a worker found under ``attention_ports`` in ``where`` (a file or folder).

    ``language`` is "r" or "julia": it decides how a field is named in messages
    (``attention_ports$operations`` / ``attention_ports.operations``).
    """
    if raw is None:
        return NONE
    sep = "$" if language == "r" else "."
    example = (
        'attention_ports <- list(operations = c("softmax"), masked_query = "zeros")'
        if language == "r"
        else 'const attention_ports = (operations = ["softmax"], masked_query = "zeros")'
    )
    if not isinstance(raw, dict):
        raise DeclarationError(f"{where}: attention_ports must be {_kind({})}, like {example}; got {_kind(raw)}")
    unknown = [k for k in raw if k not in FIELDS]
    if unknown:
        raise DeclarationError(
            f"{where}: attention_ports has unknown field(s) {', '.join(map(repr, unknown))}; "
            f"the fields are {', '.join(FIELDS)}"
        )
    operations: frozenset[str] | None = None
    if "operations" in raw:
        names = _strings(raw["operations"])
        field = f"attention_ports{sep}operations"
        if names is None:
            raise DeclarationError(
                f"{where}: {field} must be a vector of operation names; got {_kind(raw['operations'])}"
            )
        bad = [n for n in names if n not in ops.OPS]
        if bad:
            raise DeclarationError(
                f"{where}: {field} names {', '.join(map(repr, bad))}, not contract operation(s); "
                f"the operations are {', '.join(ops.OPS)}"
            )
        operations = frozenset(names)
    masked_query = "zeros"
    if "masked_query" in raw:
        field = f"attention_ports{sep}masked_query"
        values = _strings(raw["masked_query"])
        if values is None or len(values) != 1:
            raise DeclarationError(
                f"{where}: {field} must be one of {', '.join(map(repr, MASKED_QUERY))}; "
                f"got {_kind(raw['masked_query'])}"
            )
        if values[0] not in MASKED_QUERY:
            raise DeclarationError(
                f"{where}: {field} = {values[0]!r} is not one of {', '.join(map(repr, MASKED_QUERY))}"
            )
        masked_query = values[0]
    return Declaration(True, operations, masked_query)
