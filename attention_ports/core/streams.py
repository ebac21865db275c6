"""stdout and stderr that never end a run: a reader gone away, a failing terminal, a stopped printer.

``attention-ports verify --json F | head -1``: ``head`` exits after one line and the next write to
stdout fails with EPIPE (Python ignores SIGPIPE, so it is a ``BrokenPipeError``). That is no error
of the run: the reports are written and the exit status is the verdict's. :func:`guarded` puts a
:class:`Guarded` stream in place of ``sys.stdout`` and ``sys.stderr``: the first write that fails
(EPIPE; EIO from a terminal that hung up; ENOSPC from a full disk under a redirect) silences that
stream for the rest of the process, and it stays silent: its descriptor is pointed at /dev/null,
as the Python documentation advises for SIGPIPE (library/signal.html, "Note on SIGPIPE"), so the
interpreter's own flush at exit neither fails ("Exception ignored ... BrokenPipeError", exit 120)
nor blocks on a reader that paused.

Layer: core. Imports nothing of the project.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO


class Guarded:
    """A text stream that swallows its own failure: after the first ``OSError`` of a write or a
    flush every later write is dropped (``failure`` says why; ``None`` while it works)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.failure: OSError | None = None

    def write(self, text: str) -> int:
        if self.failure is None:
            try:
                return self.stream.write(text)
            except OSError as exc:
                self.silence(exc)
        return len(text)

    def flush(self) -> None:
        if self.failure is None:
            try:
                self.stream.flush()
            except OSError as exc:
                self.silence(exc)

    def silence(self, why: OSError | None = None) -> None:
        """Drop everything written from now on, and what the stream still buffers (its descriptor
        becomes /dev/null: the exit's flush goes there). A stream without a descriptor (a test's
        capture) only stops being written."""
        self.failure = self.failure or why or _Stopped(errno.ECANCELED, "silenced")
        with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation, AttributeError):
            fd = self.stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, fd)
            finally:
                os.close(null)

    @property
    def broken_pipe(self) -> bool:
        return isinstance(self.failure, BrokenPipeError)

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding, ...: the stream's own
        return getattr(self.stream, name)


@contextlib.contextmanager
def guarded() -> Iterator[tuple[Guarded, Guarded]]:
    """``sys.stdout`` and ``sys.stderr`` guarded for the block; stdout is flushed at its end (so a
    reader gone away is seen here, not in the interpreter's exit). On leaving, a stream that failed
    other than by a closed pipe is named on stderr (if stderr still works)."""
    out, err = Guarded(sys.stdout), Guarded(sys.stderr)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    try:
        yield out, err
        out.flush()
    finally:
        sys.stdout, sys.stderr = saved
        if out.failure is not None and not out.broken_pipe and not isinstance(out.failure, _Stopped):
            err.write(f"attention-ports: stdout failed ({out.failure}); what it did not show is in the reports\n")
            err.flush()


class _Stopped(OSError):
    """Why a stream was silenced on purpose (a signal while the table was printed)."""


def stop(stream: Any) -> None:
    """Silence ``stream`` on purpose (a :class:`Guarded` one; anything else is left alone)."""
    if isinstance(stream, Guarded):
        stream.silence(_Stopped(errno.EINTR, "stopped by a signal"))
