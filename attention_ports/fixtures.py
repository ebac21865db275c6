"""Golden fixtures on disk: one ``.npy`` per array plus ``manifest.json``.

``.npy`` (format 1.0, little-endian, C order) is exact for float64 and simple enough to read from
base R or the Julia stdlib; the manifest carries the case metadata, shapes, dtypes, sha256 of every
file, resolved tolerances and provenance. Generation is deterministic (same bytes twice), every
write is atomic (temp file + rename), and loading never unpickles.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import platform
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import reference
from attention_ports import paths
from attention_ports.builtin import call_reference
from attention_ports.catalogue import CaseSpec, Catalogue, Tolerance, build_inputs, load_catalogue

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
CATALOGUE = "catalogue.toml"
REPO_FIXTURES = paths.FIXTURES  # the shipped fixtures, in a checkout or an installed wheel
ALLOWED_DTYPES = {"float64", "int64", "bool"}


class FixtureError(Exception):
    """A fixture file or manifest entry is missing, corrupted or malformed; names the file."""


@dataclass(frozen=True)
class Expected:
    array: np.ndarray
    tolerance: Tolerance


@dataclass(frozen=True)
class Case:
    id: str
    op: str
    reason: str
    flags: tuple[str, ...]
    options: dict[str, Any]
    inputs: dict[str, np.ndarray]
    expected: dict[str, Expected]


# ---------------------------------------------------------------- writing


def npy_bytes(arr: np.ndarray) -> bytes:
    arr = np.asarray(arr, order="C")  # not ascontiguousarray: it turns 0-D arrays into 1-D
    if arr.dtype.name not in ALLOWED_DTYPES:
        raise FixtureError(f"refusing to store dtype {arr.dtype} (allowed: {sorted(ALLOWED_DTYPES)})")
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr.astype(arr.dtype.newbyteorder("<")), version=(1, 0), allow_pickle=False)
    return buf.getvalue()


def atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _file_name(kind: str, name: str) -> str:
    return f"{kind}.{name}.npy"


def render(catalogue: Catalogue) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Compute every fixture file's bytes and the manifest, without touching the disk."""
    files: dict[str, bytes] = {}
    cases = []
    for spec in catalogue.cases:
        cases.append(_render_case(spec, files))
    manifest = {
        "format_version": FORMAT_VERSION,
        "reference_version": reference.__version__,
        "catalogue": {"file": CATALOGUE, "sha256": catalogue.sha256, "seed": catalogue.seed},
        # Provenance only: check-fixtures compares the cases, not the versions that wrote them.
        "provenance": {"numpy": np.__version__, "python": platform.python_version()},
        "cases": cases,
    }
    return files, manifest


def _render_case(spec: CaseSpec, files: dict[str, bytes]) -> dict[str, Any]:
    inputs = build_inputs(spec)
    outputs = call_reference(spec.op, inputs, spec.options)
    entry: dict[str, Any] = {
        "id": spec.id,
        "op": spec.op,
        "reason": spec.reason,
        "flags": list(spec.flags),
        "options": spec.options,
        "seed": spec.seed,
        "inputs": {},
        "expected": {},
    }
    for kind, arrays in (("input", inputs), ("expected", outputs)):
        section = entry["inputs" if kind == "input" else "expected"]
        for name, arr in arrays.items():
            if kind == "expected" and name not in spec.tolerances:
                continue
            rel = f"cases/{spec.id}/{_file_name(kind, name)}"
            data = npy_bytes(arr)
            files[rel] = data
            section[name] = {"file": rel, "shape": list(arr.shape), "dtype": arr.dtype.name, "sha256": _sha256(data)}
            if kind == "expected":
                tol = spec.tolerances[name]
                section[name].update(rtol=tol.rtol, atol=tol.atol)
    missing = set(spec.tolerances) - set(entry["expected"])
    if missing:
        raise FixtureError(f"case {spec.id!r}: the reference returned no {sorted(missing)}")
    return entry


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=False, allow_nan=False) + "\n").encode()


@dataclass(frozen=True)
class GenerateReport:
    written: list[str]
    unchanged: list[str]
    removed: list[str]


def generate(out_dir: Path, catalogue_path: Path | None = None) -> GenerateReport:
    """Write fixtures for ``catalogue_path`` (default: the catalogue in ``out_dir``) into ``out_dir``."""
    catalogue_path = catalogue_path or out_dir / CATALOGUE
    catalogue = load_catalogue(catalogue_path)
    files, manifest = render(catalogue)
    files[MANIFEST] = manifest_bytes(manifest)
    if catalogue_path.resolve() != (out_dir / CATALOGUE).resolve():
        files[CATALOGUE] = catalogue_path.read_bytes()
    written, unchanged = [], []
    # The manifest goes last so that a crash part-way leaves the old manifest describing old files
    # that check-fixtures will flag, never a new manifest pointing at files that do not exist yet.
    for rel in sorted(files, key=lambda r: r == MANIFEST):
        target = out_dir / rel
        if target.is_file() and target.read_bytes() == files[rel]:
            unchanged.append(rel)
        else:
            atomic_write(target, files[rel])
            written.append(rel)
    removed = []
    for stale in _existing_case_files(out_dir):
        if stale not in files:
            (out_dir / stale).unlink()
            removed.append(stale)
    for d in sorted((out_dir / "cases").glob("*"), reverse=True) if (out_dir / "cases").is_dir() else []:
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return GenerateReport(written=written, unchanged=unchanged, removed=removed)


