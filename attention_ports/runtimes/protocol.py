"""The wire protocol between this process and a port's worker process: version 1 of the public
protocol that docs/protocol.md describes and attention_ports/runtimes/protocol.json defines
(our R and Julia workers, and every port run as a command, speak exactly this).

One request, then one reply, at a time, on two private pipes (never the worker's stdout or
stderr, which belong to the port and are captured as its output; see
:mod:`attention_ports.runtimes.supervisor`). Every message is a *frame*:

    frame   := magic (4 bytes), u64 id, u64 body length, body          all little-endian

The request magic is ``APq1``, the reply magic ``APr1``. The parent numbers its requests 1, 2, ...
and a reply carries the id of the request it answers (the start-up message, 0). A reply whose
magic, id, length or body does not check out is a :class:`ProtocolError`: the supervisor reports
that call as an error and replaces the worker. A reply body longer than ``max_reply_bytes``
(``ATTENTION_PORTS_MAX_REPLY_BYTES``, default :data:`MAX_REPLY_BYTES` = 4 GiB) is refused
before anything is allocated for it.

Bodies (``str`` is u32 byte count + UTF-8; counts are u32):

    request := 'C' str op, u32 n, n x (u8 mode, str name, value)   call op; mode 'p' positional,
                                                                    'k' by name (keyword)
             | 'Q'                                                  quit
             | 'P' u32 n, n x str file                              load these files as the port, in
                                                                    place of the current one (the R
                                                                    and Julia workers; answered like a
                                                                    start: 'H' or 'L', or 'E' when
                                                                    it refuses)
    reply   := 'H' str description, str notes, value declaration   started; port loaded
             | 'L' str message                                      the port cannot be loaded
             | 'R' str notes, u32 n, n x (str name, array)          results ("" = a bare array)
             | 'T' f64 seconds, then as 'R'                         results, with the seconds the
                                                                    port's own call took in the worker
             | 'M' str message                                      the port lacks op
             | 'E' str message                                      the call raised
    value   := 'N' | 'B' u8 | 'I' i64 | 'F' f64 | 'S' str
             | 'A' u8 ndim, ndim x i64 dims, f64 elements in column-major order
             | 'Z' the same with i64 elements        (integer arrays: lengths, labels; R integers)
             | 'K' the same with u8 elements 0 / 1   (logical arrays)
             | 'f' f32 | 'a' the same with f32 elements   (a float32 port's arguments: Julia only;
                                                    attention_ports/spec/precision.py)
             | 'h' f16 | 'g' the same with f16 elements   (a float16 port's arguments: Julia only)
             | 'b' bf16 | 'w' the same with bf16 elements (the upper half of a float32; sent only
                                                    as :class:`BFloat16`, read back as float32)
             | 'T' u32 n, n x (str name, value)      (a named group: params -> NamedTuple / list)
             | 'V' u32 n, n x value                  (a list -> Vector / vector)
             | 'X' str type                          (a value with no wire form; declarations only)

``notes`` are R warnings (load-time in 'H', per call in 'R'), one per line; Julia sends "".
``seconds`` ('T', what both our workers send) is the wall time of the port's function alone,
measured around it in the worker: ``attention-ports bench`` subtracts it from the round trip to
get the transport's overhead. A negative, infinite or NaN value is a malformed reply.
``declaration`` is the port's optional ``attention_ports`` object as the worker found it ('N'
when absent); :mod:`attention_ports.runtimes.declaration` validates it. Arrays are column-major, the order
of both Julia and R: a C-order NumPy array of shape (a, b) is, byte for byte, the column-major
array of shape (b, a), which is what the Julia adapter ships (its layout is the reversed axes).

No pickles, no eval: every value is decoded by the fixed rules above, with every length checked
against what is left of the body.
"""

from __future__ import annotations

import collections
import math
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

VERSION = 1  # the protocol's version: the last byte of both magics
REQUEST_MAGIC = b"APq1"
REPLY_MAGIC = b"APr1"
ECHO_OP = "ap.echo"  # the optional probe operation (docs/protocol.md, "Echo"); no contract name has a dot
HEADER = struct.Struct("<4sQQ")  # magic, id, body length
MAX_REPLY_BYTES = 1 << 32
MAX_REPLY_ENV = "ATTENTION_PORTS_MAX_REPLY_BYTES"
MAX_NDIM = 32
MAX_TEXT = 1 << 20  # characters of a message kept; a port's error text longer than this is cut
# The pipes a worker talks over (the supervisor's) and the raw pipe `bench` measures against.
F_SETPIPE_SZ = 1031  # Linux fcntl: a 1 MiB pipe moves big arrays in fewer wake-ups
PIPE_SIZE = 1 << 20

