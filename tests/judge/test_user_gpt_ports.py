"""A user's GPT-2 ports, written from the contract and nanoGPT's public description, not from ours
(tests/data/ports/{julia,r}/gpt_user.*; issue 18): the suite judges someone else's formulation
(a fused vcat'ed q/k/v and per-query causal prefixes in Julia; upper.tri masks, apply() softmax
and do.call(cbind) heads in R) with no false alarm on any case of the operations they implement,
and a bug in them is reported in the port's own layout.

The ports run for real, as `attention-ports verify --port NAME=PATH` runs them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from attention_ports.fixtures.store import REPO_FIXTURES, iter_entries, load_case
from attention_ports.judge.runner import run_suite
from tests.faults.conftest import check_runtime

DATA = Path(__file__).resolve().parents[1] / "data" / "ports"
PORTS = {"julia": DATA / "julia" / "gpt_user.jl", "r": DATA / "r" / "gpt_user.R"}
OPS = ("layer_norm", "gelu", "feed_forward", "decoder_block", "gpt_forward", "lm_loss")
ENTRIES = {e["id"]: e for e in iter_entries(REPO_FIXTURES)}
CASES = [i for i, e in ENTRIES.items() if e["op"] in OPS]

# The causal mask taken out of each port (the bug a decoder port most easily has): every query then
# attends to every key. (old text, new text, how many times it occurs in the port)
NO_CAUSAL_MASK = {
    "julia": (", :, 1:j)", ", :, 1:n)", 2),  # the keys and values of query j: all n, not 1..j
    "r": ("    att[upper.tri(att)] <- -Inf", "", 1),
}
# Each language's words for a d x n or n x d token matrix (the judge's "as the port sees it" line).
SEES = {
    "julia": "as the port sees it (Julia, 1-based): {name} is ({d}, {n}) (feature x token)",
    "r": "as the port sees it (R, 1-based): {name} is {n} x {d} (token x feature)",
}


def test_the_catalogue_has_cases_for_the_ports_operations() -> None:
    # lm_loss's cases come with their own branch (lmloss); CASES takes every case of OPS, so once
    # they are in the catalogue the port is judged on them too (then this can be == set(OPS)).
    assert {ENTRIES[i]["op"] for i in CASES} >= set(OPS) - {"lm_loss"}


@pytest.mark.parametrize("lang", list(PORTS))
def test_a_users_gpt_port_passes_every_case_of_its_operations(lang: str) -> None:
    check_runtime(lang)
    results = run_suite(REPO_FIXTURES, [lang], {lang: PORTS[lang]}, CASES, required={lang}, progress=None)
    assert sorted(r.case for r in results) == sorted(CASES)
    failed = [r.message() for r in results if r.status != "pass"]
    assert not failed, "\n".join(failed)


@pytest.mark.parametrize("lang", list(PORTS))
def test_a_bug_in_a_users_gpt_port_is_named_in_its_own_layout(lang: str, tmp_path: Path) -> None:
    check_runtime(lang)
    old, new, count = NO_CAUSAL_MASK[lang]
    text = PORTS[lang].read_text()
    assert text.count(old) == count, f"the port changed: {old!r} is no longer in {PORTS[lang]}"
    buggy = tmp_path / PORTS[lang].name
    buggy.write_text(text.replace(old, new))
    case_id = "block_h2_defaults"  # one block: the mask it lost is in every block
    (result,) = run_suite(REPO_FIXTURES, [lang], {lang: buggy}, [case_id], required={lang}, progress=None)
    n, d = load_case(REPO_FIXTURES, ENTRIES[case_id]).expected["y"].array.shape
    assert result.status == "fail"
    message = result.message()
    assert SEES[lang].format(name="y", n=n, d=d) in message, message
    assert "diagnosis: the attention is not causal" in message, message
