"""``gpt_grads``' exact truth and error bounds: the loss of a GPT step and every parameter's gradient.

``loss = lm_loss(gpt_forward(tokens, params), targets, ignore_index)`` and ``d loss / d p`` for
every p of ``ops.GPT_PARAMS`` (llm.c's ``test_gpt2`` step). The forward is ``transformer``'s
graph, its nodes kept (``transformer.gpt_nodes``); the backward is reverse mode written out:

* **loss**: ``d logits_i = (softmax(logits_i) - onehot(y_i)) / c`` for each of the c counted
  positions, rows of ignored positions exactly 0;
* **LM head** ``logits = m W``: ``dW = m^T dz``, ``dm = dz W^T``;
* **layer norm** (``y = yhat w + b``, ``yhat = (x - mu) r``, ``r = 1 / sqrt(v + eps)``):
  ``dw = colsum(dy yhat)``, ``db = colsum(dy)``, ``dx_j = r (g_j - mean(g) - yhat_j mean(g yhat))``
  with ``g = dy w``;
* **feed-forward**: ``dW_2 = gelu(h)^T dy``, ``db_2 = colsum(dy)``, ``dh = (dy W_2^T) gelu'(h)``,
  ``dW_1 = m^T dh``, ``db_1 = colsum(dh)``, ``dm = dh W_1^T``;
* **causal multi-head attention** per head (scale s): ``dA = dz V^T``, ``dV = A^T dz``,
  ``dS = A * (dA - rowsum(dA * A))`` (a removed key has A = 0, so dS = 0 there), ``dq = s dS k``,
  ``dk = s dS^T q``; then ``dW_q = a^T dq`` (k, v alike), ``da = dq W_q^T + dk W_k^T + dv W_v^T``.
  ``grads.b_k`` is exactly 0: every row of dS sums to 0 (the softmax ignores a shift common to a
  row, and the key bias shifts row i by ``q_i . b_k``); it is stored as the exact 0;
* **residual adds** pass the gradient on and add the branch's: ``dx = dy + d(branch)``;
* **embeddings**: ``grads.wte[t] = sum over the positions i holding token t of dx_i`` (a token
  that occurs twice gets both: an accumulation, not an assignment), ``grads.wpe[i] = dx_i`` for
  i < n; every other row exactly 0.

**Values**: the forward and the backward above in arb ball arithmetic at the engine's working
precision. A query with one key (the first position under the causal mask) has ``A = 1`` exactly
and ``dS`` exactly 0 (``1 (dA - dA)``): stored as the exact 0, as for ``grads.b_k``.

**Bounds: enclosures.** A correct implementation computes every node of the step from computed
operands. The bound pass therefore runs the same backward on *enclosures*: balls that hold every
value a correct implementation may compute at that node, each backward operation's own rounding
added to the radius of its result, charged by the mixed forward-backward rule of ``bounds`` at
the magnitudes of its operands (the balls' upper ends). By induction over the graph every computed
gradient lies in its final ball, whatever the implementation's association, and the bound of a
gradient is ``|ball - exact|`` (bound pass: ``BOUND_PREC`` bits). The forward's enclosures:

* every sublayer's nodes are those of ``transformer.through``'s own pass: the sublayer run on
  the balls ``x +/- e`` of its input (x carrying the forward's bound e, itself carried across
  sublayers through their Jacobians), so a node's value is a ball holding its exact value at every
  x' a correct implementation may hold, and its bound e_node that implementation's rounding there:
  the enclosure is ``value +/- e_node``. The attention weights: ``A +/- e_A`` (the softmax rule,
  the scores' errors its logit errors; a removed key exactly 0);
* a layer norm's backward operands (``NormNode.stats``): ``yhat`` over the input's balls widened by
  the exact-input rule's bound of ``c r`` (``norms.layer_norm_row``), ``r`` widened by its relative
  error ``theta`` (``norms.rstd_error``);
* the logits' softmax ``p +/- e_p`` (the softmax rule with the logits' bound as logit errors), and
  each position's loss over the logits' balls, widened by ``lm_loss``'s rule there
  (``losses.position_loss``); the loss's mean is ``losses.mean_error``.

**Stages: the entering error through the Jacobian.** Run as plain interval arithmetic, an error
of the gradient meets absolute values at every node (``|W|`` at each projection, the layer norm's
three terms separately) and compounds, measured ~10^8 over two blocks. So the backward runs in
stages, one per sublayer (the head with the final norm; each block's feed-forward, then its
attention), and every quantity of a stage is a pair (``Pair``): the backward is linear in the
gradient ``dy' = c + delta`` entering the stage (c the midpoints of its enclosure, exact;
``|delta| <= e``), so a computed node is ``a' + b'`` with ``a'`` in ``a``, the stage run from c
with the roundings added, and ``b'`` the exact image of delta, in ``b``, the stage run on the
balls ``[-e, e]``. Each rounding is charged at ``|a| + |b|``, which bounds the operand an
implementation rounds (its own rounding errors included: they are in ``a``). At the stage's end
the input gradient is ``a' + b'``. Were the forward nodes exact at the computed input x', b'
would be ``J(x')^T delta``, J the sublayer's Jacobian (the residual included), bounded by
``|J|^T e`` with ``|J|`` enclosed over x's balls, the one ``through`` computed for the forward.
The nodes an implementation reads carry their own roundings (``n' = n(x') + eps``), which move
b' by ``F(n', delta) - F(n(x'), delta)``; b' is a polynomial in the nodes with the backward's
structure, so that is at most ``F_abs(|n| + |eps|, e) - F_abs(|n|, e)`` (all its terms' absolute
values), nondecreasing in ``|n|``: the radius of ``b`` from the nodes' enclosures minus the radius
of ``b`` from their value balls alone (the *bare* stage; a b-run is a polynomial of balls
centred at 0, whose radius is that F_abs). gelu' enters as a node ``gelu'(h(x')) +/-
GELU_LIPSCHITZ e_h``. So the input gradient's enclosure is
``a +/- min(|b|, |J|^T e + |b| - |bare b|)`` (``Back.settle``); the parameters' gradients of the
stage are ``a +/- |b|``. Measured: two blocks' first
gradients go from 1e-3 to 1e-6 relative.

**The backward's roundings** (u the unit roundoff, ``gamma(k) = k u / (1 - k u)``, |.| entrywise
upper ends of the enclosures):

* products (every ``X^T dY``, ``dY W^T``) with inner dimension k: ``gamma(k) |X||W|`` (any order,
  FMA or not); the attention's ``dS k`` and ``dS^T q`` with ``gamma(n + SCORE_EXTRA)`` (the scale,
  applied to dS, to the product, or as sqrt(s) to q and k); ``da = dq W_q^T + dk W_k^T + dv W_v^T``
  with ``gamma(3 d + 2)`` over the three products' magnitudes (one fused product of inner 3d, as a
  fused QKV weight gives, or three and two adds);
* column sums (bias gradients, n rows) ``gamma(n) colsum|dY|``; ``colsum(dy yhat)``
  ``gamma(n + 1)``; a repeated token's ``wte`` row, m positions: ``gamma(m - 1)`` times the sum of
  their magnitudes; residual adds ``u |sum|``;
* ``d logits``: ``(p - onehot) / c`` rounds at ``(|p| + onehot) / c`` (``gamma(3)``: torch's
  ``-onehot / c - p (-1 / c)`` rounds at each term, not at their difference, which is tiny where
  p_y is near 1);
* the softmax backward ``dS``: ``gamma(n + 3) |A| (|dA| + rowsum(|A||dA|))`` (the row sum, the
  subtraction and the product, factored or distributed as llm.c's ``sum_l A_j ([j = l] - A_l)
  dA_l``), plus ``gamma(n + d_h + 2) |A| rowsum(|dz| (|A||V|))``: a flash kernel's row sum
  ``rowsum(dz * z)``, equal in exact arithmetic, rounds at the output's magnitudes;
* gelu's derivative ``gelu'(h)`` (evaluated over h's ball: the derivative of every h' a correct
  implementation holds) times ``dy``: ``u |product| + C_GELU_GRAD u |dy| M(h)``, M the sum of the
  magnitudes of the derivative's terms, the cancelling ``1 - tanh^2`` taken as ``1 + tanh^2`` and
  each term grown by ``1 + h^2`` (the exponent's or the cubic's rounding, amplified by h^2):
  erf form ``M = (1 + |erf(h / sqrt 2)|) / 2 + |h| phi(h) (1 + h^2)``, tanh form
  ``M = (1 + |t|) / 2 + |h| / 2 (1 + t^2) k (1 + 3 c h^2) (1 + h^2)``;
* the layer norm's ``dx``: ``gamma(n + C_LN_BACK) r (|g_j| + mean|g| + xr_j mean(|g| xr))`` with
  ``xr_j = (|x_j| + |mu|) r``. The magnitudes are x-space's, not yhat's: torch's kernel computes
  ``dx = r g + b x + c'`` with ``b = (mean(g) mu - mean(g x)) r^3``, whose terms cancel to the
  yhat form where the row's mean dominates; C_LN_BACK counts the two means' division, the
  products, the subtractions, r^3 and the final scale.

What is left loose: the entering error's image within a stage and every rounding are still
interval arithmetic (absolute values at every node), and the forward's own bound is carried in;
the measured worst fractions and the bound's relative size: docs/truth-and-bounds.md,
"gpt_grads".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from flint import arb, arb_mat

from attention_ports.spec.ops import BLOCK_PARAMS, GPT_PARAMS
from attention_ports.truth import activations, bounds, exact, losses, transformer
from attention_ports.truth import arbmat as am
from attention_ports.truth.exact import Graph, InputError, Out, T
from attention_ports.truth.transformer import NormNode, enclose

C_LN_BACK = 10  # roundings of a layer norm's dx beyond its means' n: products, subtractions, r^3, scale
C_GELU_GRAD = 16  # ulps of gelu'(h) relative to M(h): erf or tanh (C_EXP), exp, the terms' sums
# |gelu''| <= 1: erf form phi(x) |2 - x^2| <= 2 phi(0) = 0.798, the tanh form's <= 0.86 (interval check in tests)
GELU_LIPSCHITZ = 1
SOFTMAX_BACK = 3  # roundings of dS beyond the row sum's n: the product in it, the subtraction, A times


def widen(m: arb_mat, rad: arb_mat) -> arb_mat:
    """Each entry's ball grown by ``rad``."""
    return am.build(*am.shape(m), [x + arb(0, r) for x, r in zip(m.entries(), rad.entries(), strict=True)])


