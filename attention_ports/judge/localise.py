"""Where in a composite operation a failing case goes wrong (issue 26): one line per case.

A diagnosis (``diagnose.py``) explains one output; a case with many outputs has a second thing to
say, read off which outputs agree and which do not, with no hypothesis about the mistake:

- ``gpt_grads``: the outputs in the order the backward pass computes them, from the loss back to
  the embeddings (:func:`backward_order`: the LM head, ln_f, then each block from the last to the
  first, its feed-forward, its second norm, its attention's output, value, query and key
  projections, its first norm), each stacked block gradient judged block by block. The line names
  the gradients that agree before the first wrong one, the first wrong one going backwards, the
  stage between the last right gradient and it (where to look), and whether the ones after it are
  wrong too (the gradient flowing back is wrong from there on) or it alone is (its own formula).
  A wrong loss is the forward or the loss itself, before any backward.
- ``gpt_train``: the first step whose loss is wrong (each step's loss is computed before its
  update: step k's loss wrong and step k-1's right puts the mistake in update k-1), and the final
  parameters that agree and that do not.
- Any other operation with several outputs: the outputs that agree and those that do not, the
  first wrong one named in the order the operation computes them where it has one
  (:data:`FORWARD`).

Nothing here changes a verdict, and the line claims only what the statuses show. ``""`` when there
is nothing to add: a case that passes, one output, every output wrong on an operation without an
order, or an output that did not run.

Layer: judge. Imports ``spec`` (the operations' outputs) and ``judge.compare``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from attention_ports.judge.compare import agree
from attention_ports.spec import ops

# A block's parameters in the order the backward pass reaches their gradients (GPT-2's pre-norm
# block: y = h + W_2 gelu(ln2(h) W_1 + b_1) + b_2 with h = x + attention(ln1(x)); the value
# projection's gradient comes from P^T dO, before the softmax's backward reaches the scores, and
# so the query and key projections).
BLOCK_BACKWARD = (
    "w_2",
    "b_2",
    "w_1",
    "b_1",
    "ln2_w",
    "ln2_b",
    "w_o",
    "b_o",
    "w_v",
    "b_v",
    "w_q",
    "b_q",
    "w_k",
    "b_k",
    "ln1_w",
    "ln1_b",
)
# Each of those parameters' stage, as a port author reads the block.
STAGE = {
    "w_2": "the feed-forward's output projection (w_2, b_2)",
    "b_2": "the feed-forward's output projection (w_2, b_2)",
    "w_1": "the feed-forward's first projection and its gelu (w_1, b_1)",
    "b_1": "the feed-forward's first projection and its gelu (w_1, b_1)",
    "ln2_w": "the second layer norm (ln2)",
    "ln2_b": "the second layer norm (ln2)",
    "w_o": "the attention's output projection (w_o, b_o)",
    "b_o": "the attention's output projection (w_o, b_o)",
    "w_v": "the value projection (w_v, b_v)",
    "b_v": "the value projection (w_v, b_v)",
    "w_q": "the softmax's backward and the query and key projections",
    "b_q": "the softmax's backward and the query and key projections",
    "w_k": "the softmax's backward and the query and key projections",
    "b_k": "the softmax's backward and the query and key projections",
    "ln1_w": "the first layer norm (ln1)",
    "ln1_b": "the first layer norm (ln1)",
    "loss": "the loss's gradient (dlogits)",
    "w_head": "the LM head (w_head)",
    "lnf_w": "the final layer norm (ln_f)",
    "lnf_b": "the final layer norm (ln_f)",
    "wpe": "the embeddings (wte, wpe)",
    "wte": "the embeddings (wte, wpe)",
}
# Operations whose outputs are listed in the order they are computed (spec/ops.py), so the first
# wrong one going forward is where a mistake enters.
FORWARD = ("self_attention", "classifier_forward")


@dataclass(frozen=True)
class Unit:
    """One judged piece: an output, or one block's slice of a stacked block output."""

    output: str
    block: int | None  # reference block index (0-based); None: the whole output
    wrong: bool


Namer = Callable[[str], str]


