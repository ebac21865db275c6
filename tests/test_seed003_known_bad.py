"""Seed 003's published Julia code as a test of the suite: each of its bugs is caught, exactly.

tests/data/ports/julia/ holds two transcriptions of the seed's classifier into the port contract,
each faithful to the seed except that it keeps only ONE of its defects (shared/seeds/README.md):

- seed003_scale_bug.jl: scores divided by sqrt(length(q)) = sqrt(d*n) instead of sqrt(d); its
  backward is the exact gradient of that forward (the same wrong scale in dq and dk);
- seed003_backward_bug.jl: the correct forward, and the seed's backward verbatim: one softmax
  Jacobian from the linearly indexed alpha[j] (the first column of alpha) applied across every row,
  and no 1/sqrt(d) in dq and dk.

Both keep the seed's cross-entropy ``-sum(y .* log.(p))`` verbatim: when any class probability
underflows to exactly 0 it is 0 * -Inf = NaN, whatever the label, so every step case whose
probabilities hold a 0 fails its loss in both ports (a third defect of the seed, found by the
large-pooled-logit cases).

Each runs through the normal user-port path (``run_suite`` with ``ports={"julia": path}``, as
``attention-ports verify --port julia=PATH`` does) over every clf_* fixture case, and the set of
failing (case, output) pairs must equal the set predicted from the math and the case data (the
number of tokens n read from the fixture, the frozen names from its options): nothing the bug
breaks may pass, and nothing it leaves intact may fail. Real Julia, no mocks; without julia this
skips locally and fails under CI=true.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import attention_ports.reference as reference
import numpy as np
import pytest

from attention_ports.fixtures.store import REPO_FIXTURES, load_case
from attention_ports.judge.results import CaseResult
from attention_ports.judge.runner import run_suite, select_entries
from attention_ports.runtimes.impl import ImplementationUnavailable
from attention_ports.spec.ops import CLASSIFIER_PARAMS
from tests.conftest import require

BAD_PORTS = Path(__file__).resolve().parent / "data" / "ports" / "julia"
CASES = ["clf*"]
QUERY_KEY = ("w_q", "b_q", "w_k", "b_k")
ATTENTION_OUTPUTS = ("weights", "z", "f", "pooled", "probs")  # classifier_forward outputs after the scores


@dataclass(frozen=True)
class Facts:
    """What the predictions need to know about a fixture case, read from the case itself."""

    id: str
    op: str
    longest: int  # tokens in the (longest) sentence: x_emb's rows, or max(lengths) for training
    frozen: frozenset[str]
    outputs: frozenset[str]
    # From the reference forward pass on the case's own inputs (one-sentence cases only):
    uniform: bool = False  # every query's logits tie exactly: uniform weights under ANY scale
    q_zero: bool = False  # every query is the zero vector: dk = s * dscores' q is exactly 0
    k_same: bool = False  # every key is the same vector: dq = s * dscores k is exactly 0 (rows of dscores sum to 0)
    one_hot: bool = False  # probs are exactly one-hot: moving the pooled logits a little leaves them
    zero_prob: bool = False  # some probability underflows to exactly 0: the seed's loss is 0 * -Inf = NaN


def case_facts() -> list[Facts]:
    facts = []
    for entry in select_entries(REPO_FIXTURES, CASES):
        case = load_case(REPO_FIXTURES, entry)
        frozen = frozenset(case.options.get("frozen") or ())
        if case.op == "classifier_train":
            longest = int(case.inputs["lengths"].max())
            facts.append(Facts(case.id, case.op, longest, frozen, frozenset(case.expected)))
            continue
        longest = case.inputs["x_emb"].shape[0]  # reference layout: n tokens x e features
        params = {p: case.inputs[f"params.{p}"] for p in CLASSIFIER_PARAMS}
        fw = reference.classifier_forward(case.inputs["x_emb"], params)
        logits = fw.q @ fw.k.T
        facts.append(
            Facts(
                case.id,
                case.op,
                longest,
                frozen,
                frozenset(case.expected),
                uniform=bool((logits == logits[:, :1]).all()),
                q_zero=not fw.q.any(),
                k_same=bool((fw.k == fw.k[0]).all()),
                one_hot=bool(np.isin(fw.probs, (0.0, 1.0)).all()),
                zero_prob=bool((fw.probs == 0).any()),
            )
        )
    return facts


def seed_loss(c: Facts) -> set[str]:
    """The seed's -sum(y .* log.(p)) is NaN as soon as one probability is exactly 0 (any n, either port)."""
    return {"loss"} if c.op == "classifier_step" and c.zero_prob else set()


