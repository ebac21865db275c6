"""The stored error bounds against the issue's requirements, on every committed fixture output.

(a) every correct implementation passes every case: ``test_cases.py`` (every implementation) and
    ``test_truth_bytes.py`` (the reference under other BLAS kernels);
(b) a 1e-9 relative error in any output of a non-degenerate case fails at least one element;
(c) a 1e-14 relative error passes every element, exactly representable results included.
"""

from __future__ import annotations

import numpy as np
import pytest

from attention_ports.compare import compare
from attention_ports.fixtures import REPO_FIXTURES, iter_entries, load_case

CASES = {e["id"]: e for e in iter_entries(REPO_FIXTURES)}


def outputs():
    for case_id, entry in CASES.items():
        case = load_case(REPO_FIXTURES, entry)
        for name, exp in case.expected.items():
            yield case_id, name, exp


ALL = list(outputs())


def test_every_output_has_a_finite_non_negative_bound_of_its_shape() -> None:
    for case_id, name, exp in ALL:
        assert exp.bound.shape == exp.array.shape and exp.bound.dtype == np.float64, (case_id, name)
        assert np.all(np.isfinite(exp.bound)) and np.all(exp.bound >= 0), (case_id, name)
        finite = np.isfinite(exp.array)
        assert np.all(exp.bound[~finite] == 0), (case_id, name)  # NaN and inf match only themselves
        assert np.all(exp.bound[finite] > 0), (case_id, name)  # zero is never demanded exactly


def test_a_1e_minus_9_relative_error_fails_every_non_degenerate_output() -> None:
    checked = 0
    for case_id, name, exp in ALL:
        if not np.any(np.isfinite(exp.array) & (exp.array != 0)):
            continue  # degenerate: all zero or NaN (a zero gradient, a fully masked row)
        res = compare(exp.array, exp.array * (1 + 1e-9), exp.bound)
        assert not res.ok, f"{case_id}.{name}: a 1e-9 relative error passes every element"
        checked += 1
    assert checked > 250


def test_a_1e_minus_14_relative_error_passes_every_element() -> None:
    for case_id, name, exp in ALL:
        for sign in (1, -1):
            res = compare(exp.array, exp.array * (1 + sign * 1e-14), exp.bound)
            assert res.ok, f"{case_id}.{name}: {res.describe(case_id, name)}"


@pytest.mark.parametrize(("case", "name", "floor"), [("softmax_large_logits", "y", 1e-13)])
def test_large_scores_get_the_bound_every_correct_softmax_needs(case: str, name: str, floor: float) -> None:
    # Scores of 1e3: the shift s - max has a rounding of u|s - max| that exp turns into a relative
    # error of the weight. The bound's u|t| term is what lets correct implementations pass here.
    exp = load_case(REPO_FIXTURES, CASES[case]).expected[name]
    resolved = exp.array > 1e-300
    assert np.max(exp.bound[resolved] / exp.array[resolved]) > floor