@dataclass
class Pair:
    """A backward quantity of one stage, linear in the gradient that entered the stage at c +/- e:
    ``a`` its image of c with the stage's roundings added (and the forward's enclosures), ``b``
    the image of every error within e, exact (None: no error; the value pass)."""

    a: arb_mat
    b: arb_mat | None = None

    def map(self, f: Callable[[arb_mat], arb_mat]) -> Pair:
        return Pair(f(self.a), None if self.b is None else f(self.b))

    def mag(self) -> arb_mat:
        """Upper bounds of the computed operand's magnitudes: ``|a| + |b|``."""
        return am.eabs(self.a) if self.b is None else am.eabs(self.a) + am.eabs(self.b)

    def enclosure(self) -> arb_mat:
        return self.a if self.b is None else widen(self.a, am.eabs(self.b))


def hcat(pairs: list[Pair]) -> Pair:
    return Pair(am.hcat([p.a for p in pairs]), None if pairs[0].b is None else am.hcat([p.b for p in pairs]))


@dataclass
class Back:
    """The backward's arithmetic: exact (``track`` False), or on enclosures with every operation's
    rounding added to ``a``'s radius, charged at the operands' ``|a| + |b|`` (module docstring)."""

    track: bool
    rounded: bool = True  # forward nodes widened by their rounding bounds (False: the bare stage)
    # grads.b_k bounded as rounding noise too (``b_k_noise``): gpt_train's, whose Adam step
    # divides that gradient by eps; gpt_grads' own bound is left as it is (issue 18)
    b_k_noise: bool = False

    def node(self, t: T) -> arb_mat:
        """A forward node as the backward reads it: its enclosure, or (bare) its value balls."""
        return enclose(t) if self.rounded else t.v

    def param(self, t: T) -> arb_mat:
        """A parameter as the backward reads it: its value, or, where it carries an error bound
        (gpt_train's parameters after a step), its enclosure, a node like any other (``node``)."""
        return self.node(t)

    def charge(self, y: Pair, rad: Callable[[], arb_mat]) -> Pair:
        if self.track:
            y.a = widen(y.a, rad())
        return y

    def mm(self, x: Pair, w: arb_mat, extra: int = 0) -> Pair:
        """``x w``, w a forward quantity (an enclosure) or a parameter."""
        return self.charge(x.map(lambda z: z * w), lambda: bounds.gamma(w.nrows() + extra) * (x.mag() * am.eabs(w)))

    def lmm(self, f: arb_mat, x: Pair) -> Pair:
        """``f x``, f a forward quantity."""
        return self.charge(x.map(lambda z: f * z), lambda: bounds.gamma(f.ncols()) * (am.eabs(f) * x.mag()))

    def mm_sum(self, pairs: list[tuple[Pair, arb_mat]]) -> Pair:
        """``sum_i X_i W_i``: one product of the side-by-side operands (a fused QKV weight), or one
        each and the adds."""

        def f(part: str) -> arb_mat | None:
            terms = [getattr(x, part) for x, _ in pairs]
            if terms[0] is None:
                return None
            out = terms[0] * pairs[0][1]
            for t, (_, w) in zip(terms[1:], pairs[1:], strict=True):
                out = out + t * w
            return out

        def rad() -> arb_mat:
            mag = pairs[0][0].mag() * am.eabs(pairs[0][1])
            for x, w in pairs[1:]:
                mag = mag + x.mag() * am.eabs(w)
            inner = sum(w.nrows() for _, w in pairs)
            return bounds.gamma(inner + len(pairs) - 1) * mag

        a = f("a")
        assert a is not None
        return self.charge(Pair(a, f("b")), rad)

    def colsum(self, x: Pair, extra: int = 0) -> arb_mat:
        """Column sums (a bias gradient), as an enclosure."""
        y = self.charge(x.map(am.colsum), lambda: bounds.gamma(x.a.nrows() + extra) * am.colsum(x.mag()))
        return y.enclosure()

    def add(self, x: Pair, y: Pair) -> Pair:
        out = Pair(x.a + y.a, None if x.b is None else x.b + y.b)
        return self.charge(out, lambda: bounds.U * out.mag())

    def settle(self, out: Pair, bare: Pair, entered: Pair, jac: arb_mat | None) -> Pair:
        """The end of a stage: the enclosure of the gradient it computed, restarted as a point and
        its error for the next stage. The error's image is ``|b|``, or ``|J|^T e`` plus what the
        forward nodes' roundings add to it (``|b| - |bare b|``), where the sublayer's Jacobian is
        known: the smaller of the two, entrywise (module docstring, "Stages")."""
        if not self.track or out.b is None:
            return out
        spread = am.eabs(out.b)
        if jac is not None and entered.b is not None:
            e = am.eabs(entered.b)
            through = jac * am.build(e.nrows() * e.ncols(), 1, e.entries())
            low = 1 - arb(2) ** -100  # |bare b| is an upper bound, above the exact one by far less
            spread = am.build(
                *am.shape(spread),
                [
                    x.min(t + (x - y * low).max(arb(0)))
                    for x, t, y in zip(spread.entries(), through.entries(), am.eabs(bare.b).entries(), strict=True)
                ],
            )
        return restart(widen(out.a, spread))


