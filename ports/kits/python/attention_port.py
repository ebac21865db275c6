"""attention_port: the attention-ports protocol (version 1) for a port written in Python.

One file, NumPy only (a port may compute with JAX, CuPy or plain Python and hand back anything
``numpy.asarray`` takes). Copy it beside your port, or put its folder on ``sys.path``::

    import numpy as np
    from attention_port import serve

    def softmax(x):                      # arguments by the contract's names; arrays are NumPy,
        e = np.exp(x - x.max(axis=-1, keepdims=True))   # row-major, the reference's shapes
        return {"y": e / e.sum(axis=-1, keepdims=True)}  # named outputs (or one bare array)

    serve({"softmax": softmax}, description="my port 0.1")

then ``attention-ports verify --port py=my_port.py``. The protocol is docs/protocol.md: this module
declares the port row-major and 0-based (arrays arrive exactly as NumPy holds the reference's);
stdout and stderr are yours (captured by the suite); an exception becomes that case's error with
its traceback. Positional arguments are passed positionally, the others by name, so a function
with the contract's parameter names and defaults (``mask=None, scale=None``) takes every call.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

VERSION = 1
_HEADER = struct.Struct("<4sQQ")
_ARRAY = {b"A": "<f8", b"Z": "<i8", b"K": "u1", b"a": "<f4", b"g": "<f2", b"w": "<u2"}
_SCALAR = {b"F": "<d", b"I": "<q", b"f": "<f", b"h": "<e"}
_TAG_OF = {"f8": b"A", "i8": b"Z", "b1": b"K", "f4": b"a", "f2": b"g"}


class Malformed(Exception):
    """A request body that does not follow the protocol."""


class _Reader:
    def __init__(self, body: bytes) -> None:
        self.b, self.pos = body, 0

    def take(self, n: int) -> bytes:
        if n < 0 or n > len(self.b) - self.pos:
            raise Malformed(f"truncated body: {n} bytes wanted at offset {self.pos}")
        out = self.b[self.pos : self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str) -> Any:
        s = struct.Struct(fmt)
        return s.unpack(self.take(s.size))[0]

    def str(self) -> str:
        return self.take(self.unpack("<I")).decode("utf-8", "replace")

    def value(self, depth: int = 0) -> Any:
        if depth > 16:
            raise Malformed("values nested more than 16 deep")
        tag = self.take(1)
        if tag == b"N":
            return None
        if tag == b"B":
            return self.unpack("<B") != 0
        if tag == b"S":
            return self.str()
        if tag == b"b":  # bfloat16: the upper half of a float32
            return np.uint32(self.unpack("<H") << 16).view(np.float32)
        if tag in _SCALAR:
            v = self.unpack(_SCALAR[tag])
            return {b"f": np.float32, b"h": np.float16}.get(tag, lambda x: x)(v)
        if tag in _ARRAY:
            ndim = self.unpack("<B")
            if ndim > 32:
                raise Malformed(f"an array of {ndim} dimensions")
            wire = struct.unpack(f"<{ndim}q", self.take(8 * ndim))
            if any(d < 0 for d in wire):
                raise Malformed(f"an array of negative size {wire}")
            dtype = np.dtype(_ARRAY[tag])
            count = int(np.prod(wire, dtype=np.int64)) if ndim else 1
            # the wire is column-major: its dims reversed are the row-major shape of the same bytes
            a = np.frombuffer(self.take(count * dtype.itemsize), dtype=dtype).reshape(wire[::-1]).copy()
            if tag == b"w":
                return (a.astype(np.uint32) << 16).view(np.float32)
            return a.astype(bool) if tag == b"K" else a
        if tag == b"T":
            return {self.str(): self.value(depth + 1) for _ in range(self.unpack("<I"))}
        if tag == b"V":
            return [self.value(depth + 1) for _ in range(self.unpack("<I"))]
        raise Malformed(f"unknown value tag {tag!r} at offset {self.pos - 1}")


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def _value(v: Any) -> bytes:
    """A declaration value: None, bool, int, float, str, list, dict."""
    if v is None:
        return b"N"
    if isinstance(v, bool):
        return b"B" + bytes([v])
    if isinstance(v, int):
        return b"I" + struct.pack("<q", v)
    if isinstance(v, float):
        return b"F" + struct.pack("<d", v)
    if isinstance(v, str):
        return b"S" + _str(v)
    if isinstance(v, dict):
        return b"T" + struct.pack("<I", len(v)) + b"".join(_str(k) + _value(x) for k, x in v.items())
    if isinstance(v, list | tuple):
        return b"V" + struct.pack("<I", len(v)) + b"".join(_value(x) for x in v)
    raise TypeError(f"cannot send {type(v).__name__} in a declaration")


def _array(a: Any) -> bytes:
    a = np.asarray(a)
    if a.dtype.kind == "b":
        a = a.astype("u1")
        tag = b"K"
    elif a.dtype.kind in "iu":
        a, tag = a.astype("<i8"), b"Z"
    elif a.dtype.kind == "f" and a.dtype.itemsize in (2, 4, 8):
        tag = _TAG_OF[f"f{a.dtype.itemsize}"]
        a = a.astype(a.dtype.newbyteorder("<"))
    else:
        a, tag = a.astype("<f8"), b"A"  # bfloat16 arrays (ml_dtypes) and the like: their exact float64
    a = a if a.flags.c_contiguous else a.copy(order="C")  # (np.ascontiguousarray makes 0-D arrays 1-D)
    return tag + struct.pack(f"<B{a.ndim}q", a.ndim, *a.shape[::-1]) + a.tobytes()


def _flatten(out: dict[str, Any], prefix: str, x: Any) -> None:
    if isinstance(x, Mapping) or hasattr(x, "_asdict"):
        for k, v in (x._asdict() if hasattr(x, "_asdict") else x).items():
            _flatten(out, f"{prefix}.{k}" if prefix else str(k), v)
    else:
        out[prefix] = x


def _results(result: Any, seconds: float) -> bytes:
    flat: dict[str, Any] = {}
    _flatten(flat, "", result)
    parts = [b"T", struct.pack("<d", max(0.0, seconds)), _str(""), struct.pack("<I", len(flat))]
    for name, value in flat.items():
        parts += [_str(name), _array(value)]
    return b"".join(parts)


def _echo(args: list[tuple[str, str, Any]]) -> bytes:
    """Each argument back as arrays (docs/protocol.md, "Echo")."""
    flat: dict[str, Any] = {}

    def put(name: str, v: Any) -> None:
        if v is None:
            return
        if isinstance(v, dict):
            for k, x in v.items():
                put(f"{name}.{k}", x)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                put(f"{name}.{i}", x)
        elif isinstance(v, str):
            flat[name] = np.frombuffer(v.encode(), dtype=np.uint8).astype(np.int64)
        elif isinstance(v, bool):
            flat[name] = np.array(v)
        elif isinstance(v, int):
            flat[name] = np.array(v, dtype=np.int64)
        elif isinstance(v, float):
            flat[name] = np.array(v, dtype=np.float64)
        else:
            flat[name] = np.asarray(v)

    for _, name, v in args:
        put(name, v)
    return _results(flat, 0.0)


def _send(fd: int, ident: int, body: bytes) -> None:
    data = memoryview(_HEADER.pack(b"APr1", ident, len(body)) + body)
    while data:
        data = data[os.write(fd, data) :]


def _read(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            if got == 0:
                return None
            raise SystemExit("attention_port: the request stopped in the middle")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _die_with_parent() -> None:
    """Be killed when the suite dies (Linux), and leave now if it already has."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the suite's reaper still ends this process
        pass
    parent = os.environ.get("ATTENTION_PORTS_PARENT_PID")
    if parent and os.getppid() != int(parent):
        raise SystemExit(70)


