"""Precision tiers: the arithmetic a port declares, and the format table its bounds use (issue 17).

A port computes in one storage = accumulation format: ``"float64"`` (the default, and the suite's
main fixtures) or ``"float32"``. The mixed forms (``"bfloat16/float32"``, ``"float16/float32"``)
are named here so that a declaration of one gets a clear "not yet supported" error.

**The format table** (:data:`FORMATS`) is the one place a format's constants live: its unit
roundoff, the accuracy of its ``exp``/``log``, the largest finite value, the smallest normal and
subnormal, and the constants of the stored bound that follow from them. The error analysis in
``attention_ports.truth.bounds`` is written for a general unit roundoff;
``attention_ports.truth.precision.rules`` evaluates it for a format, so the float32 bounds come
from the very same rules as the float64 ones.

**Where a tier's fixtures live** (:func:`fixtures_dir`, :func:`of_fixtures`):
``fixtures/precision/<name>/``, a manifest of the same format as the main one, for the operations
in :data:`TIER_OPS` (the tier's fixtures themselves: attention_ports/fixtures/precision.py).

Layer: spec. Imports only ``core`` (where the fixtures are).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attention_ports.core import paths

DEFAULT = "float64"
MIXED = ("bfloat16/float32", "float16/float32")  # storage / accumulation: later (issue 17)
# The operations of the lower tiers: every operation (issue 17, item 4). A case whose values leave
# a format's range, or whose errors leave the analysis's first-order regime, is not applicable
# (fixtures/precision.py says which and why).
TIER_OPS = (
    "softmax",
    "scaled_dot_product_attention",
    "self_attention",
    "multi_head_attention",
    "classifier_forward",
    "classifier_step",
    "classifier_train",
    "sinusoidal_positions",
    "rotary_embedding",
)


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
    # The stored bound's resolution term: 128 u, 64 ulps at the bottom of a binade (truth/bounds.py).
    resolution_exp: int
    # The underflow allowance: 2^22 times the smallest normal (float64: 2^-1000, truth/bounds.py), far
    # below anything the suite resolves, above any gradual underflow or flush-to-zero of an
    # intermediate that a correct implementation meets.
    underflow_exp: int
    # The softmax rule's first-order guard on a row's logit error bound M: the terms it neglects
    # are ~M of the bound, inside SAFETY = 2 up to M = 2^-8 (the second-order remainder 9 M^2 is
    # charged, valid to M = 1/8); float64's 2^-20 would refuse float32 rows with scores of ~1e3.
    max_first_order_exp: int
    # The largest bound a fixture may hold, relative to its case's largest value (core/validate.py).
    max_relative_bound_exp: int
    # A shifted logit below minus this gives a weight under half the smallest subnormal
    # (float32: e^-104 < 2^-150); truth/bounds.py's NEGLIGIBLE_LOGIT for float64.
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
        """What core.validate.check_bounds accepts: largest relative bound, resolution, underflow (exponents)."""
        return (self.max_relative_bound_exp, self.resolution_exp, self.underflow_exp)

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


# ---------------------------------------------------------------- where a tier's fixtures live

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
