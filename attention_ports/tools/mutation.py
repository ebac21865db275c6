"""The mutation kit: proof that the cases catch realistic porting bugs in our own R, Julia and C ports.

``attention_ports/tools/mutants.toml`` declares single-bug variants of our port sources as exact textual
edits. A mutant is materialised by applying its one edit to its file (the text to find must occur
exactly once, so a change of our port that invalidates a mutant is an error naming it, never a
silently unmutated run) and concatenating every source file of that language, in name order, into
one port file in a temporary folder: exactly what a user hands to ``--port``. It then runs through
the ordinary path (``run_suite`` with ``ports={lang: file}``), so no special transport is involved.

**C** (issue 27, item 6): each of our C ports is a program of its own, a folder of :data:`C_PORTS`
(its ``*.c`` and ``*.h`` sources and the ``port.toml`` that builds it). A C mutant is materialised
as a copy of its port's folder with the one edit applied and a manifest (``mutant.toml``) whose
build is the port's own at ``-O0`` (measured on the walkthrough port's 25: 0.12 CPU-s a build against
-O1's 0.22 and -O2's 0.34, and the whole C kit 7.8 CPU-s against 9.5 at -O1; the kernels are
small, and no bug rests on undefined behaviour, so the level changes no verdict); the run builds
it once and runs it as a command (``--port c=mutant.toml``), like any user's C port. Its call
graph is the folder's top-level functions; an operation's entry is the function its ``ap_op``
table names (``{"scaled_dot_product_attention", sdpa}``), and an edit of the table, of ``main``
or outside any function reaches every operation.

Which cases a mutant runs is read from a call graph of the port's top-level definitions (a
definition "calls" every other top-level name that appears in its code: over-approximate, never
under; comments and Julia's top-level docstrings are not code, ``code_only``; an edit outside any
definition reaches every operation). Scope "reachable" (the CLI's
default, the full kill matrix): the cases of every contract operation from which the edited
function is reachable; the others would pass exactly as the unmutated port does, so skipping them
loses nothing. Scope "home" (the test suite's, to keep ``make test`` fast: a Julia worker compiles
each operation once per mutant, ~1-2 s each): only the nearest reaching operation (ties: the first
in contract order) plus the mutant's ``killed_in`` operations. Either way softmax's cheap cases are
added as a load witness (scaled dot-product attention's for a mutant of softmax itself; a C port
implementing neither: its first operation's).

A bug ("killed" expected) must fail or error on at least ``MIN_KILLS`` cases and pass at least one
(it loaded and is a single bug, not a broken file); a control ("passes") must pass every case.

**Per precision** (issue 17, docs/precision.md): a mutant is judged in every precision it applies
to (``precisions`` narrows it): float64 on the main fixtures, and, for a Julia mutant whose edit
reaches an operation the kit judges in a lower tier (:data:`KIT_TIERS`), that tier, the mutated port run
in that format (``runtimes.precision.create``, as ``verify --precision`` runs it). R computes in
double only, so its mutants are judged at float64; so are C's (our C ports declare float64).
``expect_in`` states an expectation that differs by precision (a Float32 literal is no bug in a
Float32 computation); ``killed_in`` counts, in a lower tier, only the operations that tier holds.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import queue
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from attention_ports.core import paths
from attention_ports.fixtures.store import Case, iter_entries
from attention_ports.judge.results import FAILING
from attention_ports.judge.runner import load_cases, run_suite
from attention_ports.runtimes import precision as in_precision
from attention_ports.runtimes import registry
from attention_ports.runtimes.impl import Implementation, ImplementationUnavailable
from attention_ports.spec import ops
from attention_ports.spec import precision as formats

REPO = paths.ASSET_ROOT  # holds ports/ (our R and Julia ports) in a checkout and in a wheel
MUTANTS_FILE = Path(__file__).resolve().parent / "mutants.toml"
MIN_KILLS = 2
LANGS = ("r", "julia", "c")
SOURCES = {"r": ("ports/r/R", "*.R"), "julia": ("ports/julia/src", "*.jl")}
SUFFIX = {"r": ".R", "julia": ".jl", "c": ".c"}
# Our C ports: each folder a program (its sources and the port.toml that builds it), those present.
C_PORTS = ("ports/kits/c/example", "ports/c")
C_SOURCES = ("*.c", "*.h")
C_OPT = "-O0"  # a mutant's build: the port's own flags, but this optimisation level (its cost: above)
# Load witnesses: the first of these the chosen operations lack is added (softmax's cases are the
# cheapest; a mutant of softmax itself gets scaled dot-product attention's, whose 1 x 1 case any
# softmax gets right). A witness the edit does not reach runs only its first WITNESS_CASES cases:
# the others would pass by construction (a third of the kit's case runs: R 3737 -> 2427).
WITNESS_OPS = ("softmax", "scaled_dot_product_attention")
WITNESS_CASES = 2
EXPECTATIONS = ("killed", "passes")
# Runtimes that can serve several ports at once from threads: each R, Julia and C port is its own
# supervised worker process (attention_ports/runtimes/supervisor.py); a C mutant's build (a compiler
# process) overlaps the other thread's judging.
PARALLEL = {"julia", "r", "c"}

# Where the kit judges below float64 (issue 17, item 6): float32, on the attention kernel's
# operations, where the low-precision bugs live (a softmax without its maximum overflowing at 88.7,
# sums accumulated in Float16, a finite mask fill). The tier holds the classifier's operations
# too, and the mixed and float16 tiers exist: judging the kit there is not built yet (its cost in
# `make test` and the expectations per tier), said in docs/precision.md.
KIT_TIERS: dict[str, tuple[str, ...]] = {"float32": ("softmax", "scaled_dot_product_attention")}


class MutantError(ValueError):
    """The mutants file is malformed or a mutant no longer applies to our port; names the mutant."""


@dataclass(frozen=True)
class Mutant:
    id: str
    lang: str
    file: str  # relative to the repository root
    find: str
    replace: str
    bug_class: str
    description: str
    equivalent: bool
    expect: str  # "killed" or "passes"
    killed_in: tuple[str, ...] = ()  # operations that must each contribute MIN_KILLS killing cases
    precisions: tuple[str, ...] = (formats.DEFAULT,)  # where it is judged (load_mutants: where it applies)
    expect_in: tuple[tuple[str, str], ...] = ()  # (precision, expectation) where it differs from expect

    def expectation(self, precision: str) -> str:
        """What the mutant must do when judged in ``precision``: "killed" or "passes"."""
        return dict(self.expect_in).get(precision, self.expect)

    def kill_ops(self, precision: str) -> tuple[str, ...]:
        """``killed_in`` as far as the kit judges the operations in ``precision`` (:data:`KIT_TIERS`)."""
        if precision == formats.DEFAULT:
            return self.killed_in
        return tuple(op for op in self.killed_in if op in KIT_TIERS[precision])


def _lang_of(file: str, repo: Path) -> str:
    for lang in LANGS:
        if file in {p.relative_to(repo).as_posix() for p in source_files(lang, repo)}:
            return lang
    raise KeyError(file)


def load_mutants(path: Path = MUTANTS_FILE, repo: Path = REPO) -> list[Mutant]:
    """Parse and validate every mutant; each edit must apply to the current sources."""
    try:
        raw = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MutantError(f"{path}: cannot read the mutants: {exc}") from exc
    entries = raw.get("mutant")
    if not isinstance(entries, list) or not entries:
        raise MutantError(f"{path}: no [[mutant]] entries")
    mutants: list[Mutant] = []
    seen: set[str] = set()
    required = {"id", "file", "find", "replace", "class", "description"}
    for i, entry in enumerate(entries):
        where = f"{path}: mutant #{i + 1} ({entry.get('id', '?')})"
        missing = required - set(entry)
        unknown = set(entry) - required - {"equivalent", "expect", "killed_in", "precisions", "expect_in"}
        if missing or unknown:
            raise MutantError(f"{where}: missing {sorted(missing)}, unknown {sorted(unknown)}")
        if not all(isinstance(entry[k], str) for k in required) or not re.fullmatch(r"[a-z][a-z0-9_]*", entry["id"]):
            raise MutantError(f"{where}: every field is a string and the id is lower_snake_case")
        if entry["id"] in seen:
            raise MutantError(f"{where}: duplicate id")
        seen.add(entry["id"])
        try:
            lang = _lang_of(entry["file"], repo)
        except KeyError:
            raise MutantError(f"{where}: file {entry['file']!r} is not one of our port sources") from None
        equivalent = entry.get("equivalent", False)
        expect = entry.get("expect", "passes" if equivalent else "killed")
        if not isinstance(equivalent, bool) or expect not in EXPECTATIONS:
            raise MutantError(f"{where}: equivalent is true/false, expect one of {EXPECTATIONS}")
        if equivalent and expect != "passes":
            raise MutantError(f"{where}: an equivalent mutant must be expected to pass")
        if entry["find"] == entry["replace"]:
            raise MutantError(f"{where}: the replacement equals the text it replaces")
        killed_in = entry.get("killed_in", [])
        if not isinstance(killed_in, list) or not set(killed_in) <= set(ops.OPS) or (killed_in and expect != "killed"):
            raise MutantError(f"{where}: killed_in lists operations ({', '.join(ops.OPS)}) of a mutant expected killed")
        mutant = Mutant(
            entry["id"],
            lang,
            entry["file"],
            entry["find"],
            entry["replace"],
            entry["class"],
            entry["description"],
            equivalent,
            expect,
            tuple(killed_in),
        )
        mutated_source(mutant, repo)  # fail now, naming the mutant, if the edit no longer applies
        unreachable = set(killed_in) - reachable_ops(mutant, repo)
        if unreachable:
            raise MutantError(f"{where}: killed_in names operations the edit cannot reach: {sorted(unreachable)}")
        mutants.append(_with_precisions(mutant, entry, where, repo))
    return mutants


def applicable_precisions(mutant: Mutant, repo: Path = REPO) -> tuple[str, ...]:
    """Every precision the mutant can be judged in: float64; and a lower tier for a Julia mutant
    (R has double only) whose edit reaches one of the tier's operations."""
    out = [formats.DEFAULT]
    if mutant.lang == "julia":
        out += [name for name, held in KIT_TIERS.items() if reachable_ops(mutant, repo) & set(held)]
    return tuple(out)


