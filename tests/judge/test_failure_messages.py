"""Issue 11's confusing messages, each replaced, on real R and Julia runs.

Every test here names the message a user was given before and pins what they get now: Julia
shapes and positions in Julia's layout, 1-based; the case's reason under a failure; an output the
port did not return judged a failure while the others are compared; the port's own call stack
(R's and Julia's) without the suite's frames; a hint when a file is given as the wrong language.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attention_ports.core import language
from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.results import CaseResult, OutputResult
from attention_ports.judge.runner import run_suite
from tests.faults.conftest import check_runtime

PORTS = Path(__file__).resolve().parents[1] / "data" / "ports"


def run(lang: str, port: Path, cases: list[str]) -> dict[str, CaseResult]:
    check_runtime(lang)
    results = run_suite(REPO_FIXTURES, [lang], {lang: port}, cases, required={lang}, progress=None)
    return {r.case: r for r in results}


def test_julia_failures_read_in_julias_layout_1_based_reference_second() -> None:
    results = run("julia", PORTS / "julia" / "token_major.jl", ["softmax_non_square_7x2", "sdpa_L2_d3"])
    # was: "shape mismatch: expected (7, 2), actual (2, 7)"
    shape = results["softmax_non_square_7x2"].message().splitlines()
    assert shape[0] == (
        "case 'softmax_non_square_7x2', output 'y': shape mismatch: the port returned y as (7, 2); "
        "Julia's layout wants (2, 7) (entry x vector): the transpose of the expected shape"
    )
    assert shape[1] == "  reference layout (NumPy): expected (7, 2), actual (2, 7)"
    # was: "worst at [1, 0]" (NumPy, 0-based): the port's weights[1, 2]
    lines = results["sdpa_L2_d3"].message().splitlines()
    assert lines[1] == "  as the port sees it (Julia, 1-based): weights is (2, 2) (key x query)"
    assert lines[2].startswith("  worst at weights[1, 2]: expected 0.24052378981252842, actual 0.9141412949690904")
    assert "  reference layout (NumPy, 0-based): shape (2, 2), worst at [1, 0]" in lines


def test_a_failure_carries_the_cases_reason_and_flags() -> None:
    results = run("r", PORTS / "r" / "output_row_shift.R", ["sdpa_nq3_nk7_dk5_dv2"])
    message = results["sdpa_nq3_nk7_dk5_dv2"].message()
    note = (  # what the case is for, not why this port failed: the diagnosis (a row shift) says that
        "  what this case tests: n_q != n_k and d_k != d_v: every axis has a different length, so any transpose "
        "or swap fails [flags: random, non_square]"
    )
    assert note in message.splitlines()
    assert message.splitlines()[-1].startswith("  repro: attention-ports verify --impl r --case sdpa_nq3_nk7_dk5_dv2")


def test_a_cases_reason_is_its_purpose_not_a_finding_unless_a_diagnosis_speaks() -> None:
    # Issue 19: a correct log-domain port failing softmax_large_logits was shown "this case: ... exp
    # overflows unless the row maximum is subtracted first", a bug it does not have.
    reason = "Scores of order 1e3: exp overflows unless the row maximum is subtracted first (seed 002's softmax fails)"
    failing = OutputResult("julia", "softmax_large_logits", "y", "fail", message="case 'softmax_large_logits' ...")
    failing.reason, failing.flags = reason, ("random", "stability")
    r = CaseResult("julia", "softmax_large_logits", "softmax", outputs=[failing])
    assert r.message().splitlines()[-1] == (
        f"  what this case tests (its purpose, not a diagnosis): {reason} [flags: random, stability]"
    )
    failing.diagnosis = "y is normalised over the whole array, not per vector: ..."
    assert r.message().splitlines()[-1] == f"  what this case tests: {reason} [flags: random, stability]"


def test_an_output_not_returned_fails_and_the_others_are_still_judged() -> None:
    # was: the whole case an `error`, its output never compared; then `missing`, which let a port
    # that declares attention and drops its weights pass (issue 19): an implemented operation owes
    # every output
    results = run("r", PORTS / "r" / "weights_not_returned.R", ["sdpa_L2_d3"])
    r = results["sdpa_L2_d3"]
    by_output = {o.output: o for o in r.outputs}
    assert by_output["output"].status == "pass" and by_output["output"].err_over_bound is not None
    assert by_output["weights"].status == "fail"
    assert (
        by_output["weights"].message == "case 'sdpa_L2_d3', output 'weights': not returned (the port returned: output)"
    )
    assert r.status == "fail"


def test_a_port_returning_none_of_its_outputs_is_an_error() -> None:
    # returning the right numbers under other names is not a partial port
    results = run("r", PORTS / "r" / "misnamed_outputs.R", ["sdpa_L2_d3"])
    r = results["sdpa_L2_d3"]
    assert r.status == "error"
    assert (
        "scaled_dot_product_attention: the result holds none of its outputs (it has: out, w); "
        "expected list(output = ..., weights = ...)"
    ) in r.message()


def test_a_wrong_r_argument_name_shows_the_ports_signature_not_the_bridge() -> None:
    # was: "tryCatch(list(ok = TRUE, ... / doTryCatch(return(expr), ... / eval(call, frame)"
    results = run("r", PORTS / "r" / "wrong_argument_name.R", ["sdpa_additive_bias_mask"])
    message = results["sdpa_additive_bias_mask"].message()
    assert (
        "Error in scaled_dot_product_attention(q, k, v, mask = mask) : unused argument (mask = mask)\n"
        "the port defines scaled_dot_product_attention <- function(q, k, v, attn_mask = NULL, scale = NULL); "
        "the suite calls scaled_dot_product_attention(q, k, v, mask = mask) (ports/CONTRACT.md)"
    ) in message
    for ours in ("tryCatch", "doTryCatch", "withCallingHandlers", "eval(call, frame)", ".ap_", "R call stack"):
        assert ours not in message, ours


def test_an_r_error_deep_in_a_port_shows_the_ports_frames_only() -> None:
    results = run("r", PORTS / "r" / "boom.R", ["softmax_ties"])
    message = results["softmax_ties"].message()
    assert "Error in softmax(x) : boom\nR call stack (innermost last):\n  softmax(x)\n" in message
    for ours in ("tryCatch", "doTryCatch", "withCallingHandlers", "eval(call, frame)", ".ap_"):
        assert ours not in message, ours


def test_a_julia_error_shows_the_ports_frames_not_the_workers() -> None:
    # was: frames of worker.jl (call_op, invokelatest's closure in essentials.jl) after the port's
    results = run("julia", PORTS / "julia" / "helper_error.jl", ["softmax_ties"])
    message = results["softmax_ties"].message()
    assert "UndefKeywordError: keyword argument dims not assigned" in message
    assert "softmax(::Array{Float64,2}) at helper_error.jl:9" in message
    for ours in ("worker.jl", "essentials.jl", "invokelatest", "call_op"):
        assert ours not in message, ours


@pytest.mark.parametrize(
    ("given_as", "file", "hint"),
    [
        ("r", "julia/token_major.jl", "hint: token_major.jl looks like Julia, not R: pass it as --port julia="),
        ("julia", "r/output_row_shift.R", "hint: output_row_shift.R looks like R, not Julia: pass it as --port r="),
    ],
)
def test_a_file_given_as_the_wrong_language_gets_a_hint(given_as: str, file: str, hint: str) -> None:
    # was: R's "unexpected ';'" or Julia's "space before "{" not allowed" and nothing else
    results = run(given_as, PORTS / file, ["softmax_ties"])
    assert hint in results["softmax_ties"].message()


def test_language_guess_reads_the_code_not_just_the_suffix(tmp_path: Path) -> None:
    for path in sorted(PORTS.glob("r/*.R")):
        assert language.guess(path) in ("r", None), path
    for path in sorted(PORTS.glob("julia/*.jl")):
        assert language.guess(path) in ("julia", None), path
    disguised = tmp_path / "attention.R"
    disguised.write_text((PORTS / "julia" / "token_major.jl").read_text())
    assert language.guess(disguised) == "julia"
    assert language.hint(disguised, "r").startswith("hint: attention.R looks like Julia, not R")
    assert language.hint(PORTS / "r" / "boom.R", "r") == ""  # right language: no hint
    empty = tmp_path / "empty.jl"
    empty.write_text("# nothing here\n")
    assert language.guess(empty) == "julia"  # no code: the suffix decides
