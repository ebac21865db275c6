"""A port that prints, quits, crashes, signals itself, hangs, leaves processes behind, pollutes its
runtime, moves its directory or writes into the protocol: each affects only its own cases.

Every scenario runs for R and for Julia, through the user-port path of ``verify``. Each asserts the
fixed behaviour *and* that the other cases of the same run still pass.
"""

from __future__ import annotations

import json
import random

import pytest

from attention_ports import cli
from attention_ports.runtimes.registry import create
from tests.faults.conftest import (
    MHA,
    SDPA,
    SDPA_2,
    SELF,
    SOFTMAX,
    SOFTMAX_2,
    message,
    port,
    processes_with,
    run_port,
    wait_for,
    zombies,
)

pytestmark = pytest.mark.usefixtures("short_limits")

SHOUTS = {
    "r": [
        "cat to the console from {}",
        "print from {}",
        "a child process (system) from {}",
        "straight to fd 1 from {}",
        "message to stderr from {}",
    ],
    "julia": [
        "println from {}",
        "Core.println from {}",
        "a child process (run) from {}",
        "C write(1) from {}",
        "stderr from {}",
    ],
}


def test_printing_reaches_neither_replies_nor_our_output(lang: str, capfd: pytest.CaptureFixture[str]) -> None:
    capfd.readouterr()
    got = run_port(lang, "prints", [SOFTMAX, SOFTMAX_2, SDPA])
    out, err = capfd.readouterr()
    # the numbers are this case's own, not another reply's: the reply stream is intact
    assert got[SOFTMAX].status == "pass" and got[SOFTMAX_2].status == "pass", message(got[SOFTMAX])
    assert got[SDPA].status == "error"
    text = message(got[SDPA])
    assert "attention is not ready yet" in text
    assert "--- the port's output during this call (stdout and stderr) ---" in text
    for shout in SHOUTS[lang]:
        assert shout.format("attention") in text, (shout, text)
        assert shout.format("softmax") not in text  # only what this call printed
        assert shout.format("attention") not in out + err  # never on our stdout/stderr
    # what a passing call printed is kept on the implementation
    with create(lang, port(lang, "prints")) as impl:
        impl.run("softmax", *_softmax_case())
        for shout in SHOUTS[lang]:
            assert shout.format("softmax") in impl.last_output


def _softmax_case():
    import numpy as np

    return {"x": np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])}, {}


DEATHS = {
    "quits": {"r": "died (exit code 3)", "julia": "died (exit code 3)"},
    "segfaults": {"r": "died (killed by SIGSEGV)", "julia": "died (killed by SIGSEGV)"},
    # Julia catches SIGTERM, prints its backtrace and exits with 128 + 15
    "sigterms_itself": {"r": "died (killed by SIGTERM)", "julia": "died (exit code 143)"},
}


@pytest.mark.parametrize("fault", DEATHS)
def test_a_dying_port_loses_only_its_own_cases(lang: str, fault: str) -> None:
    got = run_port(lang, fault, [SOFTMAX, SDPA, SDPA_2])
    assert got[SOFTMAX].status == "error"
    assert f"{lang} worker {DEATHS[fault][lang]} in softmax" in message(got[SOFTMAX])
    for case in (SDPA, SDPA_2):  # on a new worker
        assert got[case].status == "pass", message(got[case])
    assert zombies() == []


def test_a_hanging_call_times_out_and_the_run_goes_on(lang: str) -> None:
    got = run_port(lang, "hangs", [SOFTMAX, SDPA, SDPA_2])
    assert got[SOFTMAX].status == "error"
    assert f"{lang} worker timed out after" in message(got[SOFTMAX])
    assert "in softmax; it was killed" in message(got[SOFTMAX])
    assert got[SDPA].status == "pass" and got[SDPA_2].status == "pass", message(got[SDPA])
    assert zombies() == []


def test_a_fully_hanging_port_is_given_up_after_two_timeouts(lang: str) -> None:
    cases = [SOFTMAX, SOFTMAX_2, SDPA, SDPA_2, SELF]
    got = run_port(lang, "hangs_everywhere", cases)
    assert "timed out after" in message(got[SOFTMAX])
    second = message(got[SOFTMAX_2])
    assert "timed out after" in second and "2 in a row: giving up on this port" in second
    for case in (SDPA, SDPA_2, SELF):  # not run at all: failed at once with the reason
        text = message(got[case])
        assert got[case].status == "error"
        assert f"{lang}: gave up on {port(lang, 'hangs_everywhere')} after 2 consecutive timeouts" in text
        assert got[case].seconds < 1.0
    assert zombies() == []


