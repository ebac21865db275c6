"""What a worker leaves behind is found, killed and reaped: no process a port starts outlives a run.

Killing a worker's process group misses what the port moved out of it: a ``setsid sleep``, a
double fork into a session of its own, ``nohup sleep &`` followed by ``setsid``. Such a process
is found by the token it inherited (below), wherever it was re-parented, and killed with the
worker's tree whenever a worker ends.

The ``attention-ports`` command (the console script, :func:`attention_ports.cli.entry`) also makes
itself a *child subreaper* (``prctl(PR_SET_CHILD_SUBREAPER, 1)``) before its first worker starts, so
that a process orphaned anywhere below it is re-parented to it, not to init, and is reaped by it. A
process that merely uses the library (a pytest session with our plugin, a user's script) is never
made one: a subreaper adopts the orphans of *every* program it runs, and a test suite's daemon that
exits would stay a zombie of the session (``kill(pid, 0)`` succeeding on it forever) because only
processes carrying our token are ours to reap. There the kill is the same; init reaps.

Whose is it
  Every worker is started with ``$ATTENTION_PORTS_REAP`` set to a token of its own,
  ``RUN.SERIAL``, where RUN is this process's id and a random nonce. Its descendants inherit the
  variable, and ``/proc/PID/environ`` shows it (the environment a process was started with) even
  after ``setsid``, a double fork or ``nohup``. :func:`sweep` kills a process only when it carries
  the token asked for (or, from :func:`sweep_run`, any token of this run: the nonce makes it ours
  alone), or it descends from a worker being ended or from such a process. A subreaper looks only
  in its own tree (everything a worker orphans comes to it); otherwise the whole process table is
  searched, since an escapee is re-parented to init. Nothing else is touched: the children other
  code in this process starts (a test's ``subprocess.run``, a pytest-xdist worker) carry no token
  of ours.

Reaping
  A subreaper must reap the orphans it adopts, but must never reap a child that other code in this
  process waits for (``subprocess.Popen.wait`` would then report exit status 0 for it). So
  :func:`sweep` reaps (``waitpid`` on one pid) only processes it chose as above (while alive, when
  their environment can still be read; or, dead, by the session of a worker not yet reaped) and
  found re-parented to us, recognised by pid *and* start time; a worker itself is reaped by its
  ``Popen``. An orphan that left its worker's session and exits on its own before any sweep sees
  it stays a zombie until the run ends (it holds no resources but its pid), as does any orphan of
  another program this process runs (no token: never ours to reap).

Limits
  A descendant that both clears its environment (``env -i``) and escapes its worker's tree before
  the worker ends is not recognised. SIGKILL of the run itself leaves escaped processes to the next
  subreaper above, or init (a worker dies by its parent-death signal, its escapees do not). Elsewhere
  than Linux (no ``prctl``, no ``/proc``) this module does nothing: only the worker's process group
  is killed, as before.

Every function here is bounded in time (:data:`SWEEP_SECONDS`) and takes no lock, so a signal
handler may call it.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import time
from collections.abc import Callable, Iterable

TOKEN_ENV = "ATTENTION_PORTS_REAP"
PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
SWEEP_SECONDS = 2.0  # at most this long per sweep: a process stuck in the kernel is left, never waited for

# Per process (a forked child starts afresh: the subreaper flag is not inherited, nor its workers).
_owner = 0
_run = ""
_serial = 0
_subreaper = False
# (pid, start time) of every process a sweep killed and has not reaped yet: once re-parented to us
# as zombies they are ours to reap, although a zombie's environment can no longer be read.
_killed: dict[int, int] = {}


def _mine() -> None:
    global _owner, _run, _serial, _subreaper
    if _owner != os.getpid():
        _owner, _run, _serial, _subreaper = os.getpid(), f"{os.getpid()}-{secrets.token_hex(4)}", 0, False
        _killed.clear()


def new_token() -> str:
    """A token for one worker (its ``$ATTENTION_PORTS_REAP``), unique to this run and worker."""
    global _serial
    _mine()
    _serial += 1
    return f"{_run}.{_serial}"


def become_subreaper() -> bool:
    """Make this process a child subreaper (once; Linux only). Whether it is one."""
    global _subreaper
    _mine()
    if not _subreaper and sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except (OSError, AttributeError):  # no libc prctl: the process group kill alone remains
            _subreaper = False
    return _subreaper


# --- the process table ------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, str, int, int] | None:
    """(parent pid, state, start time, session id) of ``pid`` from /proc, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # after the command name: state (field 3), ppid (4), pgrp (5), session (6), ..., starttime (22)
    return int(fields[1]), fields[0].decode(), int(fields[19]), int(fields[3])


