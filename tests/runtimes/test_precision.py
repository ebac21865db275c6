"""The built-in implementations run in float32 (attention_ports/runtimes/precision.py, issue 17):
each passes every applicable case of the float32 tier with float32-sized errors, and our Julia port
run in float32 but judged at float64 fails with the precision diagnosis, never a logic bug's."""

from __future__ import annotations

import pytest

from attention_ports.core import paths
from attention_ports.fixtures import store as fixtures
from attention_ports.judge import runner
from attention_ports.runtimes import precision as precision_impls
from attention_ports.spec.precision import fixtures_dir

TIER = fixtures_dir("float32")


@pytest.mark.parametrize("name", ["reference", "torch", "julia"])
def test_the_built_ins_in_float32_pass_every_applicable_float32_case(name: str) -> None:
    impl = precision_impls.create(name, None, "float32")
    try:
        results = runner.run_suite(TIER, [name], live={name: impl})
    finally:
        impl.close()
    assert len(results) == len(fixtures.read_manifest(TIER)["cases"]) == 107  # every op's applicable cases
    assert [(r.case, r.status) for r in results if r.status != "pass"] == []
    worst = max(o.err_over_bound for r in results for o in r.outputs if o.err_over_bound is not None)
    assert 1e-4 < worst < 1  # float32-sized errors, visible against the bound (not float64's)


def test_our_julia_port_in_float32_fails_at_float64_with_the_precision_diagnosis() -> None:
    impl = precision_impls.create("julia", None, "float32")
    try:
        results = runner.run_suite(paths.FIXTURES, ["julia"], live={"julia": impl})
    finally:
        impl.close()
    failed = [o for r in results for o in r.outputs if o.status == "fail"]
    named = [o for o in failed if o.diagnosis]
    # Measured (this machine's default BLAS kernel): softmax and SDPA fail 39 of 43 cases, 56 of
    # their 65 failing outputs get the precision line (55 under OPENBLAS_CORETYPE=Sandybridge: Julia's
    # Float32 products round differently there); the other five operations fail 59 of 60 cases,
    # 390 of 410 failing outputs named. No logic bug is named anywhere. The unnamed ones are at
    # scores of 1e2-1e4 (large logits, underflow): there the port's own rounding of the float64
    # inputs to float32 moves the logits by u32 |S|, which no float64 bound scaled to float32
    # contains (judge/diagnose.py, _float32_sized). So: most, on every kernel. The position
    # operations fail 9 of 12 cases, every output named (the sinusoidal tables at the default base
    # pass: with no array input the port computes them in Float64).
    assert len(results) == 115 and len([r for r in results if r.status == "fail"]) >= 104
    assert len(named) >= 0.8 * len(failed), (len(named), len(failed))
    assert all(o.diagnosis.startswith("every error is within float32's rounding") for o in named)
    assert all('precision = "float32"' in o.diagnosis for o in named)
