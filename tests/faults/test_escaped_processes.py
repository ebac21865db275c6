"""A process a port moves out of its worker's group and session (``setsid``, a double fork,
``nohup ... &`` then ``setsid``) outlives no run, whichever way the worker or the run ends; and
the run's report is still complete (attention_ports/runtimes/reaper.py says how). Every way a worker ends
(a timeout, a crash, a give-up, close) goes through one ``_Process.end``; a signal to the run
goes through ``shutdown_all``: each is tested once per runtime.

The port (tests/faults/ports/*/escapes_its_group.*) starts three such ``sleep``s in every call,
waits until they run, and leaves a flag file saying so; their command lines carry a marker unique
to the test. Then its softmax returns, its self_attention crashes, its attention hangs.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from attention_ports.runtimes.impl import ImplementationError
from attention_ports.runtimes.registry import create
from tests.faults.conftest import SDPA, SELF, SOFTMAX, SOFTMAX_2, check_runtime, port, sleepers, wait_for, zombies

ROOT = Path(__file__).resolve().parents[2]
EPS = np.finfo(np.float64).eps
# Seconds. Short, so that a hang costs little; Julia's allowance covers compiling an operation
# (its sleeps are started by code the first softmax compiled).
LIMITS = {
    "ATTENTION_PORTS_R_TIMEOUT": "1",
    "ATTENTION_PORTS_JULIA_TIMEOUT": "2",
    "ATTENTION_PORTS_JULIA_COMPILE_ALLOWANCE": "2",
}
# op digits of the port's markers
SOFTMAX_OP, SELF_OP, SDPA_OP = "1", "2", "3"


def _marker() -> str:
    """The start of every sleep's argument in one test: the port appends the op and the escape."""
    return f"987.{random.randrange(10**6, 10**7)}"


def _env(marker: str, flag: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, **LIMITS, "FAULT_MARKER": marker, "FAULT_FLAG": str(flag), "PYTHONPATH": str(ROOT), **extra}


