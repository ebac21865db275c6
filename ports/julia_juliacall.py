"""The juliacall transport (``ATTENTION_PORTS_JULIA_TRANSPORT=juliacall``): Julia in this process.

It needs the ``juliacall`` Python package, which runs Julia >= 1.10 through PythonCall. Nothing
here is specific to a port or an operation: it loads the same ports/julia/worker.jl (without
serving), and hands ``JuliaPortWorker.call_bytes`` the very request bytes the worker transport
writes to its pipe, then decodes the reply bytes with the same code (ports/julia_adapter.py). So
ports see exactly the same arguments either way, and only two plain byte vectors cross PythonCall.

A call cannot be interrupted in-process, so there are no timeouts here: use the worker transport
for ports that might hang.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from attention_ports.impl import ImplementationError, ImplementationUnavailable
from ports.julia_adapter import JuliaValue, Message, encode_request


class JuliacallTransport:
    def __init__(self, worker_script: Path, port: Path):
        try:
            from juliacall import Main as jl  # type: ignore[import-not-found]
        except Exception as exc:
            raise ImplementationUnavailable(
                "julia: the juliacall transport needs the juliacall package (pip install juliacall), which runs "
                f"Julia >= 1.10 with PythonCall; or unset ATTENTION_PORTS_JULIA_TRANSPORT to use the worker ({exc})"
            ) from exc
        self.port = str(port)
        jl.include(str(worker_script))  # defines the module JuliaPortWorker; serves only when run as a script
        self._worker = jl.JuliaPortWorker
        self._version = str(jl.seval("string(VERSION)"))
        self._load_error: str | None = None
        try:
            self._module = self._worker.load_port(self.port)
        except Exception as exc:  # juliacall.JuliaError: the file does not parse or its top level threw
            self._load_error = f"cannot load {self.port}:\n{exc}"

    def call(self, op: str, args: list[JuliaValue], kwargs: list[tuple[str, JuliaValue]]) -> dict[str, np.ndarray]:
        if self._load_error is not None:
            raise ImplementationError(self._load_error)
        request = np.frombuffer(encode_request(op, args, kwargs), dtype=np.uint8)  # -> Julia as PyArray{UInt8}
        reply = self._worker.call_bytes(self._module, self.port, request)  # a Julia Vector{UInt8}
        return Message(bytearray(np.asarray(reply, dtype=np.uint8).tobytes())).results()

    def describe(self) -> str:
        return f"juliacall (Julia {self._version})"

    def close(self) -> None:
        """Julia cannot be shut down inside a process; the loaded port is simply dropped."""
        self._module = None
