"""Names of the implementations and how to build each one.

Adapters are imported only when asked for, so a machine without R can still verify Julia and a
user without torch can still run the ports.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from attention_ports.runtimes.impl import Implementation, ImplementationUnavailable


# Each loader imports its module when called, never before: torch, rpy2 and juliacall are optional.
def _reference() -> type:
    from attention_ports.runtimes.builtin import ReferenceImplementation

    return ReferenceImplementation


def _torch() -> type:
    from attention_ports.runtimes.torch_impl import TorchImplementation

    return TorchImplementation


def _r() -> type:
    from attention_ports.runtimes.r.adapter import RImplementation

    return RImplementation


def _julia() -> type:
    from attention_ports.runtimes.julia.adapter import JuliaImplementation

    return JuliaImplementation


# name -> its class's loader; every class takes (port: Path | None = None)
IMPLEMENTATIONS: dict[str, Callable[[], type]] = {"reference": _reference, "torch": _torch, "r": _r, "julia": _julia}
PORTABLE = ("r", "julia")  # the names a user's own port file can stand in for


def is_command(name: str) -> bool:
    """Whether ``name`` is a port run as a command (``--port NAME=PROGRAM``: any name but ours)."""
    return name not in IMPLEMENTATIONS


def create(name: str, port: Path | None = None) -> Implementation:
    """Build implementation ``name``; ``port`` replaces our port file with a user's (R/Julia), or is
    the program (or manifest) of a port run as a command under any other name."""
    if is_command(name) and port is not None:
        from attention_ports.runtimes.command.adapter import CommandImplementation

        return CommandImplementation(name, port)
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(IMPLEMENTATIONS)}")
    if port is not None and name not in PORTABLE:
        raise ValueError(f"--port applies to {', '.join(PORTABLE)}, not {name!r}")
    load = IMPLEMENTATIONS[name]
    try:
        cls = load()
    except ImportError as exc:
        raise ImplementationUnavailable(f"{name}: cannot import its implementation: {exc}") from exc
    return cls(port) if name in PORTABLE else cls()
