"""The built-in implementations run in float32 (attention_ports/runtimes/precision.py, issue 17):
each passes every applicable case of the float32 tier with float32-sized errors, and our Julia port
run in float32 but judged at float64 fails with the precision diagnosis, never a logic bug's (and
says whether a certified float32 bound or a measurement backs it, issue 26)."""

from __future__ import annotations

import numpy as np
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
    # every op's applicable catalogue cases and the tier's 4 own (fixtures/edges-float32.toml)
    assert len(results) == len(fixtures.read_manifest(TIER)["cases"]) == 168 + 4
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
    # Measured (issue 26's rule, judge/diagnose.py, _check_precision): 821 of 824 failing outputs of
    # 191 cases get the precision line, and no logic bug is named anywhere (issue 17's rule: 784).
    # 550 are on cases the float32 tier certifies, whose float32 judgement the port's numbers pass
    # (every one of them); the other 271 (gpt_train, not in the tier; the cases the tier leaves out)
    # get the line that says it measured: the port errs as much as the NumPy reference run in
    # float32, within 16x either way (0.14x to 10x here). Not named: ln_cancellation_eps0, whose
    # float32 error is value-sized (past 2^-8 of the output: past float32's first-order regime, and
    # left out of the tier); gelu_erf_tails, whose error is 20x the float32 reference's (the port's
    # Float32 erf is not NumPy's): past the factor, so no claim; lm_n1_argmax_1e3, whose one value
    # fits in 16 bits (nothing there tells float32 apart: judge/diagnose.py, _float32_values).
    assert len(results) == 191 and len([r for r in results if r.status == "fail"]) >= 104
    assert len(named) >= 0.95 * len(failed), (len(named), len(failed))
    certified = "every error is within float32's rounding: the port's numbers pass this case's float32 judgement"
    measured = "the errors are the size of float32's rounding: the NumPy reference run in float32 errs as much here"
    assert all(o.diagnosis.startswith((certified, measured)) for o in named)
    assert all('precision = "float32"' in o.diagnosis for o in named)
    ops = {r.case: r.op for r in results}
    trained = [o for o in named if ops[o.case] == "gpt_train"]
    assert trained and all(o.diagnosis.startswith(measured) for o in trained)  # no float32 bound there
    assert sum(o.diagnosis.startswith(certified) for o in named) >= 0.6 * len(named)


# --- the mixed tiers and float16 (issue 17) ---------------------------------------------------

LOWER = {
    ("reference", "bfloat16/float32"): 98,
    ("torch", "bfloat16/float32"): 98,
    ("reference", "float16/float32"): 98,
    ("torch", "float16/float32"): 98,
    ("torch", "float16"): 63,
    ("julia", "float16"): 63,  # our port in Float16: Julia rounds every operation to float16
}


@pytest.mark.parametrize(("name", "fmt"), list(LOWER), ids=[f"{n}-{f}" for n, f in LOWER])
def test_the_built_ins_pass_every_applicable_case_of_the_mixed_and_float16_tiers(name: str, fmt: str) -> None:
    tier = fixtures_dir(fmt)
    impl = precision_impls.create(name, None, fmt)
    try:
        results = runner.run_suite(tier, [name], live={name: impl})
    finally:
        impl.close()
    assert len(results) == len(fixtures.read_manifest(tier)["cases"]) == LOWER[name, fmt]
    assert [(r.case, r.status) for r in results if r.status != "pass"] == []
    worst = max(o.err_over_bound for r in results for o in r.outputs if o.err_over_bound is not None)
    # storage-sized errors, visible against the bound: the mixed tiers' worst is the outputs'
    # own rounding to storage (measured 0.48-0.49 of the bound: u_s |y| of 2 u_s |y| + ...)
    assert (0.4 if fmt != "float16" else 1e-2) < worst < 1


def test_a_flash_style_reference_needs_the_weights_rounding_point() -> None:
    """The reference at a mixed tier rounds the weights to storage before the product with V (as
    flash kernels do); without that rounding point in the bound (bounds.py, "Mixed precision") it
    fails, e.g. sdpa_key_padding's output by 21x in bfloat16: the point is not decoration."""
    impl = precision_impls.create("reference", None, "bfloat16/float32")
    case = next(
        e for e in fixtures.read_manifest(fixtures_dir("bfloat16/float32"))["cases"] if e["id"] == "sdpa_key_padding"
    )
    loaded = fixtures.load_case(fixtures_dir("bfloat16/float32"), case)
    out = impl.run(case["op"], loaded.inputs, case["options"])["output"]
    exp = loaded.expected["output"]
    assert np.all(np.abs(out - exp.array) <= exp.bound)
    # the output's own rounding alone (2 u_s |y|) does not hold it
    assert np.any(np.abs(out - exp.array) > 2 * 2.0**-8 * np.abs(exp.array) + 2.0**-17 * np.abs(exp.array))


def test_torch_rope_in_bfloat16_needs_the_tables_and_products_rounding_points() -> None:
    """torch's halves rotation as Hugging Face's Llama writes it (cos and sin cast to bfloat16, each
    product a bfloat16 tensor op) stores the tables and the products, the rotary rule's declared
    rounding points at a storage tier (truth/positions.py): it passes with them and errs past what
    the output's own rounding (2 u_s |y|) and float32 arithmetic allow."""
    impl = precision_impls.create("torch", None, "bfloat16/float32")
    tier = fixtures_dir("bfloat16/float32")
    case = next(e for e in fixtures.read_manifest(tier)["cases"] if e["id"] == "rope_halves_far_d64")
    loaded = fixtures.load_case(tier, case)
    out = impl.run(case["op"], loaded.inputs, case["options"])["output"]
    exp = loaded.expected["output"]
    assert np.all(np.abs(out - exp.array) <= exp.bound)
    assert np.any(np.abs(out - exp.array) > 2 * 2.0**-8 * np.abs(exp.array) + 2.0**-17 * np.abs(exp.array).max())
