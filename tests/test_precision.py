"""The float32 tier (issue 17, first slice): the format table, the declaration, the fixtures,
the built-ins and our Julia port judged in float32, the catch power, and the precision diagnosis."""

from __future__ import annotations

import math

import numpy as np
import pytest

from attention_ports import declaration, fixtures, paths, precision, precision_impls, runner
from attention_ports.catalogue import load_catalogue

F32 = precision.FORMATS["float32"]
TIER = precision.fixtures_dir("float32")


def test_the_float32_constants_are_the_formats_own() -> None:
    assert F32.u == np.finfo(np.float32).eps / 2
    assert F32.max_finite == float(np.finfo(np.float32).max)
    assert 88.7 < F32.exp_overflow < 88.8
    assert math.exp(-F32.negligible_logit) < 2.0**-150  # below half the smallest subnormal


@pytest.mark.parametrize("mixed", precision.MIXED)
def test_a_mixed_precision_declaration_is_not_yet_supported(mixed: str) -> None:
    with pytest.raises(declaration.DeclarationError, match=r"port.jl: attention_ports.precision = .*not yet supported"):
        declaration.parse({"precision": mixed}, "port.jl", "julia")


def test_a_precision_is_declared_or_rejected_by_field() -> None:
    assert declaration.parse({"precision": "float32"}, "p.jl", "julia").precision == "float32"
    assert declaration.parse({}, "p.jl", "julia").precision == "float64"
    with pytest.raises(declaration.DeclarationError, match=r"attention_ports\.precision = 'half' is not a precision"):
        declaration.parse({"precision": "half"}, "p.jl", "julia")
    with pytest.raises(
        declaration.DeclarationError, match=r"p.R: attention_ports\$precision = 'float32': R computes in double only"
    ):
        declaration.parse({"precision": "float32"}, "p.R", "r")


def test_the_tiers_inputs_are_float32_values_and_its_rules_give_float32_sized_bounds() -> None:
    manifest = fixtures.read_manifest(TIER)
    assert manifest["truth"]["precision"] == "float32" and manifest["truth"]["bounds"]["u"] == "2^-24"
    main = {e["id"]: e for e in fixtures.iter_entries(paths.FIXTURES)}
    for entry in manifest["cases"]:
        case = fixtures.load_case(TIER, entry)
        for name, arr in case.inputs.items():
            if arr.dtype == np.float64:
                assert np.array_equal(arr.astype(np.float32).astype(np.float64), arr, equal_nan=True), name
        ours = fixtures.load_case(paths.FIXTURES, main[entry["id"]])
        for name, exp in case.expected.items():
            fin = np.isfinite(exp.array) & (np.abs(exp.array) > 1e-3)
            if fin.any():  # the float32 bound is ~2^29 times the float64 one, never smaller
                assert np.all(exp.bound[fin] > 2**20 * ours.expected[name].bound[fin]), (entry["id"], name)


def test_a_case_beyond_float32s_range_is_not_applicable_with_its_reason() -> None:
    spec = next(s for s in load_catalogue(paths.FIXTURES / "catalogue.toml").cases if s.op == "softmax")
    reason = precision.not_applicable(spec, {"x": np.array([[1e39, 0.0]])}, F32)
    assert reason == "input x holds 1e+39, beyond float32's range (3.4e+38)"
    assert precision.not_applicable(spec, {"x": np.array([[1e3, 0.0]])}, F32) == ""


def test_the_float32_tier_generates_byte_identically() -> None:
    # check-fixtures' gate for the tier: a fresh generation equals the committed bytes
    assert precision.check(F32) == []


@pytest.mark.parametrize("name", ["reference", "torch", "julia"])
def test_the_built_ins_in_float32_pass_every_applicable_float32_case(name: str) -> None:
    impl = precision_impls.create(name, None, "float32")
    try:
        results = runner.run_suite(TIER, [name], live={name: impl})
    finally:
        impl.close()
    assert len(results) == len(fixtures.read_manifest(TIER)["cases"]) == 43
    assert [(r.case, r.status) for r in results if r.status != "pass"] == []
    worst = max(o.err_over_bound for r in results for o in r.outputs if o.err_over_bound is not None)
    assert 1e-4 < worst < 1  # float32-sized errors, visible against the bound (not float64's)


def test_our_julia_port_in_float32_fails_at_float64_with_the_precision_diagnosis() -> None:
    impl = precision_impls.create("julia", None, "float32")
    ids = [e["id"] for e in fixtures.iter_entries(paths.FIXTURES) if e["op"] in precision.TIER_OPS]
    try:
        results = runner.run_suite(paths.FIXTURES, ["julia"], case_globs=ids, live={"julia": impl})
    finally:
        impl.close()
    failed = [o for r in results for o in r.outputs if o.status == "fail"]
    named = [o for o in failed if o.diagnosis]
    assert len([r for r in results if r.status == "fail"]) == 39 and len(failed) == 65
    # No logic bug is named anywhere. The 9 outputs without a line are at scores of 1e2-1e4 (large
    # logits, underflow): there the port's own rounding of the float64 inputs to float32 moves the
    # logits by u32 |S|, which no float64 bound scaled to float32 contains (precision.float32_sized).
    assert len(named) == 56
    assert all(o.diagnosis.startswith("every error is within float32's rounding") for o in named)
    assert all('precision = "float32"' in o.diagnosis for o in named)


def test_a_1e_4_relative_error_is_caught_in_most_of_the_tiers_outputs() -> None:
    """Measured: 56 of 72 non-degenerate outputs (77.8%); issue 17's goal is 95%. The misses are
    outputs whose sound float32 bound exceeds 1e-4 relative: scores of 1e3-1e4 (a float32
    implementation's weights really are off by ~C_IN u |S| ~ 1e-4 there) and sdpa_L256_d64's output
    (gamma(256) |A||V| against a cancelling mean: the n u growth of an every-order bound)."""
    caught = total = 0
    for entry in fixtures.read_manifest(TIER)["cases"]:
        for exp in fixtures.load_case(TIER, entry).expected.values():
            fin = np.isfinite(exp.array) & (exp.array != 0)
            if not fin.any():
                continue  # degenerate: nothing a relative error can move
            total += 1
            caught += bool((1e-4 * np.abs(exp.array[fin]) > exp.bound[fin]).any())
    assert (caught, total) == (56, 72)
