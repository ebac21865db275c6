"""Our own R and Julia workers speak the public protocol (docs/protocol.md), nothing private:
`attention-ports check-port` on each, started exactly as their adapters start them, finds nothing
wrong. The notes they get are the ones docs/protocol.md names (no layout in the declaration, no echo)."""

from __future__ import annotations

import sys

from attention_ports.core import paths
from attention_ports.runtimes.command import check
from attention_ports.runtimes.julia import sysimage
from attention_ports.runtimes.julia.adapter import find_julia
from attention_ports.runtimes.julia.worker import JULIA_FLAGS
from tests.faults.conftest import check_runtime

PROBES = {"greeting", "missing operation", "error", "malformed body", "after a malformed body", "not a frame", "quit"}


def _conforms(argv: list[str], timeout: float) -> dict[str, str]:
    report = check.check(argv, timeout=timeout)
    lines = "\n".join(f.line() for f in report.findings)
    assert not report.failed, lines
    levels = {f.probe: f.level for f in report.findings}
    assert PROBES <= set(levels), lines
    return levels


def test_the_r_worker_passes_the_protocol_checker() -> None:
    check_runtime("r")
    port = sorted(str(p) for p in (paths.PORTS / "r" / "R").glob("*.R"))
    levels = _conforms([sys.executable, "-m", "attention_ports.runtimes.r.worker", *port], timeout=60)
    assert levels["malformed body"] == "ok" and levels["quit"] == "ok"


def test_the_julia_worker_passes_the_protocol_checker() -> None:
    check_runtime("julia")
    julia = find_julia()
    image = sysimage.find(julia)  # the tests' set-up builds it; the stock image takes minutes here
    argv = [julia, *JULIA_FLAGS]
    argv += ["-J", str(image.path), "-e", sysimage.ENTRY] if image else [str(sysimage.WORKER)]
    levels = _conforms([*argv, str(paths.PORTS / "julia" / "src")], timeout=60 if image else 300)
    # it reads a body whole before decoding it, so a length inside that lies is an E, not a wait
    assert levels["malformed body"] == "ok" and levels["quit"] == "ok"
