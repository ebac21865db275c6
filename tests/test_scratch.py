"""tests/scratch.py: where a test run's temporary files go (RAM where there is room)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import scratch


def test_a_ram_folder_is_made_only_where_there_is_room_and_old_runs_folders_are_swept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(scratch, "RAM_DIR", tmp_path)
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    dead = tmp_path / f"{scratch.PREFIX}{pid_max + 1}-old"  # a pid no process can have
    live = tmp_path / f"{scratch.PREFIX}{os.getppid()}-running"  # another run, still going
    other = tmp_path / "someone-elses"
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "file").write_text("x")
    made = scratch.ram_folder()
    assert made is not None and made.parent == tmp_path and made.name.startswith(f"{scratch.PREFIX}{os.getpid()}-")
    assert made.is_dir() and not any(made.iterdir())
    assert not dead.exists() and live.is_dir() and other.is_dir()
    # no room: pytest's own folder is used instead (None), and nothing is made
    monkeypatch.setattr(scratch, "RAM_ROOM", 1 << 62)
    before = sorted(tmp_path.iterdir())
    assert scratch.ram_folder() is None
    assert sorted(tmp_path.iterdir()) == before
    monkeypatch.setattr(scratch, "RAM_DIR", tmp_path / "missing")
    assert scratch.ram_folder() is None


def test_this_runs_temporary_files_are_where_scratch_says(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    # tests/conftest.py's choice, made before pytest's own (a --basetemp given on the command
    # line wins): in RAM where /dev/shm has the room and runs programs, else pytest's folder
    given = request.config.getoption("basetemp")
    if not str(given or "").startswith(str(scratch.RAM_DIR / scratch.PREFIX)):
        pytest.skip(f"this run's --basetemp is {given!r}: not one scratch made")
    assert tmp_path.is_relative_to(given)
    assert os.statvfs(tmp_path).f_flag & os.ST_NOEXEC == 0
