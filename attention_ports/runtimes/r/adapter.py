"""The R implementation: runs an R port (ours, or a user's file) in a supervised R worker process.

Every ``RImplementation`` has a worker process of its own
(``python -m attention_ports.runtimes.r.worker FILE...``, attention_ports/runtimes/r/worker.py: R
embedded through rpy2), run by :mod:`attention_ports.runtimes.supervisor`: a port
that quits, crashes, hangs, prints or pollutes its R session affects only its own calls, never
this process, the other ports or the report. The worker starts when the implementation is
built, so a port that does not load (a syntax error, an error at its top level, a bad
declaration) is ``ImplementationUnavailable`` right away, with R's message naming the file, and
its load-time warnings are re-issued here as :class:`RWarning`.

Calls are generic, driven by :mod:`attention_ports.spec.ops`: positional arrays in ``spec.args`` order,
then each of ``spec.groups`` by name as an R named list of its members present in the inputs
(``"params.w_q"`` -> ``params$w_q``), then ``spec.positional_options`` positionally, then present
optional arrays and options by name: ``classifier_step(x_emb, label, params = params, lr, frozen =
frozen)``. This side decides the values (a boolean mask becomes additive 0/-Inf doubles as the
contract promises; arrays whose role is ``Role.INDEX``, class labels, travel 1-based, value + 1,
and come back - 1); the worker turns them into R objects (attention_ports/runtimes/r/worker.py says how).

Results are checked strictly: a list with a name twice, or NA (R's missing value, which is not
NaN) in a result, is the worker's error naming the element (and the position of the NA); a
declared output that comes back as an R integer or logical vector is an error naming it (the
contract wants doubles). A bare array is the single declared output; a length-1 result without
``dim`` is 0-D unless the contract says otherwise (``_length_one_shape``: the same-named input's
shape, or 1-D for a role with axes). Outputs the op does not declare are
passed through as float64. Declared outputs the result lacks are left out (the judge fails each
and judges the rest); a result holding none of them is an error. A file that does not
load and reads like Julia says so (attention_ports/core/language.py).

Errors: an R error becomes :class:`ImplementationError` with R's own text, ``Error in <deparsed
conditionCall> : <conditionMessage>``, followed by the R call stack from the port's entry point
down and any R warnings raised before it. R warnings of a successful call are not lost: each is
re-issued as a Python :class:`RWarning` (``warnings.warn``) and kept in ``last_warnings``. Output
the port prints is captured (``last_output``) and shown with the call's error, if any.

Settings (environment, or the constructor arguments of the same names): ``ATTENTION_PORTS_R_TIMEOUT``
(seconds per call, default 30), ``ATTENTION_PORTS_R_STARTUP_TIMEOUT`` (starting R and loading the
port, default 60), ``ATTENTION_PORTS_R_GIVE_UP_AFTER`` (consecutive timeouts or failed starts after
which the remaining calls fail at once, default 2). R compiles nothing worth an allowance.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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
from attention_ports.runtimes.r.worker import LD_LIBRARY_PATH_ENV
from attention_ports.runtimes.supervisor import Limits, Supervisor
from attention_ports.spec import ops
from attention_ports.spec.portview import PortView

PORT_DIR = paths.PORTS / "r" / "R"
ROOT = paths.PACKAGE_DIR.parent  # holds the package `attention_ports`
ENV_PREFIX = "ATTENTION_PORTS_R"
DEFAULT_LIMITS = {"timeout": 30.0, "compile_allowance": 0.0, "startup_timeout": 60.0, "give_up_after": 2}


class RWarning(UserWarning):
    """An R warning raised by a port during a call that otherwise succeeded (or while loading)."""


def limits(**overrides: float | int | None) -> Limits:
    """The R worker's limits: the defaults, the environment, then ``overrides`` (None = keep)."""
    return Limits.from_env(ENV_PREFIX, **DEFAULT_LIMITS).but(**overrides)


def _port_files(port: Path | None) -> list[Path]:
    if port is None:
        files = sorted(PORT_DIR.glob("*.R"))
        if not files:
            raise ImplementationUnavailable(f"r: no *.R files in {PORT_DIR}")
        return files
    port = Path(port).resolve()
    if port.is_dir():
        files = sorted(port.glob("*.R"))
        if not files:
            raise ImplementationUnavailable(f"r: port directory {port} holds no *.R files")
        return files
    if not port.is_file():
        raise ImplementationUnavailable(f"r: port file {port} does not exist")
    return [port]


def _worker_env() -> dict[str, str]:
    """This environment, with our packages importable by the worker whatever its directory, and
    what rpy2 would otherwise ask R for at each worker's start (:func:`_r_session_env`)."""
    env = {**_r_session_env(os.environ.get("R_HOME")), **os.environ}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


