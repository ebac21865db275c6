"""The one verify pipeline: a case source, one selection of implementations, one result model, one report.

Every tier of ``attention-ports verify`` runs the same steps:

1. :func:`select_implementations`: which implementations run (``--impl``, ``--port``) and which are
   *required* (asked for by name, or every one under CI=true), whatever the tier;
2. a :class:`CaseSource` yields the cases and runs them: the committed catalogue
   (:class:`CatalogueSource`: the fixture cases, ``judge.runner.run_suite``), generated cases
   (:class:`RandomSource`: hypothesis draws, ``tiers.random.run_random``), the scale tier
   (:class:`ScaleSource`: ``tiers.scale.run_tier``). Each judges with the one ``judge.runner.judge``
   (the scale tier adds its every-row comparison between implementations) and hands back the one
   result model, ``judge.results.CaseResult``; a new source (a precision, an operation) is one
   more class here;
3. ``--shard K/N`` (attention_ports/pipeline/shards.py) keeps the K-th of N parts of the source's
   *units* (its cases; a generated run's operations, each its own hypothesis search), balanced by
   their expected cost;
4. one ``report.Report`` (the verdict), printed as the tier prints it and written in every format
   (``--json``, ``--junit``, ``--markdown``, ``--html``) by ``outcome.write_reports``;
   ``outcome.exit_status`` turns it into the exit status, for ``verify`` and for ``merge-reports``
   alike.

Layer: pipeline (above ``shards`` and ``outcome``); imports every layer up to ``tiers`` (the
random and scale tiers lazily: hypothesis is an optional extra).
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import math
import secrets
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attention_ports.core import progress
from attention_ports.fixtures.store import REPO_FIXTURES, FixtureError, iter_entries, read_manifest
from attention_ports.judge.results import CaseResult, OutputResult
from attention_ports.judge.runner import in_ci, load_port, run_suite, select_entries
from attention_ports.judge.runner import offered_operations as runner_offered
from attention_ports.pipeline import shards
from attention_ports.report import Report, accuracy_table, failure_details, summary_lines, table
from attention_ports.runtimes import precision as in_precision
from attention_ports.runtimes import registry
from attention_ports.runtimes.impl import Implementation, ImplementationUnavailable
from attention_ports.spec import ops
from attention_ports.spec import precision as formats
from attention_ports.tools import doctor

TIERS = ("catalogue", "random", "scale")


class UsageError(Exception):
    """Options that do not go together (exit 2, the message names them)."""


# --------------------------------------------------------------------- which implementations run
@dataclass(frozen=True)
class Selection:
    impls: list[str]  # in the order the reports show them
    ports: dict[str, Path]  # a user's port file per implementation name
    required: set[str]  # an implementation that cannot start is an error, not "unavailable"


def select_implementations(impl_args: Iterable[str] | None, port_args: Iterable[tuple[str, Path]]) -> Selection:
    """The implementations a run uses, for every tier: those named by ``--impl`` (default: every
    built-in one, or only the ``--port`` ones when ports are given), then each ``--port`` not named
    yet. Required: those named (``--impl``, ``--port``), or under CI=true every built-in one (a
    runtime that cannot start in CI is a failure, never a skip)."""
    named = list(impl_args or [])
    ports = dict(port_args)
    impls = named or (list(registry.IMPLEMENTATIONS) if not ports else list(ports))
    impls = list(dict.fromkeys([*impls, *ports]))
    required = set(registry.IMPLEMENTATIONS) if in_ci() else set(named) | set(ports)
    return Selection(impls, ports, required)


# --------------------------------------------------------------------- meta
def fixtures_meta(fixtures_dir: Path) -> dict[str, str]:
    """Which fixtures a report judged by: the folder and the sha256 of its manifest (which holds the
    sha256 of every case file, so one hash names them all)."""
    try:
        digest = hashlib.sha256((fixtures_dir / "manifest.json").read_bytes()).hexdigest()
    except OSError as exc:
        digest = f"unknown: {exc.strerror}"
    return {"dir": str(fixtures_dir), "manifest_sha256": digest}


def verify_meta(
    impls: list[str],
    ports: Mapping[str, Path],
    fixtures_dir: Path,
    tier: str = "catalogue",
    strict: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A verify report's ``meta``: the tier, what ran, on which fixtures, with which versions, and
    what the tier adds (``random``: seed and profile; ``scale``; ``shard``); the sha256 of every
    port file and the run's id (attention_ports/pipeline/shards.py: merge-reports refuses mixtures)."""
    meta = {
        "tier": tier,
        "strict": strict,
        "implementations": impls,
        "ports": {k: str(v) for k, v in ports.items()},
        "ports_sha256": shards.port_hashes(ports),
        "versions": doctor.runtime_versions(impls),
        "fixtures": fixtures_meta(fixtures_dir),
        **extra,
    }
    return {**meta, "run_id": shards.run_id(meta)}