def _with_precisions(mutant: Mutant, entry: dict[str, Any], where: str, repo: Path) -> Mutant:
    """``precisions`` (default: every applicable one) and ``expect_in``, checked against where it applies."""
    applicable = applicable_precisions(mutant, repo)
    precisions = entry.get("precisions", list(applicable))
    if not isinstance(precisions, list) or not precisions or not all(isinstance(p, str) for p in precisions):
        raise MutantError(f"{where}: precisions is a non-empty list of {', '.join(formats.FORMATS)}")
    beyond = [p for p in precisions if p not in applicable]
    if beyond:
        why = {
            "r": "R computes in double only",
            "c": "the kit judges our C ports in the float64 they declare",
        }.get(mutant.lang, f"the edit reaches none of the kit's {KIT_TIERS}")
        raise MutantError(f"{where}: cannot be judged in {beyond} ({why}); it applies to {list(applicable)}")
    expect_in = entry.get("expect_in", {})
    if not isinstance(expect_in, dict) or not all(
        p in precisions and e in EXPECTATIONS and e != mutant.expect for p, e in expect_in.items()
    ):
        raise MutantError(
            f"{where}: expect_in maps a precision it is judged in ({', '.join(precisions)}) to the other "
            f"expectation than expect = {mutant.expect!r}"
        )
    if mutant.equivalent and expect_in:
        raise MutantError(f"{where}: an equivalent mutant passes in every precision")
    return dataclasses.replace(mutant, precisions=tuple(precisions), expect_in=tuple(sorted(expect_in.items())))


