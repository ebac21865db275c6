"""Where the package's data lives: the one module that knows, in a checkout and in an installed wheel.

The data folders sit at the repository root in a checkout (``fixtures/``, ``ports/``,
``scripts/``), which is also what an editable install sees. A wheel cannot install folders outside
its packages, so ``pyproject.toml`` maps the same folders into the package as
``attention_ports/_assets/fixtures``, ``attention_ports/_assets/ports`` (the contract, our R and
Julia ports, their native runners) and ``attention_ports/_assets/scripts``. Both layouts therefore
have one *asset root* holding ``fixtures/``, ``ports/`` and ``scripts/``: ``_assets`` when it
exists in the package (an installed wheel), else the checkout root.

Files written at run time (a Julia unpacked by ``attention-ports setup julia``) go to the
checkout's ``.local/`` in a checkout, and to a per-user data folder otherwise
(``$XDG_DATA_HOME/attention-ports``, default ``~/.local/share/attention-ports``): never into
site-packages.

This module imports nothing of the project, so anything (``attention_ports.reference`` included)
may use it.
"""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # attention_ports/ (this file is core/paths.py)
_BUNDLED = PACKAGE_DIR / "_assets"
_CHECKOUT = PACKAGE_DIR.parent


def installed() -> bool:
    """True when running from an installed wheel, False in a checkout (editable or not)."""
    return _BUNDLED.is_dir()


ASSET_ROOT: Path = _BUNDLED if installed() else _CHECKOUT

#: The golden fixtures: catalogue.toml, manifest.json, cases/, data/, readers/.
FIXTURES: Path = ASSET_ROOT / "fixtures"
#: The set-up scripts (install_r.sh, install_julia.sh, ...).
SCRIPTS: Path = ASSET_ROOT / "scripts"
#: Seed 003's labelled sentences.
SENTIMENT_CSV: Path = FIXTURES / "data" / "sentiment.csv"
#: The ports under test: the contract, our R and Julia ports, their native test runners.
PORTS: Path = ASSET_ROOT / "ports"
CONTRACT: Path = PORTS / "CONTRACT.md"


def user_data_dir() -> Path:
    """Per-user data folder for things installed at run time outside a checkout."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "attention-ports"


def julia_prefix() -> Path:
    """Where ``attention-ports setup julia`` (scripts/install_julia.sh) unpacks a Julia."""
    return _CHECKOUT / ".local" / "julia" if not installed() else user_data_dir() / "julia"


def local_julia() -> Path:
    """The wrapper script install_julia.sh writes into :func:`julia_prefix` (it may not exist)."""
    return julia_prefix() / "bin" / "julia-run"