# --------------------------------------------------------------------- declared operations
def declared_entry(fmt: formats.Format, operations: Iterable[str], tier_dir: Path | None = None) -> dict[str, Any]:
    """``meta.declared``'s entry for one implementation (report.model.Report.not_judged reads it):
    the precision it is judged in, the operations it offers that the run asks for, and, for each
    one the tier holds no case of, why: not in the tier (``spec.precision.not_in_tier``), or every
    one of its cases not applicable there (``tier_dir``'s manifest, ``truth.not_applicable``)."""
    ops = list(operations)
    reasons: dict[str, str] = {}
    present: set[str] = set()
    not_applicable: dict[str, int] = {}
    if fmt.name == formats.DEFAULT:
        return {"precision": fmt.name, "operations": ops, "reasons": reasons}
    if tier_dir is not None:
        manifest = read_manifest(tier_dir)
        present = {e["op"] for e in manifest["cases"]}
        op_of = {e["id"]: e["op"] for e in iter_entries(REPO_FIXTURES)}  # the tier's ids are the catalogue's
        for skipped in manifest["truth"].get("not_applicable") or []:
            op = op_of.get(skipped.get("id"))
            if op is not None:
                not_applicable[op] = not_applicable.get(op, 0) + 1
    for op in ops:
        why = formats.not_in_tier(op, fmt)
        if why is None and op not in present and not_applicable.get(op):
            n = not_applicable[op]
            why = (
                f"{'its one case' if n == 1 else f'all {n} cases'} not applicable at {fmt.name} "
                "(the tier manifest's truth.not_applicable says why)"
            )
        if why is not None:
            reasons[op] = why
    return {"precision": fmt.name, "operations": ops, "reasons": reasons}


def asked_operations(globs: Iterable[str], main: Sequence[dict[str, Any]] | None = None) -> list[str]:
    """The operations a catalogue run asks for: every one, or those of the catalogue's cases the
    ``--case`` globs match (in the main fixtures: a tier's case ids are the catalogue's).
    ``main``: the main manifest's entries, where the caller has read them."""
    globs = list(globs)
    if not globs:
        return list(ops.OPS)  # (the main manifest is read only when --case narrows them)
    entries = iter_entries(REPO_FIXTURES) if main is None else main
    return list(dict.fromkeys(e["op"] for e in entries if any(fnmatch.fnmatchcase(e["id"], g) for g in globs)))


# --------------------------------------------------------------------- case sources
@dataclass(frozen=True)
class Unit:
    """What a shard is made of: one case (a generated run: one operation's search) and its expected
    cost in arbitrary units, comparable within one source (attention_ports/pipeline/shards.py)."""

    id: str
    cost: float


class CaseSource:
    """Where a run's cases come from. ``units`` lists them (in the run's order) with their expected
    cost, ``run`` runs the selected units on the selected implementations and returns the one result
    model; ``terminal`` prints what this tier prints on a terminal once the report is built."""

    tier = ""
    graceful = False  # SIGINT/SIGTERM stop the run between cases and the report is still written

    def units(self) -> list[Unit]:
        raise NotImplementedError

    def run(self, sel: Selection, only: list[str] | None, stop: threading.Event) -> list[CaseResult]:
        raise NotImplementedError

    def meta(self) -> dict[str, Any]:
        return {}

    def fixtures_dir(self) -> Path:
        return REPO_FIXTURES.resolve()

    def terminal(self, report: Report, quiet: bool) -> None:
        if not quiet:
            print(table(report))
            print()
        details = failure_details(report, quiet)  # quiet: one line per failing output
        if details:
            print(details)
            print()
        print(summary_lines(report))


