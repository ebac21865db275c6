"""The R port and its adapter, through a real R worker process (R embedded by rpy2); no mocks.

Our port (ports/r/R/*.R) must agree with the NumPy reference on every operation and edge case;
user ports in tests/data/ports/r/ show that the adapter reports wrong results, R errors, partial
ports and unparsable files the way the contract promises. Without R/rpy2 these tests skip locally
and fail under CI=true.

The port's own testthat suite (ports/r/run_tests.R) is not run here: ``make test`` runs it right
after pytest (scripts/native_tests.sh: exit status 0 and a closing ``r: N passed, M failed`` line
with N > 0), which is what this file's copy of it checked.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attention_ports.core import paths
from attention_ports.runtimes.builtin import call_reference
from attention_ports.runtimes.impl import ImplementationError, ImplementationUnavailable, OperationMissing
from attention_ports.spec import ops
from tests.conftest import require

DATA = Path(__file__).resolve().parents[2] / "data" / "ports" / "r"
RTOL, ATOL = 1e-9, 1e-12


@pytest.fixture(scope="module")
def r_port():
    """Our R port; skips locally when R/rpy2 cannot start, fails under CI=true."""
    try:
        from attention_ports.runtimes.r.adapter import RImplementation

        impl = RImplementation(None)
    except ImplementationUnavailable as exc:
        require("R", str(exc))
    yield impl
    impl.close()


@pytest.fixture(scope="module")
def user_port(r_port):
    """Build the R implementation for a user's port file (R is known to work by then)."""
    from attention_ports.runtimes.r.adapter import RImplementation

    made = []

    def make(path: Path):
        impl = RImplementation(path)
        made.append(impl)
        return impl

    yield make
    for impl in made:
        impl.close()


# --------------------------------------------------------------------------------------------
# cases


def _cases() -> list[tuple[str, str, dict[str, np.ndarray], dict[str, Any]]]:
    rng = np.random.default_rng(20240607)

    def n(*shape: int, scale: float = 1.0) -> np.ndarray:
        return rng.standard_normal(shape) * scale

    cases: list[tuple[str, str, dict[str, np.ndarray], dict[str, Any]]] = []

    def add(cid: str, op: str, inputs: dict[str, np.ndarray], **options: Any) -> None:
        cases.append((cid, op, inputs, options))

    # softmax
    add("softmax_basic", "softmax", {"x": n(4, 7)})
    add("softmax_one_row", "softmax", {"x": n(1, 5)})
    add("softmax_large_logits", "softmax", {"x": n(3, 6, scale=1e3)})
    x = n(3, 4)
    x[1, :] = -np.inf  # all -inf: NaN row
    x[2, [0, 3]] = -np.inf
    add("softmax_neg_inf_rows", "softmax", {"x": x})

    # scaled dot-product attention: n_q != n_k, d_k != d_v throughout
    q, k, v = n(3, 4), n(5, 4), n(5, 6)
    add("sdpa_basic", "scaled_dot_product_attention", {"q": q, "k": k, "v": v})
    add("sdpa_scale_1", "scaled_dot_product_attention", {"q": q, "k": k, "v": v}, scale=1.0)
    keep = np.ones((3, 5), dtype=bool)
    keep[0, 1] = keep[0, 4] = False
    keep[1, :] = False  # fully masked query row
    add("sdpa_bool_mask_dead_row", "scaled_dot_product_attention", {"q": q, "k": k, "v": v, "mask": keep})
    additive = np.where(keep, 0.0, -np.inf)
    additive[2, 3] = -1.5  # a finite bias
    add(
        "sdpa_additive_mask_dead_row",
        "scaled_dot_product_attention",
        {"q": q, "k": k, "v": v, "mask": additive},
        scale=0.7,
    )
    add(
        "sdpa_large_logits",
        "scaled_dot_product_attention",
        {"q": n(4, 3, scale=30), "k": n(6, 3, scale=30), "v": n(6, 2)},
        scale=1.0,
    )
    add("sdpa_single_query", "scaled_dot_product_attention", {"q": n(1, 4), "k": n(7, 4), "v": n(7, 3)})

    # self-attention: d_in 6, d_k 4, d_v 3
    x = n(5, 6)
    w = {"w_q": n(6, 4), "w_k": n(6, 4), "w_v": n(6, 3)}
    b = {"b_q": n(4), "b_k": n(4), "b_v": n(3)}
    causal = np.tril(np.ones((5, 5), dtype=bool))
    add("self_no_bias", "self_attention", {"x": x, **w})
    add("self_bias", "self_attention", {"x": x, **w, **b})
    add("self_bias_causal_scale_1", "self_attention", {"x": x, **w, **b, "mask": causal}, scale=1.0)
    dead = np.zeros((5, 5))
    dead[3, :] = -np.inf
    add("self_additive_dead_row", "self_attention", {"x": x, **w, "b_v": b["b_v"], "mask": dead})

    # multi-head attention: d_model 8, n_q 3, n_k 5
    d = 8
    mw = {name: n(d, d, scale=0.5) for name in ("w_q", "w_k", "w_v", "w_o")}
    mb = {name: n(d) for name in ("b_q", "b_k", "b_v", "b_o")}
    qry, key, val = n(3, d), n(5, d), n(5, d)
    base = {"query": qry, "key": key, "value": val, **mw}
    add("mha_4_heads", "multi_head_attention", base, num_heads=4)
    mkeep = np.ones((3, 5), dtype=bool)
    mkeep[2, :] = False
    mkeep[0, 0] = False
    add("mha_4_heads_bias_bool_mask", "multi_head_attention", {**base, **mb, "mask": mkeep}, num_heads=4)
    add("mha_1_head", "multi_head_attention", {**base, **mb}, num_heads=1)
    add(
        "mha_2_heads_additive_mask",
        "multi_head_attention",
        {**base, "b_o": mb["b_o"], "mask": np.where(mkeep, 0.0, -np.inf)},
        num_heads=2,
    )
    add(
        "mha_self_large",
        "multi_head_attention",
        {"query": qry * 20, "key": qry * 20, "value": qry, **mw},
        num_heads=4,
    )
    return cases


