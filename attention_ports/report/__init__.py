"""The verify report in every format, from one result model (``model.Report``).

- ``text``: the case x implementation table, failure details, summary lines (a terminal);
- ``json_report``: the machine-readable report (``--json``, format ``REPORT_VERSION``);
- ``junit``: JUnit XML, one testcase per implementation x case (``--junit``);
- ``markdown``: a CI step summary (``--markdown``);
- ``html_page`` (+ ``heatmap``): one self-contained page with heatmaps (``--html``).

Every function here takes a :class:`Report` or, as before the split, the run's list of
``CaseResult``. Layer: above ``judge`` (whose result model, ``judge.results``, it reads); may
import every layer below it, never ``tools``, ``tiers`` or the CLI.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attention_ports.judge.results import CaseResult
from attention_ports.report import html_page, json_report, junit, markdown
from attention_ports.report import text as _text
from attention_ports.report.json_report import REPORT_VERSION
from attention_ports.report.model import Report

Results = Report | list[CaseResult]

__all__ = [
    "REPORT_VERSION",
    "Report",
    "accuracy",
    "accuracy_table",
    "failure_details",
    "summary",
    "summary_lines",
    "table",
    "write_html",
    "write_json",
    "write_junit",
    "write_markdown",
]


def as_report(results: Results, meta: dict[str, Any] | None = None, strict: bool = False) -> Report:
    return results if isinstance(results, Report) else Report(list(results), meta or {}, strict)


def table(results: Results) -> str:
    return _text.table(as_report(results))


def accuracy(results: Results) -> dict[str, dict[str, dict[str, float]]]:
    return as_report(results).accuracy()


def accuracy_table(results: Results) -> str:
    return _text.accuracy_table(as_report(results))


def summary(results: Results) -> dict[str, Any]:
    return as_report(results).summary()


def summary_lines(results: Results) -> str:
    return _text.summary_lines(as_report(results))


def failure_details(results: Results, quiet: bool = False) -> str:
    return _text.failure_details(as_report(results), quiet)


def write_json(results: Results, path: Path, meta: dict[str, Any] | None = None) -> None:
    report = as_report(results, meta)
    if meta is not None:
        report.meta = meta
    json_report.write_json(report, path)


def write_junit(results: Results, path: Path) -> None:
    junit.write_junit(as_report(results), path)


def write_markdown(results: Results, path: Path) -> None:
    markdown.write_markdown(as_report(results), path)


def write_html(results: Results, path: Path) -> None:
    html_page.write_html(as_report(results), path)
