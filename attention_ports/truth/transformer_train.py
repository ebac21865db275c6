"""``gpt_train``'s exact truth and error bounds: a few AdamW steps of the GPT, the trajectory carried.

``steps`` times on one batch: ``gpt_grads``' loss and gradients (``transformer_grads._step``), then
``adamw_step`` on every parameter (moments from 0, step t's bias corrections, decay on every
parameter, Adam's eps 1e-8); outputs each step's pre-update loss and the final parameters
(ports/CONTRACT.md, "gpt_train").

**Values**: the whole trajectory in ball arithmetic at the engine's working precision (every step's
forward, backward and update exact, the balls' radii growing a little a step; the engine raises the
precision until every output certifies).

**Bounds: the parameters carry their error** (docs/truth-and-bounds.md, "gpt_train"), as
``classifier_train``'s carried rule does (``exact._carried_bounds``). After step t a correct
implementation holds parameters ``p'`` with ``|p' - p| <= e_p`` (p the exact trajectory's) and
moments within ``e_m``, ``e_v``; step t + 1 then:

* **forward and backward at perturbed parameters**: gpt_grads' bound pass with the parameters as
  value/bound matrices ``T(p, e_p)`` (their midpoints rounded to ``BOUND_PREC`` bits, that rounding
  added to e_p). A parameter with error meets the other operand's magnitude where it enters: a
  projection ``|x| e_W + e_b`` (``bounds.affine``), a layer norm's gain and bias ``|yhat| e_w +
  e_b`` (``transformer._norm_carrying_params``), an embedding row ``e_wte + e_wpe`` into the
  residual stream, whose errors ``transformer.through`` carries across sublayers through their
  Jacobians (enclosed at the exact parameters: ``|f'(x', p') - f(x, p)| <= |f'(x', p') - f(x', p)|
  + |f(x', p) - f(x, p)|``, the first the sublayer's node-by-node rules on the ball of x with the
  parameters' errors propagated, the second ``|J| e_x``); the backward reads a parameter as its
  enclosure ``p +/- e_p``, a node like the forward's (``Back.param``: the stage argument of
  transformer_grads holds for it as for any node, the bare stage reading the exact value). So the
  computed gradient lies in the bound pass's enclosure, and ``e_g = |enclosure - g|`` with g the
  value pass's exact gradient ball; the step's loss likewise (``losses.mean_error``);
* **the update**, element by element (``carried_update``): ``|P(p', g', m', v') computed - P(p, g,
  m, v)|`` is at most adamw_step's rounding rule evaluated on the balls ``p +/- e_p``, ``g +/- e_g``,
  ``m +/- e_m``, ``v +/- e_v`` (every magnitude at its upper end, every divisor at its lower end;
  where the balls of V reach 0, the denominator's relative rule gives way to an absolute one:
  ``|sqrt(a) - sqrt(b)| <= sqrt(|a - b|)``), plus the exact update's change over the balls:
  ``|1 - lr wd| e_p + |S(g', m', v') - S(g, m, v)|``, the step's change the smaller of its interval
  enclosure and the mean value form ``sum |dS/dz| e_z`` with the derivatives enclosed over the
  balls (Adam's step is nearly insensitive to its gradient: ``dS/dg = lr eps / (|g| + eps)^2`` at
  the first step, which the mean value form keeps and the interval form loses). The moments carry
  ``b1 e_m + (1 - b1) e_g`` and ``b2 e_v + (1 - b2)(2 |g| + e_g) e_g`` plus their roundings.

Every rule is rigorous for the balls it is given; where a carried error leaves the first-order
regime (a layer norm's input, a sublayer's Jacobian over its ball, Adam's denominator) the rules
raise ``bounds.BoundError``: a case whose trajectory drifts that far is refused, not estimated.

What is loose: ``grads.b_k`` is exactly 0 and a correct implementation's is rounding noise of size
e_g, which Adam turns into a step of up to ``lr e_g / eps``; the exact loss does not depend on b_k
(the softmax ignores a shift common to a row), but the rules carry that error into the scores as
any bias error, which dominates the later steps' loss bounds (docs: the measured ratios).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flint import arb, arb_mat

from attention_ports.reference import transformer_train as reference_train
from attention_ports.spec.ops import BLOCK_PARAMS, GPT_PARAMS
from attention_ports.truth import arbmat as am
from attention_ports.truth import bounds, exact, losses, optim, transformer, transformer_grads
from attention_ports.truth.exact import Graph, InputError, Out, T

Params = dict[str, list[arb_mat]]  # per parameter: one matrix, or one per block (as gpt_grads' grads)


def _options(options: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
    """The number of steps and Adam's scalars as balls (adamw_step's checks; eps is Adam's 1e-8)."""
    try:
        steps = reference_train.check_steps(options.get("steps"))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    adam = {k: options.get(k) for k in ("lr", "beta1", "beta2", "weight_decay")}
    o = optim._options({"step": 1, **adam, "eps": reference_train.ADAM_EPS})
    return steps, {
        "b1": arb(o["beta1"]),
        "b2": arb(o["beta2"]),
        "eps": arb(o["eps"]),
        "lr": arb(o["lr"]),
        "weight_decay": arb(o["weight_decay"]),
    }


