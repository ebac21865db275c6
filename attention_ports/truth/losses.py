"""The losses' exact truth and error bound: ``lm_loss``, the next-token cross-entropy.

**Values.** For each counted position i (its target ``y_i`` not equal to ``ignore_index``), with
``z`` the row of logits and ``p`` the key of the row's largest logit, ``t_j = z_j - z_p`` (exactly
0 at p: a ball minus itself would keep a radius) and::

    L_i = log(sum_j exp(t_j)) - t_{y_i}           (= logsumexp(z) - z_{y_i}, shift invariant)
    loss = (sum over counted i of L_i) / c         c = the number of counted positions

in arb ball arithmetic, so a logit of 1e3 (whose ``exp`` overflows a double) or a row of logits
below -745 (whose ``exp`` underflows) is exact like any other. Every position ignored (c = 0):
the mean over no position is 0 / 0, NaN, as torch's ``cross_entropy`` returns it.

**Bounds (the mixed forward-backward rule of ``bounds``, docs/truth-and-bounds.md, "Losses").**
Each counted position's loss is the classifier's loss rule, unchanged: ``L_i = -log p_{y_i}``
for the softmax ``p`` of the row's logits, however computed (``logsumexp(z) - z_y`` with the
row maximum subtracted inside the log-sum-exp, a log-softmax then the target's entry,
``-log(softmax(z)[y])`` where the target's probability does not underflow). The softmax rule (``bounds.softmax_row``:
the logits exact, each perturbed relatively by ``C_IN u``, the shift ``C_SHIFT u |t_j|``, exp's
``C_EXP u``; unnormalised: the sum's gamma(vocab), the normaliser's ``C_LSE u |lse|`` and the
rest of ``softmax_eps``) gives ``rho_y``, the relative error bound of the target's probability;
then (``bounds.loss``)::

    e_i = rho_y + C_LOG u (|L_i| + |t_y|)

``-log(p_y (1 + rho)) = L - rho + O(rho^2)``: a relative error of p_y is an absolute error of
L_i, which is how a loss near 0 (a target that is its row's clear argmax) is charged about
``vocab u`` absolute however small it is. The ``C_LSE u |lse|`` term is the one that matters at
logits of 1e3: ``lse = max + log(sum)`` rounds at ``|lse| ~ 1e3``, and ``lse - z_y`` keeps that
error whatever the size of L_i.

The mean over the c counted positions is the rule for sums and means of ``bounds``: c - 1
additions in any order (pairwise, sequential, a running mean) and one division, each at the size
of its operands (every L_i >= 0, so no cancellation)::

    e = (sum_i e_i + gamma(c) sum_i (L_i + e_i)) / c

The roundings read ``bounds.U``, ``bounds.C_EXP`` and the rest at call time: the float32 tier
evaluates the same rule at float32's constants (``truth/precision.py``).

**At a storage tier** (bounds.py, "Mixed precision"): the logits are storage values, the loss
rule is float32's, and each position's loss (its target's log-probability) is a declared rounding
point, stored before the mean: ``e_i' = e_i + u_s (L_i + e_i) + tau_s`` (``bounds.storage_point``).
That is torch's CPU ``cross_entropy`` on bfloat16 or float16 logits, measured: its ``log_softmax``
returns storage values, then ``nll_loss`` takes their mean in float32 and stores it (the output's
rounding, the engine's). A kernel that keeps the log-probabilities in float32 is covered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from flint import arb, arb_mat

from attention_ports.truth import bounds, exact
from attention_ports.truth.exact import Graph, InputError, Out, T


def _ignore_index(inputs: Mapping[str, np.ndarray]) -> int | None:
    raw = inputs.get("ignore_index")
    if raw is None:
        return None
    arr = np.asarray(raw)
    value = arr.reshape(()).item() if arr.shape in ((), (1,)) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer():
        raise InputError(f"ignore_index must be one integer token id (0-based); got {arr!r}")
    return int(value)


def _targets(inputs: Mapping[str, np.ndarray], n: int, vocab: int, ignore: int | None) -> list[int]:
    if "targets" not in inputs:
        raise InputError("missing input 'targets'")
    arr = np.asarray(inputs["targets"])
    if arr.shape != (n,):
        raise InputError(f"targets must be a vector of n = {n} token ids (logits {n} x {vocab}); got shape {arr.shape}")
    if arr.dtype.kind not in "iuf" or (arr.dtype.kind == "f" and not np.all(np.isfinite(arr) & (arr == np.round(arr)))):
        raise InputError(f"targets must hold integer token ids; got {arr!r}")
    ids = [int(v) for v in arr.tolist()]
    for i, y in enumerate(ids):
        if y != ignore and not 0 <= y < vocab:
            raise InputError(
                f"targets[{i}] = {y} is neither a token id in [0, {vocab - 1}] nor ignore_index ({ignore})"
            )
    return ids


def position_loss(row: list[arb], y: int, track: bool) -> tuple[arb, arb | None]:
    """One position's exact loss ``logsumexp(row) - row[y]`` and, when ``track``, its error bound."""
    p = max(range(len(row)), key=lambda j: row[j].mid())
    t = [arb(0) if j == p else row[j] - row[p] for j in range(len(row))]
    ex = [x.exp() for x in t]
    total = sum(ex, arb(0))
    value = total.log() - t[y]
    if not track:
        return value, None
    sm = bounds.softmax_row(
        [x / total for x in ex],
        [x.abs_upper() for x in t],
        None,  # the logits are the inputs: exact
        [True] * len(row),
        [x.abs_upper() for x in row],
        (row[p] + total.log()).abs_upper(),
    )
    return value, bounds.loss(sm["rho"][y], value.abs_upper(), t[y].abs_upper())


def mean_error(values: list[arb], errors: list[arb]) -> arb:
    """The error bound of the mean of ``values`` (>= 0) computed from operands off by ``errors``."""
    c = len(values)
    return (
        sum(errors, arb(0)) + bounds.gamma(c) * sum((v + e for v, e in zip(values, errors, strict=True)), arb(0))
    ) / c


def lm_loss(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    z = exact._f64(inputs, "logits", 2)
    n, vocab = z.shape
    ignore = _ignore_index(inputs)
    ids = _targets(inputs, n, vocab, ignore)
    rows = [[arb(v) for v in row] for row in z.tolist()]
    counted = [i for i in range(n) if ids[i] != ignore]
    if not counted:  # the mean over no position: 0 / 0, NaN (as torch), with no bound to apply
        return {"loss": Out(T(arb_mat([[0]]), arb_mat([[0]]) if g.track else None), (), frozenset({0}))}
    per = [position_loss(rows[i], ids[i], g.track) for i in counted]
    values = [v for v, _ in per]
    loss = sum(values, arb(0)) / len(counted)
    e = None
    if g.track:
        # at a storage tier each position's log-probability is stored before the mean (torch's
        # cross_entropy: a stored log_softmax, then the mean in float32; module docstring)
        errs = [bounds.storage_point(v.abs_upper(), err) for v, err in per]  # type: ignore[arg-type]
        e = arb_mat([[mean_error([v.abs_upper() for v in values], errs)]])
    return {"loss": Out(T(arb_mat([[loss]]), e), ())}


exact.register_graph("lm_loss", lm_loss)
