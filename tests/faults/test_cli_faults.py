"""The command line under hostile conditions: unwritable report targets, the umask, paths that
need quoting, signals part-way through a run, and a bug of our own (exit codes in cli.py)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from attention_ports import cli
from attention_ports.core.targets import TargetError, check_targets
from attention_ports.fixtures.store import REPO_FIXTURES, generate
from attention_ports.judge import runner
from attention_ports.judge.runner import repro_command
from attention_ports.pipeline import verify as pipeline
from tests.faults.conftest import (
    SDPA,
    SDPA_2,
    SOFTMAX,
    SOFTMAX_2,
    alive,
    check_runtime,
    children_of,
    port,
    processes_with,
    wait_for,
)

ROOT = Path(__file__).resolve().parents[2]


# --- report targets, checked before the run -------------------------------------------------------
def test_a_json_target_that_is_a_directory_fails_at_once(tmp_path: Path, capsys) -> None:
    start = time.perf_counter()
    code = cli.main(["verify", "--impl", "reference", "--json", str(tmp_path)])
    seconds = time.perf_counter() - start
    out, err = capsys.readouterr()
    assert code == cli.EXIT_BAD_INPUT
    assert f"attention-ports: --json {tmp_path}: is a directory; give a file name" in err
    assert out == ""  # no case ran: the run would have taken far longer than the check
    assert seconds < 5


def test_a_json_target_under_a_file_fails_at_once(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli.main(["verify", "--impl", "reference", "--json", str(blocker / "r.json")]) == cli.EXIT_BAD_INPUT
    assert f"--json {blocker / 'r.json'}: {blocker} is not a directory" in capsys.readouterr().err


def test_every_report_target_is_checked_together(tmp_path: Path) -> None:
    # The one helper every report option goes through (--json now; --junit, --markdown, --html).
    same = tmp_path / "r.out"
    with pytest.raises(TargetError, match=r"--junit .*r\.out: the same file as --json"):
        check_targets({"--json": same, "--junit": tmp_path / "." / "r.out"})
    got = check_targets({"--json": Path("rel.json"), "--html": None, "--junit": tmp_path / "new" / "dir" / "j.xml"})
    assert got == {"--json": Path.cwd() / "rel.json", "--junit": tmp_path / "new" / "dir" / "j.xml"}
    assert not (tmp_path / "new").exists()  # checking creates nothing
    assert not list(tmp_path.iterdir())  # and leaves no probe behind


def test_a_relative_json_target_is_resolved_before_the_run(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    real_run = runner.run_suite

    def moving_run(*args, **kwargs):  # as a port that changes directory in-process once did
        os.chdir("/")
        return real_run(*args, **kwargs)

    monkeypatch.setattr(pipeline, "run_suite", moving_run)  # the one pipeline runs the catalogue
    assert cli.main(["verify", "--impl", "reference", "--case", SOFTMAX, "--json", "r.json"]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["ok"] is True
    capsys.readouterr()


# --- file modes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_reports_and_fixtures_take_the_umask_mode(tmp_path: Path, umask: int, capsys) -> None:
    old = os.umask(umask)
    try:
        report = tmp_path / "report.json"
        assert cli.main(["verify", "--impl", "reference", "--case", SOFTMAX, "--json", str(report)]) == 0
        out_dir = tmp_path / "fx"
        out_dir.mkdir()
        text = (REPO_FIXTURES / "catalogue.toml").read_text()
        head, *cases = text.split("\n[[case]]\n")
        keep = [c for c in cases if f'id = "{SOFTMAX}"' in c]
        (out_dir / "catalogue.toml").write_text("\n[[case]]\n".join([head, *keep]))
        generate(out_dir, workers=1)
    finally:
        os.umask(old)
    capsys.readouterr()
    want = 0o666 & ~umask
    assert stat.S_IMODE(report.stat().st_mode) == want
    written = [out_dir / "manifest.json", *(out_dir / "cases" / SOFTMAX).iterdir()]
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {p.name: oct(want) for p in written}


# --- quoting --------------------------------------------------------------------------------------
def test_repro_lines_are_shell_quoted(tmp_path: Path, capsys) -> None:
    odd = tmp_path / "it's a $HOME dir"
    shutil.copytree(REPO_FIXTURES, odd)
    manifest = json.loads((odd / "manifest.json").read_text())
    cases = {c["id"]: c for c in manifest["cases"]}
    cases["sdpa_causal_bool"]["expected"]["output"] = cases["sdpa_causal_additive"]["expected"]["output"]
    (odd / "manifest.json").write_text(json.dumps(manifest))
    assert cli.main(["verify", "--impl", "reference", "--dir", str(odd), "--case", "sdpa_causal_bool"]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "repro: " in x)
    argv = shlex.split(line.split("repro: ", 1)[1])
    assert argv == ["attention-ports", "verify", "--impl", "reference", "--case", "sdpa_causal_bool", "--dir", str(odd)]
    user_port = Path("/x/my port (v2)/it's.R")
    assert shlex.split(repro_command("r", "c1", user_port))[-2:] == ["--port", f"r={user_port}"]


# --- our own bugs -----------------------------------------------------------------------------------
@pytest.mark.parametrize("sequential", [True, False])
def test_an_internal_error_exits_3_with_a_short_traceback(monkeypatch, capsys, sequential: bool) -> None:
    def broken_judge(*_args, **_kwargs):
        raise ZeroDivisionError("a bug in the harness")

    monkeypatch.setattr(runner, "judge", broken_judge)
    argv = ["verify", "--impl", "reference", "--impl", "torch", "--case", SOFTMAX]
    code = cli.main(argv + (["--sequential"] if sequential else []))
    err = capsys.readouterr().err
    assert code == cli.EXIT_INTERNAL  # never 1: that would read "the ports disagree"
    assert "Traceback (most recent call last)" in err and 'raise ZeroDivisionError("a bug in the harness")' in err
    assert "attention-ports: internal error (ZeroDivisionError: a bug in the harness)" in err
    assert err.count('File "') <= 6  # short: the last frames only


def test_usage_errors_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        cli.main(["verify", "--impl", "no-such-impl"])
    assert info.value.code == cli.EXIT_BAD_INPUT


# --- signals ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("lang", "how"), [("r", signal.SIGINT), ("julia", signal.SIGTERM)], ids=["r-SIGINT", "julia-SIGTERM"]
)
def test_a_signal_ends_the_run_cleanly_with_a_partial_report(lang: str, how: signal.Signals, tmp_path: Path) -> None:
    """The port passes its softmax cases, then hangs in attention; the reference (side by side)
    has finished. The signal: no new case starts, the worker is killed, the report of what ran is
    printed and written marked interrupted, exit 128 + the signal, nothing left behind."""
    check_runtime(lang)
    flag, report = tmp_path / "hanging", tmp_path / "report.json"
    path = port(lang, "hangs_in_attention")
    cases = [SOFTMAX, SOFTMAX_2, SDPA, SDPA_2]
    argv = ["verify", "--impl", "reference", "--port", f"{lang}={path}", "--json", str(report)]
    for c in cases:
        argv += ["--case", c]
    proc = subprocess.Popen(
        [sys.executable, "-m", "attention_ports.cli", *argv],
        env={**os.environ, "FAULT_FLAG": str(flag), "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: dict[str, list[str]] = {"out": [], "err": []}
    readers = [
        threading.Thread(target=lambda f=f, k=k: lines[k].extend(f), daemon=True)
        for k, f in (("out", proc.stdout), ("err", proc.stderr))
    ]
    for r in readers:
        r.start()
    try:
        wait_for(flag.exists, timeout=120, what="the port's attention started hanging")
        wait_for(lambda: any("[reference]: 4/4 cases" in e for e in lines["err"]), what="the reference finished")
        proc.send_signal(how)
        proc.wait(timeout=20)  # a SIGINT once left verify blocked for ever in a queue's get
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for r in readers:
        r.join(timeout=5)
    out = "".join(lines["out"])
    assert proc.returncode == 128 + how, out + "".join(lines["err"])
    assert f"interrupted by {how.name}: 6 case run(s) finished; the report holds only those" in out
    doc = json.loads(report.read_text())
    assert doc["interrupted"] is True
    ran = [(r["impl"], r["case"], r["status"]) for r in doc["results"]]
    # one row per output: softmax has y, attention output and weights
    assert [c for i, c, _ in ran if i == "reference"] == [SOFTMAX, SOFTMAX_2, SDPA, SDPA, SDPA_2, SDPA_2]
    # the port: its two softmax cases; the hanging one is dropped (killed by us, not its own failure)
    assert [(c, s) for i, c, s in ran if i == lang] == [(SOFTMAX, "pass"), (SOFTMAX_2, "pass")]
    wait_for(lambda: not processes_with(str(path)), timeout=10, what=f"no {lang} worker left")


def test_sigterm_stops_generate_at_once_leaving_nothing_half_written(tmp_path: Path) -> None:
    """generate computes the truth in worker processes; SIGTERM must not wait for the whole
    generation (a `with ProcessPoolExecutor` did), must leave no worker and no temporary file."""
    out_dir = tmp_path / "fx"
    out_dir.mkdir()
    shutil.copy(REPO_FIXTURES / "catalogue.toml", out_dir / "catalogue.toml")
    proc = subprocess.Popen(
        [sys.executable, "-m", "attention_ports.cli", "generate", "--out", str(out_dir), "--jobs", "2"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("generate: 0/")  # the workers are computing
        time.sleep(1.0)
        workers = children_of(proc.pid)
        assert workers  # the truth's worker processes (and multiprocessing's resource tracker)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)  # not the minute a whole generation takes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM
    assert "attention-ports: interrupted (SIGTERM)" in proc.stderr.read()
    wait_for(lambda: not any(alive(w) for w in workers), timeout=10, what="the truth's workers gone")
    assert not list(out_dir.rglob("*.tmp")) and not (out_dir / "manifest.json").exists()