def _corrections(o: dict[str, Any], t: int) -> dict[str, Any]:
    c1, kappa1 = optim.correction(o["b1"], t)
    c2, kappa2 = optim.correction(o["b2"], t)
    return {**o, "c1": c1, "kappa1": kappa1, "c2": c2, "kappa2": kappa2, "k": 1 - o["lr"] * o["weight_decay"]}


def _gi(base: transformer.GptInputs, p: Params, e: dict[str, list[arb_mat | None]] | None) -> transformer.GptInputs:
    def t(name: str, i: int = 0) -> T:
        return T(p[name][i], None if e is None else e[name][i])

    blocks = [{n: t(n, b) for n in BLOCK_PARAMS} for b in range(len(base.blocks))]
    return transformer.GptInputs(
        base.ids, t("wte"), t("wpe"), base.h, base.eps, base.form, blocks, t("lnf_w"), t("lnf_b"), t("w_head")
    )


def _initial(gi: transformer.GptInputs) -> Params:
    p: Params = {"wte": [gi.wte.v], "wpe": [gi.wpe.v], "lnf_w": [gi.lnf_w.v], "lnf_b": [gi.lnf_b.v]}
    p["w_head"] = [gi.head.v]
    for name in BLOCK_PARAMS:
        p[name] = [b[name].v for b in gi.blocks]
    return p


def _update(p: arb, g: arb, m: arb, v: arb, o: dict[str, Any]) -> tuple[arb, arb, arb]:
    """One element's exact AdamW update (adamw_step's values)."""
    m_new = o["b1"] * m + (1 - o["b1"]) * g
    v_new = o["b2"] * v + (1 - o["b2"]) * g * g
    q = (v_new / o["c2"]).sqrt() if v_new != 0 else arb(0)
    s = o["lr"] * m_new / (o["c1"] * (q + o["eps"]))
    return p * o["k"] - s, m_new, v_new


def _nonneg(x: arb) -> arb:
    """The ball's part at or above 0 (a second moment is a sum of squares); its square root is defined."""
    return x.nonnegative_part()


def _pointwise_denominator_error(q_ball: arb, d_ball: arb, o: dict[str, Any]) -> arb:
    """``E_D`` from the computed V's error relative to the implementation's own V' (not to the
    ball's lower end, which may be 0): with ``v' >= 0`` every term of ``b2 v' + (1 - b2) g'^2`` is
    non-negative, so adamw_step's ``E_V`` (``optim.moment_error``) is at most ``(gamma(5) + u +
    2u (1 - b2) / b2) V'`` (the last term absent for b2 = 0, whose ``1 - b2`` is exact); then
    adamw_step's denominator rule with that relative error, Q at the ball's upper end."""
    u, g3, kappa2, b2 = bounds.U, bounds.gamma(3), o["kappa2"], o["b2"]
    rel = bounds.gamma(5) + u + (2 * u * (1 - b2) / b2 if b2 > 0 else 0)
    ratio = (rel + kappa2) / (1 - kappa2)
    sigma = ratio / 2 + ratio * ratio
    theta = sigma + g3 * (1 + sigma)
    qa = q_ball.abs_upper()
    return theta * qa + u * (d_ball.abs_upper() + theta * qa)


