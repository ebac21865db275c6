"""The worker transport: one long-lived ``julia ports/julia/worker.jl PORT`` process per adapter.

The process starts on the first call, loads the port once, and answers one request at a time on
plain stdin/stdout with the small binary protocol described at the top of worker.jl. Arrays travel
as raw float64 (or int64) bytes: Python sends an array's column-major bytes with its Julia shape and reads
replies the same way; for the reference layout's C-order arrays, whose Julia layout is the
reversed-axes transpose, those are the array's own bytes, so nothing is copied or transposed.

Timeouts and failures (every one is an ImplementationError for the call that met it):

- each call has ``timeout`` seconds (``ATTENTION_PORTS_JULIA_TIMEOUT``, default 30); the first
  call of each operation on a fresh process gets ``compile_allowance`` more
  (``ATTENTION_PORTS_JULIA_COMPILE_ALLOWANCE``, default 60) because it includes JIT compilation;
  starting the process, up to loading the port, has ``startup_timeout``
  (``ATTENTION_PORTS_JULIA_STARTUP_TIMEOUT``, default 120);
- a call that runs past its time: "julia worker timed out after Xs in OP"; the process group is
  killed and reaped, and the next call starts a new worker;
- a worker that dies while a call is in flight: "julia worker died (exit code N) in OP"; the next
  call starts a new worker;
- a worker found dead *between* calls (killed from outside, or it exited) is replaced
  transparently: the call that finds it so runs on a new worker and nothing is reported. "Dead"
  means exited (waitpid): a call that starts while a killed worker is still exiting may report
  "died" instead, like a kill during a call;
- a port file that does not load: every call reports the load error; no restarts.

julia's stderr (including what a port prints: the worker points Julia's ``stdout`` at stderr) is
drained by a thread into a bounded buffer, whose tail is added to error messages.
"""

from __future__ import annotations

import collections
import fcntl
import math
import os
import select
import signal
import struct
import subprocess
import threading
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.impl import ImplementationError
from ports.julia_adapter import JuliaValue, Message, encode_request

TIMEOUT_ENV = "ATTENTION_PORTS_JULIA_TIMEOUT"
COMPILE_ALLOWANCE_ENV = "ATTENTION_PORTS_JULIA_COMPILE_ALLOWANCE"
STARTUP_TIMEOUT_ENV = "ATTENTION_PORTS_JULIA_STARTUP_TIMEOUT"
# -O1: measured on ~50 mixed cases from a cold start (Julia 1.5.3, 2 cores), JIT drops from ~3.3s
# to ~2.0s; warm calls on small inputs are as fast (~0.15 ms a round trip), large ones (256
# tokens) 2-3x slower, which verification never meets. --compile=min starts faster still but
# interprets every call (~18 ms each instead of ~0.2 ms), so it loses as soon as cases repeat.
JULIA_FLAGS = ("--startup-file=no", "--history-file=no", "--color=no", "--banner=no", "-O1")
F_SETPIPE_SZ = 1031  # Linux fcntl
PIPE_SIZE = 1 << 20
STDERR_KEEP = 64 * 1024  # bytes of julia's stderr kept for error messages
STDERR_SHOWN = 4000  # characters of it shown in one message


