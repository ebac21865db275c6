"""lm_loss's truth and bound rule (attention_ports/truth/losses.py) on the committed fixtures: the
values are the mpmath result correctly rounded, every correct formulation of the loss passes
every case, the porting bugs fail the cases meant to catch them, and the rule follows the unit
roundoff it is given."""

from __future__ import annotations

import math
from collections.abc import Callable

import mpmath
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries, load_case
from attention_ports.judge.compare import compare
from attention_ports.spec import ops
from attention_ports.spec.precision import FORMATS
from attention_ports.truth import engine, exact, precision
from attention_ports.truth.exact import InputError

CASES = {e["id"]: load_case(REPO_FIXTURES, e) for e in iter_entries(REPO_FIXTURES) if e["op"] == "lm_loss"}
Loss = Callable[[np.ndarray, np.ndarray], float]  # (logits of the counted positions, their targets)


def _counted(case) -> tuple[np.ndarray, np.ndarray, int]:
    """The counted positions' logits and targets, and the number of positions."""
    z, t = case.inputs["logits"], case.inputs["targets"]
    keep = t != case.inputs["ignore_index"] if "ignore_index" in case.inputs else np.ones(t.shape, bool)
    return z[keep], t[keep], len(t)


def _rows(z: np.ndarray, t: np.ndarray) -> np.ndarray:
    return np.arange(len(t)), t


def max_lse(z, t):  # logsumexp with the row maximum subtracted, minus the target's logit; sum / count
    m = z.max(axis=1)
    return (m + np.log(np.exp(z - m[:, None]).sum(axis=1)) - z[_rows(z, t)]).sum() / len(t)


def log_softmax_gather(z, t):  # torch's formulation by hand: a log-softmax, then the targets' entries
    s = z - z.max(axis=1, keepdims=True)
    return -np.mean((s - np.log(np.exp(s).sum(axis=1, keepdims=True)))[_rows(z, t)])


def running_mean(z, t):  # one position at a time, m += (L - m) / k
    mean = math.nan
    for k, (row, y) in enumerate(zip(z, t, strict=True), start=1):
        peak = row.max()
        loss = peak + math.log(math.fsum(np.exp(row - peak))) - row[y]
        mean = loss if k == 1 else mean + (loss - mean) / k
    return mean


def torch_cross_entropy(z, t):
    return F.cross_entropy(torch.from_numpy(z), torch.from_numpy(t)).item()


CORRECT: tuple[Loss, ...] = (max_lse, log_softmax_gather, running_mean, torch_cross_entropy)


def _judge(case, fn: Loss, *, denominator: Callable[[int, int], int] | None = None) -> bool:
    z, t, n = _counted(case)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        got = fn(z, t) if len(t) else math.nan
        if denominator is not None:
            got = got * len(t) / denominator(len(t), n) if len(t) else 0.0
    exp = case.expected["loss"]
    return compare(exp.array, np.asarray(got, dtype=np.float64), exp.bound).ok


def _mp_loss(case) -> mpmath.mpf:
    z, t, _ = _counted(case)
    if not len(t):
        return mpmath.nan
    with mpmath.workdps(60):
        losses = [
            mpmath.log(mpmath.fsum(mpmath.exp(mpmath.mpf(float(v))) for v in row)) - mpmath.mpf(float(row[y]))
            for row, y in zip(z, t, strict=True)
        ]
        return mpmath.fsum(losses) / len(losses)


def test_the_fixtures_hold_the_loss_family() -> None:
    assert {op for op, spec in ops.OPS.items() if spec.family == "loss"} == {"lm_loss"}
    assert len(CASES) >= 5


def test_the_values_are_the_mpmath_result_correctly_rounded() -> None:
    for case_id, case in CASES.items():
        exact_value = _mp_loss(case)
        stored = float(case.expected["loss"].array)
        if mpmath.isnan(exact_value):
            assert math.isnan(stored), case_id
            continue
        with mpmath.workdps(60):  # the nearest double: within half an ulp of the 60-digit value
            assert abs(mpmath.mpf(stored) - exact_value) <= mpmath.mpf(math.ulp(stored)) / 2, case_id