def mutated_source(mutant: Mutant, repo: Path = REPO) -> str:
    source = (repo / mutant.file).read_text()
    count = source.count(mutant.find)
    if count != 1:
        raise MutantError(
            f"mutant {mutant.id!r}: the text to find occurs {count} times in {mutant.file} (must be exactly once); "
            f"update attention_ports/tools/mutants.toml to the port's current code: {mutant.find!r}"
        )
    return source.replace(mutant.find, mutant.replace)


def source_files(lang: str, repo: Path = REPO) -> list[Path]:
    """Every source of our ports in ``lang`` (for C: of every C port present)."""
    if lang == "c":
        return [p for folder in C_PORTS for p in unit_files(lang, folder, repo)]
    folder, pattern = SOURCES[lang]
    return sorted((repo / folder).glob(pattern))


def unit_of(lang: str, file: str) -> str:
    """The folder of the one program ``file`` belongs to: R's and Julia's port is one program per
    language; each C port is its own (a folder of :data:`C_PORTS`)."""
    if lang != "c":
        return SOURCES[lang][0]
    return next(folder for folder in C_PORTS if file.startswith(folder + "/"))


def unit_files(lang: str, unit: str, repo: Path = REPO) -> list[Path]:
    """The sources of the program in ``unit`` (a C port's: its folder's, sub-folders included)."""
    if lang != "c":
        return source_files(lang, repo)
    folder = repo / unit
    return sorted(p for pattern in C_SOURCES for p in folder.rglob(pattern)) if folder.is_dir() else []


def materialise(mutant: Mutant, out_dir: Path, repo: Path = REPO) -> Path:
    """Write the mutated port as one file (every source of the language, in name order); a C
    mutant as a copy of its port's folder and the manifest that builds and runs it (returned)."""
    if mutant.lang == "c":
        return _materialise_c(mutant, out_dir, repo)
    parts = [
        f"# MUTANT {mutant.id} (attention_ports/tools/mutants.toml): {mutant.description}\n"
        f"# One edit in {mutant.file}; every other source of our {mutant.lang} port follows unchanged.\n"
    ]
    for path in source_files(mutant.lang, repo):
        rel = path.relative_to(repo).as_posix()
        text = mutated_source(mutant, repo) if rel == mutant.file else path.read_text()
        parts.append(f"# ---- {rel}\n{text}")
    out = out_dir / f"{mutant.id}{SUFFIX[mutant.lang]}"
    out.write_text("\n".join(parts))
    return out


def _materialise_c(mutant: Mutant, out_dir: Path, repo: Path) -> Path:
    unit = unit_of(mutant.lang, mutant.file)
    original = repo / unit
    folder = out_dir / mutant.id
    for path in unit_files(mutant.lang, unit, repo):
        rel = path.relative_to(repo).as_posix()
        target = folder / path.relative_to(original)
        target.parent.mkdir(parents=True, exist_ok=True)
        if rel == mutant.file:
            said = f"{mutant.id} (attention_ports/tools/mutants.toml): {mutant.description}".replace("*/", "* /")
            target.write_text(
                f"/* MUTANT {said}; one edit, every other line as in {rel}. */\n{mutated_source(mutant, repo)}"
            )
        else:
            target.write_text(path.read_text())
    language, command, build = _c_manifest(original)
    manifest = folder / "mutant.toml"
    manifest.write_text(
        f"# MUTANT {mutant.id}: {unit}'s port with one edit, built at {C_OPT}\n"
        f"language = {json.dumps(language)}\ncommand = {json.dumps(command)}\nbuild = {json.dumps(build)}\n"
    )
    return manifest


