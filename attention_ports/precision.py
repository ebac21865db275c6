"""Precision tiers: the arithmetic a port declares, and the fixtures that judge it (issue 17).

A port computes in one storage = accumulation format: ``"float64"`` (the default, and the suite's
main fixtures) or ``"float32"``. The mixed forms (``"bfloat16/float32"``, ``"float16/float32"``)
are named here so that a declaration of one gets a clear "not yet supported" error.

**The format table** (:data:`FORMATS`) is the one place a format's constants live: its unit
roundoff, the accuracy of its ``exp``/``log``, the largest finite value, the smallest normal and
subnormal, and the constants of the stored bound that follow from them. The error analysis in
``attention_ports.bounds`` is written for a general unit roundoff; :func:`rules` evaluates it
for a format by setting the rules' parameters (``bounds.U`` and the rest) for the duration of a
block, so the float32 bounds come from the very same rules as the float64 ones.

**The float32 tier's fixtures** (``fixtures/precision/float32/``, a manifest of the same format
as the main one): the catalogue's softmax and scaled-dot-product-attention cases, with every
floating-point input rounded to float32 (so that a float32 implementation receives exactly the
inputs the truth is exact at), the truth computed exactly at those inputs and certified as for
float64, and the bounds from the same rules with float32's constants. A case that leaves
float32's range (an input beyond 3.4e38, scores whose magnitude a float32 product cannot hold,
an output beyond the range) or whose float32 logit errors leave the first-order regime of the
softmax rule is *not applicable*: it is listed with its reason in the manifest's
``truth.not_applicable`` and has no files. Why only these two operations: they are where the
measured defect is (our Julia port in Float32 failed 36 of 40 of them), and their bounds are the
cheapest to certify; the other operations' rules are the same rules (checked at float32 rounding
in tests/test_bounds.py) and join the tier when its fixtures can afford them in ``make test``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from flint import arb

from attention_ports import bounds, paths, truth
from attention_ports.catalogue import CaseSpec, build_inputs, load_catalogue

DEFAULT = "float64"
MIXED = ("bfloat16/float32", "float16/float32")  # storage / accumulation: later (issue 17)


@dataclass(frozen=True)
class Format:
    """One storage = accumulation floating-point format and the constants its bounds use."""

    name: str
    dtype: type  # the NumPy scalar type
    mantissa_bits: int  # p: u = 2^-p
    c_exp: int  # ulps of exp / log (the libraries' float kernels are within 1-4)
    max_finite: float
    min_normal_exp: int  # smallest normal 2^e
    min_subnormal_exp: int  # smallest subnormal 2^e
    # The stored bound's resolution term: 128 u, 64 ulps at the bottom of a binade (bounds.py).
    resolution_exp: int
    # The underflow allowance: 2^22 times the smallest normal (float64: 2^-1000, bounds.py), far
    # below anything the suite resolves, above any gradual underflow or flush-to-zero of an
    # intermediate that a correct implementation meets.
    underflow_exp: int
    # The softmax rule's first-order guard on a row's logit error bound M: the terms it neglects
    # are ~M of the bound, inside SAFETY = 2 up to M = 2^-8 (the second-order remainder 9 M^2 is
    # charged, valid to M = 1/8); float64's 2^-20 would refuse float32 rows with scores of ~1e3.
    max_first_order_exp: int
    # The largest bound a fixture may hold, relative to its case's largest value (validate.py).
    max_relative_bound_exp: int
    # A shifted logit below minus this gives a weight under half the smallest subnormal
    # (float32: e^-104 < 2^-150); bounds.NEGLIGIBLE_LOGIT for float64.
    negligible_logit: int

    @property
    def u(self) -> float:
        return 2.0**-self.mantissa_bits

    @property
    def exp_overflow(self) -> float:
        """The largest x with exp(x) finite: 88.72 in float32, 709.78 in float64."""
        return math.log(self.max_finite)

    @property
    def bound_limits(self) -> tuple[int, int, int]:
        """What validate.check_bounds accepts: largest relative bound, resolution, underflow (exponents)."""
        return (self.max_relative_bound_exp, self.resolution_exp, self.underflow_exp)

    def constants(self) -> dict[str, Any]:
        """The manifest's record of the constants (``truth.bounds``)."""
        return {
            **bounds.CONSTANTS,
            "u": f"2^-{self.mantissa_bits}",
            "C_EXP": self.c_exp,
            "resolution": f"2^{self.resolution_exp}",
            "underflow": f"2^{self.underflow_exp}",
            "max_first_order": f"2^{self.max_first_order_exp}",
            "negligible_logit": self.negligible_logit,
        }

    def ulps(self, error: float, value: float) -> float:
        """``error`` in units in the last place of this format at ``value`` (normal range)."""
        mag = max(abs(value), 2.0**self.min_normal_exp)
        return error / 2.0 ** (math.floor(math.log2(mag)) - self.mantissa_bits + 1)


