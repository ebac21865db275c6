"""How a foreign runtime is supervised: the life cycle of every worker process, R's and Julia's.

A port (R or Julia code we did not write) runs in a worker process of its own, one per port:
``julia ports/julia/worker.jl PORT`` or ``python -m attention_ports.runtimes.r.worker PORT``. This module starts it,
talks to it (:mod:`attention_ports.runtimes.protocol`), watches it, and ends it. Nothing a port does can
reach this process: it can only make its own calls fail.

Start
  The worker gets two private pipes for the protocol (``pass_fds``; their numbers in
  ``$ATTENTION_PORTS_WORKER_FDS`` as "REQUEST,REPLY"), ``/dev/null`` as stdin, and one captured pipe
  as both stdout and stderr, so whatever the port prints (``println``, ``Core.println``,
  ``run(`echo`)``, a C ``write(1, ...)``, ``cat``, ``system("echo")``) lands in its output and
  never in a reply. It runs in a session (process group) of its own. It must die with us: first
  thing, it sets ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` and exits if ``getppid()`` is no longer
  ``$ATTENTION_PORTS_PARENT_PID`` (we died before the prctl); :func:`die_with_parent` does both for
  a Python worker, worker.jl for Julia. Linux sends the parent-death signal when the *thread* that
  forked the child ends, not the process; so every worker is forked by one long-lived thread here
  (:class:`_Spawner`), whichever thread asks: a worker started from a thread pool's thread does
  not die when that thread does. The worker then loads the port and greets ('H', or 'L' when the
  port cannot be loaded) within ``startup_timeout``.

Calls
  One at a time (a lock), each with a deadline: ``timeout`` seconds, plus ``compile_allowance`` the
  first time an operation is called through this supervisor (Julia compiles it then). A restart
  grants it again only to operations that have finished before (they must compile again on the
  new process, and are known to end); an operation that only ever timed out never gets it twice,
  so a hanging operation costs ``timeout + compile_allowance`` once, then ``timeout``. While
  waiting, the port's output is drained into a bounded buffer (the last :data:`OUTPUT_KEEP`
  bytes); what a call printed before its reply is ``last_output`` and is appended (at most
  :data:`OUTPUT_SHOWN` characters) to any error of that call. Every failure is an
  ``ImplementationError`` for that call only:

  - past its deadline: "NAME worker timed out after Xs in OP"; the process group is killed;
  - the worker died during the call (a crash, a quit, a signal): "NAME worker died (...) in OP";
  - a reply that is garbage, too long, or answers another request: "malformed reply"; killed;
  - the next call starts a new worker. A worker found dead *between* calls is replaced without
    failing anything.

Give-up rule
  After ``give_up_after`` (default 2, ``$PREFIX_GIVE_UP_AFTER``) consecutive timeouts or failed
  starts (a start that crashes, or does not greet within ``startup_timeout``), the supervisor gives
  up: every later call fails at once with the reason, and nothing is started again. Any completed
  call resets the count. A port that cannot be loaded (syntax error, an error at its top level, a
  bad declaration) is not retried either: every call reports the load error. So a port that hangs
  in every call costs two timeouts, and one that hangs while loading two start-up timeouts.

End
  :meth:`Supervisor.close` asks the worker to quit, waits briefly, then kills its whole process
  group *before* reaping it (the zombie leader keeps the group id from being reused), so a
  background process the port left behind dies too, even after a clean exit; every child is
  reaped (no zombies). :func:`shutdown_all` kills every live worker group at once without taking
  any lock: call it from a SIGINT/SIGTERM handler; it also runs at exit, and
  :func:`shutdown_on_sigterm` makes a default SIGTERM run it first (the pytest plugin does). What
  a port moved out of its worker's group (``setsid``, a double fork, ``nohup ... &`` then
  ``setsid``) is adopted by this process, a child subreaper on Linux, and killed and reaped with
  its worker on every one of these paths (:mod:`attention_ports.runtimes.reaper`: which processes, and its
  limits). Only SIGKILL of this process leaves a background process behind (only the worker has
  the parent-death signal). Each worker's ``$TMPDIR`` is a folder of its own, removed on every
  one of these paths once the worker is gone: R and Julia remove their temporary folders only on a
  clean exit, and a killed worker would leave one behind in the user's ``/tmp`` each time. SIGKILL
  of this process leaves that folder too.
"""

