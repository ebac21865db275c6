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

Layer: pipeline (above ``outcome``, below ``verify``, which asks it for a shard's part); imports
``judge`` and ``report``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attention_ports.judge.results import CaseResult, OutputResult
from attention_ports.judge.runner import in_ci
from attention_ports.pipeline import outcome
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


# --------------------------------------------------------------------- merging
# meta entries every shard of one run shares (the others, e.g. versions and port paths, may differ
# from one CI runner to the next)
SAME = {
    "tier": "the tier",
    "implementations": "the implementations",
    "fixtures.manifest_sha256": "the fixtures (manifest hash)",
    "random.seed": "the seed",
    "random.examples": "the cases per implementation",
    "random.operations": "the operations",
    "scale.catalogue_sha256": "the scale catalogue",
    "scale.rows_per_case": "the sampled rows per case",
    "shard.total": "the number of shards",
    "shard.order": "the selected cases",
}


def _get(meta: dict[str, Any], dotted: str) -> Any:
    node: Any = meta
    for key in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, str) else x  # "inf", "nan": JSON's text for them


def read_report(path: Path) -> dict[str, Any]:
    from attention_ports.report.json_report import REPORT_VERSION

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ShardError(f"{path}: not a readable JSON report ({exc})") from exc
    if not isinstance(doc, dict) or doc.get("version") != REPORT_VERSION:
        got = doc.get("version") if isinstance(doc, dict) else None
        raise ShardError(f"{path}: report format {got!r}, merge-reports reads format {REPORT_VERSION}")
    for key in ("meta", "results", "cases", "agreement"):
        if key not in doc:
            raise ShardError(f"{path}: no {key!r} in the report")
    if not isinstance(doc["meta"].get("shard"), dict):
        raise ShardError(f"{path}: not a shard's report (no meta.shard: written by verify --shard K/N)")
    return doc


def results_of(doc: dict[str, Any], path: Path) -> list[CaseResult]:
    """The report's CaseResults, rebuilt from its ``cases`` and ``results``."""
    outputs: dict[tuple[str, str], list[OutputResult]] = {}
    for o in doc["results"]:
        try:
            res = OutputResult(
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
                reason=o["reason"],
                flags=tuple(o["flags"]),
                masked_query=o["masked_query"],
                localisation=o.get("localisation", ""),  # a report before issue 26 has none
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ShardError(f"{path}: a result lacks or mistypes a field ({exc!r})") from exc
        outputs.setdefault((res.impl, res.case), []).append(res)
    out = []
    for c in doc["cases"]:
        try:
            key = (c["impl"], c["case"])
            out.append(
                CaseResult(
                    c["impl"],
                    c["case"],
                    c["op"],
                    outputs.pop(key, []),
                    repro=c["repro"],
                    fixture_error=c["fixture_error"],
                    extra=c["extra"],
                )
            )
        except (KeyError, TypeError) as exc:
            raise ShardError(f"{path}: a case entry lacks a field ({exc!r})") from exc
    if outputs:
        raise ShardError(f"{path}: results of {sorted(outputs)[0]} have no entry in 'cases'")
    return out


COUNTED = ("requested", "examples", "missing", "uncertified")  # a generated run's tally, summed over shards


def merge(paths: Sequence[Path], strict: bool = False) -> Report:
    """One report of the whole run from its shards' JSON reports (ShardError, naming the files, when
    they are not the shards of one run: another tier, fixtures, seed or selection; overlapping,
    repeated or missing shards)."""
    if not paths:
        raise ShardError("merge-reports needs the JSON reports of a run's shards")
    docs = [(Path(p), read_report(Path(p))) for p in paths]
    first_path, first = docs[0]
    for path, doc in docs[1:]:
        for key, what in SAME.items():
            if _get(doc["meta"], key) != _get(first["meta"], key):
                values = f"{_get(doc['meta'], key)!r} and {_get(first['meta'], key)!r}"
                raise ShardError(f"{path} and {first_path} are not shards of one run: they differ in {what} ({values})")
    total = first["meta"]["shard"]["total"]
    seen: dict[int, Path] = {}
    owner: dict[str, Path] = {}
    for path, doc in docs:
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
    for path, doc in docs:
        tier = doc["meta"]["tier"]
        for i, r in enumerate(results_of(doc, path)):
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
    meta["strict"] = strict = strict or any(doc["meta"].get("strict") for _, doc in docs)
    meta["merged_from"] = [str(p) for p, _ in sorted(docs, key=lambda d: d[1]["meta"]["shard"]["index"])]
    if meta.get("tier") == "random":
        runs: dict[str, dict[str, Any]] = {}
        for _, doc in docs:
            for impl, tally in (doc["meta"].get("random", {}).get("runs") or {}).items():
                into = runs.setdefault(impl, {**tally, **dict.fromkeys(COUNTED, 0), "first_uncertified": ""})
                for k in COUNTED:
                    into[k] += tally[k]
                into["first_uncertified"] = into["first_uncertified"] or tally["first_uncertified"]
        meta["random"] = {**meta["random"], "runs": runs}
    interrupted = any(doc.get("interrupted") for _, doc in docs)
    ordered = [r for _, r in sorted(results, key=lambda kv: kv[0])]
    return Report(ordered, meta, strict=strict, interrupted=interrupted, ci=in_ci(), agreement_counts=agreement)


def main(paths: Sequence[Path], targets: dict[str, Path], strict: bool = False) -> int:
    """``attention-ports merge-reports``: the merged report's headline, its files, its exit status."""
    from attention_ports.report import summary_lines

    report = merge(paths, strict)
    print(f"merged {len(paths)} shard report(s) of a {report.meta.get('tier', '?')} run")
    print(summary_lines(report))
    outcome.write_reports(report, targets)
    return outcome.exit_status(report, (report.meta.get("ports") or {}).keys())
