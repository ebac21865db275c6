"""The result model: what judging one output, and one case, found (below the judge's runner and
every report format, which all read it).

``OutputResult`` is one output of one case on one implementation: its status (``pass``, ``fail``,
``error``, ``missing``, ``unavailable``), its errors against the expected value and bound, and
the message and diagnosis a failure shows. ``CaseResult`` gathers a case's outputs (its status is
the worst of theirs, ``SEVERITY``).

Layer: judge. Imports only ``attention_ports.spec`` (the port view of a failing output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attention_ports.spec.portview import PortView

# Worst first when a case's outputs disagree in different ways.
SEVERITY = {"pass": 0, "missing": 1, "unavailable": 2, "fail": 3, "error": 4}
FAILING = {"fail", "error"}
# Cases that did not run, each counted apart from passes and failures: ``missing`` is a case of an
# operation the implementation does not implement (a partial port: not declared, or not defined by
# a port without a declaration); ``unavailable`` one whose runtime cannot start. Neither is a pass;
# ``missing`` fails under --strict, ``unavailable`` when the implementation is required.
NOT_RUN = {"missing": "not implemented", "unavailable": "unavailable"}


# Arrays of a failing output are kept for the reports' heatmaps up to this many elements.
KEEP_ARRAYS_UP_TO = 1 << 16


@dataclass(frozen=True)
class FailedArrays:
    """What a failing output's heatmaps need (reference layout; ``view`` turns it into the port's)."""

    expected: np.ndarray
    actual: np.ndarray
    bound: np.ndarray
    view: PortView | None = None


@dataclass
class OutputResult:
    impl: str
    case: str
    output: str
    status: str
    max_abs_err: float | None = None  # over the elements where both values are finite
    max_rel_err: float | None = None
    max_ulp_err: float | None = None
    err_over_bound: float | None = None  # the worst |actual - expected| / bound: 1 = at the limit
    message: str = ""
    diagnosis: str = ""  # attention_ports/judge/diagnose.py's line, when a known mistake fits
    mismatches: int | None = None  # elements beyond their bounds (None: not compared)
    total: int | None = None
    nonfinite_mismatches: int = 0  # of which NaN or infinite where the other side is not
    expected_shape: tuple[int, ...] | None = None
    actual_shape: tuple[int, ...] | None = None
    reason: str = ""  # the case's reason and flags (the catalogue's), shown under a failure
    flags: tuple[str, ...] = ()
    arrays: FailedArrays | None = field(default=None, repr=False, compare=False)
    masked_query: str | None = None  # the convention judged by, on a case flagged masked_query
    # where in a composite operation the case goes wrong (attention_ports/judge/localise.py): the
    # case's, on each of its outputs as ``reason`` is; "" when there is nothing to add
    localisation: str = ""

    def as_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | str | None:
            return x if x is None or np.isfinite(x) else str(x)

        return {
            "impl": self.impl,
            "case": self.case,
            "output": self.output,
            "status": self.status,
            "max_abs_err": num(self.max_abs_err),
            "max_rel_err": num(self.max_rel_err),
            "max_ulp_err": num(self.max_ulp_err),
            "err_over_bound": num(self.err_over_bound),
            "message": self.message,
            "diagnosis": self.diagnosis,
            "mismatches": self.mismatches,
            "total": self.total,
            "nonfinite_mismatches": self.nonfinite_mismatches,
            "expected_shape": list(self.expected_shape) if self.expected_shape is not None else None,
            "actual_shape": list(self.actual_shape) if self.actual_shape is not None else None,
            "reason": self.reason,
            "flags": list(self.flags),
            "masked_query": self.masked_query,
            "localisation": self.localisation,
        }


@dataclass
class CaseResult:
    impl: str
    case: str
    op: str
    outputs: list[OutputResult] = field(default_factory=list)
    seconds: float = 0.0
    repro: str = ""
    fixture_error: str = ""  # the case's fixture files are bad (bad input, not the implementation's fault)
    # What a tier adds to a case (JSON report format 5's ``cases[].extra``): a scale case's call time
    # and peak memory, a generated case's seed; empty for the catalogue's cases.
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def status(self) -> str:
        return max((o.status for o in self.outputs), key=SEVERITY.__getitem__, default="error")

    @property
    def masked_query(self) -> str | None:
        """The convention this case was judged by (None: the case has no fully masked query)."""
        return next((o.masked_query for o in self.outputs if o.masked_query), None)

    @property
    def max_abs_err(self) -> float | None:
        vals = [o.max_abs_err for o in self.outputs if o.max_abs_err is not None]
        return max(vals) if vals else None

    @property
    def max_rel_err(self) -> float | None:
        vals = [o.max_rel_err for o in self.outputs if o.max_rel_err is not None]
        return max(vals) if vals else None

    @property
    def max_ulp_err(self) -> float | None:
        vals = [o.max_ulp_err for o in self.outputs if o.max_ulp_err is not None]
        return max(vals) if vals else None

    @property
    def err_over_bound(self) -> float | None:
        vals = [o.err_over_bound for o in self.outputs if o.err_over_bound is not None]
        return max(vals) if vals else None

    @property
    def reason(self) -> str:
        return next((o.reason for o in self.outputs if o.reason), "")

    @property
    def localisation(self) -> str:
        return next((o.localisation for o in self.outputs if o.localisation), "")

    @property
    def flags(self) -> tuple[str, ...]:
        return next((o.flags for o in self.outputs if o.flags), ())

    @property
    def mismatches(self) -> int | None:
        vals = [o.mismatches for o in self.outputs if o.mismatches is not None]
        return sum(vals) if vals else None

    @property
    def total(self) -> int | None:
        vals = [o.total for o in self.outputs if o.total is not None]
        return sum(vals) if vals else None

    def message(self) -> str:
        # One line per distinct problem: a fixture error or a raised port is the same for every output.
        lines = list(dict.fromkeys(o.message for o in self.outputs if o.status != "pass" and o.message))
        if self.status in FAILING and self.localisation:
            lines.append(f"  localisation: {self.localisation}")
        if self.status in FAILING and self.reason:
            lines.append(case_note(self.reason, self.flags, diagnosed=any(o.diagnosis for o in self.outputs)))
        if self.repro and self.status in FAILING:
            lines.append(f"  repro: {self.repro}")
        return "\n".join(lines)


def case_note(reason: str, flags: tuple[str, ...], diagnosed: bool = False) -> str:
    """The catalogue's word on what a case tests, under its failure. It is the case's purpose, not a
    finding: "exp overflows unless the row maximum is subtracted" is why the case exists, and a port
    that subtracts it may fail there for another reason (issue 19). Only a diagnosis, tested on the
    numbers (attention_ports/judge/diagnose.py), says what went wrong; without one the note says so."""
    label = "what this case tests" if diagnosed else "what this case tests (its purpose, not a diagnosis)"
    return f"  {label}: {reason}" + (f" [flags: {', '.join(flags)}]" if flags else "")


# A message every case of an implementation shares (a port that does not load, a runtime that does
# not start) is stored once: the first case holds it, each later case this pointer to it.
_SAID_AT = re.compile(r"\(why: see case ('.*')\)\Z")


def said_at(impl: str, what: str, case: str) -> str:
    """The message of a case whose reason is the one ``case`` holds (``what``: what happened)."""
    return f"{impl}: {what}, so no case ran on it (why: see case {case!r})"


def pointed_case(message: str) -> str | None:
    """The case a :func:`said_at` message points to; None for any other message (a case id is a plain
    name: its repr is it in quotes)."""
    m = _SAID_AT.search(message)
    return m.group(1)[1:-1] if m else None