FORMATS: dict[str, Format] = {
    "float64": Format(
        "float64", np.float64, 53, 4, float(np.finfo(np.float64).max), -1022, -1074, -46, -1000, -20, -20, 745
    ),
    "float32": Format(
        "float32", np.float32, 24, 4, float(np.finfo(np.float32).max), -126, -149, -17, -104, -8, -6, 104
    ),
}


class PrecisionError(ValueError):
    """A precision that is not one of the supported formats (the message names where it came from)."""


def get(name: str, where: str = "precision") -> Format:
    """The format named ``name``; ``where`` names the field or option in the error message."""
    if name in FORMATS:
        return FORMATS[name]
    if name in MIXED:
        raise PrecisionError(
            f"{where} = {name!r}: mixed precision (storage/accumulation) is not yet supported; "
            f"the supported precisions are {', '.join(map(repr, FORMATS))}"
        )
    raise PrecisionError(f"{where} = {name!r} is not a precision; use one of {', '.join(map(repr, FORMATS))}")


_RULE_PARAMETERS = ("U", "C_EXP", "RESOLUTION", "UNDERFLOW", "MAX_FIRST_ORDER", "NEGLIGIBLE_LOGIT")


@contextlib.contextmanager
def rules(fmt: Format) -> Iterator[None]:
    """Evaluate ``attention_ports.bounds``'s rules for ``fmt`` inside the block.

    The rules read their parameters at call time, so this is the whole of a format's analysis:
    the same rules, the format's constants. The truth's in-process memo is set aside for the
    block (a float32 bound must never be served for a float64 call, or the reverse). Not for
    threads: generation runs one case at a time in a process.
    """
    saved = {name: getattr(bounds, name) for name in _RULE_PARAMETERS}
    memo = truth._MEMO
    try:
        bounds.U = arb(fmt.u)
        bounds.C_EXP = fmt.c_exp
        bounds.RESOLUTION = arb(2.0**fmt.resolution_exp)
        bounds.UNDERFLOW = arb(2.0**fmt.underflow_exp)
        bounds.MAX_FIRST_ORDER = arb(2.0**fmt.max_first_order_exp)
        bounds.NEGLIGIBLE_LOGIT = fmt.negligible_logit
        truth._MEMO = {}
        yield
    finally:
        for name, value in saved.items():
            setattr(bounds, name, value)
        truth._MEMO = memo


# ---------------------------------------------------------------- the tier's fixtures

TIER_OPS = ("softmax", "scaled_dot_product_attention")
ROOT = paths.FIXTURES / "precision"


def fixtures_dir(name: str) -> Path:
    """Where a precision tier's fixtures live (the main fixtures for float64)."""
    return paths.FIXTURES if name == DEFAULT else ROOT / name


def of_fixtures(fixtures_dir: Path) -> Format:
    """The precision a fixtures folder is for: ``.../precision/<name>`` is that tier's; else float64."""
    path = Path(fixtures_dir)
    if path.parent.name == "precision" and path.name in FORMATS:
        return FORMATS[path.name]
    return FORMATS[DEFAULT]