def restart(ball: arb_mat) -> Pair:
    """A stage's entering gradient: its balls' midpoints (exact) and the error around them."""
    mids = [arb(x.mid()) for x in ball.entries()]
    errs = [arb(0, (x - c).abs_upper()) for x, c in zip(ball.entries(), mids, strict=True)]
    return Pair(am.build(*am.shape(ball), mids), am.build(*am.shape(ball), errs))


def _t(m: arb_mat) -> arb_mat:
    return m.transpose()


def layer_norm_back(bk: Back, node: NormNode, dy: Pair, w: T) -> tuple[Pair, arb_mat, arb_mat]:
    """(dx, dw, db) of ``y = yhat w + b`` (module docstring)."""
    yhat_rows, rs, xrs = node.stats(bk.rounded)
    n_rows, n = am.shape(dy.a)
    yhat = am.build(n_rows, n, [y for row in yhat_rows for y in row])
    d_w = bk.colsum(dy.map(lambda z: am.emul(z, yhat)), extra=1)
    d_b = bk.colsum(dy)
    g = dy.map(lambda z: am.emul(z, am.bcast_rows(bk.param(w), n_rows)))

    def dx_of(gm: arb_mat) -> arb_mat:
        out: list[arb] = []
        for gi, yi, r in zip(am.rows_of(gm), yhat_rows, rs, strict=True):
            m1 = sum(gi, arb(0)) / n
            m2 = sum((a * b for a, b in zip(gi, yi, strict=True)), arb(0)) / n
            out.extend(r * (gj - m1 - yj * m2) for gj, yj in zip(gi, yi, strict=True))
        return am.build(n_rows, n, out)

    def rad() -> arb_mat:
        out: list[arb] = []
        for ga, xr, r in zip(am.rows_of(g.mag()), xrs, rs, strict=True):
            mean_g = sum(ga, arb(0)) / n
            mean_gx = sum((a * b for a, b in zip(ga, xr, strict=True)), arb(0)) / n
            scale = bounds.gamma(n + C_LN_BACK) * r.abs_upper()
            out.extend(scale * (a + mean_g + b * mean_gx) for a, b in zip(ga, xr, strict=True))
        return am.build(n_rows, n, out)

    return bk.charge(g.map(dx_of), rad), d_w, d_b