def exact_globs(ids: Iterable[str]) -> list[str]:
    """Case ids as globs that match only themselves (an id may hold ``[`` or ``*``)."""
    return [glob.escape(i) for i in ids]


# The cost of a catalogue case, in array elements: a fixed part for the call itself (a worker's round
# trip, the port's dispatch: about what moving this many elements costs), plus the elements of its
# inputs and expected outputs (what is sent, computed and compared; attention's weights, n_q x n_k
# per head, are among the outputs, so the quadratic part is counted). A trained classifier repeats
# its step once per epoch.
CALL_COST_ELEMENTS = 2000


def catalogue_cost(entry: Mapping[str, Any]) -> float:
    def elements(section: str) -> int:
        files = entry.get(section)
        if not isinstance(files, dict):
            return 0
        return sum(math.prod(f.get("shape") or [1]) for f in files.values() if isinstance(f, dict))

    repeats = 1
    if entry.get("op") == "classifier_train":
        repeats = int((entry.get("options") or {}).get("epochs") or 1)
    return CALL_COST_ELEMENTS + repeats * (elements("inputs") + elements("expected"))


class CatalogueSource(CaseSource):
    """The committed fixture cases (``--dir``, ``--case``): the default run.

    ``precision`` (``verify --precision``, attention_ports/spec/precision.py): every implementation
    is judged on that precision's tier (the built-ins run in it; R, double only, as it is).
    Without it each Julia ``--port`` is judged in the precision it declares and everything else
    in float64: one run of the runner per precision judged in (:func:`precision_groups`)."""

    tier = "catalogue"
    graceful = True

    def __init__(
        self,
        fixtures_dir: Path,
        case_globs: list[str],
        parallel: bool = True,
        precision: str | None = None,
        operations: list[str] | None = None,
    ) -> None:
        self.default_dir = fixtures_dir == REPO_FIXTURES  # no --dir: each tier's own fixtures
        self.precision = precision
        if precision is not None and self.default_dir:
            fixtures_dir = formats.fixtures_dir(precision)
        self.dir = fixtures_dir.resolve()  # as given, before anything can change the directory
        self.globs = case_globs
        self.parallel = parallel
        self.declared: dict[str, dict[str, Any]] = {}  # meta.declared, filled as implementations open
        self.operations = list(operations or [])  # --op: only these operations' cases

    def fixtures_dir(self) -> Path:
        return self.dir

    def _selected(self, fixtures_dir: Path) -> tuple[list[str], list[dict[str, Any]] | None]:
        """The case globs that select ``--case`` and ``--op`` in ``fixtures_dir`` (each precision's
        folder holds its own cases) and, with ``--op``, the matching manifest entries (read once:
        the runner takes them as they are) with their ids as the globs."""
        if not self.operations:
            return self.globs, None
        entries = [e for e in select_entries(fixtures_dir, self.globs) if e.get("op") in self.operations]
        if not entries:
            cases = f" matching {' or '.join(self.globs)}" if self.globs else ""
            raise FixtureError(f"no case{cases} in {fixtures_dir} is of operation {' or '.join(self.operations)}")
        return exact_globs(e["id"] for e in entries), entries

    def meta(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "selection": self.globs,
            **({} if self.precision is None else {"precision": self.precision}),
            **({"operations": self.operations} if self.operations else {}),  # --op: what was selected
        }
        if self.declared:
            out["declared"] = self.declared
        return out

    def units(self) -> list[Unit]:
        globs, entries = self._selected(self.dir)
        return [Unit(str(e.get("id", "?")), catalogue_cost(e)) for e in select_entries(self.dir, globs, entries)]

    def run(self, sel: Selection, only: list[str] | None, stop: threading.Event) -> list[CaseResult]:
        if only == []:
            return []
        results: list[CaseResult] = []
        for fixtures_dir, live in precision_groups(self.precision, sel, self.dir, self.default_dir):
            fmt = formats.of_fixtures(fixtures_dir)
            # A lower tier's own fixtures leave operations out (meta.declared says which and why);
            # float64's hold every operation, and a --dir folder holds what its author chose.
            lower = self.default_dir and fmt.name != formats.DEFAULT
            # the main folder's manifest read once for both (each read checks ~3,300 paths)
            main = list(iter_entries(fixtures_dir)) if self.globs and fixtures_dir == REPO_FIXTURES else None
            asked = [op for op in asked_operations(self.globs, main) if not self.operations or op in self.operations]
            tier = declared_entry(fmt, asked, fixtures_dir) if lower else None

            def opened(name: str, impl: Implementation, tier: dict[str, Any] | None = tier) -> None:
                if tier is not None and tier["reasons"]:
                    offered = runner_offered(impl)
                    chosen = [op for op in tier["operations"] if offered is None or op in offered]
                    reasons = {op: why for op, why in tier["reasons"].items() if op in chosen}
                    self.declared[name] = {**tier, "operations": chosen, "reasons": reasons}

            try:
                globs, entries = self._selected(fixtures_dir)
                if entries is None and main is not None:
                    entries = main  # run_suite selects the globs' cases from them
                results += run_suite(
                    fixtures_dir,
                    list(live),
                    sel.ports,
                    globs if only is None else exact_globs(only),
                    entries=entries,
                    required=sel.required,
                    progress=progress.VerifyProgress(),
                    parallel=self.parallel,
                    stop=stop,
                    live={n: i for n, i in live.items() if i is not None},
                    on_open=opened,
                )
            finally:
                for impl in live.values():
                    if impl is not None:
                        impl.close()
        return results

    def terminal(self, report: Report, quiet: bool) -> None:
        super().terminal(report, quiet)
        acc = accuracy_table(report)
        if acc and not quiet:
            print()
            print(acc)


