"""The comparator's verdicts and its message: a contract users' CI logs depend on."""

from __future__ import annotations

import numpy as np

from attention_ports.compare import compare


def test_equal_arrays_pass_with_zero_error() -> None:
    a = np.arange(6.0).reshape(2, 3)
    c = compare(a, a.copy(), rtol=1e-12, atol=0)
    assert c.ok and c.mismatches == 0 and c.max_abs_err == 0 and c.max_rel_err == 0


def test_rule_is_atol_plus_rtol_times_expected() -> None:
    e = np.array([1.0, 100.0])
    assert compare(e, e + np.array([1.5e-12, 0]), rtol=1e-12, atol=1e-12).ok  # 1.5e-12 <= 1e-12 + 1e-12
    assert not compare(e, e + np.array([2.5e-12, 0]), rtol=1e-12, atol=1e-12).ok
    assert compare(e, e + np.array([0, 0.9e-10]), rtol=1e-12, atol=0).ok  # 0.9e-10 <= 1e-12 * 100
    assert not compare(e, e + np.array([0, 1e-9]), rtol=1e-12, atol=0).ok


def test_message_names_case_output_count_worst_element_and_errors() -> None:
    expected = np.zeros((3, 4))
    expected[1, 2] = 2.0
    actual = expected.copy()
    actual[1, 2] = 2.5
    actual[0, 0] = 1e-9
    c = compare(expected, actual, rtol=1e-12, atol=1e-13)
    assert not c.ok and c.mismatches == 2
    msg = c.describe("sdpa_L2_d3", "weights")
    lines = msg.splitlines()
    assert (
        lines[0] == "case 'sdpa_L2_d3', output 'weights': 2 of 12 elements (16.7%) differ beyond rtol=1e-12, atol=1e-13"
    )
    # Ranked by excess over each element's own bound: 0.5 / 2.1e-12 beats 1e-9 / 1e-13.
    assert lines[1] == "  worst at [1, 2]: expected 2.0, actual 2.5 (abs err 0.5, rel err 0.25)"
    assert lines[2] == "  max abs err 0.5, max rel err 0.25"  # the zero-expected element is not relative


def test_worst_element_is_ranked_by_excess_over_its_bound() -> None:
    expected = np.array([1000.0, 0.0])
    actual = np.array([1000.0 + 1e-6, 1e-10])
    c = compare(expected, actual, rtol=1e-12, atol=1e-14)
    # 1e-6 against a bound of ~1e-9 (excess 1e3) vs 1e-10 against 1e-14 (excess 1e4): the second.
    assert c.worst_index == (1,)
    assert "worst at [1]: expected 0.0, actual 1e-10 (abs err 1e-10, rel err inf)" in c.describe("c", "o")


def test_nan_matches_only_nan_at_the_same_position() -> None:
    e = np.array([[np.nan, 1.0], [0.5, np.nan]])
    assert compare(e, e.copy(), rtol=0, atol=0).ok
    a = np.array([[np.nan, np.nan], [0.5, 0.25]])
    c = compare(e, a, rtol=1e-12, atol=0)
    assert not c.ok and c.mismatches == 2
    msg = c.describe("softmax_fully_masked_row", "y")
    assert "  NaN expected but not found at [1, 1]" in msg
    assert "  NaN found but not expected at [0, 1]" in msg


def test_infinities_must_match_exactly() -> None:
    e = np.array([-np.inf, 0.0])
    assert compare(e, e.copy(), rtol=1e-12, atol=0).ok
    assert not compare(e, np.array([-1e308, 0.0]), rtol=1e-12, atol=0).ok


def test_shape_mismatch_is_reported_with_both_shapes() -> None:
    c = compare(np.zeros((4, 3)), np.zeros((3, 4)), rtol=1e-12, atol=0)
    assert not c.ok
    assert (
        c.describe("case_x", "output")
        == "case 'case_x', output 'output': shape mismatch: expected (4, 3), actual (3, 4)"
    )


def test_many_nan_positions_are_elided() -> None:
    e = np.full(8, np.nan)
    c = compare(e, np.zeros(8), rtol=0, atol=0)
    assert "NaN expected but not found at [0], [1], [2], [3], [4] and 3 more" in c.describe("c", "o")


def test_max_rel_err_ignores_elements_governed_by_atol() -> None:
    # A gradient that is zero by symmetry carries only rounding noise: atol judges it, and it must
    # not turn the reported relative error into inf.
    expected = np.array([0.0, 1e-18, 2.0])
    actual = np.array([3e-17, 5e-18, np.nextafter(2.0, 3.0)])  # one ulp above 2: 4.44e-16
    c = compare(expected, actual, rtol=1e-12, atol=1e-13)
    assert c.ok
    assert c.max_abs_err == 2**-51 and c.max_rel_err == 2**-52
