"""The fault suite on the command route, on two kits (C and Python): a port that hangs, crashes,
aborts, writes garbage, a truncated frame, a frame with a wrong id or an absurd length where its
reply belongs, floods its stdout (16 MiB, or four children writing without end), leaves processes
in sessions of their own (setsid, a double fork), or exits in the middle of its reply loses at
most its own case: every case asked for comes back, the next ones pass on a new worker, and no
process of it is left, not even a zombie.

One test body for every (kit, fault): the port (faults.c, faults.py: the same port with each kit)
misbehaves in the first call only, as ``$AP_FAULT`` says; the run is ``verify``'s (``run_suite``).
A hang costs the 1 s timeout set here; every other fault well under a second.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.runner import run_suite, select_entries
from tests.faults.conftest import processes_with, sleepers, zombies
from tests.runtimes.command.test_command import compile_c

HERE = Path(__file__).parent
CASES = ["softmax_random_3x5", "softmax_ties", "softmax_wide_row"]
# fault -> what the first case's error says (None: the case passes: the fault harms nothing)
FAULTS: dict[str, str | None] = {
    "hang": "timed out after 1s in softmax",
    "crash": "died (killed by SIGSEGV) in softmax",
    "abort": "died (killed by SIGABRT) in softmax",
    "garbage": "sent a malformed reply in softmax (not a frame (it starts b'this is not ",
    "truncated": "sent a malformed reply in softmax (unknown reply kind b'x')",
    "wrong_id": "sent a malformed reply in softmax (a reply to request 999, expected 1)",
    "absurd_length": f"sent a malformed reply in softmax (a reply of {1 << 62} bytes, over the limit",
    "flood": None,
    "endless_flood": None,
    "escapes": None,
    "exit_mid_reply": "died (exit code 0) in softmax",
}


@pytest.fixture(scope="module")
def entries() -> list[dict[str, Any]]:
    """The cases' manifest entries, read and validated once (0.3 s each time)."""
    return select_entries(REPO_FIXTURES, CASES)


@pytest.fixture(scope="session")
def c_faults(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_c(HERE / "faults.c", tmp_path_factory.mktemp("c-faults") / "faults")


@pytest.fixture(params=["c", "python"])
def faulty_port(request: pytest.FixtureRequest) -> Path:
    return request.getfixturevalue("c_faults") if request.param == "c" else HERE / "faults.py"


@pytest.mark.parametrize("fault", FAULTS)
def test_a_command_port_that_fails_a_call_loses_only_that_case_and_leaves_no_process(
    fault: str, faulty_port: Path, entries: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"987.{random.randrange(10**6, 10**7)}"  # the escaped sleeps' argument: unique to this test
    monkeypatch.setenv("AP_FAULT", fault)
    monkeypatch.setenv("AP_FAULT_FLAG", str(tmp_path / "done"))
    monkeypatch.setenv("AP_FAULT_MARKER", marker)
    monkeypatch.setenv("ATTENTION_PORTS_COMMAND_TIMEOUT", "1")
    start = time.monotonic()
    results = run_suite(REPO_FIXTURES, ["p"], {"p": faulty_port}, required={"p"}, progress=None, entries=entries)
    seconds = time.monotonic() - start
    by_case = {r.case: r for r in results}
    assert sorted(by_case) == sorted(CASES) and len(results) == len(CASES)  # nothing lost
    assert (tmp_path / "done").exists()  # it did misbehave
    first, said = by_case[CASES[0]], FAULTS[fault]
    text = "\n".join(o.message for o in first.outputs)
    if said is None:
        assert first.status == "pass", text
    else:
        assert first.status == "error"
        assert said in text and f"misbehaving: {fault}" in text, text  # the port's own output comes with it
    assert [by_case[c].status for c in CASES[1:]] == ["pass", "pass"], [by_case[c].outputs for c in CASES[1:]]
    assert processes_with(str(faulty_port)) == []
    assert sleepers(marker) == []
    assert zombies() == []
    # nothing waits on the port beyond its 1 s timeout (the default timeout is 30 s; 20 leaves room for a
    # loaded machine)
    assert seconds < 20, seconds
