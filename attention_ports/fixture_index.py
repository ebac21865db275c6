"""``fixtures/index.tsv``: the manifest in a form base R and the Julia stdlib can read.

Base R has no JSON parser and neither has Julia 1.5's standard library, so the native conformance
runners (ports/r/conformance.R, ports/julia/conformance.jl) read this companion file instead of
``manifest.json``. It is a pure function of the manifest and of the operation table
(:mod:`attention_ports.ops`), written by ``attention-ports generate`` next to the manifest and
drift-gated by ``check-fixtures`` like every other fixture file.

Format 1: UTF-8 text, one record per line, fields separated by one tab, no quoting; a line
starting with ``#`` is a comment. No field is ever empty: ``-`` stands for "none" / an empty list.
Lists inside a field are comma-separated. Records, in this order:

    index   1  FIXTURE_FORMAT  MANIFEST_SHA256  MANIFEST_MD5
    op      OP  SLOT  NAMES        SLOT: args, groups, positional_options, kwargs, options, outputs
                                   (how the adapters build a call, ports/*_adapter.py)
    group   OP  GROUP  MEMBERS     the arrays travelling in a parameter collection, in order
    case    ID  OP                 every case, in manifest order; then its options and arrays:
    option  ID  NAME  TYPE  VALUE  TYPE: null, bool (true/false), int, float (shortest repr,
                                   inf/nan), str, strs (a list of names; - = empty)
    array   ID  KIND  NAME  CONVENTION  LAYOUT  DTYPE  SHAPE  FILE  SHA256  MD5
            KIND: input, expected or bound; CONVENTION: - (the fixtures' own, masked_query
            "zeros") or a masked_query convention whose expected/bound file this is; LAYOUT: the
            array's layout role (ops.Role: tokens, weight, scores, ..., index); SHAPE: [3,5],
            [7], [] for 0-D, in the reference (NumPy) layout; FILE: relative to the fixtures folder.

The MD5 columns exist because base R can compute an MD5 (``tools::md5sum``) but no SHA-256; the
manifest's SHA-256 stays the authority, and this index is checked against the manifest.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from typing import Any

from attention_ports import ops

INDEX = "index.tsv"
INDEX_FORMAT = 1
# What a per-convention expected file is called: expected.<output>.<convention>.npy.
CONVENTIONS = ("zeros", "nan", "uniform")
_CONVENTION_FILE = re.compile(rf"^(expected|bound)\.(.+)\.({'|'.join(CONVENTIONS)})\.npy$")
_SAFE = re.compile(r"^[^\t\n\r,]+$")
SLOTS = ("args", "groups", "positional_options", "kwargs", "options", "outputs")

HEADER = (
    "# attention-ports fixture index: generated from manifest.json by `attention-ports generate`; do not edit.\n"
    "# Read by the native conformance runners (ports/r/conformance.R, ports/julia/conformance.jl).\n"
    "# One record per line, fields separated by one tab; '-' = none. Format: attention_ports/fixture_index.py.\n"
)


class FixtureIndexError(ValueError):
    """The manifest holds something the index cannot carry; names the case and the field."""


def _field(value: str, where: str) -> str:
    if not _SAFE.match(value):
        raise FixtureIndexError(
            f"{where}: {value!r} cannot be an index field (empty, or holds a tab, newline or comma)"
        )
    return value


def _names(values: tuple[str, ...] | list[str], where: str) -> str:
    return ",".join(_field(v, where) for v in values) if values else "-"


def _option(case_id: str, name: str, value: Any) -> tuple[str, str]:
    where = f"case {case_id!r}, option {name!r}"
    if value is None:
        return "null", "-"
    if isinstance(value, bool):
        return "bool", "true" if value else "false"
    if isinstance(value, int):
        return "int", str(value)
    if isinstance(value, float):
        return "float", repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else repr(value))
    if isinstance(value, str):
        return "str", _field(value, where)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if "-" in value:
            raise FixtureIndexError(f"{where}: '-' cannot be a name in a list")
        return "strs", _names(value, where)
    raise FixtureIndexError(f"{where}: {value!r} is not a null, bool, int, float, string or list of strings")


def _shape(shape: list[int]) -> str:
    return "[" + ",".join(str(int(d)) for d in shape) + "]"


def _layout(spec: ops.OpSpec, name: str, case_id: str) -> str:
    try:
        return spec.role(name).value
    except KeyError:
        raise FixtureIndexError(f"case {case_id!r}: array {name!r} has no layout role in {spec.name}") from None


def _convention_files(entry: dict[str, Any]) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """Every per-convention file the case lists, wherever in its entry: (kind, output, convention, meta).

    Only the file names are relied on (``expected.<output>.<convention>.npy`` and its
    ``bound.<output>.<convention>.npy``), so the index follows however the manifest nests them.
    """
    stack: list[Any] = [entry]
    seen: set[str] = set()
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(reversed(node))
            continue
        if not isinstance(node, dict):
            continue
        for key in ("file", "bound_file"):
            path = node.get(key)
            if isinstance(path, str) and path not in seen:
                m = _CONVENTION_FILE.match(path.rsplit("/", 1)[-1])
                if m:
                    seen.add(path)
                    sha = node.get("sha256" if key == "file" else "bound_sha256")
                    yield m.group(1), m.group(2), m.group(3), {**node, "file": path, "sha256": sha}
        stack.extend(reversed(list(node.values())))


def _md5(files: dict[str, bytes] | None, rel: str, where: str) -> str:
    if files is None or rel not in files:
        raise FixtureIndexError(f"{where}: {rel} is not among the fixture files")
    return hashlib.md5(files[rel], usedforsecurity=False).hexdigest()


def _array(
    spec: ops.OpSpec,
    case_id: str,
    files: dict[str, bytes],
    kind: str,
    name: str,
    convention: str,
    meta: dict[str, Any],
) -> str:
    where = f"case {case_id!r}, {kind} {name!r}"
    if not isinstance(meta.get("sha256"), str):
        raise FixtureIndexError(f"{where}: the manifest gives {meta.get('file')} no sha256")
    fields = [
        "array",
        case_id,
        kind,
        _field(name, where),
        convention,
        _layout(spec, name, case_id),
        meta["dtype"],
        _shape(meta["shape"]),
        _field(meta["file"], where),
        meta["sha256"],
        _md5(files, meta["file"], where),
    ]
    return "\t".join(fields)


def render(manifest: dict[str, Any], manifest_data: bytes, files: dict[str, bytes]) -> bytes:
    """The index for ``manifest`` (whose bytes are ``manifest_data``); ``files``: path -> bytes of
    every case file, for their MD5s."""
    lines = [
        "\t".join(
            [
                "index",
                str(INDEX_FORMAT),
                str(manifest["format_version"]),
                hashlib.sha256(manifest_data).hexdigest(),
                hashlib.md5(manifest_data, usedforsecurity=False).hexdigest(),
            ]
        )
    ]
    for spec in ops.OPS.values():
        for slot in SLOTS:
            values = tuple(spec.groups) if slot == "groups" else getattr(spec, slot)
            lines.append("\t".join(["op", spec.name, slot, _names(values, f"operation {spec.name}")]))
        for group, members in spec.groups.items():
            lines.append("\t".join(["group", spec.name, group, _names(members, f"operation {spec.name}")]))
    for entry in manifest["cases"]:
        case_id, op = entry["id"], entry["op"]
        spec = ops.get(op)
        lines.append("\t".join(["case", _field(case_id, "a case id"), op]))
        for name, value in entry.get("options", {}).items():
            lines.append(
                "\t".join(["option", case_id, _field(name, f"case {case_id!r}"), *_option(case_id, name, value)])
            )

        for name, meta in entry["inputs"].items():
            lines.append(_array(spec, case_id, files, "input", name, "-", meta))
        for name, meta in entry["expected"].items():
            lines.append(_array(spec, case_id, files, "expected", name, "-", meta))
            bound = {"file": meta["bound_file"], "sha256": meta["bound_sha256"], "dtype": "float64"}
            lines.append(_array(spec, case_id, files, "bound", name, "-", {**bound, "shape": meta["shape"]}))
        found = sorted(_convention_files(entry), key=lambda t: (t[2], t[1], t[0] != "expected"))
        for kind, name, convention, meta in found:
            if name not in entry["expected"]:
                raise FixtureIndexError(f"case {case_id!r}: {meta['file']} is for {name!r}, not an output of the case")
            if sum(n == name and c == convention for _, n, c, _ in found) != 2:
                raise FixtureIndexError(
                    f"case {case_id!r}: {meta['file']} needs both expected.{name}.{convention}.npy and "
                    f"bound.{name}.{convention}.npy in the manifest"
                )
            default = entry["expected"][name]
            full = {"dtype": "float64" if kind == "bound" else default["dtype"], "shape": default["shape"], **meta}
            lines.append(_array(spec, case_id, files, kind, name, convention, full))
    return (HEADER + "\n".join(lines) + "\n").encode()
