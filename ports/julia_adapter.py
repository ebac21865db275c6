"""The ``julia`` implementation: our port (every ports/julia/src/*.jl) or a user's Julia file.

Everything both transports share lives here: finding julia, turning a case into a Julia call
(positional arrays, then keywords, driven by ``attention_ports.ops``), the layout conversion
between the reference layout and Julia's feature-major one, and turning the named results back.

Transports (``ATTENTION_PORTS_JULIA_TRANSPORT``):

- ``worker`` (default, ports/julia_worker.py): one long-lived ``julia ports/julia/worker.jl PORT``
  process per adapter, spoken to over stdin/stdout; per-call timeouts, restarts after a crash.
- ``juliacall`` (ports/julia_juliacall.py): Julia inside this Python process (Julia >= 1.10 with
  PythonCall); no timeouts, since a call cannot be interrupted.

Both send the same request bytes and read the same reply bytes (the wire format at the top of
ports/julia/worker.jl, encoded and decoded here); the worker over a pipe, juliacall in memory.
Arrays in them are *Julia-layout* arrays (NumPy arrays whose shape is the Julia shape); only this
module knows about roles.
"""

from __future__ import annotations

import os
import shutil
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from attention_ports import ops, paths
from attention_ports.impl import (
    Arrays,
    Implementation,
    ImplementationError,
    ImplementationUnavailable,
    OperationMissing,
)
from attention_ports.ops import Role

HERE = Path(__file__).resolve().parent
# Our port: a directory, whose *.jl files (attention.jl, classifier.jl) the worker includes in name
# order into one module (ports/julia/worker.jl, load_port).
PORT = HERE / "julia" / "src"
WORKER = HERE / "julia" / "worker.jl"
# Written by `attention-ports setup julia` (scripts/install_julia.sh): the checkout's .local/julia, or a
# per-user data folder for an installed package (attention_ports/paths.py).
LOCAL_JULIA = paths.local_julia()
TRANSPORT_ENV = "ATTENTION_PORTS_JULIA_TRANSPORT"


def find_julia() -> str:
    """The julia command: ``$JULIA``, else the project-local install, else ``julia`` on PATH."""
    env = os.environ.get("JULIA")
    if env:
        found = shutil.which(env)
        if found is None:
            raise ImplementationUnavailable(f"julia: $JULIA={env!r} is not an executable")
        return found
    if os.access(LOCAL_JULIA, os.X_OK):
        return str(LOCAL_JULIA)
    found = shutil.which("julia")
    if found is None:
        raise ImplementationUnavailable(
            "julia: no Julia found; set $JULIA, put julia on PATH, or run `attention-ports setup julia` "
            f"(scripts/install_julia.sh: it unpacks Julia 1.5.3 into {LOCAL_JULIA.parent.parent})"
        )
    return found


# --- layout -------------------------------------------------------------------------------------
# Axis permutation from the reference layout to Julia's: julia_array = reference.transpose(axes).
# None = reverse every axis, whatever the rank (softmax's rows: the reference normalises the last
# axis, Julia the first). Each declared permutation here is a full reversal, which is exactly how
# column-major Julia reads a C-order buffer, so the worker ships the reference array's own bytes.
_AXES: dict[Role, tuple[int, ...] | None] = {
    Role.TOKENS: (1, 0),  # (n, d) -> (d, n)
    Role.WEIGHT: (1, 0),  # (d_in, d_out) -> (d_out, d_in)
    Role.SCORES: (1, 0),  # (n_q, n_k) -> (n_k, n_q)
    Role.HEAD_SCORES: (2, 1, 0),  # (h, n_q, n_k) -> (n_k, n_q, h)
    Role.VECTOR: (0,),
    Role.SCALAR: (),
    Role.ROWS: None,
    Role.INDEX: None,  # a label (0-D) or labels (1-D)
}
# Added to the values on the way to Julia, subtracted on the way back: class indices are 0-based
# in the reference and 1-based in Julia.
_OFFSET: dict[Role, int] = {Role.INDEX: 1}


def _axes(role: Role, ndim: int) -> tuple[int, ...]:
    axes = _AXES[role]
    if axes is None or len(axes) != ndim:
        # A rank the role does not expect (a malformed input, a port returning the wrong rank):
        # read it the natural column-major way and let the port or the comparison report it.
        return tuple(range(ndim - 1, -1, -1))
    return axes


def to_julia(array: np.ndarray, role: Role) -> np.ndarray:
    """Reference layout -> Julia layout (a view, unless the role shifts values)."""
    out = np.transpose(array, _axes(role, array.ndim))
    return np.asarray(out + _OFFSET[role]) if role in _OFFSET else out


