"""Run implementations over fixture cases and judge every output with the one comparator."""

from __future__ import annotations

import fnmatch
import os
import queue
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.fixtures.store import Case, Expected, FixtureError, iter_entries, load_case
from attention_ports.judge import diagnose, localise
from attention_ports.judge.compare import compare
from attention_ports.judge.results import (
    KEEP_ARRAYS_UP_TO,
    CaseResult,
    FailedArrays,
    OutputResult,
    said_at,
)
from attention_ports.runtimes import registry, supervisor
from attention_ports.runtimes.impl import (
    Implementation,
    ImplementationError,
    ImplementationUnavailable,
    OperationMissing,
)
from attention_ports.runtimes.supervisor import output_section
from attention_ports.spec import conventions, pairing, precision


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def repro_command(impl: str, case: str, port: Path | None, fixtures_dir: Path | None = None) -> str:
    """The command that runs just this case again, shell-quoted (a path may hold spaces or quotes)."""
    return repro_commands(impl, port, fixtures_dir)(case)


def repro_commands(impl: str, port: Path | None, fixtures_dir: Path | None = None) -> Callable[[str], str]:
    """:func:`repro_command` for each case of one implementation's run: the paths resolved once
    (three ``realpath`` calls a case were ~1% of a test run's CPU)."""
    tail = []
    if port is not None:
        tail += ["--port", f"{impl}={shown_path(port)}"]
    if fixtures_dir is not None and fixtures_dir.resolve() != _default_dir():
        tail += ["--dir", shown_path(fixtures_dir)]
    return lambda case: shlex.join(["attention-ports", "verify", "--impl", impl, "--case", case, *tail])


