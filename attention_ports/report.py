"""The verify report: a case x implementation table for people, JSON for machines."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from attention_ports.fixtures import atomic_write
from attention_ports.runner import FAILING, CaseResult

REPORT_VERSION = 1


def _err(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def table(results: list[CaseResult]) -> str:
    impls = list(dict.fromkeys(r.impl for r in results))
    cases = list(dict.fromkeys(r.case for r in results))
    by_key = {(r.impl, r.case): r for r in results}
    case_w = max([len("case"), *(len(c) for c in cases)])
    col_w = 24
    header = "case".ljust(case_w) + "".join(f"  {i:<{col_w}}" for i in impls)
    sub = " " * case_w + "".join(f"  {'status   abs     rel':<{col_w}}" for _ in impls)
    lines = [header, sub, "-" * len(header)]
    for case in cases:
        row = case.ljust(case_w)
        for impl in impls:
            r = by_key.get((impl, case))
            cell = "" if r is None else f"{r.status:<8} {_err(r.max_abs_err):>7} {_err(r.max_rel_err):>7}"
            row += f"  {cell:<{col_w}}"
        lines.append(row.rstrip())
    return "\n".join(lines)


def summary(results: list[CaseResult]) -> dict[str, Any]:
    per_impl: dict[str, Counter[str]] = {}
    for r in results:
        per_impl.setdefault(r.impl, Counter())[r.status] += 1
    totals: Counter[str] = Counter(r.status for r in results)
    return {
        "cases": len({r.case for r in results}),
        "implementations": {impl: dict(sorted(c.items())) for impl, c in per_impl.items()},
        "totals": dict(sorted(totals.items())),
        "ok": not any(r.status in FAILING for r in results),
    }


def summary_lines(results: list[CaseResult]) -> str:
    s = summary(results)
    lines = []
    for impl, counts in s["implementations"].items():
        parts = ", ".join(f"{n} {status}" for status, n in counts.items())
        lines.append(f"{impl}: {parts}")
        if counts.get("missing"):
            lines.append(f"  {impl}: {counts['missing']} case(s) missing: the port does not define their operation")
    return "\n".join(lines)


def failure_details(results: list[CaseResult]) -> str:
    return "\n\n".join(f"[{r.impl}] {r.message()}" for r in results if r.status in FAILING | {"unavailable", "missing"})


def write_json(results: list[CaseResult], path: Path, meta: dict[str, Any] | None = None) -> None:
    doc = {
        "version": REPORT_VERSION,
        "meta": meta or {},
        "results": [o.as_json() for r in results for o in r.outputs],
        "summary": summary(results),
    }
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode())
