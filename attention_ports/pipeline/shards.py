"""Shards: ``verify --shard K/N`` runs the K-th of N parts of a run, ``merge-reports`` makes one report.

The convention of Playwright's ``--shard`` and ``merge-reports``: each job of a CI matrix runs
``verify --shard K/N --json shard-K.json``, and one job after them runs ``attention-ports
merge-reports shard-*.json --json ... --junit ... --html ...``. The merged report is the one of
the unsharded run: the same results in the same order, the same summary and agreement, the same
verdict (``--strict`` and CI=true's zero-pass rule included).

The split (:func:`split`) is deterministic and balanced by *expected cost*, not by count: the
source's units (``pipeline.verify.Unit``: a case, or a generated run's operation) are taken most
expensive first and each given to the part with the least cost so far (ties: the lower part, the
earlier unit); each part then runs its units in the run's order. Every implementation of a case
runs in the same shard, so the agreement between implementations is counted within shards and
summed.

Nothing green that did not run: every shard's report is read as untrusted input
(``report.json_report.read_report``: a regular file under a size cap, a nesting limit, the
schema fixtures/schemas/report.schema.json), and the merge refuses (ShardError, exit 2, naming the
file and what is wrong) an interrupted shard, a shard whose results are not exactly the units its
``meta.shard.units`` owed, a missing, repeated or overlapping shard, and shards of different runs:
every report records ``meta.run_id`` (:func:`run_id`: the run's identity, or
``$ATTENTION_PORTS_RUN_ID``) and ``meta.ports_sha256`` (:func:`port_hashes`), so two commits'
shards differ in their port files or fixtures manifest and are named. CI=true's zero-pass rule is
judged on the merged run (``model.Report.ok``), never on a shard.

Layer: pipeline (above ``outcome``, below ``verify``, which asks it for a shard's part); imports
``judge`` and ``report``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attention_ports.judge.results import CaseResult
from attention_ports.judge.runner import in_ci
from attention_ports.pipeline import gates, outcome
from attention_ports.report import json_report
from attention_ports.report.model import Agreement, Report


class ShardError(ValueError):
    """Reports that cannot be merged, or a bad ``--shard``: the message names the files."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based, as the user writes it
    total: int

    def __str__(self) -> str:
        return f"{self.index}/{self.total}"


def parse_shard(text: str) -> Shard:
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or not 1 <= int(m[1]) <= int(m[2]):
        raise ValueError(f"--shard takes K/N with 1 <= K <= N (e.g. 2/4); got {text!r}")
    return Shard(int(m[1]), int(m[2]))


def split(units: Sequence[Any], n: int) -> list[list[str]]:
    """``units`` (each with ``id`` and ``cost``) in ``n`` parts of about equal cost; each part in the
    units' own order. Greedy, longest first: no part exceeds the ideal share by more than the
    largest unit."""
    load = [0.0] * n
    owner: dict[int, int] = {}
    for i in sorted(range(len(units)), key=lambda i: (-units[i].cost, i)):
        k = min(range(n), key=lambda k: (load[k], k))
        owner[i] = k
        load[k] += units[i].cost
    return [[u.id for i, u in enumerate(units) if owner[i] == k] for k in range(n)]


def part(units: Sequence[Any], shard: Shard) -> list[str]:
    return split(units, shard.total)[shard.index - 1]


def shard_meta(shard: Shard, units: Sequence[Any], mine: list[str]) -> dict[str, Any]:
    """What a shard's report says of it: which part, its units, the whole run's units in order."""
    return {"index": shard.index, "total": shard.total, "units": mine, "order": [u.id for u in units]}


# --------------------------------------------------------------------- the run's identity
RUN_ID_ENV = "ATTENTION_PORTS_RUN_ID"
# What makes two runs the same run (dotted meta keys): every shard of one run has the same values,
# runs of different inputs differ in one at least. Not the versions or the paths of the ports and
# fixtures, which may differ from one CI runner to the next for the same inputs.
IDENTITY = (
    "tier",
    "precision",
    "strict",
    "implementations",
    "selection",
    "random.seed",
    "random.examples",
    "random.operations",
    "scale.catalogue_sha256",
    "scale.rows_per_case",
    "shard.total",
    "shard.order",
    "ports_sha256",
    "fixtures.manifest_sha256",
)