def _gelu_magnitude(h: arb, form: str) -> arb:
    """M(h): the magnitudes of gelu'(h)'s terms (module docstring)."""
    grow = 1 + h * h
    if form == "tanh":
        k, c = (2 / arb.pi()).sqrt(), activations._cubic()
        t = (k * (h + c * h * h * h)).tanh()
        return ((1 + t.abs_upper()) / 2 + h.abs_upper() / 2 * (1 + t * t) * k * (1 + 3 * c * h * h) * grow).abs_upper()
    erf = (h / arb(2).sqrt()).erf()
    phi = (-(h * h) / 2).exp() / (2 * arb.pi()).sqrt()
    return ((1 + erf.abs_upper()) / 2 + h.abs_upper() * phi * grow).abs_upper()


def gelu_back(bk: Back, h: T, dy: Pair, form: str) -> Pair:
    """``dy gelu'(h)`` entrywise, h the pre-activations' node: gelu' over its value balls, widened
    by ``GELU_LIPSCHITZ`` times its rounding bound (``|gelu''| <= GELU_LIPSCHITZ``)."""
    der = am.build(*h.shape, [activations._derivative(x, form) for x in h.v.entries()])
    if bk.rounded and h.e is not None:
        der = widen(der, GELU_LIPSCHITZ * h.e)
    out = dy.map(lambda z: am.emul(z, der))

    def rad() -> arb_mat:
        u = bounds.U
        mags = [_gelu_magnitude(x, form) for x in bk.node(h).entries()]
        prod, dm = out.mag().entries(), dy.mag().entries()
        return am.build(*h.shape, [u * p + C_GELU_GRAD * u * d * m for p, d, m in zip(prod, dm, mags, strict=True)])

    return bk.charge(out, rad)


