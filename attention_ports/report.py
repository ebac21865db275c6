"""The verify report: a case x implementation table for people, JSON for machines.

Every error is measured against the truth (the exact result correctly rounded): per case and
implementation the table shows the status, the worst error in ulps of the expected value, the
max abs and rel errors, and the worst error as a fraction of its bound (``err/bnd``: 1 is the
limit); ``accuracy_table`` condenses that per implementation and operation.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

from attention_ports.fixtures import atomic_write
from attention_ports.runner import FAILING, CaseResult

REPORT_VERSION = 2


def _err(x: float | None) -> str:
    return "-" if x is None else f"{x:.1e}"


def _ulps(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x < 1e5 else f"{x:.0e}"


def _frac(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.2f}" if x < 100 else f"{x:.0e}"


_CELL = "status      ulps     abs     rel err/bnd"
# A case with a fully masked query is judged by the implementation's convention: its status says which.
_CONVENTION_MARK = {"zeros": "0", "nan": "NaN", "uniform": "1/n"}
CONVENTION_LEGEND = (
    "pass:0, pass:NaN, pass:1/n (fail: likewise): a case with a query whose mask removes every key, judged by "
    "the implementation's masked_query convention zeros, nan or uniform (ports/CONTRACT.md)"
)


def _status(r: CaseResult) -> str:
    conv = r.masked_query
    return r.status if conv is None else f"{r.status}:{_CONVENTION_MARK[conv]}"


def table(results: list[CaseResult]) -> str:
    impls = list(dict.fromkeys(r.impl for r in results))
    cases = list(dict.fromkeys(r.case for r in results))
    by_key = {(r.impl, r.case): r for r in results}
    case_w = max([len("case"), *(len(c) for c in cases)])
    col_w = len(_CELL)
    header = "case".ljust(case_w) + "".join(f"  {i:<{col_w}}" for i in impls)
    sub = " " * case_w + "".join(f"  {_CELL:<{col_w}}" for _ in impls)
    lines = [header.rstrip(), sub, "-" * len(sub)]
    for case in cases:
        row = case.ljust(case_w)
        for impl in impls:
            r = by_key.get((impl, case))
            cell = (
                ""
                if r is None
                else f"{_status(r):<8} {_ulps(r.max_ulp_err):>7} {_err(r.max_abs_err):>7} "
                f"{_err(r.max_rel_err):>7} {_frac(r.err_over_bound):>7}"
            )
            row += f"  {cell:<{col_w}}"
        lines.append(row.rstrip())
    if any(r.masked_query for r in results):
        lines.append(CONVENTION_LEGEND)
    return "\n".join(lines)


def accuracy(results: list[CaseResult]) -> dict[str, dict[str, dict[str, float]]]:
    """impl -> operation -> worst ``ulps`` and ``err_over_bound`` over the outputs that ran."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in results:
        for o in r.outputs:
            if o.max_ulp_err is None or o.err_over_bound is None:
                continue
            cell = out.setdefault(r.impl, {}).setdefault(r.op, {"ulps": 0.0, "err_over_bound": 0.0})
            cell["ulps"] = max(cell["ulps"], o.max_ulp_err)
            cell["err_over_bound"] = max(cell["err_over_bound"], o.err_over_bound)
    return out


def accuracy_table(results: list[CaseResult]) -> str:
    """Worst error per implementation and operation: ulps of the expected value, and err/bound."""
    acc = accuracy(results)
    if not acc:
        return ""
    ops = list(dict.fromkeys(r.op for r in results))
    op_w = max(len("operation"), *(len(o) for o in ops))
    impls = list(acc)
    lines = ["worst error vs the truth (ulps / fraction of the bound)"]
    lines.append("operation".ljust(op_w) + "".join(f"  {i:>18}" for i in impls))
    for op in ops:
        row = op.ljust(op_w)
        for impl in impls:
            cell = acc[impl].get(op)
            text = "-" if cell is None else f"{_ulps(cell['ulps'])} / {_frac(cell['err_over_bound'])}"
            row += f"  {text:>18}"
        lines.append(row)
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
        "accuracy": {
            impl: {op: {k: v if math.isfinite(v) else str(v) for k, v in cell.items()} for op, cell in ops.items()}
            for impl, ops in accuracy(results).items()
        },
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