def _c_manifest(original: Path) -> tuple[str, list[str], list[str]]:
    """The C port's own port.toml, its build at :data:`C_OPT`, include paths outside its folder made
    absolute (the copy sits elsewhere; its own files, and any edited header, are in the copy)."""
    where = original / "port.toml"
    try:
        raw = tomllib.loads(where.read_text())
        command, build = list(raw["command"]), list(raw["build"])
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as exc:
        raise MutantError(f"{where}: our C port's manifest has no command and build: {exc}") from exc
    out = []
    for arg in build:
        if re.fullmatch(r"-O[0-3sgz]?|-Ofast", arg):
            arg = C_OPT
        elif arg.startswith("-I") and not Path(arg[2:]).is_absolute():
            inside = (original / arg[2:]).resolve()
            if not inside.is_relative_to(original.resolve()):
                arg = f"-I{inside}"
        out.append(arg)
    return str(raw.get("language", "c")), command, out


# ---------------------------------------------------------------- which operations a mutant reaches

DECLARATION = "attention_ports"  # a port's declaration object (attention_ports/runtimes/declaration.py)
_R_DEF = re.compile(r"^([.A-Za-z][\w.]*)\s*<-", re.M)
_JL_DEF = re.compile(
    r"^(?:function\s+([A-Za-z_][\w!]*)|const\s+([A-Za-z_]\w*)|([A-Za-z_][\w!]*)\([^\n]*\)\s*=[^=]|\"\"\")",
    re.M,
)


_R_RAW = re.compile(r"""[rR](["'])(-*)([(\[{])""")  # R 4's raw strings: r"(...)", R'[...]', r"-{...}-"
_R_CLOSE = {"(": ")", "[": "]", "{": "}"}
_JL_CHAR = re.compile(r"'(?:\\.[^'\n]*|[^\\'\n])'")  # 'a', '#', '\n', '\u00e9'
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")


def _quoted_end(text: str, i: int, quote: str) -> int:
    """The index after the string opened at ``i`` by ``quote`` (backslash escapes; unterminated: the end)."""
    j = i + len(quote)
    while j < len(text):
        if text[j] == "\\":
            j += 2
        elif text.startswith(quote, j):
            return j + len(quote)
        else:
            j += 1
    return len(text)


def _blank(chars: list[str], start: int, end: int) -> None:
    for k in range(start, end):
        if chars[k] != "\n":
            chars[k] = " "


