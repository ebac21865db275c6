"""The report for people on a terminal: the case x implementation table, the failures, the summary.

Each cell reads ``status err/bnd bad ulps``, status first: ``FAIL`` and ``ERROR`` in capitals;
``err/bnd`` the worst error as a fraction of its bound (1 is the limit, ``nan/inf`` a NaN or an
infinity where a number belongs, ``shape`` a wrong shape); ``bad`` the elements beyond their bounds;
``ulps`` the worst error in ulps of the expected value, for a pass only. No column of a failing
cell can show a small number as its headline (model.cell_numbers).
"""

from __future__ import annotations

from attention_ports.judge.results import CaseResult, pointed_case
from attention_ports.report.model import (
    COLUMNS_LEGEND,
    CONVENTION_LEGEND,
    ULPS_NOTE,
    Report,
    cell_numbers,
    fmt_frac,
    fmt_ulps,
)

_WIDTHS = {"status": 8, "err/bnd": 8, "bad": 6, "ulps": 6}
_CELL = " ".join(f"{k:<{w}}" if k == "status" else f"{k:>{w}}" for k, w in _WIDTHS.items())


def _cell(numbers: dict[str, str]) -> str:
    return " ".join(f"{numbers[k]:<{w}}" if k == "status" else f"{numbers[k]:>{w}}" for k, w in _WIDTHS.items())


def table(report: Report) -> str:
    case_w = max([len("case"), *(len(c) for c in report.cases)])
    col_w = len(_CELL)
    header = "case".ljust(case_w) + "".join(f"  {i:<{col_w}}" for i in report.impls)
    sub = " " * case_w + "".join(f"  {_CELL:<{col_w}}" for _ in report.impls)
    lines = [header.rstrip(), sub, "-" * len(sub)]
    for case in report.cases:
        row = case.ljust(case_w)
        for impl in report.impls:
            r = report.cell(impl, case)
            row += f"  {'' if r is None else _cell(cell_numbers(r)):<{col_w}}"
        lines.append(row.rstrip())
    lines.append(COLUMNS_LEGEND)
    if any(r.masked_query for r in report.results):
        lines.append(CONVENTION_LEGEND)
    return "\n".join(lines)


def accuracy_table(report: Report) -> str:
    """Worst error per implementation and operation: ulps of the expected value, and err/bound."""
    acc = report.accuracy()
    if not acc:
        return ""
    ops = list(dict.fromkeys(report.ops.values()))
    op_w = max(len("operation"), *(len(o) for o in ops))
    impls = list(acc)
    lines = ["worst error vs the truth (ulps / fraction of the bound)"]
    lines.append("operation".ljust(op_w) + "".join(f"  {i:>18}" for i in impls))
    for op in ops:
        row = op.ljust(op_w)
        for impl in impls:
            cell = acc[impl].get(op)
            text = "-" if cell is None else f"{fmt_ulps(cell['ulps'])} / {fmt_frac(cell['err_over_bound'])}"
            row += f"  {text:>18}"
        lines.append(row)
    lines.append(ULPS_NOTE)
    return "\n".join(lines)


def summary_lines(report: Report) -> str:
    """Counts per implementation (each case once, by its status), then the run's headline."""
    lines = []
    for impl, counts in report.summary()["implementations"].items():
        parts = ", ".join(f"{n} {status}" for status, n in counts.items())
        lines.append(f"{impl}: {parts}")
        if counts.get("missing"):
            lines.append(
                f"  {impl}: {counts['missing']} case(s) missing: operations the port does not implement"
                " (not declared, or not defined); never a pass"
                + (" (failures under --strict)" if report.strict else "")
            )
    if report.results:
        lines.append(f"verdict: {report.headline()}")
    return "\n".join(lines)


MAX_NAMED = 5  # cases named in a line that stands for many


def _named(cases: list[str]) -> str:
    more = f" and {len(cases) - MAX_NAMED} more" if len(cases) > MAX_NAMED else ""
    return ", ".join(cases[:MAX_NAMED]) + more


def failure_details(report: Report) -> str:
    """Every case that did not pass, in run order; two kinds said once per implementation rather
    than once per case: operations a port does not declare (every output missing: a partial port
    leaves them out on purpose), and one message shared by several cases (the same text on
    different cases is about the implementation, not the case: an R without rpy2)."""
    shown = report.failing_statuses | {"unavailable", "missing"}
    rows = [r for r in report.results if r.status in shown]
    undeclared: dict[str, dict[str, list[CaseResult]]] = {}
    by_message: dict[tuple[str, str, tuple[str, ...]], list[CaseResult]] = {}
    said: dict[tuple[str, str], tuple[str, ...]] = {}  # (impl, case) -> its messages
    for r in rows:
        if all(o.status == "missing" for o in r.outputs) and r.outputs:
            undeclared.setdefault(r.impl, {}).setdefault(r.op, []).append(r)
            continue
        messages = tuple(dict.fromkeys(o.message for o in r.outputs if o.status != "pass"))
        said[(r.impl, r.case)] = messages
        # a case whose message points to another's (runner: said once) is grouped with that one,
        # under the message itself; a case's own id prefix ("case 'x': ") is set aside for that
        at = pointed_case(messages[0]) if len(messages) == 1 else None
        if at is not None and (r.impl, at) in said:
            messages = tuple(m.removeprefix(f"case {at!r}: ") for m in said[(r.impl, at)])
            first = by_message.pop((r.impl, r.status, said[(r.impl, at)]), None)
            if first is not None:
                by_message.setdefault((r.impl, r.status, messages), []).extend(first)
        by_message.setdefault((r.impl, r.status, messages), []).append(r)
    blocks = []
    for (impl, status, messages), rs in by_message.items():
        if len(rs) == 1 or not messages:
            blocks += [f"[{r.impl}] {r.message()}" for r in rs]
        else:
            cases = [r.case for r in rs]
            blocks.append(f"[{impl}] {len(rs)} cases {status} ({_named(cases)}), each with: " + "\n".join(messages))
    for impl, ops in undeclared.items():
        n = sum(map(len, ops.values()))
        listed = ", ".join(f"{op} ({len(rs)} case{'s' * (len(rs) > 1)})" for op, rs in ops.items())
        first = next(iter(ops.values()))[0]
        said = next((o.message for o in first.outputs if o.message), "").removeprefix(f"case {first.case!r}: ")
        strict = "they fail under --strict" if report.strict else "not failures unless --strict"
        blocks.append(f"[{impl}] {n} case(s) missing, operations not provided: {listed} (e.g. {said}); {strict}")
    return "\n\n".join(blocks)