def serve(
    operations: Mapping[str, Callable[..., Any]],
    *,
    description: str = "a Python port",
    precision: str = "float64",
    masked_query: str = "zeros",
    language: str = "Python",
) -> None:
    """Greet the suite with the declaration, then answer its calls until it quits."""
    raw = os.environ.get("ATTENTION_PORTS_WORKER_FDS", "")
    try:
        request_fd, reply_fd = (int(x) for x in raw.split(","))
    except ValueError:
        raise SystemExit(
            "this is an attention-ports port: run it with `attention-ports verify --port NAME=THIS_FILE`"
        ) from None
    _die_with_parent()
    declaration = {
        "protocol": VERSION,
        "language": language,
        "layout": "row-major",
        "index_base": 0,
        "precision": precision,
        "masked_query": masked_query,
        "operations": list(operations),
    }
    _send(reply_fd, 0, b"H" + _str(description) + _str("") + _value(declaration))
    while True:
        header = _read(request_fd, _HEADER.size)
        if header is None:
            return
        magic, ident, length = _HEADER.unpack(header)
        if magic != b"APq1":
            raise SystemExit(f"attention_port: not a request frame of protocol version 1: {header!r}")
        body = _read(request_fd, length) if length else b""
        if body is None:
            return
        try:
            r = _Reader(body)
            kind = r.take(1)
            if kind == b"Q":
                return
            if kind != b"C":
                _send(reply_fd, ident, b"E" + _str(f"this port does not answer request kind {kind!r}"))
                continue
            op = r.str()
            args = []
            for _ in range(r.unpack("<I")):
                mode = r.take(1).decode("latin-1")
                if mode not in "pk":
                    raise Malformed(f"argument mode {mode!r}")
                args.append((mode, r.str(), r.value()))
            if r.pos != len(body):
                raise Malformed(f"{len(body) - r.pos} stray bytes after the arguments")
        except Malformed as exc:
            _send(reply_fd, ident, b"E" + _str(f"malformed request: {exc}"))
            continue
        if op == "ap.echo":
            _send(reply_fd, ident, _echo(args))
            continue
        fn = operations.get(op)
        if fn is None:
            _send(reply_fd, ident, b"M" + _str(f"{op} is not an operation of this port"))
            continue
        positional = [v for m, _, v in args if m == "p"]
        named = {n: v for m, n, v in args if m == "k"}
        start = time.perf_counter()
        try:
            result = fn(*positional, **named)
            body = _results(result, time.perf_counter() - start)
        except Exception:
            body = b"E" + _str(f"{op}: {traceback.format_exc()}")
        sys.stdout.flush()
        sys.stderr.flush()
        _send(reply_fd, ident, body)