def code_only(text: str, lang: str) -> str:
    """``text`` with its comments blanked (spaces, newlines kept, so offsets stay): R's ``#`` to the
    end of the line; Julia's ``#`` likewise, its ``#= ... =#`` blocks (nested) and the text of its
    top-level docstrings (a ``\"\"\"`` at the start of a line). A ``#`` inside a string (R: quotes,
    backticks, raw strings; Julia: strings, characters, commands) is text, not a comment; strings
    are kept (``do.call("softmax", ...)`` is a call). C: ``/* ... */`` and ``//`` comments, outside
    strings and character literals."""
    if lang == "c":
        return _c_code_only(text)
    chars, i, n = list(text), 0, len(text)
    while i < n:
        c = text[i]
        at_name = i > 0 and text[i - 1] in _NAME_CHARS
        if lang == "r":
            raw = None if at_name else _R_RAW.match(text, i)
            if raw:
                close = _R_CLOSE[raw.group(3)] + raw.group(2) + raw.group(1)
                end = text.find(close, raw.end())
                i = n if end < 0 else end + len(close)
            elif c in "\"'`":
                i = _quoted_end(text, i, c)
            elif c == "#":
                end = text.find("\n", i)
                _blank(chars, i, end if end >= 0 else n)
                i = n if end < 0 else end
            else:
                i += 1
            continue
        if text.startswith("#=", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("#=", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("=#", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            _blank(chars, i, j)
            i = j
        elif c == "#":
            end = text.find("\n", i)
            _blank(chars, i, end if end >= 0 else n)
            i = n if end < 0 else end
        elif text.startswith('"""', i):
            end = _quoted_end(text, i, '"""')
            if i == 0 or text[i - 1] == "\n":  # a docstring: words, not calls (the delimiters stay)
                _blank(chars, i + 3, max(i + 3, end - 3))
            i = end
        elif c in '"`':
            i = _quoted_end(text, i, c)
        elif c == "'" and not (at_name or (i > 0 and text[i - 1] in ")]}'")):  # else: the adjoint x'
            char = _JL_CHAR.match(text, i)
            i = char.end() if char else i + 1
        else:
            i += 1
    return "".join(chars)


def _c_code_only(text: str) -> str:
    chars, i, n = list(text), 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            _blank(chars, i, end)
            i = end
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            _blank(chars, i, end)
            i = end
        elif text[i] in "\"'":
            i = _quoted_end(text, i, text[i])
        else:
            i += 1
    return "".join(chars)


# A C definition at the start of a line: a function (or its prototype) or a table, `static const
# ap_op OPS[] = {`; its type words before the name (none for a K&R-style return type on the line above).
_C_DEF = re.compile(r"^(?:[A-Za-z_]\w*[ \t*]+)*\**([A-Za-z_]\w*)[ \t]*(?:\(|\[[^\]\n]*\][ \t]*=)", re.M)
# An operation's entry in a C port's ap_op table: {"scaled_dot_product_attention", sdpa}
_C_ENTRY = re.compile(r"\{\s*\"([a-z_][a-z0-9_]*)\"\s*,\s*&?([A-Za-z_]\w*)\s*\}")
_C_ROOTS = {"main"}  # a C program's start: it builds the declaration (ap_port) and serves every operation


@dataclass(frozen=True)
class Definition:
    name: str | None  # None: a region that defines nothing (a docstring, the file header)
    file: str
    start: int
    end: int
    text: str


def definitions(lang: str, repo: Path = REPO, unit: str | None = None) -> list[Definition]:
    """Top-level definitions of the port (of the C port in folder ``unit``), each with its code
    (``code_only``) up to the next one."""
    out = []
    for path in unit_files(lang, unit, repo) if unit else source_files(lang, repo):
        rel = path.relative_to(repo).as_posix()
        text = code_only(path.read_text(), lang)  # same offsets as the file: a mutant's edit is found
        pattern = {"r": _R_DEF, "julia": _JL_DEF, "c": _C_DEF}[lang]
        starts = [(0, None)]
        for m in pattern.finditer(text):
            starts.append((m.start(), next((g for g in m.groups() if g), None)))
        starts.append((len(text), None))
        for (start, name), (end, _) in itertools.pairwise(starts):
            if end > start:
                out.append(Definition(name, rel, start, end, text[start:end]))
    return out


def _word(name: str, lang: str) -> re.Pattern[str]:
    chars = {"r": r"\w.", "julia": r"\w!", "c": r"\w"}[lang]
    return re.compile(rf"(?<![{chars}]){re.escape(name)}(?![{chars}])")


@dataclass(frozen=True)
class CallGraph:
    defs: tuple[Definition, ...]
    calls: dict[str, frozenset[str]]  # definition -> the other definitions its code names
    entries: dict[str, str]  # contract operation -> the definition that implements it
    roots: frozenset[str]  # definitions whose edit reaches every operation (a declaration, C's main)


@functools.cache
def _call_graph(lang: str, repo: Path, unit: str) -> CallGraph:
    defs = tuple(definitions(lang, repo, unit if lang == "c" else None))
    named = {d.name for d in defs if d.name}
    calls: dict[str, set[str]] = {}
    for d in defs:
        if d.name:
            calls.setdefault(d.name, set()).update(
                other for other in named if other != d.name and _word(other, lang).search(d.text)
            )
    if lang != "c":  # R and Julia: an operation is the function of its name
        entries = {op: op for op in ops.OPS if op in calls}
        roots = {DECLARATION}
    else:  # C: the function the ap_op table names; the table is read by main, never "called"
        tables = {d.name: dict(_C_ENTRY.findall(d.text)) for d in defs if d.name and _C_ENTRY.search(d.text)}
        entries = {op: fn for table in tables.values() for op, fn in table.items() if op in ops.OPS and fn in calls}
        roots = _C_ROOTS | set(tables)
    return CallGraph(defs, {n: frozenset(c) for n, c in calls.items()}, entries, frozenset(roots))


def op_distances(mutant: Mutant, repo: Path = REPO) -> dict[str, int]:
    """Each contract operation that reaches the edited definition, with the number of calls between."""
    graph = _call_graph(mutant.lang, repo, unit_of(mutant.lang, mutant.file))
    calls = graph.calls
    source = (repo / mutant.file).read_text()
    at = source.index(mutant.find)
    edited = next(d for d in graph.defs if d.file == mutant.file and d.start <= at < d.end)
    present = [op for op in ops.OPS if op in graph.entries]
    # outside any definition, or in the port's declaration (read by the harness, never called: its
    # fields decide how operations are called and judged, e.g. rope_pairing; C's main and ap_op
    # table): it reaches everything
    if edited.name is None or edited.name in graph.roots:
        return {op: 0 for op in present}
    out = {}
    for op in present:  # breadth first from the operation's definition down its callees
        entry = graph.entries[op]
        depth, frontier, seen = 0, {entry}, {entry}
        while frontier and edited.name not in frontier:
            frontier = {c for name in frontier for c in calls.get(name, ()) if c not in seen}
            seen |= frontier
            depth += 1
        if edited.name in frontier:
            out[op] = depth
    return out


def reachable_ops(mutant: Mutant, repo: Path = REPO) -> set[str]:
    """Contract operations whose definition reaches the definition the mutant edits."""
    return set(op_distances(mutant, repo))


def home_ops(mutant: Mutant, repo: Path = REPO, precision: str = formats.DEFAULT) -> set[str]:
    """The nearest reaching operation (the first in contract order among the nearest), plus killed_in;
    in a lower tier, among the tier's operations."""
    held = ops.OPS if precision == formats.DEFAULT else KIT_TIERS[precision]
    dist = {op: d for op, d in op_distances(mutant, repo).items() if op in held}
    if not dist:
        return set(mutant.kill_ops(precision))
    nearest = min(dist.values())
    return {next(op for op in ops.OPS if dist.get(op) == nearest)} | set(mutant.kill_ops(precision))


SCOPES = ("reachable", "home")


def cases_for(
    mutant: Mutant,
    entries: list[dict[str, Any]],
    scope: str = "reachable",
    repo: Path = REPO,
    precision: str = formats.DEFAULT,
) -> list[str]:
    """Case ids to run: every reaching operation's ("reachable"), or only the nearest one's and
    killed_in's ("home", the fast scope of the test suite); plus a load witness's (softmax's, see
    WITNESS_OPS): all of them where the edit reaches it, else its first WITNESS_CASES."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    reached = reachable_ops(mutant, repo)
    chosen = set(reached) if scope == "reachable" else home_ops(mutant, repo, precision)
    if precision != formats.DEFAULT:
        chosen &= set(KIT_TIERS[precision])
    # the witness: an operation the mutant's program implements (each C port is a program of its own)
    implemented = [
        op for op in ops.OPS if op in _call_graph(mutant.lang, repo, unit_of(mutant.lang, mutant.file)).entries
    ]
    witnesses = [op for op in WITNESS_OPS if op in implemented] or implemented[:1]
    witness = next((op for op in witnesses if op not in chosen), witnesses[0])
    shown = [e["id"] for e in entries if e["op"] == witness and witness not in chosen]
    if witness not in reached:
        shown = shown[:WITNESS_CASES]
    return [e["id"] for e in entries if e["op"] in chosen or e["id"] in shown]


# ---------------------------------------------------------------- running


@dataclass
class MutantResult:
    mutant: Mutant
    precision: str = formats.DEFAULT  # the precision the mutated port ran in and was judged in
    statuses: dict[str, str] = field(default_factory=dict)  # case id -> worst status over its outputs
    op_of: dict[str, str] = field(default_factory=dict)  # case id -> operation
    messages: dict[str, str] = field(default_factory=dict)  # case id -> first failure line
    # case id -> (output, diagnosis) of each failing output that got one: what the kit's bugs are
    # told (issue 26: a logic bug must never be told it is float32's rounding)
    diagnoses: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    localisations: dict[str, str] = field(default_factory=dict)  # case id -> where it goes wrong
    seconds: float = 0.0

    @property
    def killing(self) -> list[str]:
        return [c for c, s in self.statuses.items() if s in FAILING]

    @property
    def passing(self) -> list[str]:
        return [c for c, s in self.statuses.items() if s == "pass"]

    def kills_in(self, op: str) -> list[str]:
        return [c for c in self.killing if self.op_of.get(c) == op]

    @property
    def expect(self) -> str:
        return self.mutant.expectation(self.precision)

    @property
    def short_ops(self) -> list[str]:
        """Operations of ``killed_in`` that contribute fewer than MIN_KILLS killing cases."""
        return [op for op in self.mutant.kill_ops(self.precision) if len(self.kills_in(op)) < MIN_KILLS]

    @property
    def ok(self) -> bool:
        if self.expect == "passes":
            return bool(self.statuses) and len(self.passing) == len(self.statuses)
        return len(self.killing) >= MIN_KILLS and bool(self.passing) and not self.short_ops

    def verdict(self) -> str:
        if not self.statuses:
            return f"NOT RUN: {self.messages.get('*', 'no case ran')}"
        if self.expect == "passes":
            bad = [c for c in self.statuses if self.statuses[c] != "pass"]
            return "control passes" if self.ok else f"CONTROL FAILS {len(bad)} case(s)"
        if len(self.killing) < MIN_KILLS:
            return f"SURVIVES (caught by {len(self.killing)} case(s), needs {MIN_KILLS})"
        if not self.passing:
            return "BROKEN FILE? (passes no case: not a single bug)"
        if self.short_ops:
            return f"SURVIVES in {', '.join(self.short_ops)} (< {MIN_KILLS} killing cases there)"
        return f"killed by {len(self.killing)}"

    def as_json(self) -> dict[str, Any]:
        m = self.mutant
        return {
            "id": m.id,
            "lang": m.lang,
            "file": m.file,
            "class": m.bug_class,
            "description": m.description,
            "equivalent": m.equivalent,
            "precision": self.precision,
            "expect": self.expect,
            "ok": self.ok,
            "verdict": self.verdict(),
            "killed_in": list(m.killed_in),
            "killing_cases": self.killing,
            "statuses": self.statuses,
            "messages": self.messages,
            "diagnoses": {c: [list(d) for d in ds] for c, ds in self.diagnoses.items()},
            "localisations": self.localisations,
            "seconds": round(self.seconds, 3),
        }


class KeptWorker:
    """One R or Julia implementation kept across mutants run one after another, each mutated port
    loaded into it in turn instead of starting the runtime anew for each of ~250 mutants:
    ``RImplementation.load`` (~25 ms instead of a start's ~0.35 s) or ``JuliaImplementation.load``.
    Either loads in place only where the worker's session is as it started, else starts a fresh
    worker. R gives each port an environment of its own; Julia redefines, in the module it serves,
    the methods whose bodies the mutant changed where that is what a fresh module would be (no
    state in the module, no constant or type changed: ports/julia/worker.jl, ``patch!``), else
    includes the port into a fresh module; so nothing of one mutant reaches the next. A Julia
    worker starts on our unmutated port (``base``): the module its system image holds compiled,
    so that a mutant recompiles only what calls the methods it changed (the float64 kit's Julia
    CPU ~87 -> ~40 s). ``precision``: the kit's (Julia runs in it; R is double only and kept in
    float64 alone)."""

    def __init__(self, precision: str = formats.DEFAULT) -> None:
        self.precision = precision
        self.impl: Any = None  # an RImplementation or a JuliaImplementation, once one started
        self.lang = ""

    def load(self, lang: str, port: Path, base: Path | None = None) -> Implementation | None:
        """The implementation running ``port``; None where it cannot load (then ``run_suite``
        builds it itself and reports why, exactly as for a port that was never kept). ``base``:
        the unmutated port a new Julia worker starts on, ``port`` then loaded in its place."""
        if lang not in ("r", "julia") or (lang == "r" and self.precision != formats.DEFAULT):
            return None
        if self.impl is not None and self.lang != lang:
            self.close()
        try:
            if self.impl is None:
                first = base if lang == "julia" and base is not None else port
                made = in_precision.create(lang, first, self.precision)
                self.impl, self.lang = made or registry.create(lang, first), lang
                if first is port:
                    return self.impl
            self.impl.load(port)
        except ImplementationUnavailable:
            self.close()
            return None
        return self.impl

    def close(self) -> None:
        if self.impl is not None:
            self.impl.close()
            self.impl = None


def run_mutant(
    mutant: Mutant,
    case_ids: list[str],
    fixtures_dir: Path,
    repo: Path = REPO,
    precision: str = formats.DEFAULT,
    entries: Sequence[dict[str, Any]] | None = None,
    kept: KeptWorker | None = None,
    loaded: Mapping[str, Case] | None = None,
) -> MutantResult:
    """Run one mutant; a failure of the kit itself (not of the port) is reported on the mutant.

    ``entries``: ``fixtures_dir``'s manifest entries, read once by :func:`run_kit` (validating the
    manifest took ~0.4 s, as long as a Julia mutant's own run, when each mutant read it again).
    ``kept``: an R or Julia worker to load the mutant into (:class:`KeptWorker`), for mutants run one by one.
    ``loaded``: ``fixtures_dir``'s cases, read once by :func:`run_kit` (``run_suite``'s ``loaded``)."""
    try:
        return _run_mutant(mutant, case_ids, fixtures_dir, repo, precision, entries, kept, loaded)
    except Exception as exc:  # one broken run must not hide the other mutants' verdicts
        return MutantResult(
            mutant, precision, messages={"*": f"the kit could not run this mutant: {type(exc).__name__}: {exc}"}
        )


def _run_mutant(
    mutant: Mutant,
    case_ids: list[str],
    fixtures_dir: Path,
    repo: Path,
    precision: str,
    entries: Sequence[dict[str, Any]] | None,
    kept: KeptWorker | None,
    loaded: Mapping[str, Case] | None,
) -> MutantResult:
    result = MutantResult(mutant, precision)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as tmp:
        port = materialise(mutant, Path(tmp), repo)
        # The port run in the precision judged in, exactly as `verify --precision` runs it (None:
        # float64, which run_suite builds itself unless a kept worker has loaded it).
        base = repo / unit_of(mutant.lang, mutant.file)
        live = kept.load(mutant.lang, port, base) if kept is not None else None
        impl = live or in_precision.create(mutant.lang, port, precision)
        try:
            # Case ids are [A-Za-z0-9_]+ (catalogue.CASE_ID): as globs they match exactly themselves.
            runs = run_suite(
                fixtures_dir,
                [mutant.lang],
                ports={mutant.lang: port},
                case_globs=case_ids,
                required={mutant.lang},
                progress=None,
                live={mutant.lang: impl} if impl is not None else None,
                entries=entries,
                loaded=loaded,
            )
        finally:
            if impl is not None and impl is not live:
                impl.close()
    for r in runs:
        result.statuses[r.case] = r.status
        result.op_of[r.case] = r.op
        if r.status != "pass":
            result.messages[r.case] = next((o.message.splitlines()[0] for o in r.outputs if o.message), r.status)
            said = [(o.output, o.diagnosis) for o in r.outputs if o.status != "pass" and o.diagnosis]
            if said:
                result.diagnoses[r.case] = said
            if r.localisation:
                result.localisations[r.case] = r.localisation
    result.seconds = time.perf_counter() - start
    return result


Progress = Callable[[MutantResult, int, int], None]


def unavailable(lang: str) -> str | None:
    """Why ``lang``'s mutants cannot run on this machine (its runtime cannot start, no C compiler);
    None where they can. A runtime that cannot start would "kill" every mutant."""
    if lang == "c":
        return None if shutil.which("cc") else "no C compiler (cc) on PATH: attention-ports setup c"
    try:
        registry.create(lang).close()
    except ImplementationUnavailable as exc:
        return str(exc)
    return None


def run_kit(
    mutants: Iterable[Mutant],
    fixtures_dir: Path | None = None,
    jobs: int = 2,
    progress: Progress | None = None,
    scope: str = "reachable",
    repo: Path = REPO,
    precision: str = formats.DEFAULT,
) -> list[MutantResult]:
    """Run every mutant judged in ``precision`` (the others are left out) on its cases of
    ``fixtures_dir`` (default: that precision's fixtures). The mutants of the languages in
    :data:`PARALLEL` (both) run ``jobs`` at a time in threads, each on a worker process of its own:
    a worker that an earlier mutant left idle, loaded anew (:class:`KeptWorker`)."""
    fixtures_dir = fixtures_dir or formats.fixtures_dir(precision)
    mutants = [m for m in mutants if precision in m.precisions]
    entries = list(iter_entries(fixtures_dir))
    plan = [(m, cases_for(m, entries, scope, repo, precision)) for m in mutants]
    # each case read once for the whole kit, not once per mutant (~3,700 reads of ~190 cases, ~1 ms each)
    wanted = {c for _, ids in plan for c in ids}
    loaded = load_cases(fixtures_dir, [e for e in entries if e["id"] in wanted])
    results: dict[str, MutantResult] = {}
    done = 0

    def finished(res: MutantResult) -> None:
        nonlocal done
        done += 1
        results[res.mutant.id] = res
        if progress:
            progress(res, done, len(plan))

    parallel = [(m, c) for m, c in plan if m.lang in PARALLEL]
    serial = [(m, c) for m, c in plan if m.lang not in PARALLEL]
    # Workers kept for the next mutant (KeptWorker): each run takes one that no other run holds.
    idle: queue.SimpleQueue[KeptWorker] = queue.SimpleQueue()
    kept: list[KeptWorker] = []

    def run_kept(m: Mutant, c: list[str]) -> MutantResult:
        try:
            worker = idle.get_nowait()
        except queue.Empty:
            worker = KeptWorker(precision)
            kept.append(worker)
        try:
            return run_mutant(m, c, fixtures_dir, repo, precision, entries, worker, loaded)
        finally:
            idle.put(worker)

    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="mutant") as pool:
            futures = [pool.submit(run_kept, m, c) for m, c in parallel]
            for m, c in serial:
                finished(run_kept(m, c))
            for fut in futures:
                finished(fut.result())
    finally:
        for worker in kept:
            worker.close()
    return [results[m.id] for m in mutants]


# ---------------------------------------------------------------- reporting


def summary(results: list[MutantResult]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for lang in LANGS:
        mine = [r for r in results if r.mutant.lang == lang]
        if not mine:
            continue
        bugs = [r for r in mine if r.expect == "killed"]
        controls = [r for r in mine if r.expect == "passes"]
        out[lang] = {
            "bugs": len(bugs),
            "killed": sum(1 for r in bugs if r.ok),
            "controls": len(controls),
            "controls_pass": sum(1 for r in controls if r.ok),
            "equivalent": sum(1 for r in controls if r.mutant.equivalent),
        }
    return out


def report_lines(results: list[MutantResult], show_cases: int = 6) -> list[str]:
    """One line per mutant (verdict, class, killing cases), then the kill count per language."""
    lines = []
    width = max((len(r.mutant.id) for r in results), default=10)
    for r in results:
        mark = "ok  " if r.ok else "FAIL"
        cases = r.killing if r.expect == "killed" else [c for c in r.statuses if r.statuses[c] != "pass"]
        shown = ", ".join(cases[:show_cases]) + (
            f", ... (+{len(cases) - show_cases})" if len(cases) > show_cases else ""
        )
        ran = f"{len(r.statuses)} cases, {r.seconds:.1f}s"
        lines.append(f"{mark} {r.mutant.id:<{width}}  {r.verdict():<28} [{r.mutant.bug_class}] ({ran}) {shown}")
    for lang, s in summary(results).items():
        at = f" ({results[0].precision})" if results and results[0].precision != formats.DEFAULT else ""
        lines.append(
            f"{lang}{at}: {s['killed']}/{s['bugs']} bugs caught by >= {MIN_KILLS} cases; "
            f"{s['controls_pass']}/{s['controls']} controls pass every case ({s['equivalent']} equivalent edits)"
        )
    return lines
