"""The command line's precision tiers: which fixtures each implementation is judged on, and the
tiers' generation and drift check (attention_ports/precision.py, issue 17)."""

from __future__ import annotations

from pathlib import Path

from attention_ports import precision, precision_impls
from attention_ports.impl import Implementation

Live = dict[str, Implementation | None]  # None: run_suite builds it as usual


def groups(
    asked: str | None, impls: list[str], ports: dict[str, Path], fixtures_dir: Path, default_dir: bool
) -> list[tuple[Path, Live]]:
    """One (fixtures folder, implementations) run per precision judged in.

    ``asked`` (``verify --precision``): every implementation in it, the built-ins run in it (R in
    double, as it only can). Otherwise each Julia port is judged in the precision it declares
    and everything else in float64. ``default_dir``: no ``--dir`` was given, so a tier's own
    fixtures are used; with ``--dir`` that folder is used for every precision.
    """

    def where(fmt: str) -> Path:
        return precision.fixtures_dir(fmt) if default_dir else fixtures_dir

    if asked is not None:
        fmt = precision.get(asked, "--precision").name
        live: Live = {}
        for name in impls:
            live[name] = precision_impls.create(name, ports.get(name), fmt)
            if name == "r" and fmt != precision.DEFAULT:
                print(f"r: R computes in double only; the R port runs in float64 and is judged on the {fmt} tier")
        return [(where(fmt), live)]
    by_fmt: dict[str, Live] = {}
    for name in impls:
        impl, fmt = None, precision.DEFAULT
        if name == "julia" and name in ports:
            impl, fmt = _declared(ports[name])
        by_fmt.setdefault(fmt, {})[name] = impl
    return [(where(fmt), live) for fmt, live in by_fmt.items()]


def _declared(port: Path) -> tuple[Implementation | None, str]:
    """A Julia port and the precision it declares; a port that cannot load is left to the run."""
    from ports.julia_adapter import JuliaImplementation

    try:
        impl = JuliaImplementation(port)
        return impl, impl.precision
    except Exception:  # the run reports it as usual, case by case, judged in float64
        return None, precision.DEFAULT


def close(live: Live) -> None:
    for impl in live.values():
        if impl is not None:
            impl.close()


def generate_tiers() -> None:
    for fmt in precision.FORMATS.values():
        if fmt.name != precision.DEFAULT:
            for rel in precision.generate(fmt):
                print(f"wrote   {precision.fixtures_dir(fmt.name) / rel}")


def check_tiers() -> list[str]:
    return [p for fmt in precision.FORMATS.values() if fmt.name != precision.DEFAULT for p in precision.check(fmt)]