def _table() -> dict[int, tuple[int, str, int, int]]:
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if name.isdigit():
            row = _stat(int(name))
            if row is not None:
                table[int(name)] = row
    return table


def _below(table: dict[int, tuple[int, str, int, int]], roots: Iterable[int]) -> set[int]:
    """Every process whose parent chain reaches one of ``roots`` (the roots not included)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, *_) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = [c for r in roots for c in children.get(r, [])]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, []))
    return found


def _token_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError:  # gone, a zombie, or not ours to read (a set-uid program)
        return None
    key = TOKEN_ENV.encode() + b"="
    for entry in environ.split(b"\0"):
        if entry.startswith(key):
            return entry[len(key) :].decode(errors="replace")
    return None


def _kill(pid: int, start: int) -> None:
    """SIGKILL ``pid`` if it is still the process that started at ``start`` (never a reused pid)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    except (AttributeError, OSError):  # no pidfd here: a check then a kill (the pid of our own child cannot be reused)
        row = _stat(pid)
        if row is not None and row[2] == start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        return
    try:
        row = _stat(pid)  # the pidfd pins the process it was opened on: check that is the one we meant
        if row is not None and row[2] == start:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- the sweep --------------------------------------------------------------------------------------
def sweep(token: str, roots: Iterable[int] = (), keep: Iterable[int] = ()) -> list[int]:
    """Kill and reap what one worker left behind; the pids killed.

    Kills every descendant of this process that carries ``token`` or descends from one of ``roots``
    (a worker being ended: its descendants that do not carry the token, whatever their session),
    and their descendants; reaps those re-parented to us, never a pid in ``keep`` (the worker,
    reaped by its Popen). Repeats until none is left alive, at most :data:`SWEEP_SECONDS`.
    """
    return _sweep(lambda t: t == token, roots, keep)


def sweep_run(roots: Iterable[int] = (), keep: Iterable[int] = ()) -> list[int]:
    """:func:`sweep` for every worker this process has started (at exit, or on a signal)."""
    _mine()
    prefix = f"{_run}."
    return _sweep(lambda t: t.startswith(prefix), roots, keep)


def _sweep(matches: Callable[[str], bool], roots: Iterable[int], keep: Iterable[int]) -> list[int]:
    if not os.path.exists("/proc/self/stat"):
        return []  # not Linux: the process group kill is all there is
    _mine()
    me, roots, keep = os.getpid(), set(roots), set(keep)
    killed: list[int] = []
    end = time.monotonic() + SWEEP_SECONDS
    while True:
        table = _table()
        # a subreaper's escapees are re-parented to it; anyone else's to init (or another subreaper)
        scope = _below(table, [me]) if _subreaper else set(table) - {me}
        # a process in a worker's session was forked inside it, whatever its environment (a child of
        # ours in it is no Popen of other code), as long as the worker is not reaped (its pid not reused)
        targets = {p for p in scope if p not in keep and (table[p][3] in roots or _carries(p, matches))}
        targets |= {p for p in _below(table, roots | targets) if p in scope}
        live = [p for p in targets if table[p][1] != "Z"]
        for pid in targets:
            _killed[pid] = table[pid][2]  # a zombie too: reaped below once it is ours
        for pid in live:
            _kill(pid, table[pid][2])
        killed.extend(live)
        pending = _reap(me, keep)
        if (not live and not pending) or time.monotonic() > end:
            return sorted(set(killed))
        time.sleep(0.005)


def _carries(pid: int, matches: Callable[[str], bool]) -> bool:
    token = _token_of(pid)
    return token is not None and matches(token)


def _reap(me: int, keep: set[int]) -> bool:
    """Reap our killed, re-parented zombies; whether a killed process is still on its way (not yet
    a zombie of ours, or not yet dead)."""
    pending = False
    for pid, start in list(_killed.items()):
        row = _stat(pid)
        if row is None or row[2] != start:  # gone (reaped by a parent that was not us), or a new process
            _killed.pop(pid, None)
            continue
        ppid, state = row[:2]
        if ppid != me or pid in keep:
            # still dying, or dead under a parent that is dying too (it comes to us then)
            pending = pending or state != "Z" or ppid in _killed or ppid in keep
            continue
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # reaped elsewhere meanwhile
            _killed.pop(pid, None)
            continue
        if done:
            _killed.pop(pid, None)
        else:
            pending = True
    return pending
