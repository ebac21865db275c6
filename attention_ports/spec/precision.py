"""Precision tiers: the arithmetic a port declares, and the format table its bounds use (issue 17).

A port computes in one storage = accumulation format: ``"float64"`` (the default, and the suite's
main fixtures) or ``"float32"``, or in a mixed one (:data:`MIXED`: ``"bfloat16/float32"``,
``"float16/float32"``, storage / accumulation): values stored in the storage format (:class:`Storage`),
arithmetic in the accumulation format (the :class:`Format`'s own constants), rounded to storage at
the declared rounding points (the rule: attention_ports/truth/bounds.py, "Mixed precision").

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
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from attention_ports.core import paths

DEFAULT = "float64"
MIXED = ("bfloat16/float32", "float16/float32")  # storage / accumulation (issue 17)
# The operations of the float32 tier: every operation (issue 17, item 4). A case whose values leave
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
    "layer_norm",
    "rms_norm",
    "gelu",
    "sinusoidal_positions",
    "rotary_embedding",
    "feed_forward",
    "decoder_block",
    "gpt_forward",
    "lm_loss",
    "adamw_step",
    "gpt_grads",
)
# The operations of the tiers with a storage format (the mixed tiers and float16), each with its
# declared rounding points to storage (attention_ports/truth/bounds.py, "Mixed precision", states the
# rule; docs/truth-and-bounds.md derives each): the inputs are storage values and every output is
# stored; between them float32 arithmetic (float16's own at "float16"), rounded to storage where
# named here. A kernel that rounds fewer of them (keeps an intermediate in float32) passes too. The
# attention projections, the decoder block, the GPT forward, its gradients and the training steps
# are not here: stored q and k move the scores by u_s |q||k| (bounds.py, "Mixed precision").
STORAGE_POINTS: dict[str, tuple[str, ...]] = {
    "softmax": (),
    "scaled_dot_product_attention": ("the attention weights before the product with V",),
    "layer_norm": (),
    "rms_norm": (),
    "gelu": (),
    "sinusoidal_positions": (),
    "rotary_embedding": ("the cos and sin tables", "each product of the rotation"),
    "feed_forward": (
        "the product x W_1 before its bias",
        "the hidden pre-activation x W_1 + b_1",
        "gelu's output",
        "the product gelu(.) W_2 before its bias",
    ),
    "decoder_block": (
        "each layer norm's output",
        "q, k and v",
        "the attention weights before the product with V",
        "each head's output",
        "each projection's product before its bias, and its result",
        "gelu's output",
        "the residual stream after each add",
    ),
    "gpt_forward": (
        "the embedding wte[t] + wpe[p]",
        "every rounding point of decoder_block, in each block",
        "the final layer norm's output",
    ),
    "lm_loss": ("each position's log-probability of its target",),
    "adamw_step": ("every elementwise operation's result (torch's optimizer on storage tensors)",),
}
STORAGE_TIER_OPS = tuple(STORAGE_POINTS)


@dataclass(frozen=True)
class Storage:
    """The format a mixed-precision kernel stores values in (its arithmetic is its Format's)."""

    name: str
    mantissa_bits: int  # p, the implicit bit included: u = 2^-p
    max_finite: float
    min_normal_exp: int  # smallest normal 2^e
    min_subnormal_exp: int  # smallest subnormal 2^e

    @property
    def u(self) -> float:
        return 2.0**-self.mantissa_bits

    @property
    def tiny(self) -> float:
        """Half the smallest subnormal: the absolute error of a rounding in the subnormal range."""
        return 2.0 ** (self.min_subnormal_exp - 1)


# Exact IEEE binary16 and bfloat16 (the top half of a binary32: float32's exponent range, 8 bits).
BFLOAT16 = Storage("bfloat16", 8, (2 - 2.0**-7) * 2.0**127, -126, -133)
FLOAT16 = Storage("float16", 11, 65504.0, -14, -24)


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
    # Mixed precision: the storage format values are rounded to at the declared rounding points
    # (inputs, the attention weights before the product with V, outputs); None: storage =
    # accumulation (this format itself).
    storage: Storage | None = None
    # Roundings in the storage format's subnormal range charged per rounding point (tau_s each):
    # 1 where the arithmetic is wider (mixed: float32's intermediates do not reach float16's
    # subnormals); 2 for float16 itself (the exp before the division rounds there too).
    subnormal_roundings: int = 1

    @property
    def u(self) -> float:
        return 2.0**-self.mantissa_bits

    @property
    def dirname(self) -> str:
        """The tier's folder name under fixtures/precision/ ("bfloat16/float32" -> "bfloat16-float32")."""
        return self.name.replace("/", "-")

    @property
    def storage_format(self) -> Storage:
        """Where inputs and outputs live: the storage format, or this format's own as a Storage."""
        if self.storage is not None:
            return self.storage
        return Storage(self.name, self.mantissa_bits, self.max_finite, self.min_normal_exp, self.min_subnormal_exp)

    @property
    def exp_overflow(self) -> float:
        """The largest x with exp(x) finite: 88.72 in float32, 709.78 in float64."""
        return math.log(self.max_finite)

    @property
    def bound_limits(self) -> tuple[int, int, int]:
        """What core.validate.check_bounds accepts: largest relative bound, resolution, underflow (exponents)."""
        return (self.max_relative_bound_exp, self.resolution_exp, self.underflow_exp)

    def spacing(self, mag: np.ndarray) -> np.ndarray:
        """The spacing of the values a port returns (the storage format's) at each positive finite
        magnitude: ``numpy.spacing`` for float64; else 2^(e - p + 1) in the binade [2^e, 2^(e+1)),
        the smallest normal's below it (``frexp`` is exact: nothing is rounded to the format)."""
        if self.name == DEFAULT:
            return np.spacing(mag)
        st = self.storage_format
        _, e = np.frexp(np.maximum(mag, 2.0**st.min_normal_exp))  # mag = m 2^e, m in [0.5, 1)
        return np.ldexp(1.0, e - st.mantissa_bits)

    def ulps(self, error: float, value: float) -> float:
        """``error`` in units in the last place of this format at ``value``."""
        return error / float(self.spacing(np.array([abs(value)]))[0])


FORMATS: dict[str, Format] = {
    "float64": Format(
        "float64", np.float64, 53, 4, float(np.finfo(np.float64).max), -1022, -1074, -46, -1000, -20, -20, 745
    ),
    "float32": Format(
        "float32", np.float32, 24, 4, float(np.finfo(np.float32).max), -126, -149, -17, -104, -8, -6, 104
    ),
}

# Mixed: float32's arithmetic (every accumulation constant is float32's), values stored in
# bfloat16 / float16. The largest relative bound: an output rounded to storage carries u_s of
# itself, 2^-8 for bfloat16 (times SAFETY, plus the float32 analysis): 2^-4 of the case's largest.
# The first-order guard is float16's 2^-3 (below), for the same reason: a rule that charges storage
# roundings (a stored moment, a stored log-probability) has u_s-sized terms, bfloat16's 2^-8 each,
# that float32's guard would refuse outright; the second-order remainders are charged up to 1/8
# (the softmax's 9 M^2, the norms' and the optimizer's square roots), and the neglected terms, up to
# 1/8 of the bound, stay inside SAFETY = 2.
FORMATS["bfloat16/float32"] = replace(
    FORMATS["float32"], name="bfloat16/float32", storage=BFLOAT16, max_relative_bound_exp=-4, max_first_order_exp=-3
)
FORMATS["float16/float32"] = replace(
    FORMATS["float32"], name="float16/float32", storage=FLOAT16, max_first_order_exp=-3
)
# float16 itself (storage = accumulation: Julia's Float16, which rounds every operation to
# float16). Its storage rounding points (the weights before V, the outputs) are also counted by the
# rules' own roundings: charged twice, which costs ~u per output and keeps one place for tau_s, the
# absolute error of a rounding in float16's subnormal range, charged twice per point
# (subnormal_roundings: the exp before the division rounds there too). Constants that differ from
# float32's rule of thumb, and why: the resolution is 8 u (128 u would be 6%, coarser than the
# analysis itself; every output but an exact one already carries >= 10 u in B); the underflow
# allowance is 2^-22, four smallest subnormals (2^22 times the smallest normal would be 2^8); the
# first-order guard is 2^-3, the second-order remainder's own limit (the softmax's eps alone is
# >= 10 u = 2^-7.7 in float16: 2^-8 would refuse every row), so the neglected terms are up to 1/8
# of the bound, inside SAFETY = 2 with Julia's Float16 exp (computed in Float32, then rounded:
# within one ulp, a quarter of C_EXP); e^-18 is below half the smallest subnormal (2^-25).
FORMATS["float16"] = Format(
    "float16", np.float16, 11, 4, 65504.0, -14, -24, -8, -22, -3, 0, 18, FLOAT16, subnormal_roundings=2
)


def tier_ops(fmt: Format) -> tuple[str, ...]:
    """The operations of a lower tier: every one at float32; the attention kernel where storage is narrower."""
    return STORAGE_TIER_OPS if fmt.storage is not None else TIER_OPS


# Why an operation is not in a tier, as every report names it (report.model.Report.not_judged);
# docs/precision.md gives the measurements behind each.
NOT_IN_FLOAT32 = {"gpt_train": "no case certifies at float32 (docs/precision.md)"}


def not_in_tier(op: str, fmt: Format) -> str | None:
    """Why ``fmt``'s tier holds no case of ``op``; None when the tier has the operation."""
    if fmt.name == DEFAULT or op in tier_ops(fmt):
        return None
    if fmt.storage is not None:
        return f"no rounding points stated at {fmt.name} yet (docs/precision.md, Not yet built)"
    return NOT_IN_FLOAT32.get(op, f"not in the {fmt.name} tier")


def round_to(arr: np.ndarray, fmt: Storage) -> np.ndarray:
    """``arr`` (float64) rounded to the nearest value of ``fmt``, ties to even, as float64.

    Exact, and the same bytes on every CPU: only exact operations touch the values (``frexp``,
    scaling by powers of two, ``rint``, which rounds half to even), so no rounding of NumPy's, no
    FMA and no SIMD kernel can differ. Directly from float64 (no double rounding through float32).
    Gradual underflow below the smallest normal; past the largest finite value, +-inf (IEEE's
    overflow under round-to-nearest: from max + half an ulp up). NaN and +-inf are kept.
    """
    x = np.asarray(arr, dtype=np.float64)
    out = x.copy()
    fin = np.isfinite(x) & (x != 0)
    _, e = np.frexp(x[fin])  # |x| = m 2^e, m in [0.5, 1): the ulp of p bits is 2^(e - p)
    quantum = np.maximum(e - fmt.mantissa_bits, fmt.min_subnormal_exp)
    rounded = np.ldexp(np.rint(np.ldexp(x[fin], -quantum)), quantum)
    with np.errstate(over="ignore"):
        rounded[np.abs(rounded) > fmt.max_finite] *= np.inf
    out[fin] = rounded
    return out


class PrecisionError(ValueError):
    """A precision that is not one of the supported formats (the message names where it came from)."""


def get(name: str, where: str = "precision") -> Format:
    """The format named ``name``; ``where`` names the field or option in the error message."""
    if name in FORMATS:
        return FORMATS[name]
    raise PrecisionError(f"{where} = {name!r} is not a precision; use one of {', '.join(map(repr, FORMATS))}")


# ---------------------------------------------------------------- where a tier's fixtures live

ROOT = paths.FIXTURES / "precision"


def fixtures_dir(name: str) -> Path:
    """Where a precision tier's fixtures live (the main fixtures for float64)."""
    if name == DEFAULT:
        return paths.FIXTURES
    return ROOT / (FORMATS[name].dirname if name in FORMATS else name)


def of_fixtures(fixtures_dir: Path) -> Format:
    """The precision a fixtures folder is for: ``.../precision/<name>`` is that tier's; else float64."""
    path = Path(fixtures_dir)
    if path.parent.name == "precision":
        for fmt in FORMATS.values():
            if fmt.dirname == path.name:
                return fmt
    return FORMATS[DEFAULT]
