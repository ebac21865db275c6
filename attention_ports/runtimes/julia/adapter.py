"""The ``julia`` implementation: our port (every ports/julia/src/*.jl) or a user's Julia file.

Everything both transports share lives here: finding julia, turning a case into a Julia call
(positional arrays, then keywords, driven by ``attention_ports.spec.ops``), the layout conversion
between the reference layout and Julia's feature-major one, the port's declaration, and turning
the named results back.

Transports (``ATTENTION_PORTS_JULIA_TRANSPORT``):

- ``worker`` (default, attention_ports/runtimes/julia/worker.py): one supervised ``julia ports/julia/worker.jl PORT``
  process per port (attention_ports/runtimes/supervisor.py: timeouts, restarts, give-up, output capture);
- ``juliacall`` (attention_ports/runtimes/julia/juliacall.py): Julia inside this Python process (Julia >= 1.10 with
  PythonCall); no timeouts, since a call cannot be interrupted.

Both send the same request body and read the same reply body (attention_ports/runtimes/protocol.py); the
worker over a private pipe, juliacall in memory. Arrays in them are *Julia-layout* arrays (NumPy
arrays whose shape is the Julia shape); only this module knows about roles. Neither transport
imports this module, nor the protocol module either of them.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from attention_ports.core import language, paths
from attention_ports.runtimes import declaration
from attention_ports.runtimes.declaration import Declaration
from attention_ports.runtimes.impl import (
    Arrays,
    Implementation,
    ImplementationError,
    ImplementationUnavailable,
    OperationMissing,
)
from attention_ports.runtimes.protocol import Arg, Reply
from attention_ports.runtimes.supervisor import Results
from attention_ports.spec import ops
from attention_ports.spec.ops import Role
from attention_ports.spec.portview import PortView

# Our port: a directory, whose *.jl files (attention.jl, classifier.jl) the worker includes in name
# order into one module (ports/julia/worker.jl, load_port).
PORT = paths.PORTS / "julia" / "src"
WORKER = paths.PORTS / "julia" / "worker.jl"
# Written by `attention-ports setup julia` (scripts/install_julia.sh): the checkout's .local/julia, or a
# per-user data folder for an installed package (attention_ports/core/paths.py).
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
    Role.BLOCK_WEIGHT: (2, 1, 0),  # (n_layer, d_in, d_out) -> (d_out, d_in, n_layer)
    Role.BLOCK_VECTOR: (1, 0),  # (n_layer, d) -> (d, n_layer)
    Role.LOGITS: (1, 0),  # (n, vocab) -> (vocab, n)
    Role.TOKEN_TABLE: (1, 0),  # (vocab, d) -> (d, vocab), as Flux's Embedding
    Role.POSITION_TABLE: (1, 0),  # (n_ctx, d) -> (d, n_ctx), like the token table
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


def _reversal(axes: tuple[int, ...]) -> bool:
    return all(a == len(axes) - 1 - i for i, a in enumerate(axes))


# Every permutation above is a full reversal (checked here, once): then both directions are ``.T``,
# a view, which keeps a small call's conversion to a fraction of a microsecond.
_ALL_REVERSALS = all(axes is None or _reversal(axes) for axes in _AXES.values())


def to_julia(array: np.ndarray, role: Role) -> np.ndarray:
    """Reference layout -> Julia layout (a view, unless the role shifts values)."""
    out = array.T if _ALL_REVERSALS else np.transpose(array, _axes(role, array.ndim))
    return np.asarray(out + _OFFSET[role]) if role in _OFFSET else out


def from_julia(array: np.ndarray, role: Role) -> np.ndarray:
    """Julia layout -> reference layout: the inverse of :func:`to_julia`."""
    out = array.T if _ALL_REVERSALS else np.transpose(array, np.argsort(_axes(role, array.ndim)))
    return np.asarray(out - _OFFSET[role]) if role in _OFFSET else out


# --- calls ----------------------------------------------------------------------------------------
# np.ndarray (Julia layout, float64 or int64) | dict (a group -> NamedTuple) | list | number | str | None
JuliaValue = Any


class Transport(Protocol):
    last_output: str

    def start(self) -> Reply:
        """Load the port (once) and return the greeting; raises ImplementationError if it cannot."""

    def call(self, op: str, args: list[Arg]) -> Results:
        """Call ``op`` in the port; its flattened results in Julia layout ("" = a bare array).

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
    spec: ops.OpSpec, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], storage: type = np.float64
) -> list[Arg]:
    """The Julia call for a case: positional arguments, then keywords, arrays in Julia layout.

    Positional: the required arrays, then each group (a NamedTuple of its members, e.g. the
    classifier's ``params``), then the positional options (``num_heads``, ``lr``). By keyword:
    optional arrays that are present and options that are not None, so the port's ``nothing``
    defaults apply to everything absent. Arrays keep int64 (lengths, labels) or become float64;
    a boolean mask becomes additive (0 keeps, -Inf removes) as the contract promises ports; 0-D
    arrays (a label) become plain Julia numbers. ``storage``: the port's precision's scalar type;
    ``np.float32`` sends every real array and real option as Float32 (attention_ports/spec/precision.py).
    """

    def array(name: str) -> JuliaValue:
        a = np.asarray(inputs[name])
        role = spec.role(name)
        if a.dtype == np.bool_:
            a = (np.where(a, 0.0, -np.inf) if role is Role.SCORES else a).astype(storage)
        elif a.dtype.kind not in "iu":
            a = a.astype(storage, copy=False)
        j = to_julia(a, role)
        return j.item() if j.ndim == 0 else j

    def group(name: str) -> dict[str, JuliaValue]:
        return {m: array(f"{name}.{m}") for m in spec.groups[name] if f"{name}.{m}" in inputs}

    args = [Arg("p", n, array(n)) for n in spec.args]
    args += [Arg("p", g, group(g)) for g in spec.groups]
    args += [Arg("p", n, _option(options.get(n))) for n in spec.positional_options]
    args += [Arg("k", n, array(n)) for n in spec.kwargs if n in inputs]
    args += [Arg("k", n, _option(options[n])) for n in spec.options if options.get(n) is not None]
    if storage is not np.float64:  # a float option (scale, lr) would promote a Float32 computation
        args = [Arg(a.mode, a.name, storage(a.value)) if type(a.value) is float else a for a in args]
    return args


