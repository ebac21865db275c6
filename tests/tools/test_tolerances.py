"""``attention-ports bench --tolerances`` (attention_ports/tools/tolerances.py): the rules it puts side by
side judge what they say, and its closed-form "smallest relative error caught" is the direct check's.

One small run (the float32 tier, the reference, torch and the sequential control in float32, one
generated SDPA at L = 16: about two seconds) serves every test."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_ports.spec.precision import FORMATS
from attention_ports.tools import tolerances

F32 = FORMATS["float32"]


@pytest.fixture(scope="module")
def doc() -> dict:
    return tolerances.run("float32", impls=("reference", "torch"), lengths=(16,))


def test_the_reference_in_float32_uses_a_part_of_its_certified_bound_and_raises_no_alarm(doc: dict) -> None:
    cert = doc["rules"]["certified"]
    assert doc["implementations"] == ["reference", "torch", "sequential"]  # the control always runs
    assert cert["false_alarms"] == 0 and cert["judged"] == 3 * (72 + 1)
    assert 0 < cert["worst_used"]["reference"] < 1 and 0 < cert["worst_used"]["sequential"] < 1
    # torch judges itself within twice its own error: never a false alarm of the 2x rule
    assert max(o["flash_2x"]["used"]["torch"] for o in doc["outputs"]) <= 1 / tolerances.FLASH_FACTOR


def test_the_catalogue_share_caught_at_1e_4_is_the_tiers_measured_figure(doc: dict) -> None:
    # the uniform injection is on the exact values: the same 56 of 72 as tests/fixtures/test_precision.py
    cert = doc["rules"]["certified"]
    assert (cert["caught_uniform"], cert["catalogue_outputs"]) == (56, 72)
    assert doc["rules"]["assert_close"]["caught_uniform"] == 72


def test_an_injected_error_of_10x_the_smallest_caught_is_caught_and_half_of_it_is_not(doc: dict) -> None:
    out = tolerances.Output("sdpa L=16", "t", "output", np.empty(0), np.empty(0))
    truth = tolerances.generated_case(16, F32)[2]
    out.exact, out.bound = (a.ravel() for a in truth["output"])
    for rule in ("certified", "assert_close"):
        ref, t = tolerances.threshold(rule, out, F32.storage_format)
        r = tolerances.smallest_caught(out.exact, np.ones_like(out.exact), ref, t)
        assert 0 < r < math.inf
        assert tolerances.used(out.exact * (1 + 10 * r), ref, t) > 1  # caught
        assert tolerances.used(out.exact * (1 + r / 2), ref, t) <= 1  # missed
        # random signs on a float32 output: the closed form agrees with the direct check as well
        base = tolerances.storage_round(out.exact, F32.storage_format)
        signs = np.random.default_rng(0).choice((-1.0, 1.0), size=base.shape)
        r = tolerances.smallest_caught(base, signs, ref, t)
        assert tolerances.used(base * (1 + signs * r * 1.01), ref, t) > 1
        assert tolerances.used(base * (1 + signs * r * 0.99), ref, t) <= 1
    # an error of 10x the certified bound in one element is caught; one within it is not
    hit = out.exact.copy()
    hit[3] += 10 * out.bound[3]
    assert tolerances.used(hit, out.exact, out.bound) == pytest.approx(10)


def test_the_flash_rule_is_twice_torchs_error_plus_the_rounding_of_0_3(doc: dict) -> None:
    # FlashAttention's fwd_atol = 2 max|out_ref + 0.3 - 0.3 - out_ref| in the storage dtype
    assert tolerances.flash_atol(np.array([1.0]), F32.storage_format) == 2 * abs(
        float((np.float32(1.0) + np.float32(0.3)) - np.float32(0.3)) - 1.0
    )
    out = tolerances.Output("sdpa", "t", "output", np.array([1.0, 0.5]), np.array([1e-6, 1e-6]))
    assert tolerances.threshold("flash_2x", out, F32.storage_format) is None  # no torch output
    out.actual["torch"] = np.array([1.0 + 2**-23, 0.5])
    ref, t = tolerances.threshold("flash_2x", out, F32.storage_format)
    assert t[0] == 2 * 2**-23 + tolerances.flash_atol(out.exact, F32.storage_format)
    assert list(ref) == [1.0, 0.5]  # out_ref: the exact values in the storage dtype


def test_the_generated_rows_show_the_every_order_sums_share_of_the_bound(doc: dict) -> None:
    row = doc["rules"]["certified"]["by_group"]["sdpa L=16"]
    # gamma(n)|A||V| is part of the bound (the product's sum; the normaliser's is another), never all
    assert 0 < row["order_free_share"] < 0.5
    assert row["worst_error_in_u_abs_product"] < 16  # real rounding: far below n u per key
    assert "| certified bound (this suite) | 0 of 219 |" in tolerances.table(doc)


def test_at_bfloat16_the_certified_bound_raises_no_alarm_and_catches_3e_2_in_every_output() -> None:
    # the mixed tier plugs in by its name: torch's bfloat16 tolerances, issue 17's goal of 3e-2
    doc = tolerances.run("bfloat16/float32", impls=("reference",), lengths=())
    cert = doc["rules"]["certified"]
    assert doc["goal"]["relative_error"] == 3e-2
    assert cert["false_alarms"] == 0 and 0 < cert["worst_used"]["reference"] < 1
    assert (cert["caught_uniform"], cert["catalogue_outputs"]) == (72, 72)
