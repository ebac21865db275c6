"""Untrusted input, checked before it is used: the fixture manifest, its files, and the catalogue.

A fixture folder and a catalogue may come from anyone (a team's own fixtures, a tampered
checkout), so nothing in them is trusted. The order is fixed: first the document's *shape* (a
JSON Schema, fixtures/schemas/manifest.schema.json / catalogue.schema.json, loaded as
:data:`MANIFEST_SCHEMA` / :data:`CATALOGUE_SCHEMA`: every field present, of its
type, nothing unknown; a manifest with ``NaN`` or ``Infinity`` in it is not JSON), then what a
schema cannot say, and only then is any file the document names opened.

The manifest (``check_manifest``), before any file is read:
  - every file it names is a relative path of plain components inside the fixture folder (no
    ``..``, no absolute path, and still inside after symlinks are resolved; a reader of single
    files, ``fixtures.load_array``, repeats the first two checks, since its entry came from here);
  - every array it declares holds at most :data:`MAX_ARRAY_BYTES` (shape x dtype size), so no
    manifest can make us allocate more than that per file; case ids are unique.
  A violation is the whole run's error (``attention-ports`` exits 2 before running anything).
  ``read_manifest`` remembers, by SHA-256, the texts it accepted in this process: the same bytes
  again skip the checks of the text alone (nesting, schema), never those against the folder.

Each file, when its case is loaded (``read_fixture_file``, ``check_npy``):
  - a regular file (never a device, FIFO or directory: ``/dev/zero`` is not read) of at most
    :data:`MAX_ARRAY_BYTES` plus its header, opened without blocking;
  - its ``.npy`` header is parsed on its own first, must be format 1.0-3.0, little-endian or
    byte-order free, C order, no Python objects, and agree with the manifest's shape and dtype,
    and the file's size must be exactly header + shape x item size: only then is it loaded.
Bounds (``check_bounds``), per case, after loading: every element of every ``bound.<name>.npy``
  is finite, ``>= 0``, at least the resolution term of the stored formula
  (``RESOLUTION |expected|``) and at most ``MAX_RELATIVE_BOUND`` times the case's largest finite
  ``|expected|`` plus ``UNDERFLOW`` (``attention_ports/truth/bounds.py``: the error analysis is first
  order and refuses any relative error above 2^-20, so a larger bound cannot come from it;
  the loosest shipped bound is ~4e-10 of its case's scale). A tampered bound (``NaN``, ``inf``,
  ``1e6``, negative) therefore cannot make a wrong port pass.
  A file that fails is that case's error ("fixture error", named file and reason); the other
  cases still run and are reported, and the run exits 2 (bad input) at the end.

The catalogue (``schema_problems(raw, CATALOGUE_SCHEMA, ...)`` from ``catalogue.py``): types of
every field, the input makers' fields, shapes of at most :data:`MAX_CATALOGUE_ELEMENTS` elements.

A JSON report read back (``report/json_report.read_report``: ``merge-reports``' shards): a regular
file under its size cap (``read_regular_file``), nested at most so deep (``check_nesting``,
before parsing), then ``REPORT_SCHEMA`` (fixtures/schemas/report.schema.json).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np

from attention_ports.core import paths

MAX_MANIFEST_BYTES = 64 << 20  # the shipped manifest is ~0.5 MiB
MAX_CATALOGUE_BYTES = 16 << 20
MAX_ARRAY_BYTES = 256 << 20  # per fixture file; the largest shipped one is 0.8 MiB
MAX_NPY_HEADER = 65535 + 12  # what format 1.0's 2-byte header length allows (plus magic)
MAX_CATALOGUE_ELEMENTS = 1 << 24  # one generated input (128 MiB of float64)
# The deepest nesting of arrays and tables a manifest or catalogue may have: the shipped ones reach
# 6 (a 3-D literal in an inline table); a parser (json's, tomllib's) and our schema walk recurse
# once per level, so 100,000 levels would be a RecursionError, a bug's exit, not bad input.
MAX_NESTING = 64
MAX_RELATIVE_BOUND = 2.0**-20  # bounds.MAX_FIRST_ORDER
RESOLUTION = 2.0**-46  # bounds.RESOLUTION: the stored bound's resolution term
UNDERFLOW = 2.0**-1000  # bounds.UNDERFLOW: the stored bound's underflow allowance
# A path component: letters, digits, '_', '-', '.', not starting with '.' (so never '.' or '..').
_COMPONENT = "[A-Za-z0-9_][A-Za-z0-9_.-]*"
FILE_PATTERN = f"^{_COMPONENT}(/{_COMPONENT})*[.]npy$"

Error = Callable[[str], Exception]

# ---------------------------------------------------------------------------------------- schemas
# The documents' shapes are JSON Schemas (draft 2020-12) shipped with the fixtures, so that any
# tooling can check a manifest or a catalogue (converted from TOML) without this package. The
# masked-query convention names in the manifest's schema are attention_ports/spec/conventions.py's;
# the dtypes, fixtures/store.py's ALLOWED_DTYPES; the input sizes, MAX_CATALOGUE_ELEMENTS
# (tests/core/test_validate.py checks that they agree).
SCHEMAS = paths.FIXTURES / "schemas"


def _load_schema(name: str) -> dict[str, Any]:
    # Not checked against the metaschema here: that took ~50 ms of every process's start (each CLI
    # command, each test process), for files that only change with the package; a test checks them.
    return json.loads((SCHEMAS / name).read_text(encoding="utf-8"))


MANIFEST_SCHEMA: dict[str, Any] = _load_schema("manifest.schema.json")
CATALOGUE_SCHEMA: dict[str, Any] = _load_schema("catalogue.schema.json")
# A JSON report read back (merge-reports' shards): attention_ports/report/json_report.py reads it.
REPORT_SCHEMA: dict[str, Any] = _load_schema("report.schema.json")


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every local ``#/$defs/NAME`` reference replaced by its definition (a schema
    without recursive definitions): the same checks, twice as fast to run (jsonschema resolves a
    ``$ref`` at every use; a report read back has thousands of rows)."""
    defs = schema.get("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(defs[node["$ref"].removeprefix("#/$defs/")])
            return {k: inline(v) for k, v in node.items() if k != "$defs"}
        return [inline(x) for x in node] if isinstance(node, list) else node

    return inline(schema)


# ---------------------------------------------------------------------------------------- helpers
def _short(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ... (cut)"


def json_path(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _describe(error: jsonschema.ValidationError) -> str:
    """A schema error as a person reads it: the field, what it is, what it should be."""
    got = _short(repr(error.instance), 80)
    v, expected = error.validator, error.validator_value
    if v == "type":
        return f"must be of type {expected}, got {got}"
    if v == "required":
        missing = [k for k in expected if k not in error.instance]
        return f"lacks the required field(s) {', '.join(map(repr, missing))}"
    if v == "additionalProperties" and expected is False:
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        return f"unknown field(s) {', '.join(map(repr, extra))} (allowed: {', '.join(allowed)})"
    if v in {"enum", "const"}:
        options = expected if v == "enum" else [expected]
        return f"must be one of {', '.join(map(repr, options))}, got {got}"
    if v == "pattern":
        return f"must match {expected}, got {got}"
    return _short(error.message)


def schema_problems(
    doc: Any, schema: Mapping[str, Any], where: Callable[[Sequence[Any]], str], limit: int = 5
) -> list[str]:
    """Every violation of ``schema`` (the first ``limit``), each as "WHERE: what is wrong"; ``where``
    names the place from the JSON path (a case id rather than an index, where it can)."""
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
    problems = []
    for error in errors:
        # anyOf/oneOf failures: the deepest sub-error says the most (the literal's bad element).
        leaf = jsonschema.exceptions.best_match([error]) if error.context else error
        problems.append(f"{where(list(leaf.absolute_path))}: {_describe(leaf)}")
    if len(problems) > limit:
        problems = [*problems[:limit], f"... and {len(problems) - limit} more"]
    return problems


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not JSON (a number must be finite)")


def read_regular_file(path: Path, max_bytes: int, error: Error, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; anything else is ``error``.

    Opened non-blocking and checked on the open descriptor, so a FIFO, a device (``/dev/zero``)
    or a directory is refused before a byte is read, and a file cannot be swapped in between.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{path}: {what} is missing") from None
    except OSError as exc:
        raise error(f"{path}: cannot open the {what}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise error(f"{path}: not a regular file (a {_kind(st.st_mode)}); refusing to read it")
        if st.st_size > max_bytes:
            raise error(f"{path}: {st.st_size} bytes, more than the {max_bytes} a {what} may have")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise error(f"{path}: grew beyond {max_bytes} bytes while being read")
        return data
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return name
    return "special file"


def read_json(path: Path, max_bytes: int, error: Error, what: str, max_depth: int | None = None) -> Any:
    """A JSON file through :func:`read_regular_file`; ``max_depth``: refused when nested deeper
    (:func:`check_nesting`, before parsing)."""
    return parse_json(read_regular_file(path, max_bytes, error, what), path, error, max_depth)


def parse_json(data: bytes, path: Path, error: Error, max_depth: int | None = None) -> Any:
    """:func:`read_json` on bytes already read (by :func:`read_regular_file`) from ``path``."""
    check_nesting(data, path, error, "json", MAX_NESTING if max_depth is None else max_depth)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not valid JSON: {exc}") from exc
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise error(f"{path}: not valid JSON: {exc}") from exc
    except RecursionError:  # check_nesting's scan bounds the depth; this is its backstop
        raise error(f"{path}: nested deeper than {MAX_NESTING if max_depth is None else max_depth} levels") from None


# What is not structure: strings (their brackets are text) and, in TOML, comments.
_JSON_TEXT = re.compile(rb'"(?:[^"\\]|\\.)*"')
_TOML_TEXT = re.compile(rb'"""[\s\S]*?"""(?!")|\'\'\'[\s\S]*?\'\'\'(?!\')|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*')


# A TOML dotted key (``a.b."c"``, strings already blanked): each component is one level of tables.
_TOML_DOTTED = re.compile(rb'(?:[A-Za-z0-9_-]+|"")(?:[ \t]*\.[ \t]*(?:[A-Za-z0-9_-]+|""))+')


def nesting_depth(data: bytes, syntax: str = "json") -> int:
    """The deepest nesting of ``[`` and ``{`` in a JSON (``syntax="json"``) or TOML document, its
    strings and comments left out: a scan of the bytes, before any parser recurses into them. In
    TOML a dotted key nests tables too (and tomllib takes time quadratic in its length): its
    longest one is added, an upper bound (a float such as 1.5 counts as two components)."""
    text = (_JSON_TEXT if syntax == "json" else _TOML_TEXT).sub(b'""', data)
    b = np.frombuffer(text, dtype=np.uint8)
    step = np.isin(b, (ord("["), ord("{"))).astype(np.int64) - np.isin(b, (ord("]"), ord("}")))
    depth = int(np.cumsum(step).max(initial=0))
    if syntax == "toml":
        depth += max((m.group().count(b".") + 1 for m in _TOML_DOTTED.finditer(text)), default=0)
    return depth


def check_nesting(data: bytes, path: Path, error: Error, syntax: str = "json", max_depth: int = MAX_NESTING) -> None:
    """``error`` naming ``path`` when the document nests deeper than ``max_depth`` (default
    :data:`MAX_NESTING`), checked before parsing: a parser recurses once per level, so a document
    100,000 deep would be a RecursionError."""
    depth = nesting_depth(data, syntax)
    if depth > max_depth:
        raise error(f"{path}: nested {depth} levels deep; at most {max_depth} are allowed")


# ---------------------------------------------------------------------------------------- manifest
def check_relative(rel: str, error: Error, where: str | Callable[[], str]) -> None:
    """``rel`` is a relative path of plain components (no '..', not absolute), ending in .npy.
    ``where`` (or what it returns, called only for the message) names the place."""
    bad = (
        rel.startswith("/")  # absolute (POSIX: a manifest names files with '/')
        or "\\" in rel
        or "\0" in rel
        or any(part in {"..", "."} for part in rel.split("/"))
        or re.fullmatch(FILE_PATTERN, rel) is None
    )
    if bad:
        raise error(
            f"{where if isinstance(where, str) else where()}: {rel!r} is not a relative path inside the fixture "
            "folder (plain names joined by '/', ending in .npy; no '..', no absolute path)"
        )


class Inside:
    """Checks that paths named relative to a fixture folder stay inside it, symlinks resolved.
    Built once a manifest (it names ~3,300 files, and is checked on every read): the folder's real
    path, and each sub-folder's, resolved once, and each folder's symlinks listed by one scan of
    it (``os.scandir``: the kind of every entry at once, where a ``lstat`` per file made this check
    ~80% of a read, ~30 ms, which a test run pays ~1,500 times); plain strings, no Path built per
    file. ``text_checked``: the names passed :func:`check_relative` when this manifest text was
    first accepted (:func:`read_manifest`), so only the folder is looked at again."""

    def __init__(self, root: Path, text_checked: bool = False) -> None:
        self.root = os.fspath(root)
        self.base = os.path.realpath(self.root)
        self.prefix = self.base.rstrip(os.sep) + os.sep
        self.text_checked = text_checked
        self.real_dirs: dict[str, str] = {}
        self.links: dict[str, frozenset[str]] = {}  # a real folder -> the names of its symlinks

    def _links(self, real_dir: str) -> frozenset[str]:
        if real_dir not in self.links:
            try:
                with os.scandir(real_dir) as entries:
                    self.links[real_dir] = frozenset(e.name for e in entries if e.is_symlink())
            except OSError:  # no such folder (or not one): nothing in it is a link, as islink says
                self.links[real_dir] = frozenset()
        return self.links[real_dir]

    def check(self, rel: str, error: Error, where: Callable[[], str]) -> None:
        """``rel`` is a relative path of plain components that stays inside the folder; anything
        else (absolute, ``..``, a link leading out) is ``error`` naming ``where()``."""
        if not self.text_checked:
            check_relative(rel, error, where)
        parent, _, name = rel.rpartition("/")
        if parent:
            if parent not in self.real_dirs:
                self.real_dirs[parent] = os.path.realpath(os.path.join(self.root, parent))
            folder = self.real_dirs[parent]
        else:
            folder = self.base
        target = folder + name if folder.endswith(os.sep) else folder + os.sep + name  # os.path.join, inlined
        if name in self._links(folder):
            target = os.path.realpath(target)
        if not target.startswith(self.prefix):
            raise error(
                f"{where()}: {rel!r} leads outside the fixture folder {self.base} (to {target}, through a symlink)"
            )


def array_bytes(shape: Sequence[int], dtype: str) -> int:
    return math.prod(shape) * np.dtype(dtype).itemsize  # Python ints: no overflow at (10**15,)


# The SHA-256 of every manifest text accepted by :func:`read_manifest` in this process. The checks
# of the text alone (its nesting, then MANIFEST_SCHEMA: ~0.17 s, most of a read of the shipped
# manifest, which one test run reads ~500 times in its worker processes) give the same verdict on
# the same bytes; the checks against the folder (paths, symlinks) run on every read.
_ACCEPTED_TEXTS: set[bytes] = set()


def read_manifest(path: Path, root: Path, error: Error) -> Any:
    """The manifest at ``path`` (of the fixture folder ``root``), read and checked as a whole."""
    data = read_regular_file(path, MAX_MANIFEST_BYTES, error, "manifest")
    digest = hashlib.sha256(data).digest()
    if digest in _ACCEPTED_TEXTS:
        manifest = json.loads(data)
        check_manifest(manifest, path, root, error, text_checked=True)
    else:
        manifest = parse_json(data, path, error)
        check_manifest(manifest, path, root, error)
        _ACCEPTED_TEXTS.add(digest)
    return manifest


def check_manifest(manifest: Any, path: Path, root: Path, error: Error, text_checked: bool = False) -> None:
    """The whole manifest, before any file it names is read (see the module docstring);
    ``text_checked``: its text passed the schema before (:func:`read_manifest`)."""

    def where(p: Sequence[Any]) -> str:
        if len(p) >= 2 and p[0] == "cases" and isinstance(p[1], int):
            try:
                case_id = manifest["cases"][p[1]]["id"]
            except (KeyError, IndexError, TypeError):
                case_id = None
            label = f"case {case_id!r} (cases[{p[1]}])" if isinstance(case_id, str) else f"cases[{p[1]}]"
            rest = json_path(p[2:])
            return f"{path}: {label}" + (f", field {rest!r}" if p[2:] else "")
        return f"{path}: field {json_path(p)!r}" if p else f"{path}"

    if isinstance(manifest, dict) and manifest.get("format_version") != 2:
        raise error(
            f"{path}: format_version {manifest.get('format_version')!r} is not 2 "
            f"(regenerate with `attention-ports generate --out {root}`)"
        )
    if not text_checked:
        problems = schema_problems(manifest, MANIFEST_SCHEMA, where)
        if problems:
            raise error("the manifest is malformed:\n  " + "\n  ".join(problems))
    seen: set[str] = set()
    inside = Inside(root, text_checked)
    for i, case in enumerate(manifest["cases"]):
        if case["id"] in seen:
            raise error(f"{where(['cases', i, 'id'])}: case id {case['id']!r} appears twice")
        seen.add(case["id"])
        groups: list[tuple[list[Any], dict[str, Any]]] = [(["cases", i, k], case[k]) for k in ("inputs", "expected")]
        for conv, metas in case.get("masked_query", {}).get("expected", {}).items():
            groups.append((["cases", i, "masked_query", "expected", conv], metas))
        for at, metas in groups:
            for name, meta in metas.items():
                fields = ["file", "bound_file"] if "bound_file" in meta else ["file"]
                for f in fields:
                    inside.check(meta[f], error, lambda at=at, name=name, f=f: where([*at, name, f]))
                size = array_bytes(meta["shape"], meta["dtype"])
                if size > MAX_ARRAY_BYTES:
                    raise error(
                        f"{where([*at, name, 'shape'])}: {meta['shape']} of {meta['dtype']} is "
                        f"{size} bytes, more than the {MAX_ARRAY_BYTES} a fixture array may have"
                    )


# ---------------------------------------------------------------------------------------- arrays
# The .npy header is a Python dict literal (numpy writes ``{'descr': '<f8', 'fortran_order':
# False, 'shape': (3, 5), }``). It is parsed here by a small strict parser of literals, never by
# ``ast.literal_eval`` (nor ``np.load``, which calls it): CPython 3.11's ``ast`` used from several
# threads at once can raise a spurious "SystemError: AST constructor recursion depth mismatch"
# (gh-106905), and the judge runs implementations in threads (judge/runner.py), each loading
# fixture files. The parser accepts strings, integers, True/False/None, tuples, lists and dicts,
# nested at most a few levels: everything a numpy header can hold, so the checks below still see
# what the header says (an object dtype, a structured one) and say so in the same words.
_TOKEN = re.compile(
    r"""\s*(?:(?P<str>'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")|(?P<int>[-+]?\d+)|(?P<name>[A-Za-z_]\w*)|(?P<punct>[{}()\[\]:,]))"""
)
_NAMES = {"True": True, "False": False, "None": None}
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "0": "\0"}
_MAX_DEPTH = 8


def _unquote(text: str) -> str:
    body = text[1:-1]
    if "\\" not in body:
        return body
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise ValueError(f"unsupported escape \\{nxt} in the header")
            out.append(_ESCAPES[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_header_literal(text: str) -> Any:
    """The Python literal ``text`` (a .npy header's dict), without ``ast`` (thread-safe; see above).
    ValueError for anything else: an expression, a name other than True/False/None, a float."""
    tokens: list[tuple[str, Any]] = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise ValueError(f"invalid syntax at character {pos + 1} of the header: {_short(text[pos : pos + 20])!r}")
        pos = m.end()
        if m["str"] is not None:
            tokens.append(("value", _unquote(m["str"])))
        elif m["int"] is not None:
            tokens.append(("value", int(m["int"])))
        elif m["name"] is not None:
            if m["name"] not in _NAMES:
                raise ValueError(f"malformed node or string: {m['name']!r} is not a literal")
            tokens.append(("value", _NAMES[m["name"]]))
        else:
            tokens.append((m["punct"], None))
    tokens.append(("end", None))
    at = 0

    def take(kind: str) -> None:
        nonlocal at
        if tokens[at][0] != kind:
            raise ValueError(f"invalid syntax in the header: expected {kind!r}, found {tokens[at][0]!r}")
        at += 1

    def items(close: str, depth: int) -> list[Any]:
        nonlocal at
        out: list[Any] = []
        while tokens[at][0] != close:
            out.append(value(depth))
            if tokens[at][0] != ",":
                break
            at += 1
        take(close)
        return out

    def value(depth: int) -> Any:
        nonlocal at
        if depth > _MAX_DEPTH:
            raise ValueError("the header nests too deep")
        kind, val = tokens[at]
        at += 1
        if kind == "value":
            return val
        if kind == "(":
            got = items(")", depth + 1)
            if len(got) == 1 and tokens[at - 2][0] != ",":  # (x) is x, (x,) a tuple
                return got[0]
            return tuple(got)
        if kind == "[":
            return items("]", depth + 1)
        if kind == "{":
            out: dict[Any, Any] = {}
            while tokens[at][0] != "}":
                key = value(depth + 1)
                if isinstance(key, (list, dict)):
                    raise ValueError("unhashable key in the header")
                take(":")
                out[key] = value(depth + 1)
                if tokens[at][0] != ",":
                    break
                at += 1
            take("}")
            return out
        raise ValueError(f"invalid syntax in the header: unexpected {kind!r}")

    result = value(0)
    take("end")
    return result


def npy_header(data: bytes) -> tuple[dict[str, Any], int]:
    """The header dict of a .npy file's bytes and the offset of its data (ValueError: not one)."""
    fh = io.BytesIO(data[:MAX_NPY_HEADER])
    version = np.lib.format.read_magic(fh)
    if version not in {(1, 0), (2, 0), (3, 0)}:
        raise ValueError(f"unsupported .npy format version {version}")
    hlen_size = 2 if version == (1, 0) else 4
    hlen = int.from_bytes(fh.read(hlen_size), "little")
    header = fh.read(hlen)
    if len(header) != hlen:
        raise ValueError("the header is cut short")
    try:
        text = header.decode("latin1" if version != (3, 0) else "utf8")
    except UnicodeDecodeError as exc:
        raise ValueError(str(exc)) from None
    if len(text) > _CACHED_HEADER_CHARS:  # not numpy's own (~120 characters): parsed, never kept
        return parse_header_literal(text), fh.tell()
    parsed = _parsed_header(text)
    return (dict(parsed) if isinstance(parsed, dict) else parsed), fh.tell()  # a copy: the cache's stays intact


# A fixture folder's ~3,000 files have a few hundred distinct headers, and a test run loads its
# files ~100 times over: a header text is parsed once (the parse is a pure function of the text;
# a text that fails raises again each time, since exceptions are not cached). Only short texts are
# kept, so that hostile headers (up to 64 KiB each) cannot fill memory: at most ~4 MiB.
_CACHED_HEADER_CHARS = 1024


@functools.lru_cache(maxsize=4096)
def _parsed_header(text: str) -> Any:
    return parse_header_literal(text)


def check_npy(path: Path, data: bytes, shape: Sequence[int], dtype: str, error: Error) -> int:
    """The ``.npy`` header of ``data`` parsed alone and checked against the manifest's shape and
    dtype and the file's length, before any array is made from it; returns the data's offset."""
    try:
        meta, offset = npy_header(data)
        if not isinstance(meta, dict) or set(meta) != {"descr", "fortran_order", "shape"}:
            raise ValueError(f"a header must have exactly descr, fortran_order and shape, got {meta!r}")
        descr, fortran, hshape = meta["descr"], meta["fortran_order"], meta["shape"]
        if not isinstance(descr, str) or descr not in {"<f8", "<i8", "|b1"}:
            raise ValueError(f"dtype {descr!r} is not one a fixture may hold (little-endian float64, int64, bool)")
        if fortran is not False:
            raise ValueError("Fortran order: fixtures are C order")
        if not isinstance(hshape, tuple) or not all(isinstance(n, int) and n >= 0 for n in hshape):
            raise ValueError(f"shape {hshape!r} is not a tuple of sizes")
    except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
        raise error(f"{path}: not a readable .npy file: {_short(str(exc))}") from None
    hdtype = np.dtype(descr).name
    if hdtype != dtype or list(hshape) != list(shape):
        raise error(f"{path}: its header says {hdtype}{list(hshape)}, the manifest says {dtype}{list(shape)}")
    want = offset + array_bytes(hshape, hdtype)
    if len(data) != want:
        raise error(
            f"{path}: {len(data)} bytes, but its header ({hdtype}{list(hshape)}) needs exactly {want}: "
            "truncated or padded"
        )
    return offset


def read_npy(path: Path, data: bytes, shape: Sequence[int], dtype: str, error: Error) -> np.ndarray:
    """The array in ``data`` (a .npy file's bytes), checked by :func:`check_npy` first and then made
    from its bytes directly (a fresh, writable array; no ``np.load``, whose header parser is
    ``ast``'s)."""
    offset = check_npy(path, data, shape, dtype, error)
    stored = np.dtype(dtype).newbyteorder("<")  # check_npy allowed only '<f8', '<i8' and '|b1'
    flat = np.frombuffer(data, dtype=stored, count=math.prod(shape), offset=offset)
    return flat.reshape(tuple(shape)).astype(np.dtype(dtype), copy=True)


def check_bounds(
    case_id: str,
    outputs: Mapping[str, tuple[np.ndarray, np.ndarray, Path]],
    error: Error,
    limits: tuple[int, int, int] = (-20, -46, -1000),
) -> None:
    """Every bound of one case within what the error analysis can produce (module docstring).

    ``outputs``: name -> (expected, bound, bound file). ``limits``: the exponents of the largest
    relative bound, the resolution and the underflow allowance of the fixtures' precision
    (float64's by default; a precision tier's from attention_ports/spec/precision.py).
    """
    max_relative, resolution, underflow = (2.0**e for e in limits)
    scale = 0.0
    for expected, _, _ in outputs.values():
        finite = np.abs(expected[np.isfinite(expected)])
        if finite.size:
            scale = max(scale, float(finite.max()))
    ceiling = max_relative * scale + underflow
    for name, (expected, bound, path) in outputs.items():
        label = f"{path}: the bound of case {case_id!r}, output {name!r},"
        if bound.dtype != np.float64 or bound.shape != expected.shape:
            raise error(f"{label} is {bound.dtype}{list(bound.shape)}, not float64{list(expected.shape)}")
        if not np.isfinite(bound).all():
            i = tuple(int(j) for j in np.argwhere(~np.isfinite(bound))[0])
            raise error(f"{label} holds {bound[i]} at {list(i)}: every bound must be finite")
        if (bound < 0).any():
            i = tuple(int(j) for j in np.argwhere(bound < 0)[0])
            raise error(f"{label} holds {bound[i]} at {list(i)}: a bound cannot be negative")
        if bound.size and float(bound.max()) > ceiling:
            i = tuple(int(j) for j in np.unravel_index(int(np.argmax(bound)), bound.shape))
            raise error(
                f"{label} allows {bound[i]:.3e} at {list(i)}, more than 2^{limits[0]} of the case's largest |value| "
                f"({scale:.3e}): no error analysis gives that (attention_ports/core/validate.py)"
            )
        with np.errstate(invalid="ignore"):
            floor = resolution * np.abs(expected)
            low = np.isfinite(expected) & (bound < floor)
        if low.any():
            i = tuple(int(j) for j in np.argwhere(low)[0])
            raise error(
                f"{label} allows only {bound[i]:.3e} at {list(i)}, below 2^{limits[1]} of |expected| ({floor[i]:.3e}), "
                "the resolution every stored bound includes (attention_ports/truth/bounds.py)"
            )