CASES = _cases()
CASE_IDS = [c[0] for c in CASES]


def assert_matches_reference(got: dict[str, np.ndarray], op: str, inputs: dict, options: dict) -> None:
    want = call_reference(op, inputs, options)
    assert set(got) == set(want), f"{op}: outputs {sorted(got)} != reference {sorted(want)}"
    for name, expected in want.items():
        assert got[name].shape == expected.shape, f"{op}.{name}: shape {got[name].shape} != {expected.shape}"
        np.testing.assert_allclose(got[name], expected, rtol=RTOL, atol=ATOL, err_msg=f"{op}.{name}")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_our_port_matches_reference(r_port, case):
    _, op, inputs, options = case
    assert_matches_reference(r_port.run(op, inputs, options), op, inputs, options)


def test_every_op_is_covered():
    assert {c[1] for c in CASES} >= {
        "softmax",
        "scaled_dot_product_attention",
        "self_attention",
        "multi_head_attention",
    }


def test_edge_semantics_through_r(r_port):
    """NaN for an all -inf softmax row; zeros for a fully masked attention row; finite large logits."""
    cases = dict((c[0], c) for c in CASES)
    _, op, inputs, options = cases["softmax_neg_inf_rows"]
    y = r_port.run(op, inputs, options)["y"]
    assert np.isnan(y[1]).all() and np.isfinite(y[[0, 2]]).all()
    _, op, inputs, options = cases["sdpa_bool_mask_dead_row"]
    res = r_port.run(op, inputs, options)
    assert (res["weights"][1] == 0).all() and (res["output"][1] == 0).all()
    _, op, inputs, options = cases["sdpa_large_logits"]
    scores = inputs["q"] @ inputs["k"].T
    assert np.abs(scores).max() > 500
    assert np.isfinite(r_port.run(op, inputs, options)["weights"]).all()


