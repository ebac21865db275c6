"""Workers die with us, whatever kills us, and whichever thread started them; nothing is left over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from attention_ports.runtimes import supervisor
from attention_ports.runtimes.impl import ImplementationError, ImplementationUnavailable
from attention_ports.runtimes.registry import create
from tests.faults.conftest import SOFTMAX, alive, children_of, port, wait_for, zombies

ROOT = Path(__file__).resolve().parents[2]
# How a worker's command line names it; Julia's on a custom system image runs the image's copy of
# the worker module (attention_ports/runtimes/julia/sysimage.py ENTRY) instead of the worker.jl file.
WORKER_MARK = {"r": ("attention_ports.runtimes.r.worker",), "julia": ("worker.jl", "JuliaPortWorker.serve")}


def _worker_of(pid: int, lang: str) -> int | None:
    for child in children_of(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().decode(errors="replace")
            if any(mark in cmdline for mark in WORKER_MARK[lang]):
                return child
        except OSError:
            continue
    return None


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["SIGINT", "SIGTERM", "SIGKILL"])
def test_killing_verify_leaves_no_worker_behind(lang: str, how: signal.Signals, tmp_path: Path) -> None:
    """SIGINT, SIGTERM or SIGKILL to ``verify`` while its port hangs: ``verify`` ends at once, and the
    worker too (the call is abandoned and its worker killed; or the parent-death signal). The
    worker's temporary folder goes with it, but after SIGKILL, which no code of ours outlives."""
    flag, root = tmp_path / "hanging", tmp_path / "tmp"
    root.mkdir()
    env = {**os.environ, "FAULT_FLAG": str(flag), "PYTHONPATH": str(ROOT), "TMPDIR": str(root)}
    argv = ["verify", "--port", f"{lang}={port(lang, 'hangs')}", "--case", SOFTMAX]
    cli = subprocess.Popen(
        [sys.executable, "-m", "attention_ports.cli", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(flag.exists, timeout=120, what="the port's softmax started hanging")
        worker = _worker_of(cli.pid, lang)
        assert worker is not None and alive(worker)
        cli.send_signal(how)
        cli.wait(timeout=10)  # a port in R's `repeat {}` once ignored five SIGINTs
        wait_for(lambda: not alive(worker), timeout=10, what=f"the {lang} worker {worker} gone")
        assert len(list(root.iterdir())) == (1 if how == signal.SIGKILL else 0)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()


def test_a_worker_started_from_a_short_lived_thread_outlives_the_thread(lang: str) -> None:
    """PR_SET_PDEATHSIG fires when the forking *thread* ends: workers are forked by one lasting thread."""
    x = {"x": np.array([[1.0, 2.0], [3.0, 5.0]])}
    made: list = []

    def start() -> None:
        impl = create(lang, port(lang, "hangs"))  # only its softmax hangs; attention works
        impl.run("scaled_dot_product_attention", {"q": x["x"], "k": x["x"], "v": x["x"]}, {})
        made.append(impl)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    impl = made[0]
    try:
        sup = impl.supervisor if lang == "r" else impl.transport.supervisor
        pid = sup.pid
        time.sleep(0.5)  # a SIGKILL from the thread's end would have arrived by now
        assert alive(pid)
        impl.run("scaled_dot_product_attention", {"q": x["x"], "k": x["x"], "v": x["x"]}, {})
        assert sup.pid == pid and sup.starts == 1  # the same worker, never restarted
    finally:
        impl.close()


def test_shutdown_all_kills_every_worker_at_once(r: str) -> None:
    impls = [create("r", port("r", "hangs")), create("r", None)]
    pids = [impl.supervisor.pid for impl in impls]
    assert all(alive(p) for p in pids)
    supervisor.shutdown_all()  # what a SIGINT/SIGTERM handler calls
    for pid in pids:
        assert not alive(pid)
        assert not Path(f"/proc/{pid}").exists()  # reaped too
    for impl in impls:
        impl.close()  # still safe afterwards
    assert zombies() == []


def test_close_is_prompt_and_final(r: str) -> None:
    impl = create("r", None)
    pid = impl.supervisor.pid
    impl.close()
    impl.close()
    assert not Path(f"/proc/{pid}").exists()
    with pytest.raises(Exception, match="has been closed"):
        impl.run("softmax", {"x": np.eye(2)}, {})


def test_a_forked_child_of_the_run_ends_none_of_its_workers(r: str) -> None:
    """A child forked from the run (multiprocessing's fork) inherits no workers: its exit, which runs
    shutdown_all, leaves the run's worker (and its session) alone."""
    impl = create("r", None)
    try:
        pid = impl.supervisor.pid
        child = os.fork()
        if child == 0:  # pragma: no cover - the child's side
            supervisor.shutdown_all()  # what its atexit runs
            os._exit(0)
        os.waitpid(child, 0)
        assert alive(pid)
        got = impl.run("softmax", {"x": np.array([[0.0, 0.0]])}, {})
        assert got["y"].tolist() == [[0.5, 0.5]]  # exp(0) / (exp(0) + exp(0)), exact
        assert impl.supervisor.starts == 1
    finally:
        impl.close()


# Loading another port into a running R worker (RImplementation.load, the mutation kit's): in place
# only while the R session is as it started; never anything of the previous port left.
_ADD = "softmax <- function(x, axis = -1) x + 1\nhelper <- function(x) x\n"
# -1 where anything of the ports below is left: a binding, an option, a variable, a random seed
_TWICE = (
    "softmax <- function(x, axis = -1) {\n"
    "  left <- exists('helper') || exists('leak') || getOption('digits') != 7 ||\n"
    "    nzchar(Sys.getenv('ATTENTION_PORTS_LEAK')) || exists('.Random.seed', envir = globalenv()) ||\n"
    "    exp(0) != 1 || stats::median(c(1, 3)) != 2 || median(c(1, 3)) != 2\n"
    "  if (left) -1 else 2 * x\n"
    "}\n"
)


def test_an_r_worker_loads_another_port_in_place_and_nothing_of_the_last_remains(r: str, tmp_path: Path) -> None:
    first, second = tmp_path / "first.R", tmp_path / "second.R"
    first.write_text(_ADD)
    second.write_text(_TWICE)
    x = np.array([[1.0, 2.0]])
    impl = create("r", first)
    try:
        pid = impl.supervisor.pid
        assert impl.run("softmax", {"x": x}, {})["y"].tolist() == [[2.0, 3.0]]
        impl.load(second)
        assert impl.run("softmax", {"x": x}, {})["y"].tolist() == [[2.0, 4.0]]  # no `helper` in sight
        assert (impl.supervisor.pid, impl.supervisor.starts) == (pid, 1)  # the same process
        assert str(second) in impl.describe()
    finally:
        impl.close()
    assert not alive(pid)


@pytest.mark.parametrize(
    "change",
    [
        "assign('leak', 1, envir = globalenv())",
        "options(digits = 3)",
        "Sys.setenv(ATTENTION_PORTS_LEAK = '1')",
        "set.seed(1)",  # .Random.seed in the global environment
        # base R itself, a namespace, a package on the search path (once left so for the next port)
        "unlockBinding('exp', baseenv()); assign('exp', function(x) x, baseenv()); lockBinding('exp', baseenv())",
        "local({e <- asNamespace('stats'); unlockBinding('median', e); assign('median', function(...) 0, e)})",
        "local({p <- as.environment('package:stats'); unlockBinding('median', p); assign('median', sd, p)})",
    ],
    ids=["globalenv", "options", "environment", "seed", "base", "namespace", "search-path"],
)
def test_after_a_port_that_changed_the_r_session_the_next_port_gets_a_fresh_worker(
    r: str, tmp_path: Path, change: str
) -> None:
    first, second = tmp_path / "first.R", tmp_path / "second.R"
    first.write_text(f"{change}\n{_ADD}")
    second.write_text(_TWICE)
    impl = create("r", first)
    try:
        pid = impl.supervisor.pid
        impl.load(second)
        assert impl.supervisor.starts == 2 and impl.supervisor.pid != pid and not alive(pid)
        assert impl.run("softmax", {"x": np.array([[1.0]])}, {})["y"].tolist() == [[2.0]]
    finally:
        impl.close()


def test_a_port_that_cannot_load_fails_the_load_and_the_next_load_recovers(r: str, tmp_path: Path) -> None:
    good, bad = tmp_path / "good.R", tmp_path / "bad.R"
    good.write_text(_ADD)
    bad.write_text("softmax <- function(x {\n")
    impl = create("r", good)
    try:
        with pytest.raises(ImplementationUnavailable, match=r"bad\.R"):
            impl.load(bad)
        with pytest.raises(ImplementationError, match="cannot load port"):
            impl.run("softmax", {"x": np.array([[1.0]])}, {})
        assert impl.supervisor.pid is None  # the worker that could not load it has ended
        impl.load(good)  # the failed load's worker is gone: a fresh one
        assert impl.run("softmax", {"x": np.array([[1.0]])}, {})["y"].tolist() == [[2.0]]
        pid = impl.supervisor.pid
        os.kill(pid, signal.SIGKILL)  # dead between calls: the load starts a fresh worker
        impl.load(good)
        assert impl.supervisor.pid != pid
        assert impl.run("softmax", {"x": np.array([[1.0]])}, {})["y"].tolist() == [[2.0]]
    finally:
        impl.close()
    assert zombies() == []


def test_a_tmpdir_swapped_for_a_symlink_is_removed_as_a_link(r: str, tmp_path: Path, monkeypatch) -> None:
    """The port replaces its $TMPDIR with a link to a folder of someone else's and crashes: the
    link goes (rmtree refused it, and it stayed), the folder it points to is not followed."""
    root, target = tmp_path / "tmp", tmp_path / "not-the-ports"
    root.mkdir()
    target.mkdir()
    (target / "keep.txt").write_text("someone else's")
    monkeypatch.setenv("TMPDIR", str(root))
    monkeypatch.setenv("FAULT_TARGET", str(target))
    impl = create("r", port("r", "swaps_its_tmpdir_for_a_symlink"))
    try:
        (folder,) = root.iterdir()  # the worker's own $TMPDIR
        with pytest.raises(ImplementationError, match="exit code 3"):
            impl.run("softmax", {"x": np.array([[1.0, 2.0]])}, {})
        assert not folder.is_symlink() and not folder.exists()  # the link is gone: checked, not followed
    finally:
        impl.close()
    assert list(root.iterdir()) == []
    assert [p.name for p in target.iterdir()] == ["keep.txt"] and (target / "keep.txt").read_text() == "someone else's"
