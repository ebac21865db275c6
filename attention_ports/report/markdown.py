"""A markdown summary fit for a CI step summary (``$GITHUB_STEP_SUMMARY``, a merge-request note).

The verdict first, counts per implementation, then one row per failing case with its diagnosis,
each failure's whole message in a collapsed block, and the full case table collapsed at the end.
GitHub caps a step summary at 1 MiB: at most ``MAX_DETAILS`` failures get a message block, each cut
at ``MAX_MESSAGE`` characters (the JSON and JUnit reports keep everything).
"""

from __future__ import annotations

from pathlib import Path

from attention_ports.fixtures import atomic_write
from attention_ports.report.model import STATUSES, Report, cell_numbers

MAX_DETAILS = 50
MAX_MESSAGE = 4000


def _cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}text\n{text}\n{fence}"


def render(report: Report) -> str:
    failures = report.failures
    lines = [f"## attention-ports verify: {report.headline()}", ""]
    counts = report.counts()
    lines += [
        "| implementation | " + " | ".join(STATUSES) + " |",
        "|---|" + "---:|" * len(STATUSES),
    ]
    for impl in report.impls:
        lines.append(f"| {_cell(impl)} | " + " | ".join(str(counts[impl].get(s, 0)) for s in STATUSES) + " |")
    if report.strict:
        lines += ["", "`--strict`: a missing (not implemented) operation fails."]
    if failures:
        lines += [
            "",
            "### Failures",
            "",
            "| implementation | case | status | err/bnd | bad | diagnosis |",
            "|---|---|---|---:|---:|---|",
        ]
        for r in failures:
            nums = cell_numbers(r)
            diagnosis = "; ".join(dict.fromkeys(o.diagnosis for o in r.outputs if o.diagnosis))
            lines.append(
                f"| {_cell(r.impl)} | `{_cell(r.case)}` | **{nums['status']}** | {nums['err/bnd']} | {nums['bad']} "
                f"| {_cell(diagnosis) or '-'} |"
            )
        lines.append("")
        for r in failures[:MAX_DETAILS]:
            text = r.message()
            if len(text) > MAX_MESSAGE:
                text = text[:MAX_MESSAGE] + f"\n... ({len(text) - MAX_MESSAGE} more characters in the JSON report)"
            lines += [
                f"<details><summary>{r.impl} · {r.case}: {r.status}</summary>",
                "",
                _fence(text),
                "",
                "</details>",
            ]
        if len(failures) > MAX_DETAILS:
            lines.append(f"\n{len(failures) - MAX_DETAILS} more failures: see the JSON or JUnit report.")
    lines += ["", "<details><summary>Every case</summary>", ""]
    lines.append("| case | " + " | ".join(_cell(i) for i in report.impls) + " |")
    lines.append("|---|" + "---|" * len(report.impls))
    for case in report.cases:
        cells = []
        for impl in report.impls:
            r = report.cell(impl, case)
            if r is None:
                cells.append("")
                continue
            nums = cell_numbers(r)
            status = f"**{nums['status']}**" if report.is_failing(r) else nums["status"]
            cells.append(f"{status} {nums['err/bnd']}" if nums["err/bnd"] != "-" else status)
        lines.append(f"| `{_cell(case)}` | " + " | ".join(cells) + " |")
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def write_markdown(report: Report, path: Path) -> None:
    atomic_write(path, render(report).encode())