def softmax_back(bk: Back, a: arb_mat, d_a: Pair, dz: Pair, v: arb_mat) -> Pair:
    """``dS = A * (dA - rowsum(dA * A))`` under the causal mask: the first query's one key has the
    weight exactly 1, its row of dS is exactly 0."""
    n = a.ncols()

    def ds_of(m: arb_mat) -> arb_mat:
        ds = am.emul(a, m - am.bcast_cols(am.rowsum(am.emul(m, a)), n))
        return am.build(n, n, [am.ZERO] * n + ds.entries()[n:])

    def rad() -> arb_mat:
        aa, daa = am.eabs(a), d_a.mag()
        out = bounds.gamma(n + SOFTMAX_BACK) * am.emul(aa, daa + am.bcast_cols(am.rowsum(am.emul(aa, daa)), n))
        flash = am.rowsum(am.emul(dz.mag(), aa * am.eabs(v)))  # rowsum(|dz| |z|), |z| <= |A||V|
        return out + bounds.gamma(n + dz.a.ncols() + 2) * am.emul(aa, am.bcast_cols(flash, n))

    return bk.charge(d_a.map(ds_of), rad)


def _centred(bk: Back, m: arb_mat, rows: bool) -> arb_mat:
    """The value pass's exact zeros: a product with a factor whose rows (``rows`` False: columns)
    sum to 0, ``dS k`` (rows of dS), ``dz W_head^T`` (rows of d logits), ``dz V^T`` before dS,
    is unchanged when k's rows (W_head's columns, V's rows) are shifted by a common vector; shifted
    by the first, a factor with equal rows gives an exact 0, where a ball would keep a radius that
    no precision certifies as 0. The bound pass keeps the computed operands (whose sums are not 0)."""
    if bk.track:
        return m
    e = m.entries()
    r, c = am.shape(m)
    if rows:
        return am.build(r, c, [e[i * c + j] - e[j] for i in range(r) for j in range(c)])
    return am.build(r, c, [e[i * c + j] - e[i * c] for i in range(r) for j in range(c)])


def attention_back(
    bk: Back, att: transformer.AttentionNodes, d_cat: Pair, h: int
) -> tuple[Pair, Pair, Pair, arb_mat | None]:
    """(dq, dk, dv) of causal multi-head attention, from the gradient of the heads' concatenation,
    and (``bk.b_k_noise``) the bound ``b_k_noise`` of the computed grads.b_k."""
    d = d_cat.a.ncols()
    dh = d // h
    s = arb(dh).rsqrt()
    q, k, v = bk.node(att.q), bk.node(att.k), bk.node(att.v)
    dqs, dks, dvs, noise = [], [], [], []
    for i in range(h):
        lo, hi = i * dh, (i + 1) * dh
        a = bk.node(att.heads.weights[i])
        dz = d_cat.map(lambda m, lo=lo, hi=hi: am.take_cols(m, lo, hi))
        qi, ki, vi = (am.take_cols(m, lo, hi) for m in (q, k, v))
        d_a = bk.mm(dz, _t(_centred(bk, vi, rows=True)))
        dvs.append(bk.lmm(_t(a), dz))
        ds = softmax_back(bk, a, d_a, dz, vi)
        dq = bk.mm(ds, _centred(bk, ki, rows=True), bounds.SCORE_EXTRA).map(lambda m: m * s)
        if att.key_shift is not None and bk.track and bk.rounded:
            dq = _key_shift(dq, ds, am.take_cols(att.key_shift, lo, hi), s)
        dqs.append(dq)
        dks.append(bk.mm(ds.map(_t), qi, bounds.SCORE_EXTRA).map(lambda m: m * s))
        if bk.b_k_noise and bk.track and bk.rounded:
            shift = None if att.key_shift is None else am.take_cols(att.key_shift, lo, hi)
            noise.append(b_k_noise(a, d_a, dz, vi, qi, ki, ds, dks[-1], s, shift))
    return hcat(dqs), hcat(dks), hcat(dvs), (am.hcat(noise) if noise else None)