def file_hashes(port: Path) -> dict[str, str]:
    """A port's files -> their sha256: a file port is its one file (by its name), a folder port every
    regular file under it (by its path inside the folder, symlinks not followed out of it). An
    unreadable port says why instead of a hash, so two runs of it still differ from a readable one."""

    def digest(path: Path) -> str:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        except OSError as exc:
            return f"unknown: {exc.strerror}"
        return h.hexdigest()

    port = Path(port)
    if not port.is_dir():
        return {port.name: digest(port) if port.is_file() else "unknown: not a regular file"}
    out = {}
    for folder, dirs, files in os.walk(port):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                out[path.relative_to(port).as_posix()] = digest(path)
    return out


def port_hashes(ports: Mapping[str, Path]) -> dict[str, dict[str, str]]:
    """``meta.ports_sha256``: each ``--port`` (implementation -> its files' sha256)."""
    return {name: file_hashes(path) for name, path in sorted(ports.items())}


def run_id(meta: Mapping[str, Any]) -> str:
    """``meta.run_id``: ``$ATTENTION_PORTS_RUN_ID`` when set (e.g. the CI system's run number, so
    that a rerun of one shard in another pipeline is refused), else the first 16 hex digits of the
    sha256 of the run's :data:`IDENTITY`."""
    given = os.environ.get(RUN_ID_ENV, "").strip()
    if given:
        return given
    identity = {key: _get(meta, key) for key in IDENTITY}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


# --------------------------------------------------------------------- merging
# meta entries every shard of one run shares (the others, e.g. versions and port paths, may differ
# from one CI runner to the next), compared in this order so that the message names the first
# difference a person can act on; the run id, last, catches the rest (or an explicit one's).
SAME = {
    "tier": "the tier",
    "implementations": "the implementations",
    "fixtures.manifest_sha256": "the fixtures (manifest hash)",
    "ports_sha256": "the port files (sha256)",
    "precision": "the precision",
    "strict": "--strict",
    "selection": "the --case selection",
    "random.seed": "the seed",
    "random.examples": "the cases per implementation",
    "random.operations": "the operations",
    "scale.catalogue_sha256": "the scale catalogue",
    "scale.rows_per_case": "the sampled rows per case",
    "shard.total": "the number of shards",
    "shard.order": "the selected cases",
    "run_id": "the run id",
}


def _get(meta: Mapping[str, Any], dotted: str) -> Any:
    node: Any = meta
    for key in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node


def _differ(key: str, a: Any, b: Any) -> str:
    """The values two shards differ in, as short as says it: for the ports, the files that differ."""
    if key == "ports_sha256" and isinstance(a, dict) and isinstance(b, dict):
        diffs = []
        for impl in sorted(set(a) | set(b)):
            fa, fb = a.get(impl) or {}, b.get(impl) or {}
            changed = [f for f in sorted(set(fa) | set(fb)) if fa.get(f) != fb.get(f)]
            diffs += [f"{impl}: {f} {str(fa.get(f))[:12]} vs {str(fb.get(f))[:12]}" for f in changed[:3]]
            if impl not in a or impl not in b:
                diffs.append(f"{impl}: a port in one, none in the other")
        if diffs:
            return "; ".join(diffs)
    text = f"{a!r} and {b!r}"
    return text if len(text) <= 300 else text[:297] + "..."