def locate(
    op: str,
    statuses: Mapping[str, str],
    judged: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]],
    name: Namer = lambda output: output,
) -> str:
    """The localisation line of one case (``""``: nothing to add).

    ``statuses``: each expected output's status; ``judged``: (expected, bound, actual) of each
    output the port returned (reference layout); ``name``: an output as the port writes it
    (grads$w_q in R). Blocks are counted from 1, as the prose counts them ("block 2 of 2" is the
    last), in every language."""
    if len(statuses) < 2 or not all(s in ("pass", "fail") for s in statuses.values()):
        return ""
    if all(s == "pass" for s in statuses.values()):
        return ""
    if op == "gpt_grads":
        return _gpt_grads(statuses, judged, name)
    if op == "gpt_train":
        return _gpt_train(statuses, judged, name)
    return _outputs(op, statuses, name)


def _wrong_blocks(output: str, status: str, judged: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]):
    """Per block (axis 0) of a stacked output: whether any element there fails (all, when the
    output came back in another shape or not at all)."""
    exp, bound, actual = judged.get(output, (None, None, None))
    if exp is None:
        return None
    n = exp.shape[0]
    if status == "pass":
        return [False] * n
    if actual is None or np.shape(actual) != exp.shape:
        return [True] * n
    bad = ~agree(exp, np.asarray(actual, dtype=np.float64), bound)
    return [bool(bad[i].any()) for i in range(n)]


def backward_order(n_layer: int) -> list[tuple[str, int | None]]:
    """gpt_grads' outputs as the backward pass computes them: (output, block or None)."""
    order: list[tuple[str, int | None]] = [("loss", None), ("grads.w_head", None)]
    order += [("grads.lnf_w", None), ("grads.lnf_b", None)]
    for block in reversed(range(n_layer)):
        order += [(f"grads.{p}", block) for p in BLOCK_BACKWARD]
    return [*order, ("grads.wpe", None), ("grads.wte", None)]


def _gpt_grads(statuses, judged, name: Namer) -> str:
    base = 1
    stacked = {f"grads.{p}" for p in ops.BLOCK_PARAMS}
    first = judged.get("grads.ln1_w")
    if first is None:
        return ""
    n_layer = first[0].shape[0]
    per_block = {o: _wrong_blocks(o, statuses[o], judged) for o in stacked if o in statuses}
    if any(v is None for v in per_block.values()):
        return ""
    units = [
        Unit(o, b, per_block[o][b] if b is not None else statuses[o] != "pass")
        for o, b in backward_order(n_layer)
        if o in statuses
    ]

    def said(u: Unit) -> str:
        return name(u.output) + ("" if u.block is None else f" of block {u.block + base}")

    def stage(u: Unit) -> str:
        part = STAGE[u.output.split(".", 1)[-1]]
        return part if u.block is None else f"block {u.block + base}'s {part.removeprefix('the ')}"

    def zero(u: Unit) -> bool:
        """The right value is exactly zero (grads.b_k always: the softmax ignores the key bias; the
        query and key projections' of one token): a port that agrees there says nothing of its forward."""
        exp = judged[u.output][0]
        part = exp if u.block is None else exp[u.block]
        return not np.any(part)

    wrong = [i for i, u in enumerate(units) if u.wrong]
    i = wrong[0]
    if units[i].output == "loss":
        right = [u for u in units[1:] if not u.wrong]
        informative = [u for u in right if not zero(u)]
        if not right:
            return "the loss and every gradient are wrong: the forward pass or the loss is, before any backward"
        if not informative:
            return (
                "the loss and every gradient are wrong, but those whose right value is exactly zero here "
                f"({_compress(right, said)}): the forward pass or the loss is, before any backward"
            )
        if len(right) == len(units) - 1:
            return (
                "only the loss is wrong, every gradient agrees: the loss value returned is wrong, not the forward "
                "pass the gradients come from"
            )
        agreeing = _compress(informative, said)
        return f"the loss is wrong (the forward pass or the loss, before any backward), yet {agreeing} agree"
    before = _compress(units[:i], said)
    after = units[i + 1 :]
    wrong_after = sum(u.wrong for u in after)
    last_right, first_wrong = stage(units[i - 1]), stage(units[i])
    where = f"look at {first_wrong}" if last_right == first_wrong else f"look between {last_right} and {first_wrong}"
    verb = "agrees" if i == 1 else "agree"
    line = (
        f"along the backward pass, {before} {verb}; the first wrong gradient going backwards is {said(units[i])}: "
        f"{where}"
    )
    if not after:
        return line
    if wrong_after == 0:
        return line + "; every gradient after it agrees: the mistake is in that gradient's own formula"
    if wrong_after == len(after):
        return (
            line
            + f"; every gradient after it is wrong too ({len(after)}): the gradient flowing back is wrong from there"
        )
    next_wrong = said(next(u for u in after if u.wrong))
    return line + f"; after it, {wrong_after} of {len(after)} are wrong (the first of them: {next_wrong})"


