"""The report for people on a terminal: the case x implementation table, the failures, the summary.

Each cell reads ``status err/bnd bad ulps``, status first: ``FAIL`` and ``ERROR`` in capitals;
``err/bnd`` the worst error as a fraction of its bound (1 is the limit, ``nan/inf`` a NaN or an
infinity where a number belongs, ``shape`` a wrong shape); ``bad`` the elements beyond their bounds;
``ulps`` the worst error in ulps of the expected value, for a pass only. No column of a failing
cell can show a small number as its headline (model.cell_numbers).
"""

from __future__ import annotations

from attention_ports.judge.results import CaseResult, OutputResult, pointed_case
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
    lines += report.not_judged_lines()
    lines.append(f"verdict: {report.headline()}")  # also when nothing ran: NOTHING RAN, never silence
    return "\n".join(lines)


MAX_NAMED = 5  # cases named in a line that stands for many


def _named(cases: list[str]) -> str:
    more = f" and {len(cases) - MAX_NAMED} more" if len(cases) > MAX_NAMED else ""
    return ", ".join(cases[:MAX_NAMED]) + more


def failure_details(report: Report, quiet: bool = False) -> str:
    """Every case that did not pass, in run order; two kinds said once per implementation rather
    than once per case: operations a port does not declare (every output missing: a partial port
    leaves them out on purpose), and one message shared by several cases (the same text on
    different cases is about the implementation, not the case: an R without rpy2).

    ``quiet`` (``verify --quiet``): a failing case is :func:`quiet_case`'s lines (a message
    shared by several cases is said once, whole, as without it), no blank line between them."""
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
            blocks += [quiet_case(report, r) if quiet else f"[{r.impl}] {r.message()}" for r in rs]
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
    return ("\n" if quiet else "\n\n").join(blocks)


# The lines of a failure message that explain it, as the judge writes them ("  diagnosis: ...",
# judge/runner.py; a localisation of the first wrong output the same way): ``--quiet`` keeps them.
EXPLAINING = ("diagnosis", "localisation", "localization", "located")


def _explaining(message: str) -> list[str]:
    out = []
    for line in message.splitlines():
        label, sep, text = line.strip().partition(": ")
        if sep and label in EXPLAINING:
            out.append(f"{label}: {text}")
    return out


def _size(o: OutputResult) -> str:
    """How wrong one output is, in one phrase: its worst relative error (and the error as a
    multiple of its bound), or why there is no such number."""
    if o.status != "fail":  # an error's message is the point: its first line, whole
        return o.message.splitlines()[0] if o.message else o.status
    if o.total is None:
        return "not returned"
    if o.expected_shape != o.actual_shape:
        return f"shape {o.actual_shape}, expected {o.expected_shape}"
    parts = []
    if o.nonfinite_mismatches:
        parts.append(f"{o.nonfinite_mismatches} NaN/inf where numbers belong")
    if o.max_rel_err is not None:
        parts.append(f"worst rel err {o.max_rel_err:.3g}")
    if o.err_over_bound is not None:
        parts.append(f"{fmt_frac(o.err_over_bound)} x bound")
    return ", ".join(parts) or "beyond its bound"


def quiet_case(report: Report, r: CaseResult) -> str:
    """A failing case as ``verify --quiet`` says it: one line per failing output (its status, how
    wrong, the diagnosis or localisation the judge's message holds, the case's purpose), then the
    repro command. Outputs that fail with one message (a port that raised) are one line."""
    groups: dict[tuple[str, str], list[OutputResult]] = {}
    for o in r.outputs:
        if o.status in report.failing_statuses:
            # a fail is its output's own; an error's message is often every output's
            key = (o.status, o.message) if o.status != "fail" else (o.status, o.output)
            groups.setdefault(key, []).append(o)
    purpose = [f"what this case tests: {r.reason}"] if r.reason else []
    lines = []
    located = False  # the case's localisation said in full once, on its first undiagnosed line
    for (status, _), outs in groups.items():
        o = outs[0]
        what = o.output if len(outs) == 1 else f"{len(outs)} outputs ({_named([x.output for x in outs])})"
        said = [_size(o), *_explaining(o.message)]
        if not any(s.startswith("diagnosis") for s in said[1:]) and o.diagnosis:
            said.append(f"diagnosis: {o.diagnosis}")
        # the localisation is the case's (judge/localise.py), not in an output's message: an output
        # no diagnosis explains gets it, so a backward bug's lines say where it is (issue 26)
        if status == "fail" and r.localisation and len(said) == 1:
            said.append(f"localisation: {'as above' if located else r.localisation}")
            located = True
        lines.append(f"{status.upper()} [{r.impl}] {r.case} {what}: " + "; ".join(said + purpose))
    if r.repro:
        lines.append(f"  repro: {r.repro}")
    return "\n".join(lines)