@pytest.mark.parametrize("formulation", CORRECT, ids=lambda f: f.__name__)
def test_every_correct_formulation_passes_every_case(formulation: Loss) -> None:
    for case_id, case in CASES.items():
        assert _judge(case, formulation), f"{formulation.__name__} fails {case_id}"


def _failing(fn: Loss, **kw) -> set[str]:
    return {case_id for case_id, case in CASES.items() if not _judge(case, fn, **kw)}


def test_an_unstable_exp_fails_exactly_the_cases_beyond_exp_s_range() -> None:
    def naive(z, t):
        return (np.log(np.exp(z).sum(axis=1)) - z[_rows(z, t)]).mean()

    assert _failing(naive) == {
        "lm_logits_1e3_unlikely",
        "lm_logits_minus1e3_ignored",
        "lm_n1_argmax_1e3",
        "lm_unlikely_underflow",
    }


def test_minus_log_of_the_probability_fails_where_the_target_s_probability_underflows() -> None:
    def through_probs(z, t):
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return -np.log((e / e.sum(axis=1, keepdims=True))[_rows(z, t)]).mean()

    assert _failing(through_probs) == {"lm_logits_1e3_unlikely", "lm_unlikely_underflow"}


def test_the_mean_s_denominator_bugs_fail() -> None:
    # the sum instead of the mean: every case counting two positions or more, or none (0, not NaN)
    assert _failing(max_lse, denominator=lambda c, n: 1) == {
        case_id for case_id, case in CASES.items() if len(_counted(case)[1]) != 1
    }
    # ignored positions in the denominator: the cases with an ignored position (NaN becomes 0)
    assert _failing(max_lse, denominator=lambda c, n: n) == {
        "lm_padding_id0_ignored",
        "lm_logits_minus1e3_ignored",
        "lm_n1_all_ignored",
    }


def test_a_float32_loss_fails_every_case_with_a_finite_loss_above_its_resolution() -> None:
    def float32(z, t):
        return float(max_lse(z.astype(np.float32), t))

    assert _failing(float32) >= {"lm_random_n8", "lm_padding_id0_ignored", "lm_logits_1e3_unlikely"}


def test_the_bound_follows_the_unit_roundoff_read_at_call_time() -> None:
    inputs = {"logits": np.array([[1000.0, 998.5, 990.0], [0.25, -3.0, 2.0]]), "targets": np.array([1, 2])}

    def bound() -> float:
        out = exact.run_graph("lm_loss", inputs, {}, prec=engine.BOUND_PREC, track=True)["loss"]
        return float(out.t.e.entries()[0].upper())

    base = bound()
    with precision.rules(FORMATS["float32"]):  # the float32 tier's constants, u = 2^-24 among them
        wide = bound()
    assert 2.0**-53 * 1000 < base < 2.0**-53 * 1e5  # lse rounds at |lse| ~ 1000: charged, not more
    assert wide > 1e8 * base


def test_bad_inputs_are_named() -> None:
    z = np.zeros((2, 3))
    with pytest.raises(InputError, match=r"targets\[1\] = 3 is neither a token id in \[0, 2\] nor ignore_index"):
        exact.run_graph("lm_loss", {"logits": z, "targets": np.array([0, 3])}, {}, prec=128, track=False)
    with pytest.raises(InputError, match="targets must be a vector of n = 2 token ids"):
        exact.run_graph("lm_loss", {"logits": z, "targets": np.array([0, 1, 2])}, {}, prec=128, track=False)
    with pytest.raises(InputError, match="ignore_index must be one integer"):
        inputs = {"logits": z, "targets": np.array([0, 1]), "ignore_index": np.array(0.5)}
        exact.run_graph("lm_loss", inputs, {}, prec=128, track=False)