def round_inputs(inputs: Mapping[str, np.ndarray], fmt: Format) -> dict[str, np.ndarray]:
    """Every floating-point input rounded to ``fmt`` (stored as float64: exact); others as they are."""
    out = {}
    for name, arr in inputs.items():
        if arr.dtype == np.float64:
            with np.errstate(over="ignore"):
                arr = arr.astype(fmt.dtype).astype(np.float64)
        out[name] = arr
    return out


def not_applicable(spec: CaseSpec, original: Mapping[str, np.ndarray], fmt: Format) -> str:
    """Why the case cannot be judged in ``fmt`` before any truth is computed ("" when it can)."""
    for name, arr in original.items():
        if arr.dtype != np.float64:
            continue
        finite = arr[np.isfinite(arr)]
        if finite.size and float(np.max(np.abs(finite))) > fmt.max_finite:
            peak = float(np.max(np.abs(finite)))
            return f"input {name} holds {peak:.3g}, beyond {fmt.name}'s range ({fmt.max_finite:.3g})"
    if spec.op == "scaled_dot_product_attention":
        # |scale| sum_l |q_il| |k_jl| bounds every score and every partial sum of one: past the
        # format's range a correct kernel overflows (a bound, not a value: the decision is the
        # same on every CPU except at a tie with the threshold, which the factor 2 keeps away).
        q, k = np.abs(original["q"]), np.abs(original["k"])
        scale = spec.options.get("scale")
        s = abs(float(scale)) if scale is not None else 1 / math.sqrt(q.shape[1])
        peak = float(np.max(q @ k.T, initial=0.0)) * s
        if peak * 2 > fmt.max_finite:
            return f"its scores reach {peak:.3g}, beyond {fmt.name}'s range ({fmt.max_finite:.3g})"
    return ""


Progress = Callable[[int, int, str], None]


def render(
    fmt: Format, catalogue_path: Path | None = None, progress: Progress | None = None
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Every file of ``fmt``'s tier and its manifest, without touching the disk (byte-identical
    on every CPU, as the main fixtures: no NumPy floating point touches a stored value)."""
    from attention_ports import fixtures  # the main fixtures' writer: one format, one renderer

    catalogue_path = catalogue_path or paths.FIXTURES / fixtures.CATALOGUE
    catalogue = load_catalogue(catalogue_path)
    specs = [s for s in catalogue.cases if s.op in TIER_OPS]
    files: dict[str, bytes] = {}
    cases: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    with rules(fmt):
        for i, spec in enumerate(specs):
            original = build_inputs(spec)
            reason = not_applicable(spec, original, fmt)
            tr = None
            if not reason:
                inputs = round_inputs(original, fmt)
                try:
                    tr = truth.compute_detailed(spec.op, inputs, spec.options, label=spec.id, memo=False)
                    conv = fixtures._convention_truths(spec, inputs, tr)
                except bounds.BoundError as exc:
                    reason = f"{fmt.name}'s rounding leaves the softmax rule's first-order regime ({exc})"
            if not reason:
                assert tr is not None
                beyond = [n for n, (e, _) in tr.outputs.items() if np.any(np.abs(e[np.isfinite(e)]) > fmt.max_finite)]
                if beyond:
                    reason = f"outputs {', '.join(beyond)} exceed {fmt.name}'s range ({fmt.max_finite:.3g})"
            if reason:
                skipped.append({"id": spec.id, "reason": reason})
            else:
                cases.append(fixtures._render_case(spec, inputs, tr, conv, files))
            if progress:
                progress(i + 1, len(specs), spec.id)
    described = truth.describe()
    described.update(
        precision=fmt.name,
        bounds=fmt.constants(),
        inputs=f"the catalogue's inputs rounded to {fmt.name} (stored as float64, exactly)",
        operations=list(TIER_OPS),
        not_applicable=skipped,
    )
    manifest = {
        "format_version": fixtures.FORMAT_VERSION,
        "catalogue": {"file": "../../catalogue.toml", "sha256": catalogue.sha256, "seed": catalogue.seed},
        "truth": described,
        "cases": cases,
    }
    return files, manifest


def generate(fmt: Format, out_dir: Path | None = None, progress: Progress | None = None) -> list[str]:
    """Write ``fmt``'s tier (default: ``fixtures/precision/<name>``); returns the files written."""
    from attention_ports import fixtures

    out_dir = out_dir or fixtures_dir(fmt.name)
    files, manifest = render(fmt, progress=progress)
    files[fixtures.MANIFEST] = fixtures.manifest_bytes(manifest)
    written = []
    for rel in sorted(files, key=lambda r: r == fixtures.MANIFEST):
        target = out_dir / rel
        if not (target.is_file() and target.read_bytes() == files[rel]):
            fixtures.atomic_write(target, files[rel])
            written.append(rel)
    for stale in fixtures._existing_case_files(out_dir):
        if stale not in files:
            (out_dir / stale).unlink()
    for d in sorted((out_dir / "cases").glob("*"), reverse=True):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()
    return written


