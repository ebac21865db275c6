"""Run implementations over fixture cases and judge every output with the one comparator."""

from __future__ import annotations

import fnmatch
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports import conventions, registry
from attention_ports.compare import compare
from attention_ports.fixtures import Case, Expected, FixtureError, iter_entries, load_case
from attention_ports.impl import Implementation, ImplementationError, ImplementationUnavailable, OperationMissing
from attention_ports.supervisor import output_section

# Worst first when a case's outputs disagree in different ways.
SEVERITY = {"pass": 0, "missing": 1, "unavailable": 2, "fail": 3, "error": 4}
FAILING = {"fail", "error"}


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@dataclass
class OutputResult:
    impl: str
    case: str
    output: str
    status: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    max_ulp_err: float | None = None
    err_over_bound: float | None = None  # the worst |actual - expected| / bound: 1 = at the limit
    message: str = ""
    masked_query: str | None = None  # the convention judged by, on a case flagged masked_query

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
            "masked_query": self.masked_query,
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

    def message(self) -> str:
        # One line per distinct problem: a fixture error or a raised port is the same for every output.
        lines = list(dict.fromkeys(o.message for o in self.outputs if o.status != "pass" and o.message))
        if self.repro and self.status in FAILING:
            lines.append(f"  repro: {self.repro}")
        return "\n".join(lines)


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
    """Run one case on one implementation; one OutputResult per expected output."""

    def every(status: str, message: str) -> list[OutputResult]:
        return [OutputResult(impl_name, case.id, name, status, message=message) for name in case.expected]

    try:
        actual = impl.run(case.op, case.inputs, case.options)
    except OperationMissing as exc:
        return every("missing", f"case {case.id!r}: {exc}")
    except ImplementationError as exc:
        return every("error", f"case {case.id!r}: {impl_name} raised: {exc}")
    except Exception as exc:  # an adapter bug must not stop the run either
        return every("error", f"case {case.id!r}: {impl_name} adapter failed: {type(exc).__name__}: {exc}")
    convention = masked_query_convention(case, impl)
    results = []
    for name, exp in case.expected_for(convention).items():
        if name not in actual:
            got = ", ".join(sorted(actual)) or "nothing"
            message = f"case {case.id!r}, output {name!r}: not returned (returned: {got})"
            results.append(OutputResult(impl_name, case.id, name, "fail", message=message, masked_query=convention))
            continue
        cmp = compare(exp.array, actual[name], exp.bound)
        same_shape = cmp.expected_shape == cmp.actual_shape
        results.append(
            OutputResult(
                impl_name,
                case.id,
                name,
                "pass" if cmp.ok else "fail",
                max_abs_err=cmp.max_abs_err if same_shape else None,
                max_rel_err=cmp.max_rel_err if same_shape else None,
                max_ulp_err=cmp.max_ulp_err if same_shape else None,
                err_over_bound=cmp.max_err_over_bound if same_shape else None,
                message="" if cmp.ok else cmp.describe(case.id, name),
                masked_query=convention,
            )
        )
    if convention is not None:
        _explain_convention(impl_name, case, convention, actual, results)
    printed = output_section(impl.last_output)  # what a port printed helps read its wrong numbers
    if printed:
        for r in results:
            if r.status == "fail":
                r.message += printed
    return results


def masked_query_convention(case: Case, impl: Implementation) -> str | None:
    """The convention ``impl`` is judged by on ``case``: its declared one where the case has a query
    whose mask removes every key (flagged masked_query), else None (one set of expected outputs)."""
    return impl.masked_query_for(case.op) if case.conventions else None


def _same(a: Expected, b: Expected) -> bool:
    return np.array_equal(a.array, b.array, equal_nan=True) and np.array_equal(a.bound, b.bound)


def _explain_convention(
    impl_name: str, case: Case, convention: str, actual: dict[str, np.ndarray], results: list[OutputResult]
) -> None:
    """Say, on each failing output the convention decides, which convention was applied, and which
    one the outputs follow instead when they agree with another everywhere."""
    judged = case.expected_for(convention)
    matches = [
        other
        for other in case.conventions
        if other != convention
        and all(
            name in actual and compare(exp.array, actual[name], exp.bound).ok
            for name, exp in case.expected_for(other).items()
        )
    ]
    lines = [
        f"  masked_query: queries {list(case.dead_rows)} have every key masked; {impl_name} is judged by its "
        f"convention {convention!r} ({conventions.MEANING[convention]}; 'zeros' unless a port declares another)"
    ]
    if matches:
        other = matches[0]
        lines.append(
            f"  the outputs follow the {other!r} convention instead ({conventions.MEANING[other]}): if that is "
            f"the port's convention, declare it ({conventions.declaration_hint(other)})"
        )
    for r in results:
        decided = any(not _same(judged[r.output], by[r.output]) for by in case.conventions.values())
        if r.status == "fail" and decided and r.output in judged:
            r.message += "\n" + "\n".join(lines)


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
