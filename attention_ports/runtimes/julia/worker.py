"""The worker transport: one supervised ``julia ports/julia/worker.jl PORT`` process per port.

The process is started on the first call, loads the port once, and answers one request at a
time over the protocol of :mod:`attention_ports.runtimes.protocol`; :mod:`attention_ports.runtimes.supervisor`
does everything else (timeouts, restarts, give-up, output capture, reaping). Arrays travel as
raw float64 (or int64) bytes: Python sends an array's column-major bytes with its Julia shape and
reads replies the same way; for the reference layout's C-order arrays, whose Julia layout is the
reversed-axes transpose, those are the array's own bytes, so nothing is copied or transposed.

Settings (environment, or the JuliaImplementation arguments of the same names):

- ``ATTENTION_PORTS_JULIA_TIMEOUT``: seconds per call (default 30);
- ``ATTENTION_PORTS_JULIA_COMPILE_ALLOWANCE``: extra seconds for the first call of each operation,
  which compiles it (default 60); granted once per operation, not again after a restart;
- ``ATTENTION_PORTS_JULIA_STARTUP_TIMEOUT``: seconds from starting julia to the port loaded
  (default 60);
- ``ATTENTION_PORTS_JULIA_GIVE_UP_AFTER``: consecutive timeouts or failed starts after which the
  port's remaining calls fail at once (default 2).

So a Julia port that hangs in every call costs at most 30 + 60 s for its first operation and as
much again for a second one (two timeouts), one that hangs while loading 2 x 60 s.

System image: when ``make setup`` has built a custom image for this julia and this worker.jl
(attention_ports/runtimes/julia/sysimage.py says when one matches), the worker starts on it (``-J``) and runs the
image's own copy of the worker module; otherwise on julia's stock image. Only compile time
differs: the port is always loaded fresh from its file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attention_ports.runtimes.julia import sysimage as julia_sysimage
from attention_ports.runtimes.protocol import Arg, Reply
from attention_ports.runtimes.supervisor import Limits, Results, Supervisor

ENV_PREFIX = "ATTENTION_PORTS_JULIA"
DEFAULT_LIMITS = {"timeout": 30.0, "compile_allowance": 60.0, "startup_timeout": 60.0, "give_up_after": 2}
# -O1: measured on ~50 mixed cases from a cold start (Julia 1.5.3, 2 cores), JIT drops from ~3.3s
# to ~2.0s; warm calls on small inputs are as fast (~0.15 ms a round trip), large ones (256
# tokens) 2-3x slower, which verification never meets. --compile=min starts faster still but
# interprets every call (~18 ms each instead of ~0.2 ms), so it loses as soon as cases repeat.
JULIA_FLAGS = ("--startup-file=no", "--history-file=no", "--color=no", "--banner=no", "-O1")


def limits(**overrides: float | int | None) -> Limits:
    """The Julia worker's limits: the defaults, the environment, then ``overrides`` (None = keep)."""
    return Limits.from_env(ENV_PREFIX, **DEFAULT_LIMITS).but(**overrides)


class WorkerTransport:
    """One julia worker process for one port, run by a :class:`Supervisor`."""

    def __init__(
        self,
        julia: str,
        worker_script: Path,
        port: Path,
        *,
        limits: Limits,
        on_hello: Any = None,
        sysimage: str | Path = "auto",
        extra_flags: Sequence[str] = (),
    ) -> None:
        """``sysimage``: "auto" (a matching custom image if there is one), "stock", or the path of an
        image known to hold this ``worker_script``'s module (the image build's own check)."""
        self.julia = julia
        if sysimage == "auto":
            found = julia_sysimage.find(julia) if worker_script == julia_sysimage.WORKER else None
            self.sysimage = found.path if found is not None else None
        else:
            self.sysimage = None if sysimage == "stock" else Path(sysimage)
        self.worker_script, self.extra_flags = worker_script, tuple(extra_flags)
        self.supervisor = Supervisor("julia", self._argv(port), str(port), limits, check_hello=on_hello)

    def _argv(self, port: Path) -> list[str]:
        flags = (*JULIA_FLAGS, *self.extra_flags)
        if self.sysimage is None:
            return [self.julia, *flags, str(self.worker_script), str(port)]
        return [self.julia, *flags, "-J", str(self.sysimage), "-e", julia_sysimage.ENTRY, str(port)]

    def reload(self, port: Path) -> Reply:
        """Serve ``port`` from now on: loaded in place by the running worker (a 'P' request, saving a
        start: ~0.2 s of CPU), which refuses when the previous port changed its session (worker.jl,
        ``session_state``), and a fresh worker then; raises like :meth:`start`."""
        return self.supervisor.reload(self._argv(port), str(port), [str(port)])

    @property
    def pid(self) -> int | None:
        return self.supervisor.pid

    @property
    def starts(self) -> int:
        return self.supervisor.starts

    @property
    def last_output(self) -> str:
        return self.supervisor.last_output

    def start(self) -> Reply:
        return self.supervisor.start()

    def call(self, op: str, args: list[Arg]) -> Results:
        return self.supervisor.call(op, args)

    def describe(self) -> str:
        hello = self.supervisor.hello
        image = f"system image {self.sysimage}" if self.sysimage is not None else "stock system image"
        return f"worker {self.julia}, {image}" + (f" ({hello.message})" if hello is not None else "")

    def close(self) -> None:
        self.supervisor.close()
