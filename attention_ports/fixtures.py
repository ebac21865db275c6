"""Golden fixtures on disk: one ``.npy`` per array plus ``manifest.json``.

``.npy`` (format 1.0, little-endian, C order) is exact for float64 and simple enough to read from
base R or the Julia stdlib. Format 2: every expected output ``expected.<name>.npy`` is the exact
result correctly rounded to float64 and comes with ``bound.<name>.npy``, the per-element error
bound a correct float64 implementation meets (``attention_ports.truth``). The manifest carries the
case metadata, shapes, dtypes, the sha256 of every file, and how the truth was made (library,
version, method, each case's working precision). A case flagged ``masked_query`` (a query whose
mask removes every key: ``attention_ports.conventions``) also carries one full set of expected
outputs per convention, ``expected.<name>.<convention>.npy`` and ``bound.<name>.<convention>.npy``
where they differ from the default ``zeros`` files, listed under the case's ``masked_query``.
Generation is a pure function of the catalogue: the same bytes on every machine and CPU (no NumPy
floating point touches an expected value or a bound), every write is atomic (temp file + rename),
and loading never unpickles.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports import conventions, fixture_index, paths, truth, validate
from attention_ports.catalogue import ESTIMATED_FLAG, CaseSpec, Catalogue, CatalogueError, build_inputs, load_catalogue

FORMAT_VERSION = 2
MANIFEST = "manifest.json"
CATALOGUE = "catalogue.toml"
REPO_FIXTURES = paths.FIXTURES  # the shipped fixtures, in a checkout or an installed wheel
ALLOWED_DTYPES = {"float64", "int64", "bool"}


class FixtureError(Exception):
    """A fixture file or manifest entry is missing, corrupted or malformed; names the file."""


class ManifestError(FixtureError):
    """The manifest itself is unusable (unreadable, malformed, a path leading out): nothing can run."""


@dataclass(frozen=True)
class Expected:
    array: np.ndarray  # the exact result, correctly rounded to float64
    bound: np.ndarray  # per-element absolute error bound (same shape)


@dataclass(frozen=True)
class Case:
    id: str
    op: str
    reason: str
    flags: tuple[str, ...]
    options: dict[str, Any]
    inputs: dict[str, np.ndarray]
    expected: dict[str, Expected]  # the default convention's ("zeros")
    # A case flagged masked_query: the query rows whose mask removes every key, and every
    # convention's full set of expected outputs (conventions.CONVENTIONS; "zeros" is ``expected``).
    dead_rows: tuple[int, ...] = ()
    conventions: dict[str, dict[str, Expected]] = field(default_factory=dict)

    def expected_for(self, convention: str | None) -> dict[str, Expected]:
        """The outputs an implementation following ``convention`` must produce on this case."""
        if convention is None or not self.conventions:
            return self.expected
        if convention not in self.conventions:
            raise FixtureError(f"case {self.id!r} has no expected outputs for masked_query = {convention!r}")
        return self.conventions[convention]


# ---------------------------------------------------------------- writing


def npy_bytes(arr: np.ndarray) -> bytes:
    arr = np.asarray(arr, order="C")  # not ascontiguousarray: it turns 0-D arrays into 1-D
    if arr.dtype.name not in ALLOWED_DTYPES:
        raise FixtureError(f"refusing to store dtype {arr.dtype} (allowed: {sorted(ALLOWED_DTYPES)})")
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr.astype(arr.dtype.newbyteorder("<")), version=(1, 0), allow_pickle=False)
    return buf.getvalue()


def current_umask() -> int:
    """The process's umask, read without changing it (Linux >= 4.7); else set and restored at once."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # not thread-safe for that instant: only where /proc says nothing
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all (a temporary file in its folder, then a rename), with the
    mode a plain ``open(path, "w")`` would give it (0666 less the umask; mkstemp's own is 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~current_umask())
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


Progress = Callable[[int, int, str], None]


def render(
    catalogue: Catalogue, workers: int | None = None, progress: Progress | None = None
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Compute every fixture file's bytes and the manifest, without touching the disk."""
    inputs = [build_inputs(spec) for spec in catalogue.cases]
    jobs = [(spec.id, spec.op, ins, spec.options) for spec, ins in zip(catalogue.cases, inputs, strict=True)]
    estimated = [spec.id for spec in catalogue.cases if ESTIMATED_FLAG in spec.flags]
    truths = truth.compute_many(jobs, workers=workers, progress=progress, estimated=estimated)
    files: dict[str, bytes] = {}
    cases = [
        _render_case(spec, ins, tr, _convention_truths(spec, ins, tr), files)
        for spec, ins, tr in zip(catalogue.cases, inputs, truths, strict=True)
    ]
    manifest = {
        "format_version": FORMAT_VERSION,
        "catalogue": {"file": CATALOGUE, "sha256": catalogue.sha256, "seed": catalogue.seed},
        "truth": truth.describe(),
        "cases": cases,
    }
    return files, manifest


def _convention_truths(spec: CaseSpec, inputs: dict[str, np.ndarray], default: truth.Truth) -> dict[str, truth.Truth]:
    """Every convention's truth for a case flagged masked_query (empty for the others).

    The flag must say what the inputs do: a case with a fully masked query and no flag would judge
    every port by the default convention silently; a flag without one would promise a choice that
    does not exist.
    """
    dead = conventions.dead_rows(spec.op, inputs)
    flagged = conventions.FLAG in spec.flags
    if flagged and not dead:
        where = "" if spec.op in conventions.ATTENTION_OPS else f" ({spec.op} has no masked-query convention)"
        raise FixtureError(f"case {spec.id!r}: flagged {conventions.FLAG!r} but no query has every key masked{where}")
    if dead and not flagged:
        raise FixtureError(
            f"case {spec.id!r}: queries {list(dead)} have every key masked: add the flag {conventions.FLAG!r} "
            "(its expected outputs depend on the port's declared convention)"
        )
    if not dead:
        return {}
    out = {conventions.DEFAULT: default}
    for conv in conventions.CONVENTIONS:
        if conv != conventions.DEFAULT:
            out[conv] = truth.compute_detailed(
                spec.op, inputs, spec.options, masked_query=conv, label=f"{spec.id} [masked_query={conv}]"
            )
    return out


def _render_case(
    spec: CaseSpec,
    inputs: dict[str, np.ndarray],
    tr: truth.Truth,
    conv_truths: dict[str, truth.Truth],
    files: dict[str, bytes],
) -> dict:
    if tuple(tr.outputs) != spec.outputs:
        raise FixtureError(
            f"case {spec.id!r}: the truth returned {sorted(tr.outputs)}, the operation declares {spec.outputs}"
        )
    entry: dict[str, Any] = {
        "id": spec.id,
        "op": spec.op,
        "reason": spec.reason,
        "flags": list(spec.flags),
        "options": spec.options,
        "seed": spec.seed,
        "truth": {"precision_bits": tr.precision_bits},
        "inputs": {},
        "expected": {},
    }
    for name, arr in inputs.items():
        rel = f"cases/{spec.id}/{_file_name('input', name)}"
        data = npy_bytes(arr)
        files[rel] = data
        entry["inputs"][name] = {
            "file": rel,
            "shape": list(arr.shape),
            "dtype": arr.dtype.name,
            "sha256": _sha256(data),
        }
    for name, (expected, bound) in tr.outputs.items():
        rel = f"cases/{spec.id}/{_file_name('expected', name)}"
        brel = f"cases/{spec.id}/{_file_name('bound', name)}"
        data, bdata = npy_bytes(expected), npy_bytes(bound)
        files[rel], files[brel] = data, bdata
        entry["expected"][name] = {
            "file": rel,
            "shape": list(expected.shape),
            "dtype": expected.dtype.name,
            "sha256": _sha256(data),
            "bound_file": brel,
            "bound_sha256": _sha256(bdata),
        }
    if conv_truths:
        entry["masked_query"] = _render_conventions(spec, inputs, entry["expected"], conv_truths, files)
    return entry


def _render_conventions(
    spec: CaseSpec,
    inputs: dict[str, np.ndarray],
    default: dict[str, Any],
    conv_truths: dict[str, truth.Truth],
    files: dict[str, bytes],
) -> dict[str, Any]:
    """The manifest's ``masked_query`` section: every convention's complete set of expected outputs.

    An output a convention does not change (self-attention's q, k, v) names the default's files;
    one it changes gets ``expected.<name>.<convention>.npy`` / ``bound.<name>.<convention>.npy``.
    """
    section: dict[str, Any] = {
        "dead_rows": list(conventions.dead_rows(spec.op, inputs)),
        "precision_bits": {conv: t.precision_bits for conv, t in conv_truths.items()},
        "expected": {conventions.DEFAULT: default},
    }
    for conv, tr in conv_truths.items():
        if conv == conventions.DEFAULT:
            continue
        metas = {}
        for name, (expected, bound) in tr.outputs.items():
            base = default[name]
            data, bdata = npy_bytes(expected), npy_bytes(bound)
            meta = dict(base)
            if _sha256(data) != base["sha256"]:
                rel = f"cases/{spec.id}/expected.{name}.{conv}.npy"
                files[rel] = data
                meta.update(file=rel, sha256=_sha256(data))
            if _sha256(bdata) != base["bound_sha256"]:
                brel = f"cases/{spec.id}/bound.{name}.{conv}.npy"
                files[brel] = bdata
                meta.update(bound_file=brel, bound_sha256=_sha256(bdata))
            metas[name] = meta
        section["expected"][conv] = metas
    return section


def manifest_bytes(manifest: dict[str, Any]) -> bytes:
    return (json.dumps(manifest, indent=1, sort_keys=False, allow_nan=False) + "\n").encode()


@dataclass(frozen=True)
class GenerateReport:
    written: list[str]
    unchanged: list[str]
    removed: list[str]


def generate(
    out_dir: Path,
    catalogue_path: Path | None = None,
    workers: int | None = None,
    progress: Progress | None = None,
) -> GenerateReport:
    """Write fixtures for ``catalogue_path`` (default: the catalogue in ``out_dir``) into ``out_dir``."""
    catalogue_path = catalogue_path or out_dir / CATALOGUE
    catalogue = load_catalogue(catalogue_path)
    files, manifest = render(catalogue, workers=workers, progress=progress)
    files[MANIFEST] = manifest_bytes(manifest)
    # The manifest for readers without JSON (base R, Julia's stdlib): the native runners' index.
    files[fixture_index.INDEX] = fixture_index.render(manifest, files[MANIFEST], files)
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
    """The manifest, validated as a whole before any file it names is read (attention_ports/validate.py)."""
    path = fixtures_dir / MANIFEST
    if not os.path.lexists(path):
        raise ManifestError(f"{path}: no manifest (run `attention-ports generate --out {fixtures_dir}`)")
    manifest = validate.read_json(path, validate.MAX_MANIFEST_BYTES, ManifestError, "manifest")
    validate.check_manifest(manifest, path, fixtures_dir, ManifestError)
    return manifest


def load_array(fixtures_dir: Path, meta: dict[str, Any]) -> np.ndarray:
    """Load one array: a regular file of bounded size, its hash, then its header against the
    manifest's shape and dtype and the file's length, and only then the data (never a pickle)."""
    validate.check_relative(meta["file"], FixtureError, f"{fixtures_dir / MANIFEST}")  # links: read_manifest
    path = fixtures_dir / meta["file"]
    limit = validate.array_bytes(meta["shape"], meta["dtype"]) + validate.MAX_NPY_HEADER
    data = validate.read_regular_file(
        path, min(limit, validate.MAX_ARRAY_BYTES + validate.MAX_NPY_HEADER), FixtureError
    )
    if _sha256(data) != meta["sha256"]:
        raise FixtureError(f"{path}: sha256 does not match the manifest (corrupted or edited)")
    validate.check_npy(path, data, meta["shape"], meta["dtype"], FixtureError)
    try:
        arr = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise FixtureError(f"{path}: not a readable .npy file: {exc}") from exc
    return arr


def load_case(fixtures_dir: Path, entry: dict[str, Any]) -> Case:
    try:
        inputs = {name: load_array(fixtures_dir, meta) for name, meta in entry["inputs"].items()}
        expected = _load_expected(fixtures_dir, entry["expected"])
        dead_rows, by_convention = _load_conventions(fixtures_dir, entry, expected)
        # the default convention's outputs are the fixtures' own (the same objects): checked once
        others = {c: o for c, o in by_convention.items() if c != conventions.DEFAULT}
        for conv, outputs in {None: expected, **others}.items():
            metas = entry["expected"] if conv is None else entry["masked_query"]["expected"][conv]
            validate.check_bounds(
                entry["id"],
                {
                    name: (exp.array, exp.bound, fixtures_dir / metas[name]["bound_file"])
                    for name, exp in outputs.items()
                },
                FixtureError,
                _bound_limits(fixtures_dir),
            )
        return Case(
            id=entry["id"],
            op=entry["op"],
            reason=entry.get("reason", ""),
            flags=tuple(entry.get("flags", ())),
            options=dict(entry.get("options", {})),
            inputs=inputs,
            expected=expected,
            dead_rows=dead_rows,
            conventions=by_convention,
        )
    except KeyError as exc:
        raise FixtureError(f"manifest entry for case {entry.get('id', '?')!r} lacks field {exc}") from exc


def _bound_limits(fixtures_dir: Path) -> tuple[int, int, int]:
    """The bound sanity limits of the fixtures' precision: a precision tier's folder, or float64."""
    from attention_ports import precision

    return precision.of_fixtures(fixtures_dir).bound_limits


def _load_expected(fixtures_dir: Path, metas: dict[str, Any]) -> dict[str, Expected]:
    return {
        name: Expected(load_array(fixtures_dir, meta), load_array(fixtures_dir, _bound_meta(meta)))
        for name, meta in metas.items()
    }


def _load_conventions(
    fixtures_dir: Path, entry: dict[str, Any], expected: dict[str, Expected]
) -> tuple[tuple[int, ...], dict[str, dict[str, Expected]]]:
    """The ``masked_query`` section of a flagged case: dead rows and every convention's outputs."""
    section = entry.get("masked_query")
    flagged = conventions.FLAG in entry.get("flags", ())
    where = f"manifest entry for case {entry.get('id', '?')!r}"
    if section is None:
        if flagged:
            raise FixtureError(f"{where}: flagged {conventions.FLAG!r} but has no 'masked_query' section")
        return (), {}
    if not flagged:
        raise FixtureError(f"{where}: has a 'masked_query' section but not the flag {conventions.FLAG!r}")
    by_conv = section["expected"]
    if sorted(by_conv) != sorted(conventions.CONVENTIONS):
        raise FixtureError(
            f"{where}: masked_query.expected lists {sorted(by_conv)}, needs {sorted(conventions.CONVENTIONS)}"
        )
    out = {}
    for conv, metas in by_conv.items():
        if sorted(metas) != sorted(expected):
            raise FixtureError(f"{where}: masked_query.expected.{conv} lists {sorted(metas)}, needs {sorted(expected)}")
        out[conv] = expected if conv == conventions.DEFAULT else _load_expected(fixtures_dir, metas)
    return tuple(int(i) for i in section["dead_rows"]), out


def _bound_meta(meta: dict[str, Any]) -> dict[str, Any]:
    return {"file": meta["bound_file"], "sha256": meta["bound_sha256"], "dtype": "float64", "shape": meta["shape"]}


def iter_entries(fixtures_dir: Path) -> Iterator[dict[str, Any]]:
    yield from read_manifest(fixtures_dir)["cases"]


# ---------------------------------------------------------------- drift gate


def check(fixtures_dir: Path, workers: int | None = None, progress: Progress | None = None) -> list[str]:
    """Return one problem per drifted/corrupted file (empty list = the fixtures are good).

    Two gates: every file matches its manifest hash, and a fresh generation from the catalogue
    produces the same bytes (so a changed catalogue or truth engine cannot go unnoticed). Both are
    byte comparisons, and generation is CPU-independent, so the gate means the same everywhere.
    """
    problems: list[str] = []
    manifest = read_manifest(fixtures_dir)  # a malformed one is bad input (ManifestError), not drift
    listed: set[str] = set()

    def read(path: Path) -> bytes | None:  # a regular file of bounded size, or a problem
        try:
            return validate.read_regular_file(path, validate.MAX_ARRAY_BYTES + validate.MAX_NPY_HEADER, FixtureError)
        except FixtureError as exc:
            problems.append(str(exc))
            return None

    for entry in manifest["cases"]:
        metas = [*entry.get("inputs", {}).values()]
        expected_metas = [*entry.get("expected", {}).values()]
        for by_name in entry.get("masked_query", {}).get("expected", {}).values():
            expected_metas.extend(m for m in by_name.values() if m not in expected_metas)
        for meta in expected_metas:
            metas.append(meta)
            if "bound_file" in meta:
                metas.append(_bound_meta(meta))
            else:
                problems.append(f"{fixtures_dir / meta['file']}: the manifest names no bound file")
        for meta in metas:
            listed.add(meta["file"])
            data = read(fixtures_dir / meta["file"])
            if data is not None and _sha256(data) != meta["sha256"]:
                problems.append(f"{fixtures_dir / meta['file']}: sha256 differs from the manifest")
    for extra in sorted(set(_existing_case_files(fixtures_dir)) - listed):
        problems.append(f"{fixtures_dir / extra}: not listed in the manifest")
    try:
        files, fresh = render(load_catalogue(fixtures_dir / CATALOGUE), workers=workers, progress=progress)
    except CatalogueError:
        raise  # bad input, named by field: not drift
    except Exception as exc:  # any other failure to regenerate is itself drift worth reporting
        return [*problems, f"{fixtures_dir / CATALOGUE}: cannot regenerate: {exc}"]
    for rel, data in files.items():
        path = fixtures_dir / rel
        if any(p.startswith(f"{path}:") for p in problems):
            continue
        if not path.exists():
            problems.append(f"{path}: a fresh generation has it, the fixtures do not")
        elif (have := read(path)) is not None and have != data:
            problems.append(f"{path}: differs from a fresh generation (catalogue or truth engine changed)")
    if json.loads(manifest_bytes(fresh)) != manifest:
        problems.append(f"{fixtures_dir / MANIFEST}: differs from a fresh generation (run `attention-ports generate`)")
    index = fixtures_dir / fixture_index.INDEX
    if not index.is_file() or index.read_bytes() != fixture_index.render(fresh, manifest_bytes(fresh), files):
        state = "differs from" if index.is_file() else "is missing from"
        problems.append(f"{index}: {state} a fresh generation (run `attention-ports generate`)")
    return problems