def test_seed_000_published_output(r_port):
    """Seed 000 (the R blog post): the attention matrix it printed, to its 7 significant digits."""
    words = np.array([[1, 0, 0], [0, 1, 0], [1, 1, 0], [0, 0, 1]], dtype=float)
    w_q = np.array([[2, 0, 2], [2, 0, 0], [2, 1, 2]], dtype=float)
    w_k = np.array([[2, 2, 2], [0, 2, 1], [0, 1, 1]], dtype=float)
    w_v = np.array([[1, 1, 0], [0, 1, 1], [0, 0, 0]], dtype=float)
    published = [
        ["0.9852202", "1.741741", "0.7565203"],
        ["0.9096526", "1.409653", "0.5"],  # R prints 0.5000000
        ["0.9985123", "1.758493", "0.7599811"],
        ["0.9956039", "1.904073", "0.9084692"],
    ]
    inputs = {"x": words, "w_q": w_q, "w_k": w_k, "w_v": w_v}
    out = r_port.run("self_attention", inputs, {})["output"]
    # R printed 7 significant digits (default options(digits = 7)), so the published numbers pin
    # every value to within half a unit in its 7th digit: compare exactly at that precision.
    assert [[f"{v:.7g}" for v in row] for row in out] == published
    assert_matches_reference(r_port.run("self_attention", inputs, {}), "self_attention", inputs, {})


def test_inputs_of_any_memory_layout(r_port):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5))
    for variant in (x, np.asfortranarray(x), x.T.copy().T, x[::-1][::-1], np.arange(30).reshape(6, 5)):
        got = r_port.run("softmax", {"x": variant}, {})["y"]
        np.testing.assert_allclose(got, call_reference("softmax", {"x": variant}, {})["y"], rtol=RTOL, atol=ATOL)
    assert got.flags.writeable


def test_argument_errors_carry_r_message_and_sizes(r_port):
    q, k, v = np.ones((3, 4)), np.ones((5, 3)), np.ones((5, 2))
    with pytest.raises(ImplementationError, match=r"q 3 x 4, k 5 x 3, v 5 x 2"):
        r_port.run("scaled_dot_product_attention", {"q": q, "k": k, "v": v}, {})
    # the run continues after an error
    res = r_port.run("scaled_dot_product_attention", {"q": q, "k": np.ones((5, 4)), "v": v}, {})
    assert res["output"].shape == (3, 2)
    with pytest.raises(ImplementationError, match=r"num_heads = 3 must be a positive divisor of d_model = 8"):
        eye = np.eye(8)
        r_port.run(
            "multi_head_attention",
            {"query": eye, "key": eye, "value": eye, "w_q": eye, "w_k": eye, "w_v": eye, "w_o": eye},
            {"num_heads": 3},
        )


def test_describe(r_port):
    text = r_port.describe()
    assert text.startswith("r: R version 4") and "attention.R" in text


# --------------------------------------------------------------------------------------------
# user ports