def carried_update(
    p: arb, g: arb, m: arb, v: arb, e_p: arb, e_g: arb, e_m: arb, e_v: arb, o: dict[str, Any]
) -> tuple[arb, arb, arb]:
    """The error bounds of the updated (param, m, v) of one element whose inputs carry errors
    (the module's rule): the rounding rule over the balls plus the exact update's change there."""
    b1, b2 = o["b1"], o["b2"]
    pb, gb, mb = p + arb(0, e_p), g + arb(0, e_g), m + arb(0, e_m)
    vb = _nonneg(v + arb(0, e_v))
    g2 = _nonneg(gb * gb)
    m_ball = b1 * mb + (1 - b1) * gb
    v_ball = _nonneg(b2 * vb + (1 - b2) * g2)
    round_m = optim.moment_error(b1, mb, gb, m_ball, 4)
    round_v = optim.moment_error(b2, vb, g2, v_ball, 5)
    e_m_new = b1 * e_m + (1 - b1) * e_g + round_m
    e_v_new = b2 * e_v + (1 - b2) * (2 * g.abs_upper() + e_g) * e_g + round_v
    q_ball = _nonneg(v_ball / o["c2"]).sqrt() if v_ball != 0 else arb(0)
    d_ball = q_ball + o["eps"]
    s_ball = o["lr"] * m_ball / (o["c1"] * d_ball)
    e_d = _pointwise_denominator_error(q_ball, d_ball, o)
    try:
        e_d = e_d.min(optim.denominator_error(v_ball, round_v, q_ball, d_ball, o["kappa2"]))
    except bounds.BoundError:
        pass  # V's balls reach 0: the pointwise rule alone
    rounding = optim.step_error(pb, m_ball, round_m, d_ball, e_d, s_ball, o["k"], o)
    # the exact step's change over the balls: interval, or mean value where Q stays off 0
    p_new, _, _ = _update(p, g, m, v, o)
    s_exact = p * o["k"] - p_new
    change = (s_ball - s_exact).abs_upper()
    if q_ball.abs_lower() > 0:
        ds_dm = o["lr"] / (o["c1"] * d_ball)
        ds_dv = -o["lr"] * m_ball / (o["c1"] * d_ball * d_ball * 2 * o["c2"] * q_ball)
        ds_dg = ds_dm * (1 - b1) + ds_dv * (1 - b2) * 2 * gb
        mean_value = ds_dg.abs_upper() * e_g + (ds_dm * b1).abs_upper() * e_m + (ds_dv * b2).abs_upper() * e_v
        change = change.min(mean_value)
    return o["k"].abs_upper() * e_p + change + rounding, e_m_new, e_v_new


@dataclass
class Trajectory:
    """The exact trajectory: every step's parameters, moments, per-position losses and gradients."""

    params: list[Params]  # before each step, then the final ones
    moments: list[tuple[Params, Params]]  # (m, v) before each step
    losses: list[list[arb]]
    grads: list[Params]


def trajectory(gi: transformer.GptInputs, targets: list[int], counted: list[int], steps: int, o) -> Trajectory:
    """The steps in balls at the current working precision."""
    g = Graph(track=False)
    p = _initial(gi)
    m = {n: [am.zeros(*am.shape(x)) for x in ms] for n, ms in p.items()}
    v = {n: [am.zeros(*am.shape(x)) for x in ms] for n, ms in p.items()}
    traj = Trajectory([], [], [], [])
    for t in range(1, steps + 1):
        ot = _corrections(o, t)
        step = transformer_grads._step(g, _gi(gi, p, None), targets, counted)
        traj.params.append(p)
        traj.moments.append((m, v))
        traj.losses.append(step.losses)
        traj.grads.append(step.grads)
        new_p: Params = {n: [] for n in GPT_PARAMS}
        new_m: Params = {n: [] for n in GPT_PARAMS}
        new_v: Params = {n: [] for n in GPT_PARAMS}
        for n in GPT_PARAMS:
            for pm, gm, mm, vm in zip(p[n], step.grads[n], m[n], v[n], strict=True):
                outs = [
                    _update(*z, ot) for z in zip(pm.entries(), gm.entries(), mm.entries(), vm.entries(), strict=True)
                ]
                shape = am.shape(pm)
                for dest, k in ((new_p, 0), (new_m, 1), (new_v, 2)):
                    dest[n].append(am.build(*shape, [x[k] for x in outs]))
        p, m, v = new_p, new_m, new_v
    traj.params.append(p)
    return traj