def from_julia(array: np.ndarray, role: Role) -> np.ndarray:
    """Julia layout -> reference layout: the inverse of :func:`to_julia`."""
    out = np.transpose(array, np.argsort(_axes(role, array.ndim)))
    return np.asarray(out - _OFFSET[role]) if role in _OFFSET else out


# --- calls ----------------------------------------------------------------------------------------
# np.ndarray (Julia layout, float64 or int64) | dict (a group -> NamedTuple) | list | number | str | None
JuliaValue = Any


class Transport(Protocol):
    def call(self, op: str, args: list[JuliaValue], kwargs: list[tuple[str, JuliaValue]]) -> dict[str, np.ndarray]:
        """Call ``op`` in the port; return its flattened results in Julia layout ("" = a bare array).

        Raises OperationMissing when the port does not define ``op`` and ImplementationError when
        the call fails (the Julia message and backtrace, a crash, a timeout)."""

    def describe(self) -> str: ...

    def close(self) -> None: ...


def _option(value: Any) -> JuliaValue:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating) or (isinstance(value, np.ndarray) and value.ndim == 0):
        return value.item()
    if isinstance(value, list | tuple):
        return [_option(v) for v in value]  # e.g. frozen parameter names -> Vector{String}
    raise TypeError(f"cannot pass an option of type {type(value).__name__} to Julia: {value!r}")


def build_call(
    spec: ops.OpSpec, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]
) -> tuple[list[JuliaValue], list[tuple[str, JuliaValue]]]:
    """The Julia call for a case: positional ``args`` then ``kwargs``, arrays in Julia layout.

    Positional: the required arrays, then each group (a NamedTuple of its members, e.g. the
    classifier's ``params``), then the positional options (``num_heads``, ``lr``). By keyword:
    optional arrays that are present and options that are not None, so the port's ``nothing``
    defaults apply to everything absent. Arrays keep int64 (lengths, labels) or become float64;
    a boolean mask becomes additive (0 keeps, -Inf removes) as the contract promises ports; 0-D
    arrays (a label) become plain Julia numbers.
    """

    def array(name: str) -> JuliaValue:
        a = np.asarray(inputs[name])
        role = spec.role(name)
        if a.dtype == np.bool_:
            a = np.where(a, 0.0, -np.inf) if role is Role.SCORES else a.astype(np.float64)
        elif not np.issubdtype(a.dtype, np.integer):
            a = a.astype(np.float64, copy=False)
        j = to_julia(a, role)
        return j.item() if j.ndim == 0 else j

    def group(name: str) -> dict[str, JuliaValue]:
        return {m: array(f"{name}.{m}") for m in spec.groups[name] if f"{name}.{m}" in inputs}

    args: list[JuliaValue] = [array(n) for n in spec.args]
    args += [group(g) for g in spec.groups]
    args += [_option(options.get(n)) for n in spec.positional_options]
    kwargs: list[tuple[str, JuliaValue]] = [(n, array(n)) for n in spec.kwargs if n in inputs]
    kwargs += [(n, _option(options[n])) for n in spec.options if options.get(n) is not None]
    return args, kwargs


def unpack_results(spec: ops.OpSpec, results: Mapping[str, np.ndarray]) -> Arrays:
    """Julia's flattened results -> the declared outputs in the reference layout.

    Nested results arrive as "outer.inner" (the classifier's "grads.w_q"). A bare array stands for
    an operation's single output; names the operation does not declare are dropped; a declared
    output that is absent is the port's error.
    """
    wanted = ", ".join(f"{o} = ..." for o in spec.outputs)
    out: Arrays = {}
    for name, array in results.items():
        if name == "" and len(spec.outputs) == 1:
            name = spec.outputs[0]
        elif name == "" or any(part.startswith("#") for part in name.split(".")):
            raise ImplementationError(
                f"{spec.name} returned {'an array' if name == '' else 'a plain Tuple'}; "
                f"return a NamedTuple ({wanted}) or a Dict with those keys"
            )
        if name in spec.outputs or name.split(".", 1)[0] in spec.outputs:
            out[name] = from_julia(array, spec.role(name))
    absent = [o for o in spec.outputs if o not in out and not any(k.startswith(o + ".") for k in out)]
    if absent:
        got = ", ".join(sorted(results)) or "nothing"
        raise ImplementationError(
            f"{spec.name} returned no {', '.join(absent)} (it returned: {got}); expected ({wanted})"
        )
    return out