def _square_inputs(op: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    rng = np.random.default_rng(7)
    if op == "scaled_dot_product_attention":
        return {name: rng.standard_normal((4, 4)) for name in ("q", "k", "v")}, {}
    x = rng.standard_normal((4, 4))
    return {"x": x, **{w: rng.standard_normal((4, 4)) for w in ("w_q", "w_k", "w_v")}}, {}


def test_user_port_with_transposed_k_gives_different_results(user_port):
    port = user_port(DATA / "transposed_k.R")
    for op in ("scaled_dot_product_attention", "self_attention"):
        inputs, options = _square_inputs(op)
        got = port.run(op, inputs, options)
        want = call_reference(op, inputs, options)
        assert got["weights"].shape == want["weights"].shape  # runs, right shapes ...
        assert not np.allclose(got["weights"], want["weights"], atol=1e-3)  # ... wrong numbers
        assert not np.allclose(got["output"], want["output"], atol=1e-3)
    x = np.random.default_rng(3).standard_normal((3, 5))
    assert_matches_reference(port.run("softmax", {"x": x}, {}), "softmax", {"x": x}, {})
    eye = np.eye(4)
    mha = {"query": eye, "key": eye, "value": eye, "w_q": eye, "w_k": eye, "w_v": eye, "w_o": eye}
    with pytest.raises(OperationMissing, match=r"multi_head_attention is not defined in .*transposed_k\.R"):
        port.run("multi_head_attention", mha, {"num_heads": 2})


def test_user_port_whose_softmax_fails(user_port):
    port = user_port(DATA / "boom.R")
    with pytest.raises(ImplementationError) as info:
        port.run("softmax", {"x": np.ones((2, 3))}, {})
    message = str(info.value)
    assert "boom" in message
    assert "Error in softmax(x) : boom" in message  # R's conditionCall, deparsed
    # the other operations do not use that softmax: they run, and pass
    for _, op, inputs, options in CASES:
        if op != "softmax":
            assert_matches_reference(port.run(op, inputs, options), op, inputs, options)


def test_partial_user_port_reports_missing(user_port):
    path = DATA / "softmax_only.R"
    port = user_port(path)
    for _, op, inputs, options in CASES:
        if op == "softmax":
            assert_matches_reference(port.run(op, inputs, options), op, inputs, options)
        else:
            with pytest.raises(OperationMissing, match=rf"{op} is not defined in .*softmax_only\.R"):
                port.run(op, inputs, options)


def test_port_that_does_not_parse_names_the_file(r_port):
    from attention_ports.runtimes.r.adapter import RImplementation

    with pytest.raises(ImplementationUnavailable, match=r"syntax_error\.R.*unexpected"):
        RImplementation(DATA / "syntax_error.R")
    with pytest.raises(ImplementationUnavailable, match=r"no_such_port\.R does not exist"):
        RImplementation(DATA / "no_such_port.R")


def test_warnings_nested_errors_and_bad_results(user_port):
    from attention_ports.runtimes.r.adapter import RWarning

    port = user_port(DATA / "misbehaving.R")
    x = np.random.default_rng(5).standard_normal((3, 4))
    with pytest.warns(RWarning, match="shifting rows by their maximum"):
        got = port.run("softmax", {"x": x}, {})
    assert_matches_reference(got, "softmax", {"x": x}, {})
    assert port.last_warnings == ["Warning in softmax(x) : softmax: shifting rows by their maximum"]

    q = np.ones((3, 2))
    with pytest.raises(ImplementationError) as info:
        port.run("scaled_dot_product_attention", {"q": q, "k": q, "v": q}, {"scale": 1.0})
    message = str(info.value)
    assert 'Error in .check_tokens(q, "q") : q has 3 tokens (3 x 2)' in message
    assert "scaled_dot_product_attention(q, k, v, scale = scale)\n" in message  # the R call stack
    assert "about to check the tokens" in message  # warnings raised before the error are kept

    inputs, _ = _square_inputs("self_attention")
    with pytest.raises(ImplementationError, match="unnamed elements"):
        port.run("self_attention", inputs, {})
    eye = np.eye(4)
    mha = {"query": eye, "key": eye, "value": eye, "w_q": eye, "w_k": eye, "w_v": eye, "w_o": eye}
    with pytest.raises(ImplementationError, match="the result is character"):
        port.run("multi_head_attention", mha, {"num_heads": 2})


def test_hostile_port_cannot_take_the_process_down(r_port, capfd):
    from attention_ports.runtimes.r.adapter import RImplementation, RWarning

    with pytest.warns(RWarning, match="warns while it is being loaded"):
        port = RImplementation(DATA / "hostile.R")
    with pytest.raises(ImplementationError, match="nested too deeply") as info:
        port.run("softmax", {"x": np.ones((2, 2))}, {})
    assert "more calls" in str(info.value)  # the call stack of a deep recursion is abridged
    assert len(str(info.value)) < 2000
    eye = np.eye(3)
    with pytest.raises(ImplementationError, match=r"quit\(\)/q\(\) are disabled"):
        port.run("scaled_dot_product_attention", {"q": eye, "k": eye, "v": eye}, {})
    inputs, _ = _square_inputs("self_attention")
    capfd.readouterr()
    assert_matches_reference(port.run("self_attention", inputs, {}), "self_attention", inputs, {})
    out, err = capfd.readouterr()
    # R's console output is the port's own: captured by its worker's supervisor, never ours
    assert '"hello from R"' in port.last_output
    assert "hello from R" not in out and "hello from R" not in err
    port.close()


def test_ports_are_isolated(r_port, user_port):
    """Each port has an R of its own (its worker process): ports never see each other's functions."""
    partial = user_port(DATA / "softmax_only.R")
    inputs = {"q": np.ones((2, 2)), "k": np.ones((2, 2)), "v": np.ones((2, 2))}
    with pytest.raises(OperationMissing):
        partial.run("scaled_dot_product_attention", inputs, {})
    r_port.run("scaled_dot_product_attention", inputs, {})
    assert partial.supervisor.pid != r_port.supervisor.pid
    # tests/faults/test_r_faults.py: a port polluting R's global environment breaks nothing


def test_a_port_sees_base_stats_and_utils_and_any_other_package_by_its_namespace(user_port, tmp_path):
    """The contract's R (ports/CONTRACT.md): a port's environment has stats' and utils' exports,
    then base, whose enclosure is R's empty environment: nothing on the search path (which the
    worker's R starts with utils and stats alone on, worker.py) is in sight, so a package R would
    attach by default (methods, grDevices) is reached by its namespace, as under Rscript."""
    port = tmp_path / "packages.R"
    port.write_text(
        "softmax <- function(x) {\n"
        '  stopifnot(exists("median"), exists("head"), !exists("is"), !exists("n2mfrow"))\n'
        '  stopifnot(methods::is(x, "matrix"), length(grDevices::n2mfrow(2)) == 2)\n'
        "  e <- exp(x - apply(x, 1, max))\n"
        "  e / rowSums(e)\n"
        "}\n"
    )
    x = np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]])
    got = user_port(port).run("softmax", {"x": x}, {})["y"]
    e = np.exp(x - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=RTOL, atol=ATOL)
    # and so does Rscript's environment built the same way (ports/r/worker.R, .ap_port_env)
    code = (
        f"source({str(paths.PORTS / 'r' / 'worker.R')!r}); env <- .ap_port_env(); "
        'cat(exists("median", envir = env), exists("is", envir = env))'
    )
    said = subprocess.run(["Rscript", "-e", code], capture_output=True, text=True, check=True).stdout
    assert said.split()[-2:] == ["TRUE", "FALSE"], said