Live = dict[str, Implementation | None]  # None: the runner builds the implementation as usual


def precision_groups(
    asked: str | None, sel: Selection, fixtures_dir: Path, default_dir: bool
) -> list[tuple[Path, Live]]:
    """One (fixtures folder, implementations) run per precision judged in.

    ``asked`` (``verify --precision``): every implementation in it, the built-ins run in it (R in
    double, as it only can). Otherwise each Julia port is judged in the precision it declares
    and everything else in float64. ``default_dir``: no ``--dir`` was given, so a tier's own
    fixtures are used; with ``--dir`` that folder is used for every precision.
    """

    def where(fmt: str) -> Path:
        return formats.fixtures_dir(fmt) if default_dir else fixtures_dir

    if asked is not None:
        live: Live = {}
        for name in sel.impls:
            live[name] = in_precision.create(name, sel.ports.get(name), asked)
            if name == "r" and asked != formats.DEFAULT:
                print(f"r: R computes in double only; the R port runs in float64 and is judged on the {asked} tier")
        return [(where(asked), live)]
    by_fmt: dict[str, Live] = {}
    for name in sel.impls:
        impl, fmt = None, formats.DEFAULT
        if name in sel.ports and in_precision.declares_precision(name):  # Julia, or a port run as a command
            impl, fmt = in_precision.declared(sel.ports[name], name)
        by_fmt.setdefault(fmt, {})[name] = impl
    return [(where(fmt), live) for fmt, live in by_fmt.items()]


# A generated case's relative cost per operation (the truth engine's exact evaluation is most of
# it; the strategies draw sizes of the same order for every operation), so a shard of operations is
# balanced by the number of cases each operation's search draws.
RANDOM_OP_COST = {"classifier_step": 3.0, "classifier_train": 6.0}


