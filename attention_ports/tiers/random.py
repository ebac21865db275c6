"""Generated cases: hypothesis draws them, the truth engine certifies them, ``judge`` decides.

The fixture runner (``attention_ports.judge.runner``) reads checked-in cases; this module makes new ones
at run time. Hypothesis draws a case with ``attention_ports.spec.strategies``; its expected outputs and
error bounds come from the same certified truth path as the fixtures (``truth.compute``, every
masked-query convention for a case with a fully masked query); the implementation runs it and the
one ``judge`` compares with the one comparator. On a failure hypothesis shrinks to a minimal case,
which is reported with the exact command that reproduces the run, and can be written out as a
fixture folder (a one-case catalogue of literal inputs, generated like ours) to keep for good.

Runs are deterministic for a given seed: the same seed draws the same cases in the same order and
shrinks the same way. Under CI the profile is a fixed seed and a bounded count (``CI_PROFILE``);
locally a fresh seed each run, printed, and more examples (``local_profile``).
"""

from __future__ import annotations

import os
import secrets
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.core.io import atomic_write
from attention_ports.fixtures.store import CATALOGUE, Case, Expected, generate
from attention_ports.judge.results import FAILING, CaseResult, OutputResult
from attention_ports.judge.runner import in_ci, judge
from attention_ports.runtimes.impl import Implementation
from attention_ports.spec import conventions, precision
from attention_ports.spec.precision import Format
from attention_ports.spec.strategies import Drawn
from attention_ports.tools import coverage
from attention_ports.truth import engine as truth
from attention_ports.truth.bounds import BoundError

SEED_ENV = "ATTENTION_PORTS_RANDOM_SEED"
EXAMPLES_ENV = "ATTENTION_PORTS_RANDOM_EXAMPLES"


@dataclass(frozen=True)
class Profile:
    examples: int  # generated cases per implementation
    seed: int


# CI's 105 cases (15 per operation) cost ~13 s over the four implementations on a quiet 2-core
# machine, Julia's compiles most of it (docs/generated-cases-and-mutation.md, "In CI"); the 15 trajectories (at most
# 6 steps each) add little. Locally twice as many.
CI_PROFILE = Profile(examples=105, seed=20261123)
LOCAL_EXAMPLES = 210


def local_profile() -> Profile:
    """A fresh seed every run (printed with any failure), unless $ATTENTION_PORTS_RANDOM_SEED fixes it."""
    seed = os.environ.get(SEED_ENV)
    examples = os.environ.get(EXAMPLES_ENV)
    return Profile(
        examples=int(examples) if examples else LOCAL_EXAMPLES,
        seed=int(seed) if seed else secrets.randbits(32),
    )


def profile() -> Profile:
    """The pytest suite's profile: fixed and bounded under CI=true, fresh and larger locally."""
    return CI_PROFILE if in_ci() else local_profile()


# ---------------------------------------------------------------- a drawn case, made a fixture case


def case_id(drawn: Drawn) -> str:
    digest = truth.cache_key(drawn.op, drawn.inputs, drawn.options, conventions.DEFAULT, None)
    return f"random_{drawn.op}_{digest[:10]}"


class NotApplicable(ValueError):
    """A drawn case that cannot be judged in the run's precision (the message says why): its values
    leave the format's range, its rounding leaves the error analysis's first-order regime, or its
    bounds pass the tier's limit (the fixture tier's rules, attention_ports/fixtures/precision.py)."""


def make_case(drawn: Drawn, fmt: Format | None = None) -> Case:
    """The drawn case with its exact expected outputs and bounds, as a fixture case would hold them.

    ``fmt`` (a precision tier, issue 17): the inputs and real scalar options rounded to it (the
    truth is exact at what a ``fmt`` implementation is given), the bounds from the same rules at
    its constants (``truth.precision.rules``), and :class:`NotApplicable` where the fixture tier
    would list the case as not applicable."""
    if fmt is None or fmt.name == precision.DEFAULT:
        return _make_case(drawn)
    from attention_ports.fixtures import precision as tier
    from attention_ports.truth.precision import rules

    reason = tier.out_of_range(drawn.op, drawn.options, drawn.inputs, fmt)
    if reason:
        raise NotApplicable(reason)
    rounded = Drawn(drawn.op, tier.round_inputs(drawn.inputs, fmt), tier.round_options(drawn.op, drawn.options, fmt))
    with rules(fmt):
        try:
            case = _make_case(rounded)
        except BoundError as exc:
            raise NotApplicable(tier.leaves_first_order(fmt, exc)) from None
    for outputs in [case.expected, *case.conventions.values()]:
        reason = tier.after_truth(case.id, {n: (e.array, e.bound) for n, e in outputs.items()}, fmt)
        if reason:
            raise NotApplicable(reason)
    return replace(case, reason=f"{case.reason}, rounded to {fmt.name}", precision=fmt.name)