from __future__ import annotations

import atexit
import collections
import dataclasses
import math
import os
import queue
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from attention_ports.runtimes import protocol, reaper
from attention_ports.runtimes.impl import ImplementationError, OperationMissing
from attention_ports.runtimes.protocol import F_SETPIPE_SZ, PIPE_SIZE, Arg, Part, ProtocolError, Reply

FDS_ENV = "ATTENTION_PORTS_WORKER_FDS"
PARENT_ENV = "ATTENTION_PORTS_PARENT_PID"
OUTPUT_KEEP = 256 * 1024  # bytes of a worker's output kept
OUTPUT_SHOWN = 8000  # characters of it shown in one message (the end)
QUIT_GRACE = 2.0  # seconds a worker has to leave after a quit request before its group is killed
PR_SET_PDEATHSIG = 1
EXIT_ORPHANED = 70  # what a worker exits with when its parent died before it could set PDEATHSIG


# --- settings -------------------------------------------------------------------------------------
def _env_number(name: str, default: float, kind: type = float, *, zero: bool = False) -> Any:
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        what = "a whole number" if kind is int else "a number of seconds"
        raise ValueError(f"{name}={raw!r} is not {what}") from None
    if value < 0 or (value == 0 and not zero) or (kind is float and not math.isfinite(value)):
        raise ValueError(f"{name}={raw!r} must be {'zero or more' if zero else 'positive'}")
    return value


@dataclass(frozen=True)
class Limits:
    """How long a worker may take, and when to give up on it (seconds, calls)."""

    timeout: float  # per call
    compile_allowance: float  # extra for an operation's first call (granted as the module docstring says)
    startup_timeout: float  # from start until the port is loaded and the worker greets
    give_up_after: int = 2  # consecutive timeouts or failed starts

    @classmethod
    def from_env(
        cls, prefix: str, *, timeout: float, compile_allowance: float, startup_timeout: float, give_up_after: int = 2
    ) -> Limits:
        """The defaults given, each overridden by ``$PREFIX_TIMEOUT``, ``$PREFIX_COMPILE_ALLOWANCE``,
        ``$PREFIX_STARTUP_TIMEOUT`` and ``$PREFIX_GIVE_UP_AFTER`` when set."""
        return cls(
            _env_number(f"{prefix}_TIMEOUT", timeout),
            _env_number(f"{prefix}_COMPILE_ALLOWANCE", compile_allowance, zero=True),
            _env_number(f"{prefix}_STARTUP_TIMEOUT", startup_timeout),
            _env_number(f"{prefix}_GIVE_UP_AFTER", give_up_after, int),
        )

    def but(self, **overrides: float | int | None) -> Limits:
        """These limits with the overrides that are not None."""
        return dataclasses.replace(self, **{k: v for k, v in overrides.items() if v is not None})


@dataclass
class Results:
    arrays: dict[str, np.ndarray]
    notes: str  # R warnings, one per line
    output: str  # what the port printed during the call
    seconds: float | None = None  # the port's own call, timed in the worker (None: not reported)


# --- the child's side -------------------------------------------------------------------------------
def die_with_parent() -> None:
    """In a worker process: be SIGKILLed when the parent dies; exit now if it already has."""
    import ctypes

    expected = os.environ.get(PARENT_ENV)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if expected and os.getppid() != int(expected):  # it died between our fork and the prctl
        os._exit(EXIT_ORPHANED)


def worker_fds() -> tuple[int, int]:
    """In a worker process: the (request, reply) descriptors, no longer inherited by its children."""
    raw = os.environ.get(FDS_ENV, "")
    try:
        request, reply = (int(x) for x in raw.split(","))
    except ValueError:
        raise SystemExit(f"${FDS_ENV}={raw!r}: this program is started by attention_ports.supervisor") from None
    os.set_inheritable(request, False)
    os.set_inheritable(reply, False)
    return request, reply


