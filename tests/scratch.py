"""Where a test run's temporary files go: in RAM, where there is room.

The suite writes trees of thousands of small files: fixture folders regenerated (the drift gate,
the precision tiers) or copied (the tampering and CLI tests), a wheel built from a copy of the
sources and installed into a venv. On this machine's ext4 copying the fixtures folder (~3,300
files) took 3.9 s, 3.6 s of it the kernel's, against 0.4 s on tmpfs; the installed tool's set-up
21 s against 13 s. So ``tests/conftest.py`` gives pytest a base temporary folder (``--basetemp``)
on /dev/shm when that has room and runs programs, unless one was given; elsewhere pytest's own.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

RAM_DIR = Path("/dev/shm")
RAM_ROOM = 2 << 30  # free bytes it must have: a run's files took 0.48 GB at most (pyproject.toml says why)
PREFIX = "attention-ports-tests-"


def ram_folder() -> Path | None:
    """A new folder on RAM_DIR where it has RAM_ROOM free and runs programs (a venv's scripts must:
    a container's default /dev/shm, 64 MiB and noexec, does neither), else None. Its name holds
    this process's id: what a run left there (a failed run keeps its files, in RAM until a reboot)
    is removed by the next one, once that process has ended."""
    try:
        if not RAM_DIR.is_dir() or shutil.disk_usage(RAM_DIR).free < RAM_ROOM:
            return None
        if os.statvfs(RAM_DIR).f_flag & os.ST_NOEXEC:
            return None
        for old in RAM_DIR.glob(f"{PREFIX}*"):
            pid = old.name.removeprefix(PREFIX).split("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                shutil.rmtree(old, ignore_errors=True)
        return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=RAM_DIR))
    except OSError:
        return None