def _make_case(drawn: Drawn) -> Case:
    cid = case_id(drawn)

    def outputs(convention: str) -> dict[str, Expected]:
        res = truth.compute(drawn.op, drawn.inputs, drawn.options, masked_query=convention, label=cid)
        return {name: Expected(e, b) for name, (e, b) in res.items()}

    dead = conventions.dead_rows(drawn.op, drawn.inputs)
    by_convention = {c: outputs(c) for c in conventions.CONVENTIONS} if dead else {}
    return Case(
        id=cid,
        op=drawn.op,
        reason=f"generated by hypothesis: {drawn.describe()}",
        flags=("random", conventions.FLAG) if dead else ("random",),
        options=dict(drawn.options),
        inputs=dict(drawn.inputs),
        expected=by_convention.get(conventions.DEFAULT) or outputs(conventions.DEFAULT),
        dead_rows=dead,
        conventions=by_convention,
    )


# ---------------------------------------------------------------- running


@dataclass
class Failure:
    """The minimal failing case hypothesis shrank to, and its verdicts."""

    drawn: Drawn
    case: Case
    results: list[OutputResult]

    def message(self) -> str:
        lines = [f"generated case {self.case.id}: {self.drawn.describe()}"]
        lines += list(dict.fromkeys(r.message for r in self.results if r.status != "pass" and r.message))
        lines.append(self.inputs_text())
        return "\n".join(lines)

    def inputs_text(self, max_elements: int = 64) -> str:
        """The inputs themselves, every digit (a shrunk case is small), or their shapes when large."""
        out = ["  inputs:"]
        for name, arr in self.case.inputs.items():
            if arr.size > max_elements:
                out.append(f"    {name}: {arr.dtype.name}{list(arr.shape)} (write it out with --dump)")
                continue
            head = f"    {name} = "
            opts = {"separator": ", ", "floatmode": "unique", "max_line_width": 110, "threshold": max_elements}
            out.append(head + np.array2string(arr, prefix=head, **opts))
        return "\n".join(out)