def shown_path(path: Path) -> str:
    """A path as the user gave it: relative to the current directory when it lies under it (the
    repro line then also runs on a colleague's checkout or another CI runner), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def _default_dir() -> Path:
    from attention_ports.fixtures.store import REPO_FIXTURES

    return REPO_FIXTURES.resolve()


def load_port(impl: Implementation) -> None:
    """Make an implementation load its port now, not at its first case: a Julia port loads lazily
    (on its first call, or when its declaration is read), and a load error found there would be
    each case's own error, its text repeated once per case. Raises ``ImplementationUnavailable``
    with the load error (the caller closes the implementation); an R port loads when made."""
    try:
        getattr(impl, "declaration", None)  # reading it loads the port (JuliaImplementation.declaration)
    except ImplementationError as exc:
        raise ImplementationUnavailable(str(exc)) from None


def open_implementation(name: str, port: Path | None) -> Implementation:
    """``registry.create`` and the port loaded (:func:`load_port`): one that cannot start or load
    raises ``ImplementationUnavailable`` naming why, before any case runs."""
    impl = registry.create(name, port)
    try:
        load_port(impl)
    except ImplementationUnavailable:
        impl.close()
        raise
    return impl


def offered_operations(impl: Implementation) -> tuple[str, ...] | None:
    """The operations an implementation declares it offers (a port's ``attention_ports``
    declaration); None when it declares none (the built-ins, a port without a declaration)."""
    declared = getattr(impl, "declaration", None)
    ops = getattr(declared, "operations", None)
    return tuple(ops) if ops is not None else None


def judge(impl_name: str, case: Case, impl: Implementation) -> list[OutputResult]:
    """Run one case on one implementation; one OutputResult per expected output.

    Each output is judged on its own: one the port did not return is a ``fail`` (the operation is
    implemented, so each of its outputs is owed) while the others are still compared; every output
    of an operation the implementation does not implement (``OperationMissing``) is ``missing``.
    A failing output's message is in the port's own terms (its layout, 1-based positions:
    ``impl.view``), followed by a diagnosis when a known mistake fits (attention_ports/judge/diagnose.py)
    and what the port printed.
    """

    def every(status: str, message: str) -> list[OutputResult]:
        return [
            OutputResult(impl_name, case.id, name, status, message=message, reason=case.reason, flags=case.flags)
            for name in case.expected
        ]

    try:
        # a port declaring the other rotary pairing gets the features permuted into its own (exact);
        # reading the declaration may load the port, whose failure is this case's error
        inputs, options, undo = pairing.for_port(
            case.op, case.inputs, case.options, getattr(impl, "rope_pairing", None)
        )
        actual = undo(impl.run(case.op, inputs, options))
    except OperationMissing as exc:
        return every("missing", f"case {case.id!r}: {exc}")
    except ImplementationError as exc:
        return every("error", f"case {case.id!r}: {impl_name} raised: {exc}")
    except Exception as exc:  # an adapter bug must not stop the run either
        return every("error", f"case {case.id!r}: {impl_name} adapter failed: {type(exc).__name__}: {exc}")
    convention = masked_query_convention(case, impl)
    results = [
        judge_output(impl_name, case, name, exp, actual, impl, convention)
        for name, exp in case.expected_for(convention).items()
    ]
    if convention is not None:
        _explain_convention(impl_name, case, convention, actual, results)
    _localise(case, case.expected_for(convention), actual, impl, results)
    printed = output_section(impl.last_output)  # what a port printed helps read its wrong numbers
    if printed:
        for r in results:
            if r.status == "fail":
                r.message += printed
    return results


def judge_output(
    impl_name: str,
    case: Case,
    name: str,
    exp: Expected,
    returned: Mapping[str, np.ndarray],
    impl: Implementation,
    convention: str | None = None,
) -> OutputResult:
    """One expected output against what the port returned (``returned``: every output it gave);
    ``exp`` is the expected output under ``convention`` (None: the case has one set of outputs)."""
    res = OutputResult(impl_name, case.id, name, "pass", reason=case.reason, flags=case.flags, masked_query=convention)
    if name not in returned:  # the operation ran, so the output is owed: a failure, not a partial port
        got = ", ".join(sorted(returned)) or "nothing"
        res.status = "fail"
        res.message = f"case {case.id!r}, output {name!r}: not returned (the port returned: {got})"
        return res
    actual = np.asarray(returned[name])
    cmp = compare(exp.array, actual, exp.bound, precision.FORMATS[case.precision])  # ulps of the tier's format
    res.expected_shape, res.actual_shape = cmp.expected_shape, cmp.actual_shape
    res.total = cmp.total
    if cmp.expected_shape == cmp.actual_shape:
        res.max_abs_err, res.max_rel_err = cmp.max_abs_err, cmp.max_rel_err
        res.max_ulp_err, res.err_over_bound = cmp.max_ulp_err, cmp.max_err_over_bound
        res.mismatches, res.nonfinite_mismatches = cmp.mismatches, cmp.nonfinite_mismatches
    else:
        res.mismatches = cmp.total  # nothing of a wrong shape agrees
    if cmp.ok:
        return res
    res.status = "fail"
    view = impl.view(case.op, name) if hasattr(impl, "view") else None  # duck-typed implementations too
    res.message = cmp.describe(case.id, name, view)
    masked_query = convention or declared_convention(impl, case.op)
    res.diagnosis = diagnose.explain(case, name, actual, view, masked_query, exp.array, exp.bound, returned)
    if res.diagnosis:
        res.message += f"\n  diagnosis: {res.diagnosis}"
    if max(exp.array.size, actual.size) <= KEEP_ARRAYS_UP_TO:
        res.arrays = FailedArrays(exp.array, np.asarray(actual, dtype=np.float64), exp.bound, view)
    return res


def _localise(
    case: Case,
    judged: Mapping[str, Expected],
    actual: Mapping[str, Any],
    impl: Implementation,
    results: list[OutputResult],
) -> None:
    """Where in a composite operation the case goes wrong (judge/localise.py), on each output."""
    views = {r.output: impl.view(case.op, r.output) if hasattr(impl, "view") else None for r in results}
    try:
        line = localise.locate(
            case.op,
            {r.output: r.status for r in results},
            {n: (e.array, e.bound, actual.get(n)) for n, e in judged.items()},
            lambda output: views[output].name if views.get(output) is not None else output,  # type: ignore[union-attr]
        )
    except Exception:  # a hint must never cost a verdict
        line = ""
    for r in results:
        r.localisation = line


def declared_convention(impl: Implementation, op: str) -> str:
    """The masked-query convention ``impl`` declares for ``op`` ('zeros' for duck-typed ones)."""
    pick = getattr(impl, "masked_query_for", None)
    return pick(op) if pick is not None else getattr(impl, "masked_query", "zeros")


def masked_query_convention(case: Case, impl: Implementation) -> str | None:
    """The convention ``impl`` is judged by on ``case``: its declared one where the case has a query
    whose mask removes every key (flagged masked_query), else None (one set of expected outputs)."""
    return declared_convention(impl, case.op) if case.conventions else None


def _same(a: Expected, b: Expected) -> bool:
    return np.array_equal(a.array, b.array, equal_nan=True) and np.array_equal(a.bound, b.bound)


def _explain_convention(
    impl_name: str, case: Case, convention: str, actual: dict[str, np.ndarray], results: list[OutputResult]
) -> None:
    """Say, on each failing output the convention decides, which convention was applied, and which
    one the outputs follow instead when they agree with another everywhere."""
    judged = case.expected_for(convention)
    # only failing outputs the convention decides, and whose diagnosis (diagnose.py) has not
    # already said it with the declaration in the port's language
    noted = [
        r
        for r in results
        if r.status == "fail"
        and r.output in judged
        and "masked_query" not in r.diagnosis
        and any(not _same(judged[r.output], by[r.output]) for by in case.conventions.values())
    ]
    if not noted:
        return  # nothing to say: no other convention is compared
    matches = [
        other
        for other in case.conventions
        if other != convention
        and all(
            name in actual and compare(exp.array, actual[name], exp.bound).ok
            for name, exp in case.expected_for(other).items()
        )
    ]
    lines = [
        f"  masked_query: queries {list(case.dead_rows)} have every key masked; {impl_name} is judged by its "
        f"convention {convention!r} ({conventions.MEANING[convention]}; 'zeros' unless a port declares another)"
    ]
    if matches:
        other = matches[0]
        lines.append(
            f"  the outputs follow the {other!r} convention instead ({conventions.MEANING[other]}): if that is "
            f"the port's convention, declare it ({conventions.declaration_hint(other)})"
        )
    for r in noted:
        r.message += "\n" + "\n".join(lines)


def select_entries(
    fixtures_dir: Path, case_globs: Iterable[str] = (), entries: Sequence[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The manifest's entries whose id matches one of ``case_globs`` (all of them without globs).

    ``entries``: the manifest's entries as the caller read them (``iter_entries``: validated), so
    that a caller making many runs over one folder reads and validates its manifest once.
    """
    globs = list(case_globs)
    entries = list(iter_entries(fixtures_dir) if entries is None else entries)
    if not globs:
        return entries
    chosen = [e for e in entries if any(fnmatch.fnmatchcase(e["id"], g) for g in globs)]
    if not chosen:
        why = _why_not_in_tier(fixtures_dir, globs)
        raise FixtureError(f"no case in {fixtures_dir} matches {' or '.join(globs)}{why}")
    return chosen