def test_no_escaped_process_outlives_a_timeout_or_close(
    lang: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library route (as the pytest plugin's pool uses it): each way a worker ends takes with
    it what its port moved out of its group, at once; and its temporary folder (R and Julia remove
    theirs only on a clean exit: a killed worker left one in /tmp each time)."""
    marker, flag, root = _marker(), tmp_path / "started", tmp_path / "tmp"
    root.mkdir()
    for name, value in _env(marker, flag, TMPDIR=str(root)).items():
        monkeypatch.setenv(name, value)
    x = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    impl = create(lang, port(lang, "escapes_its_group"))
    try:
        got = impl.run("softmax", {"x": x}, {})
        want = np.exp(x - x.max(axis=1, keepdims=True))
        want /= want.sum(axis=1, keepdims=True)
        # exp, a sum of 3 and a division, each within an ulp or so, in R or Julia and in NumPy
        np.testing.assert_allclose(got["y"], want, rtol=8 * EPS, atol=0)
        assert len(sleepers(marker + SOFTMAX_OP)) == 3  # all three escaped and run: the port waited for them
        (folder,) = root.iterdir()  # the live worker's own $TMPDIR
        assert folder.name.startswith("attention-ports-worker-")
        (folder / "a port's file").write_text("left behind")

        with pytest.raises(ImplementationError, match=r"timed out after .* in scaled_dot_product_attention"):
            impl.run("scaled_dot_product_attention", {"q": x, "k": x, "v": x}, {})
        assert Path(f"{flag}{SDPA_OP}").exists()  # its sleeps had started before it hung
        assert sleepers(marker) == []  # this call's and softmax's: gone with the worker, when the call fails
        assert list(root.iterdir()) == []  # its folder too

        impl.run("softmax", {"x": x}, {})  # a new worker, and new sleeps: gone at close, below
        assert len(sleepers(marker + SOFTMAX_OP)) == 3
        assert len(list(root.iterdir())) == 1
    finally:
        impl.close()
    assert sleepers(marker) == []
    assert zombies() == []
    assert list(root.iterdir()) == []


def test_no_escaped_process_outlives_verify_and_its_report_is_complete(lang: str, tmp_path: Path) -> None:
    """``verify`` in a process of its own: a crash and the run's end leave no sleep, and every case
    asked for is in the report, judged."""
    marker, flag, out = _marker(), tmp_path / "started", tmp_path / "report.json"
    cases = [SOFTMAX, SELF, SOFTMAX_2]
    argv = ["verify", "--port", f"{lang}={port(lang, 'escapes_its_group')}", "--json", str(out)]
    for case in cases:
        argv += ["--case", case]
    done = subprocess.run(
        [sys.executable, "-m", "attention_ports.cli", *argv],
        env=_env(marker, flag),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert sleepers(marker) == []
    assert done.returncode == 1, done.stderr  # cases failed: the ports disagree
    assert Path(f"{flag}{SOFTMAX_OP}").exists() and Path(f"{flag}{SELF_OP}").exists()
    results = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert set(results) == set(cases)
    assert results[SOFTMAX]["status"] == "pass" and results[SOFTMAX_2]["status"] == "pass"
    assert results[SELF]["status"] == "error"
    assert "worker died (exit code 3) in self_attention" in json.dumps(results[SELF])


@pytest.mark.parametrize(
    ("lang", "how"),
    [("r", signal.SIGTERM), ("julia", signal.SIGTERM), ("r", signal.SIGINT)],
    ids=["r-SIGTERM", "julia-SIGTERM", "r-SIGINT"],
)
def test_no_escaped_process_outlives_a_signal_to_verify(lang: str, how: signal.Signals, tmp_path: Path) -> None:
    """SIGTERM or SIGINT to ``verify`` while its port hangs with three sleeps out of its group."""
    check_runtime(lang)
    marker, flag = _marker(), tmp_path / "started"
    argv = ["verify", "--port", f"{lang}={port(lang, 'escapes_its_group')}", "--case", SDPA]
    env = _env(marker, flag, **{f"ATTENTION_PORTS_{lang.upper()}_TIMEOUT": "120"})
    cli = subprocess.Popen(
        [sys.executable, "-m", "attention_ports.cli", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(Path(f"{flag}{SDPA_OP}").exists, timeout=120, what="the port's sleeps started")
        assert len(sleepers(marker + SDPA_OP)) == 3
        cli.send_signal(how)
        assert cli.wait(timeout=20) == 128 + how
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert sleepers(marker) == []


def test_no_escaped_process_outlives_a_sigterm_to_pytest(r: str, tmp_path: Path) -> None:
    """The pytest route: SIGTERM to a pytest session (the plugin's pool of workers; pytest installs
    no handler of its own) while the port hangs with three sleeps out of its group."""
    marker, flag = _marker(), tmp_path / "started"
    argv = ["--pyargs", "attention_ports.conformance", "--port", f"r={port('r', 'escapes_its_group')}"]
    argv += ["--case", SDPA, "-p", "no:cacheprovider", "-p", "no:xdist", "-q"]
    session = subprocess.Popen(
        [sys.executable, "-m", "pytest", *argv],
        env=_env(marker, flag, ATTENTION_PORTS_R_TIMEOUT="120"),
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(Path(f"{flag}{SDPA_OP}").exists, timeout=120, what="the port's sleeps started")
        assert len(sleepers(marker + SDPA_OP)) == 3
        session.send_signal(signal.SIGTERM)
        assert session.wait(timeout=20) == -signal.SIGTERM  # it still ends by SIGTERM, as without the plugin
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    assert sleepers(marker) == []


def test_no_escaped_process_outlives_an_interpreter_that_never_closed_its_port(r: str, tmp_path: Path) -> None:
    """The library route without close(): the interpreter's exit ends the worker and its leftovers."""
    marker, flag = _marker(), tmp_path / "started"
    script = (
        "import numpy as np\n"
        "from attention_ports.runtimes.registry import create\n"
        f"impl = create('r', {str(port('r', 'escapes_its_group'))!r})\n"
        "impl.run('softmax', {'x': np.eye(2)}, {})\n"
    )
    done = subprocess.run([sys.executable, "-c", script], env=_env(marker, flag), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert Path(f"{flag}{SOFTMAX_OP}").exists()
    assert sleepers(marker) == []