def b_k_noise(
    a: arb_mat,
    d_a: Pair,
    dz: Pair,
    v: arb_mat,
    q: arb_mat,
    k: arb_mat,
    ds: Pair,
    dk: Pair,
    s: arb,
    shift: arb_mat | None,
) -> arb_mat:
    """One head's bound on the computed ``grads.b_k = colsum(dk')`` (1 x d_head), whose exact value
    is 0: ``colsum(dk') = s sum_j (rowsum_j dS') q'_j`` plus the products' and the column sum's
    roundings, and a computed dS' has rows that sum to rounding noise, whatever the accuracy of the
    weights A' it is made from, as long as one A' serves the row sum and the product: ``sum_i
    A'_ji (dA'_ji - r'_j) = (sum_i A'_ji dA'_ji - r'_j) + r'_j (1 - sum_i A'_ji)``, the first the row
    sum's and the entries' roundings (or a flash kernel's ``rowsum(dz * z)``: ``softmax_back``'s
    terms, summed over the row), the second the softmax's normalisation, ``|1 - sum A'| <=
    softmax_eps(n) + C_LSE u |lse|`` (the softmax rule's unnormalised error, |lse| <= max |score| +
    log n, the scores grown by a key shift's ``|q| delta``). Magnitudes: the enclosures' upper ends."""
    n = a.ncols()
    aa, daa, qa, s_up = am.eabs(a), d_a.mag(), am.eabs(q), s.abs_upper()
    r = am.rowsum(am.emul(aa, daa))  # |r_j| <= sum_i |A_ji| |dA_ji|   (n x 1)
    mass = am.rowsum(aa)
    flash = am.rowsum(am.emul(dz.mag(), aa * am.eabs(v)))
    scores = (qa * am.eabs(k).transpose()) * s_up
    grown = (qa * shift.transpose()) * s_up if shift is not None else None
    rows: list[arb] = []
    for j, (row, rj, mj, fj) in enumerate(
        zip(am.rows_of(scores), r.entries(), mass.entries(), flash.entries(), strict=True)
    ):
        lse = functools.reduce(lambda x, y: x.max(y), (x.abs_upper() for x in row[: j + 1])) + arb(n).log()
        if grown is not None:
            lse = lse + grown.entries()[j]
        eps_j = bounds.softmax_eps(n) + bounds.C_LSE * bounds.U * lse
        rows.append(
            bounds.gamma(n + SOFTMAX_BACK) * (rj + rj * mj) + bounds.gamma(n + dz.a.ncols() + 2) * fj * mj + rj * eps_j
        )
    row_sums = am.build(1, n, rows)
    return (
        (row_sums * qa) * s_up
        + bounds.gamma(n + bounds.SCORE_EXTRA) * s_up * (am.colsum(ds.mag()) * qa)
        + bounds.gamma(n) * am.colsum(dk.mag())
    )


def _key_shift(dq: Pair, ds: Pair, delta: arb_mat, s: arb) -> Pair:
    """gpt_train's parameter plumbing: keys shifted by ``d``, ``|d| <= delta`` (b_k's carried
    error, kept out of k: ``transformer.keys_carrying_shift``) add ``s (dS' 1) d^T`` to ``dq = s dS'
    k'``, and the product's rounding ``gamma(n) |dS'| |d|``. The rows of dS sum to 0 exactly, those
    of the computed dS' to no more than the enclosure's row sums."""
    n = ds.a.ncols()
    rows = am.eabs(am.rowsum(ds.enclosure())) + bounds.gamma(n) * am.rowsum(ds.mag())
    dq.a = widen(dq.a, (rows * delta) * s)
    return dq


@dataclass
class Step:
    losses: list[arb]  # each counted position's loss (values, or enclosures)
    grads: dict[str, list[arb_mat]]  # per parameter: one matrix, or one per block


