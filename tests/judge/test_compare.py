"""The comparator's verdicts and its message: a contract users' CI logs depend on."""

from __future__ import annotations

import numpy as np

from attention_ports.judge.compare import compare, ulp_of
from attention_ports.runtimes.julia import adapter as julia_adapter
from attention_ports.spec import ops
from attention_ports.spec.ops import Role
from attention_ports.spec.portview import PortView
from attention_ports.spec.precision import FORMATS


def test_equal_arrays_pass_with_zero_error() -> None:
    a = np.arange(6.0).reshape(2, 3)
    c = compare(a, a.copy(), np.zeros_like(a))
    assert c.ok and c.mismatches == 0
    assert c.max_abs_err == c.max_rel_err == c.max_ulp_err == c.max_err_over_bound == 0


def test_rule_is_abs_error_within_each_elements_own_bound() -> None:
    e = np.array([1.0, 100.0])
    b = np.array([2.0**-40, 1e-10])
    assert compare(e, e + np.array([2.0**-40, 0]), b).ok  # exactly at the bound agrees
    assert not compare(e, e + np.array([2.0**-39, 0]), b).ok
    assert compare(e, e + np.array([0, 0.9e-10]), b).ok
    assert not compare(e, e + np.array([0, 2e-10]), b).ok
    # a zero bound demands the exact value
    assert compare(e, e.copy(), np.zeros(2)).ok
    assert not compare(e, np.nextafter(e, 200.0), np.zeros(2)).ok


def test_message_names_case_output_count_worst_element_bound_and_errors() -> None:
    expected = np.zeros((3, 4))
    expected[1, 2] = 2.0
    actual = expected.copy()
    actual[1, 2] = 2.5
    actual[0, 0] = 1e-9
    bound = np.full((3, 4), 1e-13)
    bound[1, 2] = 1e-12
    c = compare(expected, actual, bound)
    assert not c.ok and c.mismatches == 2
    lines = c.describe("sdpa_L2_d3", "weights").splitlines()
    assert lines[0] == "case 'sdpa_L2_d3', output 'weights': 2 of 12 elements (16.7%) differ beyond their error bounds"
    # Ranked by excess over each element's own bound: 0.5 / 1e-12 beats 1e-9 / 1e-13.
    assert lines[1] == (
        "  worst at [1, 2]: expected 2.0, actual 2.5, bound 1e-12 "
        "(abs err 0.5, rel err 0.25, 1.13e+15 ulps, 5e+11 x bound)"
    )
    # rel and ulps cover only elements the bound resolves, and the summary says how many (issue 19):
    # the zero-expected one has neither.
    assert lines[2] == (
        "  max abs err 0.5, max rel err 0.25, max 1.13e+15 ulps "
        "(rel and ulps over the 1 of 12 elements with |expected| > bound), worst 5e+11 x bound"
    )
    assert len(lines) == 3


def test_passing_message_reports_the_error_budget_used() -> None:
    e = np.array([1.0, 2.0])
    a = np.array([1.0 + 2**-52, 2.0])
    c = compare(e, a, np.array([1e-15, 1e-15]))
    assert c.ok
    assert c.max_ulp_err == 1.0 and c.max_rel_err == 2**-52
    assert c.max_err_over_bound == 2**-52 / 1e-15
    assert c.describe("c", "o") == (
        "case 'c', output 'o': all 2 elements agree within their error bounds "
        "(max abs err 2.22e-16, max rel err 2.22e-16, max 1 ulps (rel and ulps over all 2 elements), "
        "worst 0.222 x bound)"
    )


def test_worst_element_is_ranked_by_excess_over_its_bound() -> None:
    expected = np.array([1000.0, 0.0])
    actual = np.array([1000.0 + 1e-6, 1e-10])
    c = compare(expected, actual, np.array([1e-9, 1e-14]))
    # 1e-6 against 1e-9 (excess 1e3) vs 1e-10 against 1e-14 (excess 1e4): the second.
    assert c.worst_index == (1,)
    lines = c.describe("c", "o").splitlines()
    # Issue 19: the worst element's line said "rel err inf" over a summary whose max rel err skipped
    # it without saying so. Now neither gives the zero a relative error, and the summary says why.
    assert lines[1] == (
        "  worst at [1]: expected 0.0, actual 1e-10, bound 1e-14 "
        "(abs err 1e-10, no rel err or ulps: |expected| <= bound, 1e+04 x bound)"
    )
    assert lines[2] == (
        "  max abs err 1e-06, max rel err 1e-09, max 8.8e+06 ulps "
        "(rel and ulps over the 1 of 2 elements with |expected| > bound), worst 1e+04 x bound"
    )


