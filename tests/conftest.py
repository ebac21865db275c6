"""Pytest wiring for this repository.

The options (--impl, --port, --case), the per-implementation pools, the fixture-case
parametrization and the CI rule that every implementation must pass a nonzero number of cases all
live in the installable plugin, attention_ports/pytest_plugin.py (the ``pytest11`` entry point
``attention_ports.pytest_plugin``), so a team's own pytest gets exactly what this suite uses.
This file only adds what this repository's tests share.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from attention_ports.judge.runner import in_ci
from attention_ports.pytest_plugin import require
from tests import scratch, wheel_env

__all__ = ["require"]

# The suite runs its processes two at a time on as many cores (CLI commands, nested pytest runs, the
# native runners' Rscript and julia, the test processes themselves): OpenBLAS's threads, one per
# core in each, only compete there, and cost each process's start CPU. The workers any run starts
# get one thread already (runtimes/supervisor.py, BLAS_DEFAULTS); a variable the caller set wins.
# The CPU probes (tests/fixtures/test_bytes.py) regenerate the fixtures with OpenBLAS's default.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# Bytecode caches, even where PYTHONDONTWRITEBYTECODE is set (this project's machines set it): there
# every Python process the suite starts (test workers, CLI commands, nested pytest runs, R workers,
# probes) compiled our modules from source again, and each test process rewrote the asserts of
# every test module again: half of a test process's 8 s collection (measured). Written once
# (into the ignored __pycache__ folders), they are read by all the others.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

# Property tests: under CI=true derandomized (the same examples every run) with no example database;
# locally hypothesis's defaults (fresh examples each run, failures remembered in .hypothesis/).
# The generated fixture-style cases (tests/tiers/test_random.py) have their own seed and count:
# attention_ports/tiers/random.py, profile().
settings.register_profile("ci", derandomize=True, database=None, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if in_ci() else "dev")


# Module-scoped fixtures that are costly to build, by module. --dist loadgroup deals the other
# tests out one at a time, to whichever worker has just finished one, so consecutive tests of a
# module land on both workers, and each worker built the fixture (a simulation of xdist's scheduler
# over measured durations: the probes built twice in every run, the float32 kit in 96 of 100, the
# float64 kit in 7). Grouped, the tests sharing one fixture run on one worker; a group is dealt out
# before the single tests, so these long ones start early rather than at the tail. One group per
# fixture, not per module: the three mutation kits are independent, so they may run side by side.
SHARED_MODULE_FIXTURES = {
    "tests/fixtures/test_bytes.py": {"probes": "the four CPU probes"},
    "tests/tools/test_mutation.py": {
        "kit": "the mutation kit in float64",
        "kit32": "the mutation kit in float32",
        "ckit": "the mutation kit in C",
    },
    "tests/runtimes/command/test_command.py": {"rust_port": "the Rust kit's port, compiled (~3 s)"},
    # not for its cost: each of these tests asserts that no process of the faulty port is left,
    # found by the port's path, which the Python kit's tests share; side by side on two workers,
    # one test saw the other's live port
    "tests/runtimes/command/test_faults.py": {"entries": "the fault suite's cases"},
}


_RAM = pytest.StashKey[Path]()
_STATUS = pytest.StashKey[int]()


@pytest.hookimpl(tryfirst=True)  # before pytest's tmpdir plugin reads --basetemp (its pytest_configure)
def pytest_configure(config: pytest.Config) -> None:
    # The run's temporary files in RAM where there is room (tests/scratch.py says why); decided
    # once, by the controller under xdist (each worker gets a folder inside), unless --basetemp is given.
    if hasattr(config, "workerinput") or config.option.basetemp:
        return
    ram = scratch.ram_folder()
    if ram is not None:
        config.option.basetemp = str(ram)
        config.stash[_RAM] = ram


@pytest.hookimpl(trylast=True)  # after the plugin's zero-pass rule, which may turn a run red
def pytest_sessionfinish(session: pytest.Session) -> None:
    session.config.stash[_STATUS] = int(session.exitstatus)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    ram = config.stash.get(_RAM, None)
    if ram is not None and exitstatus != 0:
        terminalreporter.write_line(f"this run's temporary files, kept in RAM until the next run: {ram}")


def pytest_unconfigure(config: pytest.Config) -> None:
    # A green run's files go with it; a red run's stay to be looked at (scratch.ram_folder removes
    # them at the next run).
    ram = config.stash.get(_RAM, None)
    if ram is not None and config.stash.get(_STATUS, 1) == 0:
        shutil.rmtree(ram, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its own hook, registered later, runs first)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Under `pytest -n auto --dist loadgroup` (make test), the tests sharing the installed wheel run
    # on one worker, so it is built and installed once (~15 s), not once per worker; so do the
    # tests sharing each fixture of SHARED_MODULE_FIXTURES.
    if config.pluginmanager.hasplugin("xdist"):
        for item in items:
            module = item.nodeid.split("::", 1)[0]
            fixtures = getattr(item, "fixturenames", ())
            shared = [f for f in SHARED_MODULE_FIXTURES.get(module, {}) if f in fixtures]
            if "installed_tool" in fixtures:
                item.add_marker(pytest.mark.xdist_group(name="installed-tool"))
            elif shared:
                item.add_marker(pytest.mark.xdist_group(name=f"{module}::{shared[0]}"))


@pytest.fixture(scope="session")
def installed_tool(tmp_path_factory: pytest.TempPathFactory) -> wheel_env.InstalledTool:
    """attention-ports built as a wheel and installed, with pytest and rpy2, into a fresh venv
    outside the checkout (shared by the packaging and CI-example tests: it takes ~15 s)."""
    if shutil.which("Rscript") is None:
        require("R", "Rscript is not on PATH (scripts/install_r.sh)")
    return wheel_env.install(tmp_path_factory.mktemp("installed"))


@pytest.fixture(scope="session")
def checkout_julia() -> str:
    """The julia command the checkout uses (scripts/install_julia.sh), to hand to an installed tool."""
    from attention_ports.runtimes.impl import ImplementationUnavailable
    from attention_ports.runtimes.julia.adapter import find_julia

    try:
        return find_julia()
    except ImplementationUnavailable as exc:
        require("julia", str(exc))
        raise


@pytest.fixture
def user_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the checkout, where a user keeps a port and runs commands."""
    return tmp_path_factory.mktemp("user")