# --- processes ------------------------------------------------------------------------------------
class _Spawner:
    """Forks every worker from one long-lived thread (PR_SET_PDEATHSIG follows the forking thread)."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], list[Any], threading.Event]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, fn: Callable[[], Any]) -> Any:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="attention-ports-spawner", daemon=True)
                self._thread.start()
        if threading.current_thread() is self._thread:
            return fn()
        box: list[Any] = []
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()
        ok, value = box[0]
        if ok:
            return value
        raise value

    def _serve(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed to the caller's thread
                box.append((False, exc))
            done.set()


_SPAWNER = _Spawner()
# pid (= process group id) of every live worker, for shutdown_all; plain ints, no locks needed.
_LIVE: dict[int, str] = {}
# pid -> the worker's $TMPDIR, until it is removed (after the worker and its processes are gone).
_TMPDIRS: dict[int, str] = {}
# A forked child (multiprocessing) has no workers: its exit must not kill its parent's, nor remove
# their folders.
os.register_at_fork(after_in_child=_LIVE.clear)
os.register_at_fork(after_in_child=_TMPDIRS.clear)


def _remove_tmpdir(pid: int, path: str) -> None:
    """The worker's temporary folder, once nothing of it runs (what a port left there goes too)."""
    if _TMPDIRS.get(pid) == path:
        del _TMPDIRS[pid]
    _remove_folder(path)


def _remove_folder(path: str) -> None:
    """Remove a worker's folder, whatever the port made of it: a folder (with all it holds), or a
    symbolic link the port put in its place, removed as a link: the folder it points to is not
    ours, and stays untouched (rmtree refuses a link, and used to leave it behind)."""
    if os.path.islink(path):
        try:
            os.unlink(path)
        except OSError:
            pass
        return
    shutil.rmtree(path, ignore_errors=True)


def shutdown_all() -> None:
    """Kill every live worker's process group now and reap what has exited; takes no lock, so a
    signal handler may call it (then exit: the supervisors are unusable afterwards)."""
    pids = list(_LIVE)
    for pid in pids:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    # what the workers moved out of their groups (reaper): killed and reaped; the workers themselves
    # are left to the loop below
    reaper.sweep_run(roots=pids, keep=pids)
    end = time.monotonic() + 1.0
    for pid in pids:
        while True:
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                break
            if done or time.monotonic() > end:
                break
            time.sleep(0.005)
        _LIVE.pop(pid, None)
        tmpdir = _TMPDIRS.get(pid)
        if tmpdir is not None:
            _remove_tmpdir(pid, tmpdir)


atexit.register(shutdown_all)


def shutdown_on_sigterm() -> None:
    """Where SIGTERM still ends this process by default (no handler runs, nor ``atexit``: pytest
    installs none), have it first kill every worker and what it left behind (:func:`shutdown_all`),
    then end this process by SIGTERM as before. Does nothing outside the main thread (signals are
    handled there) or where a handler is installed already (it is the host's to call shutdown_all)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _shutdown_then_die)


def _shutdown_then_die(signum: int, _frame: object) -> None:
    shutdown_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


class _Output:
    """A worker's stdout and stderr (one pipe): drained without blocking, the last OUTPUT_KEEP bytes kept."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.open = True
        self.total = 0  # bytes read since the start
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._ready = select.poll()
        self._ready.register(fd, select.POLLIN)

    def drain_ready(self) -> None:
        """Drain, when there is anything to read (a poll costs less than a read that would block)."""
        if self.open and self._ready.poll(0):
            self.drain()

    def drain(self) -> None:
        while self.open:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.open = False  # EOF: no process holds the pipe any more
                return
            self._chunks.append(chunk)
            self._size += len(chunk)
            self.total += len(chunk)
            while self._size - len(self._chunks[0]) >= OUTPUT_KEEP:
                self._size -= len(self._chunks.popleft())

    def since(self, mark: int) -> str:
        fresh = self.total - mark
        if fresh <= 0:
            return ""
        data = b"".join(self._chunks)
        kept = data[-fresh:] if fresh < len(data) else data
        lost = fresh - len(kept)
        text = kept.decode(errors="replace")
        return (f"[... {lost} earlier bytes not kept ...]\n" if lost else "") + text


