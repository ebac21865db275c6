"""Where a composite case goes wrong (attention_ports/judge/localise.py, issue 26): the outputs that
agree are named, gpt_grads' first wrong gradient going backwards, gpt_train's first wrong step, and
the line reaches every report format through the one failure message.

Unit tests hand ``locate`` the expected arrays with chosen parts wrong; one case runs through the
judge with a Python implementation whose gradient of one parameter is wrong (the reference's
numbers otherwise) and its report is rendered in every format. Real R and Julia ports with backward
and training-loop bugs are localised in the mutation kit (tests/tools/test_mutation.py).
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.fixtures.store import REPO_FIXTURES, Case, iter_entries, load_case
from attention_ports.judge import localise
from attention_ports.judge.results import CaseResult
from attention_ports.judge.runner import judge
from attention_ports.report import Report, html_page, junit, markdown, text
from attention_ports.runtimes.builtin import call_reference
from attention_ports.runtimes.impl import Arrays, Implementation

_ENTRIES = {e["id"]: e for e in iter_entries(REPO_FIXTURES)}


def case(case_id: str) -> Case:
    return load_case(REPO_FIXTURES, _ENTRIES[case_id])


def _locate(c: Case, wrong: Mapping[str, np.ndarray], r_names: bool = True) -> str:
    """``locate`` on ``c`` with the outputs in ``wrong`` replaced (the others exact), as R names them."""
    judged, statuses = {}, {}
    for name, exp in c.expected.items():
        actual = wrong.get(name, exp.array)
        judged[name] = (exp.array, exp.bound, actual)
        statuses[name] = "fail" if name in wrong else "pass"
    return localise.locate(c.op, statuses, judged, lambda o: o.replace(".", "$") if r_names else o)


def _off(a: np.ndarray, block: int | None = None) -> np.ndarray:
    out = np.array(a, dtype=np.float64, copy=True)
    if block is None:
        out += 0.01 * (1 + np.abs(out))
    else:
        out[block] += 0.01 * (1 + np.abs(out[block]))
    return out


def test_the_first_wrong_gradient_going_backwards_is_named_with_the_ones_that_agree() -> None:
    c = case("gpt_grads_two_blocks")  # two blocks: block 2 is the first the backward reaches
    g = {n: e.array for n, e in c.expected.items()}
    # a mistake in the second norm's backward of the last block: its own gradients, then everything
    # the gradient flowing back reaches (the attention's, the first norm's, block 1's, the embeddings)
    wrong = {n: _off(g[n], 1) for n in ("grads.ln2_w", "grads.ln2_b", "grads.w_o", "grads.ln1_w")}
    wrong |= {n: _off(g[n]) for n in ("grads.wte", "grads.wpe")}
    wrong["grads.ln2_b"] = _off(wrong["grads.ln2_b"], 0)
    line = _locate(c, wrong)
    assert line.startswith(
        "along the backward pass, loss, grads$w_head, grads$lnf_w, grads$lnf_b and block 2's grads$w_2, grads$b_2, "
        "grads$w_1 and grads$b_1 agree; the first wrong gradient going backwards is grads$ln2_w of block 2: look "
        "between block 2's feed-forward's first projection and its gelu (w_1, b_1) and block 2's second layer norm "
        "(ln2)"
    ), line
    assert line.endswith("after it, 6 of 29 are wrong (the first of them: grads$ln2_b of block 2)"), line


def test_a_gradient_wrong_on_its_own_is_its_own_formula() -> None:
    c = case("gpt_grads_two_blocks")
    line = _locate(c, {"grads.wte": _off(c.expected["grads.wte"].array)}, r_names=False)
    assert line == (
        "along the backward pass, loss, grads.w_head, grads.lnf_w, grads.lnf_b, every gradient of block 2, every "
        "gradient of block 1 and grads.wpe agree; the first wrong gradient going backwards is grads.wte: look at the "
        "embeddings (wte, wpe)"
    )
    line = _locate(c, {"grads.b_2": _off(c.expected["grads.b_2"].array, 0)})
    assert line.endswith(
        "every gradient of block 2 and grads$w_2 of block 1 agree; the first wrong gradient going backwards is "
        "grads$b_2 of block 1: look at block 1's feed-forward's output projection (w_2, b_2); every gradient after it "
        "agrees: the mistake is in that gradient's own formula"
    ), line


def test_a_wrong_loss_is_the_forward_or_the_loss() -> None:
    c = case("gpt_grads_one_token")
    everything = {n: _off(e.array) for n, e in c.expected.items()}
    assert _locate(c, everything) == (
        "the loss and every gradient are wrong: the forward pass or the loss is, before any backward"
    )
    assert _locate(c, {"loss": _off(c.expected["loss"].array)}) == (
        "only the loss is wrong, every gradient agrees: the loss value returned is wrong, not the forward pass the "
        "gradients come from"
    )
    # the gradients that are exactly zero here (one token: the query and key projections'; b_k's in
    # every GPT) agree with any forward: they are said apart, not as evidence (before: "yet block 1's
    # grads$w_q, ... agree")
    nonzero = {n: _off(e.array) for n, e in c.expected.items() if np.any(e.array)}
    assert _locate(c, nonzero) == (
        "the loss and every gradient are wrong, but those whose right value is exactly zero here (block 1's "
        "grads$w_q, grads$b_q, grads$w_k and grads$b_k): the forward pass or the loss is, before any backward"
    )


def test_the_first_training_step_whose_loss_goes_wrong_is_named() -> None:
    c = case("gpt_train_tanh_plain_adam")  # four steps
    losses = c.expected["losses"].array
    late = losses.copy()
    late[2:] = _off(late[2:])
    params = {n: _off(e.array) for n, e in c.expected.items() if n.startswith("params.") and n != "params.b_k"}
    line = _locate(c, {"losses": late, **params})
    assert line == (
        "the losses of steps 1 to 2 agree and step 3's is the first wrong one: step 2's update went wrong (its "
        "gradients or its AdamW step: moments, bias corrections, step count); every final parameter is wrong but "
        "params$b_k"
    )
    assert _locate(c, {"losses": _off(losses)}).startswith("the first step's loss is already wrong, before any update")
    assert _locate(c, {"params.w_head": _off(c.expected["params.w_head"].array)}).startswith(
        "every step's loss agrees (4 steps), and params$w_head is wrong, params$wte, "
    )


def test_the_outputs_that_agree_are_named_on_any_composite_operation() -> None:
    c = case("seed000_four_words")  # self_attention: q, k, v, weights, output
    line = _locate(c, {"weights": _off(c.expected["weights"].array), "output": _off(c.expected["output"].array)})
    assert line == (
        "q$, k$ and v$ agree; wrong: weights and output; the first wrong one going forward is weights, computed after "
        "q, k and v, which agree"
    ).replace("$", "")
    assert _locate(c, {n: _off(e.array) for n, e in c.expected.items()}) == ""  # every output wrong: nothing to add


class _LastBlocksLn2Bias(Implementation):
    """The reference's gpt_grads with the gradient of the last block's ln2_b off by 1%: a port whose
    backward gets that one gradient's formula wrong (a Python port, run through the judge as any)."""

    name = "python"

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        out = call_reference(op, inputs, options)
        out["grads.ln2_b"] = _off(out["grads.ln2_b"], -1)
        return out


def test_the_localisation_reaches_every_report_format(tmp_path: Path) -> None:
    c = case("gpt_grads_two_blocks")
    res = CaseResult("python", c.id, c.op, judge("python", c, _LastBlocksLn2Bias()))
    assert res.status == "fail"
    assert [o.output for o in res.outputs if o.status == "fail"] == ["grads.ln2_b"]
    line = (
        "localisation: along the backward pass, loss, grads.w_head, grads.lnf_w, grads.lnf_b and block 2's grads.w_2, "
        "grads.b_2, grads.w_1, grads.b_1 and grads.ln2_w agree; the first wrong gradient going backwards is "
        "grads.ln2_b of block 2: look at block 2's second layer norm (ln2); every gradient after it agrees: the "
        "mistake is in that gradient's own formula"
    )
    assert line in res.message()
    assert all(o.as_json()["localisation"] == res.localisation for o in res.outputs)
    report = Report([res])
    assert line in text.failure_details(report)
    assert line in markdown.render(report)
    assert html.escape(line) in html_page.render(report)
    junit.write_junit(report, tmp_path / "junit.xml")
    assert line in (tmp_path / "junit.xml").read_text()