def unpack_results(spec: ops.OpSpec, results: Mapping[str, np.ndarray]) -> Arrays:
    """Julia's flattened results -> the declared outputs in the reference layout.

    Nested results arrive as "outer.inner" (the classifier's "grads.w_q"). A bare array stands for
    an operation's single output; names the operation does not declare are dropped; declared
    outputs that are absent are left out (the judge fails each and judges the others), but a
    result with none of them is the port's error.
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
    if not out:  # some outputs may be absent (each judged a failure), but not every one
        got = ", ".join(sorted(results)) or "nothing"
        raise ImplementationError(f"{spec.name} returned none of its outputs (it returned: {got}); expected ({wanted})")
    return out


class JuliaImplementation(Implementation):
    """A Julia port run through the transport chosen by ``ATTENTION_PORTS_JULIA_TRANSPORT``.

    ``timeout``, ``compile_allowance``, ``startup_timeout`` (seconds) and ``give_up_after`` (calls)
    override the worker transport's settings (attention_ports/runtimes/julia/worker.py; the environment otherwise);
    ``sysimage`` ("auto", "stock" or an image's path) and ``julia_flags`` (added to julia's command
    line) are the worker's too (the system image build uses them: scripts/build_julia_sysimage.py).
    """

    name = "julia"

    def __init__(
        self,
        port: Path | None = None,
        *,
        transport: str | None = None,
        timeout: float | None = None,
        compile_allowance: float | None = None,
        startup_timeout: float | None = None,
        give_up_after: int | None = None,
        sysimage: str | Path = "auto",
        julia_flags: tuple[str, ...] = (),
        precision: str | None = None,
    ):
        self.port = Path(port).resolve() if port is not None else PORT
        if not (self.port.is_file() or self.port.is_dir()):
            raise FileNotFoundError(f"julia port file not found: {self.port}")
        kind = transport or os.environ.get(TRANSPORT_ENV) or "worker"
        self.precision_override = precision  # `verify --precision`: run a port generically in it
        self._declaration: Declaration | None = None
        self._transport: Transport
        if kind == "worker":
            from attention_ports.runtimes.julia import worker as julia_worker

            limits = julia_worker.limits(
                timeout=timeout,
                compile_allowance=compile_allowance,
                startup_timeout=startup_timeout,
                give_up_after=give_up_after,
            )
            self._transport = julia_worker.WorkerTransport(
                find_julia(),
                WORKER,
                self.port,
                limits=limits,
                on_hello=self._read_declaration,
                sysimage=sysimage,
                extra_flags=julia_flags,
            )
        elif kind == "juliacall":
            from attention_ports.runtimes.julia.juliacall import JuliacallTransport

            self._transport = JuliacallTransport(WORKER, self.port, on_hello=self._read_declaration)
        else:
            raise ValueError(f"{TRANSPORT_ENV}={kind!r}: expected 'worker' or 'juliacall'")

    def load(self, port: Path) -> None:
        """Run ``port`` from now on, in place of the current one, as a new ``JuliaImplementation(port)``
        with this one's settings would (raises ``ImplementationUnavailable`` where it does not load;
        the implementation then stays unusable until a load succeeds). The running worker takes it
        where the session is as it started (worker.jl, ``serve``), else a fresh worker does: the
        mutation kit's ~125 Julia mutants then start Julia a few times, not ~125 times. In place,
        a port that differs from the served one only inside method bodies has those methods
        redefined in the served module, where that is what a fresh module would be (worker.jl,
        ``patch!``); any other is included into a fresh module. The worker transport only
        (juliacall: ValueError)."""
        reload = getattr(self._transport, "reload", None)
        if reload is None:
            raise ValueError("julia: only the worker transport loads another port in place")
        self.port = Path(port).resolve()
        self._declaration = None
        try:
            reload(self.port)
        except ImplementationError as exc:
            raise ImplementationUnavailable(str(exc)) from None

    def _read_declaration(self, hello: Reply) -> None:
        """The port's greeting: check its declaration (a DeclarationError makes it a load error)."""
        self._declaration = declaration.parse(hello.declaration, str(self.port), "julia")

    @property
    def transport(self) -> Transport:
        return self._transport

    @property
    def declaration(self) -> Declaration:
        """The port's ``attention_ports`` declaration; loads the port if it has not been yet."""
        if self._declaration is None:
            try:
                self._transport.start()
            except ImplementationError as exc:  # R code given as a Julia port: say so
                hint = language.hint(self.port, "julia") if self.port.is_file() else ""
                if not hint:
                    raise
                raise ImplementationError(f"{exc}\n{hint}") from None
        assert self._declaration is not None
        return self._declaration

    def load_failure(self) -> str | None:
        """The port's load error once a start has met it (a start that timed out or crashed is not
        one: the next call retries it, as the supervisor allows)."""
        sup = getattr(self._transport, "supervisor", None)
        return sup.load_error if sup is not None else getattr(self._transport, "_load_error", None)

    @property
    def masked_query(self) -> str:  # type: ignore[override]
        """The port's convention for a fully masked query (ports/CONTRACT.md); loads the port."""
        return self.declaration.masked_query

    @property
    def rope_pairing(self) -> str:  # type: ignore[override]
        """The rotary pairing the port declares (attention_ports/spec/pairing.py); loads the port."""
        return self.declaration.rope_pairing

    @property
    def precision(self) -> str:
        """The arithmetic the port is run and judged in: ``verify --precision``'s, else its declaration's."""
        return self.precision_override or self.declaration.precision

    @property
    def storage(self) -> type:
        # float16: Float16 arguments (Julia rounds each Float16 operation); a mixed precision's
        # storage values travel as Float32 (exactly): the port computes in float32
        return {"float64": np.float64, "float16": np.float16}.get(self.precision, np.float32)

    @property
    def last_output(self) -> str:  # type: ignore[override]
        return self._transport.last_output

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        spec = ops.get(op)
        declared = self.declaration
        if not declared.offers(op):
            raise OperationMissing(f"{op} is not among the operations {self.port} declares (attention_ports)")
        try:
            results = self._transport.call(op, build_call(spec, inputs, options, self.storage))
        except OperationMissing:
            if declared.operations is None:
                raise
            raise ImplementationError(
                f"{op} is declared in attention_ports.operations of {self.port} but the port defines no {op}"
            ) from None
        self.last_seconds = results.seconds
        return unpack_results(spec, results.arrays)

    def view(self, op: str, output: str) -> PortView | None:
        """Julia's layout (the permutation :func:`to_julia` applies) and 1-based indices."""
        try:
            role = ops.get(op).role(output)
        except KeyError:
            return None
        return PortView("Julia", output, role, lambda ndim: _axes(role, ndim))

    def describe(self) -> str:
        which = "our port" if self.port == PORT else "user port"
        where = str(self.port)
        if self.port.is_dir():
            where += f"/{{{','.join(sorted(f.name for f in self.port.glob('*.jl')))}}}"
        declared = self._declaration.describe() if self._declaration is not None else ""
        if self.precision_override:
            declared = f"{declared}; " if declared else ""
            declared += f"run in {self.precision_override} (verify --precision)"
        return f"julia: {which} {where} via {self._transport.describe()}" + (f"; {declared}" if declared else "")

    def close(self) -> None:
        self._transport.close()
