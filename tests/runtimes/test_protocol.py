"""The wire protocol and the supervisor's life cycle, without R or Julia.

The protocol's encoder and decoder are checked on every kind of value and on every way a reply can
be wrong. The supervisor runs a small Python worker (tests/data/workers/protocol_worker.py) that
speaks the protocol and misbehaves on request: deadlines, the compile allowance, the give-up rule,
failed starts and the bounds on output and replies. The R and Julia workers are tested for real
in tests/faults/.
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from attention_ports.runtimes import protocol, supervisor
from attention_ports.runtimes.impl import ImplementationError, OperationMissing
from attention_ports.runtimes.protocol import Arg, ProtocolError, Unsupported
from attention_ports.runtimes.supervisor import Limits, Supervisor

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "tests" / "data" / "workers" / "protocol_worker.py"


def _body(parts) -> bytes:
    return b"".join(bytes(p) for p in parts)


# --- values ---------------------------------------------------------------------------------------
VALUES = [
    None,
    True,
    False,
    -(2**62),
    2.5,
    float("-inf"),
    "héllo",
    np.arange(6.0).reshape(2, 3),  # C order: sent column-major, read back equal
    np.asfortranarray(np.arange(12.0).reshape(3, 4)),
    np.arange(24.0).reshape(2, 3, 4)[:, ::2, 1:],  # not contiguous at all
    np.array(7.0),  # 0-D
    np.zeros((0, 3)),
    np.array([3, -1, 2**40], dtype=np.int64),
    np.array([[True, False], [False, True]]),
    np.array([[1.5, -(2.0**-24)], [65504.0, -np.inf]], dtype=np.float16),  # a float16 port's ('g')
    np.float16(0.1),  # 'h'
    np.array([0.1, -3.0], dtype=np.float32),  # a float32 port's ('a')
    {"w_q": np.eye(2), "b": np.ones(3)},
    ["w_f", "b_f"],
    [],
    Unsupported("Function"),
]


@pytest.mark.parametrize("value", VALUES, ids=[type(v).__name__ + str(i) for i, v in enumerate(VALUES)])
def test_every_value_round_trips(value) -> None:
    body = _body(protocol.encode_request_body("op", [Arg("p", "a", value), Arg("k", "b", 1)]))
    request = protocol.decode_request(np.frombuffer(body, np.uint8))
    assert request.op == "op" and [(a.mode, a.name) for a in request.args] == [("p", "a"), ("k", "b")]
    got = request.args[0].value
    if isinstance(value, np.ndarray):
        assert got.shape == value.shape and got.dtype == (value.dtype if value.dtype == bool else got.dtype)
        np.testing.assert_array_equal(got, value)
    elif isinstance(value, dict):
        assert set(got) == set(value) and all(np.array_equal(got[k], value[k]) for k in value)
    else:
        assert got == value


def test_a_load_request_carries_its_files_and_is_neither_a_call_nor_a_quit() -> None:
    files = ["/tmp/a port/x.R", "héllo.R"]
    frame = b"".join(bytes(p) for p in protocol.encode_load(5, files))
    _, ident, length = protocol.HEADER.unpack(frame[: protocol.HEADER.size])
    request = protocol.decode_request(np.frombuffer(frame[protocol.HEADER.size :], np.uint8))
    assert (ident, length, request.op, request.args, request.load) == (
        5,
        len(frame) - protocol.HEADER.size,
        "",
        [],
        files,
    )


def test_arrays_travel_as_their_own_bytes_without_copies() -> None:
    a = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    parts: list = []
    protocol.encode_value(parts, a)
    assert np.shares_memory(np.frombuffer(parts[1], dtype=np.float64), a)
    decoded = protocol.Reader(_body(parts)).value()
    assert decoded.flags.f_contiguous and np.array_equal(decoded, a)


REPLY_OK = _body(protocol.reply_results("a warning", [("y", np.eye(2)), ("n", np.array([1, 2]))]))


def test_a_reply_decodes_with_its_notes_and_types() -> None:
    reply = protocol.decode_reply(REPLY_OK)
    assert reply.kind == "R" and reply.notes == "a warning"
    assert reply.results["y"].dtype == np.float64 and reply.results["n"].dtype == np.int64


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (REPLY_OK[:-3], r"an array of shape \(2,\) needs 16 bytes; 13 left"),
        (REPLY_OK[:5], "truncated body"),
        (REPLY_OK + b"\0", "1 stray bytes after the message"),
        (b"Zjunk", "unknown reply kind b'Z'"),
        (b"R" + struct.pack("<II", 0, 1) + struct.pack("<I", 1) + b"yS", "result 'y' is not an array"),
        (b"R" + struct.pack("<II", 0, 1) + struct.pack("<I", 1) + b"yA" + bytes([33]), "33 dimensions"),
        (b"R" + struct.pack("<II", 0, 1) + struct.pack("<I", 1) + b"yA\x01" + struct.pack("<q", -2), "negative"),
        (b"R" + struct.pack("<II", 0, 1) + struct.pack("<I", 1) + b"yA\x01" + struct.pack("<q", 2**40), "needs"),
        (b"H" + struct.pack("<II", 0, 0) + b"Q", "unknown value tag b'Q'"),
    ],
)
def test_a_malformed_reply_is_a_protocol_error(body: bytes, expected: str) -> None:
    with pytest.raises(ProtocolError, match=expected):
        protocol.decode_reply(body)


def test_a_timed_reply_carries_the_ports_own_seconds() -> None:
    reply = protocol.decode_reply(_body(protocol.reply_results("w", [("y", np.eye(2))], seconds=0.25)))
    assert (reply.kind, reply.notes, reply.seconds) == ("R", "w", 0.25)
    assert np.array_equal(reply.results["y"], np.eye(2))
    assert protocol.decode_reply(REPLY_OK).seconds is None
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ProtocolError, match="a call that took"):
            protocol.decode_reply(_body(protocol.reply_results("", [], seconds=bad)))


def test_a_duplicate_result_is_a_protocol_error() -> None:
    body = _body(protocol.reply_results("", [("y", np.eye(2)), ("y", np.eye(2))]))
    with pytest.raises(ProtocolError, match="result 'y' sent twice"):
        protocol.decode_reply(body)


def test_headers_are_checked_before_anything_is_read() -> None:
    good = protocol.HEADER.pack(protocol.REPLY_MAGIC, 7, 100)
    assert protocol.check_header(good, protocol.REPLY_MAGIC, 7, 1000) == 100
    with pytest.raises(ProtocolError, match="not a frame"):
        protocol.check_header(b"hello, world! (garbage)"[:20], protocol.REPLY_MAGIC, 7, 1000)
    with pytest.raises(ProtocolError, match="a reply to request 8, expected 7"):
        protocol.check_header(protocol.HEADER.pack(protocol.REPLY_MAGIC, 8, 100), protocol.REPLY_MAGIC, 7, 1000)
    with pytest.raises(ProtocolError, match="a reply of 100 bytes, over the limit of 99"):
        protocol.check_header(good, protocol.REPLY_MAGIC, 7, 99)


def test_the_reply_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert protocol.max_reply_bytes() == protocol.MAX_REPLY_BYTES == 1 << 32
    monkeypatch.setenv(protocol.MAX_REPLY_ENV, "1000")
    assert protocol.max_reply_bytes() == 1000
    monkeypatch.setenv(protocol.MAX_REPLY_ENV, "lots")
    with pytest.raises(ValueError, match="ATTENTION_PORTS_MAX_REPLY_BYTES='lots' is not a whole number"):
        protocol.max_reply_bytes()


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_TIMEOUT", "2.5")
    monkeypatch.setenv("X_COMPILE_ALLOWANCE", "0")
    monkeypatch.setenv("X_GIVE_UP_AFTER", "3")
    limits = Limits.from_env("X", timeout=30, compile_allowance=60, startup_timeout=60)
    assert limits == Limits(2.5, 0.0, 60, 3)
    assert limits.but(timeout=1, startup_timeout=None) == Limits(1, 0.0, 60, 3)
    monkeypatch.setenv("X_TIMEOUT", "-1")
    with pytest.raises(ValueError, match="X_TIMEOUT='-1' must be positive"):
        Limits.from_env("X", timeout=30, compile_allowance=60, startup_timeout=60)


# --- the supervisor, with a worker written in Python ----------------------------------------------
def worker(*flags: str, timeout: float = 5, allowance: float = 0, startup: float = 30, give_up: int = 2):
    env = dict(__import__("os").environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, str(WORKER), *flags]
    return Supervisor("test", argv, "protocol_worker.py", Limits(timeout, allowance, startup, give_up), env=env)


def test_calls_round_trip_and_missing_is_missing() -> None:
    sup = worker()
    try:
        a, n = np.arange(12.0).reshape(3, 4), np.array([1, 2, 3])
        got = sup.call("echo", [Arg("p", "a", a), Arg("k", "n", n), Arg("k", "s", "text")]).arrays
        np.testing.assert_array_equal(got["a"], a)
        np.testing.assert_array_equal(got["n"], n)
        assert set(got) == {"a", "n"}
        with pytest.raises(OperationMissing, match="nope is not defined here"):
            sup.call("nope", [])
        assert sup.starts == 1
    finally:
        sup.close()


def test_the_compile_allowance_is_granted_once_per_operation() -> None:
    sup = worker(timeout=0.5, allowance=1.5)
    try:
        nap = [Arg("k", "seconds", 0.8)]
        sup.call("sleep", nap)  # its first call: 0.5 + 1.5 s
        with pytest.raises(ImplementationError, match=r"test worker timed out after 0\.5s in sleep;"):
            sup.call("sleep", nap)  # compiled on this process: 0.5 s
        sup.call("sleep", nap)  # a new process compiles again, and sleep has finished before: 2 s
        assert sup.starts == 2
        # an operation that never finished gets it once: 2 s, then 0.5 s even on a new process
        forever = [Arg("k", "seconds", 60.0)]
        with pytest.raises(ImplementationError, match=r"timed out after 2s in sleep_forever;"):
            sup.call("sleep_forever", forever)
        with pytest.raises(ImplementationError, match=r"timed out after 0\.5s in sleep_forever;"):
            sup.call("sleep_forever", forever)
    finally:
        sup.close()


def test_two_consecutive_timeouts_give_up_and_a_success_resets_the_count() -> None:
    sup = worker(timeout=0.5)
    try:
        slow = [Arg("k", "seconds", 30.0)]
        with pytest.raises(ImplementationError, match=r"timed out after 0\.5s in sleep"):
            sup.call("sleep", slow)
        sup.call("echo", [])  # a completed call: the count starts again
        with pytest.raises(ImplementationError, match="timed out") as first:
            sup.call("sleep", slow)
        assert "giving up" not in str(first.value)
        with pytest.raises(ImplementationError, match="2 in a row: giving up on this port"):
            sup.call("sleep", slow)
        with pytest.raises(ImplementationError, match=r"gave up on protocol_worker\.py after 2 consecutive timeouts"):
            sup.call("echo", [])
        assert sup.starts == 3
    finally:
        sup.close()


def test_failed_starts_count_and_give_up() -> None:
    sup = Supervisor("test", ["/nonexistent/julia"], "p.jl", Limits(1, 0, 1, 2))
    with pytest.raises(ImplementationError, match="test: cannot start the worker"):
        sup.call("echo", [])
    with pytest.raises(ImplementationError, match="2 in a row: giving up"):
        sup.call("echo", [])
    with pytest.raises(ImplementationError, match=r"gave up on p.jl .*the last: cannot start /nonexistent/julia"):
        sup.call("echo", [])
    late = worker("--greet-late", "10", startup=0.5)
    with pytest.raises(ImplementationError, match=r"test worker did not start within 0.5s \(loading"):
        late.start()
    late.close()
    early = worker("--no-greet")
    with pytest.raises(ImplementationError, match=r"test worker failed to start \(exit code 5\)"):
        early.start()
    early.close()


def test_a_death_in_a_call_fails_that_call_only() -> None:
    sup = worker()
    try:
        with pytest.raises(ImplementationError, match=r"test worker died \(exit code 9\) in exit"):
            sup.call("exit", [Arg("k", "code", 9)])
        sup.call("echo", [])
        assert sup.starts == 2
    finally:
        sup.close()


def test_output_is_bounded_and_shown_by_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    sup = worker()
    try:
        sup.call("print", [Arg("k", "bytes", 3 * supervisor.OUTPUT_KEEP)])  # 768 KiB, drained while waiting
        out = sup.last_output
        assert out.startswith("[... ") and " earlier bytes not kept ...]" in out.splitlines()[0]
        assert out.endswith("the end") and len(out) < supervisor.OUTPUT_KEEP + 100
        section = supervisor.output_section(out)
        assert "earlier characters not shown" in section and section.endswith("the end")
        assert len(section) < supervisor.OUTPUT_SHOWN + 200
    finally:
        sup.close()


def test_a_reply_over_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(protocol.MAX_REPLY_ENV, "1000")
    sup = worker()
    try:
        with pytest.raises(ImplementationError, match=r"malformed reply in echo .*over the limit of 1000"):
            sup.call("echo", [Arg("p", "a", np.zeros(200))])
        sup.call("echo", [Arg("p", "a", np.zeros(10))])  # a new worker, within the limit
    finally:
        sup.close()


def _slow(body: bytes) -> protocol.Reply:
    """What the Reader decodes, with every check (decode_reply's path for all but the common reply)."""
    saved = protocol._decode_results
    protocol._decode_results = lambda _body: None
    try:
        return protocol.decode_reply(body)
    finally:
        protocol._decode_results = saved


@pytest.mark.parametrize("seconds", [None, 0.0, 1.5e-6])
def test_the_common_reply_decodes_inline_exactly_as_the_reader_does(seconds: float | None) -> None:
    rng = np.random.default_rng(0)
    results = [
        ("y", rng.standard_normal((3, 5))),
        ("w.0", np.asfortranarray(rng.standard_normal((2, 3, 4)).astype(np.float32))),
        ("scalar", np.array(2.5)),
        ("empty", np.zeros((0, 4))),
        ("index", np.arange(6, dtype=np.int64).reshape(2, 3)),
        ("half", np.array([1.0, -2.0], dtype=np.float16)),
        ("π", np.ones(1)),
    ]
    body = b"".join(bytes(p) for p in protocol.reply_results("", results, seconds))
    for data in (body, np.frombuffer(body, dtype=np.uint8).copy()):
        fast = protocol._decode_results(data)
        assert fast is not None
        slow = _slow(data)
        assert (fast.kind, fast.notes, fast.seconds, list(fast.results)) == (
            slow.kind,
            slow.notes,
            slow.seconds,
            list(slow.results),
        )
        for name, want in results:
            got = fast.results[name]
            assert got.dtype == slow.results[name].dtype and got.shape == want.shape
            assert got.flags.f_contiguous and np.array_equal(got, want)


@pytest.mark.parametrize(
    "results",
    [[("k", np.array([True, False]))], [("b", protocol.BFloat16(np.ones(2)))]],
    ids=["logical", "bfloat16"],
)
def test_a_reply_the_inline_decoder_does_not_take_is_read_by_the_reader(results) -> None:
    for notes, res in (("a warning", [("y", np.ones(2))]), ("", results)):
        body = b"".join(bytes(p) for p in protocol.reply_results(notes, res, 0.5))
        assert protocol._decode_results(body) is None
        assert protocol.decode_reply(body).notes == notes
    body = b"".join(bytes(p) for p in protocol.reply_results("", [("y", np.ones(3))], 0.5))
    for bad in (body[:-1], body + b"\0", body[:9] + b"\xff" + body[10:]):  # cut short, a stray byte, notes past the end
        assert protocol._decode_results(bad) is None
        with pytest.raises(ProtocolError):
            protocol.decode_reply(bad)