def uniform_weights_break(c: Facts) -> set[str]:
    """With uniform weights only the factor in dq = s dscores k and dk = s dscores' q can show.

    The weights (and so the forward, the loss, the probabilities and the value/feed-forward
    gradients) are the same under any scale and any per-query Jacobian, since every query's
    Jacobian is then the same matrix; what is left is a wrong factor on dq (exactly 0 when every
    key is the same vector) and on dk (exactly 0 when every query is zero). b_k's gradient, the
    sum of dk over keys, is 0 either way: rows of the (true, per-query) Jacobian product sum to 0.
    """
    if c.op != "classifier_step":
        return set()
    broken = set() if c.k_same else {"w_q", "b_q"}
    broken |= set() if c.q_zero else {"w_k"}
    return {f"grads.{p}" for p in broken} | {f"params.{p}" for p in broken if p not in c.frozen}


def expected_scale_bug(c: Facts) -> set[str]:
    """Outputs that sqrt(d*n) in place of sqrt(d) must break."""
    if c.longest == 1:
        return seed_loss(c)  # sqrt(d*1) == sqrt(d): the bug is invisible on one-word sentences
    if c.uniform:
        return seed_loss(c) | uniform_weights_break(c)
    # Every output computed from the scores differs: the weights and everything after them, and
    # every gradient and every updated (not frozen) parameter, through probs - one_hot. Except b_k:
    # adding a vector to every key adds the same q_i . delta to all of query i's scores, which its
    # softmax ignores, whatever the scale. So the exact gradient of b_k is zero for this (wrong)
    # forward too, rounding noise on both sides (~1e-17, under the 1e-13 floor); b_k is never moved
    # by a step, nor over a whole trajectory.
    moved = {p for p in CLASSIFIER_PARAMS if p not in c.frozen and p != "b_k"}
    # Probabilities that are exactly one-hot stay so when the pooled logits move a little: then
    # probs, d_f = (probs - one_hot) / n, b_f's gradient (sum of d_f) and b_v's (sum over tokens
    # of d_z = d_f w_f', rows of the weights summing to 1) do not see the scale either.
    saturated = {"probs", "grads.b_f", "grads.b_v", "params.b_f", "params.b_v"} if c.one_hot else set()
    if c.op == "classifier_forward":
        return set(ATTENTION_OUTPUTS) - saturated  # x, q, k, v come before the scores and pass
    if c.op == "classifier_step":
        grads = {f"grads.{p}" for p in CLASSIFIER_PARAMS if p != "b_k"}
        return ({"loss", "probs"} | grads | {f"params.{p}" for p in moved}) - saturated
    if c.op == "classifier_train":
        return {"epoch_losses"} | {f"params.{p}" for p in moved}
    raise AssertionError(f"no prediction for operation {c.op}")


def expected_backward_bug(c: Facts) -> set[str]:
    """Outputs that the seed's backward (linear-indexed Jacobian, no 1/sqrt(d) in dq, dk) must break."""
    if c.longest == 1 or c.op == "classifier_forward":
        # The forward is right; with one key the softmax Jacobian is [a(1 - a)] = [0] with a = 1,
        # the seed's and the true one alike, so the query/key gradients are exactly 0 either way.
        return seed_loss(c)
    if c.uniform:
        # alpha's first column is every query's row: the single Jacobian is right, the missing
        # 1/sqrt(d) on dq and dk is not.
        return seed_loss(c) | uniform_weights_break(c)
    if c.op == "classifier_step":
        # Only the query/key gradients and their updates; loss, probs and the gradients of
        # w_v, b_v, w_f, b_f never pass through the softmax Jacobian. grads.b_k fails too, though
        # its true value is 0: it is sum_i q_i * (row i of dL/dscores summed), and each query's
        # true Jacobian diag(w) - w w' has rows summing to w_j (1 - sum(w)) = 0 since its weights
        # sum to 1; the seed's single Jacobian is built from alpha's first column a (the weights
        # every query gives key 1), whose rows sum to a_j (1 - sum(a)), not 0 in general.
        moved = {f"params.{p}" for p in QUERY_KEY if p not in c.frozen}
        return seed_loss(c) | {f"grads.{p}" for p in QUERY_KEY} | moved
    if c.op == "classifier_train":
        # From the first sentence with n > 1 on, the trajectory leaves the true one: the epoch
        # losses and every trained parameter differ; frozen ones stay exactly as they were.
        return {"epoch_losses"} | {f"params.{p}" for p in CLASSIFIER_PARAMS if p not in c.frozen}
    raise AssertionError(f"no prediction for operation {c.op}")


