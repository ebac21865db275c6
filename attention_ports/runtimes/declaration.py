"""A port's optional declaration: which operations it offers, its masked-query convention, and
the arithmetic it computes in (``precision``: attention_ports/spec/precision.py).

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
from attention_ports.spec import ops, pairing
from attention_ports.spec import precision as formats
from attention_ports.spec.conventions import CONVENTIONS as MASKED_QUERY

FIELDS = ("operations", "masked_query", "precision", pairing.FIELD)

# A message names at most this many of a declaration's bad names, then counts the rest, and shows
# at most SHOWN_CHARS of a value: a declaration of 10,000 unknown names once made a 320 KB message,
# repeated in every output of every case (a 270 MB --json report). docs/ports.md states the cap.
LISTED = 20
SHOWN_CHARS = 80


class DeclarationError(ValueError):
    """A declaration that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Declaration:
    present: bool = False
    operations: frozenset[str] | None = None  # None: every contract function the file defines
    masked_query: str = "zeros"
    precision: str = "float64"  # the port's storage = accumulation format (attention_ports/spec/precision.py)
    rope_pairing: str = pairing.DEFAULT  # the rotary pairing it implements (attention_ports/spec/pairing.py)

    def offers(self, op: str) -> bool:
        return self.operations is None or op in self.operations

    def describe(self) -> str:
        if not self.present:
            return ""
        ops_text = "all it defines" if self.operations is None else ", ".join(sorted(self.operations)) or "none"
        text = f"declares operations: {ops_text}; masked_query = {self.masked_query}"
        if self.rope_pairing != pairing.DEFAULT:
            text = f"{text}; {pairing.FIELD} = {self.rope_pairing}"
        return text if self.precision == "float64" else f"{text}; precision = {self.precision}"


NONE = Declaration()


def _listed(names: list[str]) -> str:
    """The first :data:`LISTED` names, quoted and cut to :data:`SHOWN_CHARS` each, then how many more."""
    shown = ", ".join(_shown(n) for n in names[:LISTED])
    return shown if len(names) <= LISTED else f"{shown} and {len(names) - LISTED} more"


def _shown(value: Any) -> str:
    """``repr(value)``, at most :data:`SHOWN_CHARS` of it (a port's string may be megabytes)."""
    if isinstance(value, str) and len(value) > SHOWN_CHARS:
        return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def _kind(value: Any) -> str:
    if isinstance(value, Unsupported):
        return f"a {value.type}"
    if isinstance(value, np.ndarray):
        return f"a numeric array of shape {value.shape}"
    if isinstance(value, dict):
        return "a named list / NamedTuple"
    if isinstance(value, list):
        return f"a vector of {len(value)}"
    return f"{type(value).__name__} {_shown(value)}"


def _strings(value: Any) -> list[str] | None:
    """The strings of a character vector / Vector{String} / a single string; None if not that."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def parse(raw: Any, where: str, language: str) -> Declaration:
    """Check what a worker found under ``attention_ports`` in ``where`` (a file or folder).

    ``language`` is "r", "julia" or "command" (a port run as a command, whose declaration is its
    greeting's group: docs/protocol.md): it decides how a field is named in messages
    (``attention_ports$operations`` / ``attention_ports.operations``).
    """
    if raw is None:
        return NONE
    sep = "$" if language == "r" else "."
    example = {
        "r": 'attention_ports <- list(operations = c("softmax"), masked_query = "zeros")',
        "julia": 'const attention_ports = (operations = ["softmax"], masked_query = "zeros")',
    }.get(language, 'a group {operations: ["softmax"], masked_query: "zeros"}')
    if not isinstance(raw, dict):
        raise DeclarationError(f"{where}: attention_ports must be {_kind({})}, like {example}; got {_kind(raw)}")
    unknown = [k for k in raw if k not in FIELDS]
    if unknown:
        raise DeclarationError(
            f"{where}: attention_ports has unknown field(s) {_listed(unknown)}; the fields are {', '.join(FIELDS)}"
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
                f"{where}: {field} names {_listed(bad)}, not contract operation(s); "
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
                f"{where}: {field} = {_shown(values[0])} is not one of {', '.join(map(repr, MASKED_QUERY))}"
            )
        masked_query = values[0]
    precision = _precision(raw, where, language, f"attention_ports{sep}precision")
    return Declaration(True, operations, masked_query, precision, _rope_pairing(raw, where, f"attention_ports{sep}"))


def _rope_pairing(raw: dict[str, Any], where: str, prefix: str) -> str:
    """The declared rotary pairing: one of ``pairing.PAIRINGS`` (default halves)."""
    if pairing.FIELD not in raw:
        return pairing.DEFAULT
    values = _strings(raw[pairing.FIELD])
    choices = ", ".join(map(repr, pairing.PAIRINGS))
    if values is None or len(values) != 1 or values[0] not in pairing.PAIRINGS:
        got = _shown(values[0]) if values and len(values) == 1 else _kind(raw[pairing.FIELD])
        raise DeclarationError(f"{where}: {prefix}{pairing.FIELD} must be one of {choices}; got {got}")
    return values[0]


def _precision(raw: dict[str, Any], where: str, language: str, field: str) -> str:
    """The declared precision: one of the supported formats; R has only double (float64)."""
    if "precision" not in raw:
        return formats.DEFAULT
    values = _strings(raw["precision"])
    if values is None or len(values) != 1:
        raise DeclarationError(
            f"{where}: {field} must be one of {', '.join(map(repr, formats.FORMATS))}; got {_kind(raw['precision'])}"
        )
    if values[0] not in formats.FORMATS:
        raise DeclarationError(
            f"{where}: {field} = {_shown(values[0])} is not a precision; "
            f"use one of {', '.join(map(repr, formats.FORMATS))}"
        )
    fmt = formats.FORMATS[values[0]]
    if language == "r" and fmt.name != "float64":
        raise DeclarationError(
            f"{where}: {field} = {fmt.name!r}: R computes in double only, so an R port is judged at "
            "float64 (a float64 port also passes the float32 tier); remove the field"
        )
    return fmt.name
