"""The machine-readable report: every judged output, the summary, the agreement matrix.

Version 4 (``REPORT_VERSION``). Changes from version 3 (the ``results``, ``summary`` and
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

Within version 4 (readers keep working): a new per-output field ``localisation``, where a case of
a composite operation goes wrong (attention_ports/judge/localise.py; the same on each output of a
case, "" when there is nothing to add); ``merge-reports`` reads a report without it as "".

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
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from attention_ports.core.io import atomic_write
from attention_ports.report.model import Report

REPORT_VERSION = 4


def document(report: Report) -> dict[str, Any]:
    agreement: dict[str, dict[str, dict[str, int]]] = {}
    for (a, b), cell in report.agreement().items():
        agreement.setdefault(a, {})[b] = {"agree": cell.agree, "compared": cell.compared, "unknown": cell.unknown}
    return {
        "version": REPORT_VERSION,
        "interrupted": report.interrupted,  # SIGINT/SIGTERM ended the run: only the cases that ran
        "meta": report.meta,
        "results": [o.as_json() for r in report.results for o in r.outputs],
        "summary": report.summary(),
        "agreement": agreement,
        "cases": [
            {
                "impl": r.impl,
                "case": r.case,
                "op": r.op,
                "status": r.status,
                "repro": r.repro,
                "fixture_error": r.fixture_error,
                "extra": r.extra,
            }
            for r in report.results
        ],
    }


def write_json(report: Report, path: Path) -> None:
    atomic_write(path, (json.dumps(document(report), indent=1) + "\n").encode())
