"""A port run as a command: any program that speaks the public protocol (docs/protocol.md).

``--port NAME=PATH`` with NAME other than r and julia (attention_ports/runtimes/command/manifest.py says
what PATH may be). The program runs in a worker process supervised exactly as R's and Julia's are
(attention_ports/runtimes/supervisor.py: private protocol pipes, stdout and stderr captured, its own
process group and ``$TMPDIR``, timeouts, restarts, the give-up rule, the reaper). A manifest's build
step runs first, once per implementation, in the manifest's folder.

The port declares in its greeting (a group, docs/protocol.md "Handshake") what the R and Julia
declarations hold (operations, masked_query, precision, rope_pairing: runtimes/declaration.py
checks them) and, for a command, how it stores arrays:

- ``layout = "row-major"`` (the default; C, C++, Rust, JavaScript, NumPy): the port's array has the
  reference shape, stored row-major. On the wire (which is column-major) that is the reference
  array's own bytes under the reversed dims, so this side sends ``a.T`` and reads ``.T`` back:
  no copy. A kit presents the wire dims reversed.
- ``layout = "column-major"`` (Octave, Fortran, R's own convention): the reference shape stored
  column-major: the wire's dims and order as they are.
- ``index_base`` (0 by default): what a class index's first value is; index inputs are shifted by
  it on the way in and back on the way out, and failure messages count from it.
- ``language``: how messages name the port's language ("C", "Octave").
- ``protocol``: the version it speaks (1, the default).

Values follow Julia's rules (a boolean mask becomes additive 0 / -Inf in the port's precision;
arrays and real options travel in the declared precision's storage type: float64, float32 for
float32 and the mixed forms, float16). Results are named arrays; a bare array ("") is the single
output; names the operation does not declare are dropped; integer or logical arrays are refused
for declared real outputs. Failure messages speak the port's layout and index base (PortView).

Settings: ``ATTENTION_PORTS_COMMAND_TIMEOUT`` (seconds per call, default 30),
``ATTENTION_PORTS_COMMAND_STARTUP_TIMEOUT`` (start to greeting, default 30),
``ATTENTION_PORTS_COMMAND_GIVE_UP_AFTER`` (default 2); no compile allowance (a compiled port
compiled in its build step).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.runtimes import declaration
from attention_ports.runtimes.command import manifest as manifests
from attention_ports.runtimes.declaration import Declaration, DeclarationError
from attention_ports.runtimes.impl import (
    Arrays,
    Implementation,
    ImplementationError,
    ImplementationUnavailable,
    OperationMissing,
)
from attention_ports.runtimes.protocol import VERSION, Arg, Reply
from attention_ports.runtimes.supervisor import Limits, Supervisor, output_section
from attention_ports.spec import ops
from attention_ports.spec.ops import Role
from attention_ports.spec.portview import PortView

ENV_PREFIX = "ATTENTION_PORTS_COMMAND"
DEFAULT_LIMITS = {"timeout": 30.0, "compile_allowance": 0.0, "startup_timeout": 30.0, "give_up_after": 2}
LAYOUTS = ("row-major", "column-major")
# The fields a command's declaration adds to runtimes/declaration.py's.
COMMAND_FIELDS = ("protocol", "language", "layout", "index_base")


def limits(**overrides: float | int | None) -> Limits:
    return Limits.from_env(ENV_PREFIX, **DEFAULT_LIMITS).but(**overrides)


def build(m: manifests.Manifest, name: str) -> None:
    """The manifest's build step, in its folder with a ``$TMPDIR`` of its own, its output captured
    (shown when it fails): ImplementationUnavailable."""
    if not m.build:
        return
    with tempfile.TemporaryDirectory(prefix="attention-ports-build-") as tmp:
        env = {**os.environ, "TMPDIR": tmp}
        try:
            done = subprocess.run(
                list(m.build),
                cwd=m.folder,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=m.build_timeout,
                start_new_session=True,
            )
        except OSError as exc:
            raise ImplementationUnavailable(f"{name}: cannot run the build step of {m.where}: {exc}") from None
        except subprocess.TimeoutExpired as exc:
            out = output_section((exc.output or b"").decode(errors="replace"))
            raise ImplementationUnavailable(
                f"{name}: the build step of {m.where} did not finish within {m.build_timeout:g}s{out}"
            ) from None
    if done.returncode != 0:
        out = output_section(done.stdout.decode(errors="replace"))
        raise ImplementationUnavailable(
            f"{name}: the build step of {m.where} ({' '.join(m.build)}) failed with exit code {done.returncode}{out}"
        )


def _one(raw: dict[str, Any], key: str, default: Any, kind: type | tuple[type, ...], where: str) -> Any:
    value = raw.get(key, default)
    if isinstance(value, list) and len(value) == 1:  # a length-1 vector (an Octave cell, an R vector)
        value = value[0]
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, kind):
        raise DeclarationError(f"{where}: attention_ports.{key} must be {kind_name(kind)}; got {value!r}")
    return value


def kind_name(kind: type | tuple[type, ...]) -> str:
    return "a string" if kind is str else "a whole number"


class CommandDeclaration:
    """A command port's declaration: the common fields (Declaration) and its storage conventions."""

    def __init__(self, raw: Any, where: str, default_language: str) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise DeclarationError(
                f"{where}: the greeting's declaration must be a group (T) or nothing (N); got {raw!r}"
            )
        common = {k: v for k, v in raw.items() if k not in COMMAND_FIELDS}
        self.common: Declaration = declaration.parse(common, where, "command") if common else declaration.NONE
        version = int(_one(raw, "protocol", VERSION, (int, np.integer), where))
        if version != VERSION:
            raise DeclarationError(f"{where}: speaks protocol version {version}; this suite speaks {VERSION}")
        self.language: str = _one(raw, "language", default_language, str, where)
        self.layout: str = _one(raw, "layout", "row-major", str, where)
        if self.layout not in LAYOUTS:
            raise DeclarationError(
                f"{where}: attention_ports.layout = {self.layout!r} is not one of {', '.join(LAYOUTS)}"
            )
        self.index_base = int(_one(raw, "index_base", 0, (int, np.integer), where))
        if self.index_base not in (0, 1):
            raise DeclarationError(f"{where}: attention_ports.index_base = {self.index_base} is not 0 or 1")

    def describe(self) -> str:
        text = f"{self.layout}, {self.index_base}-based"
        common = self.common.describe()
        return f"{text}; {common}" if common else text