def read_report(path: Path) -> dict[str, Any]:
    """A shard's report, checked (json_report.read_report: size, file kind, nesting, schema) and a
    shard's: it has ``meta.shard``, which is consistent, and it was not interrupted."""
    try:
        doc = json_report.read_report(path)
    except json_report.ReportError as exc:
        raise ShardError(str(exc)) from None
    shard = doc["meta"].get("shard")
    if shard is None:
        raise ShardError(f"{path}: not a shard's report (no meta.shard: written by verify --shard K/N)")
    where = f"{path}: shard {shard['index']}/{shard['total']}"
    if shard["index"] > shard["total"]:
        raise ShardError(f"{where}: field 'meta.shard.index' is larger than 'meta.shard.total'")
    outside = [u for u in shard["units"] if u not in set(shard["order"])]
    if outside or len(set(shard["units"])) != len(shard["units"]):
        what = f"{outside[0]!r} is not in 'meta.shard.order'" if outside else "a unit is listed twice"
        raise ShardError(f"{where}: field 'meta.shard.units': {what}")
    if doc["interrupted"]:
        ran = len({c["case"] for c in doc["cases"]})
        raise ShardError(
            f'{where} was interrupted (SIGINT/SIGTERM; "interrupted": true): it holds {ran} case(s) of the '
            f"{len(shard['units'])} unit(s) it owed; run the shard again"
        )
    return doc


def check_complete(doc: dict[str, Any], results: Sequence[CaseResult], path: Path) -> None:
    """The shard's results are exactly the units its ``meta.shard.units`` owed, for every
    implementation: each case once (a generated run: the cases of its operations, as many as each
    implementation's search tally says it judged). Anything else is a ShardError naming what."""
    meta = doc["meta"]
    shard = meta["shard"]
    owed = shard["units"]
    where = f"{path}: shard {shard['index']}/{shard['total']}"
    impls = meta["implementations"]
    strangers = sorted({r.impl for r in results} - set(impls))
    if strangers:
        raise ShardError(f"{where} holds results of {', '.join(strangers)}, not in 'meta.implementations'")
    for impl in impls:
        mine = [r for r in results if r.impl == impl and r.op != "-"]  # "-": it could not start
        if meta["tier"] == "random":
            tally = (meta.get("random") or {}).get("runs", {}).get(impl)
            extra = sorted({r.op for r in mine} - set(owed))
            judged = 0 if tally is None else tally["examples"]
            if extra:
                raise ShardError(f"{where}: {impl} holds generated cases of {', '.join(extra)}, which it did not owe")
            if len(mine) != judged:
                raise ShardError(
                    f"{where}: {impl} holds {len(mine)} generated case(s), but its search tally "
                    f"(meta.random.runs) says it judged {judged}: the report lost or gained cases"
                )
            continue
        if not mine and any(r.impl == impl for r in results):
            continue  # an implementation that could not start: one placeholder, as in the whole run
        ran = [r.case for r in mine]
        missing = [u for u in owed if u not in set(ran)]
        extra = sorted(set(ran) - set(owed))
        twice = sorted({c for c in ran if ran.count(c) > 1}) if len(ran) != len(set(ran)) else []
        for what, ids in (("lacks", missing), ("holds cases it did not owe:", extra), ("holds twice:", twice)):
            if ids:
                shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
                counted = f"{len(ids)} of the {len(owed)} case(s) it owed: " if what == "lacks" else ""
                raise ShardError(f"{where}: {impl} {what} {counted}{shown}")


COUNTED = ("requested", "examples", "missing", "uncertified")  # a generated run's tally, summed over shards