def _compress(units: Sequence[Unit], said: Callable[[Unit], str], base: int = 1) -> str:
    """Units named one by one, except in runs of one block: "every gradient of block 2" for a whole
    block, "block 2's grads$w_2, grads$b_2 and grads$w_1" for part of one."""
    parts: list[str] = []
    i = 0
    while i < len(units):
        u = units[i]
        run = list(itertools.takewhile(lambda v, b=u.block: v.block is not None and v.block == b, units[i:]))
        if len(run) == len(BLOCK_BACKWARD):
            parts.append(f"every gradient of block {u.block + base}")  # type: ignore[operator]
        elif len(run) > 1:
            names = [said(v).removesuffix(f" of block {u.block + base}") for v in run]  # type: ignore[operator]
            parts.append(f"block {u.block + base}'s {_join(names)}")  # type: ignore[operator]
        else:
            parts.append(said(u))
        i += max(1, len(run))
    return _join(parts)


def _join(parts: Sequence[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _gpt_train(statuses, judged, name: Namer) -> str:
    if "losses" not in statuses:
        return ""
    exp, bound, actual = judged.get("losses", (None, None, None))
    params = [o for o in statuses if o != "losses"]
    right = [name(o) for o in params if statuses[o] == "pass"]
    bad = [name(o) for o in params if statuses[o] != "pass"]
    if not bad:
        params_said = "every final parameter agrees"
    elif not right:
        params_said = "every final parameter is wrong"
    elif len(right) < len(bad):
        params_said = f"every final parameter is wrong but {_join(right)}"
    else:
        params_said = f"{_join(bad)} {'is' if len(bad) == 1 else 'are'} wrong, {_join(right)} agree"
    if statuses["losses"] == "pass":
        steps = exp.shape[0] if exp is not None and exp.ndim == 1 else 0
        return (
            f"every step's loss agrees ({steps} steps), and {params_said}: the last step's update went wrong (no "
            "loss is computed after it), or an earlier one by too little to move a loss past its bound"
        )
    if exp is None or actual is None or np.shape(actual) != exp.shape or exp.ndim != 1:
        return ""
    ok = agree(exp, np.asarray(actual, dtype=np.float64), bound)
    k = int(np.flatnonzero(~ok)[0])  # 0-based: step k + 1's loss, computed before its update
    if k == 0:
        return (
            "the first step's loss is already wrong, before any update: the forward pass or the loss is wrong, "
            f"not the training loop; {params_said}"
        )
    agreed = "step 1's loss agrees" if k == 1 else f"the losses of steps 1 to {k} agree"
    return (
        f"{agreed} and step {k + 1}'s is the first wrong one: step {k}'s update went wrong (its gradients or its "
        f"AdamW step: moments, bias corrections, step count); {params_said}"
    )


def _outputs(op: str, statuses, name: Namer) -> str:
    right = [o for o in statuses if statuses[o] == "pass"]
    wrong = [o for o in statuses if statuses[o] != "pass"]
    if not right:
        return ""
    verb = "agrees" if len(right) == 1 else "agree"
    line = f"{_join([name(o) for o in right])} {verb}; wrong: {_join([name(o) for o in wrong])}"
    if op in FORWARD:
        order = list(ops.get(op).outputs)
        first = min(wrong, key=order.index)
        earlier = [o for o in order[: order.index(first)] if o in statuses]
        if earlier and all(statuses[o] == "pass" for o in earlier):
            agreed = _join([name(o) for o in earlier])
            line += f"; the first wrong one going forward is {name(first)}, computed after {agreed}, which agree"
    return line