def test_nan_matches_only_nan_at_the_same_position() -> None:
    e = np.array([[np.nan, 1.0], [0.5, np.nan]])
    z = np.zeros((2, 2))
    assert compare(e, e.copy(), z).ok
    a = np.array([[np.nan, np.nan], [0.5, 0.25]])
    c = compare(e, a, np.full((2, 2), 1e-12))
    assert not c.ok and c.mismatches == 2
    msg = c.describe("softmax_fully_masked_row", "y")
    assert "  NaN expected but not found at [1, 1]" in msg
    assert "  NaN found but not expected at [0, 1]" in msg


def test_infinities_must_match_exactly() -> None:
    e = np.array([-np.inf, 0.0])
    z = np.zeros(2)
    assert compare(e, e.copy(), z).ok
    assert not compare(e, np.array([-1e308, 0.0]), np.array([np.inf, 0.0])).ok
    assert not compare(np.array([1.0]), np.array([np.inf]), np.array([1e300])).ok


def test_shape_mismatch_is_reported_with_both_shapes() -> None:
    c = compare(np.zeros((4, 3)), np.zeros((3, 4)), np.zeros((4, 3)))
    assert not c.ok
    assert c.describe("case_x", "output") == (
        "case 'case_x', output 'output': shape mismatch: expected (4, 3), actual (3, 4): "
        "the transpose of the expected shape"
    )
    c3 = compare(np.zeros((2, 3, 4)), np.zeros((4, 3, 2)), np.zeros((2, 3, 4)))
    assert c3.describe("c", "o").endswith("actual (4, 3, 2): the expected axes in another order")
    assert compare(np.zeros(3), np.zeros(4), np.zeros(3)).describe("c", "o").endswith("expected (3,), actual (4,)")


def julia_view(name: str, role: Role) -> PortView:
    """A Julia port's view of an output, with the adapter's own layout rule."""
    return PortView("Julia", name, role, lambda ndim: julia_adapter._axes(role, ndim))


def test_julia_shape_mismatch_reads_in_julias_layout_and_says_transpose() -> None:
    # Issue 11: a Julia port returned a (7, 2) array where Julia's layout wants (2, 7); it used to
    # read "shape mismatch: expected (7, 2), actual (2, 7)", backwards to the port's author.
    expected = np.zeros((7, 2))  # reference layout: 7 softmax vectors of 2 entries
    returned = julia_adapter.from_julia(np.zeros((7, 2)), Role.ROWS)  # what the port handed back
    c = compare(expected, returned, np.zeros((7, 2)))
    assert c.describe("softmax_non_square_7x2", "y", julia_view("y", Role.ROWS)).splitlines() == [
        "case 'softmax_non_square_7x2', output 'y': shape mismatch: the port returned y as (7, 2); "
        "Julia's layout wants (2, 7) (entry x vector): the transpose of the expected shape",
        "  reference layout (NumPy): expected (7, 2), actual (2, 7)",
    ]


def test_julia_positions_are_1_based_in_julias_index_order_reference_second() -> None:
    # Issue 11: "worst at [2, 0]" meant Julia's weights[1, 3].
    expected = np.full((3, 2), 0.5)  # n_q = 3 queries, n_k = 2 keys
    actual = expected.copy()
    actual[2, 0] = 0.75
    c = compare(expected, actual, np.full((3, 2), 1e-16))
    lines = c.describe("sdpa", "weights", julia_view("weights", Role.SCORES)).splitlines()
    assert lines[1] == "  as the port sees it (Julia, 1-based): weights is (2, 3) (key x query)"
    assert lines[2].startswith("  worst at weights[1, 3]: expected 0.5, actual 0.75, bound 1e-16")
    assert lines[-1] == "  reference layout (NumPy, 0-based): shape (3, 2), worst at [2, 0]"