@functools.cache
def _r_session_env(r_home: str | None) -> dict[str, str]:
    """R_HOME and the LD_LIBRARY_PATH R's start-up script sets, asked once per process (and value of
    $R_HOME, ``r_home``) the way rpy2 asks (`R RHOME`, an Rscript: ~0.15 s of CPU), for every
    worker this process starts (worker.LD_LIBRARY_PATH_ENV); empty where rpy2 or R is missing (the
    worker says why)."""
    if not r_home and shutil.which("R") is None:
        return {}  # no R: rpy2 would log its own error here; the worker says what to install
    try:
        import rpy2.situation

        home = rpy2.situation.get_r_home()
        if not home or not os.access(os.path.join(home, "bin", "Rscript"), os.X_OK):
            return {}  # a wrong R_HOME: the worker names it (rpy2 would log here)
        return {"R_HOME": home, LD_LIBRARY_PATH_ENV: rpy2.situation.r_ld_library_path_from_subprocess(home)}
    except Exception:  # rpy2 missing or broken: the worker's own import reports it
        return {}


def _array(spec: ops.OpSpec, name: str, arr: Any, member: str = "") -> np.ndarray:
    """An input as R should see it: boolean masks additive, class indices 1-based, numbers float64."""
    arr = np.asarray(arr)
    if arr.dtype == np.bool_:
        # boolean masks travel additive: True keeps (0), False removes (-Inf); other booleans are logical
        return np.where(arr, 0.0, -np.inf) if (member or name).endswith("mask") else arr
    try:
        offset = 1 if spec.role(f"{name}.{member}" if member else name) is ops.Role.INDEX else 0
    except KeyError:  # no declared role: passed through as it is
        offset = 0
    if arr.dtype.kind in "iu":
        arr = arr.astype(np.int64, copy=False)
    elif arr.dtype.kind == "f":
        arr = arr.astype(np.float64, copy=False)
    else:
        raise TypeError(f"r: input {member or name!r} has dtype {arr.dtype}; expected numbers or booleans")
    return arr + offset if offset else arr


