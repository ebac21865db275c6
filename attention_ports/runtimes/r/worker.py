"""The R worker: one process per R port, R embedded through rpy2, serving attention_ports.protocol.

    python -m attention_ports.runtimes.r.worker FILE...     (started by runtimes/r/adapter.py via the supervisor)

It loads the port files once into an environment whose parents are the exports of utils and
stats, then base (ports/r/worker.R, ``.ap_port_env``: never the global environment), greets
with R's version, the load-time warnings and the port's ``attention_ports`` declaration, and
answers calls until its request pipe closes. What the port prints (``print``, ``cat``,
``message``, ``system("echo")``, a C ``write(1, ...)``) goes to this process's stdout and stderr,
which the supervisor captures; replies go only to the private reply pipe. The supervisor kills
this process when a call times out, and starts another when it dies (a port's ``base::quit()``,
a segfault, a signal): nothing here needs to survive the port.

Calls (values from the request, attention_ports/runtimes/protocol.py): arrays -> R vectors, ``dim`` = the
array's shape (1-D -> a plain vector, 0-D -> length 1); float64 -> double, int64 -> integer (when
it fits; double otherwise), bool -> logical; a group (dict) -> a named list of its members;
strings and lists of strings -> character (an empty list: ``character(0)``), bool -> logical,
int -> integer, float -> double. Positional arguments keep their order, the others are passed by
name: ``classifier_step(x_emb, label, params = params, lr, frozen = frozen)``.

Conversion (no ``memoryview()``, no rpy2 conversion layer): each array becomes one freshly
allocated R double vector whose memory numpy writes directly (``np.frombuffer`` over ``REAL()``;
the request already holds column-major bytes, so it is a plain copy), with ``dim`` set from
Python. Results are read straight from R's memory (``REAL()``/``INTEGER()``/``LOGICAL()``) into
the reply. Argument kinds/names travel as one cached character vector per call signature, scalars
in one small double vector. The R side (ports/r/worker.R, ``.ap_call``) binds the arguments in a
frame, evaluates the cached call inside ``tryCatch``/``withCallingHandlers``, flattens and checks
the result (names once each, no NA) and returns it with the R type of each output.

Errors: an R error is an 'E' reply with R's own text, ``Error in <deparsed conditionCall> :
<conditionMessage>``, the R call stack from the port's entry point down and any R warnings raised
before it. Warnings of a successful call travel as the reply's notes, one per line.
"""

from __future__ import annotations

import collections
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.core import paths
from attention_ports.runtimes import protocol
from attention_ports.runtimes.protocol import Part, ProtocolError, Request, Unsupported
from attention_ports.runtimes.supervisor import die_with_parent, worker_fds

BRIDGE = paths.PORTS / "r" / "worker.R"
# The LD_LIBRARY_PATH that R's start-up script sets, as the parent found it (adapter._r_session_env):
# importing rpy2 asks an Rscript for it (and `R RHOME` for R_HOME) in every worker, ~0.15 s of CPU
# a start, where the parent's one answer serves every worker it starts.
LD_LIBRARY_PATH_ENV = "ATTENTION_PORTS_R_LD_LIBRARY_PATH"
_INT32_MAX = 2**31 - 1
_TYPES = {0: ("REAL", np.float64), 1: ("INTEGER", np.int32), 2: ("LOGICAL", np.int32)}


class Unavailable(Exception):
    """R or rpy2 cannot be used here; the message says what to install."""