def _existing_case_files(root: Path) -> list[str]:
    base = root / "cases"
    if not base.is_dir():
        return []
    return sorted(p.relative_to(root).as_posix() for p in base.rglob("*.npy"))


# ---------------------------------------------------------------- reading


def read_manifest(fixtures_dir: Path) -> dict[str, Any]:
    path = fixtures_dir / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise FixtureError(f"{path}: no manifest (run `attention-ports generate --out {fixtures_dir}`)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FixtureError(f"{path}: not valid JSON: {exc}") from exc
    if manifest.get("format_version") != FORMAT_VERSION:
        raise FixtureError(f"{path}: format_version {manifest.get('format_version')!r} is not {FORMAT_VERSION}")
    if not isinstance(manifest.get("cases"), list):
        raise FixtureError(f"{path}: 'cases' must be a list")
    return manifest


def load_array(fixtures_dir: Path, meta: dict[str, Any]) -> np.ndarray:
    """Load one array, checking hash, dtype and shape against its manifest entry."""
    path = fixtures_dir / meta["file"]
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FixtureError(f"{path}: file is missing") from None
    if _sha256(data) != meta["sha256"]:
        raise FixtureError(f"{path}: sha256 does not match the manifest (corrupted or edited)")
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise FixtureError(f"{path}: not a readable .npy file: {exc}") from exc
    if arr.dtype.name != meta["dtype"] or list(arr.shape) != list(meta["shape"]):
        raise FixtureError(
            f"{path}: holds {arr.dtype.name}{list(arr.shape)}, manifest says {meta['dtype']}{meta['shape']}"
        )
    return arr


def load_case(fixtures_dir: Path, entry: dict[str, Any]) -> Case:
    try:
        inputs = {name: load_array(fixtures_dir, meta) for name, meta in entry["inputs"].items()}
        expected = {
            name: Expected(load_array(fixtures_dir, meta), Tolerance(meta["rtol"], meta["atol"]))
            for name, meta in entry["expected"].items()
        }
        return Case(
            id=entry["id"],
            op=entry["op"],
            reason=entry.get("reason", ""),
            flags=tuple(entry.get("flags", ())),
            options=dict(entry.get("options", {})),
            inputs=inputs,
            expected=expected,
        )
    except KeyError as exc:
        raise FixtureError(f"manifest entry for case {entry.get('id', '?')!r} lacks field {exc}") from exc


def iter_entries(fixtures_dir: Path) -> Iterator[dict[str, Any]]:
    yield from read_manifest(fixtures_dir)["cases"]


# ---------------------------------------------------------------- drift gate


def check(fixtures_dir: Path) -> list[str]:
    """Return one problem per drifted/corrupted file (empty list = the fixtures are good).

    Two gates: every file matches its manifest hash, and a fresh generation from the catalogue
    produces the same bytes (so a changed reference or catalogue cannot go unnoticed).
    """
    problems: list[str] = []
    try:
        manifest = read_manifest(fixtures_dir)
    except FixtureError as exc:
        return [str(exc)]
    listed: set[str] = set()
    for entry in manifest["cases"]:
        for section in ("inputs", "expected"):
            for meta in entry.get(section, {}).values():
                listed.add(meta["file"])
                path = fixtures_dir / meta["file"]
                if not path.is_file():
                    problems.append(f"{path}: missing")
                elif _sha256(path.read_bytes()) != meta["sha256"]:
                    problems.append(f"{path}: sha256 differs from the manifest")
    for extra in sorted(set(_existing_case_files(fixtures_dir)) - listed):
        problems.append(f"{fixtures_dir / extra}: not listed in the manifest")
    try:
        files, fresh = render(load_catalogue(fixtures_dir / CATALOGUE))
    except Exception as exc:  # any failure to regenerate is itself drift worth reporting
        return [*problems, f"{fixtures_dir / CATALOGUE}: cannot regenerate: {exc}"]
    for rel, data in files.items():
        path = fixtures_dir / rel
        if path.is_file() and path.read_bytes() != data and not any(p.startswith(f"{path}:") for p in problems):
            problems.append(f"{path}: differs from a fresh generation (reference or catalogue changed)")
        elif not path.is_file() and not any(p.startswith(f"{path}:") for p in problems):
            problems.append(f"{path}: a fresh generation has it, the fixtures do not")
    stable = {k: v for k, v in fresh.items() if k != "provenance"}
    stored = {k: v for k, v in manifest.items() if k != "provenance"}
    if stable != stored:
        problems.append(f"{fixtures_dir / MANIFEST}: differs from a fresh generation (run `attention-ports generate`)")
    return problems