def _option(value: Any) -> Any:
    if isinstance(value, list | tuple | np.ndarray):
        return [v.item() if isinstance(v, np.generic) else v for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _length_one_shape(name: str, role: ops.Role | None, inputs: Mapping[str, np.ndarray]) -> tuple[int, ...]:
    """The shape of a length-1 result that R returned without ``dim`` (which the worker reads as
    0-D): R has no 0-D/1-D distinction there, so the contract decides. An output that updates an
    input of its name (adamw_step's param, m, v; classifier_step's params.*) keeps that input's
    shape when the input was itself 0-D or 1-D (both reach R without ``dim``); otherwise a role
    with axes (``ops.AXIS_NAMES``: a vector, a weight...) is 1-D, and a scalar, an index (0-D for
    one label) or an undeclared output stays 0-D. A result R returned with ``dim`` keeps it."""
    given = inputs.get(name)
    if given is not None and np.ndim(given) <= 1 and np.size(given) == 1:
        return np.shape(given)
    if role is None or role is ops.Role.INDEX or not ops.AXIS_NAMES[role]:
        return ()
    return (1,)


def build_call(spec: ops.OpSpec, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> list[Arg]:
    """The R call for a case (the order of the module docstring)."""
    args = []
    for name in spec.args:
        if name not in inputs:
            raise KeyError(f"{spec.name}: required input {name!r} is absent")
        args.append(Arg("p", name, _array(spec, name, inputs[name])))
    # Groups travel by name but sit in their natural place, after the required arrays:
    # classifier_step(x_emb, label, params = params, lr, frozen = frozen) matches `params` by
    # name first, then the positional ones in order, whatever the port's formals order.
    for group, members in spec.groups.items():
        present = {m: _array(spec, group, inputs[f"{group}.{m}"], m) for m in members if f"{group}.{m}" in inputs}
        args.append(Arg("k", group, present))
    args += [Arg("p", n, _option(options[n])) for n in spec.positional_options if options.get(n) is not None]
    args += [Arg("k", n, _array(spec, n, inputs[n])) for n in spec.kwargs if n in inputs]
    args += [Arg("k", n, _option(options[n])) for n in spec.options if options.get(n) is not None]
    return args


class RImplementation(Implementation):
    """Runs an R port in its own R worker; ``port`` is a user's .R file (or a directory of them)."""

    name = "r"

    def __init__(
        self,
        port: Path | None = None,
        *,
        timeout: float | None = None,
        startup_timeout: float | None = None,
        give_up_after: int | None = None,
    ) -> None:
        self.last_warnings: list[str] = []
        argv = self._take(port)
        self._supervisor = Supervisor(
            "r",
            argv,
            self._where,
            limits(timeout=timeout, startup_timeout=startup_timeout, give_up_after=give_up_after),
            env=_worker_env(),
            check_hello=self._read_hello,
        )
        self._greet(self._supervisor.start, close=True)

    def load(self, port: Path) -> None:
        """Run ``port`` from now on, in place of the current one, as a new ``RImplementation(port)``
        would (raises the same ``ImplementationUnavailable``; the implementation then stays unusable
        until a load succeeds). The worker loads it in place where its R session is as it started
        (Supervisor.reload: the port gets an environment of its own either way), else a fresh worker
        does: the mutation kit's ~130 R mutants then start R once, not ~130 times."""
        argv = self._take(port)
        self._greet(lambda: self._supervisor.reload(argv, self._where, [str(f) for f in self.files]), close=False)

    def _take(self, port: Path | None) -> list[str]:
        """Make ``port`` this implementation's port; the worker's command line for it."""
        self.files = _port_files(port)
        self.user_port = port is not None
        self._where = str(self.files[0]) if len(self.files) == 1 else f"{self.files[0].parent}/*.R"
        self._declaration: Declaration = declaration.NONE
        return [sys.executable, "-X", "faulthandler", "-m", "attention_ports.runtimes.r.worker", *map(str, self.files)]

    def _greet(self, start: Callable[[], Reply], *, close: bool) -> None:
        """Start (or load) the port; its load-time warnings re-issued; a failure is ImplementationUnavailable."""
        try:
            hello = start()
        except ImplementationError as exc:
            if close:
                self._supervisor.close()
            hint = language.hint(self.files[0], "r") if len(self.files) == 1 else ""  # Julia given as R?
            raise ImplementationUnavailable(f"{exc}\n{hint}" if hint else str(exc)) from None
        self._version = hello.message
        for w in filter(None, hello.notes.split("\n")):
            warnings.warn(f"r: loading {w}", RWarning, stacklevel=3)

    def _read_hello(self, hello: Reply) -> None:
        self._declaration = declaration.parse(hello.declaration, self._where, "r")

    @property
    def declaration(self) -> Declaration:
        return self._declaration

    @property
    def masked_query(self) -> str:  # type: ignore[override]
        """The port's convention for a fully masked query (ports/CONTRACT.md)."""
        return self._declaration.masked_query

    @property
    def rope_pairing(self) -> str:  # type: ignore[override]
        """The rotary pairing the port declares (attention_ports/spec/pairing.py)."""
        return self._declaration.rope_pairing

    @property
    def last_output(self) -> str:  # type: ignore[override]
        return self._supervisor.last_output

    @property
    def supervisor(self) -> Supervisor:
        return self._supervisor

    def view(self, op: str, output: str) -> PortView | None:
        """R keeps the reference layout but counts from 1, and nests results in lists (grads$w_q)."""
        try:
            role = ops.get(op).role(output)
        except KeyError:
            role = None
        return PortView("R", output.replace(".", "$"), role)

    def describe(self) -> str:
        origin = "user port" if self.user_port else "port"
        files = ", ".join(str(f) for f in self.files)
        declared = self._declaration.describe()
        return f"r: {self._version}, {origin} {files}" + (f"; {declared}" if declared else "")

    def close(self) -> None:
        self._supervisor.close()

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        spec = ops.get(op)
        if not self._declaration.offers(op):
            raise OperationMissing(f"{op} is not among the operations {self._where} declares (attention_ports)")
        args = build_call(spec, inputs, options)
        try:
            results = self._supervisor.call(op, args)
        except OperationMissing:
            if self._declaration.operations is None:
                raise
            raise ImplementationError(
                f"{op} is declared in attention_ports$operations of {self._where} but the port defines no {op}"
            ) from None
        self.last_seconds = results.seconds
        self.last_warnings = results.notes.split("\n") if results.notes else []
        for w in self.last_warnings:
            warnings.warn(f"r: {op}: {w}", RWarning, stacklevel=2)
        return self._name_outputs(spec, results.arrays, inputs)

    def _name_outputs(
        self, spec: ops.OpSpec, results: dict[str, np.ndarray], inputs: Mapping[str, np.ndarray]
    ) -> Arrays:
        if list(results) == [""]:  # a bare matrix/array rather than a named list
            if len(spec.outputs) != 1:
                wanted = ", ".join(f"{o} = ..." for o in spec.outputs)
                raise ImplementationError(f"{spec.name}: returned a bare array; expected list({wanted})")
            results = {spec.outputs[0]: results[""]}
        out: Arrays = {}
        for name, arr in results.items():
            try:
                role = spec.role(name)
            except KeyError:
                role = None
            declared = name in spec.outputs or name.split(".", 1)[0] in spec.outputs
            if arr.dtype != np.float64:
                if declared and role is not ops.Role.INDEX:  # class indices may well be integers
                    kind = "logical" if arr.dtype == np.bool_ else "integer"
                    raise ImplementationError(
                        f"{spec.name}: output '{name}' is an R {kind} vector; the contract wants doubles "
                        f"(numeric): return as.double(...)"
                    )
                arr = arr.astype(np.float64)
            if arr.ndim == 0:
                arr = arr.reshape(_length_one_shape(name, role, inputs))
            elif role is ops.Role.SCALAR and arr.size == 1:
                arr = arr.reshape(())
            if role is ops.Role.INDEX:  # 1-based in R, 0-based here
                arr = arr - 1
            out[name] = arr
        present = [o for o in spec.outputs if o in out or any(k.startswith(o + ".") for k in out)]
        if not present:  # some outputs may be absent (each judged a failure), but not every one
            wanted = ", ".join(f"{o} = ..." for o in spec.outputs)
            raise ImplementationError(
                f"{spec.name}: the result holds none of its outputs (it has: {', '.join(out) or 'nothing'}); "
                f"expected list({wanted})"
            )
        return out
