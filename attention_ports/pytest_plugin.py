"""The pytest plugin: every fixture case on every implementation, in this repository or a team's own.

Registered as the ``pytest11`` entry point ``attention_ports.pytest_plugin``, so any pytest in an
environment where attention-ports is installed has these options (where plugin autoloading is off,
pass ``-p attention_ports.pytest_plugin``):

  --impl NAME      restrict to implementations (repeatable; default: all, or only the --port ones)
  --port NAME=PATH run a user's R or Julia port under NAME instead of ours, or a port program
                   under any other NAME (docs/protocol.md)
  --case GLOB      restrict to case ids (repeatable)
  --ap-known-failures NAME=FILE, --ap-baseline REPORT.json, --ap-baseline-factor X,
  --ap-baseline-floor F, --ap-baseline-diff FILE
                   the regression gates of ``verify`` (attention_ports/pipeline/gates.py), named
                   with ``ap-`` because an autoloaded plugin must not claim words as common as
                   ``--baseline`` in every pytest of the environment

A team runs the conformance suite with its own pytest::

    pytest --pyargs attention_ports.conformance --port r=my_port.R

A test that asks for the ``impl_name`` and ``case_id`` fixtures is parametrized over the selected
implementations and cases (``attention_ports/conformance/test_cases.py`` is the one such test).
Locally an implementation whose runtime is missing is skipped with the reason; with CI=true it is a
failure. A port given with ``--port`` that cannot load (a syntax error, a bad declaration) is the
port's failure, with or without CI, as in ``verify``: every one of its cases fails, the first with
the load error, the others pointing at it (the error is printed once, not once per case).

With CI=true a session in which an implementation passed zero of its fixture cases fails: the
CRAN ``attention`` package's tests never ran and nobody noticed, so a green CI run must prove that
every implementation it names really passed something. The rule is the whole run's, so it is
applied only where this session saw every one of the implementation's selected fixture cases:
under pytest-xdist the controller counts every worker's reports (and their deselections); a
session that deselected some of an implementation's cases (a pytest-split group, ``-k``,
``--deselect``) is a part of a run and leaves the rule to the whole run (``attention-ports verify``
on the same port, or an unsplit session), and says so in its summary.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries
from attention_ports.judge.results import CaseResult, OutputResult
from attention_ports.judge.runner import in_ci, open_implementation
from attention_ports.pipeline import gates
from attention_ports.report.model import Report
from attention_ports.runtimes import registry, supervisor
from attention_ports.runtimes.impl import Implementation, ImplementationUnavailable


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attention-ports", "attention-ports conformance suite")
    group.addoption(
        "--impl",
        action="append",
        default=[],
        choices=list(registry.IMPLEMENTATIONS),
        help="implementation to run the fixture cases on (repeatable; default: all, or only the --port ones)",
    )
    group.addoption(
        "--port",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help=f"run a user's port file under NAME ({', '.join(registry.PORTABLE)}) instead of ours, or a port "
        "program or manifest under any other name (docs/protocol.md)",
    )
    group.addoption("--case", action="append", default=[], metavar="GLOB", help="case ids to run (repeatable)")
    group.addoption(
        "--ap-known-failures",
        action="append",
        default=[],
        metavar="NAME=FILE",
        help="verify's --known-failures: NAME's listed failures are xfail, a listed case that passes fails",
    )
    group.addoption("--ap-baseline", default=None, metavar="REPORT.json", help="verify's --baseline")
    group.addoption("--ap-baseline-factor", type=float, default=None, metavar="X", help="verify's --baseline-factor")
    group.addoption("--ap-baseline-floor", type=float, default=None, metavar="F", help="verify's --baseline-floor")
    group.addoption(
        "--ap-baseline-diff", action="append", default=[], metavar="FILE", help="verify's --baseline-diff (.md, .json)"
    )


def port_paths_of(config: pytest.Config) -> dict[str, Path]:
    """The ``--port NAME=PATH`` options, checked (a bad one is a usage error naming it)."""
    from attention_ports.cli import parse_port  # the CLI's own rule, so both read --port the same way

    ports = {}
    for text in config.getoption("--port"):
        try:
            name, path = parse_port(text)
        except Exception as exc:
            raise pytest.UsageError(str(exc)) from exc
        ports[name] = path
    return ports


def pytest_configure(config: pytest.Config) -> None:
    port_paths_of(config)  # a bad --port is a usage error before collection, naming the option
    # pytest leaves SIGTERM at its default: the session (or xdist worker) would die without ending
    # its R and Julia workers' leftovers (a worker itself dies with us, its escaped children do not)
    supervisor.shutdown_on_sigterm()
    config.pluginmanager.register(CaseCounter(), "attention-ports-case-counter")
    config.pluginmanager.register(GateSession(gates_of(config)), "attention-ports-gates")


def selected_impls(config: pytest.Config) -> list[str]:
    """--impl if given (plus the --port names), else only the --port names, else every implementation.

    As ``attention-ports verify``: a team checking its own port does not need our R, Julia or torch.
    """
    chosen = list(config.getoption("--impl"))
    ports = list(port_paths_of(config))
    if not chosen:
        return ports or list(registry.IMPLEMENTATIONS)
    return chosen + [p for p in ports if p not in chosen]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Implementation first, so ids read test_case[r-seed000_four_words].
    if "impl_name" in metafunc.fixturenames:
        metafunc.parametrize("impl_name", selected_impls(metafunc.config))
    if "case_id" in metafunc.fixturenames:
        globs = metafunc.config.getoption("--case")
        ids = [e["id"] for e in iter_entries(REPO_FIXTURES)]
        if globs:
            ids = [i for i in ids if any(fnmatch.fnmatchcase(i, g) for g in globs)]
        metafunc.parametrize("case_id", ids)


def require(what: str, reason: str) -> None:
    """Skip locally, fail under CI=true: CI must never silently lose a runtime."""
    if in_ci():
        pytest.fail(f"{what} is required under CI=true: {reason}", pytrace=False)
    pytest.skip(f"{what} unavailable: {reason}")


class _Pool:
    """One instance per implementation per session: R and Julia start once, not once per case."""

    def __init__(self, ports: dict[str, Path]) -> None:
        self.ports = ports
        self.live: dict[str, Implementation | ImplementationUnavailable] = {}
        self.first_failure: dict[str, str] = {}  # implementation -> the test that showed its error

    def get(self, name: str, nodeid: str = "") -> Implementation:
        if name not in self.live:
            try:  # started and its port loaded (a Julia port loads lazily otherwise)
                self.live[name] = open_implementation(name, self.ports.get(name))
            except ImplementationUnavailable as exc:
                self.live[name] = exc
        got = self.live[name]
        if isinstance(got, ImplementationUnavailable):
            reason = str(got)
            if name in self.ports:  # the user's own port: its failure, never a missing runtime
                short = f"{name}: the port {self.ports[name]} did not load"
                pytest.fail(self._once(name, nodeid, reason, short), pytrace=False)
            if in_ci():
                require(name, self._once(name, nodeid, reason, f"{name} could not start"))
            require(name, reason)  # a skip: pytest groups equal skip reasons itself
        return got  # type: ignore[return-value]  # require() raised otherwise

    def _once(self, name: str, nodeid: str, reason: str, short: str) -> str:
        """The whole error for the first test that meets it, a pointer to that test for the others:
        a load error (a Julia backtrace) is printed once, not once per case."""
        first = self.first_failure.setdefault(name, nodeid)
        return reason if first == nodeid else f"{short}: its error is in the failure of {first}"

    def close(self) -> None:
        for impl in self.live.values():
            if isinstance(impl, Implementation):
                impl.close()


@pytest.fixture(scope="session")
def impl_pool(request: pytest.FixtureRequest) -> Iterator[_Pool]:
    pool = _Pool(port_paths_of(request.config))
    yield pool
    pool.close()


@pytest.fixture
def impl(impl_pool: _Pool, impl_name: str, request: pytest.FixtureRequest) -> Implementation:
    return impl_pool.get(impl_name, request.node.nodeid)


@pytest.fixture
def port_paths(request: pytest.FixtureRequest) -> dict[str, Path]:
    return port_paths_of(request.config)


# --- the regression gates (verify's --known-failures and --baseline) -------------------------------


def gates_of(config: pytest.Config) -> gates.Gates:
    """The ``--ap-*`` gate options, their files read and checked (a bad one is a usage error naming
    the file and the line or field), as verify checks them before its run."""
    opt = config.getoption
    try:
        gate = gates.from_options(
            opt("--ap-known-failures"),
            None if opt("--ap-baseline") is None else Path(opt("--ap-baseline")),
            opt("--ap-baseline-factor"),
            opt("--ap-baseline-floor"),
            [Path(d) for d in opt("--ap-baseline-diff")],
            prefix="--ap-",
        )
        gates.prepare(gate, selected_impls(config), "catalogue", None, REPO_FIXTURES)
    except gates.GateError as exc:
        raise pytest.UsageError(str(exc)) from exc
    return gate


OUTPUTS_ATTR = "attention_ports_outputs"  # a fixture case's judged outputs, carried on its call report
_OUTPUTS = pytest.StashKey[list]()


@dataclass
class CaseGates:
    """The ``case_gates`` fixture: the gates on one fixture case, as ``verify`` judges it."""

    gate: gates.Gates
    node: pytest.Item

    def check(self, impl: str, case_id: str, op: str, results: list[OutputResult]) -> tuple[str | None, list[str]]:
        """(where the case is listed as a known failure, or None; what the gates fail it for)."""
        if not self.gate:
            return None, []
        self.node.stash[_OUTPUTS] = [impl, case_id, op, [[o.output, o.status, o.err_over_bound] for o in results]]
        r = CaseResult(impl, case_id, op, results)
        report = Report([r])
        out = gates.apply(report, self.gate, partial=True)  # the other cases are other tests
        known = "; ".join(dict.fromkeys(report.known.values())) if report.is_known(r) else None
        return known, out.problems


@pytest.fixture
def case_gates(request: pytest.FixtureRequest) -> CaseGates:
    session = request.config.pluginmanager.get_plugin("attention-ports-gates")
    return CaseGates(session.gate, request.node)


@dataclass(eq=False)  # hashable, as a plugin must be
class GateSession:
    """The gates over the whole session: every fixture case's outputs reach the controller on its
    call report (under pytest-xdist too), where the baseline diff is written and the gates' summary
    printed; a case the session did not run (another group of a split run) is not judged."""

    gate: gates.Gates
    results: list[CaseResult] = field(default_factory=list)
    out: gates.Outcome | None = None

    @pytest.hookimpl(hookwrapper=True)  # the old style: pytest 7 has no wrapper=True
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        if call.when == "call" and _OUTPUTS in item.stash:
            setattr(outcome.get_result(), OUTPUTS_ATTR, item.stash[_OUTPUTS])

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        got = getattr(report, OUTPUTS_ATTR, None)
        if got and report.when == "call":
            impl, case, op, outputs = got
            rows = [OutputResult(impl, case, name, status, err_over_bound=eob) for name, status, eob in outputs]
            self.results.append(CaseResult(impl, case, op, rows))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.gate or _is_xdist_worker(session.config) or session.config.option.collectonly:
            return
        from attention_ports.pipeline.verify import fixtures_meta

        report = Report(self.results, {"tier": "catalogue", "fixtures": fixtures_meta(REPO_FIXTURES)})
        self.out = gates.apply(report, self.gate)
        gates.write_diff(self.out, self.gate)
        if report.gate_failures and session.exitstatus == pytest.ExitCode.OK:  # each failed its test already
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.out is not None:
            for line in gates.terminal(self.out, self.gate).splitlines():
                terminalreporter.write_line(line)


# --- proof that the cases ran ---------------------------------------------------------------------


IMPL_PROPERTY = "attention_ports.impl"  # a fixture-case test's implementation, carried on its reports


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@dataclass(eq=False)  # a plugin object must stay hashable: pluggy keeps plugins in sets
class CaseCounter:
    """Fixture cases run and passed per implementation in one session, and the CI rule.

    Counted from the test reports, not from collection: each report of a fixture-case test carries
    its implementation (``user_properties``), and under pytest-xdist every worker's reports reach
    the controller, so the controller counts the whole session, and the rule is decided there (a
    worker sees only its share). A test counts as run once it has a setup report (so -k and
    --deselect are respected, and a skip counts as run and not passed); passed, once its call passed.
    """

    run: dict[str, set[str]] = field(default_factory=dict)  # implementation -> node ids
    passed: Counter[str] = field(default_factory=Counter)
    # implementation -> node ids of its fixture cases this session deselected (a pytest-split group,
    # -k, --deselect): the session is then a part of a run, where the zero-pass rule proves nothing
    deselected: dict[str, set[str]] = field(default_factory=dict)

    @property
    def collected(self) -> dict[str, int]:
        order = list(registry.IMPLEMENTATIONS)
        names = sorted(self.run, key=lambda n: (order.index(n) if n in order else len(order), n))
        return {name: len(self.run[name]) for name in names}

    def zero_pass(self) -> list[str]:
        return [impl for impl, n in self.collected.items() if n and self.passed.get(impl, 0) == 0]

    def partial(self) -> list[str]:
        """Implementations of which this session ran only a part of the selected fixture cases."""
        return [impl for impl in self.collected if self.deselected.get(impl)]

    def pytest_deselected(self, items) -> None:
        for item in items:  # -k may deselect before our collection hook has marked the items
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "impl_name" in params and "case_id" in params:
                self.deselected.setdefault(params["impl_name"], set()).add(item.nodeid)

    # pytest-xdist: collection (and so deselection) happens on the workers; each sends its
    # deselections home when it ends, and the controller takes their union (every worker deselects
    # the same items: the same collection, the same -k or group).
    WORKER_KEY = "attention_ports_deselected"

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        for impl, ids in (getattr(node, "workeroutput", None) or {}).get(self.WORKER_KEY, {}).items():
            self.deselected.setdefault(impl, set()).update(ids)

    # tryfirst: pytest-xdist reads the xdist_group marks in its own collection hook, which, registered
    # later, would otherwise run before this one and see none
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items) -> None:
        grouped = config.pluginmanager.hasplugin("xdist")
        for item in items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "impl_name" in params and "case_id" in params:  # a fixture case on an implementation
                item.user_properties.append((IMPL_PROPERTY, params["impl_name"]))
                if grouped:  # with --dist loadgroup, one worker runs all of an implementation's cases:
                    # R and Julia start (and Julia compiles) once per session, not once per worker
                    item.add_marker(pytest.mark.xdist_group(name=f"impl-{params['impl_name']}"))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        impl = dict(report.user_properties).get(IMPL_PROPERTY)
        if impl is None:
            return
        if report.when == "setup":
            self.run.setdefault(impl, set()).add(report.nodeid)
        elif report.when == "call" and report.passed:
            self.passed[impl] += 1

    def _enforced(self, config: pytest.Config) -> list[str]:
        if not in_ci() or config.option.collectonly or _is_xdist_worker(config):
            return []
        return [impl for impl in self.zero_pass() if impl not in self.partial()]

    def _left_to_the_run(self, config: pytest.Config) -> list[str]:
        """Implementations that passed nothing here, in a session that ran only part of their cases."""
        if not in_ci() or config.option.collectonly or _is_xdist_worker(config):
            return []
        return [impl for impl in self.zero_pass() if impl in self.partial()]

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if _is_xdist_worker(session.config):  # the controller decides, over every worker
            session.config.workeroutput[self.WORKER_KEY] = {k: sorted(v) for k, v in self.deselected.items()}
            return
        # Under CI the run must prove the cases ran, for every implementation whose cases all ran here.
        if self._enforced(session.config):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter, exitstatus: int, config: pytest.Config) -> None:
        if self.collected and not _is_xdist_worker(config):
            line = ", ".join(f"{impl}: {self.passed.get(impl, 0)}/{n}" for impl, n in self.collected.items())
            terminalreporter.write_line(f"fixture cases passed per implementation: {line}")
        if empty := self._enforced(config):
            terminalreporter.write_line(
                f"CI: no fixture case passed on {', '.join(empty)}: refusing to call this run green", red=True
            )
        for impl in self._left_to_the_run(config):
            ran, cut = len(self.run.get(impl, ())), len(self.deselected[impl])
            terminalreporter.write_line(
                f"CI: no fixture case passed on {impl} in this session, which ran {ran} of its "
                f"{ran + cut} selected cases (the others deselected: a pytest-split group, -k or --deselect): "
                "the zero-pass rule is the whole run's, not applied to a part (attention-ports verify judges the "
                "whole run)",
                yellow=True,
            )
