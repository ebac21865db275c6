"""What a run ends with, for ``verify`` and ``merge-reports`` alike: its report written in every
format asked for (:func:`write_reports`) and its exit status (:func:`exit_status`, printing why it
is not 0).

Layer: pipeline (its bottom; imports only ``report``).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from attention_ports.report import Report, write_html, write_json, write_junit, write_markdown

EXIT_AGREE, EXIT_DISAGREE, EXIT_BAD_INPUT = 0, 1, 2
EXIT_SIGNAL_BASE = 128
WRITERS: dict[str, Callable[[Report, Path], None]] = {
    "--json": write_json,
    "--junit": write_junit,
    "--markdown": write_markdown,
    "--html": write_html,
}


def write_reports(report: Report, targets: Mapping[str, Path]) -> None:
    """Every report asked for, each whole or not at all (core.io.atomic_write). ``verify`` writes
    them before it prints anything: a terminal must never cost a report."""
    for option, target in targets.items():
        WRITERS[option](report, target)


def exit_status(report: Report, ports: Iterable[str], signum: int | None = None) -> int:
    """The exit status of a verify run (or of a merged one), printing why it is not 0."""
    if signum is not None:
        name = signal.Signals(signum).name
        if report.interrupted:
            print(f"interrupted by {name}: {len(report.results)} case run(s) finished; the report holds only those")
        else:
            print(f"interrupted by {name} once every case had run: the reports hold all {len(report.results)}")
        return EXIT_SIGNAL_BASE + signum
    bad_fixtures = sorted({r.case for r in report.results if r.fixture_error})
    if bad_fixtures:
        where = report.meta.get("fixtures", {}).get("dir", "the fixtures")
        print(f"bad fixture files in {where} for case(s) {', '.join(bad_fixtures)}: exit {EXIT_BAD_INPUT}")
        return EXIT_BAD_INPUT
    # The report's verdict (model.Report.ok): a failure or error, a missing case under --strict, and
    # under CI=true an implementation that passed zero cases, or nothing judged at all (the pytest
    # plugin's rule), on a whole run: a shard's part proves nothing about the run.
    if report.ci_refused():
        if empty := report.zero_pass():
            print(f"CI: no case passed on {', '.join(empty)}: refusing to call this run green")
        else:
            print("CI: nothing was judged (NOTHING RAN): refusing to call this run green")
    elif report.ci and not report.whole_run and (report.zero_pass() or report.nothing_judged()):
        shard = report.meta["shard"]
        print(
            f"CI: shard {shard.get('index')}/{shard.get('total')} passed no case on "
            f"{', '.join(report.zero_pass()) or 'any implementation'}: the zero-pass rule is the whole run's, "
            "left to merge-reports"
        )
    # Partial ports are the user's business; an operation missing from a port we ship is our bug.
    user = set(ports)
    ours_missing = sorted({r.impl for r in report.results if r.status == "missing" and r.impl not in user})
    if ours_missing:
        print(f"the shipped port(s) {', '.join(ours_missing)} lack operations: that fails even without --strict")
    return EXIT_DISAGREE if not report.ok or ours_missing else EXIT_AGREE
