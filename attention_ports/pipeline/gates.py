"""Regression gates on a finished run: known failures, and a baseline report.

Applied to the one :class:`~attention_ports.report.model.Report` of a run by ``verify``,
``merge-reports`` and the pytest plugin, after the cases are judged and before the reports are
written (docs/ports.md, "Known failures and baselines"; docs/cli.md, the flags):

- **Known failures** (``--known-failures NAME=FILE``, one file per implementation): a committed
  text file, one line per failing output, ``CASE OUTPUT  # reason`` (``OUTPUT`` ``*``: every output
  of the case). Strict both ways, as Protocol Buffers' conformance failure lists and pytest's
  strict xfail: a failure the file does not list fails the run; a listed one that fails is a
  *known failure* (not a pass; JUnit ``skipped``) and does not; a listed one that now passes fails
  the run, naming the line to delete. A malformed file, or an entry naming a case or an output the
  fixtures do not have, is bad input (:class:`GateError`, exit 2, file and line named). An entry
  whose case did not run (not selected, or in another shard) is not judged: a shard leaves it to
  ``merge-reports``, which judges the whole run.
- **Baseline** (``--baseline REPORT.json``, a JSON report of an earlier run, e.g. the default
  branch's): the run fails when an output that passed there fails now (or is no longer
  implemented), or when its worst error as a fraction of its bound (``err_over_bound``) exceeds
  ``factor`` times the larger of its baseline value and ``floor`` (:func:`worse`). The floor keeps
  rounding noise from tripping it: a correct implementation's err/bnd is rounding-level (the
  NumPy reference's worst is 0.088 over the catalogue's 883 outputs) and depends on the order of
  the sums (a port's code, the CPU's BLAS kernel): near zero a small change is a large ratio, so
  growth is measured from at least the floor. A listed known failure is accepted (the file is the
  reviewed record of it). The diff of what got worse and better is printed, and written as
  markdown (a PR comment, or appended to ``$GITHUB_STEP_SUMMARY``) or JSON (``--baseline-diff
  FILE.md`` / ``FILE.json``).

Layer: pipeline (above ``outcome``, below ``shards``); imports ``core``, ``fixtures``, ``judge``
and ``report``.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attention_ports.core import validate
from attention_ports.core.io import atomic_write
from attention_ports.core.targets import check_targets
from attention_ports.judge.results import FAILING, CaseResult, OutputResult
from attention_ports.report.markdown import append_whole, is_step_summary
from attention_ports.report.model import Report

DEFAULT_FACTOR = 10.0
DEFAULT_FLOOR = 0.01
MAX_KNOWN_BYTES = 1 << 20  # a reviewer reads the file: a megabyte is thousands of entries
MAX_BASELINE_BYTES = 256 << 20  # a JSON report of the whole catalogue on four implementations is ~2 MB
MAX_LISTED = 50  # worse/better outputs printed on the terminal (the diff files hold them all)
EVERY_OUTPUT = "*"
DIFF_FORMATS = {".md": "markdown", ".markdown": "markdown", ".json": "json"}


class GateError(ValueError):
    """A known-failures or baseline file (or option) that cannot be used: bad input, exit 2; the
    message names the file and the line or field."""


# --------------------------------------------------------------------- known failures
@dataclass(frozen=True)
class Entry:
    """One line of a known-failures file."""

    impl: str
    case: str
    output: str  # EVERY_OUTPUT: the whole case
    reason: str
    file: Path
    line: int
    text: str  # the line as written, for "delete this line"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


_LINE = re.compile(r"^(?P<case>\S+)[ \t]+(?P<output>[^#]*?)[ \t]*#[ \t]*(?P<reason>.*?)\s*$")


def parse_known_option(text: str, prefix: str = "--") -> tuple[str, Path]:
    """``NAME=FILE`` (``--known-failures``): the implementation and its file (GateError if not)."""
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise GateError(f"{prefix}known-failures takes NAME=FILE (e.g. r=ports/r.known-failures); got {text!r}")
    return name, Path(path).expanduser()


def read_known(impl: str, path: Path) -> list[Entry]:
    """The entries of one implementation's known-failures file (GateError naming the file and line:
    not a regular text file, a line that is not ``CASE OUTPUT  # reason``, no reason, a repeat)."""
    data = validate.read_regular_file(path, MAX_KNOWN_BYTES, GateError, "known-failures file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GateError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    entries: list[Entry] = []
    seen: dict[tuple[str, str], Entry] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "#" not in line:
            raise GateError(f"{path}:{number}: no '# reason': each entry says why it is listed (CASE OUTPUT  # reason)")
        m = _LINE.match(line)
        if m is None or not m["output"]:
            raise GateError(
                f"{path}:{number}: expected 'CASE OUTPUT  # reason' (OUTPUT '*' for every output); got {raw!r}"
            )
        if not m["reason"]:
            raise GateError(f"{path}:{number}: no reason after '#': a reviewer must read why {m['case']} is listed")
        entry = Entry(impl, m["case"], m["output"], m["reason"], path, number, line)
        for key in ((entry.case, entry.output), (entry.case, EVERY_OUTPUT)):
            if key in seen:
                raise GateError(
                    f"{path}:{number}: {entry.case} {entry.output} is already listed at line {seen[key].line}"
                )
        if entry.output == EVERY_OUTPUT and (other := next((e for e in entries if e.case == entry.case), None)):
            raise GateError(f"{path}:{number}: {entry.case} * repeats line {other.line} (one entry per output)")
        seen[(entry.case, entry.output)] = entry
        entries.append(entry)
    return entries


Universe = Mapping[str, Sequence[str]]  # case id -> its outputs (the fixtures')


def catalogue_universe(fixtures_dir: Path, manifest_sha256: str | None = None) -> dict[str, list[str]] | None:
    """Every case of the fixtures in ``fixtures_dir`` and its outputs; None when it cannot be read,
    or its manifest is not the one ``manifest_sha256`` names (a merged report read elsewhere).
    Only the ids and output names are read (the run validates the manifest as a whole: its schema
    check costs a second, which the gates need not pay twice)."""
    import hashlib

    path = fixtures_dir / "manifest.json"
    try:
        data = validate.read_regular_file(path, validate.MAX_MANIFEST_BYTES, GateError, "manifest")
        if manifest_sha256 is not None and hashlib.sha256(data).hexdigest() != manifest_sha256:
            return None
        cases = json.loads(data)["cases"]
        return {str(c["id"]): list(c.get("expected") or {}) or [EVERY_OUTPUT] for c in cases}
    except (GateError, ValueError, KeyError, TypeError, AttributeError):
        return None  # unreadable here: the entries are judged on the run alone


def check_entries(entries: Iterable[Entry], universe: Universe | None, where: str) -> None:
    """An entry naming a case or an output that ``universe`` does not have is bad input, as a
    ``--case`` that matches nothing is: a stale or mistyped line can never be deleted by a fix."""
    if universe is None:
        return
    for e in entries:
        if e.case not in universe:
            raise GateError(f"{e.where}: no case {e.case!r} in {where}: delete or correct the line")
        outputs = universe[e.case]
        if e.output != EVERY_OUTPUT and e.output not in outputs:
            raise GateError(f"{e.where}: case {e.case} has no output {e.output!r} (its outputs: {', '.join(outputs)})")


# --------------------------------------------------------------------- baseline
@dataclass(frozen=True)
class Was:
    status: str
    err_over_bound: float | None


@dataclass
class Baseline:
    path: Path
    meta: dict[str, Any]
    outputs: dict[tuple[str, str, str], Was]
    interrupted: bool = False


def _number(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise GateError(f"{where}: expected a number, null or 'inf'/'nan'; got {value!r}")
    try:
        return float(value)  # JSON has no inf or NaN: the reports write them as text
    except ValueError:
        raise GateError(f"{where}: expected a number, null or 'inf'/'nan'; got {value!r}") from None


def read_baseline(path: Path) -> Baseline:
    """A JSON report (``verify``/``merge-reports --json``, format 3 or later) as a baseline: only
    each output's ``impl``, ``case``, ``output``, ``status`` and ``err_over_bound`` are read, each
    checked (GateError naming the file and the field)."""
    from attention_ports.report.json_report import REPORT_VERSION
    from attention_ports.report.model import STATUSES

    data = validate.read_regular_file(path, MAX_BASELINE_BYTES, GateError, "baseline report")
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise GateError(f"{path}: not a JSON report ({exc})") from None
    if not isinstance(doc, dict):
        raise GateError(f"{path}: not a JSON report (a {type(doc).__name__}, not an object)")
    version = doc.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or not 3 <= version <= REPORT_VERSION:
        raise GateError(f"{path}: version: {version!r}; a baseline is a JSON report of format 3 to {REPORT_VERSION}")
    meta = doc.get("meta", {})
    if not isinstance(meta, dict):
        raise GateError(f"{path}: meta: expected an object")
    results = doc.get("results")
    if not isinstance(results, list):
        raise GateError(f"{path}: results: expected a list of outputs")
    outputs: dict[tuple[str, str, str], Was] = {}
    for i, o in enumerate(results):
        at = f"{path}: results[{i}]"
        if not isinstance(o, dict):
            raise GateError(f"{at}: expected an object")
        for key in ("impl", "case", "output", "status"):
            if not isinstance(o.get(key), str):
                raise GateError(f"{at}.{key}: expected a string; got {o.get(key)!r}")
        if o["status"] not in STATUSES:
            raise GateError(f"{at}.status: {o['status']!r} is not one of {', '.join(STATUSES)}")
        outputs[(o["impl"], o["case"], o["output"])] = Was(
            o["status"], _number(o.get("err_over_bound"), f"{at}.err_over_bound")
        )
    return Baseline(Path(path), meta, outputs, bool(doc.get("interrupted")))


def worse(before: float | None, now: float | None, factor: float, floor: float) -> bool:
    """The worst error grew past ``factor`` x the larger of its baseline value and ``floor`` (both
    as fractions of the bound); errors under the floor count as the floor."""
    if before is None or now is None or math.isnan(before) or math.isnan(now):
        return False
    return now > factor * max(before, floor)


# --------------------------------------------------------------------- the gates
@dataclass
class Gates:
    """What the options ask for, read and checked before the run (:func:`from_options`)."""

    known: dict[str, list[Entry]] = field(default_factory=dict)  # implementation -> its entries
    files: dict[str, Path] = field(default_factory=dict)  # implementation -> its known-failures file
    baseline: Baseline | None = None
    factor: float = DEFAULT_FACTOR
    floor: float = DEFAULT_FLOOR
    diff_targets: dict[str, Path] = field(default_factory=dict)  # "markdown"/"json" -> file
    prefix: str = "--"  # the options' prefix in messages: the pytest plugin's are --ap-...

    def __bool__(self) -> bool:
        return bool(self.known) or self.baseline is not None

    def entries(self) -> list[Entry]:
        return [e for es in self.known.values() for e in es]

    def check_implementations(self, impls: Iterable[str]) -> None:
        """A known-failures file for an implementation the run does not have is a usage error."""
        run = list(impls)
        for name in self.known:
            if name not in run:
                where = self.files.get(name, "FILE")
                raise GateError(
                    f"{self.prefix}known-failures {name}={where}: {name} is not an implementation of this run "
                    f"({', '.join(run)})"
                )

    def check_run(self, tier: str | None, precision: str | None) -> None:
        """A baseline of another tier or precision measures other numbers: refused (exit 2)."""
        if self.baseline is None:
            return
        meta = self.baseline.meta
        for key, now in (("tier", tier or "catalogue"), ("precision", precision)):
            was = meta.get(key, "catalogue" if key == "tier" else None)
            if was != now:
                raise GateError(
                    f"{self.baseline.path}: meta.{key} is {was!r}, this run's is {now!r}: not a baseline of this run"
                )


def from_options(
    known: Sequence[str] = (),
    baseline: Path | None = None,
    factor: float | None = None,
    floor: float | None = None,
    diff: Sequence[Path] = (),
    taken: Mapping[str, Path] | None = None,
    prefix: str = "--",
) -> Gates:
    """The gates the options name, every file read and checked now (GateError: exit 2), before a
    run that may take minutes. ``taken``: the run's report targets, which a diff file must not be."""
    gates = Gates(prefix=prefix)
    for text in known:
        name, path = parse_known_option(text, prefix)
        if name in gates.known:
            raise GateError(f"{prefix}known-failures {name}: given twice (one file per implementation)")
        gates.known[name] = read_known(name, path)
        gates.files[name] = path
    for option, value, low in ((f"{prefix}baseline-factor", factor, 1.0), (f"{prefix}baseline-floor", floor, 0.0)):
        if value is not None and (
            not math.isfinite(value) or value < low or (option.endswith("factor") and value == low)
        ):
            raise GateError(f"{option} {value}: must be a finite number {'above 1' if low == 1.0 else 'at least 0'}")
    if (factor is not None or floor is not None or diff) and baseline is None:
        raise GateError(
            f"{prefix}baseline-factor, {prefix}baseline-floor and {prefix}baseline-diff "
            f"go with {prefix}baseline REPORT.json"
        )
    if baseline is not None:
        gates.baseline = read_baseline(baseline)
    gates.factor = DEFAULT_FACTOR if factor is None else factor
    gates.floor = DEFAULT_FLOOR if floor is None else floor
    wanted: dict[str, Path] = {}
    for path in diff:
        # GitHub's step summary file has no extension: markdown, appended (as --markdown appends)
        fmt = "summary" if is_step_summary(Path(path)) else DIFF_FORMATS.get(Path(path).suffix.lower())
        if fmt is None:
            raise GateError(f"{prefix}baseline-diff {path}: name a .md (markdown) or .json file")
        if fmt in wanted:
            raise GateError(f"{prefix}baseline-diff {path}: a {fmt} diff is already written to {wanted[fmt]}")
        wanted[fmt] = Path(path)
    options = {f"{prefix}baseline-diff {p}": p for fmt, p in wanted.items() if fmt != "summary"}
    resolved = check_targets({**(taken or {}), **options})  # also: not the same file as a report
    gates.diff_targets = {
        fmt: resolved.get(f"{prefix}baseline-diff {p}", Path(os.path.abspath(p))) for fmt, p in wanted.items()
    }
    return gates


def prepare(gates: Gates, impls: Sequence[str], tier: str, precision: str | None, fixtures_dir: Path | None) -> None:
    """Before a run: the gates fit it (GateError, exit 2, if not): each known-failures file names one
    of its implementations and, on the fixtures, only their cases and outputs; the baseline is of
    its tier and precision."""
    if not gates:
        return
    gates.check_implementations(impls)
    gates.check_run(tier, precision)
    if tier == "catalogue" and fixtures_dir is not None:
        check_entries(gates.entries(), catalogue_universe(fixtures_dir), f"the fixtures in {fixtures_dir}")


def prepare_merged(gates: Gates, report: Report) -> None:
    """:func:`prepare` for ``merge-reports``, from the merged run's meta (the fixtures read where
    the shards read them, if they are there and the same; else the entries are judged on the run)."""
    if not gates:
        return
    meta = report.meta
    gates.check_implementations(meta.get("implementations") or report.impls)
    gates.check_run(meta.get("tier"), meta.get("precision"))
    fixtures = meta.get("fixtures") or {}
    if meta.get("tier", "catalogue") == "catalogue" and isinstance(fixtures.get("dir"), str):
        universe = catalogue_universe(Path(fixtures["dir"]), fixtures.get("manifest_sha256"))
        check_entries(gates.entries(), universe, f"the fixtures in {fixtures['dir']}")


@dataclass
class Change:
    impl: str
    case: str
    output: str
    before: Was
    now: Was
    why: str
    accepted: str = ""  # a worse output a known-failures entry lists: "FILE:LINE"

    def as_json(self) -> dict[str, Any]:
        def num(x: float | None) -> float | str | None:
            return x if x is None or math.isfinite(x) else str(x)

        return {
            "impl": self.impl,
            "case": self.case,
            "output": self.output,
            "before": {"status": self.before.status, "err_over_bound": num(self.before.err_over_bound)},
            "now": {"status": self.now.status, "err_over_bound": num(self.now.err_over_bound)},
            "why": self.why,
            **({"accepted_by": self.accepted} if self.accepted else {}),
        }


@dataclass
class Outcome:
    """What the gates found: printed by :func:`terminal`, written by :func:`write_diff`."""

    known: list[tuple[Entry, CaseResult]] = field(default_factory=list)
    fixed: list[Entry] = field(default_factory=list)  # listed, and every output now passes
    unlisted: dict[str, list[tuple[str, list[str]]]] = field(default_factory=dict)  # impl -> (case, outputs) not listed
    stale: list[str] = field(default_factory=list)  # an entry naming an output its case ran without
    not_judged: list[tuple[Entry, str]] = field(default_factory=list)
    deferred: int = 0  # entries of cases in other shards
    problems: list[str] = field(default_factory=list)  # each fails the run
    worse: list[Change] = field(default_factory=list)
    better: list[Change] = field(default_factory=list)
    compared: int = 0
    new: int = 0
    gone: int = 0
    warnings: list[str] = field(default_factory=list)


def _now(o: OutputResult) -> Was:
    return Was(o.status, o.err_over_bound)


def apply(report: Report, gates: Gates, partial: bool | None = None) -> Outcome:
    """Judge the finished run by the gates: sets ``report.known`` and ``report.gate_failures`` (so
    its verdict, headline and every format follow) and returns what to print and write.

    A partial report (default: a shard's, ``meta.shard``; the pytest plugin's one test) judges only
    its own cases: an entry whose case ran elsewhere is left to the whole run's judgment."""
    out = Outcome()
    shard = isinstance(report.meta.get("shard"), dict) if partial is None else partial
    for entry in gates.entries():
        _judge_entry(report, entry, shard, out)
    for impl in gates.known:
        for r in report.results:
            bad = [
                o.output for o in r.outputs if o.status in FAILING and (r.impl, r.case, o.output) not in report.known
            ]
            if r.impl == impl and bad:
                out.unlisted.setdefault(impl, []).append((r.case, bad))
    if gates.baseline is not None:
        _compare(report, gates, out)
    out.problems += out.stale
    out.problems += [
        f"{e.where}: {e.impl} {e.case} {e.output} now passes: delete the line `{e.text}`" for e in out.fixed
    ]
    out.problems += [
        f"{c.impl} {c.case} {c.output}: {c.why} (baseline {gates.baseline.path})"
        for c in out.worse
        if not c.accepted and gates.baseline is not None
    ]
    report.gate_failures = list(out.problems)
    return out


def _judge_entry(report: Report, e: Entry, shard: bool, out: Outcome) -> None:
    r = report.cell(e.impl, e.case)
    if r is None:
        if shard:
            out.deferred += 1
        else:
            out.not_judged.append((e, "its case did not run (not selected in this run)"))
        return
    matched = r.outputs if e.output == EVERY_OUTPUT else [o for o in r.outputs if o.output == e.output]
    if not matched:
        names = ", ".join(o.output for o in r.outputs) or "none"
        out.stale.append(f"{e.where}: case {e.case} ran on {e.impl} with no output {e.output!r} (its outputs: {names})")
        return
    failing = [o for o in matched if o.status in FAILING]
    if failing:
        for o in failing:
            report.known[(r.impl, r.case, o.output)] = f"{e.where}: {e.reason}"
        out.known.append((e, r))
    elif all(o.status == "pass" for o in matched):
        out.fixed.append(e)
    else:
        statuses = ", ".join(sorted({o.status for o in matched}))
        out.not_judged.append((e, f"it did not run ({statuses})"))


def _compare(report: Report, gates: Gates, out: Outcome) -> None:
    base = gates.baseline
    assert base is not None
    fixtures = (report.meta.get("fixtures") or {}).get("manifest_sha256")
    was_fixtures = (base.meta.get("fixtures") or {}).get("manifest_sha256")
    if report.meta.get("tier", "catalogue") == "catalogue" and fixtures != was_fixtures:
        out.warnings.append(
            f"the baseline {base.path} judged other fixtures (manifest sha256 {str(was_fixtures)[:12]}, this run's "
            f"{str(fixtures)[:12]}): a case regenerated since may differ for that reason alone"
        )
    if isinstance(base.meta.get("shard"), dict) or base.interrupted:
        what = "a shard's report" if isinstance(base.meta.get("shard"), dict) else "an interrupted run's report"
        out.warnings.append(f"the baseline {base.path} is {what}: only the outputs it holds are compared")
    seen: set[tuple[str, str, str]] = set()
    for r in report.results:
        for o in r.outputs:
            key = (r.impl, r.case, o.output)
            seen.add(key)
            before = base.outputs.get(key)
            if before is None:
                out.new += 1
                continue
            out.compared += 1
            now = _now(o)
            change = _change(before, now, gates.factor, gates.floor)
            if change is None:
                continue
            kind, why = change
            c = Change(r.impl, r.case, o.output, before, now, why)
            if kind == "worse":
                c.accepted = report.known.get(key, "").split(": ", 1)[0]
                out.worse.append(c)
            else:
                out.better.append(c)
    ran = {(r.impl, r.case) for r in report.results}
    out.gone = sum(1 for key in base.outputs if key not in seen and (key[0], key[1]) in ran)


def _change(before: Was, now: Was, factor: float, floor: float) -> tuple[str, str] | None:
    b, n = before.err_over_bound, now.err_over_bound
    if before.status == "pass":
        if now.status in FAILING:
            return (
                "worse",
                f"passed in the baseline, now {now.status}s"
                if now.status == "fail"
                else "passed in the baseline, now an error",
            )
        if now.status == "missing":
            return "worse", "passed in the baseline, now not implemented"
        if now.status == "pass" and worse(b, n, factor, floor):
            return (
                "worse",
                f"err/bnd {_frac(b)} -> {_frac(n)} ({_ratio(b, n)}; past {factor:g} x max(baseline, floor {floor:g}))",
            )
        if now.status == "pass" and worse(n, b, factor, floor):
            return "better", f"err/bnd {_frac(b)} -> {_frac(n)} ({_ratio(b, n)})"
        return None
    if before.status in FAILING and now.status == "pass":
        return "better", f"{before.status} in the baseline, now passes"
    return None


def _frac(x: float | None) -> str:
    """err/bnd with three significant digits: the diff compares small fractions (0.0062 -> 0.074)."""
    return "-" if x is None else f"{x:.3g}"


def _ratio(b: float | None, n: float | None) -> str:
    if b is None or n is None:
        return "?"
    if b == 0:
        return "from 0" if n else "same"
    x = n / b
    return f"{x:.3g}x" if x >= 1 else f"1/{1 / x:.3g}"


# --------------------------------------------------------------------- what is printed and written
def terminal(out: Outcome, gates: Gates) -> str:
    """The gates' section of the terminal output (empty when no gate was asked for)."""
    if not gates:
        return ""
    lines = ["regression gates:"]
    for name, entries in gates.known.items():
        file = gates.files.get(name, "?")
        known = [e for e, _ in out.known if e.impl == name]
        lines.append(
            f"  known failures of {name} ({file}, {_n(len(entries), 'entry', 'entries')}): {len(known)} fail as listed"
        )
        for e in known[:MAX_LISTED]:
            lines.append(f"    known failure: {name} {e.case} {e.output} ({e.where}: {e.reason})")
        for case, bad in out.unlisted.get(name, [])[:MAX_LISTED]:
            lines.append(f"    NOT LISTED: {name} {case} {', '.join(bad)} fails (not in {file})")
    for e in out.fixed:
        lines.append(f"  FIXED: {e.impl} {e.case} {e.output} passes now: delete line {e.line} of {e.file}: {e.text}")
    by_why: dict[str, list[Entry]] = {}
    for e, why in out.not_judged:  # a --case selection can leave most of a file aside: one line per reason
        by_why.setdefault(why, []).append(e)
    for why, es in by_why.items():
        named = ", ".join(f"{e.where} ({e.case} {e.output})" for e in es[:3]) + (", ..." if len(es) > 3 else "")
        lines.append(f"  not judged: {_n(len(es), 'entry', 'entries')}, {why}: {named}")
    if out.deferred:
        lines.append(
            f"  {_n(out.deferred, 'entry names', 'entries name')} cases of other shards: merge-reports judges them"
        )
    lines += [f"  STALE: {p}" for p in out.stale]
    if gates.baseline is not None:
        b = gates.baseline
        lines += [f"  warning: {w}" for w in out.warnings]
        lines.append(
            f"  baseline {b.path}: {len(out.worse)} worse, {len(out.better)} better of {out.compared} outputs compared"
            f" ({out.new} new, {out.gone} gone; factor {gates.factor:g}, floor {gates.floor:g} of the bound)"
        )
        for c in out.worse[:MAX_LISTED]:
            mark = f"worse, accepted by {c.accepted}" if c.accepted else "WORSE"
            lines.append(f"    {mark}: {c.impl} {c.case} {c.output}: {c.why}")
        for c in out.better[:MAX_LISTED]:
            lines.append(f"    better: {c.impl} {c.case} {c.output}: {c.why}")
        hidden = max(0, len(out.worse) - MAX_LISTED) + max(0, len(out.better) - MAX_LISTED)
        if hidden:
            lines.append(f"    ... {hidden} more: see --baseline-diff")
    unlisted = sum(len(v) for v in out.unlisted.values())
    why = [f"{len(out.problems)} gate failure(s)"] if out.problems else []
    why += [f"{unlisted} unlisted failing case(s)"] if unlisted else []
    lines.append(f"  gates: FAIL: {', '.join(why)}" if why else "  gates: pass")
    return "\n".join(lines)


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def diff_document(out: Outcome, gates: Gates) -> dict[str, Any]:
    assert gates.baseline is not None
    return {
        "version": 1,
        "baseline": str(gates.baseline.path),
        "factor": gates.factor,
        "floor": gates.floor,
        "ok": not any(not c.accepted for c in out.worse),
        "compared": out.compared,
        "new": out.new,
        "gone": out.gone,
        "warnings": out.warnings,
        "worse": [c.as_json() for c in out.worse],
        "better": [c.as_json() for c in out.better],
    }


MAX_MARKDOWN_ROWS = 100  # a PR comment holds 65536 characters


def diff_markdown(out: Outcome, gates: Gates) -> str:
    assert gates.baseline is not None
    verdict = "FAIL" if any(not c.accepted for c in out.worse) else "pass"
    lines = [
        f"## attention-ports against the baseline: {verdict}",
        "",
        f"**{len(out.worse)} worse, {len(out.better)} better** of {out.compared} outputs compared "
        f"({out.new} new, {out.gone} gone). Worse: an output that passed in the baseline and fails now, or whose "
        f"worst error (err/bnd: a fraction of its bound) grew past {gates.factor:g} x the larger of its baseline "
        f"value and {gates.floor:g}.",
        "",
    ]
    lines += [f"> warning: {w}" for w in out.warnings] + ([""] if out.warnings else [])
    for title, changes in (("Worse", out.worse), ("Better", out.better)):
        if not changes:
            continue
        lines += [
            f"### {title}",
            "",
            "| implementation | case | output | baseline | now | |",
            "|---|---|---|---|---|---|",
        ]
        for c in changes[:MAX_MARKDOWN_ROWS]:
            note = c.why + (f" (accepted: {c.accepted})" if c.accepted else "")
            cells = [c.impl, c.case, c.output, _cell(c.before), _cell(c.now), note]
            lines.append("| " + " | ".join(s.replace("|", "\\|") for s in cells) + " |")
        if len(changes) > MAX_MARKDOWN_ROWS:
            lines.append(f"\n{len(changes) - MAX_MARKDOWN_ROWS} more: see the JSON diff.")
        lines.append("")
    return "\n".join(lines)


def _cell(w: Was) -> str:
    return f"{w.status} {_frac(w.err_over_bound)}" if w.status == "pass" else w.status


def write_diff(out: Outcome, gates: Gates) -> None:
    for fmt, path in gates.diff_targets.items():
        if fmt == "json":
            atomic_write(path, (json.dumps(diff_document(out, gates), indent=1) + "\n").encode())
        elif fmt == "summary":
            append_whole(path, ("\n" + diff_markdown(out, gates) + "\n").encode())
        else:
            atomic_write(path, (diff_markdown(out, gates) + "\n").encode())


def show(out: Outcome | None, gates: Gates) -> None:
    """Print the gates' section and write the diff files (``verify`` and ``merge-reports``, after
    the run's own terminal output; ``out`` is :func:`apply`'s, None when no gate was asked for)."""
    if out is None or not gates:
        return
    print(terminal(out, gates))
    write_diff(out, gates)
