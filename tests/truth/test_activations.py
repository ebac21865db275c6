"""gelu's truth and bound rule (attention_ports/truth/activations.py) on the committed fixtures:
every correct formulation of the form asked for passes every case, the other form fails."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries, load_case
from attention_ports.judge.compare import compare
from attention_ports.truth import exact
from attention_ports.truth.exact import InputError

CASES = {e["id"]: load_case(REPO_FIXTURES, e) for e in iter_entries(REPO_FIXTURES) if e["op"] == "gelu"}
K = math.sqrt(2 / math.pi)
ERF = np.vectorize(math.erf, otypes=[np.float64])
ERFC = np.vectorize(math.erfc, otypes=[np.float64])


def _form(case) -> str:
    return case.options.get("approximate") or "none"


def _inner(x: np.ndarray) -> np.ndarray:
    return K * (x + 0.044715 * x**3)


FORMULATIONS = {
    "none": {
        "1 + erf": lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2))),
        "erfc": lambda x: 0.5 * x * ERFC(-x / math.sqrt(2)),
    },
    "tanh": {
        "1 + tanh": lambda x: 0.5 * x * (1 + np.tanh(_inner(x))),
        "sigmoid": lambda x: x / (1 + np.exp(np.minimum(-2 * _inner(x), 700))),
    },
}


def test_both_forms_have_cases() -> None:
    assert {_form(c) for c in CASES.values()} == {"none", "tanh"}


@pytest.mark.parametrize(("form", "name"), [(f, n) for f, fs in FORMULATIONS.items() for n in fs])
def test_every_correct_formulation_passes_every_case_of_its_form(form: str, name: str) -> None:
    for case_id, case in CASES.items():
        if _form(case) == form:
            exp = case.expected["y"]
            res = compare(exp.array, FORMULATIONS[form][name](case.inputs["x"]), exp.bound)
            assert res.ok, f"{name}: {res.describe(case_id, 'y')}"


def test_the_other_form_fails_every_case_away_from_zero() -> None:
    for case_id, case in CASES.items():
        if np.abs(case.inputs["x"]).max() < 0.1:
            continue  # tiny inputs: both forms are x / 2 to far below the bound
        other = "tanh" if _form(case) == "none" else "none"
        got = next(iter(FORMULATIONS[other].values()))(case.inputs["x"])
        assert not compare(case.expected["y"].array, got, case.expected["y"].bound).ok, case_id


def test_an_unknown_form_is_named() -> None:
    with pytest.raises(InputError, match="approximate must be one of 'none', 'tanh'"):
        exact.run_graph("gelu", {"x": np.ones((1, 1))}, {"approximate": "erf"}, prec=128, track=False)