# --- wire format (ports/julia/worker.jl documents it) -------------------------------------------
def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def _encode(out: list[bytes | memoryview], value: JuliaValue) -> None:
    if value is None:
        out.append(b"N")
    elif isinstance(value, bool):
        out.append(b"B\x01" if value else b"B\x00")
    elif isinstance(value, int):
        out.append(b"I" + struct.pack("<q", value))
    elif isinstance(value, float):
        out.append(b"F" + struct.pack("<d", value))
    elif isinstance(value, str):
        out.append(b"S" + _str(value))
    elif isinstance(value, np.ndarray):
        integer = np.issubdtype(value.dtype, np.integer)
        a = np.asarray(value, dtype="<i8" if integer else "<f8")
        if not a.flags.f_contiguous:
            a = a.copy(order="F")
        out.append((b"Z" if integer else b"A") + struct.pack(f"<B{a.ndim}q", a.ndim, *a.shape))
        out.append(memoryview(a.T.reshape(-1)))  # column-major bytes; a view when F-contiguous
    elif isinstance(value, dict):
        out.append(b"T" + struct.pack("<I", len(value)))
        for key, item in value.items():
            out.append(_str(key))
            _encode(out, item)
    elif isinstance(value, list):
        out.append(b"V" + struct.pack("<I", len(value)))
        for item in value:
            _encode(out, item)
    else:
        raise TypeError(f"cannot send a {type(value).__name__} to julia")


def encode_request(op: str, args: list[JuliaValue], kwargs: list[tuple[str, JuliaValue]]) -> bytes:
    out: list[bytes | memoryview] = [b"C", _str(op), struct.pack("<I", len(args))]
    for value in args:
        _encode(out, value)
    out.append(struct.pack("<I", len(kwargs)))
    for name, value in kwargs:
        out.append(_str(name))
        _encode(out, value)
    return b"".join(out)


class Message:
    """One message from Julia (after its length prefix): a kind byte, then its fields."""

    def __init__(self, data: bytearray):
        self.data, self.pos = data, 0
        (self.kind,) = self.take("<c")

    def take(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return values

    def str(self) -> str:
        (n,) = self.take("<I")
        self.pos += n
        return self.data[self.pos - n : self.pos].decode(errors="replace")

    def array(self) -> np.ndarray:
        tag, ndim = self.take("<cB")
        if tag != b"A":
            raise ValueError(f"expected an array, got tag {tag!r}")
        shape = self.take(f"<{ndim}q")
        count = int(np.prod(shape))
        a = np.frombuffer(self.data, dtype="<f8", count=count, offset=self.pos) if count else np.empty(0)
        self.pos += 8 * count
        return a.reshape(shape, order="F")  # Julia's own shape and memory order: no copy

    def results(self) -> dict[str, np.ndarray]:
        """A reply's results; raises OperationMissing / ImplementationError for 'M' / 'E'."""
        if self.kind == b"R":
            (count,) = self.take("<I")
            results = {}
            for _ in range(count):
                name = self.str()
                results[name] = self.array()
            return results
        if self.kind == b"M":
            raise OperationMissing(self.str())
        if self.kind == b"E":
            raise ImplementationError(self.str())
        raise ImplementationError(f"julia sent an unknown reply {self.kind!r}")


class JuliaImplementation(Implementation):
    """A Julia port run through the transport chosen by ``ATTENTION_PORTS_JULIA_TRANSPORT``.

    ``timeout`` (seconds per call, worker transport only) defaults to
    ``ATTENTION_PORTS_JULIA_TIMEOUT``; see ports/julia_worker.py for the rest of its settings.
    """

    name = "julia"

    def __init__(self, port: Path | None = None, *, transport: str | None = None, timeout: float | None = None):
        self.port = Path(port).resolve() if port is not None else PORT
        if not (self.port.is_file() or self.port.is_dir()):
            raise FileNotFoundError(f"julia port file not found: {self.port}")
        kind = transport or os.environ.get(TRANSPORT_ENV) or "worker"
        self._transport: Transport
        if kind == "worker":
            from ports.julia_worker import WorkerTransport

            self._transport = WorkerTransport(find_julia(), WORKER, self.port, timeout=timeout)
        elif kind == "juliacall":
            from ports.julia_juliacall import JuliacallTransport

            self._transport = JuliacallTransport(WORKER, self.port)
        else:
            raise ValueError(f"{TRANSPORT_ENV}={kind!r}: expected 'worker' or 'juliacall'")

    @property
    def transport(self) -> Transport:
        return self._transport

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        spec = ops.get(op)
        args, kwargs = build_call(spec, inputs, options)
        return unpack_results(spec, self._transport.call(op, args, kwargs))

    def describe(self) -> str:
        which = "our port" if self.port == PORT else "user port"
        where = str(self.port)
        if self.port.is_dir():
            where += f"/{{{','.join(sorted(f.name for f in self.port.glob('*.jl')))}}}"
        return f"julia: {which} {where} via {self._transport.describe()}"

    def close(self) -> None:
        self._transport.close()