class RandomSource(CaseSource):
    """``--random N``: N cases per implementation drawn by hypothesis from ``--seed``, their truth
    certified at run time (attention_ports/tiers/random.py). The units are the operations: each is its
    own search from the seed, with the quota it has in the whole run.

    ``precision`` (``verify --precision``): every implementation judged in it, the built-ins run in
    it (R in double, as it only can); the drawn inputs rounded to it and the truth certified at its
    constants (``tiers.random.make_case``). Without it, a Julia ``--port`` in the precision it
    declares, everything else in float64."""

    tier = "random"

    def __init__(
        self,
        examples: int,
        seed: int | None,
        operations: list[str],
        dump: Path | None,
        precision: str | None = None,
    ) -> None:
        from attention_ports.tiers import random as generated  # hypothesis: the optional extra attention-ports[random]

        self.generated = generated
        self.precision = precision
        self.examples = examples
        self.seed = seed if seed is not None else secrets.randbits(32)
        self.operations = operations or None
        self.dump = dump
        self.runs: list[Any] = []
        self.declared: dict[str, dict[str, Any]] = {}  # meta.declared (Report.not_judged)

    def _ops(self) -> list[str]:
        from attention_ports.spec.strategies import STRATEGIES

        return list(self.operations or STRATEGIES)

    def units(self) -> list[Unit]:
        ops = self._ops()
        return [
            Unit(op, q * RANDOM_OP_COST.get(op, 1.0)) for op, q in self.generated.quotas(self.examples, ops).items()
        ]

    def meta(self) -> dict[str, Any]:
        return {
            **({} if self.precision is None else {"precision": self.precision}),
            **({"declared": self.declared} if self.declared else {}),
            "random": {
                "seed": self.seed,
                "examples": self.examples,
                "operations": self._ops(),
                "profile": self._profile(),
                "runs": {r.impl: _run_tally(r) for r in self.runs},
            },
        }

    def _profile(self) -> str:
        """``ci``: the pytest suite's fixed CI profile (tiers.random.CI_PROFILE); else ``custom``."""
        ci = self.generated.CI_PROFILE
        return "ci" if (self.examples, self.seed) == (ci.examples, ci.seed) else "custom"

    def run(self, sel: Selection, only: list[str] | None, stop: threading.Event) -> list[CaseResult]:
        print(f"{self.examples} generated cases per implementation, seed {self.seed}", file=sys.stderr)
        results: list[CaseResult] = []
        for name in sel.impls:
            port = sel.ports.get(name)
            try:
                impl, fmt = self._create(name, port)
            except ImplementationUnavailable as exc:
                print(f"{name}: unavailable: {exc}")
                status = "error" if name in sel.required else "unavailable"
                message = f"{name} unavailable: {exc}"
                out = OutputResult(name, "(generated cases)", "*", status, message=message)
                results.append(CaseResult(name, "(generated cases)", "-", [out]))
                continue
            try:
                # every operation asked for and offered (declared) by the port, with why its tier has none
                self.declared[name] = self._declared(impl, formats.get(fmt))
                run = self.generated.run_random(
                    name,
                    impl,
                    self.examples,
                    self.seed,
                    operations=self.operations,
                    port=port,
                    progress=_random_progress,
                    only=only,
                    fmt=formats.get(fmt),
                )
            finally:
                impl.close()
            self.runs.append(run)
            results += run.results
            self._print_run(run, name, port)
        return results

    def _declared(self, impl: Implementation, fmt: formats.Format) -> dict[str, Any]:
        """``meta.declared``'s entry: the operations asked (``--op``, default all) that the port
        offers and that the run draws cases of (a quota of 0 draws none: not asked), and those
        the tier has no rules for, with why (declared_entry)."""
        offered = self.generated.offered_operations(impl, self.operations)
        in_tier = [op for op in offered if formats.not_in_tier(op, fmt) is None]
        drawn = {op for op, q in (self.generated.quotas(self.examples, in_tier) if in_tier else {}).items() if q}
        return declared_entry(fmt, [op for op in offered if op in drawn or op not in in_tier])

    def _create(self, name: str, port: Path | None) -> tuple[Implementation, str]:
        """The implementation, its port loaded (a port that cannot load is ImplementationUnavailable,
        as one whose runtime cannot start: judge.runner.load_port), and the precision it is judged
        in (as :func:`precision_groups`)."""
        impl, fmt = self._made(name, port)
        try:
            load_port(impl)
        except ImplementationUnavailable:
            impl.close()
            raise
        return impl, fmt

    def _made(self, name: str, port: Path | None) -> tuple[Implementation, str]:
        if self.precision is not None:
            if name == "r" and self.precision != formats.DEFAULT:
                print(f"r: R computes in double only; the R port runs in float64 and is judged at {self.precision}")
            made = in_precision.create(name, port, self.precision)
            return made or registry.create(name, port), self.precision
        if port is not None and in_precision.declares_precision(name):
            declared, fmt = in_precision.declared(port, name)
            if declared is not None:
                return declared, fmt
        return registry.create(name, port), formats.DEFAULT

    def _print_run(self, run: Any, name: str, port: Path | None) -> None:
        print(run.summary())
        if run.first_uncertified:
            print(f"  the first case the truth engine could not certify: {run.first_uncertified}")
        if run.first_not_applicable:
            print(f"  the first case not applicable at {run.precision}: {run.first_not_applicable}")
        again = f"attention-ports verify --dir {{dir}} --impl {name}" + (f" --port {name}={port}" if port else "")
        for failure in run.failures:
            print(f"\n[{name}] {failure.message()}")
            print(f"  reproduce: {run.command}")
            if self.dump is None:
                keep = again.format(dir="DIR")
                print(f"  keep it: add --dump DIR to write this minimal case as fixture files, then {keep}")
            else:
                where = self.generated.dump(failure.case, self.dump / name / failure.case.op)
                print(f"  wrote it as fixtures in {where}: {again.format(dir=where)}")
            print()

    def terminal(self, report: Report, quiet: bool) -> None:
        # Each implementation's summary and its failures were printed as it ended; the headline
        # is every tier's.
        print(report.headline())