class EmbeddedR:
    """This process's embedded R, the bridge functions, and the raw-memory copy helpers."""

    def __init__(self) -> None:
        try:
            import rpy2.situation
        except Exception as exc:
            raise Unavailable(
                f"r: cannot import rpy2 ({type(exc).__name__}: {exc}); run `attention-ports setup r`"
            ) from exc
        # A wrong R_HOME makes R's initialisation exit() the whole process ("unable to open the base
        # package"): check it first, while it can still be reported.
        r_home = rpy2.situation.get_r_home()
        known_path = os.environ.get(LD_LIBRARY_PATH_ENV)
        if known_path is not None and os.environ.get("R_HOME") == r_home:
            # rpy2 (3.5) runs this at import, for the R_HOME the parent asked it about already
            rpy2.situation.r_ld_library_path_from_subprocess = lambda _home: known_path
        if not r_home or not os.path.isdir(os.path.join(r_home, "library", "base")):
            raise Unavailable(
                f"r: no usable R installation (R_HOME={r_home!r} has no library/base); "
                "install R and rpy2 (`attention-ports setup r`) or fix R_HOME"
            )
        try:
            import rpy2.rinterface as ri
            from rpy2.rinterface_lib import callbacks, embedded, openrlib
        except Exception as exc:  # ImportError, or OSError / undefined symbol from a mismatched libR
            raise Unavailable(
                f"r: cannot import rpy2 ({type(exc).__name__}: {exc}); run `attention-ports setup r`"
            ) from exc
        # R starts with the contract's packages, utils and stats, attached, not all of R's default
        # ones (methods, datasets, grDevices and graphics as well: ~45 ms of a worker's ~0.33 s
        # start): a port sees base, stats and utils through its own environment (ports/r/worker.R,
        # .ap_port_env), never the rest of the search path. The variable is R's to read at start
        # only; the port's session keeps the environment it was given.
        given = os.environ.get("R_DEFAULT_PACKAGES")
        os.environ["R_DEFAULT_PACKAGES"] = "utils,stats"
        try:
            if not embedded.isready():
                ri.initr_simple()  # rpy2 sets R_SignalHandlers = 0: a segfault ends this process
        except Exception as exc:
            raise Unavailable(f"r: cannot start the embedded R: {exc}") from exc
        finally:
            if given is None:
                os.environ.pop("R_DEFAULT_PACKAGES", None)
            else:
                os.environ["R_DEFAULT_PACKAGES"] = given
        # R's console (print, cat) is the port's stdout, its warnings and messages its stderr:
        # both captured by the supervisor, unbuffered so that they come before the reply.
        callbacks.consolewrite_print = _writer(1)
        callbacks.consolewrite_warnerror = _writer(2)
        self.ri = ri
        self.ffi = openrlib.ffi
        self.rlib = openrlib.rlib
        bridge = ri.baseenv.find("new.env")(parent=ri.baseenv)
        ri.baseenv.find("sys.source")(ri.StrSexpVector([str(BRIDGE)]), envir=bridge)
        self.call_fn = bridge.find(".ap_call")
        self.load_fn = bridge.find(".ap_load")
        self.port_env_fn = bridge.find(".ap_port_env")
        self.declaration_fn = bridge.find(".ap_declaration")
        self.session_state_fn = bridge.find(".ap_session_state")
        self.session_changes_fn = bridge.find(".ap_session_changes")
        self.version = str(ri.evalr("R.version.string")[0])
        self._strs: dict[tuple[str, ...], Any] = {}
        self._dims: dict[tuple[int, ...], Any] = {}

    def strs(self, values: tuple[str, ...]) -> Any:
        """An R character vector, cached: call signatures repeat, their names need building once."""
        vec = self._strs.get(values)
        if vec is None:
            vec = self.ri.StrSexpVector.from_iterable(values)
            if len(self._strs) < 4096:
                self._strs[values] = vec
        return vec

    def to_r(self, arr: np.ndarray) -> Any:
        """A new R double vector with ``arr``'s logical shape: its data written column-major straight
        into R's memory (one copy, strided if ``arr`` is not column-major), ``dim`` set when 2-D+."""
        ffi, real, n = self.ffi, self.rlib.REAL, arr.size

        def populate(_iterable: Any, r_vector: Any, _set_elt: Any, _cast: Any) -> None:
            if n:
                dest = np.frombuffer(ffi.buffer(real(r_vector), n * 8), dtype=np.float64)
                np.copyto(dest.reshape(arr.shape, order="F"), arr, casting="unsafe")

        vec = self.ri.FloatSexpVector.from_iterable(range(n), populate_func=populate)
        if arr.ndim >= 2:
            dim = self._dims.get(arr.shape)
            if dim is None:
                dim = self.ri.IntSexpVector.from_iterable(arr.shape)
                if len(self._dims) < 4096:
                    self._dims[arr.shape] = dim
            vec.do_slot_assign("dim", dim)
        return vec

    def view(self, vec: Any, type_code: int) -> np.ndarray:
        """A NumPy view of an R vector's memory (double, integer or logical); ``vec`` must outlive it."""
        accessor, dtype = _TYPES[type_code]
        n = len(vec)
        if not n:
            return np.empty(0, dtype)
        ptr = getattr(self.rlib, accessor)(vec.__sexp__._cdata)
        return np.frombuffer(self.ffi.buffer(ptr, n * np.dtype(dtype).itemsize), dtype=dtype)

    def plain(self, obj: Any, depth: int = 0) -> Any:
        """An R object as protocol values (for the declaration): vectors -> lists, lists -> dicts."""
        ri = self.ri
        if obj is ri.NULL:
            return None
        if depth < 8 and isinstance(obj, ri.ListSexpVector):
            names = obj.names
            items = [self.plain(v, depth + 1) for v in obj]
            if names is ri.NULL or any(not n for n in names):
                return items
            return dict(zip([str(n) for n in names], items, strict=True))
        for kind, convert in (
            (ri.StrSexpVector, str),
            (ri.BoolSexpVector, bool),
            (ri.IntSexpVector, int),
            (ri.FloatSexpVector, float),
        ):
            if isinstance(obj, kind):
                return [convert(v) for v in obj]
        return Unsupported(f"R {obj.typeof.name} ({type(obj).__name__})")