def merge(paths: Sequence[Path], strict: bool = False) -> Report:
    """One report of the whole run from its shards' JSON reports. ShardError, naming the files and
    what is wrong, when one is not a valid shard's report (:func:`read_report`), was interrupted,
    holds other cases than it owed (:func:`check_complete`), or when they are not the shards of one
    run (:data:`SAME`: another tier, fixtures, port files, seed, selection or run id), or are
    repeated, overlapping or missing."""
    if not paths:
        raise ShardError("merge-reports needs the JSON reports of a run's shards")
    docs = []
    for p in map(Path, paths):
        doc = read_report(p)
        try:
            results = json_report.case_results(doc, p)
        except json_report.ReportError as exc:
            raise ShardError(str(exc)) from None
        check_complete(doc, results, p)
        docs.append((p, doc, results))
    first_path, first, _ = docs[0]
    for path, doc, _ in docs[1:]:
        for key, what in SAME.items():
            a, b = _get(doc["meta"], key), _get(first["meta"], key)
            if a != b:
                raise ShardError(
                    f"{path} and {first_path} are not shards of one run: they differ in {what} ({_differ(key, a, b)})"
                )
    total = first["meta"]["shard"]["total"]
    seen: dict[int, Path] = {}
    owner: dict[str, Path] = {}
    for path, doc, _ in docs:
        index = doc["meta"]["shard"]["index"]
        if index in seen:
            raise ShardError(f"{seen[index]} and {path} are both shard {index}/{total}")
        seen[index] = path
        for unit in doc["meta"]["shard"]["units"]:
            if unit in owner:
                raise ShardError(f"{owner[unit]} and {path} overlap: both ran {unit!r}")
            owner[unit] = path
    missing = [f"{k}/{total}" for k in range(1, total + 1) if k not in seen]
    if missing:
        raise ShardError(
            f"shard(s) {', '.join(missing)} missing: merge-reports needs all {total} to make the run's report"
        )

    impls = list(first["meta"]["implementations"])
    order = {u: i for i, u in enumerate(first["meta"]["shard"]["order"])}
    results: list[tuple[tuple[int, int, int], CaseResult]] = []
    agreement: dict[tuple[str, str], Agreement] = {}
    placeholders: set[tuple[str, str]] = set()
    for _, doc, shard_results in docs:
        tier = doc["meta"]["tier"]
        for i, r in enumerate(shard_results):
            if r.op == "-" and (r.impl, r.case) in placeholders:
                continue  # an implementation that could not start: said once, as in the whole run
            if r.op == "-":
                placeholders.add((r.impl, r.case))
            # a generated run's unit is the operation (its cases keep their drawn order), others' the case
            unit = r.op if tier == "random" else r.case
            impl_at = impls.index(r.impl) if r.impl in impls else len(impls)
            results.append(((impl_at, order.get(unit, len(order)), i), r))
        for a, row in doc["agreement"].items():
            for b, cell in row.items():
                prev = agreement.get((a, b), Agreement())
                agreement[(a, b)] = Agreement(
                    prev.agree + cell["agree"], prev.compared + cell["compared"], prev.unknown + cell["unknown"]
                )
    meta = {k: v for k, v in first["meta"].items() if k != "shard"}
    meta["strict"] = strict = strict or any(doc["meta"]["strict"] for _, doc, _ in docs)
    meta["merged_from"] = [str(p) for p, _, _ in sorted(docs, key=lambda d: d[1]["meta"]["shard"]["index"])]
    if meta.get("tier") == "random":
        runs: dict[str, dict[str, Any]] = {}
        for _, doc, _ in docs:
            for impl, tally in (doc["meta"].get("random", {}).get("runs") or {}).items():
                into = runs.setdefault(impl, {**tally, **dict.fromkeys(COUNTED, 0), "first_uncertified": ""})
                for k in COUNTED:
                    into[k] += tally[k]
                into["first_uncertified"] = into["first_uncertified"] or tally["first_uncertified"]
        meta["random"] = {**meta["random"], "runs": runs}
    ordered = [r for _, r in sorted(results, key=lambda kv: kv[0])]
    # never interrupted: read_report refuses an interrupted shard. ci: CI=true's zero-pass rule is
    # judged here, on the whole run, never on a shard.
    return Report(ordered, meta, strict=strict, interrupted=False, ci=in_ci(), agreement_counts=agreement)


def main(paths: Sequence[Path], targets: dict[str, Path], strict: bool = False, gate: gates.Gates | None = None) -> int:
    """``attention-ports merge-reports``: the merged report's headline, its files, its exit status;
    the regression gates (``gate``) judged on the whole run."""
    from attention_ports.report import summary_lines

    report = merge(paths, strict)
    gate = gate or gates.Gates()
    gates.prepare_merged(gate, report)
    gated = gates.apply(report, gate) if gate else None
    print(f"merged {len(paths)} shard report(s) of a {report.meta.get('tier', '?')} run")
    print(summary_lines(report))
    outcome.write_reports(report, targets)
    gates.show(gated, gate)
    return outcome.exit_status(report, (report.meta.get("ports") or {}).keys())
