"""The declarative case catalogue (``fixtures/catalogue.toml``): loading, validation, inputs.

A case is data: an id, the operation, the reason it exists, flags (Wycheproof style), how each
input is made and scalar options. Nothing about the expected outputs is declared here: they are
the exact results (``attention_ports.truth.engine``) and their error bounds come from the error analysis
(``attention_ports.truth.bounds``), so a case cannot carry a hand-picked tolerance.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

import attention_ports.reference as reference
from attention_ports.core import validate
from attention_ports.reference import sentiment
from attention_ports.spec import ops

CATALOGUE_FORMAT = 2
CASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_]*$")
ESTIMATED_FLAG = "estimated_bound"
KNOWN_FLAGS = {
    "seed",  # reproduces a seed document's own example
    "published",  # the seed published numbers for it; a test asserts them
    "random",  # seeded random inputs
    "edge",  # a boundary of the definition (L=1, d=1, single column, all masked)
    "stability",  # only a numerically careful implementation survives (large logits)
    "ties",  # equal scores: the weights must split exactly evenly
    "mask",  # exercises masking
    "nan",  # the expected output holds NaN by definition
    # A query whose mask removes every key: the expected outputs depend on the convention a port
    # declares (zeros, nan, uniform: attention_ports/spec/conventions.py), each an acceptable outcome.
    "masked_query",
    "non_square",  # n_q != n_k or d_k != d_v: catches transposes and swapped axes
    "bias",  # optional biases present
    "large",  # L >= 128 or d >= 64
    "training",  # classifier forward/backward/SGD
    # A trajectory too long for the carried bound (its worst case compounds past first order):
    # its bound is the summed one times the amplification the exact dynamics show, an estimate
    # (bounds.py, "Trajectories"; truth.compute_detailed(estimate=True)).
    ESTIMATED_FLAG,
}


class CatalogueError(ValueError):
    """The catalogue file is malformed; the message names the case and the field."""


@dataclass(frozen=True)
class CaseSpec:
    id: str
    op: str
    reason: str
    flags: tuple[str, ...]
    inputs: dict[str, dict[str, Any]]
    options: dict[str, Any]
    outputs: tuple[str, ...]  # the operation's outputs, each an expected file with its bound
    seed: int = field(compare=False)


@dataclass(frozen=True)
class Catalogue:
    path: Path
    seed: int
    cases: tuple[CaseSpec, ...]
    sha256: str


def _case_seed(global_seed: int, case_id: str) -> int:
    # Per-case seeds derived from the id: adding or reordering cases never changes another's inputs.
    digest = hashlib.sha256(f"{global_seed}:{case_id}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def load_catalogue(path: Path, max_elements: int = validate.MAX_CATALOGUE_ELEMENTS) -> Catalogue:
    """Read and validate a catalogue (attention_ports/core/validate.py: a regular file of bounded size,
    every field of its type); any problem is a CatalogueError naming the case and the field.
    ``max_elements``: the most one generated input may have (the scale tier's are larger)."""
    raw_bytes = validate.read_regular_file(path, validate.MAX_CATALOGUE_BYTES, CatalogueError, "catalogue")
    validate.check_nesting(raw_bytes, path, CatalogueError, "toml")
    try:
        raw = tomllib.loads(raw_bytes.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CatalogueError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:  # check_nesting's scan bounds the depth; this is its backstop
        raise CatalogueError(f"{path}: nested deeper than {validate.MAX_NESTING} levels") from None
    if raw.get("format_version") != CATALOGUE_FORMAT:
        raise CatalogueError(f"{path}: format_version must be {CATALOGUE_FORMAT}, got {raw.get('format_version')!r}")
    seed = raw.get("seed")
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise CatalogueError(f"{path}: top-level 'seed' must be an integer")
    if "tolerances" in raw:
        raise CatalogueError(
            f"{path}: a [tolerances] table is not allowed: every bound comes from the error analysis "
            "(attention_ports/truth/bounds.py)"
        )
    # [coverage] declares the matrix cells that do not apply; attention_ports/tools/coverage.py reads it.
    unknown_top = set(raw) - {"format_version", "seed", "case", "coverage"}
    if unknown_top:
        raise CatalogueError(f"{path}: unknown top-level keys {sorted(unknown_top)}")
    _check_types(raw, path, max_elements)
    cases = []
    seen: set[str] = set()
    for i, entry in enumerate(raw.get("case", [])):
        case = _parse_case(entry, i, seed, path)
        if case.id in seen:
            raise CatalogueError(f"{path}: case id {case.id!r} appears twice")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise CatalogueError(f"{path}: no [[case]] entries")
    return Catalogue(path=path, seed=seed, cases=tuple(cases), sha256=hashlib.sha256(raw_bytes).hexdigest())


def _check_types(raw: dict[str, Any], path: Path, max_elements: int = validate.MAX_CATALOGUE_ELEMENTS) -> None:
    """Every field of its type (validate.CATALOGUE_SCHEMA) and every generated input of bounded size."""

    def where(p: list[Any]) -> str:
        if len(p) >= 2 and p[0] == "case" and isinstance(p[1], int):
            entry = raw["case"][p[1]]
            case_id = entry.get("id") if isinstance(entry, dict) else None
            label = f"case {case_id!r}" if isinstance(case_id, str) else f"case #{p[1] + 1}"
            rest = validate.json_path(p[2:])
            return f"{path}: {label}" + (f", field {rest!r}" if p[2:] else "")
        return f"{path}: field {validate.json_path(p)!r}"

    problems = validate.schema_problems(raw, validate.CATALOGUE_SCHEMA, where)
    if problems:
        raise CatalogueError("\n  ".join(["the catalogue is malformed:", *problems]))
    for i, entry in enumerate(raw["case"]):
        for name, how in entry.get("inputs", {}).items():
            dims = next(
                (how[k] for k in ("normal", "uniform", "constant", "integers", "causal", "padding") if k in how), []
            )
            count = math.prod(dims) * math.prod(how.get("tile", []))
            if count > max_elements:
                raise CatalogueError(
                    f"{where(['case', i, 'inputs', name])}: {count} elements, more than the "
                    f"{max_elements} one generated input may have"
                )


def _parse_case(entry: dict[str, Any], index: int, seed: int, path: Path) -> CaseSpec:
    where = f"{path}: case #{index + 1}"
    case_id = entry.get("id")
    if not isinstance(case_id, str) or not CASE_ID.match(case_id):
        raise CatalogueError(f"{where}: 'id' must match {CASE_ID.pattern}, got {case_id!r}")
    where = f"{path}: case {case_id!r}"
    if "tolerances" in entry:
        raise CatalogueError(f"{where}: 'tolerances' is not allowed: bounds come from the error analysis")
    unknown = set(entry) - {"id", "op", "reason", "flags", "inputs", "options"}
    if unknown:
        raise CatalogueError(f"{where}: unknown fields {sorted(unknown)}")
    op = entry.get("op")
    if op not in ops.OPS:
        raise CatalogueError(f"{where}: unknown op {op!r}; known: {', '.join(ops.OPS)}")
    spec = ops.OPS[op]
    reason = entry.get("reason")
    if not isinstance(reason, str) or len(reason) < 10:
        raise CatalogueError(f"{where}: every case needs a 'reason' saying why it exists")
    flags = tuple(entry.get("flags", ()))
    bad_flags = set(flags) - KNOWN_FLAGS
    if bad_flags:
        raise CatalogueError(f"{where}: unknown flags {sorted(bad_flags)}; known: {sorted(KNOWN_FLAGS)}")
    inputs = entry.get("inputs", {})
    allowed = set(spec.args) | set(spec.kwargs) | {f"{g}.{m}" for g, ms in spec.groups.items() for m in ms}
    missing = [a for a in spec.args if a not in inputs]
    if missing:
        raise CatalogueError(f"{where}: {op} needs inputs {missing}")
    extra = set(inputs) - allowed
    if extra:
        raise CatalogueError(f"{where}: {op} takes no inputs {sorted(extra)}")
    options = dict(entry.get("options", {}))
    extra_opts = set(options) - set(spec.options) - set(spec.positional_options)
    if extra_opts:
        raise CatalogueError(f"{where}: {op} takes no options {sorted(extra_opts)}")
    return CaseSpec(
        id=case_id,
        op=op,
        reason=reason,
        flags=flags,
        inputs=inputs,
        options=options,
        outputs=spec.outputs,
        seed=_case_seed(seed, case_id),
    )


def build_inputs(case: CaseSpec) -> dict[str, np.ndarray]:
    """Materialise the case's inputs, in declaration order, from its own random stream."""
    rng = np.random.default_rng(case.seed)
    out = {}
    for name, how in case.inputs.items():
        try:
            out[name] = _build_one(how, rng)
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise CatalogueError(f"case {case.id!r}: input {name!r} ({how!r}): {exc}") from exc
    return out


@functools.cache
def _sentiment_rows() -> tuple[tuple[np.ndarray, int], ...]:
    # Every row of the data file, empty sentences included (ports must skip those themselves).
    table = sentiment.default_embedding_table()
    return tuple(
        (sentiment.embed(text, table)[0], sentiment.LABEL_INDEX[label])
        for label, text in sentiment.read_sentiment_csv()
    )


def _sentence(row: int) -> np.ndarray:
    rows = _sentiment_rows()
    if not 0 <= row < len(rows):
        raise ValueError(f"sentence {row} is not a row of the sentiment data (0..{len(rows) - 1})")
    return rows[row][0]


def _sentiment_dataset() -> dict[str, np.ndarray]:
    tokens, lengths, labels = reference.pack_dataset(_sentiment_rows())
    return {"tokens": tokens, "lengths": lengths, "labels": labels}


def _build_one(how: dict[str, Any], rng: np.random.Generator) -> np.ndarray:
    dtype = how.get("dtype", "float64")
    if "literal" in how:
        arr = np.array(how["literal"], dtype=dtype)
    elif "normal" in how:
        arr = rng.standard_normal(tuple(how["normal"])) * how.get("scale", 1.0)
    elif "uniform" in how:
        arr = rng.uniform(how.get("low", 0.0), how.get("high", 1.0), tuple(how["uniform"]))
    elif "constant" in how:
        arr = np.full(tuple(how["constant"]), float(how["value"]))
    elif "integers" in how:
        # uniform integers in [low, high), int64: token ids (gpt_forward's tokens, 0-based)
        arr = rng.integers(int(how.get("low", 0)), int(how["high"]), tuple(how["integers"]), dtype=np.int64)
    elif "causal" in how:
        # diagonal = k keeps key j for query i when j <= i + k: k = n_k - n_q is the causal mask
        # aligned at the bottom right (the last query sees every key), as in cross-attention over a
        # cache; with n_q > n_k its first n_q - n_k queries see no key at all.
        n_q, n_k = how["causal"]
        arr = np.tril(np.ones((n_q, n_k), dtype=bool), k=int(how.get("diagonal", 0)))
    elif "padding" in how:
        arr = reference.key_padding_mask(*how["padding"], valid=how["valid"])
    elif "sentence" in how:
        arr = _sentence(int(how["sentence"]))
    elif "sentiment_dataset" in how:
        arr = _sentiment_dataset()[how["sentiment_dataset"]]
    elif "classifier_init" in how:
        arr = reference.init_classifier_params(int(how["e"]), seed=int(how["seed"]))[how["classifier_init"]]
    else:
        raise ValueError(
            "expected one of literal, normal, uniform, constant, integers, causal, padding, sentence, "
            "sentiment_dataset, classifier_init"
        )
    if "offset" in how:  # a constant added to every element: nearly constant rows with a large mean
        arr = arr + float(how["offset"])
    if "tile" in how:
        arr = np.tile(arr, tuple(how["tile"]))
    if how.get("packed_heads"):
        arr = reference.heads_to_packed(arr)
    if "dead_rows" in how:  # mask rows that remove every key
        arr = arr.copy()
        arr[list(how["dead_rows"])] = False if arr.dtype == bool else -np.inf
    if how.get("form") == "additive":
        arr = reference.as_additive_mask(arr, arr.shape)
    return np.asarray(arr, order="C")