def _why_not_in_tier(fixtures_dir: Path, globs: list[str]) -> str:
    """For a lower tier's folder: why the catalogue's cases that the globs match are not in it
    (``--case 'gpt_train*' --precision float32``: "gpt_train: no case certifies at float32")."""
    from attention_ports.fixtures.store import REPO_FIXTURES

    fmt = precision.of_fixtures(fixtures_dir)
    if fmt.name == precision.DEFAULT:
        return ""
    try:
        main = [e for e in iter_entries(REPO_FIXTURES) if any(fnmatch.fnmatchcase(e["id"], g) for g in globs)]
    except FixtureError:
        return ""
    applicable = f"not applicable at {fmt.name} (the tier manifest's truth.not_applicable says why)"
    ops = dict.fromkeys(e["op"] for e in main)
    return "".join(f"; {op}: {precision.not_in_tier(op, fmt) or applicable}" for op in ops)


Progress = Callable[[str, int, int, str], None]
"""``progress(impl, done, total, case)``: one implementation's progress, always called from the thread
that called :func:`run_suite` (never concurrently), in the order the cases finish. ``done`` is 0
(``case`` "") when the implementation starts; ``done == total`` when it has run every case. With
concurrent implementations the events of different implementations interleave."""


# The order implementations are started in when they run side by side: the longest first (Julia
# compiles every operation on its first call), so the total is about the longest one alone.
START_ORDER = {"julia": 0, "r": 1, "torch": 2, "reference": 3}


