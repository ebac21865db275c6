"""A markdown summary fit for a CI step summary (``$GITHUB_STEP_SUMMARY``, a merge-request note).

The verdict first, counts per implementation, then one row per failing case with its diagnosis,
each failure's whole message in a collapsed block, and the full case table collapsed at the end.
GitHub caps a step summary at 1 MiB: at most ``MAX_DETAILS`` failures get a message block, each cut
at ``MAX_MESSAGE`` characters (the JSON and JUnit reports keep everything).

Written to the file ``$GITHUB_STEP_SUMMARY`` names, the summary is appended, as GitHub expects of
every step (other steps' summaries stay); anywhere else the file is replaced. Either way the
summary lands whole or not at all: a replacement is a rename, an append one ``write`` call on an
``O_APPEND`` descriptor.
"""

from __future__ import annotations

import os
from pathlib import Path

from attention_ports.core.io import atomic_write
from attention_ports.report.model import COLUMNS_LEGEND, CONVENTION_LEGEND, STATUSES, Report, cell_numbers

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
    if unjudged := report.not_judged_lines():
        lines += ["", "### Declared operations not judged", ""] + [f"- {_cell(line)}" for line in unjudged]
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
    lines += ["", f"Each cell: status and err/bnd. {COLUMNS_LEGEND}."]
    if any(r.masked_query for r in report.results):
        lines += ["", f"{CONVENTION_LEGEND}."]
    lines += ["", "</details>", ""]
    return "\n".join(lines)


def is_step_summary(path: Path) -> bool:
    """``path`` is the GitHub step summary file (``$GITHUB_STEP_SUMMARY``), however either is spelt."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return bool(summary) and os.path.realpath(summary) == os.path.realpath(path)


def append_whole(path: Path, data: bytes) -> None:
    """Append ``data`` in one ``write`` on an ``O_APPEND`` descriptor: another step's or process's
    appends go before or after it, never inside; a short write (a full disk) is an error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        written = os.write(fd, data)
    finally:
        os.close(fd)
    if written != len(data):
        raise OSError(f"{path}: wrote {written} of {len(data)} bytes of the markdown summary")


def write_markdown(report: Report, path: Path) -> None:
    data = render(report).encode()
    if is_step_summary(path):
        append_whole(path, b"\n" + data)  # a blank line: a heading after another step's last line
    else:
        atomic_write(path, data)