def _writer(fd: int) -> Any:
    def write(s: str) -> None:
        data = s.encode(errors="replace")
        while data:
            data = data[os.write(fd, data) :]

    return write


class _Call:
    """One call's arguments: entry strings (what each argument is), arrays, scalar values."""

    def __init__(self, op: str) -> None:
        self.entries: list[str] = [op]
        self.header: list[float] = []  # per scalar entry: count, then the numbers
        self.arrays: list[np.ndarray] = []
        self.strs: list[str] = []

    def array(self, mode: str, name: str, arr: np.ndarray, member: str = "") -> None:
        arr = np.asarray(arr)
        if arr.dtype == np.bool_:
            kind = "L"
        elif arr.dtype.kind in "iu":
            kind = "I" if arr.size == 0 or np.abs(arr).max() <= _INT32_MAX else "A"
        elif arr.dtype.kind == "f":
            kind = "A"
        else:
            raise TypeError(f"input {member or name!r} has dtype {arr.dtype}; expected numbers or booleans")
        self.entries.append(f"{kind}\t{mode}\t{name}\t{member}")
        self.arrays.append(arr)

    def option(self, mode: str, name: str, value: Any) -> None:
        values = list(value) if isinstance(value, list | tuple | np.ndarray) else [value]
        if all(isinstance(v, str) for v in values):  # includes the empty list: character(0)
            kind = "c"
        elif all(isinstance(v, bool) for v in values):
            kind = "l"
        elif all(isinstance(v, int) and not isinstance(v, bool) and abs(v) <= _INT32_MAX for v in values):
            kind = "i"
        elif all(isinstance(v, int | float) for v in values):
            kind = "n"
        else:
            raise TypeError(f"option {name}={value!r} is neither numbers nor strings")
        self.entries.append(f"{kind}\t{mode}\t{name}\t")
        self.header.append(len(values))
        if kind == "c":
            self.strs += values
        else:
            self.header += [float(v) for v in values]

    def group(self, name: str) -> None:
        self.entries.append(f"G\tg\t{name}\t")


class Port:
    """One port loaded into its environment, and its calls."""

    def __init__(self, r: EmbeddedR, files: Sequence[str]) -> None:
        self.r = r
        self.files = list(files)
        self.where = self.files[0] if len(self.files) == 1 else f"{Path(self.files[0]).parent}/*.R"
        self.env = r.port_env_fn()
        failure, *self.load_warnings = list(r.load_fn(self.env, r.ri.StrSexpVector(self.files)))
        self.failure = str(failure)
        self._keep: Any = None  # the last call's R result, while the reply's views of it are sent

    def declaration(self) -> Any:
        return self.r.plain(self.r.declaration_fn(self.env))

    def call(self, request: Request) -> list[Part]:
        op, r = request.op, self.r
        if op == protocol.ECHO_OP:  # the optional probe (docs/protocol.md): R has no float32 to echo
            return protocol.reply_missing(f"{op}: the R worker does not offer the echo probe")
        call = _Call(op)
        try:
            for arg in request.args:
                if isinstance(arg.value, dict):
                    call.group(arg.name)
                    for member, value in arg.value.items():
                        call.array("g", arg.name, value, member)
                elif isinstance(arg.value, np.ndarray):
                    call.array(arg.mode, arg.name, arg.value)
                else:
                    call.option(arg.mode, arg.name, arg.value)
        except TypeError as exc:
            return protocol.reply_error(f"{op}: the R worker cannot pass this argument: {exc}")
        args = [
            (None, self.env),
            (None, r.strs(tuple(call.entries))),
            (None, r.to_r(np.array(call.header, dtype=np.float64)) if call.header else r.ri.NULL),
            (None, r.strs(tuple(call.strs)) if call.strs else r.ri.NULL),
        ]
        args += [(None, r.to_r(arr)) for arr in call.arrays]
        try:
            res = r.call_fn.rcall(args, r.ri.globalenv)
        except Exception as exc:  # the bridge itself failed (R out of memory, a C stack overflow)
            return protocol.reply_error(f"{op}: R failed outside the port's own error handling: {exc}")
        text = str(res[0][0]).split("\x1e")
        status, message, warns, traceback, names = text[0], text[1], text[2], text[3], text[4:]
        if status == "missing":
            return protocol.reply_missing(f"{op} is not defined in {self.where}")
        if status != "ok":
            if status == "error" and traceback:
                message += "\nR call stack (innermost last):\n  " + traceback.replace("\n", "\n  ")
            if warns:
                message += "\nR warnings before the error:\n  " + warns.replace("\n", "\n  ")
            return protocol.reply_error(f"{op}: {message}")
        packed = r.view(res[1], 0)
        seconds = max(0.0, float(packed[0]))  # the port's own call (a clock step back: 0)
        header = packed[1:].astype(np.int64)
        results = []
        h = 1
        for i in range(int(header[0])):
            type_code, nd = int(header[h]), int(header[h + 1])
            shape = tuple(int(d) for d in header[h + 2 : h + 2 + nd])
            h += 2 + nd
            data = r.view(res[2 + i], type_code).reshape(shape, order="F")
            if type_code == 2:
                data = data.astype(bool)  # R logicals are int32; no NA left (checked in R)
            results.append((names[i], data))
        self._keep = res  # the reply's parts are views of R's memory
        return protocol.reply_results(warns, results, seconds)