def _step(g: Graph, gi: transformer.GptInputs, targets: list[int], counted: list[int], b_k_noise: bool = False) -> Step:
    """The forward and backward on ``g``: exact values, or (``g.track``) enclosures; ``b_k_noise``:
    grads.b_k's enclosure narrowed by its noise rule (``Back.b_k_noise``)."""
    bk = Back(g.track, b_k_noise=b_k_noise)
    fw = transformer.gpt_nodes(g, gi)
    logits = fw.final.out
    n, vocab = logits.shape
    c = len(counted)
    rows = am.rows_of(enclose(logits))
    per = [losses.position_loss(rows[i], targets[i], g.track) for i in counted]
    loss_terms = [val if err is None else val + arb(0, err) for val, err in per]
    sm = g.softmax_rows(logits, None, "nan")
    p_rows = am.rows_of(enclose(sm.a))  # in a bound pass sm.a carries the softmax rule's bound
    dz: list[arb] = []
    rad: list[arb] = []
    for i in range(n):
        for j in range(vocab):
            if i not in counted:
                dz.append(am.ZERO)
                rad.append(am.ZERO)
                continue
            hot = 1 if j == targets[i] else 0
            dz.append((p_rows[i][j] - hot) / c)
            rad.append(bounds.gamma(3) * (p_rows[i][j].abs_upper() + hot) / c)
    d_logits = am.build(n, vocab, dz)
    entered = restart(widen(d_logits, am.build(n, vocab, rad))) if g.track else Pair(d_logits)

    grads: dict[str, list[arb_mat]] = {name: [] for name in GPT_PARAMS}
    dx, head = _stage(bk, lambda b: _head_stage(b, fw.final, gi, entered), entered, fw.final.jac)
    for name, m in head.items():
        grads[name] = [m]
    per_block: list[dict[str, arb_mat]] = []
    for p, (att, ffn) in reversed(list(zip(gi.blocks, fw.blocks, strict=True))):
        dy = dx
        d_mid, gb = _stage(bk, lambda b, dy=dy, p=p, ffn=ffn: _ffn_stage(b, ffn, p, gi.form, dy), dy, ffn.jac)
        dx, ga = _stage(
            bk, lambda b, d_mid=d_mid, p=p, att=att: _attention_stage(b, att, p, gi.h, d_mid), d_mid, att.jac
        )
        per_block.append({**gb, **ga})
    for gb in reversed(per_block):
        for name in BLOCK_PARAMS:
            grads[name].append(gb[name])
    x0 = dx.enclosure()
    grads["wte"], grads["wpe"] = [_scatter(bk, x0, gi.ids, gi.wte.shape[0])], [_positions(x0, gi.wpe.shape[0])]
    return Step(loss_terms, grads)


Stage = Callable[[Back], tuple[Pair, dict[str, arb_mat]]]


def _stage(bk: Back, stage: Stage, entered: Pair, jac: arb_mat | None) -> tuple[Pair, dict[str, arb_mat]]:
    """One stage: its input gradient (settled: module docstring, "Stages") and parameter gradients.
    A bound pass runs it twice, on the nodes' enclosures and (bare) on their value balls."""
    out, grads = stage(bk)
    if not bk.track:
        return out, grads
    bare, _ = stage(Back(track=True, rounded=False))
    return bk.settle(out, bare, entered, jac), grads


def _head_stage(bk: Back, head: transformer.HeadNodes, gi: transformer.GptInputs, dz: Pair) -> tuple[Pair, dict]:
    """The LM head and the final layer norm."""
    g = {"w_head": bk.lmm(_t(bk.node(head.ln.out)), dz).enclosure()}
    dx, g["lnf_w"], g["lnf_b"] = layer_norm_back(
        bk, head.ln, bk.mm(dz, _t(_centred(bk, bk.param(gi.head), rows=False))), gi.lnf_w
    )
    return dx, g


def _ffn_stage(bk: Back, ffn: transformer.FfnNodes, p: Mapping[str, T], form: str, dy: Pair) -> tuple[Pair, dict]:
    """``y = x + ffn(ln_2(x))``: dx and the feed-forward's and ln_2's gradients."""
    gb = {"w_2": bk.lmm(_t(bk.node(ffn.act)), dy).enclosure(), "b_2": bk.colsum(dy)}
    d_hidden = gelu_back(bk, ffn.hidden, bk.mm(dy, _t(bk.param(p["w_2"]))), form)
    gb["w_1"] = bk.lmm(_t(bk.node(ffn.ln.out)), d_hidden).enclosure()
    gb["b_1"] = bk.colsum(d_hidden)
    d_m, gb["ln2_w"], gb["ln2_b"] = layer_norm_back(bk, ffn.ln, bk.mm(d_hidden, _t(bk.param(p["w_1"]))), p["ln2_w"])
    return bk.add(dy, d_m), gb


