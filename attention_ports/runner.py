"""Run implementations over fixture cases and judge every output with the one comparator."""

from __future__ import annotations

import fnmatch
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports import diagnose, registry
from attention_ports.compare import compare
from attention_ports.fixtures import Case, FixtureError, iter_entries, load_case
from attention_ports.impl import Implementation, ImplementationError, ImplementationUnavailable, OperationMissing
from attention_ports.portview import PortView
from attention_ports.supervisor import output_section

# Worst first when a case's outputs disagree in different ways.
SEVERITY = {"pass": 0, "missing": 1, "unavailable": 2, "fail": 3, "error": 4}
FAILING = {"fail", "error"}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


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
    diagnosis: str = ""  # attention_ports/diagnose.py's line, when a known mistake fits
    mismatches: int | None = None  # elements beyond their bounds (None: not compared)
    total: int | None = None
    nonfinite_mismatches: int = 0  # of which NaN or infinite where the other side is not
    expected_shape: tuple[int, ...] | None = None
    actual_shape: tuple[int, ...] | None = None
    reason: str = ""  # the case's reason and flags (the catalogue's), shown under a failure
    flags: tuple[str, ...] = ()
    arrays: FailedArrays | None = field(default=None, repr=False, compare=False)

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
        }


@dataclass
class CaseResult:
    impl: str
    case: str
    op: str
    outputs: list[OutputResult] = field(default_factory=list)
    seconds: float = 0.0
    repro: str = ""

    @property
    def status(self) -> str:
        return max((o.status for o in self.outputs), key=SEVERITY.__getitem__, default="error")

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
        if self.status in FAILING and self.reason:
            lines.append(case_note(self.reason, self.flags))
        if self.repro and self.status in FAILING:
            lines.append(f"  repro: {self.repro}")
        return "\n".join(lines)


def case_note(reason: str, flags: tuple[str, ...]) -> str:
    """The catalogue's word on why a case exists, under its failure (it often explains it)."""
    return f"  this case: {reason}" + (f" [flags: {', '.join(flags)}]" if flags else "")


def repro_command(impl: str, case: str, port: Path | None, fixtures_dir: Path | None = None) -> str:
    parts = ["attention-ports verify", f"--impl {impl}", f"--case {case}"]
    if port is not None:
        parts.append(f"--port {impl}={port}")
    if fixtures_dir is not None and fixtures_dir.resolve() != _default_dir():
        parts.append(f"--dir {fixtures_dir}")
    return " ".join(parts)


def _default_dir() -> Path:
    from attention_ports.fixtures import REPO_FIXTURES

    return REPO_FIXTURES.resolve()


def judge(impl_name: str, case: Case, impl: Implementation) -> list[OutputResult]:
    """Run one case on one implementation; one OutputResult per expected output.

    Each output is judged on its own: one the port did not return is ``missing`` while the others
    are compared. A failing output's message is in the port's own terms (its layout, 1-based
    positions: ``impl.view``), followed by a diagnosis when a known mistake fits
    (attention_ports/diagnose.py) and what the port printed.
    """

    def every(status: str, message: str) -> list[OutputResult]:
        return [
            OutputResult(impl_name, case.id, name, status, message=message, reason=case.reason, flags=case.flags)
            for name in case.expected
        ]

    try:
        actual = impl.run(case.op, case.inputs, case.options)
    except OperationMissing as exc:
        return every("missing", f"case {case.id!r}: {exc}")
    except ImplementationError as exc:
        return every("error", f"case {case.id!r}: {impl_name} raised: {exc}")
    except Exception as exc:  # an adapter bug must not stop the run either
        return every("error", f"case {case.id!r}: {impl_name} adapter failed: {type(exc).__name__}: {exc}")
    results = [judge_output(impl_name, case, name, actual, impl) for name in case.expected]
    printed = output_section(impl.last_output)  # what a port printed helps read its wrong numbers
    if printed:
        for r in results:
            if r.status == "fail":
                r.message += printed
    return results


