"""Files written whole or not at all: every writer of the project (fixtures, reports, the coverage
page, generated-case failures, skeletons) goes through here. Also a file's cheap identity
(:func:`file_identity`), for what is worked out once per unchanged file.

A reader never sees half a file: the data goes to a temporary file in the destination's folder,
is flushed to disk, then renamed over the destination (atomic on POSIX). The file gets the mode a
plain ``open(path, "w")`` would give it (0666 less the umask), not ``mkstemp``'s 0600.

Layer: core. Imports nothing of the project.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def file_identity(path: str | Path) -> list[object]:
    """A cheap identity of a file: its real path, size and modification time (no hashing); a file
    that cannot be read is ``[path, None, None]``."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return [str(path), None, None]
    return [real, st.st_size, st.st_mtime_ns]


def current_umask() -> int:
    """The process's umask, read without changing it (Linux >= 4.7); else set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # not thread-safe for that instant: only where /proc says nothing
    os.umask(mask)
    return mask


# The temporary files of writes under way (their paths), for abandon_temporaries.
_UNDER_WAY: set[str] = set()


def abandon_temporaries() -> None:
    """Remove the temporary files of the writes under way: for a process about to end at once (a
    second signal's ``os._exit``), so that it leaves no half file beside a destination either."""
    for tmp in list(_UNDER_WAY):
        try:
            os.unlink(tmp)
        except OSError:
            pass


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (a temporary file in its folder, then a rename), with the
    mode a plain ``open(path, "w")`` would give it (0666 less the umask; mkstemp's own is 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    _UNDER_WAY.add(tmp)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~current_umask())
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        _UNDER_WAY.discard(tmp)
