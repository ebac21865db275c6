"""The juliacall transport (``ATTENTION_PORTS_JULIA_TRANSPORT=juliacall``): Julia in this process.

It needs the ``juliacall`` Python package, which runs Julia >= 1.10 through PythonCall. Nothing
here is specific to a port or an operation: it loads the same ports/julia/worker.jl (without
serving), and hands ``JuliaPortWorker.call_bytes`` the very request body the worker transport
writes to its pipe, then decodes the reply body with the same code (attention_ports/runtimes/protocol.py).
So ports see exactly the same arguments either way, and only two plain byte vectors cross
PythonCall.

A call cannot be interrupted in-process, so there are no timeouts, no restarts and no output
capture here: use the worker transport for ports that might hang, crash or print.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.runtimes import protocol
from attention_ports.runtimes.impl import ImplementationError, ImplementationUnavailable, OperationMissing
from attention_ports.runtimes.protocol import Arg, Reader
from attention_ports.runtimes.supervisor import Results


class JuliacallTransport:
    last_output = ""

    def __init__(self, worker_script: Path, port: Path, *, on_hello: Any = None):
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
            raw = Reader(self._bytes(self._worker.declaration_bytes(self._module))).value()
            self._hello = protocol.Reply("H", message=f"Julia {self._version}, port {self.port}", declaration=raw)
            if on_hello is not None:
                on_hello(self._hello)
        except ValueError as exc:  # a declaration that does not check out
            self._load_error = str(exc)
        except Exception as exc:  # juliacall.JuliaError: the file does not parse or its top level threw
            self._load_error = f"cannot load {self.port}:\n{exc}"

    @staticmethod
    def _bytes(vector: Any) -> bytearray:
        return bytearray(np.asarray(vector, dtype=np.uint8).tobytes())

    def start(self) -> protocol.Reply:
        if self._load_error is not None:
            raise ImplementationError(self._load_error)
        return self._hello

    def call(self, op: str, args: list[Arg]) -> Results:
        self.start()
        body = b"".join(bytes(p) for p in protocol.encode_request_body(op, args))
        request = np.frombuffer(body, dtype=np.uint8)  # -> Julia as PyArray{UInt8}
        reply = protocol.decode_reply(self._bytes(self._worker.call_bytes(self._module, self.port, request)))
        if reply.kind == "M":
            raise OperationMissing(reply.message)
        if reply.kind == "E":
            raise ImplementationError(reply.message)
        return Results(reply.results, reply.notes, "")

    def describe(self) -> str:
        return f"juliacall (Julia {self._version})"

    def close(self) -> None:
        """Julia cannot be shut down inside a process; the loaded port is simply dropped."""
        self._module = None
