"""The precision format table (attention_ports/spec/precision.py, issue 17): a format's constants
are the format's own, and a fixtures folder names its precision."""

from __future__ import annotations

import math

import numpy as np

from attention_ports.core import paths
from attention_ports.spec import precision

F32 = precision.FORMATS["float32"]


def test_the_float32_constants_are_the_formats_own() -> None:
    assert F32.u == np.finfo(np.float32).eps / 2
    assert F32.max_finite == float(np.finfo(np.float32).max)
    assert 88.7 < F32.exp_overflow < 88.8
    assert math.exp(-F32.negligible_logit) < 2.0**-150  # below half the smallest subnormal


def test_a_fixtures_folder_names_its_precision() -> None:
    assert precision.fixtures_dir("float64") == paths.FIXTURES
    assert precision.fixtures_dir("float32") == paths.FIXTURES / "precision" / "float32"
    assert precision.of_fixtures(precision.fixtures_dir("float32")) is F32
    assert precision.of_fixtures(paths.FIXTURES) is precision.FORMATS["float64"]


# --- the mixed tiers and float16 (issue 17) ---------------------------------------------------

BF16, F16 = precision.BFLOAT16, precision.FLOAT16


def test_the_storage_formats_are_ieee_binary16_and_bfloat16() -> None:
    import torch

    for storage, dtype in ((BF16, torch.bfloat16), (F16, torch.float16)):
        info = torch.finfo(dtype)
        assert storage.u == info.eps / 2 and storage.max_finite == info.max
        assert 2.0**storage.min_normal_exp == info.smallest_normal
        assert 2.0**storage.min_subnormal_exp == torch.tensor(0, dtype=dtype).nextafter(torch.tensor(1, dtype=dtype))


def test_a_mixed_format_is_float32_arithmetic_with_a_storage_format() -> None:
    f32 = precision.FORMATS["float32"]
    for name, storage in (("bfloat16/float32", BF16), ("float16/float32", F16)):
        fmt = precision.get(name)
        assert fmt.storage is storage and fmt.u == f32.u and fmt.c_exp == f32.c_exp
        # float32's constants but the first-order guard, float16's 2^-3 (spec/precision.py: a rule
        # charging storage roundings has bfloat16-sized terms)
        assert (fmt.underflow_exp, fmt.max_first_order_exp, fmt.negligible_logit) == (-104, -3, 104)
        assert precision.of_fixtures(precision.fixtures_dir(name)) is fmt
    assert precision.fixtures_dir("bfloat16/float32") == paths.FIXTURES / "precision" / "bfloat16-float32"
    f16 = precision.get("float16")
    assert f16.u == 2.0**-11 and f16.max_finite == 65504.0 and 11.08 < f16.exp_overflow < 11.1
    assert math.exp(-f16.negligible_logit) < F16.tiny < math.exp(-(f16.negligible_logit - 1))


def _awkward(rng: np.random.Generator, n: int, low: int, high: int) -> np.ndarray:
    """Random values over binades low..high, plus exact ties: each value's midpoints between
    neighbours of 8 and 11 bits (and the subnormal ranges), which round-to-nearest-even decides."""
    x = rng.standard_normal(n) * 2.0 ** rng.integers(low, high, n).astype(float)
    m, e = np.frexp(x)
    ties = [np.ldexp(np.floor(np.ldexp(m, p)) + 0.5, e - p) for p in (8, 11)]
    sub = [np.arange(-64, 64) * 2.0**-25, np.arange(-64, 64) * 2.0**-134]  # float16's and bfloat16's
    return np.concatenate([x, *ties, *sub, [0.0, -0.0, np.inf, -np.inf]])


def test_round_to_is_torchs_bfloat16_rounding_of_float32_values() -> None:
    import torch

    with np.errstate(over="ignore"):
        x = _awkward(np.random.default_rng(1), 20000, -140, 128).astype(np.float32)
    ours = precision.round_to(x.astype(np.float64), BF16)
    theirs = torch.from_numpy(x).to(torch.bfloat16).to(torch.float64).numpy()
    assert np.array_equal(ours, theirs)


def test_round_to_is_numpys_float16_rounding_of_float64_values() -> None:
    x = _awkward(np.random.default_rng(2), 20000, -26, 17)
    with np.errstate(over="ignore"):
        theirs = x.astype(np.float16).astype(np.float64)
    assert np.array_equal(precision.round_to(x, F16), theirs)
    assert precision.round_to(np.array([65519.99, 65520.0, 2.0**-25, 3 * 2.0**-26]), F16).tolist() == [
        65504.0,
        np.inf,  # max + half an ulp: a tie, to even, which is past the range
        0.0,  # half the smallest subnormal: a tie, to even zero
        2.0**-24,
    ]