_U8, _U32, _I64, _F64 = struct.Struct("<B"), struct.Struct("<I"), struct.Struct("<q"), struct.Struct("<d")
_LE_F8, _LE_I8, _U1 = np.dtype("<f8"), np.dtype("<i8"), np.dtype("u1")
_LE_F4, _F32 = np.dtype("<f4"), struct.Struct("<f")
_LE_F2, _F16 = np.dtype("<f2"), struct.Struct("<e")
_LE_U2, _U16 = np.dtype("<u2"), struct.Struct("<H")
_ARRAY_TAGS = {b"A": _LE_F8, b"Z": _LE_I8, b"K": _U1, b"a": _LE_F4, b"g": _LE_F2, b"w": _LE_U2}
_BYTES = [bytes([i]) for i in range(256)]
_DIMS = [struct.Struct(f"<B{n}q") for n in range(MAX_NDIM + 1)]  # ndim, then the dims
_SHAPES = [struct.Struct(f"<{n}q") for n in range(MAX_NDIM + 1)]


def _dims(ndim: int) -> struct.Struct:
    return _DIMS[ndim]


# A buffer the writer sends as it is (bytes, or a memoryview of an array's memory: no copy).
Part = bytes | memoryview  # a memoryview of bytes (format "B"): len() is its size in bytes


class ProtocolError(Exception):
    """A frame or body that does not follow the protocol (garbage, a wrong id, a bad length)."""


@dataclass(frozen=True)
class Unsupported:
    """A declaration value the worker could not put on the wire ('X'): its type, as the worker named it."""

    type: str


@dataclass(frozen=True)
class BFloat16:
    """Values to send as bfloat16 ('b' for a 0-D value, 'w' for an array): float32 values that are
    bfloat16 numbers (their low 16 bits zero), as a bfloat16 storage tier holds them; the low bits
    are dropped, never rounded (a value that is not a bfloat16 number is refused)."""

    values: np.ndarray


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    bits = np.array(values, dtype=_LE_F4, order="C").view("<u4")  # np.array keeps a 0-D array 0-D
    if np.any(bits & 0xFFFF):
        raise ValueError("a BFloat16 value that is not a bfloat16 number (its low 16 bits are not zero)")
    return (bits >> 16).astype(_LE_U2)


def max_reply_bytes() -> int:
    raw = os.environ.get(MAX_REPLY_ENV)
    if not raw:
        return MAX_REPLY_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{MAX_REPLY_ENV}={raw!r} is not a whole number of bytes") from None
    if value <= 0:
        raise ValueError(f"{MAX_REPLY_ENV}={raw!r} must be positive")
    return value


# --- encoding -------------------------------------------------------------------------------------
def _str(s: str) -> bytes:
    b = s.encode()
    return _U32.pack(len(b)) + b


def encode_value(out: list[Part], value: Any) -> None:
    """Append ``value``'s encoding to ``out``; arrays as views of their own memory when possible."""
    if isinstance(value, np.ndarray):  # first: what calls carry most
        if value.ndim > MAX_NDIM:
            raise ValueError(f"cannot send an array of {value.ndim} dimensions to a worker (at most {MAX_NDIM})")
        kind = value.dtype.kind
        if value.dtype == _LE_F8:  # what calls carry most: as the else below, tested first
            tag, dtype = b"A", _LE_F8
        elif kind == "b":
            tag, dtype = b"K", _U1
        elif kind in "iu":
            tag, dtype = b"Z", _LE_I8
        elif value.dtype == np.float32:
            tag, dtype = b"a", _LE_F4
        elif value.dtype == np.float16:
            tag, dtype = b"g", _LE_F2
        else:
            tag, dtype = b"A", _LE_F8
        a = value if value.dtype == dtype else np.asarray(value, dtype=dtype)
        if not a.flags.f_contiguous:
            a = np.asfortranarray(a)
        out.append(tag + _dims(a.ndim).pack(a.ndim, *a.shape))
        if a.size:
            out.append(memoryview(a.T).cast("B"))  # column-major bytes: a view (a.T is C-contiguous)
    elif isinstance(value, BFloat16):
        bits = _bf16_bits(np.asarray(value.values))
        if bits.ndim == 0:
            out.append(b"b" + _U16.pack(int(bits)))
        else:
            bits = np.asfortranarray(bits)
            out.append(b"w" + _dims(bits.ndim).pack(bits.ndim, *bits.shape))
            if bits.size:
                out.append(memoryview(bits.T.reshape(-1)).cast("B"))
    elif value is None:
        out.append(b"N")
    elif isinstance(value, bool | np.bool_):
        out.append(b"B\x01" if value else b"B\x00")
    elif isinstance(value, int | np.integer):
        out.append(b"I" + _I64.pack(int(value)))
    elif isinstance(value, np.float32):
        out.append(b"f" + _F32.pack(float(value)))
    elif isinstance(value, np.float16):
        out.append(b"h" + _F16.pack(float(value)))
    elif isinstance(value, float | np.floating):
        out.append(b"F" + _F64.pack(float(value)))
    elif isinstance(value, str):
        out.append(b"S" + _str(value))
    elif isinstance(value, dict):
        out.append(b"T" + _U32.pack(len(value)))
        for key, item in value.items():
            out.append(_str(key))
            encode_value(out, item)
    elif isinstance(value, list | tuple):
        out.append(b"V" + _U32.pack(len(value)))
        for item in value:
            encode_value(out, item)
    elif isinstance(value, Unsupported):
        out.append(b"X" + _str(value.type))
    else:
        raise TypeError(f"cannot send a {type(value).__name__} to a worker: {value!r}")