# --------------------------------------------------------------------------------------------
# generic argument conversion (a test-only op)

ECHO = ops.OpSpec(
    "echo_args",
    args=("x", "cube"),
    positional_options=("num_heads",),
    kwargs=("counts", "mask"),
    options=("name", "frozen", "scale", "flag"),
    # Declared outputs must be doubles; the rest (the nested list "types", logical flags, integer
    # vectors) are passed through as float64 for these checks.
    outputs=("x", "cube"),
    groups={"params": ("w", "b")},
)


def test_generic_argument_and_result_conversion(user_port, monkeypatch):
    monkeypatch.setitem(ops.OPS, "echo_args", ECHO)
    port = user_port(DATA / "echo_args.R")
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 4))
    cube = rng.standard_normal((4, 3, 2)).transpose(2, 1, 0)  # (2, 3, 4), non-contiguous
    inputs = {
        "x": x,
        "cube": cube,
        "counts": np.array([3, 1, 4, 1, 5]),
        "mask": np.array([[True, False], [False, True]]),
        "params.w": rng.standard_normal((2, 3)),
        "params.b": rng.standard_normal(3),
        "ignored": np.ones(2),
    }
    options = {"num_heads": 4, "name": "abc", "frozen": ["w_q", "b_o"], "scale": 0.5, "flag": True}
    got = port.run("echo_args", inputs, options)
    np.testing.assert_array_equal(got["x"], x)
    np.testing.assert_array_equal(got["cube"], cube)
    for flag in (
        "num_heads_is_integer",
        "scale_is_double",
        "name_is_character",
        "flag_is_logical",
        "counts_is_integer",
        "params_is_list",
    ):
        assert got[f"types.{flag}"] == 1.0, flag
    assert got["types.frozen_length"] == 2
    assert got["num_heads"].shape == () and got["num_heads"] == 4
    assert got["scale"].shape == () and got["scale"] == 0.5
    assert got["name_chars"] == 3
    np.testing.assert_array_equal(got["frozen_nchar"], [3, 3])
    np.testing.assert_array_equal(got["params.w"], inputs["params.w"])
    np.testing.assert_array_equal(got["params.b"], inputs["params.b"])
    assert got["param_names"] == 2
    np.testing.assert_array_equal(got["counts"], [3, 1, 4, 1, 5])
    np.testing.assert_array_equal(got["mask"], [[0.0, -np.inf], [-np.inf, 0.0]])
    assert got["scalar"].shape == () and got["scalar"] == 42
    assert got["vector"].shape == (3,) and got["vector"].dtype == np.float64
    np.testing.assert_array_equal(got["logical"], [1.0, 0.0])
    np.testing.assert_array_equal(got["array3"], np.arange(1.0, 25.0).reshape((2, 3, 4), order="F"))

    # an empty frozen list is character(0); absent group members give an empty named list
    got = port.run("echo_args", {"x": x, "cube": cube}, {**options, "frozen": []})
    assert got["types.frozen_length"] == 0 and got["param_names"] == 0
    assert got["frozen_nchar"].shape == (0,)


