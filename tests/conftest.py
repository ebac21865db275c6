"""Pytest wiring: every fixture case runs on every implementation.

Options (also usable from the command line of a user's own CI):
  --impl NAME      restrict to implementations (repeatable; default: all)
  --port NAME=PATH run a user's R or Julia port under NAME instead of ours
  --case GLOB      restrict to case ids (repeatable)
Locally an implementation whose runtime is missing is skipped with the reason; with CI=true it is
a failure, and the session fails if any implementation ran zero cases.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from pathlib import Path

import pytest

from attention_ports import registry
from attention_ports.fixtures import REPO_FIXTURES, iter_entries
from attention_ports.impl import Implementation, ImplementationUnavailable
from attention_ports.runner import in_ci

_PASSED: Counter[str] = Counter()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attention-ports")
    group.addoption("--impl", action="append", default=[], choices=list(registry.IMPLEMENTATIONS))
    group.addoption("--port", action="append", default=[], metavar="NAME=PATH")
    group.addoption("--case", action="append", default=[], metavar="GLOB")


def _ports(config: pytest.Config) -> dict[str, Path]:
    from attention_ports.cli import parse_port

    ports = {}
    for text in config.getoption("--port"):
        try:
            name, path = parse_port(text)
        except Exception as exc:
            raise pytest.UsageError(str(exc)) from exc
        ports[name] = path
    return ports


def selected_impls(config: pytest.Config) -> list[str]:
    chosen = config.getoption("--impl") or list(registry.IMPLEMENTATIONS)
    return chosen + [p for p in _ports(config) if p not in chosen]


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


class _Pool:
    """One instance per implementation per session: R and Julia start once, not once per case."""

    def __init__(self, ports: dict[str, Path]) -> None:
        self.ports = ports
        self.live: dict[str, Implementation | ImplementationUnavailable] = {}

    def get(self, name: str) -> Implementation:
        if name not in self.live:
            try:
                self.live[name] = registry.create(name, self.ports.get(name))
            except ImplementationUnavailable as exc:
                self.live[name] = exc
        got = self.live[name]
        if isinstance(got, ImplementationUnavailable):
            if in_ci():
                pytest.fail(f"{name} is required under CI=true but unavailable: {got}", pytrace=False)
            pytest.skip(f"{name} unavailable: {got}")
        return got

    def close(self) -> None:
        for impl in self.live.values():
            if isinstance(impl, Implementation):
                impl.close()


@pytest.fixture(scope="session")
def impl_pool(request: pytest.FixtureRequest):
    pool = _Pool(_ports(request.config))
    yield pool
    pool.close()


@pytest.fixture
def impl(impl_pool: _Pool, impl_name: str) -> Implementation:
    return impl_pool.get(impl_name)


@pytest.fixture
def port_paths(request: pytest.FixtureRequest) -> dict[str, Path]:
    return _ports(request.config)


def require(what: str, reason: str) -> None:
    """Skip locally, fail under CI=true: CI must never silently lose a runtime."""
    if in_ci():
        pytest.fail(f"{what} is required under CI=true: {reason}", pytrace=False)
    pytest.skip(f"{what} unavailable: {reason}")


_COLLECTED: Counter[str] = Counter()
_IMPL_OF: dict[str, str] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:  # after -k/--deselect, so counts are what will actually run
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.originalname == "test_case" and "impl_name" in params:
            _COLLECTED[params["impl_name"]] += 1
            _IMPL_OF[item.nodeid] = params["impl_name"]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" and report.passed and report.nodeid in _IMPL_OF:
        _PASSED[_IMPL_OF[report.nodeid]] += 1


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _COLLECTED:
        line = ", ".join(f"{impl}: {_PASSED.get(impl, 0)}/{n}" for impl, n in _COLLECTED.items())
        terminalreporter.write_line(f"fixture cases passed per implementation: {line}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # The CRAN `attention` package's tests never ran; under CI ours must prove they did, for
    # every implementation whose cases were collected.
    if not in_ci() or session.config.option.collectonly:
        return
    empty = [impl for impl, n in _COLLECTED.items() if n and _PASSED.get(impl, 0) == 0]
    if empty:
        print(f"\nCI: no fixture case passed on {', '.join(empty)}: refusing to call this run green")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