def frame(magic: bytes, ident: int, body: Sequence[Part]) -> list[Part]:
    """The frame around ``body``: a header part, then the body's parts (nothing is joined)."""
    length = sum(map(len, body))
    return [HEADER.pack(magic, ident, length), *body]


@dataclass
class Arg:
    """One argument of a call: positional (``mode`` "p") or by name ("k")."""

    mode: str
    name: str
    value: Any


def encode_request_body(op: str, args: Iterable[Arg]) -> list[Part]:
    args = list(args)
    out: list[Part] = [b"C" + _str(op) + _U32.pack(len(args))]
    for arg in args:
        if arg.mode not in ("p", "k"):
            raise ValueError(f"argument {arg.name!r}: mode must be 'p' or 'k', got {arg.mode!r}")
        out.append(arg.mode.encode() + _str(arg.name))
        encode_value(out, arg.value)
    return out


def encode_request(ident: int, op: str, args: Iterable[Arg]) -> list[Part]:
    return frame(REQUEST_MAGIC, ident, encode_request_body(op, args))


def encode_quit(ident: int) -> list[Part]:
    return frame(REQUEST_MAGIC, ident, [b"Q"])


def encode_load(ident: int, files: Sequence[str]) -> list[Part]:
    return frame(REQUEST_MAGIC, ident, [b"P" + _U32.pack(len(files)) + b"".join(_str(f) for f in files)])


# Reply bodies, for a worker written in Python (the R worker).
def reply_hello(description: str, notes: str, declaration: Any) -> list[Part]:
    out: list[Part] = [b"H" + _str(description) + _str(notes)]
    encode_value(out, declaration)
    return out


def reply_load_error(message: str) -> list[Part]:
    return [b"L" + _str(message)]


def reply_results(notes: str, results: Sequence[tuple[str, np.ndarray]], seconds: float | None = None) -> list[Part]:
    """'R', or 'T' with the port's own seconds when given."""
    head = b"R" if seconds is None else b"T" + _F64.pack(seconds)
    out: list[Part] = [head + _str(notes) + _U32.pack(len(results))]
    for name, array in results:
        out.append(_str(name))
        encode_value(out, array)
    return out


def reply_missing(message: str) -> list[Part]:
    return [b"M" + _str(message)]


def reply_error(message: str) -> list[Part]:
    return [b"E" + _str(message)]


