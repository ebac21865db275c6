"""R results are read strictly: duplicate names, NA for a number, integers or logicals for doubles."""

from __future__ import annotations

from tests.faults.conftest import SDPA, SOFTMAX, message, run_port


def test_a_result_with_a_name_twice_is_an_error_naming_it(r: str) -> None:
    # list(output = WRONG, weights = w, output = RIGHT) once passed: the last duplicate won
    got = run_port(r, "duplicate_names", [SOFTMAX, SDPA])
    assert got[SOFTMAX].status == "pass", message(got[SOFTMAX])
    assert got[SDPA].status == "error"
    assert "scaled_dot_product_attention: returned a list with duplicate names: 'output' (2 times)" in message(
        got[SDPA]
    )


def test_na_is_not_nan(r: str) -> None:
    got = run_port(r, "returns_na", [SOFTMAX, "softmax_fully_masked_row", SDPA])
    assert got[SOFTMAX].status == "pass"
    assert got["softmax_fully_masked_row"].status == "pass"  # NaN where the contract wants NaN
    assert got[SDPA].status == "error"
    assert "element 'weights' holds NA (R's missing value, which is not NaN) at [2, 1], 1-based" in message(got[SDPA])


def test_integer_and_logical_results_are_errors_naming_the_output(r: str) -> None:
    got = run_port(r, "wrong_types", [SOFTMAX, SDPA])
    assert got[SOFTMAX].status == "error"
    assert "softmax: output 'y' is an R integer vector; the contract wants doubles" in message(got[SOFTMAX])
    assert got[SDPA].status == "error"
    assert "output 'weights' is an R logical vector" in message(got[SDPA])