def judge_output(
    impl_name: str, case: Case, name: str, returned: Mapping[str, np.ndarray], impl: Implementation
) -> OutputResult:
    """One expected output against what the port returned (``returned``: every output it gave)."""
    res = OutputResult(impl_name, case.id, name, "pass", reason=case.reason, flags=case.flags)
    if name not in returned:
        got = ", ".join(sorted(returned)) or "nothing"
        res.status = "missing"
        res.message = f"case {case.id!r}, output {name!r}: not returned (the port returned: {got})"
        return res
    exp = case.expected[name]
    actual = np.asarray(returned[name])
    cmp = compare(exp.array, actual, exp.bound)
    res.expected_shape, res.actual_shape = cmp.expected_shape, cmp.actual_shape
    res.total = cmp.total
    if cmp.expected_shape == cmp.actual_shape:
        res.max_abs_err, res.max_rel_err = cmp.max_abs_err, cmp.max_rel_err
        res.max_ulp_err, res.err_over_bound = cmp.max_ulp_err, cmp.max_err_over_bound
        res.mismatches, res.nonfinite_mismatches = cmp.mismatches, cmp.nonfinite_mismatches
    else:
        res.mismatches = cmp.total  # nothing of a wrong shape agrees
    if cmp.ok:
        return res
    res.status = "fail"
    view = impl.view(case.op, name) if hasattr(impl, "view") else None  # duck-typed implementations too
    res.message = cmp.describe(case.id, name, view)
    masked_query = getattr(impl, "masked_query", "zeros")
    res.diagnosis = diagnose.explain(case, name, actual, view, masked_query, exp.array, exp.bound)
    if res.diagnosis:
        res.message += f"\n  diagnosis: {res.diagnosis}"
    if max(exp.array.size, actual.size) <= KEEP_ARRAYS_UP_TO:
        res.arrays = FailedArrays(exp.array, np.asarray(actual, dtype=np.float64), exp.bound, view)
    return res


def select_entries(fixtures_dir: Path, case_globs: Iterable[str] = ()) -> list[dict[str, Any]]:
    globs = list(case_globs)
    entries = list(iter_entries(fixtures_dir))
    if not globs:
        return entries
    chosen = [e for e in entries if any(fnmatch.fnmatchcase(e["id"], g) for g in globs)]
    if not chosen:
        raise FixtureError(f"no case in {fixtures_dir} matches {' or '.join(globs)}")
    return chosen


Progress = Callable[[str, int, int, str], None]


def stderr_progress(impl: str, done: int, total: int, case: str) -> None:
    if sys.stderr.isatty():
        end = "\n" if done == total else ""
        print(f"\r\033[K[{impl}] {done}/{total} {case}", end=end, file=sys.stderr, flush=True)
    elif done == total:
        print(f"[{impl}] {done}/{total} cases done", file=sys.stderr, flush=True)


def run_suite(
    fixtures_dir: Path,
    impl_names: list[str],
    ports: dict[str, Path] | None = None,
    case_globs: Iterable[str] = (),
    required: set[str] | None = None,
    progress: Progress | None = stderr_progress,
) -> list[CaseResult]:
    """Every selected case on every named implementation.

    An implementation whose runtime cannot start is ``unavailable`` for each case, which becomes
    ``error`` when it is in ``required`` (explicitly asked for, or anything under CI=true).
    """
    ports = ports or {}
    required = required or set()
    entries = select_entries(fixtures_dir, case_globs)
    cases: list[Case | FixtureError] = []
    for entry in entries:
        try:
            cases.append(load_case(fixtures_dir, entry))
        except FixtureError as exc:
            cases.append(FixtureError(f"case {entry.get('id', '?')!r}: fixture error: {exc}"))
    results: list[CaseResult] = []
    for name in impl_names:
        port = ports.get(name)
        try:
            impl: Implementation | None = registry.create(name, port)
            unavailable = ""
        except ImplementationUnavailable as exc:
            impl, unavailable = None, str(exc)
        try:
            for i, (entry, case) in enumerate(zip(entries, cases, strict=True)):
                case_id = entry.get("id", "?")
                start = time.perf_counter()
                res = CaseResult(
                    name, case_id, entry.get("op", "?"), repro=repro_command(name, case_id, port, fixtures_dir)
                )
                expected_names = list(entry.get("expected", {})) or ["*"]
                if isinstance(case, FixtureError):
                    res.outputs = [OutputResult(name, case_id, o, "error", message=str(case)) for o in expected_names]
                elif impl is None:
                    status = "error" if name in required else "unavailable"
                    res.outputs = [OutputResult(name, case_id, o, status, message=unavailable) for o in expected_names]
                else:
                    res.outputs = judge(name, case, impl)
                res.seconds = time.perf_counter() - start
                results.append(res)
                if progress:
                    progress(name, i + 1, len(entries), case_id)
        finally:
            if impl is not None:
                impl.close()
    return results