def check(fmt: Format, out_dir: Path | None = None) -> list[str]:
    """One problem per file of ``fmt``'s tier that differs from a fresh generation (empty: good)."""
    from attention_ports import fixtures

    out_dir = out_dir or fixtures_dir(fmt.name)
    files, manifest = render(fmt)
    files[fixtures.MANIFEST] = fixtures.manifest_bytes(manifest)
    problems = []
    for rel, data in sorted(files.items()):
        path = out_dir / rel
        if not path.is_file():
            problems.append(f"{path}: a fresh generation has it, the fixtures do not")
        elif path.read_bytes() != data:
            problems.append(f"{path}: differs from a fresh generation (run `attention-ports generate`)")
    for extra in sorted(set(fixtures._existing_case_files(out_dir)) - set(files)):
        problems.append(f"{out_dir / extra}: not listed in the manifest")
    return problems


def digest(files: Mapping[str, bytes]) -> str:
    """One sha256 over every file (name and bytes), for the byte-identity test."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(json.dumps(rel).encode() + b"\0" + hashlib.sha256(files[rel]).digest())
    return h.hexdigest()


# ---------------------------------------------------------------- the precision diagnosis


def float32_sized(expected: np.ndarray, actual: np.ndarray, bound: np.ndarray) -> bool:
    """A float64 judgement's difference is float32's rounding: same shape, same non-finite
    pattern, and every finite element within the float64 bound scaled to float32's unit roundoff.

    A float64 bound is ``2 B + 2^-46 |e| + 2^-1000`` with B linear in u to first order; times
    2^29 = u32 / u64 it is float32's ``2 B + 2^-17 |e|`` (its RESOLUTION), the float32 bound at
    these inputs up to the rounding of the inputs themselves, which the rules' relative input
    perturbations (the products' gamma(k), the softmax's C_IN) take in. (diagnose.py calls this
    only after float64's own rounding failed to explain the numbers.)
    """
    if expected.shape != actual.shape:
        return False
    fin = np.isfinite(expected)
    if not (np.isfinite(actual) == fin).all() or not (np.isnan(actual) == np.isnan(expected)).all():
        return False
    ratio = FORMATS["float32"].u / FORMATS["float64"].u
    diff = np.abs(actual[fin] - expected[fin])
    if not fin.any() or not (diff <= ratio * bound[fin]).all():
        return False
    # ... and float32-sized somewhere: a worst error of at least u32 / 8 of the output's magnitude,
    # which float64 rounding (u times any condition number of the catalogue) never reaches
    return bool(diff.max() >= FORMATS["float32"].u / 8 * float(np.abs(expected[fin]).max()))


def diagnosis(language: str) -> str:
    """The line for a port whose float64 failures are float32's rounding."""
    how = {
        "Julia": 'declare it with const attention_ports = (precision = "float32",) (or run verify --precision float32)',
        "R": "R computes in double only: something in the port converts to single precision (a float32 library call?)",
    }.get(language, "run verify --precision float32")
    return (
        "every error is within float32's rounding (the bound at u = 2^-24): the port computes in float32, "
        f"and is judged here at float64; {how}"
    )
