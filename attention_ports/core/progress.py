"""Progress on long runs, on stderr: a live bar on a terminal, plain lines in a log (CI).

Both displays take the callbacks' own signatures: ``bar(what)`` the ``(done, total, label)`` of
generation and fixture checks, :class:`VerifyProgress` the ``(impl, done, total, case)`` of
``runner.run_suite``. Plain lines come at every tenth of the way and at the end, so a CI log shows
a long run is alive without a line per case. Safe to call from several threads.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

BAR_WIDTH = 30


def _bar(done: int, total: int) -> str:
    filled = BAR_WIDTH * done // max(total, 1)
    return "#" * filled + "." * (BAR_WIDTH - filled)


class _Display:
    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.start = time.perf_counter()
        self.lock = threading.Lock()
        self.decile: dict[str, int] = {}

    def show(self, key: str, prefix: str, done: int, total: int, label: str) -> None:
        elapsed = time.perf_counter() - self.start
        with self.lock:
            if self.live:
                end = "\n" if done == total else ""
                self.stream.write(f"\r\033[K{prefix} [{_bar(done, total)}] {done}/{total} {elapsed:5.1f}s {label}{end}")
                self.stream.flush()
                return
            decile = 10 * done // max(total, 1)
            if decile > self.decile.get(key, -1) or done == total:
                self.decile[key] = decile
                self.stream.write(f"{prefix}: {done}/{total} cases ({elapsed:.1f} s)\n")
                self.stream.flush()


def bar(what: str, stream: TextIO | None = None, live: bool | None = None) -> Callable[[int, int, str], None]:
    """A ``(done, total, label)`` progress display for one long task named ``what``."""
    display = _Display(stream, live)
    return lambda done, total, label: display.show(what, what, done, total, label)


class VerifyProgress:
    """``run_suite``'s progress: one bar (or line series) per implementation."""

    def __init__(self, stream: TextIO | None = None, live: bool | None = None) -> None:
        self._display = _Display(stream, live)

    def __call__(self, impl: str, done: int, total: int, case: str) -> None:
        self._display.show(impl, f"[{impl}]", done, total, case)