def _run_tally(run: Any) -> dict[str, Any]:
    tally = run.as_json()
    keys = ("requested", "examples", "missing", "uncertified", "first_uncertified", "command")
    return {k: tally[k] for k in (*keys, "precision", "not_applicable", "first_not_applicable") if k in tally}


def _random_progress(impl: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        end = "\n" if done == total else ""
        print(f"\r\033[K[{impl}] {done}/{total} generated cases", end=end, file=sys.stderr, flush=True)


class ScaleSource(CaseSource):
    """``--tier scale``: fixtures/scale.toml at L = 1024 ... 16384, sampled exact rows and every row
    between implementations within 2B (attention_ports/tiers/scale.py). The units are its cases; a case's
    cost is its L^2 x heads (the weights every call computes, the dominant term of truth and call)."""

    tier = "scale"

    def __init__(
        self,
        case_globs: list[str],
        use_cache: bool,
        catalogue: Path | None = None,
        n_rows: int = 0,
        precision: str | None = None,
        operations: list[str] | None = None,
    ) -> None:
        from attention_ports.tiers import scale

        self.scale = scale
        self.precision = precision  # verify --precision: the built-ins in it, inputs and bounds at it
        self.globs = case_globs
        self.use_cache = use_cache
        self.catalogue = catalogue or scale.CATALOGUE
        self.n_rows = n_rows or scale.ROWS
        self.operations = list(operations or [])  # --op: only these operations' cases
        self.result: Any = None

    def _cases(self) -> list[Any]:
        cases = self.scale.load_cases(self.globs, self.catalogue)
        if self.operations:
            cases = [c for c in cases if c.op in self.operations]
            if not cases:
                matching = f" matching {' or '.join(self.globs)}" if self.globs else ""
                ops_named = " or ".join(self.operations)
                raise FixtureError(f"no case{matching} in {self.catalogue} is of operation {ops_named}")
        return cases

    def units(self) -> list[Unit]:
        s = self.scale
        cases = self._cases()
        return [Unit(c.id, float(s.length(c) ** 2 * int(c.options.get("num_heads") or 1))) for c in cases]

    def meta(self) -> dict[str, Any]:
        digest = hashlib.sha256(Path(self.catalogue).read_bytes()).hexdigest()
        out: dict[str, Any] = {
            "catalogue": str(self.catalogue),
            "catalogue_sha256": digest,
            "rows_per_case": self.n_rows,
        }
        if self.result is not None:
            r = self.result
            out.update(
                truth_seconds=r.truth_seconds,
                bound_seconds=r.bound_seconds,
                wall_seconds=r.wall_seconds,
                harness_peak_rss_bytes=r.harness_peak_rss,
                describe=r.describe,
            )
        return {
            "selection": self.globs,
            **({} if self.precision is None else {"precision": self.precision}),
            "scale": out,
        }

    def run(self, sel: Selection, only: list[str] | None, stop: threading.Event) -> list[CaseResult]:
        if only == []:
            return []

        def say(msg: str) -> None:
            print(f"scale: {msg}", file=sys.stderr, flush=True)

        self.result = self.scale.run_tier(
            sel.impls,
            sel.ports,
            exact_globs(c.id for c in self._cases()) if only is None else exact_globs(only),
            use_cache=self.use_cache,
            say=say,
            catalogue=self.catalogue,
            required=sel.required,
            n_rows=self.n_rows,
            fmt=formats.get(self.precision or formats.DEFAULT),
        )
        return scale_results(self.result)

    def terminal(self, report: Report, quiet: bool) -> None:
        if self.result is None:
            print(report.headline())
            return
        print(self.scale.render(self.result))
        failing = [v for v in self.result.verdicts if v.status not in ("pass", "unavailable")]
        for v in failing:
            for m in v.messages:
                print(f"\n[{v.impl}] {m}")
        n = len(self.result.verdicts)
        print(f"\n{n - len(failing)} of {n} (implementation, case) pairs agree")
        print(report.headline())


# The scale tier's two checks as the outputs of a case in the one result model.
SCALE_ROWS = "sampled rows (exact)"
SCALE_PAIRS = "every row (2B, between implementations)"


def scale_results(result: Any) -> list[CaseResult]:
    """The scale tier's verdicts as CaseResults: each (implementation, case) has two outputs, the
    sampled rows against the exact truth (err/bound: the ``rows`` fraction) and every row against
    the other implementations within 2B (the ``all`` fraction; not for an operation without
    every-row bounds, the decoder block); a call that did not run has one, with its status.
    ``extra``: the call's time, the port's own time, calls and peak memory."""
    from attention_ports.tiers.scale import FULL_OUTPUTS, sample_rows

    runs = {(r.impl, r.case): r for rs in result.runs.values() for r in rs}
    ops = {c.id: c.op for c in result.cases}
    reasons = {c.id: c.reason for c in result.cases}
    by = {(v.impl, v.case): v for v in result.verdicts}
    out = []
    for impl in result.runs:
        for case in result.cases:
            v, run = by[(impl, case.id)], runs[(impl, case.id)]
            common = {"reason": reasons[case.id], "flags": tuple(case.flags)}
            if v.rows_ok is None:
                outputs = [OutputResult(impl, case.id, "*", v.status, message="\n".join(v.messages), **common)]
            else:
                rows_msgs = [m for m in v.messages if m != v.pairs_message]
                outputs = [
                    OutputResult(
                        impl,
                        case.id,
                        SCALE_ROWS,
                        "pass" if v.rows_ok else "fail",
                        err_over_bound=v.rows_over_bound,
                        message="\n".join(rows_msgs),
                        **common,
                    ),
                ]
                if FULL_OUTPUTS[case.op]:
                    outputs.append(
                        OutputResult(
                            impl,
                            case.id,
                            SCALE_PAIRS,
                            "pass" if v.pairs_ok else "fail",
                            err_over_bound=v.full_over_bound,
                            message=v.pairs_message,
                            **common,
                        )
                    )
            extra = {
                "sampled_rows": len(sample_rows(case, result.n_rows)),  # the decoder block's are fewer
                "rows_err_over_bound": v.rows_over_bound,
                "all_err_over_bound": v.full_over_bound,
                "call_status": run.status,
                "seconds": run.seconds,
                "port_seconds": run.port_seconds,
                "calls": run.calls,
                "peak_rss_bytes": run.peak_rss,
                "worker_peak_rss_bytes": run.worker_peak_rss,
            }
            repro = f"attention-ports verify --tier scale --impl {impl} --case {case.id}"
            if getattr(result, "precision", formats.DEFAULT) != formats.DEFAULT:
                repro += f" --precision {result.precision}"
            out.append(CaseResult(impl, case.id, ops[case.id], outputs, run.seconds, repro=repro, extra=extra))
    return out


# --------------------------------------------------------------------- the run
def source_from_args(args: Any) -> CaseSource:
    """The case source ``verify``'s options name (UsageError when they do not go together)."""
    random = args.random is not None or args.seed is not None or args.dump is not None
    operations = list(args.op)  # --op: an operation's cases in every tier
    precision = getattr(args, "precision", None)
    if precision is not None:
        try:
            precision = formats.get(precision, "--precision").name
        except formats.PrecisionError as exc:
            raise UsageError(str(exc)) from None
    if (random or args.tier == "scale") and precision is not None and formats.get(precision).storage is not None:
        # The mixed and float16 tiers state their rounding points for softmax and SDPA's fixtures;
        # generated and scale cases at them are not built yet (docs/precision.md, "Not yet built").
        which = "--tier scale" if args.tier == "scale" else "--random"
        raise UsageError(f"{which} judges float64 and float32: not --precision {precision} yet")
    outside = [
        op
        for op in operations
        if precision not in (None, formats.DEFAULT) and op not in formats.tier_ops(formats.get(precision))
    ]
    if outside:
        raise UsageError(f"--op {outside[0]}: the {precision} tier has no rules for it yet (docs/precision.md)")
    if args.tier == "scale":
        if random:
            raise UsageError("--tier scale and --random are two different runs")
        if args.dir != REPO_FIXTURES:
            raise UsageError("--dir selects fixture cases; --tier scale makes its own (fixtures/scale.toml)")
        return ScaleSource(args.case, use_cache=not args.no_cache, precision=precision, operations=operations)
    if random:
        if args.random is None or args.random < 1:
            raise UsageError("--seed and --dump go with --random N (N >= 1)")
        if args.case or args.dir != REPO_FIXTURES:
            raise UsageError("--case and --dir select fixture cases; --random generates its own")
        if args.dump is not None and precision not in (None, formats.DEFAULT):
            # A kept case is a float64 fixture folder; a tier's folder (its rounded inputs, its
            # bounds) from a generated case is not built yet.
            raise UsageError(f"--dump writes float64 fixtures: not with --precision {precision} yet")
        try:
            return RandomSource(args.random, args.seed, operations, args.dump, precision)
        except ImportError as exc:
            raise UsageError(f"--random needs hypothesis ({exc}): pip install 'attention-ports[random]'") from exc
    return CatalogueSource(
        args.dir, list(args.case), parallel=not args.sequential, precision=precision, operations=operations
    )


def run(
    source: CaseSource,
    sel: Selection,
    *,
    shard: shards.Shard | None = None,
    strict: bool = False,
    stop: threading.Event | None = None,
) -> Report:
    """Run the source's cases (the shard's part of them) and build the one report."""
    stop = stop or threading.Event()
    extra: dict[str, Any] = {}
    only = None
    if shard is not None:
        units = source.units()
        only = shards.part(units, shard)
        extra["shard"] = shards.shard_meta(shard, units, only)
    results = source.run(sel, only, stop)
    interrupted = stop.is_set()  # cases were left; a signal while the meta is gathered leaves none
    meta = verify_meta(sel.impls, sel.ports, source.fixtures_dir(), source.tier, strict, **source.meta(), **extra)
    return Report(results, meta, strict=strict, interrupted=interrupted, ci=in_ci())