PREDICTIONS = {
    "seed003_scale_bug.jl": expected_scale_bug,
    "seed003_backward_bug.jl": expected_backward_bug,
}


@pytest.fixture(scope="module")
def facts() -> list[Facts]:
    found = case_facts()
    # The predictions are only a test if both kinds of case exist.
    assert any(c.longest == 1 and c.op == "classifier_step" for c in found)
    assert any(c.longest > 1 and c.op == "classifier_step" for c in found)
    assert any(c.op == "classifier_train" for c in found)
    return found


@pytest.fixture(scope="module")
def julia_available() -> None:
    from attention_ports.runtimes.julia.adapter import find_julia

    try:
        find_julia()
    except ImplementationUnavailable as exc:
        require("julia", str(exc))


def run_port(name: str) -> list[CaseResult]:
    port = BAD_PORTS / name
    assert port.is_file(), port
    return run_suite(
        REPO_FIXTURES, ["julia"], ports={"julia": port}, case_globs=CASES, required={"julia"}, progress=None
    )


@pytest.mark.parametrize("port", sorted(PREDICTIONS))
def test_suite_flags_exactly_what_the_bug_breaks(port: str, facts: list[Facts], julia_available: None) -> None:
    results = {r.case: r for r in run_port(port)}
    assert set(results) == {c.id for c in facts}
    statuses = {(r.case, o.output): o.status for r in results.values() for o in r.outputs}
    errors = {key: status for key, status in statuses.items() if status not in {"pass", "fail"}}
    assert not errors, f"{port} did not run cleanly: {errors}\n" + "\n".join(r.message() for r in results.values())

    predict = PREDICTIONS[port]
    expected: set[tuple[str, str]] = set()
    for c in facts:
        assert {o.output for o in results[c.id].outputs} == c.outputs, c.id  # every output was judged
        wrong = predict(c)
        assert wrong <= c.outputs, f"{c.id}: predicted outputs the case does not have: {wrong - c.outputs}"
        expected |= {(c.id, o) for o in wrong}
    failing = {key for key, status in statuses.items() if status == "fail"}
    assert expected, f"{port}: the prediction flags nothing"
    assert failing == expected, (
        f"{port}: flagged but not predicted: {sorted(failing - expected)}; "
        f"predicted but passed: {sorted(expected - failing)}"
    )


def test_the_bugs_differ_in_what_they_break(facts: list[Facts]) -> None:
    """Neither prediction is a relabelling of the other: each bug leaves its own footprint."""
    by_port = {port: {(c.id, o) for c in facts for o in predict(c)} for port, predict in PREDICTIONS.items()}
    scale, backward = by_port["seed003_scale_bug.jl"], by_port["seed003_backward_bug.jl"]
    assert scale - backward and backward - scale
    forward_cases = {c.id for c in facts if c.op == "classifier_forward"}
    assert not {case for case, _ in backward} & forward_cases  # the backward bug never shows in a forward
    assert any(o == "grads.b_k" for _, o in backward) and not any(o == "grads.b_k" for _, o in scale)


SOFTMAX_CASES = [e["id"] for e in select_entries(REPO_FIXTURES) if e["op"] == "softmax"]


def test_the_seeds_whole_array_softmax_is_not_taken_for_the_contracts(tmp_path: Path, julia_available: None) -> None:
    """Issue 9, item 5: the seed's `softmax` helper normalises the whole array. Declared (the ports
    list only the classifier operations), every softmax case is `missing`, not failed; without the
    declaration the same file fails every softmax case with more than one query (a false alarm)."""
    declared = BAD_PORTS / "seed003_scale_bug.jl"
    got = run_suite(REPO_FIXTURES, ["julia"], {"julia": declared}, SOFTMAX_CASES, required={"julia"}, progress=None)
    assert {r.case: r.status for r in got} == dict.fromkeys(SOFTMAX_CASES, "missing")
    undeclared = tmp_path / declared.name
    text = declared.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("const attention_ports"))
    undeclared.write_text(text.replace(line, ""))
    got = run_suite(REPO_FIXTURES, ["julia"], {"julia": undeclared}, SOFTMAX_CASES, required={"julia"}, progress=None)
    one_query = {
        i
        for i in SOFTMAX_CASES
        if load_case(REPO_FIXTURES, select_entries(REPO_FIXTURES, [i])[0]).inputs["x"].shape[0] == 1
    }
    assert one_query and len(one_query) < len(SOFTMAX_CASES)
    assert {r.case: r.status for r in got} == {i: "pass" if i in one_query else "fail" for i in SOFTMAX_CASES}