class CommandImplementation(Implementation):
    """A port program under ``name`` (``--port NAME=PATH``), run in a supervised worker."""

    def __init__(
        self,
        name: str,
        port: Path,
        *,
        timeout: float | None = None,
        startup_timeout: float | None = None,
        give_up_after: int | None = None,
        precision: str | None = None,
    ) -> None:
        self.name = name
        try:
            self.manifest = manifests.load(port)
        except manifests.ManifestError as exc:
            raise ImplementationUnavailable(f"{name}: {exc}") from None
        self.precision_override = precision
        self._declared: CommandDeclaration | None = None
        build(self.manifest, name)
        self._supervisor = Supervisor(
            name,
            self.manifest.command,
            str(self.manifest.where),
            limits(timeout=timeout, startup_timeout=startup_timeout, give_up_after=give_up_after),
            check_hello=self._read_hello,
            cwd=str(self.manifest.folder),
        )
        try:
            hello = self._supervisor.start()
        except ImplementationError as exc:
            self._supervisor.close()
            raise ImplementationUnavailable(str(exc)) from None
        self._description = hello.message

    def _read_hello(self, hello: Reply) -> None:
        raw = hello.declaration if hello.declaration is not None else self.manifest.declaration
        self._declared = CommandDeclaration(raw, str(self.manifest.where), self.manifest.language)

    @property
    def declared(self) -> CommandDeclaration:
        assert self._declared is not None  # the constructor started the port
        return self._declared

    @property
    def declaration(self) -> Declaration:
        return self.declared.common

    @property
    def masked_query(self) -> str:  # type: ignore[override]
        return self.declaration.masked_query

    @property
    def rope_pairing(self) -> str:  # type: ignore[override]
        return self.declaration.rope_pairing

    @property
    def precision(self) -> str:
        """The arithmetic the port is run and judged in: ``verify --precision``'s, else its declaration's."""
        return self.precision_override or self.declaration.precision

    @property
    def storage(self) -> type:
        return {"float64": np.float64, "float16": np.float16}.get(self.precision, np.float32)

    @property
    def last_output(self) -> str:  # type: ignore[override]
        return self._supervisor.last_output

    @property
    def supervisor(self) -> Supervisor:
        return self._supervisor

    # -- layout --------------------------------------------------------------------------------------
    def to_wire(self, array: np.ndarray) -> np.ndarray:
        """Reference layout -> what goes on the wire (whose dims are column-major)."""
        return array.T if self.declared.layout == "row-major" else array

    def from_wire(self, array: np.ndarray) -> np.ndarray:
        return array.T if self.declared.layout == "row-major" else array

    def build_call(self, spec: ops.OpSpec, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> list[Arg]:
        """Positional: the required arrays, each group, the positional options; by name: the optional
        arrays present and the options that are not None (every argument carries its name)."""
        storage, base = self.storage, self.declared.index_base

        def array(name: str) -> np.ndarray:
            a = np.asarray(inputs[name])
            role = spec.role(name)
            if a.dtype == np.bool_:
                if role is Role.SCORES:  # masks travel additive, as the contract promises ports
                    a = np.where(a, 0.0, -np.inf).astype(storage)
            elif a.dtype.kind in "iu":
                # asarray: a 0-D index (ignore_index) plus the base is a NumPy scalar, which would
                # travel as an integer scalar, not the 0-D integer array docs/protocol.md promises
                a = np.asarray(a.astype(np.int64, copy=False) + (base if role is Role.INDEX else 0))
            else:
                a = a.astype(storage, copy=False)
            return self.to_wire(a)

        def group(name: str) -> dict[str, np.ndarray]:
            return {m: array(f"{name}.{m}") for m in spec.groups[name] if f"{name}.{m}" in inputs}

        def option(value: Any) -> Any:
            if isinstance(value, np.generic):
                value = value.item()
            if isinstance(value, list | tuple | np.ndarray):
                return [option(v) for v in value]
            if type(value) is float and storage is not np.float64:  # keeps the port's arithmetic
                return storage(value)
            return value

        args = [Arg("p", n, array(n)) for n in spec.args]
        args += [Arg("p", g, group(g)) for g in spec.groups]
        args += [Arg("p", n, option(options.get(n))) for n in spec.positional_options]
        args += [Arg("k", n, array(n)) for n in spec.kwargs if n in inputs]
        args += [Arg("k", n, option(options[n])) for n in spec.options if options.get(n) is not None]
        return args

    def unpack(self, spec: ops.OpSpec, results: Mapping[str, np.ndarray]) -> Arrays:
        wanted = ", ".join(spec.outputs)
        out: Arrays = {}
        for name, array in results.items():
            if name == "" and len(spec.outputs) == 1:
                name = spec.outputs[0]
            elif name == "":
                raise ImplementationError(f"{spec.name} returned one unnamed array; it owes the named outputs {wanted}")
            if not (name in spec.outputs or name.split(".", 1)[0] in spec.outputs):
                continue
            role = spec.role(name)
            a = self.from_wire(array)
            if role is Role.INDEX:
                a = a.astype(np.float64) - self.declared.index_base
            elif a.dtype.kind not in "f":
                kind = "logical" if a.dtype == np.bool_ else "integer"
                raise ImplementationError(
                    f"{spec.name}: output '{name}' is a {kind} array; the contract wants real numbers"
                )
            out[name] = a.astype(np.float64)  # float32 / float16 / bfloat16 widen exactly
        if not out:
            got = ", ".join(repr(n) for n in results) or "nothing"
            raise ImplementationError(
                f"{spec.name} returned none of its outputs (it returned: {got}); expected {wanted}"
            )
        return out

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        spec = ops.get(op)
        declared = self.declaration
        where = self.manifest.where
        if not declared.offers(op):
            raise OperationMissing(f"{op} is not among the operations {where} declares")
        try:
            results = self._supervisor.call(op, self.build_call(spec, inputs, options))
        except OperationMissing:
            if declared.operations is None:
                raise
            raise ImplementationError(
                f"{op} is declared in the operations of {where} but the port answers it is missing"
            ) from None
        self.last_seconds = results.seconds
        return self.unpack(spec, results.arrays)

    def view(self, op: str, output: str) -> PortView | None:
        """The port's own names: its language, the reference axes (both layouts keep them), its base."""
        try:
            role = ops.get(op).role(output)
        except KeyError:
            role = None
        return PortView(self.declared.language, output, role, base=self.declared.index_base)

    def describe(self) -> str:
        m = self.manifest
        text = f"{self.name}: {self._description} ({m.language} port {m.where}; {self.declared.describe()})"
        if self.precision_override:
            text += f"; run in {self.precision_override} (verify --precision)"
        return text

    def close(self) -> None:
        self._supervisor.close()
