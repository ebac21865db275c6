"""Which language a port file is written in, for the hint when a file is given as the wrong one.

``--port r=attention.jl`` otherwise ends in an R parse error about a semicolon, and R code given
as ``--port julia=`` in a Julia syntax error about a brace: true, but not what the user needs to
hear. The adapters ask :func:`hint` only after a port failed to load, so a guess can never turn a
working port away; the guess itself is conservative (a clear majority of telltale lines).
"""

from __future__ import annotations

import re
from pathlib import Path

NAMES = {"r": "R", "julia": "Julia"}
SUFFIXES = {".r": "r", ".jl": "julia"}

# Lines only one of the two languages writes (comments and strings are not stripped: a heuristic).
_TELLTALES: dict[str, tuple[re.Pattern[str], ...]] = {
    "r": (
        re.compile(r"<-\s*function\s*\("),  # f <- function(x) {
        re.compile(r"^\s*[\w.]+\s*<-"),  # assignment with <-
        re.compile(r"%\*%|%in%|%o%"),
        re.compile(r"\b(library|require)\s*\("),
        re.compile(r"\b(NULL|TRUE|FALSE|NA_real_)\b"),
        re.compile(r"\$\w"),  # list$element
    ),
    "julia": (
        re.compile(r"^\s*function\s+[\w!.]+\s*\("),  # function f(x)
        re.compile(r"^\s*end\b"),
        re.compile(r"^\s*(using|import|module|const|struct|mutable struct)\s"),
        re.compile(r"::\s*[A-Z]\w*"),  # type annotations
        re.compile(r"\.\s*[-+*/^]|\b\w+\.\("),  # broadcasting: .+ exp.(x)
        re.compile(r"\bnothing\b|\bdims\s*="),
    ),
}


def guess(path: Path) -> str | None:
    """``"r"``, ``"julia"`` or None (cannot tell): the file's lines, then its suffix to break a tie."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return None
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    score = {lang: sum(any(p.search(ln) for p in pats) for ln in lines) for lang, pats in _TELLTALES.items()}
    r, jl = score["r"], score["julia"]
    if r >= 2 * jl + 2:
        return "r"
    if jl >= 2 * r + 2:
        return "julia"
    return SUFFIXES.get(Path(path).suffix.lower()) if max(r, jl) == 0 else None


def hint(path: Path, given_as: str) -> str:
    """One line when the file that failed to load as ``given_as`` reads like the other language."""
    lang = guess(path)
    if lang is None or lang == given_as:
        return ""
    return f"hint: {Path(path).name} looks like {NAMES[lang]}, not {NAMES[given_as]}: pass it as --port {lang}={path}"
