"""A port's optional declaration: which operations it offers, and its masked-query convention.

The checks are written once (attention_ports/runtimes/declaration.py) and run on what either worker found;
the ports here run for real (R and Julia), through the user-port path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attention_ports.fixtures.store import REPO_FIXTURES
from attention_ports.judge.runner import run_suite
from attention_ports.runtimes import declaration
from attention_ports.runtimes.declaration import Declaration, DeclarationError
from attention_ports.runtimes.impl import ImplementationError, ImplementationUnavailable
from attention_ports.runtimes.protocol import Unsupported
from attention_ports.runtimes.registry import create
from attention_ports.spec.precision import MIXED
from tests.faults.conftest import check_runtime

DATA = Path(__file__).resolve().parents[1] / "data" / "ports"
SUFFIX = {"r": ".R", "julia": ".jl"}


# --- the checks, without a runtime ------------------------------------------------------------------
def test_no_declaration_means_every_defined_operation_and_zeros() -> None:
    assert declaration.parse(None, "p.R", "r") == Declaration(False, None, "zeros")
    assert declaration.NONE.offers("softmax") and declaration.NONE.describe() == ""


@pytest.mark.parametrize(
    ("raw", "operations", "masked_query"),
    [
        ({"operations": ["softmax", "self_attention"], "masked_query": "nan"}, {"softmax", "self_attention"}, "nan"),
        ({"operations": "softmax"}, {"softmax"}, "zeros"),  # a single name (R: a length-1 vector)
        ({"masked_query": ["uniform"]}, None, "uniform"),  # R's length-1 character vector
        ({"operations": []}, set(), "zeros"),  # nothing offered: every case missing
        ({}, None, "zeros"),
    ],
)
def test_good_declarations(raw, operations, masked_query) -> None:
    got = declaration.parse(raw, "p.jl", "julia")
    assert got.present and got.masked_query == masked_query
    assert got.operations == (None if operations is None else frozenset(operations))
    assert got.offers("softmax") == (operations is None or "softmax" in operations)


@pytest.mark.parametrize(
    ("raw", "language", "expected"),
    [
        ({"masked_query": "zero"}, "r", r"p: attention_ports\$masked_query = 'zero' is not one of 'zeros', 'nan'"),
        ({"masked_query": ["nan", "zeros"]}, "julia", r"attention_ports\.masked_query must be one of"),
        ({"masked_query": 0.0}, "r", r"masked_query must be one of .* got float 0\.0"),
        ({"operations": ["sofmax"]}, "julia", r"attention_ports\.operations names 'sofmax', not contract"),
        ({"operations": [1.0, 2.0]}, "r", r"attention_ports\$operations must be a vector of operation names"),
        ({"operation": ["softmax"]}, "r", r"unknown field\(s\) 'operation'; the fields are operations, masked_query"),
        (["softmax"], "julia", r"attention_ports must be a named list / NamedTuple, like const attention_ports"),
        (Unsupported("R CLOSXP"), "r", r"like attention_ports <- list\(.*got a R CLOSXP"),
    ],
)
def test_bad_declarations_name_the_file_and_the_field(raw, language, expected) -> None:
    with pytest.raises(DeclarationError, match=expected):
        declaration.parse(raw, "p", language)


# --- for real ---------------------------------------------------------------------------------------
@pytest.fixture(params=["r", "julia"])
def lang(request: pytest.FixtureRequest) -> str:
    check_runtime(request.param)
    return request.param


def test_only_declared_operations_are_called(lang: str) -> None:
    path = DATA / lang / f"declared_attention_only{SUFFIX[lang]}"
    cases = ["softmax_random_3x5", "softmax_ties", "sdpa_L2_d3", "self_attn_L5_d8"]
    got = {r.case: r for r in run_suite(REPO_FIXTURES, [lang], {lang: path}, cases, required={lang}, progress=None)}
    for case in ("softmax_random_3x5", "softmax_ties", "self_attn_L5_d8"):  # defined, but not declared
        assert got[case].status == "missing"
        assert "is not among the operations" in got[case].outputs[0].message
    assert got["sdpa_L2_d3"].status == "pass", got["sdpa_L2_d3"].outputs[0].message


def test_the_masked_query_convention_is_exposed(lang: str) -> None:
    with create(lang, DATA / lang / f"declared_attention_only{SUFFIX[lang]}") as impl:
        assert impl.masked_query == "nan"
        assert impl.declaration.operations == frozenset({"scaled_dot_product_attention"})
        assert "declares operations: scaled_dot_product_attention; masked_query = nan" in impl.describe()
    # our ports offer every operation they define, with the reference's zeros; the Julia port
    # declares its rotary pairing (interleaved: ports/julia/src/positions.jl), the R port nothing
    with create(lang) as ours:
        assert ours.masked_query == "zeros" and ours.declaration.operations is None
        assert ours.declaration.present == (lang == "julia")
        assert ours.rope_pairing == ("interleaved" if lang == "julia" else "halves")
        if lang == "julia":
            assert "masked_query = zeros; rope_pairing = interleaved" in ours.describe()
        else:
            assert "masked_query" not in ours.describe()


def test_a_declared_operation_the_port_does_not_define_is_an_error(lang: str) -> None:
    import numpy as np

    with create(lang, DATA / lang / f"declares_undefined{SUFFIX[lang]}") as impl:
        x = np.eye(3)
        with pytest.raises(ImplementationError, match=r"self_attention is declared in attention_ports.operations"):
            impl.run("self_attention", {"x": x, "w_q": x, "w_k": x, "w_v": x}, {})
        impl.run("softmax", {"x": x}, {})


BAD = {
    "r": 'attention_ports <- list(operations = c("softmax"), masked_query = "zero")\nsoftmax <- function(x) x\n',
    "julia": 'const attention_ports = (operations = ["softmax"], masked_query = "zero")\nsoftmax(x) = x\n',
}


def test_a_bad_declaration_is_a_load_error_naming_the_file(lang: str, tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / f"bad{SUFFIX[lang]}"
    path.write_text(BAD[lang])
    expected = rf"{path}: attention_ports.masked_query = 'zero' is not one of 'zeros', 'nan', 'uniform'"
    if lang == "r":  # R loads its port when the implementation is built
        with pytest.raises(ImplementationUnavailable, match=expected):
            create("r", path)
        return
    with create("julia", path) as impl:  # Julia on first use; then every call says so, nothing restarts
        for _ in range(2):
            with pytest.raises(ImplementationError, match=expected):
                impl.run("softmax", {"x": np.eye(2)}, {})
        assert impl.transport.starts == 1


@pytest.mark.parametrize("lower", [*MIXED, "float16"])
def test_a_julia_port_may_declare_a_mixed_precision_or_float16_and_an_r_port_may_not(lower: str) -> None:
    assert declaration.parse({"precision": lower}, "port.jl", "julia").precision == lower
    match = r"p.R: attention_ports\$precision = .*R computes in double only"
    with pytest.raises(declaration.DeclarationError, match=match):
        declaration.parse({"precision": lower}, "p.R", "r")


def test_a_precision_is_declared_or_rejected_by_field() -> None:
    assert declaration.parse({"precision": "float32"}, "p.jl", "julia").precision == "float32"
    assert declaration.parse({}, "p.jl", "julia").precision == "float64"
    with pytest.raises(declaration.DeclarationError, match=r"attention_ports\.precision = 'half' is not a precision"):
        declaration.parse({"precision": "half"}, "p.jl", "julia")
    with pytest.raises(
        declaration.DeclarationError, match=r"p.R: attention_ports\$precision = 'float32': R computes in double only"
    ):
        declaration.parse({"precision": "float32"}, "p.R", "r")