# --------------------------------------------------------------------------------------------
# endurance and overhead


def test_many_small_calls(r_port, record_property):
    """10,000 small calls do not crash the embedded R (rpy2's memoryview() did) and stay cheap."""
    x = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, -np.inf]])
    want = call_reference("softmax", {"x": x}, {})["y"]
    start = time.perf_counter()
    for _ in range(10_000):
        got = r_port.run("softmax", {"x": x}, {})["y"]
    per_call = (time.perf_counter() - start) / 10_000
    np.testing.assert_allclose(got, want, rtol=RTOL)
    record_property("r_small_call_us", round(per_call * 1e6, 1))
    print(f"\nr: {per_call * 1e6:.0f} us per small softmax call (10,000 calls)")
    assert per_call < 0.01  # generous: a regression to per-element conversion would be far slower


def test_large_arrays(r_port, record_property):
    rng = np.random.default_rng(2)
    inputs = {
        "q": rng.standard_normal((256, 64)),
        "k": rng.standard_normal((256, 64)),
        "v": rng.standard_normal((256, 64)),
    }
    assert_matches_reference(
        r_port.run("scaled_dot_product_attention", inputs, {}), "scaled_dot_product_attention", inputs, {}
    )
    start = time.perf_counter()
    for _ in range(50):
        r_port.run("scaled_dot_product_attention", inputs, {})
    per_call = (time.perf_counter() - start) / 50
    record_property("r_256x64_sdpa_ms", round(per_call * 1e3, 2))
    print(f"\nr: {per_call * 1e3:.2f} ms per 256x64 scaled_dot_product_attention call")


# --------------------------------------------------------------------------------------------
# seed 003's classifier (ports/r/R/classifier.R): labels are 1-based on the R side


def _classifier_cases() -> list[tuple[str, str, dict[str, np.ndarray], dict[str, Any]]]:
    from attention_ports.reference.classifier import init_classifier_params, pack_dataset

    rng = np.random.default_rng(20250301)
    e = 3

    def params(scale: float = 0.3) -> dict[str, np.ndarray]:
        d = e + 1
        shapes = {"w_q": (d, d), "b_q": (d,), "w_k": (d, d), "b_k": (d,), "w_v": (d, d), "b_v": (d,)}
        shapes.update({"w_f": (d, 3), "b_f": (3,)})
        return {f"params.{k}": rng.standard_normal(s) * scale for k, s in shapes.items()}

    def label(i: int) -> np.ndarray:
        return np.array(i, dtype=np.int64)

    x5 = rng.standard_normal((5, e))
    sentences = [(rng.standard_normal((n, e)), y) for n, y in [(3, 0), (0, 1), (4, 2), (1, 1), (6, 0)]]
    tokens, lengths, labels = pack_dataset(sentences)
    init = {f"params.{k}": v for k, v in init_classifier_params(e, seed=3).items()}
    return [
        ("clf_forward", "classifier_forward", {"x_emb": x5, **params()}, {}),
        ("clf_step_label0", "classifier_step", {"x_emb": x5, "label": label(0), **params()}, {"lr": 0.1}),
        ("clf_step_label2", "classifier_step", {"x_emb": x5, "label": label(2), **params()}, {"lr": 0.1}),
        (
            "clf_step_n1_frozen",
            "classifier_step",
            {"x_emb": x5[:1], "label": label(1), **params()},
            {"lr": 0.2, "frozen": ["w_f", "b_f"]},
        ),
        (
            "clf_train_with_empty",
            "classifier_train",
            {"tokens": tokens, "lengths": lengths, "labels": labels, **init},
            {"lr": 0.5, "epochs": 4, "frozen": []},
        ),
    ]


CLF_CASES = _classifier_cases()


@pytest.mark.parametrize("case", CLF_CASES, ids=[c[0] for c in CLF_CASES])
def test_our_classifier_matches_reference(r_port, case):
    _, op, inputs, options = case
    assert_matches_reference(r_port.run(op, inputs, options), op, inputs, options)


