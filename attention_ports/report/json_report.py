"""The machine-readable report: every judged output, the summary, the agreement matrix; written
(:func:`write_json`) and read back (:func:`read_report`, :func:`case_results`: merge-reports).

Version 5 (``REPORT_VERSION``). Changes from version 4:
- lean: what a case's outputs share is stored once, in its ``cases`` entry: ``reason`` and
  ``flags`` left ``results`` (each output repeated them: 80% of a green report's 1.3 MB);
- ``meta.run_id`` (the run's identity, the same for every shard of one run) and
  ``meta.ports_sha256`` (each ``--port``'s files and their sha256), ``meta.selection`` (the
  ``--case`` globs of a catalogue or scale run; empty: every case);
- a new per-output field ``localisation``: where a case of a composite operation goes wrong
  (attention_ports/judge/localise.py; "" when there is nothing to add);
- a shard's ``cases`` entries hold ``seconds`` (the case's wall time), so a merged JUnit keeps
  the times; an unsharded or merged report has none (a catalogue run's JSON stays byte for byte
  the same from run to run);
- read back, a report is checked against fixtures/schemas/report.schema.json (types of every
  field a reader uses) after a size cap, a regular-file check and a nesting limit: a violation is
  :class:`ReportError` naming the file and the field.

Changes from version 3 to 4 (the ``results``, ``summary`` and
``agreement`` of a catalogue run are the same; readers of 3 can ignore the rest):
- every tier writes this one format (``verify``, ``verify --random``, ``verify --tier scale``,
  ``merge-reports``); ``meta.tier`` says which: ``catalogue``, ``random`` or ``scale``;
- ``meta.strict``; a generated run's ``meta.random`` (seed, cases per implementation, operations,
  the profile, each implementation's search tally); a scale run's ``meta.scale`` (rows per case,
  the harness's truth and bound seconds, peak memory); a shard's ``meta.shard`` (``index``,
  ``total``, the ``units`` it ran out of the full run's ``order``), absent from a merged report;
- new top-level ``cases``: one entry per implementation x case, in the order of ``results``
  (``impl``, ``case``, ``op``, ``status``, ``repro``, ``fixture_error``, ``extra``: what a tier
  adds, e.g. a scale case's call time and peak memory); with ``results`` it holds all that
  ``merge-reports`` needs to rebuild the run. No wall times (a catalogue run's JSON stays byte for
  byte the same from run to run), so a merged JUnit's testcases have time 0.

Changes from version 2 to 3, which readers of 2 can ignore:
- ``max_abs_err``, ``max_rel_err`` and ``max_ulp_err`` cover the elements where both values are
  finite; a NaN or an infinity where a number belongs is counted in ``nonfinite_mismatches``
  (version 2 reported ``max_abs_err`` "inf" for it);
- new per-output fields: ``diagnosis``, ``mismatches``, ``total``, ``nonfinite_mismatches``,
  ``expected_shape``, ``actual_shape``, ``reason``, ``flags``;
- an output a port did not return is judged on its own (version 2: the case's every output
  ``error``), the others still compared;
- new top-level ``agreement``: per pair of implementations ``{agree, compared, unknown}``.
- new top-level ``interrupted``: true when SIGINT/SIGTERM ended the run (only the cases that ran).

Within version 3 (readers keep working; the statuses are the same five words):
- an output that an implemented operation does not return is ``fail`` (it was ``missing``, which
  now means only a case of an operation the implementation does not implement);
- ``summary.ok`` is the verdict behind the exit status (``missing`` counts under ``--strict``, and
  under CI=true an implementation that passed zero cases fails it); new ``summary.complete`` (every
  case asked for ran and agreed) and ``summary.headline`` (the verdict line every report shows).

Within version 5 (readers keep working):
- ``summary.not_judged`` (implementation -> operation -> reason: the declared operations that got
  no judged case at the run's tier) and ``meta.declared`` (what it is computed from);
  ``summary.complete`` is false when an operation was not judged; a shard's ``summary.ok`` does
  not apply CI=true's zero-pass rule (merge-reports does, on the merged run).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attention_ports.core import validate
from attention_ports.core.io import atomic_write
from attention_ports.judge.results import CaseResult, OutputResult
from attention_ports.report.model import Report

REPORT_VERSION = 5
# A report read back: the green default report is ~0.5 MB; a generated run of 10,000 cases per
# implementation on four of them stays well below. Nothing a writer of ours makes nests deeper
# than ~6 (meta.random.runs.<impl>.by_operation.<op>).
MAX_REPORT_BYTES = 256 << 20
MAX_REPORT_DEPTH = 32
# What the outputs of one case share, stored once in its ``cases`` entry (format 5).
CASE_FIELDS = ("reason", "flags")
_SCHEMA = validate.inline_refs(validate.REPORT_SCHEMA)


class ReportError(ValueError):
    """A JSON report that cannot be read back: the message names the file and the field."""


def document(report: Report) -> dict[str, Any]:
    agreement: dict[str, dict[str, dict[str, int]]] = {}
    for (a, b), cell in report.agreement().items():
        agreement.setdefault(a, {})[b] = {"agree": cell.agree, "compared": cell.compared, "unknown": cell.unknown}
    timed = "shard" in report.meta  # a shard's times are for the merged JUnit (see the module docstring)
    return {
        "version": REPORT_VERSION,
        "interrupted": report.interrupted,  # SIGINT/SIGTERM ended the run: only the cases that ran
        "meta": report.meta,
        "results": [_output(o) for r in report.results for o in r.outputs],
        "summary": report.summary(),
        "agreement": agreement,
        "cases": [
            {
                "impl": r.impl,
                "case": r.case,
                "op": r.op,
                "status": r.status,
                "reason": r.reason,
                "flags": list(r.flags),
                "repro": r.repro,
                "fixture_error": r.fixture_error,
                "extra": r.extra,
                **({"seconds": round(r.seconds, 6)} if timed else {}),
            }
            for r in report.results
        ],
    }


def _output(o: OutputResult) -> dict[str, Any]:
    row = o.as_json()
    for key in CASE_FIELDS:
        del row[key]
    return row


def dumps(doc: dict[str, Any]) -> str:
    """The document as text: indented, except that each row of ``results`` and ``cases`` is one
    line (a row's 16 fields one per line were a third of a green report's bytes; a line per row
    also greps and diffs as a row)."""
    parts = []
    for key, value in doc.items():
        if key in ("results", "cases") and value:
            rows = ",\n".join("  " + json.dumps(row) for row in value)
            parts.append(f" {json.dumps(key)}: [\n{rows}\n ]")
        else:
            parts.append(f" {json.dumps(key)}: " + json.dumps(value, indent=1).replace("\n", "\n "))
    return "{\n" + ",\n".join(parts) + "\n}\n"


def write_json(report: Report, path: Path) -> None:
    atomic_write(path, dumps(document(report)).encode())


# --------------------------------------------------------------------- reading back
def read_report(path: Path) -> dict[str, Any]:
    """A JSON report of this format, checked before any of it is used: a regular file (a FIFO or a
    device is refused at once, unread) of at most MAX_REPORT_BYTES, nested at most
    MAX_REPORT_DEPTH deep, JSON, of format REPORT_VERSION, and every field a reader uses of its
    type (fixtures/schemas/report.schema.json). Anything else is :class:`ReportError`."""
    doc = validate.read_json(path, MAX_REPORT_BYTES, ReportError, "JSON report", max_depth=MAX_REPORT_DEPTH)
    if not isinstance(doc, dict):
        raise ReportError(f"{path}: not a JSON report (a {type(doc).__name__}, not an object)")
    if doc.get("version") != REPORT_VERSION:
        raise ReportError(
            f"{path}: report format {doc.get('version')!r}; this attention-ports reads format {REPORT_VERSION} "
            "(write the report again with this version)"
        )

    def where(p: Sequence[Any]) -> str:
        if len(p) >= 2 and p[0] in ("results", "cases") and isinstance(p[1], int):
            try:
                row = doc[p[0]][p[1]]
                label = f" ({row['impl']}, {row['case']})" if isinstance(row, dict) else ""
            except (KeyError, IndexError, TypeError):
                label = ""
            return f"{path}: {p[0]}[{p[1]}]{label}" + (f", field {validate.json_path(p[2:])!r}" if p[2:] else "")
        return f"{path}: field {validate.json_path(p)!r}" if p else str(path)

    problems = validate.schema_problems(doc, _SCHEMA, where)
    if problems:
        raise ReportError(f"{path}: not a valid format-{REPORT_VERSION} report:\n  " + "\n  ".join(problems))
    return doc


def _num(x: float | str | None) -> float | None:
    return float(x) if isinstance(x, str) else x  # "inf", "nan": JSON's text for them


def case_results(doc: dict[str, Any], path: Path) -> list[CaseResult]:
    """The report's CaseResults (a :func:`read_report` document), rebuilt from its ``cases`` and
    ``results``; a result without its case entry, or a case whose status its outputs do not give
    (its results lost or changed), is :class:`ReportError`."""
    cases: dict[tuple[str, str], dict[str, Any]] = {}
    for c in doc["cases"]:
        cases.setdefault((c["impl"], c["case"]), c)
    outputs: dict[tuple[str, str], list[OutputResult]] = {}
    for i, o in enumerate(doc["results"]):
        key = (o["impl"], o["case"])
        if key not in cases:
            raise ReportError(f"{path}: results[{i}] ({key[0]}, {key[1]}) has no entry in 'cases'")
        shared = cases[key]
        outputs.setdefault(key, []).append(
            OutputResult(
                o["impl"],
                o["case"],
                o["output"],
                o["status"],
                max_abs_err=_num(o["max_abs_err"]),
                max_rel_err=_num(o["max_rel_err"]),
                max_ulp_err=_num(o["max_ulp_err"]),
                err_over_bound=_num(o["err_over_bound"]),
                message=o["message"],
                diagnosis=o["diagnosis"],
                mismatches=o["mismatches"],
                total=o["total"],
                nonfinite_mismatches=o["nonfinite_mismatches"],
                expected_shape=tuple(o["expected_shape"]) if o["expected_shape"] is not None else None,
                actual_shape=tuple(o["actual_shape"]) if o["actual_shape"] is not None else None,
                reason=shared["reason"],
                flags=tuple(shared["flags"]),
                masked_query=o["masked_query"],
                localisation=o["localisation"],
            )
        )
    out = []
    for i, c in enumerate(doc["cases"]):
        r = CaseResult(
            c["impl"],
            c["case"],
            c["op"],
            outputs.pop((c["impl"], c["case"]), []),
            seconds=float(c.get("seconds", 0.0)),
            repro=c["repro"],
            fixture_error=c["fixture_error"],
            extra=c["extra"],
        )
        if r.status != c["status"]:
            held = f"{len(r.outputs)} output(s) in 'results'" if r.outputs else "no output in 'results'"
            raise ReportError(
                f"{path}: cases[{i}] ({r.impl}, {r.case}) says {c['status']!r} but has {held}, which give "
                f"{r.status!r}: its results were lost or changed"
            )
        out.append(r)
    return out