@dataclass
class RandomRun:
    impl: str
    seed: int
    requested: int
    operations: list[str]
    command: str  # the exact command that runs this again
    examples: int = 0  # generated cases judged (up to and including the first failure)
    missing: int = 0  # cases of an operation the implementation does not define
    # Drawn cases the truth engine could not certify (truth.TruthError), or whose error it cannot
    # bound to first order (bounds.BoundError: far too ill-conditioned): not judged, counted, and the
    # first one kept, so a limitation of the engine is reported, never taken for a port's fault.
    uncertified: int = 0
    first_uncertified: str = ""
    # The precision judged in (issue 17): at a lower tier, drawn cases its rules make not applicable
    # (NotApplicable: out of the format's range, past its first-order guard or its bound limit) are
    # not judged either, counted apart with the first reason.
    precision: str = precision.DEFAULT
    not_applicable: int = 0
    first_not_applicable: str = ""
    by_op: Counter[str] = field(default_factory=Counter)
    features: dict[str, Counter[str]] = field(default_factory=dict)  # op -> coverage feature -> cases
    failures: list[Failure] = field(default_factory=list)  # at most one per operation, each shrunk
    seconds: float = 0.0
    # Every judged case in the one result model (the reports'): the search's cases in the order
    # drawn, a failing one replaced by the minimal case hypothesis shrank it to.
    results: list[CaseResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failure(self) -> Failure | None:
        return self.failures[0] if self.failures else None

    def summary(self) -> str:
        ops = ", ".join(f"{op} {n}" for op, n in self.by_op.items())
        # As every report's headline (report/model.py): "all pass" only when every case ran.
        if not self.ok:
            verdict = f"FAIL ({', '.join(f.case.op for f in self.failures)})"
        elif self.examples == self.missing:  # none drawn, or every one of an operation not implemented
            verdict = "nothing ran"
        elif self.missing:
            verdict = f"pass for {self.examples - self.missing} of {self.examples}"
        else:
            verdict = "all pass"
        extra = f", {self.missing} missing (operation not implemented)" if self.missing else ""
        if self.uncertified:
            extra += f", {self.uncertified} drawn case(s) the truth engine could not certify (not judged)"
        if self.not_applicable:
            extra += f", {self.not_applicable} drawn case(s) not applicable at {self.precision} (not judged)"
        at = "" if self.precision == precision.DEFAULT else f" at {self.precision}"
        return (
            f"{self.impl}: {self.examples} generated cases{at}, {verdict}{extra} ({ops}) "
            f"in {self.seconds:.1f} s, seed {self.seed}"
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "impl": self.impl,
            "seed": self.seed,
            "requested": self.requested,
            "examples": self.examples,
            "missing": self.missing,
            "uncertified": self.uncertified,
            "first_uncertified": self.first_uncertified,
            **(
                {}
                if self.precision == precision.DEFAULT
                else {
                    "precision": self.precision,
                    "not_applicable": self.not_applicable,
                    "first_not_applicable": self.first_not_applicable,
                }
            ),
            "ok": self.ok,
            "by_operation": dict(self.by_op),
            "command": self.command,
            "failures": [
                {
                    "case": f.case.id,
                    "op": f.case.op,
                    "drawn": f.drawn.describe(),
                    "results": [r.as_json() for r in f.results],
                }
                for f in self.failures
            ],
            "seconds": round(self.seconds, 3),
        }


class _Disagrees(AssertionError):
    """Raised inside the property so that hypothesis shrinks the case."""


def random_command(
    impl: str, examples: int, seed: int, port: Path | None, operations: list[str] | None, fmt: str = precision.DEFAULT
) -> str:
    parts = ["attention-ports verify", f"--random {examples}", f"--seed {seed}", f"--impl {impl}"]
    if fmt != precision.DEFAULT:
        parts.append(f"--precision {fmt}")
    if port is not None:
        parts.append(f"--port {impl}={port}")
    parts += [f"--op {op}" for op in operations or ()]
    return " ".join(parts)


def offered_operations(impl: Implementation, operations: list[str] | None) -> list[str]:
    """The operations to draw: those asked for (default: all), narrowed to what a port declares it
    offers."""
    from attention_ports.spec.strategies import STRATEGIES

    chosen = list(operations or STRATEGIES)
    declared = getattr(impl, "declaration", None)
    if declared is not None and declared.operations is not None:
        chosen = [op for op in chosen if op in declared.operations]
    return chosen


def quotas(examples: int, operations: list[str]) -> dict[str, int]:
    """``examples`` shared out evenly over ``operations`` (the first ones get the remainder)."""
    base, extra = divmod(examples, len(operations))
    return {op: base + (i < extra) for i, op in enumerate(operations)}


def run_random(
    impl_name: str,
    impl: Implementation,
    examples: int,
    seed: int,
    *,
    operations: list[str] | None = None,
    port: Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    only: Collection[str] | None = None,
    fmt: Format | None = None,
) -> RandomRun:
    """``examples`` generated cases on ``impl``, shared evenly over the operations; each operation is
    its own hypothesis search from ``seed``, so a failure in one is shrunk to its minimal case and the
    others still run. ``only``: run just these operations' searches (a shard), each with the quota
    it has in the whole run, so that the shards together draw exactly the whole run's cases.
    ``fmt``: the precision judged in (default float64; ``make_case``), ``impl`` running in it."""
    fmt = fmt or precision.FORMATS[precision.DEFAULT]
    ops = offered_operations(impl, operations)
    if fmt.name != precision.DEFAULT:  # a lower tier draws only the operations it has rules for
        ops = [op for op in ops if op in precision.tier_ops(fmt)]
    command = random_command(impl_name, examples, seed, port, operations, fmt.name)
    run = RandomRun(impl_name, seed, examples, ops, command, precision=fmt.name)
    if only is not None:
        run.requested = sum(q for op, q in quotas(examples, ops).items() if op in only) if ops else 0
    start = time.perf_counter()
    with np.errstate(all="ignore"):  # the coverage tally recomputes huge logits in float64
        for op, quota in quotas(examples, ops).items() if ops else ():
            if quota and (only is None or op in only):
                _search(run, op, quota, impl, progress, fmt)
    run.seconds = time.perf_counter() - start
    return run


def _search(
    run: RandomRun,
    op: str,
    quota: int,
    impl: Implementation,
    progress: Callable[[str, int, int], None] | None,
    fmt: Format,
) -> None:
    """One operation's hypothesis search; its minimal failing case, if any, joins ``run.failures``."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, reject, settings
    from hypothesis import seed as fix_seed

    from attention_ports.spec.strategies import STRATEGIES

    seen_failure = False
    last: dict[str, Any] = {}

    @fix_seed(run.seed)
    @settings(
        max_examples=quota,
        deadline=None,
        database=None,
        derandomize=False,
        phases=(Phase.generate, Phase.shrink),
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    @given(STRATEGIES[op]())
    def check(drawn: Drawn) -> None:
        nonlocal seen_failure
        try:
            case = make_case(drawn, fmt)
        except NotApplicable as exc:
            if not seen_failure:
                run.not_applicable += 1
                run.first_not_applicable = run.first_not_applicable or f"{exc}: {drawn.describe()}"
            reject()  # as an uncertified draw: drawn again, neither an example nor a failure
        except (truth.TruthError, BoundError) as exc:
            if not seen_failure:
                run.uncertified += 1
                run.first_uncertified = run.first_uncertified or f"{exc}: {drawn.describe()}"
            reject()  # drawn again: it counts neither as an example nor as a failure
        start = time.perf_counter()
        results = judge(run.impl, case, impl)
        statuses = {r.status for r in results}
        last.update(drawn=drawn, case=case, results=results, seconds=time.perf_counter() - start)
        if not seen_failure:  # tally the search, not the shrinking that follows a failure
            if not statuses & FAILING:  # a failing one is replaced by its minimal case below
                run.results.append(_case_result(run, case, results, last["seconds"]))
            run.examples += 1
            run.by_op[drawn.op] += 1
            run.missing += statuses == {"missing"}
            feats = coverage.features_of(drawn.op, drawn.options, drawn.inputs)
            run.features.setdefault(drawn.op, Counter()).update(feats)
            if progress:
                progress(run.impl, run.examples, run.requested)
        if statuses & FAILING:
            seen_failure = True
            raise _Disagrees(case.id)

    try:
        check()
    except _Disagrees:
        # Hypothesis replays the minimal failing example last, so ``last`` holds it.
        failure = Failure(last["drawn"], last["case"], last["results"])
        run.failures.append(failure)
        # the inputs themselves under each failing output: a shrunk case is small, and all one needs
        shown = [
            replace(o, message=f"{o.message}\n{failure.inputs_text()}") if o.status in FAILING else o
            for o in failure.results
        ]
        run.results.append(_case_result(run, failure.case, shown, last["seconds"]))


def _case_result(run: RandomRun, case: Case, results: list[OutputResult], seconds: float) -> CaseResult:
    """A judged generated case in the reports' result model; its repro is the run's command (the
    seed draws it again, and shrinks a failure to the same minimal case)."""
    extra = {"seed": run.seed, "drawn": case.reason.removeprefix("generated by hypothesis: ")}
    return CaseResult(run.impl, case.id, case.op, list(results), seconds, repro=run.command, extra=extra)


def reach(op: str, examples: int, seed: int) -> Counter[str]:
    """The coverage features (``attention_ports.tools.coverage``) that ``examples`` draws of ``op``'s
    strategy exercise, without running anything: what a run with this seed explores."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as fix_seed

    from attention_ports.spec.strategies import STRATEGIES

    seen: Counter[str] = Counter()

    @fix_seed(seed)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )
    @given(STRATEGIES[op]())
    def tally(drawn: Drawn) -> None:
        seen.update(coverage.features_of(drawn.op, drawn.options, drawn.inputs))

    with np.errstate(all="ignore"):
        tally()
    return seen