def test_classifier_labels_are_1_based_in_r(r_port):
    """label 0 (negative) is class 1 in R: the loss is -log of the first probability."""
    cases = {c[0]: c for c in CLF_CASES}
    _, op, inputs, options = cases["clf_step_label0"]
    res = r_port.run(op, inputs, options)
    assert res["loss"].shape == ()
    assert res["loss"] == pytest.approx(-np.log(res["probs"][0]), rel=1e-12)
    # a 0-based label out of range reaches R as its 1-based value, and R says so
    with pytest.raises(ImplementationError, match=r"1-based class indices in 1\.\.3 .*got 4"):
        r_port.run(op, {**inputs, "label": np.array(3)}, options)


_ECHO_CLASSIFIER_R = r"""
classifier_train <- function(tokens, lengths, labels, params, lr, epochs, frozen = character(0)) {
  list(
    epoch_losses = as.double(labels),
    params = params,
    types = list(
      labels_is_integer = is.integer(labels),
      lengths_is_integer = is.integer(lengths),
      lr_is_double = is.double(lr) && length(lr) == 1L,
      epochs_is_integer = is.integer(epochs) && length(epochs) == 1L,
      frozen_is_character = is.character(frozen),
      frozen_length = length(frozen)
    ),
    lengths = lengths
  )
}
classifier_step <- function(x_emb, label, params, lr, frozen = character(0)) {
  list(loss = as.double(label), probs = c(0, 0, 1), grads = params, params = params)
}
echo_index <- function(labels, label) list(labels = labels, label = label, seen = as.double(c(label, labels)))
"""

ECHO_INDEX = ops.OpSpec(
    "echo_index",
    args=("labels", "label"),
    outputs=("labels", "label", "seen"),
    roles={"labels": ops.Role.INDEX, "label": ops.Role.INDEX, "seen": ops.Role.VECTOR},
)


def test_index_arrays_travel_1_based_and_come_back_0_based(user_port, tmp_path, monkeypatch):
    """Role.INDEX inputs reach R as value + 1 (integers stay R integers), INDEX outputs come back
    - 1 (R integers are fine there); lr is a double, epochs an integer, frozen a character vector
    (character(0) when empty)."""
    port_file = tmp_path / "echo_classifier.R"
    port_file.write_text(_ECHO_CLASSIFIER_R)
    port = user_port(port_file)
    params = {f"params.{p}": np.full(2, float(i)) for i, p in enumerate(ops.CLASSIFIER_PARAMS)}
    inputs = {
        "tokens": np.ones((4, 2)),
        "lengths": np.array([1, 0, 3], dtype=np.int64),
        "labels": np.array([0, 2, 1], dtype=np.int64),
        **params,
    }
    got = port.run("classifier_train", inputs, {"lr": 0.05, "epochs": 3, "frozen": []})
    np.testing.assert_array_equal(got["epoch_losses"], [1.0, 3.0, 2.0])  # R saw 1-based labels
    np.testing.assert_array_equal(got["lengths"], [1, 0, 3])  # lengths are counts: not shifted
    for flag in ("labels_is_integer", "lengths_is_integer", "lr_is_double", "epochs_is_integer"):
        assert got[f"types.{flag}"] == 1.0, flag
    assert got["types.frozen_is_character"] == 1.0 and got["types.frozen_length"] == 0
    got = port.run("classifier_train", inputs, {"lr": 0.05, "epochs": 3, "frozen": ["w_f", "b_f"]})
    assert got["types.frozen_length"] == 2
    for p in ops.CLASSIFIER_PARAMS:  # the params list arrives complete, in order
        np.testing.assert_array_equal(got[f"params.{p}"], inputs[f"params.{p}"])

    step = port.run("classifier_step", {"x_emb": np.ones((2, 2)), "label": np.array(2), **params}, {"lr": 0.1})
    assert step["loss"].shape == () and step["loss"] == 3.0

    monkeypatch.setitem(ops.OPS, "echo_index", ECHO_INDEX)
    labels = np.array([2, 0, 1], dtype=np.int64)
    got = port.run("echo_index", {"labels": labels, "label": np.array(1)}, {})
    np.testing.assert_array_equal(got["seen"], [2, 3, 1, 2])  # in R: 1-based
    np.testing.assert_array_equal(got["labels"], labels)  # back 0-based
    assert got["label"].shape == () and got["label"] == 1