def test_a_port_that_hangs_while_loading_is_given_up(lang: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(f"ATTENTION_PORTS_{lang.upper()}_STARTUP_TIMEOUT", "4")
    cases = [SOFTMAX, SOFTMAX_2, SDPA]
    got = run_port(lang, "hangs_while_loading", cases)
    for case in cases:
        assert got[case].status == "error"
    first = message(got[SOFTMAX])
    assert f"{lang} worker did not start within 4s (loading {port(lang, 'hangs_while_loading')})" in first
    # One failed start (R: when the implementation is built; Julia: its port loaded before the
    # first case), then unavailable, said once: the first case holds the message, the others point to it.
    what = "could not start" if lang == "r" else "the port did not load"
    later = {o.message for c in cases[1:] for o in got[c].outputs}
    assert later == {f"{lang}: {what}, so no case ran on it (why: see case {SOFTMAX!r})"}
    assert all(got[c].seconds < 1.0 for c in cases[1:])
    assert zombies() == []


def test_a_background_process_does_not_outlive_its_port(lang: str, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = f"{random.randrange(10**6, 10**7)}.25"  # sleep takes fractional seconds: a unique command line
    monkeypatch.setenv("FAULT_MARKER", marker)
    impl = create(lang, port(lang, "leaves_background_process"))
    try:
        x, options = _softmax_case()
        impl.run("softmax", x, options)
        wait_for(lambda: processes_with(f"sleep {marker}"), what="the background process started")
    finally:
        impl.close()  # the worker quits cleanly; its process group is killed all the same
    wait_for(lambda: not processes_with(f"sleep {marker}"), timeout=5, what="the background process gone")
    assert zombies() == []


def test_a_port_that_pollutes_its_runtime_affects_nobody(lang: str) -> None:
    cases = [SOFTMAX, SOFTMAX_2, SDPA]
    name = "pollutes_globalenv" if lang == "r" else "pollutes_globals"
    got = run_port(lang, name, cases)
    assert all(got[c].status == "pass" for c in cases), [message(got[c]) for c in cases]
    ours = {r.case: r for r in create_and_run_ours(lang, cases)}
    assert all(ours[c].status == "pass" for c in cases), [message(ours[c]) for c in cases]
    if lang == "r":  # the port's own lookups: its definitions, then stats, utils, base; never the junk
        import numpy as np

        with create("r", port("r", name)) as impl:
            q = np.eye(2)
            got_r = impl.run("scaled_dot_product_attention", {"q": q, "k": q, "v": q}, {})
        assert got_r["median_is_stats"] == 1 and got_r["head_is_utils"] == 1 and got_r["rowsums_is_base"] == 1
        assert got_r["sees_the_bridge"] == 0


def create_and_run_ours(lang: str, cases: list[str]):
    from attention_ports.fixtures.store import REPO_FIXTURES
    from attention_ports.judge.runner import run_suite

    return run_suite(REPO_FIXTURES, [lang], {}, cases, required={lang}, progress=None)


def test_a_port_that_changes_directory_moves_none_of_our_paths(
    lang: str, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    path = port(lang, "changes_directory")
    code = cli.main(["verify", "--port", f"{lang}={path}", "--case", SOFTMAX, "--case", SOFTMAX_2, "--json", "r.json"])
    capsys.readouterr()
    assert code == 0
    doc = json.loads((tmp_path / "r.json").read_text())  # where we were asked to write it
    assert {r["status"] for r in doc["results"]} == {"pass"} and len(doc["results"]) == 2
    assert (tmp_path / "r.json").resolve().parent == tmp_path.resolve()
    import os

    assert os.getcwd() == str(tmp_path)


def test_a_port_writing_into_the_protocol_fails_only_those_cases(lang: str) -> None:
    got = run_port(lang, "writes_garbage", [SOFTMAX, SDPA, SELF, MHA, SDPA_2])
    assert got[SOFTMAX].status == "error"
    assert f"{lang} worker sent a malformed reply in softmax (not a frame" in message(got[SOFTMAX])
    assert got[SELF].status == "error"
    assert "a reply to request 999, expected" in message(got[SELF])
    assert got[MHA].status == "error"
    assert f"a reply of {1 << 62} bytes, over the limit" in message(got[MHA])
    for case in (SDPA, SDPA_2):
        assert got[case].status == "pass", message(got[case])
    assert zombies() == []