def _expected_names(entry: dict[str, Any]) -> list[str]:
    expected = entry.get("expected")
    return list(expected) if isinstance(expected, dict) and expected else ["*"]


def load_cases(fixtures_dir: Path, entries: Iterable[dict[str, Any]]) -> dict[str, Case]:
    """Cases read once for many runs (``run_suite(loaded=...)``), by id. A case whose files are bad
    is left out: each run reads it and reports it as its own fixture error. Every array is made
    read-only, so that nothing one run does to a case can reach the next."""
    out: dict[str, Case] = {}
    for entry in entries:
        try:
            case = load_case(fixtures_dir, entry)
        except FixtureError:
            continue
        for arr in case.inputs.values():
            arr.flags.writeable = False
        for by_name in (case.expected, *case.conventions.values()):
            for exp in by_name.values():
                exp.array.flags.writeable = exp.bound.flags.writeable = False
        out[case.id] = case
    return out


def run_suite(
    fixtures_dir: Path,
    impl_names: list[str],
    ports: dict[str, Path] | None = None,
    case_globs: Iterable[str] = (),
    required: set[str] | None = None,
    progress: Progress | None = None,
    *,
    parallel: bool = True,
    stop: threading.Event | None = None,
    live: Mapping[str, Implementation] | None = None,
    entries: Sequence[dict[str, Any]] | None = None,
    on_open: Callable[[str, Implementation], None] | None = None,
    loaded: Mapping[str, Case] | None = None,
) -> list[CaseResult]:
    """Every selected case on every named implementation; results ordered by implementation (as
    named), then by case (manifest order), whether or not they ran side by side.

    ``parallel``: each implementation in a thread of its own (R and Julia each drive their own
    worker process; reference and torch compute in-process, NumPy and torch releasing the GIL),
    started longest first (:data:`START_ORDER`); the results are the same as one after another.
    ``stop``: once set, no further case starts; a case that ends in ``error`` after it was set
    is dropped (its worker was probably killed by the interruption), so the results are the cases
    that really ran. An implementation whose runtime cannot start is ``unavailable`` for each
    case, which becomes ``error`` when it is in ``required`` (asked for, or anything under CI=true);
    a port that does not load (a syntax error) is so too, found before its first case
    (:func:`open_implementation`), so that every case carries the one same message (the reports
    print it once for them all, ``report.text.failure_details``).
    A case whose fixture files are bad is ``error`` with ``fixture_error`` set, on every implementation.
    ``live``: implementations already made (a test's pool), used instead of new ones and left open.
    ``entries``: ``fixtures_dir``'s manifest entries, already read (:func:`select_entries`).
    ``on_open(name, impl)``: called (in the implementation's thread) once it has started and loaded.
    ``loaded``: cases of ``fixtures_dir`` already loaded, by id (:func:`load_cases`: a mutation
    kit's ~3,700 runs of ~190 cases read each once); any other selected case is read here.
    """
    ports = ports or {}
    required = required or set()
    stop = stop or threading.Event()
    entries = select_entries(fixtures_dir, case_globs, entries)
    cases: list[Case | FixtureError] = []
    for entry in entries:
        ready = (loaded or {}).get(entry.get("id", ""))
        if ready is not None:
            cases.append(ready)
            continue
        try:
            cases.append(load_case(fixtures_dir, entry))
        except FixtureError as exc:
            cases.append(FixtureError(f"case {entry.get('id', '?')!r}: fixture error: {exc}"))
    total = len(entries)
    # queue.Queue, not SimpleQueue: CPython 3.11's SimpleQueue.get(timeout=...) interrupted by a signal
    # can retry with a negative timeout, which blocks for ever (seen here: a SIGINT hung verify).
    events: queue.Queue[tuple[str, int, int, str]] = queue.Queue()

    def run_one(name: str, emit: Callable[[str, int, int, str], None]) -> list[CaseResult]:
        out: list[CaseResult] = []
        if stop.is_set():
            return out
        port = ports.get(name)
        emit(name, 0, total, "")
        impl: Implementation | None = (live or {}).get(name)
        unavailable = ""
        not_started = "could not start"  # what the cases that point at the first one say
        if impl is None:
            try:
                impl = registry.create(name, port)
            except ImplementationUnavailable as exc:
                unavailable = str(exc)
            else:
                try:
                    load_port(impl)
                except ImplementationUnavailable as exc:
                    impl.close()
                    unavailable, impl, not_started = str(exc), None, "the port did not load"
        else:
            try:
                load_port(impl)
            except ImplementationUnavailable as exc:  # the caller's to close
                unavailable, impl, not_started = str(exc), None, "the port did not load"
        owned = impl is not None and name not in (live or {})
        if impl is not None and on_open is not None:
            on_open(name, impl)
        # A port that cannot load: the first case says why, every later one points there (a load error
        # is the same for every case; it may hold 256 KiB of what the port printed): printed once by
        # the report's grouping of equal messages, and stored once.
        not_loaded = ""
        unavailable_said = False
        repro = repro_commands(name, port, fixtures_dir)
        try:
            for i, (entry, case) in enumerate(zip(entries, cases, strict=True)):
                if stop.is_set():
                    break
                case_id = entry.get("id", "?")
                start = time.perf_counter()
                res = CaseResult(name, case_id, entry.get("op", "?"), repro=repro(case_id))
                if isinstance(case, FixtureError):
                    res.fixture_error = str(case)
                    res.outputs = [
                        OutputResult(name, case_id, o, "error", message=str(case)) for o in _expected_names(entry)
                    ]
                elif impl is None:
                    status = "error" if name in required else "unavailable"
                    res.outputs = [
                        OutputResult(name, case_id, o, status, message=unavailable) for o in _expected_names(entry)
                    ]
                    if not unavailable_said:  # said once, as not_loaded below
                        unavailable_said = True
                        unavailable = said_at(name, not_started, case_id)
                elif not_loaded:
                    res.outputs = [
                        OutputResult(name, case_id, o, "error", message=not_loaded) for o in _expected_names(entry)
                    ]
                else:
                    res.outputs = judge(name, case, impl)
                    failure = getattr(impl, "load_failure", None)
                    if res.status == "error" and failure is not None and failure():
                        not_loaded = said_at(name, "the port did not load", case_id)
                res.seconds = time.perf_counter() - start
                if stop.is_set() and res.status == "error":
                    break  # cut short by the interruption, not the implementation's own doing
                out.append(res)
                emit(name, i + 1, total, case_id)
        finally:
            if owned:
                impl.close()
        return out

    if not parallel or len(impl_names) < 2:
        by_impl = {name: run_one(name, progress or _ignore) for name in impl_names}
        return [r for name in impl_names for r in by_impl[name]]

    by_impl: dict[str, list[CaseResult]] = {}
    failures: list[BaseException] = []

    def thread_main(name: str) -> None:
        try:
            by_impl[name] = run_one(name, lambda *event: events.put(event))
        except BaseException as exc:  # a bug: re-raised in the caller's thread once all have ended
            failures.append(exc)
            stop.set()

    threads = [
        threading.Thread(target=thread_main, args=(name,), name=f"attention-ports-{name}", daemon=True)
        for name in sorted(dict.fromkeys(impl_names), key=lambda n: START_ORDER.get(n, len(START_ORDER)))
    ]
    try:
        for t in threads:
            t.start()
        _pump(threads, events, progress, stop)
    except BaseException:  # KeyboardInterrupt in the caller's thread: stop the others, then re-raise
        stop.set()
        supervisor.shutdown_all()
        for t in threads:
            t.join()
        raise
    if failures:
        raise failures[0]
    return [r for name in impl_names for r in by_impl.get(name, [])]


def _ignore(*_: object) -> None:
    pass


def _pump(
    threads: list[threading.Thread],
    events: queue.Queue[tuple[str, int, int, str]],
    progress: Progress | None,
    stop: threading.Event,
) -> None:
    """Until every thread has ended: hand their progress events to ``progress`` in this thread, and
    once ``stop`` is set, kill the workers again every second (one started just after the signal)."""
    last_kill = 0.0
    while True:
        alive = any(t.is_alive() for t in threads)
        try:
            event = events.get(timeout=0.05)
        except queue.Empty:
            event = None
        if event is not None and progress is not None:
            progress(*event)
        if stop.is_set() and alive and time.monotonic() - last_kill > 1.0:
            supervisor.shutdown_all()
            last_kill = time.monotonic()
        if not alive and event is None and events.empty():
            return