def output_section(text: str) -> str:
    """What a port printed, as a block to append to a message ("" when it printed nothing)."""
    text = text.strip("\n")
    if not text.strip():
        return ""
    if len(text) > OUTPUT_SHOWN:
        text = f"[... {len(text) - OUTPUT_SHOWN} earlier characters not shown ...]\n" + text[-OUTPUT_SHOWN:]
    return f"\n--- the port's output during this call (stdout and stderr) ---\n{text}"


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit status unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Timeout(Exception):
    pass


class _Died(Exception):
    pass


class _Process:
    """One started worker: its Popen, our ends of its pipes, a pidfd to see it exit."""

    def __init__(
        self, popen: subprocess.Popen[bytes], request: int, reply: int, output: int, token: str, tmpdir: str
    ) -> None:
        self.popen, self.request, self.reply = popen, request, reply
        self.tmpdir = tmpdir  # its $TMPDIR, removed with it (end)
        self.token = token  # its $ATTENTION_PORTS_REAP, inherited by whatever it starts (reaper)
        self.output = _Output(output)
        self.printing = True  # whether the poll that found the last reply found output too (_wait)
        self.ended = False
        self._pollers: dict[tuple[int, int, bool], select.poll] = {}
        try:
            self.pidfd: int | None = os.pidfd_open(popen.pid)
        except (AttributeError, OSError):  # Linux < 5.3, or a seccomp filter: poll in slices instead
            self.pidfd = None
        self._exit_poll = select.poll()  # kept: asked before every call (half the cost of select())
        if self.pidfd is not None:
            self._exit_poll.register(self.pidfd, select.POLLIN)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def poller(self, fd: int, event: int) -> select.poll:
        """A poll object for ``fd``/``event``, the output while it is open, and the pidfd (one per
        combination, kept: building one costs a few system calls per wait)."""
        key = (fd, event, self.output.open)
        poller = self._pollers.get(key)
        if poller is None:
            poller = select.poll()
            poller.register(fd, event)
            if self.output.open:
                poller.register(self.output.fd, select.POLLIN)
            if self.pidfd is not None:
                poller.register(self.pidfd, select.POLLIN)
            self._pollers[key] = poller
        return poller

    def exited(self) -> bool:
        """Whether the worker has exited (without reaping it: its pid keeps the group id taken)."""
        if self.popen.returncode is not None:
            return True
        if self.pidfd is not None:
            return bool(self._exit_poll.poll(0))
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def wait_exit(self, seconds: float) -> bool:
        end = time.monotonic() + seconds
        while not self.exited():
            if time.monotonic() >= end:
                return False
            if self.pidfd is not None:
                select.select([self.pidfd], [], [], max(0.0, end - time.monotonic()))
            else:
                time.sleep(0.01)
        return True

    def end(self) -> int | None:
        """Kill the whole process group (leftover background processes too) and whatever the worker
        moved out of it (reaper), reap, close: the exit code."""
        if self.ended:
            return self.popen.returncode
        self.ended = True
        if self.pid in _LIVE:  # else shutdown_all killed and reaped it: its pid may be another's now
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except OSError:  # nothing left in the group
                pass
            reaper.sweep(self.token, roots=[self.pid], keep=[self.pid])
        else:
            reaper.sweep(self.token)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
        self.output.drain()
        for fd in (self.request, self.reply, self.output.fd, self.pidfd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.output.open = False
        _LIVE.pop(self.pid, None)
        _remove_tmpdir(self.pid, self.tmpdir)
        return self.popen.returncode


def _end_quietly(proc: _Process) -> None:  # weakref.finalize: a supervisor dropped without close()
    proc.end()


# A worker answers one call at a time, on small arrays, beside the other implementations' workers:
# OpenBLAS threads (R's, Julia's, NumPy's in the R worker: one per core each) never speed its calls
# up and cost every start ~0.3 s of CPU, mostly in the kernel (measured: 16 Julia mutants' workers
# 20.6 -> 15.5 s of CPU, 6 R workers 7.0 -> 5.2 s, on 2 cores). A variable the caller set wins.
BLAS_DEFAULTS = {"OPENBLAS_NUM_THREADS": "1"}


def _spawn(argv: Sequence[str], env: Mapping[str, str], cwd: str | None = None) -> _Process:
    request_r, request_w = os.pipe()
    reply_r, reply_w = os.pipe()
    output_r, output_w = os.pipe()
    ours, theirs = (request_w, reply_r, output_r), (request_r, reply_w, output_w)
    for fd in (request_w, reply_w):
        try:
            import fcntl

            fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
        except OSError:  # above /proc/sys/fs/pipe-max-size for an unprivileged user
            pass
    token = reaper.new_token()
    # A temporary folder of its own: R and Julia put theirs under $TMPDIR and remove it only on a
    # clean exit, so a worker killed on a timeout (or a port's own temporary files) would otherwise
    # leave /tmp/Rtmp* behind, one per killed worker. Removed when the worker ends, however it ends.
    tmpdir = tempfile.mkdtemp(prefix="attention-ports-worker-", dir=env.get("TMPDIR") or None)
    temp = {"TMPDIR": tmpdir, "TMP": tmpdir, "TEMP": tmpdir}
    ours_env = {FDS_ENV: f"{request_r},{reply_w}", PARENT_ENV: str(os.getpid()), reaper.TOKEN_ENV: token}
    full_env = {**BLAS_DEFAULTS, **env, **temp, **ours_env}
    try:
        popen = _SPAWNER.run(
            lambda: subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=output_w,
                stderr=output_w,
                pass_fds=(request_r, reply_w),
                env=full_env,
                start_new_session=True,  # its own process group, killed as a whole
                cwd=cwd,
            )
        )
    except BaseException:
        for fd in ours:
            os.close(fd)
        _remove_folder(tmpdir)
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    for fd in ours:
        os.set_blocking(fd, False)
    _LIVE[popen.pid] = argv[0]
    _TMPDIRS[popen.pid] = tmpdir
    return _Process(popen, request_w, reply_r, output_r, token, tmpdir)