def _attention_stage(
    bk: Back, att: transformer.AttentionNodes, p: Mapping[str, T], h: int, dy: Pair
) -> tuple[Pair, dict]:
    """``y = x + attn(ln_1(x))``: dx and the attention's and ln_1's gradients."""
    gb = {"w_o": bk.lmm(_t(bk.node(att.heads.concat)), dy).enclosure(), "b_o": bk.colsum(dy)}
    dq, dk, dv, noise = attention_back(bk, att, bk.mm(dy, _t(bk.param(p["w_o"]))), h)
    a = _t(bk.node(att.ln.out))
    for name, dproj in (("q", dq), ("k", dk), ("v", dv)):
        gb[f"w_{name}"] = bk.lmm(a, dproj).enclosure()
        gb[f"b_{name}"] = bk.colsum(dproj)
    if noise is not None:  # the exact value is 0: within the noise bound, and the enclosure
        enc = am.eabs(gb["b_k"]).entries()
        gb["b_k"] = am.build(1, len(enc), [arb(0, x.min(y)) for x, y in zip(enc, noise.entries(), strict=True)])
    if not bk.track:  # exactly 0: the rows of dS sum to 0 (module docstring)
        gb["b_k"] = am.zeros(*am.shape(gb["b_k"]))
    d_a = bk.mm_sum([(dq, _t(bk.param(p["w_q"]))), (dk, _t(bk.param(p["w_k"]))), (dv, _t(bk.param(p["w_v"])))])
    d_x, gb["ln1_w"], gb["ln1_b"] = layer_norm_back(bk, att.ln, d_a, p["ln1_w"])
    return bk.add(dy, d_x), gb


def _scatter(bk: Back, dx: arb_mat, ids: list[int], vocab: int) -> arb_mat:
    """``grads.wte``: row t the sum of dx's rows at the positions holding token t, else exactly 0."""
    rows = am.rows_of(dx)
    d = dx.ncols()
    out: list[arb] = []
    for t in range(vocab):
        held = [rows[i] for i, tok in enumerate(ids) if tok == t]
        if not held:
            out.extend([am.ZERO] * d)
            continue
        for j in range(d):
            total = sum((r[j] for r in held[1:]), held[0][j])
            if bk.track and len(held) > 1:
                total = total + arb(0, bounds.gamma(len(held) - 1) * sum((r[j].abs_upper() for r in held), arb(0)))
            out.append(total)
    return am.build(vocab, d, out)


def _positions(dx: arb_mat, n_ctx: int) -> arb_mat:
    """``grads.wpe``: dx's rows, then exact zeros past the sequence."""
    n, d = am.shape(dx)
    return am.build(n_ctx, d, dx.entries() + [am.ZERO] * ((n_ctx - n) * d))


def _targets(inputs: Mapping[str, np.ndarray], n: int, vocab: int) -> tuple[list[int], list[int]]:
    ignore = losses._ignore_index(inputs)
    targets = losses._targets(inputs, n, vocab, ignore)
    counted = [i for i in range(n) if targets[i] != ignore]
    if not counted:
        raise InputError("every target equals ignore_index: the loss is 0 / 0 and has no gradient")
    return targets, counted


def gpt_grads(g: Graph, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Out]:
    gi = transformer.gpt_inputs(inputs, options, "gpt_grads")
    targets, counted = _targets(inputs, len(gi.ids), gi.wte.shape[0])
    exact_step = _step(Graph(track=False) if g.track else g, gi, targets, counted)
    c = len(counted)
    loss = sum(exact_step.losses, arb(0)) / c
    stacked = {n: am.vcat(ms) for n, ms in exact_step.grads.items()}
    shapes = {n: np.shape(inputs[f"params.{n}"]) for n in GPT_PARAMS}  # each gradient shaped as its parameter
    if not g.track:
        out = {"loss": Out(T(arb_mat([[loss]])), ())}
        out.update({f"grads.{n}": Out(T(stacked[n]), shapes[n]) for n in GPT_PARAMS})
        return out
    enc = _step(g, gi, targets, counted)
    errs = [(x - y).abs_upper() for x, y in zip(enc.losses, exact_step.losses, strict=True)]
    loss_e = losses.mean_error([x.abs_upper() for x in exact_step.losses], errs)
    out = {"loss": Out(T(arb_mat([[loss]]), arb_mat([[loss_e]])), ())}
    for n in GPT_PARAMS:
        e = am.vcat(enc.grads[n])
        out[f"grads.{n}"] = Out(T(stacked[n], am.emap(e - stacked[n], lambda x: x.abs_upper())), shapes[n])
    return out


exact.register_graph("gpt_grads", gpt_grads)