def _read_exact(fd: int, view: memoryview) -> bool:
    """Fill ``view`` from ``fd``; False at a clean EOF before the first byte."""
    got = 0
    while got < len(view):
        n = os.readv(fd, [view[got:]])
        if n == 0:
            if got == 0:
                return False
            raise ProtocolError("the request stopped in the middle")
        got += n
    return True


def _send(fd: int, ident: int, body: list[Part]) -> None:
    views = collections.deque(memoryview(p).cast("B") for p in protocol.frame(protocol.REPLY_MAGIC, ident, body))
    while views:
        n = os.writev(fd, list(views)[:512])
        protocol.consume(views, n)


def greeting(r: EmbeddedR, port: Port) -> list[Part]:
    """The reply to a start or a load request: the port loaded ('H'), or why it is not ('L')."""
    if port.failure:
        return protocol.reply_load_error(f"r: cannot load port {port.failure}")
    return protocol.reply_hello(r.version, "\n".join(port.load_warnings), port.declaration())


def load_again(r: EmbeddedR, pristine: Any, files: Sequence[str]) -> tuple[Port | None, list[Part]]:
    """A load request ('P'): the new port, loaded into an environment of its own as at a start, and
    its greeting; refused ('E', no port) when the previous port changed the R session outside its own
    environment (ports/r/worker.R, ``.ap_session_state``), so that nothing of it reaches the next one."""
    changed = str(r.session_changes_fn(pristine, r.session_state_fn())[0])
    if changed:
        return None, protocol.reply_error(f"r: the previous port changed the R session ({changed}): a fresh worker")
    port = Port(r, files)
    return port, greeting(r, port)


def serve(files: Sequence[str], request_fd: int, reply_fd: int) -> None:
    try:
        r = EmbeddedR()
    except Unavailable as exc:
        _send(reply_fd, 0, protocol.reply_load_error(str(exc)))
        return
    pristine = r.session_state_fn()  # before any port: what a load in place requires (load_again)
    port = Port(r, files)
    _send(reply_fd, 0, greeting(r, port))
    if port.failure:
        return
    header = bytearray(protocol.HEADER.size)
    buffer = np.empty(1 << 16, dtype=np.uint8)  # reused: a request's arrays are copied into R before the next
    while _read_exact(request_fd, memoryview(header)):
        magic, ident, length = protocol.HEADER.unpack(header)
        if magic != protocol.REQUEST_MAGIC:
            raise ProtocolError(f"not a request frame: {bytes(header)!r}")
        if length > len(buffer):
            buffer = np.empty(length, dtype=np.uint8)
        body = buffer[:length]
        if not _read_exact(request_fd, memoryview(body)) and length:
            return
        try:
            request = protocol.decode_request(body)
        except ProtocolError as exc:  # the frame was whole: answer, and read on (docs/protocol.md)
            _send(reply_fd, ident, protocol.reply_error(f"malformed request: {exc}"))
            continue
        if request.load is not None:
            loaded, reply = load_again(r, pristine, request.load)
            _send(reply_fd, ident, reply)
            if loaded is None or loaded.failure:
                return  # refused or not loaded: the supervisor discards this worker
            port = loaded
            continue
        if not request.op:
            return
        reply = port.call(request)
        sys.stdout.flush()
        _send(reply_fd, ident, reply)
        port._keep = None


def main(argv: Sequence[str]) -> None:
    die_with_parent()
    request_fd, reply_fd = worker_fds()
    if not argv:
        raise SystemExit("usage: python -m attention_ports.runtimes.r.worker FILE...")
    serve(argv, request_fd, reply_fd)
    # Served (the request pipe closed, or the port did not load): leave without R's clean-up and
    # Python's. R's (rpy2's endr at exit: ~30 ms of CPU a worker) runs the session's exit
    # finalizers and removes its temporary folder, which lies in the worker's TMPDIR, removed by
    # the supervisor however the worker ends (supervisor._spawn).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