def _env_seconds(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number of seconds") from None
    if value <= 0:
        raise ValueError(f"{name}={raw!r} must be positive")
    return value


def _ready(fd: int, event: int, timeout: float) -> bool:
    """Whether ``fd`` is ready for ``event`` (or hung up / failed) within ``timeout`` seconds."""
    poller = select.poll()
    poller.register(fd, event)
    return bool(poller.poll(max(0, math.ceil(timeout * 1000))))


class _StderrTail:
    """Drains julia's stderr on a daemon thread, keeping its last STDERR_KEEP bytes."""

    def __init__(self, stream: Any):
        self._stream = stream  # unbuffered FileIO: read() returns what is there, b"" at EOF
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0  # bytes held in _chunks
        self.total = 0  # bytes read since the start
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._drain, name="julia-stderr", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = self._stream.read(65536)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            with self._lock:
                self._chunks.append(chunk)
                self._size += len(chunk)
                self.total += len(chunk)
                while self._size - len(self._chunks[0]) >= STDERR_KEEP:
                    self._size -= len(self._chunks.popleft())

    def text(self, since: int = 0) -> str:
        """What is kept of the output, or of the output after the first ``since`` bytes."""
        with self._lock:
            data = b"".join(self._chunks)
            fresh = self.total - since
        return data[-min(fresh, STDERR_KEEP) :].decode(errors="replace") if fresh > 0 else ""

    def settle(self, limit: float = 0.1) -> None:
        """Give the thread up to ``limit`` seconds to read what is already in the pipe."""
        end = time.monotonic() + limit
        while time.monotonic() < end and _ready(self._stream.fileno(), select.POLLIN, 0):
            time.sleep(0.002)

    def close(self) -> None:
        """After the process is gone: let the thread reach EOF, then close the pipe."""
        self._thread.join(2.0)
        if not self._thread.is_alive():  # else something else still holds the pipe open
            self._stream.close()


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"exit code {code}, killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"exit code {code}"
    return f"exit code {code}"


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the worker's process group and reap it (no zombies); stderr is _StderrTail's."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL is not ignorable
        pass
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            try:
                pipe.close()
            except OSError:
                pass


class _Timeout(Exception):
    pass


class _Died(Exception):
    pass


class WorkerTransport:
    """Talks to one julia worker process, restarting it after a crash or a timeout."""

    def __init__(
        self,
        julia: str,
        worker_script: Path,
        port: Path,
        *,
        timeout: float | None = None,
        compile_allowance: float | None = None,
        startup_timeout: float | None = None,
    ):
        self.julia, self.worker_script, self.port = julia, Path(worker_script), Path(port)
        self.timeout = timeout if timeout is not None else _env_seconds(TIMEOUT_ENV, 30.0)
        self.compile_allowance = (
            compile_allowance if compile_allowance is not None else _env_seconds(COMPILE_ALLOWANCE_ENV, 60.0)
        )
        self.startup_timeout = (
            startup_timeout if startup_timeout is not None else _env_seconds(STARTUP_TIMEOUT_ENV, 120.0)
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._stderr: _StderrTail | None = None
        self._compiled: set[str] = set()  # operations already called on this process
        self._load_error: str | None = None
        self._hello = ""
        self.starts = 0  # how many worker processes this transport has started
        self._finalizer: weakref.finalize | None = None

    # -- process ------------------------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        proc = subprocess.Popen(
            [self.julia, *JULIA_FLAGS, str(self.worker_script), str(self.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
            start_new_session=True,  # its own process group, killed as a whole
        )
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        for pipe in (proc.stdin, proc.stdout):
            try:
                fcntl.fcntl(pipe.fileno(), F_SETPIPE_SZ, PIPE_SIZE)
            except OSError:  # above /proc/sys/fs/pipe-max-size for an unprivileged user
                pass
        os.set_blocking(proc.stdin.fileno(), False)
        self._proc, self._stderr = proc, _StderrTail(proc.stderr)
        self._compiled = set()
        self.starts += 1
        self._finalizer = weakref.finalize(self, _kill, proc)
        try:
            hello = self._read_message(time.monotonic() + self.startup_timeout)
        except _Timeout:
            self._discard()
            raise ImplementationError(
                f"julia worker did not start within {self.startup_timeout:g}s{self._tail()}"
            ) from None
        except _Died:
            code = self._discard()
            raise ImplementationError(f"julia worker failed to start ({_exit_text(code)}){self._tail()}") from None
        if hello.kind == b"L":
            self._load_error = hello.str()
            self._discard()
            return
        if hello.kind != b"H":
            self._discard()
            raise ImplementationError(f"julia worker sent {hello.kind!r} instead of its greeting{self._tail()}")
        self._hello = hello.str()

    def _discard(self) -> int | None:
        """Kill and reap the current process; return its exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        _kill(proc)
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if self._stderr is not None:
            self._stderr.close()
        return proc.returncode

    def _tail(self) -> str:
        text = self._stderr.text().strip() if self._stderr is not None else ""
        if not text:
            return ""
        if len(text) > STDERR_SHOWN:
            text = "..." + text[-STDERR_SHOWN:]
        return f"\n--- julia stderr (tail) ---\n{text}"

    # -- I/O ----------------------------------------------------------------------------------------
    def _write(self, data: bytes, deadline: float) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        fd = self._proc.stdin.fileno()
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout
            if not _ready(fd, select.POLLOUT, remaining):
                continue
            try:
                n = os.write(fd, view)
            except BlockingIOError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise _Died from None
            view = view[n:]

    def _read_exact(self, n: int, deadline: float) -> bytearray:
        assert self._proc is not None and self._proc.stdout is not None
        stream = self._proc.stdout
        fd = stream.fileno()
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout
            if not _ready(fd, select.POLLIN, remaining):
                continue
            k = stream.readinto(view[got:])
            if not k:
                raise _Died
            got += k
        return buf

    def _read_message(self, deadline: float) -> Message:
        (length,) = struct.unpack("<Q", self._read_exact(8, deadline))
        return Message(self._read_exact(length, deadline))

    # -- calls --------------------------------------------------------------------------------------
    def call(self, op: str, args: list[JuliaValue], kwargs: list[tuple[str, JuliaValue]]) -> dict[str, np.ndarray]:
        if self._load_error is not None:
            raise ImplementationError(self._load_error)
        request = encode_request(op, args, kwargs)
        if self._proc is not None and self._proc.poll() is not None:
            self._discard()  # died between calls: replace it without failing this call
        if self._proc is None:
            self._start()
            if self._load_error is not None:
                raise ImplementationError(self._load_error)
        seconds = self.timeout + (self.compile_allowance if op not in self._compiled else 0.0)
        assert self._stderr is not None
        mark = self._stderr.total
        deadline = time.monotonic() + seconds
        try:
            try:
                self._write(request, deadline)
            except _Died:
                # It died before reading this request (so it never ran it): one fresh worker.
                self._discard()
                self._start()
                if self._load_error is not None:
                    raise ImplementationError(self._load_error) from None
                seconds, mark = self.timeout + self.compile_allowance, 0
                deadline = time.monotonic() + seconds
                self._write(request, deadline)
            reply = self._read_message(deadline)
        except _Timeout:
            self._discard()
            tail = self._tail()
            raise ImplementationError(
                f"julia worker timed out after {seconds:g}s in {op}; it was killed and the next call "
                f"starts a new one{tail}"
            ) from None
        except _Died:
            proc = self._proc
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            code = self._discard()
            tail = self._tail()
            raise ImplementationError(
                f"julia worker died ({_exit_text(code)}) in {op}; the next call starts a new one{tail}"
            ) from None
        self._compiled.add(op)
        if reply.kind not in (b"R", b"M", b"E"):
            self._discard()
            raise ImplementationError(f"julia worker sent an unknown reply {reply.kind!r} in {op}{self._tail()}")
        if reply.kind == b"E" and self._stderr is not None:  # what the port printed helps read its error
            self._stderr.settle()
            printed = self._stderr.text(since=mark).strip()
            if printed:
                printed = printed if len(printed) <= STDERR_SHOWN else "..." + printed[-STDERR_SHOWN:]
                raise ImplementationError(f"{reply.str()}\n--- julia output during this call ---\n{printed}")
        return reply.results()

    def describe(self) -> str:
        return f"worker {self.julia}" + (f" ({self._hello})" if self._hello else "")

    def close(self) -> None:
        """Ask the worker to quit, then make sure it is gone and reaped; safe to call twice."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None and proc.stdin is not None:
            try:
                os.set_blocking(proc.stdin.fileno(), True)
                proc.stdin.write(b"Q")
                proc.stdin.close()
                proc.wait(timeout=2)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        self._discard()
