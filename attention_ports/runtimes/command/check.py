"""``attention-ports check-port COMMAND``: probe a port's handling of the protocol, say what is wrong.

For a kit writer (docs/protocol.md, "Writing a kit"): the port runs under the same supervisor as in
``verify``, and each probe is one line, ``ok``, ``FAIL`` (the port breaks the protocol: verify
would lose cases or misread them) or ``note`` (optional behaviour it does not offer):

1. the greeting: a frame with id 0 and the reply magic, within the start-up timeout, its
   declaration valid (protocol version, layout, index base, operations, precision...);
2. every value type round-tripped through the optional ``ap.echo`` operation (float64, float32,
   float16 and bfloat16 arrays and scalars, integers, logicals, strings, a named group, a list,
   0-D, empty and non-square arrays, one array of 8 MB that crosses the pipe in many pieces);
3. an operation the port lacks: 'M'; a declared operation called without its arguments: 'E', not
   a crash; a request body that does not decode: 'E' and the port still answers;
4. a frame that is not one (a wrong magic): the port exits (it cannot find the next frame);
5. quitting: 'Q' ends the port with exit status 0.

What the port printed is shown under each probe that failed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attention_ports.runtimes import protocol
from attention_ports.runtimes.command import manifest as manifests
from attention_ports.runtimes.command.adapter import CommandDeclaration, build
from attention_ports.runtimes.declaration import DeclarationError
from attention_ports.runtimes.impl import ImplementationError, ImplementationUnavailable, OperationMissing
from attention_ports.runtimes.protocol import Arg, BFloat16, ProtocolError
from attention_ports.runtimes.supervisor import Limits, Supervisor, _Died, _Timeout, output_section

NAME = "port"


@dataclass
class Finding:
    level: str  # ok, FAIL, note
    probe: str
    text: str

    def line(self) -> str:
        return f"{self.level:<4}  {self.probe}: {self.text}"


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)

    def add(self, level: str, probe: str, text: str) -> None:
        self.findings.append(Finding(level, probe, text))

    @property
    def failed(self) -> bool:
        return any(f.level == "FAIL" for f in self.findings)


Echo = list[tuple[str, Any, dict[str, np.ndarray]]]  # (argument, value sent, the results owed for it)


def echo_groups() -> dict[str, Echo]:
    """The values ``ap.echo`` round-trips, by the group a port must decode them in: ``core`` (every
    port), then the precision-dependent ones (docs/protocol.md, "Values": a port decodes those its
    declared precision brings; bfloat16 is sent in no call of version 1)."""
    rng = np.random.default_rng(27)
    m = rng.standard_normal((3, 5))
    cube = rng.standard_normal((2, 3, 4))
    big = rng.standard_normal((1024, 1024))  # 8 MB: many pipe reads and writes
    bf = np.array([[1.0, -2.5, 3.140625], [0.0, 65280.0, -0.0078125]], dtype=np.float32)
    f16 = np.array([[0.5, -1.0], [65504.0, 6.1e-05]], dtype=np.float16)
    text = "héllo"
    group = {"w": np.eye(2), "b": np.array([1.0, 2.0])}
    return {
        "core": [
            ("f64_matrix", m.T, {"f64_matrix": m.T}),  # wire dims (5, 3): checks the order of dims
            ("f64_3d", cube, {"f64_3d": cube}),
            ("f64_0d", np.array(2.5), {"f64_0d": np.array(2.5)}),
            ("f64_empty", np.zeros((0, 3)), {"f64_empty": np.zeros((0, 3))}),
            ("i64_array", np.array([[-(2**40), 0, 7]]), {"i64_array": np.array([[-(2**40), 0, 7]])}),
            ("bool_array", np.array([True, False, True]), {"bool_array": np.array([True, False, True])}),
            ("f64_scalar", 0.1, {"f64_scalar": np.array(0.1)}),
            ("integer", -3, {"integer": np.array(-3)}),
            ("logical", True, {"logical": np.array(True)}),
            ("string", text, {"string": np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64)}),
            ("nothing", None, {}),
            ("group", group, {"group.w": group["w"], "group.b": group["b"]}),
            ("list", ["a", 2], {"list.0": np.array([97]), "list.1": np.array(2)}),
            ("big", big, {"big": big}),
        ],
        "float32": [
            ("f32_array", m.astype(np.float32), {"f32_array": m.astype(np.float32)}),
            ("f32_scalar", np.float32(0.1), {"f32_scalar": np.array(0.1, dtype=np.float32)}),
        ],
        "float16": [
            ("f16_array", f16, {"f16_array": f16}),
            ("f16_scalar", np.float16(0.1), {"f16_scalar": np.array(0.1, dtype=np.float16)}),
        ],
        "bfloat16": [
            ("bf16_array", BFloat16(bf), {"bf16_array": bf}),
            ("bf16_scalar", BFloat16(np.array(1.5, np.float32)), {"bf16_scalar": np.array(1.5, dtype=np.float32)}),
        ],
    }


def _same(got: np.ndarray, want: np.ndarray) -> str:
    """ "" when ``got`` is ``want`` bit for bit (dtype, shape, values); else what differs."""
    want = np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape} (wire dims {got.shape}), sent {want.shape}"
    if got.dtype != want.dtype and not (got.dtype.kind == want.dtype.kind == "i"):
        return f"came back as {got.dtype}, sent {want.dtype}"
    if got.dtype.kind == "f":
        same = np.array_equal(got.view(f"u{got.itemsize}"), want.astype(got.dtype).view(f"u{got.itemsize}"))
    else:
        same = np.array_equal(got, want)
    if not same:
        bad = np.argwhere(np.atleast_1d(got != want))
        at = tuple(int(i) for i in bad[0]) if len(bad) else "?"
        return f"values differ (first at wire index {at})"
    return ""


def check(argv: Sequence[str], *, folder: str | None = None, timeout: float = 10.0) -> Report:
    """Probe the port that ``argv`` starts (in ``folder``)."""
    report = Report()
    lim = Limits(timeout=timeout, compile_allowance=0.0, startup_timeout=timeout, give_up_after=1000)
    sup = Supervisor(NAME, argv, " ".join(argv), lim, cwd=folder)
    try:
        _probe(sup, report, timeout)
    finally:
        sup.close()
    return report


def _probe(sup: Supervisor, report: Report, timeout: float) -> None:
    try:
        hello = sup.start()
    except ImplementationError as exc:
        report.add("FAIL", "greeting", f"no valid greeting: {exc}")
        return
    report.add("ok", "greeting", f"{hello.message!r}, protocol version {protocol.VERSION}")
    declared: CommandDeclaration | None = None
    try:
        declared = CommandDeclaration(hello.declaration, "the greeting", "unknown")
        if hello.declaration is None:
            report.add(
                "note",
                "declaration",
                "none (run as a command: row-major, 0-based, float64, every operation it answers)",
            )
        else:
            text = declared.describe()
            if "layout" not in hello.declaration:  # R's and Julia's: their adapters own their layouts
                text += " (no layout declared: as a command, row-major and 0-based)"
            report.add("ok", "declaration", text)
    except DeclarationError as exc:
        report.add("FAIL", "declaration", str(exc))

    def call(op: str, args: list[Arg]) -> tuple[str, Any]:
        """('R', results) | ('M', msg) | ('E', msg) | ('lost', why): the last a crash, hang or garbage."""
        try:
            return "R", sup.call(op, args).arrays
        except OperationMissing as exc:
            return "M", str(exc)
        except ImplementationError as exc:
            text = str(exc)
            lost = any(f"{NAME} worker {w}" in text for w in ("died", "timed out", "sent a malformed", "answered"))
            return ("lost" if lost else "E"), text

    for group, values in echo_groups().items():
        kind, got = call(protocol.ECHO_OP, [Arg("k", n, v) for n, v, _ in values])
        if kind == "M" and group == "core":
            report.add("note", "echo", f"the port does not offer {protocol.ECHO_OP}: value types not round-tripped")
            break
        if kind != "R":  # the core values every port decodes; the others, those its precision brings
            level = "FAIL" if group == "core" else "note"
            report.add(level, f"echo {group}", f"{protocol.ECHO_OP} answered {kind}: {str(got)[:300]}")
            continue
        want: dict[str, np.ndarray] = {}
        for _, _, owed in values:
            want.update(owed)
        for name, value in want.items():
            problem = _same(got[name], value) if name in got else "absent from the reply"
            report.add("FAIL" if problem else "ok", f"echo {name}", problem or "round-tripped bit for bit")
        extra = sorted(set(got) - set(want))
        if extra:
            report.add("FAIL", f"echo {group}", f"results nobody sent: {', '.join(extra)}")

    kind, got = call("ap.no_such_operation", [])
    report.add("ok" if kind == "M" else "FAIL", "missing operation", f"answered {kind}: {str(got)[:200]}")

    ops = sorted(declared.common.operations or ["softmax"]) if declared is not None else ["softmax"]
    if ops:
        kind, got = call(ops[0], [])
        level = "ok" if kind == "E" else "note" if kind == "M" else "FAIL"
        last = (str(got).strip().splitlines() or [""])[-1][:300]  # a traceback's last line says it
        report.add(level, "error", f"{ops[0]} without arguments answered {kind}: {last}")

    _malformed_body(sup, report, timeout)
    kind, got = call("ap.no_such_operation", [])
    report.add("ok" if kind == "M" else "FAIL", "after a malformed body", f"the port answers ({kind})")
    _bad_magic(sup, report, timeout)
    _quit(sup, report, timeout)


def _raw(sup: Supervisor, body: bytes, timeout: float) -> tuple[str, Any]:
    """Send one request frame with ``body`` as it is; ('reply', Reply) | ('died', exit code) |
    ('timeout', None) | ('garbage', why)."""
    proc = sup._ensure_started()
    ident = sup._next_id
    sup._next_id += 1
    deadline = time.monotonic() + timeout
    try:
        sup._send(proc, protocol.frame(protocol.REQUEST_MAGIC, ident, [body]), deadline)
        return "reply", sup._receive(proc, ident, deadline)
    except _Died:
        return "died", sup._died(proc)
    except _Timeout:
        sup._discard()
        return "timeout", None
    except ProtocolError as exc:
        sup._discard()
        return "garbage", str(exc)


def _malformed_body(sup: Supervisor, report: Report, timeout: float) -> None:
    body = b"C" + (1 << 30).to_bytes(4, "little") + b"softmax"  # a name longer than the body
    kind, got = _raw(sup, body, timeout)
    probe = "malformed body"
    if kind == "reply" and got.kind == "E":
        report.add("ok", probe, f"answered E: {got.message[:200]}")
    elif kind == "died":
        report.add("note", probe, f"the port exited ({got}): allowed; answering E and reading on is better")
    elif kind == "timeout":
        report.add(
            "note",
            probe,
            f"no answer within {timeout:g}s (the suite kills it then: allowed, as the suite sends no such body); "
            "reading the whole body first, then answering E, is better",
        )
    else:
        report.add("FAIL", probe, f"answered {getattr(got, 'kind', got)!r}: only E (or an exit) may follow")


def _bad_magic(sup: Supervisor, report: Report, timeout: float) -> None:
    proc = sup._ensure_started()
    out_mark = proc.output.total
    try:
        sup._send(proc, [b"JUNK" + bytes(16)], time.monotonic() + 2.0)
    except (_Died, _Timeout):
        pass
    exited = proc.wait_exit(timeout)
    proc.output.drain()
    printed = output_section(proc.output.since(out_mark))
    code = sup._discard()
    if exited:
        report.add("ok", "not a frame", f"the port stopped (exit {code}), as it must: no next frame to find")
    else:
        report.add("FAIL", "not a frame", f"the port still ran {timeout:g}s after a frame with a wrong magic{printed}")


def _quit(sup: Supervisor, report: Report, timeout: float) -> None:
    proc = sup._ensure_started()
    try:
        sup._send(proc, protocol.encode_quit(sup._next_id), time.monotonic() + timeout)
    except (_Died, _Timeout):
        pass
    exited = proc.wait_exit(3.0)
    code = sup._discard()
    if exited and code == 0:
        report.add("ok", "quit", "Q ended the port with exit status 0")
    else:
        report.add("FAIL", "quit", "still running 3 s after Q" if not exited else f"Q ended the port with exit {code}")


def resolve(command: Sequence[str], name: str = NAME) -> tuple[list[str], str | None]:
    """``check-port``'s argument: one manifest or program file (built as verify would), or an argv."""
    if len(command) == 1:
        try:
            m = manifests.load(command[0])  # type: ignore[arg-type]
        except manifests.ManifestError:
            return list(command), None
        build(m, name)
        return list(m.command), str(m.folder)
    return list(command), None


def main(command: Sequence[str], timeout: float, say: Callable[[str], None] = print) -> int:
    """Run the probes and print them: 0 when nothing failed, 1 otherwise, 2 when nothing could run."""
    try:
        argv, folder = resolve(command)
    except ImplementationUnavailable as exc:
        say(str(exc))
        return 2
    report = check(argv, folder=folder, timeout=timeout)
    for f in report.findings:
        say(f.line())
    bad = sum(f.level == "FAIL" for f in report.findings)
    say(f"{bad} problem(s) found" if bad else "the port speaks the protocol (docs/protocol.md)")
    return 1 if report.failed else 0