def test_starting_r_leaves_child_processes_environment_alone(r_port) -> None:
    # rpy2's R start-up writes LD_LIBRARY_PATH into os.environ; a child python then loaded the
    # system libpython and could not import numpy. The adapter restores the variable.
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", "import numpy"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "/usr/lib/R/lib" not in os.environ.get("LD_LIBRARY_PATH", "")


ENV_PORT = """
softmax <- function(x) {
  for (v in c("OPENBLAS_NUM_THREADS", "R_HOME", "LD_LIBRARY_PATH")) cat(v, "=", Sys.getenv(v), "\\n", sep = "")
  e <- exp(x - apply(x, 1, max))
  e / rowSums(e)
}
"""


@pytest.mark.parametrize("threads", [None, "3"])
def test_a_worker_sees_rs_own_paths_and_one_blas_thread_unless_told_otherwise(r_port, tmp_path, monkeypatch, threads):
    """R_HOME and LD_LIBRARY_PATH as R's own start-up script sets them (the parent asked R once,
    for every worker: adapter._r_session_env), and OpenBLAS on one thread unless the caller chose."""
    import subprocess

    from attention_ports.runtimes.r.adapter import RImplementation

    if threads is None:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", threads)
    (tmp_path / "env.R").write_text(ENV_PORT)
    with RImplementation(tmp_path / "env.R") as impl:
        got = impl.run("softmax", {"x": np.array([[1.0, 2.0]])}, {})["y"]
        seen = dict(line.split("=", 1) for line in impl.last_output.splitlines() if "=" in line)
    np.testing.assert_allclose(got, [[1 / (1 + np.e), np.e / (1 + np.e)]], rtol=1e-15)
    assert seen["OPENBLAS_NUM_THREADS"] == (threads or "1")
    r_home = subprocess.run(["R", "RHOME"], capture_output=True, text=True, check=True).stdout.strip()
    rs_own = subprocess.run(
        ["Rscript", "-e", 'cat(Sys.getenv("LD_LIBRARY_PATH"))'], capture_output=True, text=True, check=True
    ).stdout
    assert seen["R_HOME"] == r_home
    assert seen["LD_LIBRARY_PATH"].startswith(rs_own) and "/lib" in rs_own


def test_length_one_results_take_the_contracts_shape(r_port, user_port, tmp_path):
    """R returns a length-1 vector without ``dim`` whether it means a number or a vector of one:
    adamw_step on a parameter of one entry gives param, m and v of shape (1,) (the input's; 0-D for
    a 0-D parameter), a loss stays 0-D, and a result R gave a ``dim`` keeps it."""
    one = {"param": np.array([0.75]), "grad": np.array([-0.5]), "m": np.array([0.125]), "v": np.array([0.25])}
    got = r_port.run("adamw_step", one, {"step": 3, "lr": 0.1})
    assert_matches_reference(got, "adamw_step", one, {"step": 3, "lr": 0.1})
    assert {k: v.shape for k, v in got.items()} == {"param": (1,), "m": (1,), "v": (1,)}
    scalar = {k: v.reshape(()) for k, v in one.items()}
    got = r_port.run("adamw_step", scalar, {"step": 3})
    assert_matches_reference(got, "adamw_step", scalar, {"step": 3})
    loss_in = {"logits": np.array([[0.5, -1.0, 2.0]]), "targets": np.array([2])}
    got = r_port.run("lm_loss", loss_in, {})
    assert got["loss"].shape == ()
    assert_matches_reference(got, "lm_loss", loss_in, {})

    port_file = tmp_path / "length_one.R"
    port_file.write_text(
        "adamw_step <- function(param, grad, m, v, step, ...) "
        "list(param = matrix(param, 1, 1), m = array(m, 1), v = 0.5, grads = list(b_f = 2))\n"
    )
    got = user_port(port_file).run("adamw_step", {k: np.ones((1, 1)) for k in one}, {"step": 1})
    # dim kept (a 1x1 matrix, a 1-D array); v without dim: the input was 2-D, the role has axes
    assert got["param"].shape == (1, 1) and got["m"].shape == (1,) and got["v"].shape == (1,)
    assert got["grads.b_f"].shape == () and got["grads.b_f"] == 2.0  # undeclared: left as R gave it