# --- the supervisor -------------------------------------------------------------------------------
class Supervisor:
    """One port's worker process: started on demand, restarted after a failure, given up on by rule.

    ``name`` ("r", "julia") starts every message; ``argv`` starts the worker; ``port`` names the
    port in messages. ``check_hello`` may inspect the greeting (the port's declaration) and raise
    ValueError, which makes it a load error. ``cwd``: the folder the worker starts in (a command
    port's manifest folder; default: this process's).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        port: str,
        limits: Limits,
        *,
        env: Mapping[str, str] | None = None,
        check_hello: Callable[[Reply], None] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.name, self.argv, self.port, self.limits = name, list(argv), port, limits
        self._cwd = cwd
        self._env = dict(env) if env is not None else None
        self._check_hello = check_hello
        self._lock = threading.RLock()
        self._proc: _Process | None = None
        self._finalizer: weakref.finalize | None = None
        self._next_id = 1
        # The compile allowance: operations called on the current process (compiled there), ever
        # given the allowance, and ever finished (a reply of any kind).
        self._compiled: set[str] = set()
        self._granted: set[str] = set()
        self._finished: set[str] = set()
        self._strikes = 0  # consecutive timeouts and failed starts
        self._closed = False
        self._max_reply = protocol.max_reply_bytes()
        self.gave_up: str | None = None
        self.load_error: str | None = None
        self.hello: Reply | None = None
        self.starts = 0  # worker processes started
        self.last_output = ""  # what the port printed during the last call

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    # -- life cycle ------------------------------------------------------------------------------------
    def start(self) -> Reply:
        """Start the worker now (unless it runs) and return its greeting; raises like a call."""
        with self._lock:
            self._check_usable()
            self._ensure_started()
            assert self.hello is not None
            return self.hello

    def close(self) -> None:
        """Ask the worker to quit, then kill its group and reap it; later calls fail. Safe twice."""
        with self._lock:
            self._closed = True
            proc = self._proc
            if proc is None:
                return
            if not proc.exited():
                try:
                    os.writev(proc.request, protocol.encode_quit(self._next_id))
                except OSError:
                    pass
                proc.wait_exit(QUIT_GRACE)
            self._discard()

    def _check_usable(self) -> None:
        if self._closed:
            raise ImplementationError(f"{self.name}: the worker for {self.port} has been closed")
        if self.gave_up is not None:
            raise ImplementationError(self.gave_up)
        if self.load_error is not None:
            raise ImplementationError(self.load_error)

    def _discard(self) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        return proc.end()

    def _strike(self, reason: str) -> str:
        """Count a timeout or failed start; the note to add to its message when it is the last straw."""
        self._strikes += 1
        if self._strikes < self.limits.give_up_after:
            return ""
        self.gave_up = (
            f"{self.name}: gave up on {self.port} after {self._strikes} consecutive timeouts or failed starts "
            f"(the last: {reason}); its remaining calls fail at once without running"
        )
        return f"\n{self._strikes} in a row: giving up on this port; its remaining calls fail at once"

    def _ensure_started(self) -> _Process:
        if self._proc is not None and self._proc.exited():
            self._discard()  # died between calls: replaced without failing anything
        if self._proc is None:
            self._start()
        assert self._proc is not None
        return self._proc

    def _start(self) -> None:
        env = self._env if self._env is not None else dict(os.environ)
        try:
            proc = _spawn(self.argv, env, self._cwd)
        except OSError as exc:
            note = self._strike(f"cannot start {self.argv[0]}")
            raise ImplementationError(f"{self.name}: cannot start the worker ({exc}){note}") from None
        self._proc = proc
        self._finalizer = weakref.finalize(self, _end_quietly, proc)
        self._compiled = set()
        self.starts += 1
        seconds = self.limits.startup_timeout
        try:
            hello = self._receive(proc, 0, time.monotonic() + seconds)
        except _Timeout:
            self._discard()
            out = output_section(proc.output.since(0))
            reason = f"not started within {seconds:g}s"
            note = self._strike(reason)
            raise ImplementationError(
                f"{self.name} worker did not start within {seconds:g}s (loading {self.port}); it was killed{note}{out}"
            ) from None
        except _Died:
            code = self._died(proc)
            out = output_section(proc.output.since(0))
            note = self._strike(f"start failed ({_exit_text(code)})")
            raise ImplementationError(
                f"{self.name} worker failed to start ({_exit_text(code)}) while loading {self.port}{note}{out}"
            ) from None
        except ProtocolError as exc:
            self._discard()
            out = output_section(proc.output.since(0))
            note = self._strike(f"malformed greeting: {exc}")
            raise ImplementationError(f"{self.name} worker sent a malformed greeting ({exc}){note}{out}") from None
        self._accept_hello(proc, hello, 0)

    def _accept_hello(self, proc: _Process, hello: Reply, mark: int) -> None:
        """A worker's greeting, after a start or a load in place: the port loaded, or its load error."""
        proc.output.drain()
        out = output_section(proc.output.since(mark))
        if hello.kind == "L":
            self.load_error = hello.message + out
        elif hello.kind != "H":
            self._discard()
            note = self._strike(f"greeted with {hello.kind!r}")
            raise ImplementationError(f"{self.name} worker sent {hello.kind!r} instead of its greeting{note}{out}")
        elif self._check_hello is not None:
            try:
                self._check_hello(hello)
            except ValueError as exc:
                self.load_error = str(exc)
        if self.load_error is not None:
            self._discard()
            raise ImplementationError(self.load_error)
        self.hello = hello

    def reload(self, argv: Sequence[str], port: str, files: Sequence[str]) -> Reply:
        """Serve another port from now on (``argv`` starts its worker, ``port`` names it) and return
        its greeting; raises like :meth:`start`. A running worker is asked to load ``files`` in place
        of its port (a 'P' request, the R and Julia workers': R ~25 ms instead of a start's ~0.35 s);
        it refuses when the previous port changed its session outside its own environment, and then, as when it
        dies, answers garbage or none is running, a fresh worker is started from ``argv``. Either way
        the port is new to this supervisor: its give-up count, load error and compile allowances
        start afresh."""
        with self._lock:
            if self._closed:
                raise ImplementationError(f"{self.name}: the worker for {self.port} has been closed")
            self.argv, self.port = list(argv), port
            self.gave_up = self.load_error = self.hello = None
            self._strikes = 0
            self._compiled, self._granted, self._finished = set(), set(), set()
            proc = self._proc
            if proc is not None and not proc.exited() and self._load_in_place(proc, files):
                assert self.hello is not None
                return self.hello
            self._discard()
            self._start()
            assert self.hello is not None
            return self.hello

    def _load_in_place(self, proc: _Process, files: Sequence[str]) -> bool:
        """Whether the running worker loaded the new port (or reported its load error, raised here)."""
        ident = self._next_id
        self._next_id += 1
        mark = proc.output.total
        seconds = self.limits.startup_timeout
        deadline = time.monotonic() + seconds
        try:
            self._send(proc, protocol.encode_load(ident, list(files)), deadline)
            hello = self._receive(proc, ident, deadline)
        except _Timeout:
            self._discard()
            out = output_section(proc.output.since(mark))
            note = self._strike(f"not loaded within {seconds:g}s")
            raise ImplementationError(
                f"{self.name} worker did not load {self.port} within {seconds:g}s; it was killed{note}{out}"
            ) from None
        except (_Died, ProtocolError):
            return False  # a fresh worker decides
        if hello.kind == "E":
            return False  # refused: the previous port changed its session
        self._accept_hello(proc, hello, mark)
        return True

    def _died(self, proc: _Process) -> int | None:
        """The worker stopped answering because it is dying: its own exit code, if it comes soon."""
        proc.wait_exit(2.0)
        return self._discard()

    # -- calls -------------------------------------------------------------------------------------
    def call(self, op: str, args: Iterable[Arg]) -> Results:
        """Run ``op`` in the port; raises OperationMissing ('M') or ImplementationError."""
        with self._lock:
            self._check_usable()
            parts = protocol.encode_request(self._next_id, op, args)
            ident = self._next_id
            self._next_id += 1
            proc = self._ensure_started()
            seconds = self.limits.timeout
            if op not in self._compiled and (op not in self._granted or op in self._finished):
                seconds += self.limits.compile_allowance
                self._granted.add(op)
            self._compiled.add(op)
            mark = proc.output.total
            deadline = time.monotonic() + seconds
            try:
                try:
                    self._send(proc, parts, deadline)
                except _Died:
                    # It died before it had read this request, so it never ran it: one new worker.
                    self._discard()
                    proc = self._ensure_started()
                    mark, deadline = 0, time.monotonic() + seconds
                    self._send(proc, parts, deadline)
                reply = self._receive(proc, ident, deadline)
            except _Timeout:
                self._discard()
                out = output_section(proc.output.since(mark))
                note = self._strike(f"timed out in {op}")
                raise ImplementationError(
                    f"{self.name} worker timed out after {seconds:g}s in {op}; it was killed and the next call "
                    f"starts a new one{note}{out}"
                ) from None
            except _Died:
                code = self._died(proc)
                out = output_section(proc.output.since(mark))
                raise ImplementationError(
                    f"{self.name} worker died ({_exit_text(code)}) in {op}; the next call starts a new one{out}"
                ) from None
            except ProtocolError as exc:
                self._discard()
                out = output_section(proc.output.since(mark))
                raise ImplementationError(
                    f"{self.name} worker sent a malformed reply in {op} ({exc}); it was killed and the next call "
                    f"starts a new one{out}"
                ) from None
            except BaseException:  # KeyboardInterrupt, SystemExit: the call is abandoned, and its worker
                self._discard()
                raise
            self._strikes = 0
            self._finished.add(op)
            # What the port printed before its reply was in the pipe when the poll found the reply
            # (every kit and worker flushes first), and drained then; more may follow only from a
            # port found printing then (saves a poll, ~0.6 us, on a quiet call).
            if proc.printing:
                proc.output.drain_ready()
            self.last_output = proc.output.since(mark)
            if reply.kind == "R":
                return Results(reply.results, reply.notes, self.last_output, reply.seconds)
            if reply.kind == "M":
                raise OperationMissing(reply.message)
            if reply.kind == "E":
                raise ImplementationError(reply.message + output_section(self.last_output))
            self._discard()
            raise ImplementationError(
                f"{self.name} worker answered {op} with {reply.kind!r}, not a reply; it was killed"
                + output_section(self.last_output)
            )

    # -- I/O ---------------------------------------------------------------------------------------
    def _wait(self, proc: _Process, fd: int, event: int, deadline: float) -> None:
        """Until ``fd`` is ready for ``event``, draining the port's output meanwhile."""
        poller = proc.poller(fd, event)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _Timeout
            wait = remaining if proc.pidfd is not None else min(remaining, 0.05)
            ready, gone, printed = False, False, False
            for f, _ in poller.poll(max(1, math.ceil(wait * 1000))):
                if f == fd:
                    ready = True  # or hung up / failed: the read or write says which
                elif f == proc.output.fd:
                    proc.output.drain()
                    printed = True
                    if not proc.output.open:
                        poller = proc.poller(fd, event)  # one without the closed output
                elif f == proc.pidfd:
                    gone = True
            if ready:
                proc.printing = printed
                return
            if gone or (proc.pidfd is None and proc.exited()):
                raise _Died

    # Sending tries the system call first and polls only when it would block; receiving waits for
    # the reply first (_receive): a small call then costs one writev, one poll and two readv.
    def _send(self, proc: _Process, parts: list[Part], deadline: float) -> None:
        total = sum(map(len, parts))  # byte lengths: parts are bytes or byte views (protocol.Part)
        if len(parts) <= 512:  # the usual case: the whole request in one system call
            try:
                sent = os.writev(proc.request, parts)
            except BlockingIOError:
                sent = 0
            except (BrokenPipeError, ConnectionResetError):
                raise _Died from None
            if sent == total:
                return
        else:
            sent = 0
        views = collections.deque(memoryview(p).cast("B") for p in parts if len(p))
        while sent:  # what the first write took
            if sent >= len(views[0]):
                sent -= len(views.popleft())
            else:
                views[0] = views[0][sent:]
                sent = 0
        while views:
            try:
                n = os.writev(proc.request, list(views)[:512])
            except BlockingIOError:
                self._wait(proc, proc.request, select.POLLOUT, deadline)
                continue
            except (BrokenPipeError, ConnectionResetError):
                raise _Died from None
            protocol.consume(views, n)

    def _read_into(self, proc: _Process, view: memoryview, deadline: float) -> None:
        got = 0
        while got < len(view):
            try:
                n = os.readv(proc.reply, [view[got:]])
            except BlockingIOError:
                self._wait(proc, proc.reply, select.POLLIN, deadline)
                continue
            if n == 0:
                raise _Died  # the reply pipe closed: the worker is gone
            got += n

    def _receive(self, proc: _Process, ident: int, deadline: float) -> Reply:
        header = bytearray(protocol.HEADER.size)
        # A reply is seldom there the moment its request is sent: wait first, rather than try a
        # read that fails (measured: ~3 us of CPU less per call, a quarter of a small call's).
        self._wait(proc, proc.reply, select.POLLIN, deadline)
        self._read_into(proc, memoryview(header), deadline)
        length = protocol.check_header(header, protocol.REPLY_MAGIC, ident, self._max_reply)
        body = np.empty(length, dtype=np.uint8)  # not touched until read into: no cost for garbage
        self._read_into(proc, memoryview(body), deadline)
        return protocol.decode_reply(body)
