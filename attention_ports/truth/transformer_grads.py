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
* **Nodes: the carried error through the node's own Jacobian.** The sublayer evaluated on the
  balls ``x +/- e`` is interval arithmetic: a value ball of the attention weights came out ~30
  times wider than the node moves (the scores' centring and the softmax's ratio lose their
  dependencies). So every node the backward reads (the norm's output, q, k, v, each head's
  weights, the heads' concatenation, the hidden units before and after gelu) gets the narrower,
  entry by entry, of that ball and ``n(m) +/- sum_k sup |d n / d x_k| r_k`` (``_narrowed``): m, r
  the midpoints and radii of the input's balls, ``n(m)`` the node at the point m, the derivative
  enclosed over the whole ball by the forward's ``Tangent`` pass (``t_attention`` hands each
  head's weights with their derivative); by the mean value theorem every x' of the ball has
  ``|n(x') - n(m)|`` within that sum. The rounding bound e_node is kept as it was (the own pass's
  rules hold at every point of the ball). Past ``MAX_DIRECTIONS`` the own pass's balls are kept;
* a layer norm's backward operands (``NormNode.stats``): ``yhat`` over the input's balls widened by
  the exact-input rule's bound of ``c r`` (``norms.layer_norm_row``), ``r`` widened by its relative
  error ``theta`` (``norms.rstd_error``);
* the logits' softmax ``p +/- e_p`` (the softmax rule with the logits' bound as logit errors), and
  each position's loss over the logits' balls, widened by ``lm_loss``'s rule there
  (``losses.position_loss``); the loss's mean is ``losses.mean_error``.

**Stages: the entering error by its sources.** Run as plain interval arithmetic, an error of the
gradient meets absolute values at every node (``|W|`` at each projection, the layer norm's three
terms separately) and compounds, measured ~10^8 over two blocks. So the backward runs in stages,
one per sublayer (the head with the final norm; each block's feed-forward, then its attention).
Given the nodes, a stage is linear in the gradient ``dy' = c + delta`` entering it (c exact
midpoints), so what an implementation computes there is ``a' + L(n') delta``: ``a'`` in ``a``,
the stage run from c on the nodes' enclosures with every rounding added (the *a-run*), and
``L(n')`` the stage's linear map at the nodes n' that implementation holds. Each rounding is
charged at ``|a| + |b|``, b the stage run on the box ``[-e, e]`` of the entering error (an
interval image: it bounds the operand an implementation rounds, its own rounding errors included,
which are in a). The entering error is held as its *sources* (``Pair.cols``):
``delta = sum_j t_j col_j`` with ``|t_j| <= 1``, each column the image of one independent error
of an earlier stage, a ball. ``L(n') delta`` is then ``sum_j t_j L(n') col_j``, and
``L(n') col_j`` lies in the stage run on col_j as a point entering gradient, no rounding charged,
on the nodes' enclosures (``Back.linear``, ``_images``; none of the value pass's exact zeros, which
the computed nodes need not give). So:

* a parameter's gradient is ``a +/- min(|b|, sum_j |L col_j|)``: exact per source, where the box
  ``|b|`` takes ``|L|`` of every factor;
* the stage's input gradient, the next stage's entering one, is ``mid(a) + sum_j t_j (L col_j)``
  plus the a-run's radius, whose elements are new independent sources (``r_k u_k``): the columns
  ride on through later stages exactly, so an error is bounded by ``|L_3 L_2 L_1 col|``, not
  ``|L_3| |L_2| |L_1| |col|`` (the sign changes between the stages cancel, as the forward's
  Jacobians do). The ``MAX_SOURCES`` largest images ride on; the others join the new box (a
  column ``t col`` lies in the box of ``|col|``), which bounds a stage's runs by
  ``MAX_SOURCES + n d``.

The first sources are the elements of ``d logits``' box (the softmax rule with the logits' bound,
and its rounding). gelu' enters as a node ``gelu'(h) +/- GELU_LIPSCHITZ e_h``, h over its value
ball. Measured (gpt_grads_two_blocks): the first block's gradients, catching a relative change of
3.8e-8 at best with the interval box, catch 7.2e-10 (each element's image exact: 7.5x; the nodes
narrowed: 4x; the sources carried across stages: 1.8x).

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

