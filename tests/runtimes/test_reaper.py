"""The reaper touches only what a worker left behind: never another child of the run, never its exit
status, never a process outside the run's tree (attention_ports/runtimes/reaper.py).

Each subreaper scenario runs in a forked child (:func:`in_a_child`): a subreaper adopts every orphan
below it, so the pytest process itself must never become one (the orphans of other tests would stay
its zombies; the library route never makes a process one, only the ``attention-ports`` command)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable

import pytest

from attention_ports.runtimes import reaper

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")


def in_a_child(test: Callable[[], None]) -> Callable[[], None]:
    """Run the test in a forked child (its own subreaper flag and reaper state); its failure is ours."""

    def run() -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: no pytest machinery beyond this function
            os.close(read)
            code = 0
            try:
                test()
            except BaseException:
                os.write(write, traceback.format_exc().encode())
                code = 1
            os._exit(code)
        os.close(write)
        with os.fdopen(read, "rb") as f:
            failure = f.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, failure

    run.__name__, run.__doc__ = test.__name__, test.__doc__
    return run


def test_the_library_route_never_makes_this_process_a_subreaper() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    flag = ctypes.c_int(-1)
    assert libc.prctl(37, ctypes.byref(flag), 0, 0, 0) == 0  # PR_GET_CHILD_SUBREAPER
    assert flag.value == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _sleep_argument() -> str:
    return f"986.{random.randrange(10**6, 10**7)}"


@in_a_child
def test_a_child_the_run_started_itself_is_neither_killed_nor_reaped() -> None:
    assert reaper.become_subreaper()
    child = subprocess.Popen(["sleep", _sleep_argument()])
    try:
        assert reaper.sweep_run() == []
        assert _alive(child.pid)
        child.send_signal(signal.SIGTERM)
        for _ in range(3):  # the zombie is left for its Popen, which still sees how it ended
            reaper.sweep_run()
        assert child.wait(timeout=10) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


@in_a_child
def test_an_orphan_without_a_workers_token_is_left_alone() -> None:
    """A subreaper adopts every orphan below it; only those of a worker of this run are its to end."""
    assert reaper.become_subreaper()
    mark = _sleep_argument()
    subprocess.run(["sh", "-c", f"setsid sleep {mark} >/dev/null 2>&1 &"], check=True)
    try:
        orphan = _find(mark)
        assert orphan is not None and reaper.sweep_run() == [] and _alive(orphan)
    finally:
        if (orphan := _find(mark)) is not None:
            os.kill(orphan, signal.SIGKILL)
            os.waitpid(orphan, 0)  # adopted: ours to reap


@in_a_child
def test_an_orphan_with_a_workers_token_is_killed_and_reaped() -> None:
    assert reaper.become_subreaper()
    mark, token = _sleep_argument(), reaper.new_token()
    env = {**os.environ, reaper.TOKEN_ENV: token}
    subprocess.run(["sh", "-c", f"setsid sleep {mark} >/dev/null 2>&1 &"], check=True, env=env)
    orphan = _find(mark)
    assert orphan is not None and _parent(orphan) == os.getpid()  # adopted: its shell has exited
    assert reaper.sweep(reaper.new_token()) == []  # another worker's token: not this one's
    assert reaper.sweep(token) == [orphan]
    assert not os.path.exists(f"/proc/{orphan}")  # killed and reaped: no zombie left


@in_a_child
def test_a_worker_token_of_another_run_is_not_this_runs() -> None:
    assert reaper.become_subreaper()
    mark = _sleep_argument()
    env = {**os.environ, reaper.TOKEN_ENV: "1-00000000.1"}  # as a nested run's worker would carry
    subprocess.run(["sh", "-c", f"setsid sleep {mark} >/dev/null 2>&1 &"], check=True, env=env)
    try:
        orphan = _find(mark)
        assert orphan is not None and reaper.sweep_run() == [] and _alive(orphan)
    finally:
        if (orphan := _find(mark)) is not None:
            os.kill(orphan, signal.SIGKILL)
            os.waitpid(orphan, 0)  # adopted: ours to reap


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def _find(mark: str) -> int | None:
    """The ``sleep MARK`` process once it runs (it is started in the background)."""
    import time

    end = time.monotonic() + 10
    while time.monotonic() < end:
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open(f"/proc/{name}/cmdline", "rb") as f:
                        if f.read().split(b"\0")[:2] == [b"sleep", mark.encode()] and _alive(int(name)):
                            return int(name)
                except OSError:
                    continue
        time.sleep(0.01)
    return None


def test_an_escaped_orphan_with_a_workers_token_is_killed_without_a_subreaper() -> None:
    """The library route: the escapee is re-parented to init (or a subreaper above us), found by its
    token in the whole process table, and killed; its new parent reaps it."""
    mark, token = _sleep_argument(), reaper.new_token()
    env = {**os.environ, reaper.TOKEN_ENV: token}
    subprocess.run(["sh", "-c", f"setsid sleep {mark} >/dev/null 2>&1 &"], check=True, env=env)
    orphan = _find(mark)
    assert orphan is not None and _parent(orphan) != os.getpid()
    assert reaper.sweep(reaper.new_token()) == []
    assert reaper.sweep(token) == [orphan]
    assert not _alive(orphan)
