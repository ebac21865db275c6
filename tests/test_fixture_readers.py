"""The fixture format is language-neutral: base R and the Julia stdlib read every array exactly.

fixtures/readers/ holds a ~30-line .npy reader per language; each dumps arrays in an exact text
form (R: hex floats, Julia: shortest round-trip decimals) that is compared bit for bit here.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from attention_ports.fixtures import REPO_FIXTURES
from tests.conftest import require

READERS = REPO_FIXTURES / "readers"
# Every dtype and rank the fixtures use: 0-D int, 1-D int, bool masks, NaN, -inf, 3-D.
SAMPLE = [
    "cases/seed000_four_words/input.x.npy",
    "cases/sdpa_causal_bool/input.mask.npy",
    "cases/softmax_fully_masked_row/input.x.npy",
    "cases/softmax_fully_masked_row/expected.y.npy",
    "cases/mha_causal_h2/expected.weights.npy",
    "cases/clf_step_n1/input.label.npy",
    "cases/clf_train_sentiment_30_epochs/input.lengths.npy",
    "cases/self_attn_din7_dk3_dv5/input.b_v.npy",
    "cases/sdpa_nq3_nk7_dk5_dv2/expected.output.npy",
]


def _parse(value: str) -> float:
    special = {"NaN": np.nan, "-Inf": -np.inf, "Inf": np.inf}
    if value in special:
        return special[value]
    return float.fromhex(value) if value.startswith(("0x", "-0x")) else float(value)


def _check_dump(stdout: str) -> None:
    lines = stdout.strip().splitlines()
    assert len(lines) == len(SAMPLE)
    for line in lines:
        path, dims, *values = line.split()
        arr = np.load(path, allow_pickle=False)
        assert dims == "x".join(str(n) for n in (arr.shape or (1,))), path
        got = np.array([_parse(v) for v in values], dtype=np.float64)
        want = arr.astype(np.float64).ravel()
        np.testing.assert_array_equal(got, want, err_msg=path)  # NaN == NaN here, bit-exact otherwise


def test_base_r_reads_every_fixture_dtype_exactly() -> None:
    if shutil.which("Rscript") is None:
        require("R", "Rscript is not on PATH (scripts/install_r.sh)")
    files = [str(REPO_FIXTURES / s) for s in SAMPLE]
    proc = subprocess.run(
        ["Rscript", str(READERS / "dump_npy.R"), str(READERS), *files], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    _check_dump(proc.stdout)


def test_julia_stdlib_reads_every_fixture_dtype_exactly() -> None:
    from ports.julia_adapter import find_julia

    try:
        julia = find_julia()
    except Exception as exc:
        require("julia", str(exc))
    files = [str(REPO_FIXTURES / s) for s in SAMPLE]
    proc = subprocess.run(
        [julia, "--startup-file=no", str(READERS / "dump_npy.jl"), str(READERS), *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    _check_dump(proc.stdout)


@pytest.mark.parametrize("reader", ["read_npy.R", "read_npy.jl"])
def test_readers_stay_small(reader: str) -> None:
    # The point is that nothing but the base language is needed; a reader that grows a dependency
    # or a page of code has stopped proving it.
    text = (READERS / reader).read_text()
    assert len(text.splitlines()) <= 40
    assert "library(" not in text and "using " not in text and "import " not in text