# --- decoding -------------------------------------------------------------------------------------
class Reader:
    """Reads one body, checking every length against what is left of it."""

    def __init__(self, data: bytes | bytearray | memoryview | np.ndarray):
        self.data = data
        self.view = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else memoryview(data)
        self.pos = 0
        self.end = len(self.view)

    def left(self) -> int:
        return self.end - self.pos

    def _need(self, n: int) -> int:
        """The offset of the next ``n`` bytes, which are then consumed; checked against what is left."""
        pos = self.pos
        if n < 0 or n > self.end - pos:
            raise ProtocolError(f"truncated body: {n} bytes wanted at offset {pos}, {self.end - pos} left")
        self.pos = pos + n
        return pos

    def take(self, n: int) -> memoryview:
        pos = self._need(n)
        return self.view[pos : pos + n]

    def unpack(self, s: struct.Struct) -> Any:
        (value,) = s.unpack_from(self.view, self._need(s.size))
        return value

    def u32(self) -> int:
        return self.unpack(_U32)

    def byte(self) -> bytes:
        return _BYTES[self.view[self._need(1)]]

    def str(self) -> str:
        n = self.u32()
        pos = self._need(n)
        text = str(self.view[pos : pos + n], "utf-8", "replace")
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"\n[... {len(text) - MAX_TEXT} characters cut]"

    def array(self, tag: bytes) -> np.ndarray:
        dtype = _ARRAY_TAGS[tag]
        ndim = self.unpack(_U8)
        if ndim > MAX_NDIM:
            raise ProtocolError(f"an array of {ndim} dimensions (at most {MAX_NDIM})")
        shape = _SHAPES[ndim].unpack_from(self.view, self._need(8 * ndim))
        count = 1
        for d in shape:
            if d < 0:
                raise ProtocolError(f"an array of negative size {shape}")
            count *= d
        nbytes = count * dtype.itemsize
        if nbytes > self.left():
            raise ProtocolError(f"an array of shape {shape} needs {nbytes} bytes; {self.left()} left")
        offset = self.pos
        self.pos += nbytes
        flat = np.frombuffer(self.data, dtype=dtype, count=count, offset=offset) if count else np.empty(0, dtype)
        a = flat.reshape(shape, order="F")  # the sender's own shape and memory order: no copy
        if tag == b"w":  # bfloat16: the upper half of a float32 (exact)
            return np.asarray(a.astype("<u4") << 16).view(_LE_F4)  # asarray: a 0-D shift is a scalar
        return a.astype(bool) if tag == b"K" else a

    def value(self, depth: int = 0) -> Any:
        if depth > 16:
            raise ProtocolError("values nested more than 16 deep")
        tag = self.byte()
        if tag == b"N":
            return None
        if tag == b"B":
            return self.unpack(_U8) != 0
        if tag == b"I":
            return self.unpack(_I64)
        if tag == b"F":
            return self.unpack(_F64)
        if tag == b"f":
            return np.float32(self.unpack(_F32))
        if tag == b"h":
            return np.float16(self.unpack(_F16))
        if tag == b"b":
            return np.array([self.unpack(_U16) << 16], dtype="<u4").view(_LE_F4)[0]
        if tag == b"S":
            return self.str()
        if tag in _ARRAY_TAGS:
            return self.array(tag)
        if tag == b"T":
            return {self.str(): self.value(depth + 1) for _ in range(self.u32())}
        if tag == b"V":
            return [self.value(depth + 1) for _ in range(self.u32())]
        if tag == b"X":
            return Unsupported(self.str())
        raise ProtocolError(f"unknown value tag {tag!r} at offset {self.pos - 1}")

    def finish(self) -> None:
        if self.left():
            raise ProtocolError(f"{self.left()} stray bytes after the message")


@dataclass
class Reply:
    """A decoded reply: ``kind`` is one of H L R M E."""

    kind: str
    message: str = ""  # L, M, E; H: the description
    notes: str = ""  # H, R
    results: dict[str, np.ndarray] = field(default_factory=dict)  # R
    declaration: Any = None  # H
    seconds: float | None = None  # R sent as 'T': the port's own time in the worker


# Plain numeric array tags (no conversion after reading): the fast path's.
_PLAIN_TAGS = {ord(t): d for t, d in _ARRAY_TAGS.items() if t in (b"A", b"Z", b"a", b"g")}
_NOTES_COUNT = struct.Struct("<II")