What is left loose: the forward's own bound, carried in as the nodes' widths (the a-run's radius
is their interval image: the second block's attention weights, whose scores carry the first
block's forward bound, dominate the first block's gradients' bound), and every rounding is charged
at absolute values (``gamma(k)`` per product); the measured worst fractions and the bound's
relative size: docs/truth-and-bounds.md, "gpt_grads".
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
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
    the interval image of the box of every error within e (None: no error; the value pass and a
    source's run)."""

    a: arb_mat
    b: arb_mat | None = None
    # an entering gradient's error as its sources: ``delta = sum_j t_j cols[j]``, ``|t_j| <= 1``
    # (``sources``); b is then the box ``[-sum_j |cols[j]|, +sum_j |cols[j]|]``
    cols: list[arb_mat] | None = None
    # a bound of the computed value's magnitude where its exact value is 0 (grads.b_k's noise rule,
    # gpt_train's): the enclosure is capped by it (``_stage``)
    cap: arb_mat | None = None

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
    # one source of the entering error through the stage (``_images``): no roundings charged
    # (track False), the nodes' enclosures, and none of the value pass's exact zeros, which hold for
    # the exact nodes only (an implementation's computed softmax rows need not sum to exactly 1)
    linear: bool = False
    # what a stage's runs read from its forward nodes (a layer norm's stats, gelu'), computed once
    # per Back: ``_images`` runs one stage many times on the same nodes
    memo: dict[tuple[str, int], Any] = field(default_factory=dict)
    # grads.b_k bounded as rounding noise too (``b_k_noise``): gpt_train's, whose Adam step
    # divides that gradient by eps; gpt_grads' own bound is left as it is (issue 18)
    b_k_noise: bool = False

    def once(self, kind: str, node: object, make: Callable[[], Any]) -> Any:
        key = (kind, id(node))
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]

    @property
    def exact_values(self) -> bool:
        """The value pass: exact nodes, so its identities (rows of dS summing to 0) hold."""
        return not self.track and not self.linear

    def node(self, t: T) -> arb_mat:
        """A forward node as the backward reads it: its enclosure (``enclose``)."""
        return self.once("node", t, lambda: enclose(t))

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

    def colsum(self, x: Pair, extra: int = 0) -> Pair:
        """Column sums (a bias gradient)."""
        return self.charge(x.map(am.colsum), lambda: bounds.gamma(x.a.nrows() + extra) * am.colsum(x.mag()))

    def add(self, x: Pair, y: Pair) -> Pair:
        out = Pair(x.a + y.a, None if x.b is None else x.b + y.b)
        return self.charge(out, lambda: bounds.U * out.mag())


def sources(c: arb_mat, cols: list[arb_mat]) -> Pair:
    """A stage's entering gradient: c (exact) and the error ``sum_j t_j cols[j]``, ``|t_j| <= 1``."""
    box = am.zeros(*am.shape(c))
    for col in cols:
        box = box + am.eabs(col)
    return Pair(c, am.emap(box, lambda r: arb(0, r)), cols)


def _units(rad: arb_mat) -> list[arb_mat]:
    """A box of radii as independent sources: ``r_k u_k``, one per nonzero element."""
    rows, cols = am.shape(rad)
    out = []
    for k, r in enumerate(rad.entries()):
        if r != 0:
            unit = am.zeros(rows, cols)
            unit[k // cols, k % cols] = r
            out.append(unit)
    return out


def restart(ball: arb_mat) -> Pair:
    """A stage's entering gradient from balls: their midpoints (exact), each radius a source; past
    ``transformer.MAX_DIRECTIONS`` elements (a run per source would cost too much), the box alone."""
    mid, rad = _split(ball)
    if rad.nrows() * rad.ncols() > transformer.MAX_DIRECTIONS:
        return Pair(mid, am.emap(rad, lambda r: arb(0, r)))
    return sources(mid, _units(rad))


def _t(m: arb_mat) -> arb_mat:
    return m.transpose()


def layer_norm_back(bk: Back, node: NormNode, dy: Pair, w: T) -> tuple[Pair, Pair, Pair]:
    """(dx, dw, db) of ``y = yhat w + b`` (module docstring)."""
    yhat_rows, rs, xrs = bk.once("stats", node, node.stats)
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

    def derivative() -> arb_mat:
        der = am.build(*h.shape, [activations._derivative(x, form) for x in h.v.entries()])
        return widen(der, GELU_LIPSCHITZ * h.e) if h.e is not None else der

    der = bk.once("gelu'", h, derivative)
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
    if not bk.exact_values:
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
        if att.key_shift is not None and bk.track:
            dq = _key_shift(dq, ds, am.take_cols(att.key_shift, lo, hi), s)
        dqs.append(dq)
        dks.append(bk.mm(ds.map(_t), qi, bounds.SCORE_EXTRA).map(lambda m: m * s))
        if bk.b_k_noise and bk.track:
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


# -------------------------------------------------------------------- the nodes the backward reads


def _carried(t: transformer.Tangent, e: arb_mat) -> arb_mat:
    """``sum_k sup |d n / d x_k| e_k`` per entry of a node n, its tangent enclosed over the input's
    ball: by the mean value theorem, how far n moves over that ball."""
    n_rows, w = am.shape(t.v)
    d = am.build(t.m, n_rows * w, [z.abs_upper() for z in t.d.entries()])
    return am.build(n_rows, w, (am.build(1, t.m, e.entries()) * d).entries())


def _narrowed(node: T, point: T, t: transformer.Tangent, e: arb_mat) -> T:
    """``node`` with value balls (each holding the node's exact value at every input x' of the
    sublayer's ball) the narrower, entry by entry, of its own pass's (the sublayer evaluated on the
    ball) and ``n(mid) +/- _carried``; its rounding bound unchanged (module docstring, "Nodes")."""
    centred = widen(point.v, _carried(t, e))
    v = [a if not (b.rad() < a.rad()) else b for a, b in zip(node.v.entries(), centred.entries(), strict=True)]
    return T(am.build(*node.shape, v), node.e)


def _split(x: arb_mat) -> tuple[arb_mat, arb_mat]:
    """A ball matrix as its midpoints (exact) and radii."""
    mid = am.build(*am.shape(x), [arb(z.mid()) for z in x.entries()])
    return mid, am.build(*am.shape(x), [z.rad().abs_upper() for z in x.entries()])


def _norm_narrowed(ln: NormNode, point: NormNode, t: transformer.Tangent, e: arb_mat) -> NormNode:
    return NormNode(ln.x, _narrowed(ln.out, point.out, t, e), ln.eps, ln.track)


def _attention_narrowed(
    att: transformer.AttentionNodes, p: Mapping[str, T], h: int, eps: arb
) -> transformer.AttentionNodes:
    """The attention sublayer's nodes, narrowed (``_narrowed``)."""
    mid, e = _split(att.ln.x)
    point = transformer.attention_nodes(Graph(track=False), T(mid), p, h, eps)
    ta = transformer.t_layer_norm(transformer.Tangent.seed(att.ln.x), p["ln1_w"], p["ln1_b"], eps)
    tq, tk, tv = (transformer.t_affine(ta, p[f"w_{s}"], p[f"b_{s}"]) for s in "qkv")
    weights: list[transformer.Tangent] = []
    concat = transformer.t_attention(tq, tk, tv, h, transformer.causal_mask(mid.nrows()), weights)
    heads = exact.Heads(
        _narrowed(att.heads.concat, point.heads.concat, concat, e),
        [_narrowed(a, pa, ta_, e) for a, pa, ta_ in zip(att.heads.weights, point.heads.weights, weights, strict=True)],
        att.heads.dead,
    )
    return transformer.AttentionNodes(
        _norm_narrowed(att.ln, point.ln, ta, e),
        _narrowed(att.q, point.q, tq, e),
        _narrowed(att.k, point.k, tk, e),
        _narrowed(att.v, point.v, tv, e),
        heads,
        att.out,
        att.jac,
        att.key_shift,
    )


def _ffn_narrowed(ffn: transformer.FfnNodes, p: Mapping[str, T], eps: arb, form: str) -> transformer.FfnNodes:
    """The feed-forward sublayer's nodes, narrowed (``_narrowed``)."""
    mid, e = _split(ffn.ln.x)
    point = transformer.ffn_nodes(Graph(track=False), T(mid), p, eps, form)
    tm = transformer.t_layer_norm(transformer.Tangent.seed(ffn.ln.x), p["ln2_w"], p["ln2_b"], eps)
    th = transformer.t_affine(tm, p["w_1"], p["b_1"])
    return transformer.FfnNodes(
        _norm_narrowed(ffn.ln, point.ln, tm, e),
        _narrowed(ffn.hidden, point.hidden, th, e),
        _narrowed(ffn.act, point.act, transformer.t_gelu(th, form), e),
        ffn.out,
        ffn.jac,
    )


def _head_narrowed(head: transformer.HeadNodes, gi: transformer.GptInputs) -> transformer.HeadNodes:
    """The final norm's output, narrowed (``_narrowed``)."""
    mid, e = _split(head.ln.x)
    point = transformer.norm_node(Graph(track=False), T(mid), gi.lnf_w, gi.lnf_b, gi.eps)
    tm = transformer.t_layer_norm(transformer.Tangent.seed(head.ln.x), gi.lnf_w, gi.lnf_b, gi.eps)
    return transformer.HeadNodes(_norm_narrowed(head.ln, point, tm, e), head.out, head.jac)


def _narrowed_nodes(fw: transformer.GptNodes, gi: transformer.GptInputs) -> transformer.GptNodes:
    """Every node the backward reads, narrowed where the sublayer's input is small enough for its
    Jacobian (``transformer.MAX_DIRECTIONS``); else as the forward made them."""
    if fw.final.ln.x.nrows() * fw.final.ln.x.ncols() > transformer.MAX_DIRECTIONS:
        return fw
    blocks = [
        (_attention_narrowed(att, p, gi.h, gi.eps), _ffn_narrowed(ffn, p, gi.eps, gi.form))
        for p, (att, ffn) in zip(gi.blocks, fw.blocks, strict=True)
    ]
    return transformer.GptNodes(blocks, _head_narrowed(fw.final, gi))


@dataclass
class Step:
    losses: list[arb]  # each counted position's loss (values, or enclosures)
    grads: dict[str, list[arb_mat]]  # per parameter: one matrix, or one per block


def _step(g: Graph, gi: transformer.GptInputs, targets: list[int], counted: list[int], b_k_noise: bool = False) -> Step:
    """The forward and backward on ``g``: exact values, or (``g.track``) enclosures; ``b_k_noise``:
    grads.b_k's enclosure narrowed by its noise rule (``Back.b_k_noise``)."""
    bk = Back(g.track, b_k_noise=b_k_noise)
    fw = transformer.gpt_nodes(g, gi)
    if g.track:
        fw = _narrowed_nodes(fw, gi)
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
    dx, head = _stage(bk, lambda b, dz: _head_stage(b, fw.final, gi, dz), entered)
    for name, m in head.items():
        grads[name] = [m]
    per_block: list[dict[str, arb_mat]] = []
    for p, (att, ffn) in reversed(list(zip(gi.blocks, fw.blocks, strict=True))):
        d_mid, gb = _stage(bk, lambda b, dy, p=p, ffn=ffn: _ffn_stage(b, ffn, p, gi.form, dy), dx)
        dx, ga = _stage(bk, lambda b, dy, p=p, att=att: _attention_stage(b, att, p, gi.h, dy), d_mid)
        per_block.append({**gb, **ga})
    for gb in reversed(per_block):
        for name in BLOCK_PARAMS:
            grads[name].append(gb[name])
    x0 = dx.enclosure()
    grads["wte"], grads["wpe"] = [_scatter(bk, x0, gi.ids, gi.wte.shape[0])], [_positions(x0, gi.wpe.shape[0])]
    return Step(loss_terms, grads)


Stage = Callable[[Back, Pair], tuple[Pair, dict[str, Pair]]]


def _stage(bk: Back, stage: Stage, entered: Pair) -> tuple[Pair, dict[str, arb_mat]]:
    """One stage: its input gradient (the next stage's entering one) and its parameter gradients
    (enclosures). A bound pass runs it on the nodes' enclosures from the entering midpoints, with
    the roundings charged (the a-run), and once per source of the entering error, exactly
    (``_images``; module docstring, "Stages")."""
    out, grads = stage(bk, entered)
    if not bk.track:
        return out, {name: g.a for name, g in grads.items()}
    if entered.cols is None:  # the box alone (``restart``): the interval image
        assert out.b is not None
        return restart(widen(out.a, am.eabs(out.b))), {name: _capped(g, g.enclosure()) for name, g in grads.items()}
    images, outs = _images(stage, entered.cols, am.shape(out.a))
    enclosed = {name: _capped(g, widen(g.a, _least(am.eabs(g.b), images[name]))) for name, g in grads.items()}
    mid, rad = _split(out.a)  # the a-run's own width: the roundings and the nodes' widths
    kept, merged = _kept(outs, am.shape(rad))
    return sources(mid, kept + _units(rad + merged)), enclosed


def _capped(g: Pair, enclosure: arb_mat) -> arb_mat:
    """A gradient whose exact value is 0 and whose computed value is within ``g.cap``: the ball at 0
    of the smaller radius (grads.b_k under ``Back.b_k_noise``); else the enclosure."""
    if g.cap is None:
        return enclosure
    return am.build(
        *am.shape(enclosure),
        [arb(0, x.abs_upper().min(y)) for x, y in zip(enclosure.entries(), g.cap.entries(), strict=True)],
    )


# Sources carried exactly from one stage to the next, at most: the largest images; the others are
# merged into the next stage's box of independent elements (sound: a column t_j col_j with
# |t_j| <= 1 lies in the box of its absolute values). Bounds the cost: each stage runs once per
# source, at most this many plus one per element of its input.
MAX_SOURCES = 128


def _kept(outs: list[arb_mat], shape: tuple[int, int]) -> tuple[list[arb_mat], arb_mat]:
    """The ``MAX_SOURCES`` largest images (by their largest entry), and the others' box."""
    order = sorted(range(len(outs)), key=lambda j: -max(x.abs_upper() for x in outs[j].entries()))
    keep = set(order[:MAX_SOURCES])
    merged = am.zeros(*shape)
    for j, col in enumerate(outs):
        if j not in keep:
            merged = merged + am.eabs(col)
    return [outs[j] for j in sorted(keep)], merged


def _least(x: arb_mat, y: arb_mat) -> arb_mat:
    """The entrywise minimum of two upper bounds."""
    return am.build(*am.shape(x), [a.min(b) for a, b in zip(x.entries(), y.entries(), strict=True)])


def _images(stage: Stage, cols: list[arb_mat], out_shape: tuple[int, int]) -> tuple[dict[str, arb_mat], list[arb_mat]]:
    """Each source of the entering error through the stage: its image ``L(n') col`` (the backward
    is linear in the error, L its matrix at the nodes n' an implementation holds, enclosed by a
    point run on the nodes' enclosures), and per parameter gradient ``sum_j |L(n') col_j|``."""
    linear = Back(track=False, linear=True)
    totals: dict[str, arb_mat] = {}
    outs: list[arb_mat] = []
    for col in cols:
        out, grads = stage(linear, Pair(col))
        outs.append(out.a)
        for name, g in grads.items():
            totals[name] = am.eabs(g.a) if name not in totals else totals[name] + am.eabs(g.a)
    if not cols:  # no error entered: the images are exactly 0
        _, grads = stage(linear, Pair(am.zeros(*out_shape)))
        totals = {name: am.zeros(*am.shape(g.a)) for name, g in grads.items()}
    return totals, outs


def _head_stage(bk: Back, head: transformer.HeadNodes, gi: transformer.GptInputs, dz: Pair) -> tuple[Pair, dict]:
    """The LM head and the final layer norm."""
    g = {"w_head": bk.lmm(_t(bk.node(head.ln.out)), dz)}
    dx, g["lnf_w"], g["lnf_b"] = layer_norm_back(
        bk, head.ln, bk.mm(dz, _t(_centred(bk, bk.param(gi.head), rows=False))), gi.lnf_w
    )
    return dx, g


def _ffn_stage(bk: Back, ffn: transformer.FfnNodes, p: Mapping[str, T], form: str, dy: Pair) -> tuple[Pair, dict]:
    """``y = x + ffn(ln_2(x))``: dx and the feed-forward's and ln_2's gradients."""
    gb = {"w_2": bk.lmm(_t(bk.node(ffn.act)), dy), "b_2": bk.colsum(dy)}
    d_hidden = gelu_back(bk, ffn.hidden, bk.mm(dy, _t(bk.param(p["w_2"]))), form)
    gb["w_1"] = bk.lmm(_t(bk.node(ffn.ln.out)), d_hidden)
    gb["b_1"] = bk.colsum(d_hidden)
    d_m, gb["ln2_w"], gb["ln2_b"] = layer_norm_back(bk, ffn.ln, bk.mm(d_hidden, _t(bk.param(p["w_1"]))), p["ln2_w"])
    return bk.add(dy, d_m), gb


def _attention_stage(
    bk: Back, att: transformer.AttentionNodes, p: Mapping[str, T], h: int, dy: Pair
) -> tuple[Pair, dict]:
    """``y = x + attn(ln_1(x))``: dx and the attention's and ln_1's gradients."""
    gb = {"w_o": bk.lmm(_t(bk.node(att.heads.concat)), dy), "b_o": bk.colsum(dy)}
    dq, dk, dv, noise = attention_back(bk, att, bk.mm(dy, _t(bk.param(p["w_o"]))), h)
    a = _t(bk.node(att.ln.out))
    for name, dproj in (("q", dq), ("k", dk), ("v", dv)):
        gb[f"w_{name}"] = bk.lmm(a, dproj)
        gb[f"b_{name}"] = bk.colsum(dproj)
    if noise is not None:  # the exact value is 0: the computed one within the noise bound (_stage)
        gb["b_k"].cap = noise
    if bk.exact_values:  # exactly 0: the rows of dS sum to 0 (module docstring)
        gb["b_k"] = Pair(am.zeros(*am.shape(gb["b_k"].a)))
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
