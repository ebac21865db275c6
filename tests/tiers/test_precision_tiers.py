"""The generated cases and the scale tier at float32 (issue 17, item 4; docs/precision.md).

What must hold:
- ``verify --random --precision float32``: a drawn case's inputs and real options are rounded to
  float32 and its truth certified under float32's rules; a draw whose values leave float32's range
  or whose rounding leaves the first-order regime is not applicable, with its reason, never judged;
  correct float32 implementations (the reference, torch) pass, and a 1e-2 relative error is caught
  with its error counted in float32's ulps;
- ``verify --tier scale --precision float32``: the every-row bounds at float32's constants are the
  arb bounds of the same rows under float32's rules up to their 8-bit rounding, and the tier passes
  the float32 reference.
Seconds in all: small draws, a small scale catalogue.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attention_ports import cli
from attention_ports.fixtures.precision import round_inputs
from attention_ports.runtimes import precision as in_precision
from attention_ports.runtimes.impl import Arrays
from attention_ports.spec.precision import FORMATS
from attention_ports.spec.strategies import Drawn
from attention_ports.tiers import random as generated
from attention_ports.tiers import scale
from attention_ports.truth import engine as truth
from attention_ports.truth import scale_bounds
from attention_ports.truth.precision import rules
from tests.tiers.test_scale import CASES, SMALL, _inputs

F32 = FORMATS["float32"]
SEED = 20261125


@pytest.mark.parametrize("name", ["reference", "torch"])
def test_generated_cases_at_float32_pass_for_the_float32_builtins(name: str) -> None:
    impl = in_precision.create(name, None, "float32")
    assert impl is not None
    with impl:
        run = generated.run_random(name, impl, 21, SEED, fmt=F32)
    detail = "" if run.failure is None else f"\n{run.failure.message()}\nreproduce: {run.command}"
    assert run.ok and run.examples == 21, run.summary() + detail
    assert run.command.endswith("--precision float32")
    assert run.precision == "float32" and " at float32, all pass" in run.summary()
    assert all(o.status == "pass" for r in run.results for o in r.outputs)
    # float32-sized errors, visible against float32's bounds (float64 errors would be ~1e-9 of them)
    worst = max(o.err_over_bound or 0.0 for r in run.results for o in r.outputs)
    assert 1e-3 < worst < 0.5


class _Off(in_precision.Float32Reference):
    """The float32 reference with every output 1% off: what a wrong float32 port looks like."""

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        return {k: v * (1 + 1e-2) for k, v in super().run(op, inputs, options).items()}


def test_a_one_percent_error_is_caught_at_float32_in_float32_ulps() -> None:
    ops = ["softmax", "scaled_dot_product_attention"]
    run = generated.run_random("off", _Off(), 6, SEED, operations=ops, fmt=F32)
    assert sorted(f.case.op for f in run.failures) == sorted(ops), run.summary()
    for failure in run.failures:
        assert failure.case.precision == "float32"
        assert "ulps of float32" in failure.message(), failure.message()


def test_a_draw_is_rounded_to_float32_and_certified_at_its_rules() -> None:
    x = np.array([[0.1, -1 / 3, 2.0**-30 + 1.0]])
    case = generated.make_case(Drawn("softmax", {"x": x}), F32)
    assert case.precision == "float32" and case.reason.endswith("rounded to float32")
    np.testing.assert_array_equal(case.inputs["x"], x.astype(np.float32).astype(np.float64))
    with rules(F32):
        expected = truth.compute("softmax", case.inputs, {})["y"]
    np.testing.assert_array_equal(case.expected["y"].bound, expected[1])
    # float32's bound: ~2^29 times float64's at the same inputs
    at64 = generated.make_case(Drawn("softmax", {"x": case.inputs["x"]}))
    assert np.all(case.expected["y"].bound > 2.0**20 * at64.expected["y"].bound)


@pytest.mark.parametrize(
    ("drawn", "reason"),
    [
        (Drawn("softmax", {"x": np.array([[1e39, 0.0]])}), "input x holds 1e+39, beyond float32's range"),
        (
            Drawn("scaled_dot_product_attention", {n: np.full((2, 2), 1e20) for n in "qkv"}),
            "beyond float32's range",
        ),
        (Drawn("softmax", {"x": np.array([[1e5, 1e5 - 1, 1e5 + 2]])}), "leaves the first-order regime"),
    ],
    ids=["input-range", "scores-range", "first-order-guard"],
)
def test_a_draw_float32_cannot_judge_is_not_applicable_with_its_reason(drawn: Drawn, reason: str) -> None:
    with pytest.raises(generated.NotApplicable, match=re.escape(reason)):
        generated.make_case(drawn, F32)
    if "first-order" in reason:
        generated.make_case(drawn)  # float64's rounding at these scores is first order: float64 judges it


def test_verify_random_at_float32_reports_the_precision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    argv = ["verify", "--random", "7", "--seed", str(SEED), "--impl", "reference", "--precision", "float32"]
    assert cli.main([*argv, "--json", str(out)]) == 0
    assert "reference: 7 generated cases at float32, all pass" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["meta"]["precision"] == "float32"
    assert doc["meta"]["random"]["runs"]["reference"]["precision"] == "float32"


# --- the scale tier --------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "kind"), CASES[:6], ids=[f"{op}-{'-'.join(k)}" for op, k in CASES[:6]])
def test_float32_every_row_bounds_equal_the_exact_ones_up_to_their_rounding(op: str, kind: dict) -> None:
    inputs, opts = _inputs(op, 24, 4, **kind, rng=np.random.default_rng(3))
    inputs = round_inputs(inputs, F32)
    rows = [0, 3, 11, 23]
    mine = scale_bounds.compute(op, inputs, opts, rows=rows, fmt=F32)
    with rules(F32):
        exact = truth.compute(op, inputs, opts, rows=rows)
    for name, bound in mine.full.items():
        expected = exact[name][1]
        got = bound if expected.shape == bound.shape else bound[rows]
        assert np.all(got >= expected) and np.all(got <= expected * (1 + 2.0**-7)), name
    w_est, w_bound = mine.weights
    assert np.all(w_bound >= exact["weights"][1]) and np.all(w_bound <= exact["weights"][1] * (1 + 2.0**-7))
    assert np.all(np.abs(w_est - exact["weights"][0]) <= exact["weights"][1])
    # float32's bounds, not float64's: the same inputs at float64 are ~2^29 tighter
    assert np.all(mine.full["output"] > 2.0**20 * scale_bounds.compute(op, inputs, opts).full["output"])


@pytest.fixture()
def small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    # the truth cache's folder through the environment: the pool processes that fill it read it there
    monkeypatch.setenv(scale.CACHE_ENV, str(tmp_path / "cache"))
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return path


def test_the_scale_tier_at_float32_passes_the_float32_builtins(small: Path) -> None:
    report = scale.run_tier(["reference", "torch"], catalogue=small, n_rows=6, workers=1, fmt=F32)
    assert report.precision == "float32" and scale.render(report).startswith("scale tier at float32")
    assert {(v.impl, v.status) for v in report.verdicts} == {("reference", "pass"), ("torch", "pass")}
    # float32-sized errors against float32's bounds (float64 errors would be ~1e-9 of them)
    assert 1e-3 < max(v.rows_over_bound for v in report.verdicts) < 0.5
    # float64's truth is cached apart: a float64 run computes its own, and passes float64's reference
    at64 = scale.run_tier(["reference"], catalogue=small, n_rows=6, workers=1)
    assert all(s > 0 for s in at64.truth_seconds.values())
    assert {v.status for v in at64.verdicts} == {"pass"}


def test_the_smallest_scale_case_at_float32_passes_the_float32_reference(small: Path) -> None:
    """scale_sdpa_L1024_causal (L = 1024, d = 64), 6 exact rows: ~2 s."""
    report = scale.run_tier(["reference"], case_globs=["scale_sdpa_L1024_causal"], n_rows=6, workers=1, fmt=F32)
    (verdict,) = report.verdicts
    assert verdict.status == "pass", verdict.messages
    assert 1e-4 < verdict.rows_over_bound < 0.5