# ---------------------------------------------------------------- keeping a failing case


def _toml_scalar(x: Any) -> str:
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, str):
        return f'"{x}"'
    return repr(float(x))  # shortest round-trip form; inf, -inf and -0.0 are TOML floats too


def _toml_literal(value: Any) -> str:
    if isinstance(value, (list, tuple, np.ndarray)):
        return "[" + ", ".join(_toml_literal(v) for v in value) + "]"
    return _toml_scalar(value)


def catalogue_text(case: Case) -> str:
    """A one-case catalogue holding ``case``'s inputs as literals: exactly the same doubles."""
    lines = [
        "# A generated case kept as a fixture (attention-ports verify --random ... --dump).",
        "format_version = 2",
        "seed = 0",
        "",
        "[[case]]",
        f'id = "{case.id}"',
        f'op = "{case.op}"',
        f"reason = {_toml_scalar(case.reason.replace(chr(34), chr(39)))}",
        f"flags = {_toml_literal(list(case.flags))}",
    ]
    for name, arr in case.inputs.items():
        dtype = "" if arr.dtype == np.float64 else f', dtype = "{arr.dtype.name}"'
        literal = _toml_literal(arr.tolist() if arr.ndim else arr.item())
        lines.append(f'inputs."{name}" = {{literal = {literal}{dtype}}}')
    for key, value in case.options.items():
        if value is not None:
            lines.append(f"options.{key} = {_toml_literal(value)}")
    return "\n".join(lines) + "\n"


def dump(case: Case, out_dir: Path) -> Path:
    """Write ``case`` as a fixture folder (catalogue, manifest, .npy files) in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    catalogue = out_dir / CATALOGUE
    atomic_write(catalogue, catalogue_text(case).encode())
    generate(out_dir, catalogue, workers=1)
    return out_dir
