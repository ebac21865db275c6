"""The end of a verify run under hostile conditions: a signal in each phase (start-up, the cases,
the reports being written, the table being printed into a stdout nobody reads), a stdout that is
closed (``verify --json F | head -1``) or fails (a full disk). Whatever happens, once a case has a
status it is in every report asked for, each report is whole, and the exit status says what ended
the run (128 + the signal; else the verdict's 0 or 1, never 3).

The reference implementation runs (no foreign runtime is the point); stdout is a real pipe. A pipe
is shrunk to one page (``F_SETPIPE_SZ``) so that the table, ~16 KB for the whole catalogue, blocks
in it for certain: no test hook pauses the run.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
import time
from pathlib import Path
from xml.etree import ElementTree

from attention_ports import cli
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.runner import select_entries
from tests.faults.conftest import SOFTMAX, SOFTMAX_2, wait_for

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096
REPORTS = {"--json": "r.json", "--junit": "r.xml", "--markdown": "r.md", "--html": "r.html"}


def start(argv: list[str], stdout: int, tmp_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "attention_ports.cli", "verify", "--impl", "reference", *argv],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=stdout,
        stderr=open(tmp_path / "stderr", "wb"),
        cwd=tmp_path,
    )


def small_pipe() -> tuple[int, int]:
    """A pipe of one page: a writer of more than a page (and Python's 8 KB buffer) blocks in it."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PAGE)
    return read, write


def waiting_in_pipe(read: int) -> int:
    """The bytes written into the pipe and not read yet."""
    return int.from_bytes(fcntl.ioctl(read, termios.FIONREAD, b"\0\0\0\0"), sys.byteorder)


def finish(proc: subprocess.Popen[bytes], timeout: float = 20) -> int:
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def report_of(tmp_path: Path) -> dict:
    """The JSON report, whole (it parses) and the other reports whole too (each ends as it should)."""
    doc = json.loads((tmp_path / "r.json").read_text())
    assert ElementTree.parse(tmp_path / "r.xml").getroot().tag == "testsuites"
    assert (tmp_path / "r.html").read_text().rstrip().endswith("</html>")
    assert doc["summary"]["headline"] in (tmp_path / "r.md").read_text()
    assert not list(tmp_path.glob(".r.*"))  # no temporary file left beside them
    return doc


def every_report() -> list[str]:
    return [arg for opt, name in REPORTS.items() for arg in (opt, name)]


def reports_in(folder: Path) -> list[str]:
    return [arg for opt, name in REPORTS.items() for arg in (opt, str(folder / name))]


def catalogue_size() -> int:
    return len(select_entries(REPO_FIXTURES))


def stderr_of(tmp_path: Path) -> str:
    return (tmp_path / "stderr").read_text()


def no_noise(err: str) -> None:
    for word in ("Traceback", "Exception ignored", "BrokenPipeError", "internal error"):
        assert word not in err, err


def sigterm_caught(pid: int) -> bool:
    """Whether the process has its own SIGTERM handler yet (its caught-signals mask, /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = int(next(x for x in status.splitlines() if x.startswith("SigCgt:")).split()[1], 16)
    return bool(mask & (1 << (signal.SIGTERM - 1)))


# --- a closed or failing stdout (in process: the stream is real, the run needs no process of its own)
def test_a_closed_stdout_leaves_every_report_and_exits_by_the_verdict(tmp_path: Path) -> None:
    """``verify --json F | head -1``: once the reader has its line, every write is EPIPE; that once
    ended the run with exit 3 (BrokenPipeError) before any report was written. A process of its
    own: Python's flush of stdout at exit must not complain either ("Exception ignored", exit 120)."""
    read, write = os.pipe()
    os.close(read)  # `head -1` once it has its line
    proc = start(["--case", SOFTMAX, "--case", SOFTMAX_2, *every_report()], write, tmp_path)
    os.close(write)
    assert finish(proc) == 0  # the verdict: the reference agrees
    doc = report_of(tmp_path)
    assert [c["case"] for c in doc["cases"]] == [SOFTMAX, SOFTMAX_2]
    assert doc["interrupted"] is False and doc["summary"]["ok"] is True
    no_noise(stderr_of(tmp_path))


def test_a_failing_stdout_is_named_and_the_reports_are_written(tmp_path: Path, monkeypatch, capsys) -> None:
    """stdout on a full disk (/dev/full: every write is ENOSPC): said once on stderr, not exit 3."""
    with open("/dev/full", "w", encoding="utf-8") as full:
        monkeypatch.setattr(sys, "stdout", full)
        code = cli.main(["verify", "--impl", "reference", "--case", SOFTMAX, *reports_in(tmp_path)])
        monkeypatch.undo()
    assert code == 0
    assert [c["case"] for c in report_of(tmp_path)["cases"]] == [SOFTMAX]
    err = capsys.readouterr().err
    assert err.count(f"stdout failed ([Errno {errno.ENOSPC}] No space left on device)") == 1
    no_noise(err)


# --- a signal in each phase -----------------------------------------------------------------------
def test_sigterm_at_start_up_writes_an_empty_interrupted_report(tmp_path: Path) -> None:
    """SIGTERM the moment verify has its handler, before any case: the run is interrupted with no
    case run; the reports say so (once: exit 143 and no report at all)."""
    proc = start(["--case", SOFTMAX, *every_report()], subprocess.DEVNULL, tmp_path)
    wait_for(lambda: sigterm_caught(proc.pid) or proc.poll() is not None, timeout=30, what="verify's handler")
    proc.send_signal(signal.SIGTERM)
    assert finish(proc) == 128 + signal.SIGTERM
    doc = report_of(tmp_path)
    assert doc["interrupted"] is True and doc["results"] == [] and doc["summary"]["complete"] is False
    assert doc["summary"]["ok"] is False  # an interrupted run is never green, with or without CI=true
    assert doc["summary"]["headline"].startswith("INTERRUPTED: 0 of 0 cases pass")
    no_noise(stderr_of(tmp_path))


def test_sigint_during_the_cases_writes_the_cases_that_finished(tmp_path: Path) -> None:
    """SIGINT while the cases run: held there for certain by a stderr pipe with room for one progress
    line only (the run blocks in its next one, after ~20 cases, until it is drained). The cases that
    finished, in order and whole, are the report, and the handler's line, written while a progress
    line was blocked in the same stderr, reaches it."""
    read, write = small_pipe()
    os.write(write, b"x" * (PAGE - 40))  # room for "[reference]: 0/191 cases (1.5 s)\n", not for a second line
    proc = subprocess.Popen(
        [sys.executable, "-m", "attention_ports.cli", "verify", "--impl", "reference", *every_report()],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=write,
        cwd=tmp_path,
    )
    os.close(write)
    with os.fdopen(read, "rb") as err:
        wait_for(lambda: waiting_in_pipe(read) > PAGE - 40 or proc.poll() is not None, timeout=60, what="a line")
        proc.send_signal(signal.SIGINT)
        said = err.read()  # drains the pipe: the run goes on, and stops before its next case
    assert finish(proc) == 128 + signal.SIGINT
    doc = report_of(tmp_path)
    assert doc["interrupted"] is True
    ran = [c["case"] for c in doc["cases"]]
    assert 0 < len(ran) <= 21 < catalogue_size()
    order = [e["id"] for e in select_entries(REPO_FIXTURES)]
    assert ran == order[: len(ran)]  # the cases that finished, in order, and each one whole:
    assert {c["status"] for c in doc["cases"]} <= {"pass"}
    assert len(doc["results"]) == sum(len(e["expected"]) for e in select_entries(REPO_FIXTURES)[: len(ran)])
    text = said.decode().lstrip("x")
    assert "attention-ports: SIGINT: stopping (no new case starts; again to quit now)" in text
    no_noise(text)


def test_a_signal_while_the_table_blocks_keeps_every_report(tmp_path: Path) -> None:
    """Every case has run; the table is being printed into a pipe nobody reads (a paused terminal,
    a slow log reader). The signal ends the printing at once; the reports were written before it
    (once: none written, exit 143, a stale report left as it was)."""
    how = signal.SIGTERM
    stale = '{"stale": true}'
    (tmp_path / "r.json").write_text(stale)
    read, write = small_pipe()
    proc = start(every_report(), write, tmp_path)
    os.close(write)
    try:
        wait_for(
            lambda: waiting_in_pipe(read) >= PAGE or proc.poll() is not None,
            timeout=60,
            what="the table filling the pipe",
        )
        assert proc.poll() is None  # blocked in the table, where the signal comes
        assert (tmp_path / "r.json").read_text() != stale  # the reports came before the table
        proc.send_signal(how)
        assert finish(proc, timeout=10) == 128 + how
    finally:
        os.close(read)
    doc = report_of(tmp_path)
    assert doc["interrupted"] is False and doc["summary"]["complete"] is True  # every case ran
    assert len(doc["cases"]) == catalogue_size()
    err = stderr_of(tmp_path)
    assert f"attention-ports: {how.name}: stopping (the reports are written)" in err
    no_noise(err)


def test_sigterm_while_the_reports_are_written_finishes_them(tmp_path: Path) -> None:
    """SIGTERM as soon as the first report (--json) is in place, while the others are written
    (they take ~50 ms here; should it land after them, in the table, the promise is the same): every
    report whole, exit 143."""
    read, write = small_pipe()  # the table, after the reports, blocks: the process waits for the signal
    proc = start(every_report(), write, tmp_path)
    os.close(write)
    try:
        end = time.monotonic() + 60
        while not (tmp_path / "r.json").exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.002)  # the window is ~50 ms: wait_for's 20 ms steps would miss much of it
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert finish(proc, timeout=10) == 128 + signal.SIGTERM
        assert time.monotonic() - started < 5
    finally:
        os.close(read)
    doc = report_of(tmp_path)
    assert doc["interrupted"] is False and len(doc["cases"]) == catalogue_size()
    err = stderr_of(tmp_path)
    assert (
        "SIGTERM: finishing the reports, then stopping" in err or "SIGTERM: stopping (the reports are written)" in err
    )
    no_noise(err)