def _bounds(
    gi: transformer.GptInputs, traj: Trajectory, targets: list[int], counted: list[int], o
) -> tuple[list[arb], dict[str, list[arb_mat]]]:
    """Each step's loss bound and the final parameters' bounds (the module's rule)."""
    g = Graph(track=True)
    zero = {n: [am.zeros(*am.shape(x)) for x in ms] for n, ms in traj.params[0].items()}
    e_p, e_m, e_v = zero, zero, zero
    loss_bounds: list[arb] = []
    for t, (p, (m, v), exact_losses, grads) in enumerate(
        zip(traj.params, traj.moments, traj.losses, traj.grads, strict=False), start=1
    ):
        # the parameters rounded to the bound pass's precision, that rounding added to their error
        mids = {n: [am.emap(x, lambda z: (+z.mid()).mid()) for x in ms] for n, ms in p.items()}
        errs = {
            n: [e + am.emap(x - c, lambda z: z.abs_upper()) for e, x, c in zip(e_p[n], p[n], mids[n], strict=True)]
            for n in p
        }
        carried = None if all(all(z == 0 for z in e.entries()) for es in errs.values() for e in es) else errs
        enc = transformer_grads._step(g, _gi(gi, mids, carried), targets, counted, b_k_noise=True)
        per = [(x - y).abs_upper() for x, y in zip(enc.losses, exact_losses, strict=True)]
        loss_bounds.append(losses.mean_error([x.abs_upper() for x in exact_losses], per))
        ot = _corrections(o, t)
        new_p: dict[str, list[arb_mat]] = {n: [] for n in GPT_PARAMS}
        new_m: dict[str, list[arb_mat]] = {n: [] for n in GPT_PARAMS}
        new_v: dict[str, list[arb_mat]] = {n: [] for n in GPT_PARAMS}
        for n in GPT_PARAMS:
            for i, pm in enumerate(p[n]):
                e_g = am.emap(enc.grads[n][i] - grads[n][i], lambda z: z.abs_upper())
                cols = zip(
                    pm.entries(),
                    grads[n][i].entries(),
                    m[n][i].entries(),
                    v[n][i].entries(),
                    e_p[n][i].entries(),
                    e_g.entries(),
                    e_m[n][i].entries(),
                    e_v[n][i].entries(),
                    strict=True,
                )
                outs = [carried_update(*z, ot) for z in cols]
                shape = am.shape(pm)
                for dest, k in ((new_p, 0), (new_m, 1), (new_v, 2)):
                    dest[n].append(am.build(*shape, [x[k] for x in outs]))
        e_p, e_m, e_v = new_p, new_m, new_v
    return loss_bounds, e_p


def gpt_train(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    gi = transformer.gpt_inputs(inputs, options, "gpt_train")
    targets, counted = transformer_grads._targets(inputs, len(gi.ids), gi.wte.shape[0])
    steps, o = _options(options)
    traj = trajectory(gi, targets, counted, steps, o)
    c = len(counted)
    loss_values = [sum(ls, arb(0)) / c for ls in traj.losses]
    shapes = {n: np.shape(inputs[f"params.{n}"]) for n in GPT_PARAMS}
    final = {n: am.vcat(ms) for n, ms in traj.params[-1].items()}
    losses_m = am.build(1, steps, loss_values)
    if not g.track:
        out = {"losses": Out(T(losses_m), (steps,))}
        out.update({f"params.{n}": Out(T(final[n]), shapes[n]) for n in GPT_PARAMS})
        return out
    loss_bounds, e_p = _bounds(gi, traj, targets, counted, o)
    out = {"losses": Out(T(losses_m, am.build(1, steps, loss_bounds)), (steps,))}
    out.update({f"params.{n}": Out(T(final[n], am.vcat(e_p[n])), shapes[n]) for n in GPT_PARAMS})
    return out


exact.register_graph("gpt_train", gpt_train)
