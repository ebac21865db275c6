"""Names of the implementations and how to build each one.

Adapters are imported only when asked for, so a machine without R can still verify Julia and a
user without torch can still run the ports.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from attention_ports.impl import Implementation, ImplementationUnavailable

# name -> "module:class"; every class takes (port: Path | None = None)
IMPLEMENTATIONS: dict[str, str] = {
    "reference": "attention_ports.builtin:ReferenceImplementation",
    "torch": "attention_ports.torch_impl:TorchImplementation",
    "r": "ports.r_adapter:RImplementation",
    "julia": "ports.julia_adapter:JuliaImplementation",
}
PORTABLE = ("r", "julia")  # the names a user's own port file can stand in for


def create(name: str, port: Path | None = None) -> Implementation:
    """Build implementation ``name``; ``port`` replaces our port file with a user's (R/Julia only)."""
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {name!r}; known: {', '.join(IMPLEMENTATIONS)}")
    if port is not None and name not in PORTABLE:
        raise ValueError(f"--port applies to {', '.join(PORTABLE)}, not {name!r}")
    module_name, cls_name = IMPLEMENTATIONS[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImplementationUnavailable(f"{name}: cannot import {module_name}: {exc}") from exc
    cls = getattr(module, cls_name)
    return cls(port) if name in PORTABLE else cls()
