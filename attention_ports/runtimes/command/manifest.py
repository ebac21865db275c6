"""What ``--port NAME=PATH`` names when NAME is not r or julia: a program, or a manifest naming one.

PATH is one of

- an executable file: the port itself, started as it is;
- a ``.py`` file: started with this Python (``sys.executable FILE``: the Python kit's ports);
- a manifest, ``*.toml``, naming the command and what to do before it (docs/protocol.md, "Manifest")::

      language = "c"                          # for messages (default: the command's name)
      command = ["./port"]                    # argv, started in the manifest's folder
      build = ["cc", "-O2", "-o", "port", "port.c", "-lm"]   # optional: run there before the first start
      [declaration]                           # optional: used when the greeting declares nothing
      operations = ["softmax"]

Paths in ``command`` and ``build`` are relative to the manifest's folder, which both run in. A
manifest that is not valid, or names a field we do not know, is a :class:`ManifestError` naming the
file and the field (a usage error: exit 2).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

FIELDS = ("language", "command", "build", "declaration", "build_timeout")
DEFAULT_BUILD_TIMEOUT = 300.0  # seconds: a compiler from cold


class ManifestError(ValueError):
    """A manifest or port program that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Manifest:
    where: Path  # the file given (the manifest, or the program)
    folder: Path  # where the command and the build run
    language: str  # for messages: "c", "python", ...
    command: tuple[str, ...]
    build: tuple[str, ...] = ()
    declaration: dict[str, Any] | None = None
    build_timeout: float = DEFAULT_BUILD_TIMEOUT


def _argv(raw: Any, where: Path, name: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not raw or not all(isinstance(a, str) and a for a in raw):
        raise ManifestError(f"{where}: {name} must be a non-empty list of strings (the argv), got {raw!r}")
    return tuple(raw)


def load(path: Path) -> Manifest:
    """The port ``path`` names (a program, a ``.py`` file or a manifest); nothing is run."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ManifestError(f"{path}: no such file")
    if path.suffix == ".toml":
        return _load_toml(path)
    if path.suffix == ".py":
        return Manifest(path, path.parent, "python", (sys.executable, str(path)))
    if not os.access(path, os.X_OK):
        raise ManifestError(
            f"{path}: not an executable program, a .py file or a .toml manifest (docs/protocol.md, 'Manifest'); "
            f"make it executable (chmod +x) or write a manifest naming its command"
        )
    return Manifest(path, path.parent, path.stem, (str(path),))


def _load_toml(path: Path) -> Manifest:
    try:
        raw = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: not valid TOML: {exc}") from None
    unknown = [k for k in raw if k not in FIELDS]
    if unknown:
        raise ManifestError(
            f"{path}: unknown field(s) {', '.join(map(repr, unknown))}; the fields are {', '.join(FIELDS)}"
        )
    if "command" not in raw:
        raise ManifestError(f"{path}: no command: write command = [\"./my_port\"] (docs/protocol.md, 'Manifest')")
    command = _argv(raw["command"], path, "command")
    build = _argv(raw["build"], path, "build") if "build" in raw else ()
    language = raw.get("language", Path(command[0]).name)
    if not isinstance(language, str) or not language:
        raise ManifestError(f'{path}: language must be a name such as "c", got {language!r}')
    declared = raw.get("declaration")
    if declared is not None and not isinstance(declared, dict):
        raise ManifestError(f"{path}: declaration must be a table ([declaration]), got {declared!r}")
    timeout = raw.get("build_timeout", DEFAULT_BUILD_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ManifestError(f"{path}: build_timeout must be a positive number of seconds, got {timeout!r}")
    return Manifest(path, path.parent, language, command, build, declared, float(timeout))