def test_logits_and_the_token_table_are_named_by_what_they_index_not_as_tokens() -> None:
    # Issue 18: gpt_forward's logits read "(12, 8) (feature x token)" in Julia, whose first axis
    # is the vocabulary; wte read "token x feature" for a table indexed by token id.
    logits_role, wte_role = ops.get("gpt_forward").role("logits"), ops.get("gpt_forward").role("params.wte")
    assert ops.get("lm_loss").role("logits") is logits_role
    assert julia_view("logits", logits_role).layout((8, 12)) == "(12, 8) (vocabulary entry x position)"
    assert PortView("R", "logits", logits_role).layout((8, 12)) == "8 x 12 (position x vocabulary entry)"
    assert julia_view("grads.wte", wte_role).layout((12, 16)) == "(16, 12) (feature x token id)"
    assert PortView("R", "grads$wte", wte_role).layout((12, 16)) == "12 x 16 (token id x feature)"
    # transposed like tokens: Julia's logits are vocab x n, the table d x vocab (as Flux's Embedding)
    logits = np.arange(96.0).reshape(8, 12)
    assert np.array_equal(julia_adapter.to_julia(logits, logits_role), logits.T)
    assert np.array_equal(julia_adapter.from_julia(logits.T, logits_role), logits)


def test_the_position_table_is_named_position_x_feature_not_as_tokens() -> None:
    # wpe read "token x feature" (Role.TOKENS) for a table indexed by position; in Julia it is
    # d x n_ctx, transposed like the token table.
    wpe_role = ops.get("gpt_grads").role("grads.wpe")
    assert ops.get("gpt_forward").role("params.wpe") is wpe_role
    assert julia_view("grads.wpe", wpe_role).layout((6, 16)) == "(16, 6) (feature x position)"
    assert PortView("R", "grads$wpe", wpe_role).layout((6, 16)) == "6 x 16 (position x feature)"
    expected = np.zeros((6, 16))
    actual = expected.copy()
    actual[4, 1] = 0.5
    lines = compare(expected, actual, np.full((6, 16), 1e-16)).describe(
        "gpt", "grads.wpe", julia_view("grads.wpe", wpe_role)
    )
    assert lines.splitlines()[1] == "  as the port sees it (Julia, 1-based): grads.wpe is (16, 6) (feature x position)"
    assert lines.splitlines()[2].startswith("  worst at grads.wpe[2, 5]: expected 0.0, actual 0.5")
    table = np.arange(96.0).reshape(6, 16)
    assert np.array_equal(julia_adapter.to_julia(table, wpe_role), table.T)
    assert np.array_equal(julia_adapter.from_julia(table.T, wpe_role), table)


def test_r_positions_are_1_based_and_nested_names_use_dollar() -> None:
    view = PortView("R", "grads$w_q", Role.WEIGHT)
    expected = np.zeros((2, 3))
    actual = expected.copy()
    actual[1, 2] = np.nan
    c = compare(expected, actual, np.zeros((2, 3)))
    lines = c.describe("clf", "grads.w_q", view).splitlines()
    assert lines[1] == "  as the port sees it (R, 1-based): grads$w_q is 2 x 3 (input feature x output feature)"
    assert lines[2] == "  worst at grads$w_q[2, 3]: expected 0.0, actual nan (NaN where a number is expected)"
    assert "  NaN found but not expected at grads$w_q[2, 3]" in lines


def test_a_nan_mismatch_never_summarises_as_infinite_abs_and_zero_rel_error() -> None:
    # Issue 11: NaN where numbers are expected summarised as "max abs err inf, max rel err 0".
    expected = np.array([[0.5, 0.5], [0.0, 0.0]])
    actual = np.array([[0.5, 0.5 + 2**-53], [np.nan, np.nan]])
    c = compare(expected, actual, np.full((2, 2), 1e-15))
    assert not c.ok and c.nonfinite_mismatches == 2 and c.max_err_over_bound == np.inf
    assert c.max_abs_err == 2**-53  # the finite elements' own error, not inf
    lines = c.describe("sdpa_fully_masked_row", "weights").splitlines()
    assert lines[1] == "  worst at [1, 0]: expected 0.0, actual nan (NaN where a number is expected)"
    assert lines[2] == (
        "  non-finite mismatches: 2 NaN where a number is expected; where both are finite: "
        "max abs err 1.11e-16, max rel err 2.22e-16, max 1 ulps "
        "(rel and ulps over the 2 of 4 elements with |expected| > bound), worst 0.111 x bound"
    )
    assert "max abs err inf" not in c.describe("c", "o")
    only_nan = compare(np.array([np.nan, 1.0]), np.array([0.0, np.inf]), np.zeros(2))
    assert only_nan.summary() == (
        "non-finite mismatches: 1 number(s) where NaN is expected, 1 infinity/number mismatch(es); "
        "where both are finite: none"
    )


