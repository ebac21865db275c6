"""The one result model every report format reads: built once from a run's results.

A :class:`Report` holds the run's :class:`~attention_ports.runner.CaseResult` list and what every
format derives from it: the implementations and cases in run order, each cell, the failures, the
per-implementation counts and worst errors, the verdict, and the implementation x implementation
agreement. The formats (``text``, ``json_report``, ``junit``, ``markdown``, ``html_page``) only
render it, so they cannot disagree about a verdict.

The verdict: a case is *failing* when its status is ``fail`` or ``error`` (an output its operation
owes and did not return is a ``fail``), and also when it is ``missing`` (an operation the
implementation does not implement) under ``--strict``. Under CI=true a run in which an
implementation passed zero cases fails too (as the pytest plugin's rule), and so does a run in
which nothing was judged at all; both rules are the *whole run's*: a shard's report (``meta.shard``)
does not apply them (``merge-reports`` does, on the merged run). ``missing`` and ``unavailable``
cases did not run: never a pass, counted apart, and the headline says PASS only when every case
asked for ran and agreed and every operation the implementations declare got a judged case at the
run's precision tier; otherwise how many passed of how many, what did not run, and the declared
operations that got no case, with the reason (:meth:`Report.not_judged`, :meth:`Report.headline`).
The command line's exit code follows :attr:`Report.ok`.

The regression gates (attention_ports/pipeline/gates.py) set :attr:`Report.known` (a failing case
whose every failing output a known-failures file lists is a *known failure*: neither failing nor a
pass) and :attr:`Report.gate_failures` (each fails the run) once the run is judged.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attention_ports.judge.compare import agree
from attention_ports.judge.results import FAILING, NOT_RUN, CaseResult, OutputResult

STATUSES = ("pass", "fail", "error", "missing", "unavailable")
# A case with a fully masked query is judged by the implementation's convention: its cell says which.
CONVENTION_MARK = {"zeros": "0", "nan": "NaN", "uniform": "1/n"}
CONVENTION_LEGEND = (
    "pass:0, pass:NaN, pass:1/n (FAIL: likewise): a case with a query whose mask removes every key, judged by "
    "the implementation's masked_query convention zeros, nan or uniform (ports/CONTRACT.md)"
)
COLUMNS_LEGEND = (
    "err/bnd: the worst |actual - expected| as a fraction of its certified error bound (<= 1 passes; nan/inf: "
    "a NaN or an infinity where a number belongs; shape: a wrong shape); bad: elements beyond their bounds; "
    "ulps: the worst error in units in the last place of the expected value (passes only)"
)
ULPS_NOTE = (
    "ulps inform, err/bnd decides: a pass can show 1e+05 ulps where an expected element is tiny beside the "
    "terms that made it (a cancelling sum, a weight near 0); its bound scales with those terms, so it allows "
    "many ulps of the small result"
)


def failing_statuses(strict: bool = False) -> set[str]:
    return FAILING | ({"missing"} if strict else set())


@dataclass(frozen=True)
class Agreement:
    """How often two implementations reached the same result on the outputs both ran.

    They agree on an output when both agree with the truth (then they are within twice the bound
    of each other), or both fail and their arrays agree with each other within twice the bound
    (the same mistake, e.g. a NaN convention). A pass against a fail is a disagreement. Outputs
    either one did not run (missing, error, unavailable) are not counted; neither are two
    failures whose arrays were too large to keep (``unknown``).
    """

    agree: int = 0
    compared: int = 0
    unknown: int = 0

    @property
    def fraction(self) -> float | None:
        return self.agree / self.compared if self.compared else None


@dataclass
class Report:
    results: list[CaseResult]
    meta: dict[str, Any] = field(default_factory=dict)
    strict: bool = False
    interrupted: bool = False  # SIGINT/SIGTERM ended the run: only the cases that ran are here
    ci: bool = False  # CI=true: an implementation that passed zero cases fails the run
    # The agreement counted already (merge-reports sums its shards': a shard holds every
    # implementation of its cases, and the arrays two failures are compared by are not in the JSON).
    agreement_counts: dict[tuple[str, str], Agreement] | None = None
    # The regression gates' findings (attention_ports/pipeline/gates.py), set once the run is judged:
    # (impl, case, output) -> "FILE:LINE: reason" for a failing output a known-failures file lists
    # (its case is then a known failure, not failing, unless another output fails unlisted), and
    # what the gates fail the run for (a listed output that now passes, a regression on the baseline).
    known: dict[tuple[str, str, str], str] = field(default_factory=dict)
    gate_failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.impls = list(dict.fromkeys(r.impl for r in self.results))
        # every implementation the run asked for, those without a single result too (a generated
        # run of operations a port's tier has no rules for): the zero-pass rule counts them
        self.asked = list(dict.fromkeys([*(self.meta.get("implementations") or []), *self.impls]))
        self.cases = list(dict.fromkeys(r.case for r in self.results))
        self.ops = {r.case: r.op for r in self.results}
        self._cells = {(r.impl, r.case): r for r in self.results}

    def cell(self, impl: str, case: str) -> CaseResult | None:
        return self._cells.get((impl, case))

    @property
    def failing_statuses(self) -> set[str]:
        return failing_statuses(self.strict)

    def is_known(self, r: CaseResult) -> bool:
        """A known failure: the case fails, and every failing output is listed in a known-failures file."""
        bad = [o for o in r.outputs if o.status in FAILING]
        return bool(bad) and all((r.impl, r.case, o.output) in self.known for o in bad)

    def is_failing(self, r: CaseResult) -> bool:
        return r.status in self.failing_statuses and not self.is_known(r)

    @property
    def known_failures(self) -> list[CaseResult]:
        return [r for r in self.results if self.is_known(r)]

    @property
    def failures(self) -> list[CaseResult]:
        return [r for r in self.results if self.is_failing(r)]

    @property
    def whole_run(self) -> bool:
        """The report is a whole run's, not one shard's (``verify --shard K/N`` writes ``meta.shard``;
        ``merge-reports`` drops it): only a whole run can prove that an implementation passed nothing."""
        return not isinstance(self.meta.get("shard"), dict)

    def zero_pass(self) -> list[str]:
        """Implementations the run asked for that passed not one case (CI=true fails such a run)."""
        passed = {r.impl for r in self.results if r.status == "pass"}
        return [impl for impl in self.asked if impl not in passed]

    def nothing_judged(self) -> bool:
        """No case was judged at all: nothing passed, failed or errored (it all did not run, or
        there was nothing to run)."""
        return not any(r.status == "pass" or r.status in FAILING for r in self.results)

    def ci_refused(self) -> bool:
        """CI=true's rule, on a whole run: an implementation passed zero cases, or nothing at all
        was judged (a run that asked for nothing proves nothing either)."""
        return self.ci and self.whole_run and bool(self.zero_pass() or self.nothing_judged())

    @property
    def ok(self) -> bool:
        """The run's verdict, the exit status's: nothing failing, and under CI every implementation
        passed something (on a whole run), and no regression gate failed. Cases that did not run
        (``missing``, ``unavailable``) do not make it false (except ``missing`` under --strict);
        :attr:`complete` says whether everything ran. An interrupted run is never ok: the cases it
        did not reach were never judged (its exit status is the signal's)."""
        return not self.failures and not self.ci_refused() and not self.gate_failures and not self.interrupted

    @property
    def complete(self) -> bool:
        """Every case asked for ran and agreed, and every declared operation got a judged case:
        the only run whose headline is a plain PASS."""
        return (
            self.ok
            and not self.interrupted
            and bool(self.results)
            and all(r.status == "pass" for r in self.results)
            and not self.not_judged()
        )

    def not_judged(self) -> dict[str, dict[str, str]]:
        """implementation -> operation -> why: the operations an implementation offers (its
        declaration, or every operation; narrowed by ``--case`` / ``--op``) that got no case at
        all at the precision tier it was judged in (``meta.declared``, written by the case
        source: e.g. gpt_train at float32, where no case certifies). A shard names only the
        reasons its tier states; a whole run also an offered operation none of whose cases was
        judged for another reason (every generated case of it not applicable)."""
        out: dict[str, dict[str, str]] = {}
        declared = self.meta.get("declared") or {}
        ops_with_results = {(r.impl, r.op) for r in self.results}
        for impl, d in declared.items():
            tier = d.get("precision", "float64")
            for op in d.get("operations") or []:
                if (impl, op) in ops_with_results:
                    continue
                reason = (d.get("reasons") or {}).get(op)
                if reason is None and self.whole_run:
                    reason = f"no case of it was judged at {tier}"
                if reason is not None:
                    out.setdefault(impl, {})[op] = reason
        return out

    def not_judged_lines(self) -> list[str]:
        """One line per unjudged declared operation (the reports' list of them):
        ``julia: gpt_train not judged at float32: no case certifies at float32 ...``."""
        declared = self.meta.get("declared") or {}
        return [
            f"{impl}: {op} not judged at {(declared.get(impl) or {}).get('precision', 'float64')}: {why}"
            for impl, ops in self.not_judged().items()
            for op, why in ops.items()
        ]

    def not_judged_text(self) -> str:
        """The unjudged declared operations in one clause (the headline's), grouped by reason, each
        reason without its parenthesis (the reports' lists keep it): ``not judged at float32:
        gpt_train (no case certifies at float32)``; "" when none."""
        parts = []
        declared = self.meta.get("declared") or {}
        for impl, ops in self.not_judged().items():
            tier = (declared.get(impl) or {}).get("precision", "float64")
            who = f" on {impl}" if len(self.asked) > 1 else ""
            by_reason: dict[str, list[str]] = {}
            for op, why in ops.items():
                by_reason.setdefault(why.split(" (", 1)[0], []).append(op)
            listed = "; ".join(f"{', '.join(names)} ({why})" for why, names in by_reason.items())
            parts.append(f"not judged{who} at {tier}: {listed}")
        return "; ".join(parts)

    def not_run(self) -> dict[str, dict[str, int]]:
        """status (``missing``, ``unavailable``) -> implementation -> cases that did not run."""
        out: dict[str, dict[str, int]] = {}
        for r in self.results:
            if r.status in NOT_RUN:
                per = out.setdefault(r.status, {})
                per[r.impl] = per.get(r.impl, 0) + 1
        return {status: out[status] for status in NOT_RUN if status in out}

    def headline(self) -> str:
        """The run's one-line verdict, the same in every report (text, markdown, HTML, JUnit).

        ``PASS: all N ...`` only when every case asked for ran and agreed and no declared operation
        went unjudged; a run with nothing failing but cases that did not run says ``PASS for P of
        N; ...`` and what did not run, one whose every case passed but that left declared
        operations unjudged ``PASS for the N judged ...; not judged at float32: gpt_train (...)``
        (``NOTHING RAN: 0 of N; ...`` when no case was judged; under CI=true, where that fails,
        ``FAIL: NOTHING RAN: 0 of N ...; r passed zero cases (CI=true: ...)``);
        an interrupted run ``INTERRUPTED: P of N ... pass[, F fail]; ...`` (never PASS);
        otherwise ``FAIL: ...`` with the failures, the implementations that passed nothing under
        CI, and what did not run. N counts implementation x case results (cases, with one
        implementation).
        """
        n = len(self.results)
        unit = "implementation x case results" if len(self.impls) > 1 else "cases"
        passed = sum(r.status == "pass" for r in self.results)
        skipped = []
        for status, per in self.not_run().items():
            count = sum(per.values())
            who = f" ({', '.join(per)})" if len(self.impls) > 1 else ""
            strict = " (failing under --strict)" if status == "missing" and self.strict else ""
            skipped.append(f"{count} {NOT_RUN[status]}{who}{strict}")
        if known := len(self.known_failures):
            skipped.insert(0, f"{known} known failure{'s' if known > 1 else ''} (listed, not a pass)")
        if self.interrupted:
            skipped.append("interrupted: only the cases that finished are counted")
        rest = "; " + ", ".join(skipped) if skipped else ""
        if unjudged := self.not_judged_text():
            rest += f"; {unjudged}"
        refused = self.ci_refused()
        why_ci = " (CI=true: a run must prove its cases ran)"
        if self.complete:
            return f"PASS: all {n} {unit} agree with the truth"
        if self.interrupted:  # never PASS (nor NOTHING RAN, which a finished run says): what ran, and the stop
            failed_now = sum(r.status in FAILING and not self.is_known(r) for r in self.results)
            fails = f", {failed_now} fail" if failed_now else ""
            return f"INTERRUPTED: {passed} of {n} {unit} pass{fails}{rest}"
        if self.ok and not passed and not known:  # nothing failed because nothing ran: no PASS at all
            return f"NOTHING RAN: 0 of {n} {unit}{rest}"
        if self.ok:
            if passed == n and not self.interrupted:  # all judged passed; only operations left out
                return f"PASS for the {n} judged {unit}{rest}"
            return f"PASS for {passed} of {n} {unit}{rest}"
        failed = sum(r.status in FAILING and not self.is_known(r) for r in self.results)
        parts = [f"{failed} of {n} {unit} fail"] if failed else []
        if self.gate_failures:
            parts.append(f"{len(self.gate_failures)} regression gate failure(s)")
        if refused and self.nothing_judged():  # under CI=true a run that judged nothing fails: it says both
            parts.append(f"NOTHING RAN: 0 of {n} {unit}")
        if refused and (empty := self.zero_pass()):
            parts.append(f"{', '.join(empty)} passed zero cases{why_ci}")
        elif refused:
            parts[-1] += why_ci
        return f"FAIL: {'; '.join(parts) or f'{passed} of {n} {unit} pass'}{rest}"

    def counts(self) -> dict[str, Counter[str]]:
        out: dict[str, Counter[str]] = {impl: Counter() for impl in self.impls}
        for r in self.results:
            out[r.impl][r.status] += 1
        return out

    def totals(self) -> Counter[str]:
        return Counter(r.status for r in self.results)

    def accuracy(self) -> dict[str, dict[str, dict[str, float]]]:
        """impl -> operation -> worst ``ulps`` and ``err_over_bound`` over the outputs that ran."""
        out: dict[str, dict[str, dict[str, float]]] = {}
        for r in self.results:
            for o in r.outputs:
                if o.max_ulp_err is None or o.err_over_bound is None:
                    continue
                cell = out.setdefault(r.impl, {}).setdefault(r.op, {"ulps": 0.0, "err_over_bound": 0.0})
                cell["ulps"] = max(cell["ulps"], o.max_ulp_err)
                cell["err_over_bound"] = max(cell["err_over_bound"], o.err_over_bound)
        return out

    def summary(self) -> dict[str, Any]:
        gated = {}  # only in a run judged by the regression gates, so other reports stay as they were
        if self.known or self.gate_failures:
            gated = {
                "known_failures": [[r.impl, r.case] for r in self.known_failures],
                "gate_failures": list(self.gate_failures),
            }
        return {
            "cases": len(self.cases),
            "implementations": {impl: dict(sorted(c.items())) for impl, c in self.counts().items()},
            "totals": dict(sorted(self.totals().items())),
            "ok": self.ok,  # the verdict (exit status 0); "complete": every case also ran
            "complete": self.complete,
            "headline": self.headline(),
            # declared operations without a judged case at the run's tier, with the reason
            "not_judged": self.not_judged(),
            "accuracy": {
                impl: {op: {k: finite_or_text(v) for k, v in cell.items()} for op, cell in ops.items()}
                for impl, ops in self.accuracy().items()
            },
            **gated,
        }

    def agreement(self) -> dict[tuple[str, str], Agreement]:
        """Every ordered pair of implementations (the diagonal included) -> :class:`Agreement`."""
        if self.agreement_counts is not None:
            return {(a, b): self.agreement_counts.get((a, b), Agreement()) for a in self.impls for b in self.impls}
        outputs: dict[tuple[str, str], dict[str, OutputResult]] = {}
        for r in self.results:
            for o in r.outputs:
                outputs.setdefault((r.case, o.output), {})[r.impl] = o
        out: dict[tuple[str, str], Agreement] = {}
        for a in self.impls:
            for b in self.impls:
                agree_n = compared = unknown = 0
                for by_impl in outputs.values():
                    oa, ob = by_impl.get(a), by_impl.get(b)
                    if oa is None or ob is None or {oa.status, ob.status} - {"pass", "fail"}:
                        continue
                    same = _same_result(oa, ob)
                    if same is None:
                        unknown += 1
                        continue
                    compared += 1
                    agree_n += same
                out[(a, b)] = Agreement(agree_n, compared, unknown)
        return out


def _same_result(a: OutputResult, b: OutputResult) -> bool | None:
    if a is b or (a.status == b.status == "pass"):
        return True
    if a.status != b.status:
        return False
    if a.arrays is None or b.arrays is None:
        return None
    x, y = a.arrays.actual, b.arrays.actual
    if x.shape != y.shape:
        return False
    return bool(agree(x, y, 2 * a.arrays.bound).all()) if a.arrays.bound.shape == x.shape else False


def finite_or_text(x: float | None) -> float | str | None:
    """JSON has no inf or NaN: such numbers travel as their text ("inf")."""
    return x if x is None or math.isfinite(x) else str(x)


def display_status(status: str) -> str:
    """Failures shout, so a failing row cannot be read as a passing one at a glance."""
    return status.upper() if status in FAILING else status


def cell_numbers(r: CaseResult) -> dict[str, str]:
    """The numbers a table cell shows, already formatted, in order: status, err/bnd, bad, ulps.

    ``err/bnd`` is the worst error as a fraction of its bound (1 = at the limit; ``nan``: a NaN or
    an infinity where a number belongs); ``bad`` the elements beyond their bounds; ``ulps`` only
    for a pass (a failing output's ulps cover only the elements its bound resolves and could look
    small).
    """
    if r.status == "fail":  # the failing outputs' numbers only: a passing sibling's cannot stand in
        failed = [o for o in r.outputs if o.status == "fail"]
        if any(o.total is None for o in failed):
            errb = "absent"  # an output the operation owes and did not return
        elif any(o.expected_shape != o.actual_shape for o in failed):
            errb = "shape"  # a wrong shape has no error size
        elif any(o.nonfinite_mismatches for o in failed):
            errb = "nan/inf"
        else:
            errb = fmt_frac(max((o.err_over_bound for o in failed if o.err_over_bound is not None), default=None))
    elif r.status == "pass":
        errb = fmt_frac(r.err_over_bound)
    else:
        errb = "-"
    bad = "-" if r.mismatches is None else str(r.mismatches)
    ulps = fmt_ulps(r.max_ulp_err) if r.status == "pass" else "-"
    status = display_status(r.status)
    if r.masked_query is not None:  # judged by the port's masked-query convention: say which
        status += f":{CONVENTION_MARK[r.masked_query]}"
    return {"status": status, "err/bnd": errb, "bad": bad, "ulps": ulps}


def fmt_frac(x: float | None) -> str:
    if x is None:
        return "-"
    if not math.isfinite(x):
        return "inf"
    return f"{x:.2f}" if x < 100 else f"{x:.0e}"


def fmt_ulps(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x:.0f}" if x < 1e5 else f"{x:.0e}"


def port_layout(o: OutputResult) -> tuple[np.ndarray, np.ndarray, np.ndarray, str] | None:
    """A failing output's expected, actual and err/bound arrays in the port's layout, with a label
    naming that layout (``Julia layout, key x query, 1-based``); None when nothing was kept or the
    shapes differ."""
    arr = o.arrays
    if arr is None or arr.expected.shape != arr.actual.shape:
        return None
    e, a, b = arr.expected, arr.actual, arr.bound
    ok = agree(e, a, b)
    both = np.isfinite(e) & np.isfinite(a)
    with np.errstate(all="ignore"):
        diff = np.abs(a - e)
        ratio = np.where(b > 0, diff / np.where(b > 0, b, 1.0), np.where(diff > 0, np.inf, 0.0))
    ratio = np.where(both, ratio, np.inf)  # a NaN or an infinity in the wrong place: off the scale
    ratio = np.where(ok, np.minimum(np.nan_to_num(ratio, nan=0.0, posinf=0.0), 1.0), ratio)
    if arr.view is not None:
        names = arr.view.axis_names(e.ndim)
        label = f"{arr.view.language} layout" + (f", {' x '.join(names)}" if names else "") + ", 1-based"
        return arr.view.to_port(e), arr.view.to_port(a), arr.view.to_port(ratio), label
    return e, a, ratio, "reference layout, 0-based"


# What a diagnosis says about where a mistake shows, left out when two diagnoses are compared:
# numbers (a size, a factor of this case, a position; not the digits of a name such as w_1) and
# lists of positions ("queries 1, 2 and 3 more").
_NUMBER = re.compile(r"(?<![\w.$])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])")
_PLACES = re.compile(r"\b(quer(?:y|ies)|rows?|columns?|positions?|keys?|tokens?) #(?:, #)*(?: and # more)?")


def cause_key(diagnosis: str, output: str = "") -> str:
    """What makes two diagnoses name one mistake: the diagnosis with where it shows left out (the
    output's own name, as the reference or a port writes it; numbers; lists of positions).
    ``w_o is applied transposed`` and ``w_q is applied transposed`` stay two causes."""
    text = diagnosis
    for name in {output, output.replace(".", "$")} - {""}:
        text = re.sub(rf"(?<![\w.$]){re.escape(name)}(?![\w.$])", "OUTPUT", text)
    return _PLACES.sub(r"\1 #", _NUMBER.sub("#", text))


def cause_label(diagnoses: list[str]) -> str:
    """One shared cause in words: the parts (``where: what: why``, split at ": ") every diagnosis
    says alike, so the mistake itself stays ("params.w_o is applied transposed: a square weight,
    ...") and only what differs from failure to failure (a position, this case's factor) goes."""
    split = [d.split(": ") for d in diagnoses]
    if len({len(p) for p in split}) != 1:
        return diagnoses[0]
    kept = [part for i, part in enumerate(split[0]) if all(p[i] == part for p in split)]
    return ": ".join(kept) or diagnoses[0]


@dataclass
class SharedCause:
    """A mistake two or more failures' diagnoses name (:func:`shared_causes`)."""

    label: str
    results: list[CaseResult]


def shared_causes(failures: list[CaseResult]) -> dict[str, SharedCause]:
    """Causes (:func:`cause_key`) named by the diagnoses of two or more failures -> the cause in
    words and those failures, most shared first: twenty failures with one cause are one mistake to
    fix, not twenty."""
    by_cause: dict[str, tuple[list[str], list[CaseResult]]] = {}
    for r in failures:
        keys = {cause_key(o.diagnosis, o.output): o.diagnosis for o in r.outputs if o.diagnosis}
        for key, diagnosis in keys.items():
            said, rs = by_cause.setdefault(key, ([], []))
            said.append(diagnosis)
            rs.append(r)
    shared = {k: SharedCause(cause_label(said), rs) for k, (said, rs) in by_cause.items() if len(rs) > 1}
    return dict(sorted(shared.items(), key=lambda kv: -len(kv[1].results)))
