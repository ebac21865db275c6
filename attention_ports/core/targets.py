"""Report targets (``--json``, and every other report file an option names), checked before a run.

A run can take minutes; a report path that cannot be written must fail at once (exit 2), not
after the run with the results lost. :func:`check_targets` takes every report option at once, so
each new report format plugs in by adding its option to the mapping.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path


class TargetError(ValueError):
    """A report target cannot be written; names the option and the path. Bad input (exit 2)."""


def check_targets(targets: Mapping[str, Path | None]) -> dict[str, Path]:
    """``{"--json": path or None, ...}`` -> the given ones as absolute paths, each proved writable.

    Resolved now, relative to the current directory, so nothing that changes directory later moves
    a report. Each must not be a directory or a non-regular file, must differ from the others, and
    its folder must take a new file (tried for real: a temporary file is made and removed, which
    tells the truth about read-only file systems and permissions where ``os.access`` guesses). A
    missing folder is fine when the nearest existing ancestor takes one (the writer creates it).
    """
    resolved: dict[str, Path] = {}
    seen: dict[Path, str] = {}
    for option, raw in targets.items():
        if raw is None:
            continue
        path = Path(os.path.abspath(Path(raw).expanduser()))
        where = f"{option} {raw}"
        if path in seen:
            raise TargetError(f"{where}: the same file as {seen[path]}")
        if path.is_dir():
            raise TargetError(f"{where}: is a directory; give a file name")
        if path.exists() and not path.is_file():
            raise TargetError(f"{where}: exists and is not a regular file")
        folder = path.parent
        while not folder.exists():
            folder = folder.parent
        if not folder.is_dir():
            raise TargetError(f"{where}: {folder} is not a directory")
        try:
            fd, probe = tempfile.mkstemp(dir=folder, prefix=".attention-ports-probe.")
        except OSError as exc:
            raise TargetError(f"{where}: cannot create a file in {folder}: {exc.strerror}") from None
        os.close(fd)
        os.unlink(probe)
        seen[path] = option
        resolved[option] = path
    return resolved