def test_the_worst_shown_is_a_finite_mismatch_when_there_is_one() -> None:
    expected = np.array([1.0, 2.0, 3.0])
    actual = np.array([np.nan, 2.5, 3.0])
    c = compare(expected, actual, np.full(3, 1e-15))
    assert c.worst_index == (1,)
    assert "  NaN found but not expected at [0]" in c.describe("c", "o")


def test_many_nan_positions_are_elided() -> None:
    e = np.full(8, np.nan)
    c = compare(e, np.zeros(8), np.zeros(8))
    assert "NaN expected but not found at [0], [1], [2], [3], [4] and 3 more" in c.describe("c", "o")


def test_rel_and_ulp_errors_cover_only_elements_the_bound_resolves() -> None:
    # A gradient that is zero by symmetry (or nearly, by cancellation) carries only rounding noise:
    # its bound judges it, and it must not turn the reported relative error into inf or 1e300 ulps.
    expected = np.array([0.0, 1e-18, 2.0])
    actual = np.array([3e-17, 5e-18, np.nextafter(2.0, 3.0)])  # one ulp above 2: 4.44e-16
    c = compare(expected, actual, np.array([1e-13, 1e-13, 1e-15]))
    assert c.ok
    assert c.max_abs_err == 2**-51 and c.max_rel_err == 2**-52 and c.max_ulp_err == 1.0
    assert np.isclose(c.max_err_over_bound, 2**-51 / 1e-15)
    assert c.resolved == 1
    assert "(rel and ulps over the 1 of 3 elements with |expected| > bound)" in c.summary()
    none = compare(np.zeros(2), np.array([1e-10, 0.0]), np.full(2, 1e-14))
    assert none.summary() == (
        "max abs err 1e-10, no rel err or ulps (no expected value exceeds its bound), worst 1e+04 x bound"
    )


def test_minus_zero_equals_zero() -> None:
    assert compare(np.array([0.0]), np.array([-0.0]), np.array([0.0])).ok


def test_judged_at_float32_errors_are_counted_in_float32s_ulps() -> None:
    # issue 17 item 5: a tier's messages speak the declared format's units; float64's are unchanged
    f32 = FORMATS["float32"]
    expected, actual = np.array([1.0, 3.0]), np.array([1.0 + 3 * 2.0**-23, 3.0])
    c = compare(expected, actual, np.array([2.0**-23, 1e-7]), f32)
    assert c.max_ulp_err == 3.0 and c.ulp_format == "float32"
    text = c.describe("c", "o")
    assert "(abs err 3.58e-07, rel err 3.58e-07, 3 ulps of float32, 3 x bound)" in text
    assert "max 3 ulps of float32 (rel and ulps over all 2 elements)" in text
    assert compare(expected, actual, np.array([2.0**-23, 1e-7])).max_ulp_err == 3 * 2.0**29  # float64's
    # below the smallest normal, the smallest normal's spacing (Format.ulps)
    assert ulp_of(np.array([1e-40]), f32)[0] == 2.0**-149 == 1 / f32.ulps(1.0, 1e-40)


def test_judged_at_a_mixed_tier_errors_are_counted_in_the_storage_formats_ulps() -> None:
    # a bfloat16/float32 port's results are bfloat16 numbers: 2^-7 apart at 1, so 2^-6 is 2 ulps
    mixed = FORMATS["bfloat16/float32"]
    c = compare(np.array([1.0]), np.array([1.0 + 2.0**-6]), np.array([2.0**-8]), mixed)
    assert c.max_ulp_err == 2.0 and "2 ulps of bfloat16" in c.describe("c", "o")
    assert ulp_of(np.array([1.0, 65504.0]), FORMATS["float16/float32"]).tolist() == [2.0**-10, 32.0]
