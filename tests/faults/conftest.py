"""Shared pieces of the fault-injection suite: misbehaving ports, short limits, process checks.

Every port in tests/faults/ports/{r,julia}/ misbehaves in one way (its header comment says how)
and runs for real, through the same path a user's port takes (``run_suite`` with ``ports=``, as
``attention-ports verify --port NAME=PATH`` does). Limits are short here (``short_limits``) so
that hangs cost seconds (the defaults are in docs/isolation.md, "Timeouts and limits"). Without R or Julia these
tests skip locally and fail under CI=true.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.results import CaseResult
from attention_ports.judge.runner import run_suite
from attention_ports.runtimes.impl import ImplementationUnavailable
from tests.conftest import require

PORTS = Path(__file__).resolve().parent / "ports"
SUFFIX = {"r": ".R", "julia": ".jl"}
SOFTMAX = "softmax_random_3x5"
SOFTMAX_2 = "softmax_ties"
SDPA = "sdpa_L2_d3"
SDPA_2 = "sdpa_nq3_nk7_dk5_dv2"
SELF = "self_attn_L5_d8"
MHA = "mha_h1_equals_single_head"

# Seconds. Julia's first call of an operation compiles it (~1 s here, more on a busy machine).
SHORT = {
    "ATTENTION_PORTS_R_TIMEOUT": "2",
    "ATTENTION_PORTS_R_STARTUP_TIMEOUT": "30",
    "ATTENTION_PORTS_JULIA_TIMEOUT": "3",
    "ATTENTION_PORTS_JULIA_COMPILE_ALLOWANCE": "4",
    "ATTENTION_PORTS_JULIA_STARTUP_TIMEOUT": "60",
}


def check_runtime(lang: str) -> None:
    """Skip (locally) or fail (CI=true) unless the runtime of ``lang`` can run here."""
    try:
        if lang == "julia":
            from attention_ports.runtimes.julia.adapter import find_julia

            find_julia()
        else:
            import rpy2.situation  # the R worker embeds R through rpy2

            r_home = rpy2.situation.get_r_home()
            if not r_home or not os.path.isdir(os.path.join(r_home, "library", "base")):
                raise ImplementationUnavailable(f"no usable R (R_HOME={r_home!r})")
    except (ImplementationUnavailable, ImportError) as exc:
        require(lang, str(exc))


@pytest.fixture(params=["r", "julia"])
def lang(request: pytest.FixtureRequest) -> str:
    check_runtime(request.param)
    return request.param


@pytest.fixture
def r() -> str:
    check_runtime("r")
    return "r"


@pytest.fixture
def short_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in SHORT.items():
        monkeypatch.setenv(name, value)


def port(lang: str, name: str) -> Path:
    path = PORTS / lang / f"{name}{SUFFIX[lang]}"
    assert path.is_file(), path
    return path


def run_port(lang: str, name: str, cases: list[str]) -> dict[str, CaseResult]:
    """The cases on the fault port ``name``, as ``verify --port LANG=PATH --case ...`` runs them."""
    results = run_suite(REPO_FIXTURES, [lang], {lang: port(lang, name)}, cases, required={lang}, progress=None)
    return {r.case: r for r in results}


def message(result: CaseResult) -> str:
    return "\n".join(o.message for o in result.outputs)


def processes_with(marker: str) -> list[int]:
    """Live processes (not zombies) whose command line contains ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def sleepers(marker: str) -> list[int]:
    """Live ``sleep`` processes (not zombies) whose one argument starts with ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if len(argv) == 2 and argv[0].endswith(b"sleep") and argv[1].decode(errors="replace").startswith(marker):
            if state != "Z":
                found.append(int(entry.name))
    return found


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if int(ppid) == pid and state != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_for(condition, timeout: float = 20.0, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: still not true after {timeout}s")
        time.sleep(0.02)


# Zombie children this process had when the running test began (see zombies()).
_ZOMBIES_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _zombies_before_the_test() -> None:
    _ZOMBIES_BEFORE.clear()
    _ZOMBIES_BEFORE.update(_zombie_children())


def zombies() -> list[int]:
    """Our own children that exited during this test and were never reaped.

    Those from before the test are not its own: once this process has started a worker it is a
    child subreaper (attention_ports/runtimes/reaper.py), so it adopts the orphans of any subprocess an
    earlier test SIGKILLed (the worker of a killed ``verify``), and cannot tell them from children
    it started itself, so it never reaps them.
    """
    return [pid for pid in _zombie_children() if pid not in _ZOMBIES_BEFORE]


def _zombie_children() -> list[int]:
    me, found = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except OSError:
            continue
        if state == "Z" and int(ppid) == me:
            found.append(int(entry.name))
    return found