def _decode_results(body: bytes | bytearray | memoryview | np.ndarray) -> Reply | None:
    """The common reply, results ('T' or 'R') without notes, of float and integer arrays, decoded
    inline (~2.4 us where the Reader takes ~4.5: a tenth of a small call); None for anything else,
    well formed or not, which decode_reply then reads with every check and message of the Reader."""
    view = memoryview(body)
    end = len(view)
    if view.ndim != 1 or view.itemsize != 1 or end < 9:
        return None
    seconds = None
    if view[0] == 84:  # b"T"
        (seconds,) = _F64.unpack_from(view, 1)
        if not 0.0 <= seconds < math.inf:
            return None
        pos = 9
    elif view[0] == 82:  # b"R"
        pos = 1
    else:
        return None
    if end - pos < 8:
        return None
    notes, count = _NOTES_COUNT.unpack_from(view, pos)
    if notes:
        return None
    pos += 8
    results: dict[str, np.ndarray] = {}
    for _ in range(count):
        if end - pos < 4:
            return None
        (n,) = _U32.unpack_from(view, pos)
        pos += 4
        if n > MAX_TEXT or end - pos < n + 2:
            return None
        try:
            name = str(view[pos : pos + n], "utf-8")
        except UnicodeDecodeError:
            return None
        dtype, ndim = _PLAIN_TAGS.get(view[pos + n]), view[pos + n + 1]
        pos += n + 2
        if dtype is None or ndim > MAX_NDIM or end - pos < 8 * ndim or name in results:
            return None
        shape = _SHAPES[ndim].unpack_from(view, pos)
        pos += 8 * ndim
        size = 1
        for d in shape:
            if d < 0:
                return None
            size *= d
        nbytes = size * dtype.itemsize
        if nbytes > end - pos:
            return None
        # the sender's own shape and memory order, in the body's memory: no copy (as Reader.array)
        results[name] = (
            np.ndarray(shape, dtype, buffer=body, offset=pos, order="F") if size else np.empty(shape, dtype, order="F")
        )
        pos += nbytes
    if pos != end:
        return None
    return Reply("R", seconds=seconds, results=results)


def decode_reply(body: bytes | bytearray | memoryview | np.ndarray) -> Reply:
    fast = _decode_results(body)
    if fast is not None:
        return fast
    r = Reader(body)
    kind = r.byte()
    if kind == b"H":
        reply = Reply("H", message=r.str(), notes=r.str(), declaration=r.value())
    elif kind in (b"L", b"M", b"E"):
        reply = Reply(kind.decode(), message=r.str())
    elif kind in (b"R", b"T"):
        seconds = None
        if kind == b"T":
            seconds = r.unpack(_F64)
            if not 0.0 <= seconds < math.inf:
                raise ProtocolError(f"a call that took {seconds!r} seconds")
        reply = Reply("R", notes=r.str(), seconds=seconds)
        for _ in range(r.u32()):
            name = r.str()
            tag = r.byte()
            if tag not in _ARRAY_TAGS:
                raise ProtocolError(f"result {name!r} is not an array (tag {tag!r})")
            if name in reply.results:
                raise ProtocolError(f"result {name!r} sent twice")
            reply.results[name] = r.array(tag)
    else:
        raise ProtocolError(f"unknown reply kind {kind!r}")
    r.finish()
    return reply


@dataclass
class Request:
    op: str  # "" for quit and load
    args: list[Arg]
    load: list[str] | None = None  # a load request's files


def decode_request(body: bytes | bytearray | memoryview | np.ndarray) -> Request:
    """A request body (the R worker's side); arrays are views of ``body``."""
    r = Reader(body)
    kind = r.byte()
    if kind == b"Q":
        r.finish()
        return Request("", [])
    if kind == b"P":
        files = [r.str() for _ in range(r.u32())]
        r.finish()
        return Request("", [], files)
    if kind != b"C":
        raise ProtocolError(f"unknown request kind {kind!r}")
    op = r.str()
    args = []
    for _ in range(r.u32()):
        mode = r.byte().decode(errors="replace")
        if mode not in ("p", "k"):
            raise ProtocolError(f"argument mode {mode!r}")
        name = r.str()
        args.append(Arg(mode, name, r.value()))
    r.finish()
    return Request(op, args)


def check_header(header: bytes | memoryview, magic: bytes, ident: int, limit: int) -> int:
    """The body length of a frame header, after checking its magic, id and length."""
    got_magic, got_id, length = HEADER.unpack(header)
    if got_magic != magic:
        if got_magic[:3] == magic[:3]:  # a frame of another version of this protocol
            raise ProtocolError(
                f"a frame of protocol version {got_magic[3:]!r} ({got_magic!r}); this suite speaks version "
                f"{VERSION} ({magic!r}): docs/protocol.md"
            )
        raise ProtocolError(f"not a frame (it starts {bytes(header[:12])!r}...)")
    if length > limit:
        raise ProtocolError(f"a reply of {length} bytes, over the limit of {limit} ({MAX_REPLY_ENV})")
    if got_id != ident:
        raise ProtocolError(f"a reply to request {got_id}, expected {ident}")
    return length


def consume(views: collections.deque[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes of ``views`` (what one ``os.writev`` wrote of a frame's parts)."""
    while n:
        if n >= len(views[0]):
            n -= len(views.popleft())
        else:
            views[0] = views[0][n:]
            n = 0
