"""Per-element error bounds that every correct float64 implementation meets: the error analysis.

This module is the one place where the suite's tolerances are derived. Each rule below maps the
magnitudes of exact quantities (computed in ball arithmetic in the same pass as the values, see
``attention_ports.truth.exact``) and the error bounds of its operands to an error bound of its result.
Composed along an operation's computation graph they give, for every element of every expected
output, a bound ``B`` on ``|computed - exact|`` for a float64 implementation with

* any summation order (BLAS blocking, pairwise or sequential sums, multi-threaded reductions),
  with or without fused multiply-add;
* an ``exp``/``log`` accurate to ``C_EXP`` ulps (glibc, openlibm, Julia, SLEEF, NumPy's SIMD
  kernels are all within 1-4 ulps);
* any of the usual formulations: the scale applied to the scores or to q and k, the softmax as
  ``exp(s - max) / sum`` or times ``1 / sum``, in the log domain as ``exp(s - lse)`` with
  ``lse = max + log(sum)`` or as ``exp((s - max) - log(sum))`` (a log-softmax, then exp), or
  streamed over blocks of keys (a flash kernel's running max and rescaled running sum), the loss
  as a stable log-softmax, through ``logsumexp(z) - z_y`` or as ``-log(probs[label])``.

**The rule these bounds implement (mixed forward-backward error).** An implementation is correct
when each operation's result is the exact result at inputs perturbed *relatively* by a few units
of roundoff each (the scores and logits entering a softmax, the loss's inputs, the parameters and
activations entering each product), plus the rounding of the result itself, where "the result"
includes the intermediates a standard formulation exposes (a dot product, the row sum of a
softmax or its logarithm ``lse``). This is Higham's mixed forward-backward stability (Accuracy
and Stability of Numerical Algorithms, 2nd ed., 1.5). A rule below therefore bounds, to first
order, ``sum_k |d y / d x_k| C u |x_k|`` (the componentwise condition of y times C u: the
inputs' relative perturbations) plus ``C' u |y|`` for each rounded result, and propagates its
operands' own error bounds; rounding is charged at the magnitude of the operands where a standard
formulation computes it, never at a smaller quantity that only one formulation forms. Fixing the
rule, not one formulation: the products' ``gamma(k) |X||W|`` is exactly this for a dot product
(its backward error); the softmax's ``C_IN u |S_j|`` and ``C_LSE u |lse|`` terms below are its
instance for a softmax (issue 19: before them, ``exp(s - lse)`` failed 12 cases by up to 31.6x,
because ``lse`` rounds at ``|lse| ~ |max|``, a relative error common to the whole row that no
normalisation removes).

Notation: u = 2**-53 (unit roundoff of float64), gamma(n) = n u / (1 - n u), |X| the entrywise
absolute value, e_X the error bound of a computed X. Products of matrices below are matrix
products of non-negative matrices.

Rules (each is the standard model fl(a op b) = (a op b)(1 + d), |d| <= u, applied to the
operation, plus the propagation of its operands' errors):

* **Products and projections** ``Y = X W (+ b)`` with inner dimension k (Higham, Accuracy and
  Stability, 3.5): the rounding of any dot product is at most gamma(k) |X||W|, whatever the order
  and FMA. With computed operands ``X + dX``::

      e_Y = gamma(k + 1) ((|X| + e_X)(|W| + e_W) + |b| + e_b) + |X| e_W + e_X (|W| + e_W) + e_b

  (gamma(k + 1): one more rounding for the bias; without a bias, gamma(k)). This is rigorous,
  second-order terms included.
* **Scores** ``S = s q k^T (+ M)``: the matmul rule times the scale, with gamma(d_k + 6) instead
  of gamma(d_k): the scale itself may carry up to 3 roundings (1/sqrt(d) computed in float64), and
  it may be applied once to the product, or as sqrt(s) to q and to k (torch's math kernel).
  A finite non-zero additive mask entry adds ``u |S|`` (the addition's rounding). Scores only
  feed a softmax, which ignores a logit error common to a row: q's error dq_i adds
  ``s dq_i . k_j`` to score (i, j), of which ``s dq_i . c`` (c: the midrange of the keys' columns)
  is common to row i, so e_q meets ``|k - c|`` instead of ``|k|``.
* **Softmax** along a row with kept keys (n of them), exact weights A and shifted scores
  ``t = S - max S``. Every usual formulation computes ``A' = softmax(S + eta) (1 + eps)``:

  - ``eta`` (normalised: the weights still sum to 1) are logit errors, up to a part common to
    the row: the score error ``e_S,j``, the shift's rounding (``C_SHIFT u |t_j|``: ``s - max``,
    and the subtraction of ``log(sum)`` or ``lse``, which rounds at ``|s - lse| <= |t_j| + ln n``),
    the inputs' own relative perturbation (``C_IN u |S_j|``: the mixed rule's backward part, e.g.
    a flash kernel's ``s log2(e)`` before ``exp2``, with log2(e) itself rounded) and exp's error
    where the same exponentials are summed (``C_EXP u``)::

        |eta_j| <= eta^_j = e_S,j + C_SHIFT u |t_j| + C_IN u |S_j| + C_EXP u

  - ``eps`` (unnormalised): the sum of n positive terms (gamma(n)), the division or reciprocal
    and product (``C_DIV u``), and in a log-sum-exp formulation the exps of the final weight and
    of the normaliser (``2 C_EXP u``), the log of the sum (``sum <= n``, and the subtraction
    of ``log(sum) <= ln n``: ``(C_EXP + 1) u ln n``) and the rounding of the normaliser
    ``lse = max + log(sum)`` itself (``C_LSE u |lse|``: the addition, and a change of base where
    a kernel keeps lse in base 2). That last error is common to the row, so a softmax ignores it as
    a logit error, but ``exp(s - lse')`` is never renormalised: every weight is off by the same
    relative ``u |lse|``, ~1e-13 at scores of 1e3, whatever its own size::

        |eps| <= eps = gamma(n) + C_DIV u + 2 C_EXP u + (C_EXP + 1) u ln n + C_LSE u |lse|

    A streaming softmax over blocks of keys: a key's ``exp(s_j - m_b)`` rounds at
    ``|s_j - m_b| <= |t_j|`` (m_b, the running max when it was seen, is at most the row's), and
    the rescalings ``exp(m_b - m_b')`` telescope to ``exp(m_b - max)``, their arguments summing
    to at most ``|t_j|``: both inside ``C_SHIFT u |t_j|``. Not charged: each *change* of the
    running max costs the keys seen before it one exp and one product more (``C_EXP + 1``
    roundings; a rescale by exactly 1 is exact). They stay inside ``RESOLUTION`` (128 u) while
    the running max of a row changes fewer than ~25 times; the kit's streaming controls (blocks
    of 2 and 3 keys, every case) pass with room. A row built to change its running max at every
    key, over hundreds of keys, is the one standard formulation this rule does not cover by
    construction.

  With A~ = softmax(S + eta), ``dA~_j / d eta_l = A_j ([j = l] - A_l)``, so the exact first-order
  change is bounded by ``A_j ((1 - A_j) eta^_j + sum_{l != j} A_l eta^_l)`` (a dominant weight,
  A_j near 1, is barely moved), and the rest of the
  expansion by ``R A_j``, ``R = SECOND_ORDER M^2`` with M the largest eta^ of the row
  (``|e^{eta_j}/sum_l A_l e^{eta_l} - 1 - (eta_j - <A, eta>)| <= 9 M^2`` for M <= 1/8)::

        N_j     = A_j ((1 - A_j) eta^_j + sum_{l != j} A_l eta^_l + R)      (bounds |A~ - A|)
        e_A,j   = N_j + (A_j + N_j) eps

  Note the ``u |t_j|``, ``u |S_j|`` and ``u |lse|`` terms: scores of order 1e3 make every correct
  implementation's weights wrong by ~1e-13 relative. Keys removed by the mask have weight exactly 0 and error 0; keys
  whose weight is below e^-745 even perturbed are in the UNDERFLOW allowance. The engine refuses
  a row whose ``M + eps`` exceeds ``MAX_FIRST_ORDER`` (2**-20).
* **Products with softmax weights** keep the weights' structure instead of ``|A|`` times
  ``|error|``: the rows of ``A~ - A`` sum to exactly 0, so ``(A~ - A) V = sum_l (A~ - A)_l
  (V_l - Y_i)`` for the row's own weighted mean ``Y_i = sum_l A_il V_l``, and its first-order part
  is ``sum_l A_il eta_il (V_l - Y_i)``. These are the exact sensitivities to each logit error,
  with absolute values taken only at the end:

  - **attention output, z** ``Y = A V``::

        e_Y,i = sum_l A_il eta^_il |V_l - Y_i| + R_i ((A |V|)_i + |Y_i|) + (A + N) eps |V|
                + |A'| e_V + gamma(n_k) |A'| (|V| + e_V),      |A'| = A + e_A

    A fully masked query row under the "zeros" convention is exactly 0 (error 0); under
    "uniform" its weights are 1/n_k with one rounding (eps = ``C_DIV u``, eta = 0).
  - **the softmax backward into the query and key gradients** ``dS = A * (dA - rowsum(dA A))``,
    ``d_q = s dS k``, ``d_k = s dS^T q`` (``attention_grads``, derived there): with
    ``C = dA - r`` and ``k^_i = sum_j A_ij k_j``, a logit error moves ``(dS k)_i`` by
    ``A_ij eta_ij (C_ij (k_j - k^_i) - (dS k)_i)`` (the keys' common part cancels: the attention
    logits above 709 of ``clf_step_shifted_large_logits`` come from keys of size 16 that differ
    by about 1), an error G of dA by ``A_ij G_ij (k_j - k^_i)``; the unnormalised part, the roundings of
    the row sum, the centring and the product (factored or distributed, ``2u |A'| (|dA'| + |r'|)``)
    meet ``|k|`` entrywise. ``d_k``'s exact sensitivities are summed the same way (for each key,
    over every logit of every row: n^3 work, fine for the classifier's sentences).

  Each of these first-order terms is reached by some choice of signs of the errors:
  ``tests/truth/test_bounds.py`` checks, with the roundings switched off, that an adversary moves every
  output by at least 0.99 of its bound and never beyond it.
* **Sums and means** of n terms: ``e = sum e_i + gamma(n) sum (|x_i| + e_i)`` (a mean: the same,
  divided by n, its division's rounding inside gamma(n)).
* **Entrywise** ``X - Y``: ``e_X + e_Y + u (|X - Y| + e_X + e_Y)``.
* **Loss** ``L = -log p_y`` (however computed): ``e_L = rho_y + C_LOG u (|L| + |t_y|)``, with
  ``rho_y = e_p,y / p_y`` the relative error bound of ``p_y`` (softmax rule, its logits being the
  pooled outputs with their errors and relative perturbations): ``-log(p_y (1 + rho)) = L - rho +
  O(rho^2)``, and the ``log`` of a log-sum-exp formulation rounds a value of size at most
  ``|L| + |t_y|``. ``logsumexp(z) - z_y`` rounds ``lse`` at ``|lse|``: that is the softmax's
  ``C_LSE u |lse|``, inside ``rho_y``.
* **Backward**: the reference's analytic gradient is a chain of the operations above (products,
  sums, the softmax backward), propagating the forward errors. The error of d loss/d pooled
  (``probs - onehot``) reaches the gradients exactly as ``sum_c |G_c| e_c`` (the backward is
  linear in it; ``G_c`` the gradients for the unit vector c). Other correct formulations (torch
  autograd, the R and Julia ports) differ in the order of the same products; the rules do not
  depend on the order.
* **SGD** ``p - lr g``: ``lr e_g + gamma(2) (|p| + lr (|g| + e_g))`` (two roundings, or one with FMA).
* **Trajectories** (many SGD steps): the error is *carried*. Step t runs the step's graph with
  the parameters entering as operands that carry the bound ``D_t`` accumulated so far (``D_0 = 0``:
  the inputs are exact), so every rule above propagates ``D_t`` through the forward, the softmax
  weights (as logit errors), the loss, ``probs - onehot``, the backward and the update, and adds
  that step's own roundings; the SGD rule with an inexact p is
  ``D_{t+1} = D_t + lr e_g + gamma(2) (|p| + D_t + lr (|g| + e_g))``, and the epoch losses are
  means of the steps' loss bounds plus the mean's rounding. Two points make it hold where a value
  is computed only to an absolute accuracy: every rounding is charged at the size of its
  operands (a softmax weight at |p|, so ``p_y - 1`` at a saturated softmax carries ~10u absolute,
  whatever its own size, ~1e-222 at logits of 512); and the backward, linear in
  ``delta = probs - onehot``, errs at the computed ``delta + d`` by at most its error at
  ``delta`` plus ``sum_c |d_c| (|G_c| + e_Gc)``, ``G_c`` the backward of the unit vector c run
  with the carried errors (every rule is linear in its operands' magnitudes). A softmax row with
  one live key (every other below e^-745 even perturbed) has the weight 1 within UNDERFLOW
  whatever its logit errors: no first-order guard applies there. The carried bound is first order
  in the errors like every rule, and takes absolute values at every node: it cannot see the
  contraction that the signs of ``I - lr H`` give, so on long trajectories it grows geometrically
  (the sentiment trajectories: past 2^-20 in a logit after ~190 of 1,140 steps at lr = 0.02 and
  ~330 of 760 at 0.05). Such a trajectory is not certified (``BoundError``), unless its catalogue
  case is flagged ``estimated_bound``: then its bound is an **estimate**, the sum over steps of
  each step's own bound from exact parameters, times ``max(1, A)``, A the amplification the exact
  dynamics give a perturbation of the initial parameters (``exact.trajectory_amplification``:
  38 and 120 on those two). That is the one bound that is not derived: it takes one direction's
  amplification for every step's.

**Mixed precision** (storage / accumulation, issue 17: ``"bfloat16/float32"``,
``"float16/float32"``, attention_ports/spec/precision.py). A kernel that stores values in a
narrow format and computes in float32 is the float32 analysis above (every constant float32's,
``U = 2^-24``), plus its declared rounding points, each a rounding to storage precision:
``fl_s(x) = x (1 + d) + t``, ``|d| <= u_s`` (2^-8 for bfloat16, 2^-11 for float16) and
``|t| <= tau_s``, half the storage format's smallest subnormal (2^-25 for float16; 2^-134 for
bfloat16, far inside UNDERFLOW). The points:

* **the inputs**: none to charge, the tier's inputs are storage values (the catalogue's inputs
  rounded to storage, exactly) and the truth is exact at them;
* **the attention weights before the product with V** (a flash kernel's P, stored in half
  precision for the second product): ``A^ = fl_s(A')``, so ``|A^ - A'| <= u_s |A'| + tau_s`` on
  top of A's own error. In ``Y = A^ V`` (``weighted_values``) it meets ``|V|`` entrywise:
  ``(u_s (A + e_A) + tau_s) |V|``, and the product's rounding and V's error see
  ``|A^| <= (1 + u_s)(A + e_A) + tau_s``. A kernel that keeps the weights in float32 (torch's CPU
  math kernel upcasts) has ``d = t = 0`` there: inside the allowance;
* **every output** (``y``, ``output``, ``weights``), stored: ``e' = e + u_s (|x| + e) + tau_s``
  (``to_storage``; the engine applies it to each output, engine._single).

Everything else (scores, the softmax's sums, the products' accumulation) is float32 arithmetic,
charged by the rules above at float32's constants. A kernel that also rounds the *scores* to
storage precision before the softmax (a logit error of ``u_s |S|``, 0.04 at |S| = 10 in
bfloat16) is not this tier's arithmetic: it leaves the first-order softmax rule, and would need a
declaration of its own. ``STORAGE_U`` is None outside a mixed tier: the float64 and float32
analyses are untouched by this paragraph.

The other operations of the storage tiers declare their own rounding points
(``spec.precision.STORAGE_POINTS``, one entry per operation; each family's module derives its
terms): the norms, gelu and the sinusoidal table none but the output; the rotation its cos and sin
tables and products (``storage_point``); the feed-forward, the decoder block and the GPT forward
every tensor a bfloat16 model passes between torch operations (``storage_node``); lm_loss each
position's log-probability; adamw_step every elementwise operation (``storage_arithmetic``: the
rules at ``u_s + u + u_s u``, with ``op_tiny`` per rounding). A kernel that keeps any of them in
float32 rounds less and is covered. Where storage is the arithmetic itself (float16),
``ARITH_TINY`` charges a rounding's absolute error in float16's subnormals where a rule meets
values that small, and a rule whose intermediates pass ``MAX_FINITE`` refuses the case. The
storage tiers' first-order guard is 2^-3 (spec/precision.py: a rule charging storage roundings has
bfloat16-sized terms; the remainders are charged up to 1/8).

Stored bound per element::

    bound = SAFETY * B  +  RESOLUTION * |expected|  +  UNDERFLOW

* ``SAFETY = 2`` is the one safety factor: it covers the terms of order u^2 the softmax and loss
  rules neglect (e.g. the shift's rounding of a logit that is itself off by e_S; with the 2**-20
  guard they are below 2**-20 of B) and libm functions up to twice ``C_EXP`` ulps.
* ``RESOLUTION = 2**-46`` (64 ulps at the bottom of a binade, 1.4e-14 relative) is the finest
  relative error the suite resolves: a value that a correct implementation gets exactly (a softmax
  over one key, a weight of exactly 1/4) is still given 1.4e-14 relative, so that a result
  differing by 1e-14 relative is never called wrong; a 1e-9 relative error always is.
* ``UNDERFLOW = 2**-1000`` absorbs gradual underflow (and flush-to-zero) in intermediate results,
  which the relative model above does not describe; it is far below anything the suite resolves.

The bound is then rounded up to ``BOUND_SIG_BITS`` significant bits (``rounding.round_up``), so
that the stored bytes do not depend on the last bits of a ball's radius.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flint import arb, arb_mat

from attention_ports.truth import arbmat as am

U = arb(2.0**-53)
C_EXP = 4  # ulps of exp / log
C_SHIFT = 2  # roundings on a shifted score (s - max, then - logsumexp)
C_IN = 2  # relative perturbation of each softmax input (a score, a logit), in u
C_LSE = 2  # roundings of a log-domain normaliser lse = max + log(sum), relative to |lse|
C_DIV = 2  # roundings of the normalisation (a division, or a reciprocal and a product)
C_LOG = 8  # ulps of the loss's log and final subtraction, relative to |L| + |t_y|
SCORE_EXTRA = 6  # roundings of the scale beyond the dot product's own
SAFETY = 2
RESOLUTION = arb(2.0**-46)
UNDERFLOW = arb(2.0**-1000)
BOUND_SIG_BITS = 8
MAX_FIRST_ORDER = arb(2.0**-20)
SECOND_ORDER = 9  # |softmax(S + eta)_j / A_j - 1 - (eta_j - <A, eta>)| <= 9 max|eta|^2
NEGLIGIBLE_LOGIT = 745  # exp(-745) is below half the smallest subnormal
# Mixed precision's rounding points to storage (module docstring, "Mixed precision"): u_s and
# tau_s of the storage format; None outside a mixed tier (set by truth/precision.py's rules).
STORAGE_U: arb | None = None
STORAGE_TINY = arb(0)
# A storage tier whose arithmetic is the storage format itself (float16: every operation rounds to
# float16, whose subnormals start at 6e-5): the absolute error of one rounding there, charged per
# rounding by the rules that meet values that small (module docstring, "Mixed precision"); 0
# elsewhere (float32's 2^-150 and float64's are far inside UNDERFLOW). And the arithmetic's largest
# finite value: a rule whose intermediates pass it refuses the case (BoundError).
ARITH_TINY = arb(0)
MAX_FINITE = arb(1.7976931348623157e308)

CONSTANTS = {
    "u": "2^-53",
    "gamma(n)": "n u / (1 - n u)",
    "C_EXP": C_EXP,
    "C_SHIFT": C_SHIFT,
    "C_IN": C_IN,
    "C_LSE": C_LSE,
    "C_DIV": C_DIV,
    "C_LOG": C_LOG,
    "SCORE_EXTRA": SCORE_EXTRA,
    "SECOND_ORDER": SECOND_ORDER,
    "safety_factor": SAFETY,
    "resolution": "2^-46",
    "underflow": "2^-1000",
    "bound_significant_bits": BOUND_SIG_BITS,
}


class BoundError(ValueError):
    """The first-order analysis does not apply (a logit error bound above MAX_FIRST_ORDER)."""


def _exponent(x: arb) -> int:
    """k for a parameter 2^k (the messages name the format's guard, read at call time)."""
    return round(math.log2(float(x.mid())))


def gamma(n: int) -> arb:
    return n * U / (1 - n * U)


def _plus(a: arb_mat, e: arb_mat | None) -> arb_mat:
    return a if e is None else a + e


def matmul(a_abs: arb_mat, e_a: arb_mat | None, b_abs: arb_mat, e_b: arb_mat | None, k: int, extra: int = 0):
    """Error of ``A B`` (inner dimension k) from |A|, e_A, |B|, e_B; ``extra`` more roundings."""
    err = gamma(k + extra) * (_plus(a_abs, e_a) * _plus(b_abs, e_b))
    if e_b is not None:
        err = err + a_abs * e_b
    if e_a is not None:
        err = err + e_a * _plus(b_abs, e_b)
    return err


def affine(x_abs, e_x, w_abs, e_w, b_abs, e_b, k: int) -> arb_mat:
    """Error of ``X W + b`` (b a 1 x n row broadcast over the rows; None when absent)."""
    if b_abs is None:
        return matmul(x_abs, e_x, w_abs, e_w, k)
    n = x_abs.nrows()
    base = _plus(x_abs, e_x) * _plus(w_abs, e_w) + am.bcast_rows(_plus(b_abs, e_b), n)
    err = gamma(k + 1) * base
    if e_w is not None:
        err = err + x_abs * e_w
    if e_x is not None:
        err = err + e_x * _plus(w_abs, e_w)
    if e_b is not None:
        err = err + am.bcast_rows(e_b, n)
    return err


@dataclass
class SoftmaxErr:
    """The error model of a matrix of softmax weights (rows are softmaxes), for its consumers.

    A correct implementation's weights are ``A' = softmax(S + eta) (1 + eps)`` row by row, with
    ``|eta_ij| <= eta[i, j]`` (logit errors: scores, shift, exp; a part common to a row does not
    count) and ``|eps_ij| <= eps[i]`` (unnormalised: sum, division, log-sum-exp). ``norm`` bounds
    ``|softmax(S + eta) - A|`` (first-order term plus ``second[i] A_ij``); ``err`` the total.
    """

    a: arb_mat  # exact weights (balls)
    err: arb_mat  # total error bound
    norm: arb_mat  # bound on |A~ - A|, A~ = softmax(S + eta): rows of A~ - A sum to exactly 0
    eta: arb_mat  # logit error bounds (0 for removed keys)
    eps: arb_mat  # (n x 1) unnormalised relative error bound per row
    second: arb_mat  # (n x 1) second-order coefficient R_i: |A~ - A - first order| <= R_i A
    rho: list[list[arb]]  # relative error bounds of each weight (the loss uses its label's)


def softmax_row(
    a: list[arb], t_abs: list[arb], e_s: list[arb] | None, kept: list[bool], s_abs: list[arb], lse_abs: arb
) -> dict[str, Any]:
    """One row of the softmax rule: logit bounds eta, eps, R, and the weights' error bounds.

    ``a`` are the exact weights (balls), ``t_abs`` bounds on the shifted scores |t_j|, ``e_s``
    the logit error bounds from the scores (None: exact), ``s_abs`` bounds on the scores |S_j|
    themselves (their relative perturbation, C_IN), ``lse_abs`` on the row's log-sum-exp |lse|
    (the normaliser's rounding in a log-domain formulation, C_LSE). Removed keys: weight 0, error 0.
    """
    n = sum(kept)
    eta = [
        ((e_s[j] if e_s is not None else 0) + C_SHIFT * U * t_abs[j] + C_IN * U * s_abs[j] + C_EXP * U)
        if kept[j]
        else arb(0)
        for j in range(len(a))
    ]
    eps = softmax_eps(n) + C_LSE * U * lse_abs
    mean = sum((a[j] * eta[j] for j in range(len(a)) if kept[j]), arb(0))  # <A, eta>
    # Keys whose weight is below e^-745 even with the logits perturbed (theirs, and the row
    # maximum's by up to `top`): a correct implementation returns 0 or a subnormal there, inside
    # the UNDERFLOW allowance; they do not bound eta. With one live key left its weight is 1 within
    # that allowance whatever the logit errors (a saturated softmax carrying a trajectory's
    # parameter errors, bounds.py "Trajectories"): there is no expansion to guard.
    top = max((eta[j].upper() for j in range(len(a)) if kept[j]), default=arb(0))
    live = [j for j in range(len(a)) if kept[j] and not (t_abs[j] - eta[j] - top > NEGLIGIBLE_LOGIT)]
    big = max((eta[j].upper() for j in live), default=arb(0)) if len(live) > 1 else arb(0)
    if not (big + eps < MAX_FIRST_ORDER):  # an arb comparison is True only when certain
        raise BoundError(
            f"a softmax row's first-order terms exceed 2^{_exponent(MAX_FIRST_ORDER)} "
            f"(logit error bound {_short(big)}, unnormalised relative error {_short(eps)})"
        )
    second = SECOND_ORDER * big * big
    norm, rho = [], []
    for j in range(len(a)):
        if not kept[j]:
            norm.append(arb(0))
            rho.append(arb(0))
            continue
        # |d A_j / d eta_l| = A_j |[j = l] - A_l|, so the first-order change is at most
        # A_j ((1 - A_j) eta_j + sum_{l != j} A_l eta_l) (both terms >= 0; balls at their upper ends)
        r = (1 - a[j]).abs_upper() * eta[j] + (mean - a[j] * eta[j]).abs_upper() + second
        norm.append(r)
        rho.append(r + (1 + r) * eps)
    a_abs = [x.abs_upper() for x in a]
    return {
        "eta": eta,
        "eps": eps,
        "second": second,
        "norm": [a_abs[j] * norm[j] for j in range(len(a))],
        "err": [a_abs[j] * rho[j] for j in range(len(a))],
        "rho": rho,
    }


def _short(x: arb) -> str:
    """An upper bound of x, in 4 significant digits, for a message."""
    return f"{float(x.upper()):.4g}"


def softmax_eps(n: int) -> arb:
    """The unnormalised relative error of a softmax over n keys (see the module docstring)."""
    return gamma(n) + C_DIV * U + 2 * C_EXP * U + (C_EXP + 1) * U * arb(max(n, 1)).log()


def centred_cols(m: arb_mat) -> arb_mat:
    """|M - 1 c^T| with c the midrange of each column (from the balls' midpoints: any c is valid)."""
    r, c = am.shape(m)
    e = m.entries()
    centre = []
    for f in range(c):
        mids = [e[i * c + f].mid() for i in range(r)]
        centre.append((max(mids) + min(mids)) / 2)
    return am.build(r, c, [(e[i * c + f] - centre[f]).abs_upper() for i in range(r) for f in range(c)])


def spread(w: arb_mat, m: arb_mat, h: arb_mat, scale: arb_mat | None = None, g: arb_mat | None = None) -> arb_mat:
    """``out[i, f] = sum_j w[i, j] |scale[i, j] (m[j, f] - h[i, f]) - g[i, f]|`` (scale 1, g 0 when None).

    The exact first-order sensitivity of a product with softmax weights to their logit errors: a
    centre h per row (the weighted mean) instead of |m|. Costs n_q n_k d entrywise operations (in
    plain Python loops: the fastest way through python-flint for an entrywise |.|).
    """
    n_q, d = w.nrows(), m.ncols()
    w_rows, m_rows, h_rows = am.rows_of(w), am.rows_of(m), am.rows_of(h)
    s_rows = am.rows_of(scale) if scale is not None else None
    g_rows = am.rows_of(g) if g is not None else None
    zero = arb(0)
    out: list[arb] = []
    for i in range(n_q):
        acc = [zero] * d
        hi = h_rows[i]
        for j, wij in enumerate(w_rows[i]):
            if wij == 0:  # a removed key, or an exact zero: contributes nothing
                continue
            if s_rows is None:
                acc = [x + wij * (y - z).abs_upper() for x, y, z in zip(acc, m_rows[j], hi, strict=True)]
            else:
                sij = s_rows[i][j]
                acc = [
                    x + wij * (sij * (y - z) - t).abs_upper()
                    for x, y, z, t in zip(acc, m_rows[j], hi, g_rows[i], strict=True)
                ]
        out.extend(acc)
    return am.build(n_q, d, out)


def weighted_values(sm: SoftmaxErr, v_abs: arb_mat, e_v: arb_mat | None, v: arb_mat, y: arb_mat) -> arb_mat:
    """Error of ``Y = A V`` with A softmax weights (``sm``) and Y the exact product.

    With A~ = softmax(S + eta): (A~ - A) V = sum_l (A~ - A)_il (V_l - Y_i) exactly (its rows sum
    to 0), whose first-order part is sum_l A_il eta_il (V_l - Y_i); then the unnormalised part,
    V's error and the product's rounding::

        e_Y = sum_l A_il eta_il |V_l - Y_i| + R_i sum_l A_il |V_l - Y_i| + E |V| + |A'| e_V
              + gamma(n_k) |A'| (|V| + e_V),   E = (A + norm) eps,  |A'| = A + e_A
    """
    n_k = sm.a.ncols()
    a_abs = am.eabs(sm.a)
    err = spread(am.emul(a_abs, sm.eta), v, y)
    # second order: R_i sum_l A_il |V_l - Y_i| <= R_i ((A |V|)_i + |Y_i|), as rows of A sum to 1
    err = err + am.emul(am.bcast_cols(sm.second, v.ncols()), a_abs * v_abs + am.eabs(y))
    unnorm = am.emul(a_abs + sm.norm, am.bcast_cols(sm.eps, n_k))
    a_all = a_abs + sm.err
    err = err + unnorm * v_abs
    if STORAGE_U is not None:
        # mixed precision: the weights rounded to storage before the product (module docstring)
        to_s = STORAGE_U * a_all + _tiny_where_nonzero(a_all)
        err = err + to_s * v_abs
        a_all = a_all + to_s
    err = err + gamma(n_k) * (a_all * _plus(v_abs, e_v))
    if e_v is not None:
        err = err + a_all * e_v
    return err


def attention_grads(
    sm: SoftmaxErr,
    d_a: arb_mat,
    e_da: arb_mat | None,
    q: arb_mat,
    e_q: arb_mat | None,
    k: arb_mat,
    e_k: arb_mat | None,
    extra: int,
) -> tuple[arb_mat, arb_mat, arb_mat, arb_mat]:
    """Errors of ``dS K`` and ``dS^T Q`` (before the scale), dS = A * (dA - rowsum(dA * A)).

    Returns (value of dS K, its error, value of dS^T Q, its error). With C = dA - r1^T (exact),
    k^_i = sum_j A_ij K_j, P = dS K, the computed dS' differs from dS by three parts:

    * from the logit errors, dS(A~, dA) - dS(A, dA) = D C - A~ <D, C> (D = A~ - A): rows sum to 0.
      Exact sensitivities: d P_i / d eta_ij = A_ij (C_ij (K_j - k^_i) - P_i);
      d (dS^T Q)_j / d eta_il = Q_i A_ij ([l = j] C_ij - A_il (C_ij + C_il)). So::

          e_P   <= sum_j A_ij eta_ij |C_ij (K_j - k^_i) - P_i| + R_i sum_j A_ij |C_ij| (|K_j| + |k^_i|)
                   + (sum_j N_ij |C_ij|)(sum_j N_ij (|K_j| + |k^_i|))
          e_Q^T <= sum_i (|Q_i| + e_Qi) (A_ij [eta_ij |C_ij (1 - 2 A_ij)| + sum_{l != j} A_il eta_il |C_ij + C_il|]
                   + R_i A_ij (|C_ij| + sum_l A_il |C_il|) + N_ij sum_l N_il |C_il|)

      with N = norm (the sum over l is n^3 work: the classifier's sentences are short);
    * from dA's error G (|G| <= e_dA): A~ (G - <A~, G>), rows sum to 0:
      e_P <= sum_j H_ij e_dA,ij |K_j - k^_i| + (sum_j H_ij e_dA,ij)(sum_j N_ij (|K_j| + |k^_i|)),
      e_Q^T <= sum_i (|Q_i| + e_Qi) H_ij ((|1 - A_ij| + N_ij) e_dA,ij + sum_{l != j} H_il e_dA,il),
      H = A + N;
    * the unnormalised part E = H eps and the roundings (r: gamma(n) rowsum(|A'||dA'|); the
      centring and the product, factored or distributed: 2u |A'| (|dA'| + |r'|)), entrywise:
      E (|dA'| + r^) + |A'| (rowsum(E |dA'|) + gamma(n) r^ + 2u (|dA'| + (1 + gamma(n)) r^)),
      r^ = rowsum(|A'| |dA'|); it meets K and Q entrywise.

    Then K's and Q's own errors and the products' roundings: the matmul rule with the total e_dS
    and gamma(n + extra), a scale applied inside the product (to dS, K or Q) being ``extra``
    more roundings of every term.
    """
    n = sm.a.ncols()
    d = k.ncols()
    a = sm.a
    a_abs = am.eabs(a)
    r = am.rowsum(am.emul(d_a, a))
    c = d_a - am.bcast_cols(r, n)
    c_abs = am.eabs(c)
    ds = am.emul(a, c)
    p = ds * k
    dsq = ds.transpose() * q
    k_hat = a * k
    k_abs, q_abs = am.eabs(k), am.eabs(q)
    khat_abs = am.eabs(k_hat)
    norm, eta, second = sm.norm, sm.eta, sm.second
    h = a_abs + norm
    ones_d = am.full(1, d, 1)

    # |K_j| + |k^_i| summed with weights W: W |K| + rowsum(W) |k^|
    def around(w: arb_mat) -> arb_mat:
        return w * k_abs + am.emul(am.rowsum(w) * ones_d, khat_abs)

    # --- the logit errors
    ae = am.emul(a_abs, eta)
    e_p = spread(ae, k, k_hat, scale=c, g=p)
    ac = am.emul(a_abs, c_abs)
    nc = am.rowsum(am.emul(norm, c_abs))
    e_p = e_p + am.emul(second * ones_d, around(ac)) + am.emul(nc * ones_d, around(norm))
    # d_k's sensitivity to the logits of row i, summed over them exactly for each key j
    entries = []
    ae_rows, a_rows, c_rows, eta_rows = am.rows_of(ae), am.rows_of(a_abs), am.rows_of(c), am.rows_of(eta)
    ace, se, ne_c, n_e = am.rowsum(ac).entries(), second.entries(), nc.entries(), norm.entries()
    for i in range(a.nrows()):
        w, ci, ai = ae_rows[i], c_rows[i], a_rows[i]
        live = [key for key in range(n) if w[key] != 0]
        for j in range(n):
            m = eta_rows[i][j] * (ci[j] * (1 - 2 * ai[j])).abs_upper()
            m = m + sum((w[key] * (ci[j] + ci[key]).abs_upper() for key in live if key != j), arb(0))
            m = ai[j] * m + se[i] * ai[j] * (ci[j].abs_upper() + ace[i]) + n_e[i * n + j] * ne_c[i]
            entries.append(m)
    sens_q = am.build(a.nrows(), n, entries)
    e_dsq = sens_q.transpose() * _plus(q_abs, e_q)
    # --- dA's error
    e_ds = am.emul(norm, c_abs) + am.emul(h, am.bcast_cols(nc, n))  # the logit part of |dS' - dS|
    if e_da is not None:
        he = am.emul(h, e_da)
        e_p = e_p + spread(he, k, k_hat) + am.emul(am.rowsum(he) * ones_d, around(norm))
        # A~_ij ((1 - A~_ij) G_ij - sum_{l != j} A~_il G_il), |1 - A~| <= |1 - A| + N
        one_minus = am.eabs(am.full(*am.shape(a), 1) - a) + norm
        g_part = am.emul(h, am.emul(one_minus, e_da) + am.bcast_cols(am.rowsum(he), n) - he)
        e_dsq = e_dsq + g_part.transpose() * _plus(q_abs, e_q)
        e_ds = e_ds + g_part
    # --- the unnormalised part and the roundings
    unnorm = am.emul(h, am.bcast_cols(sm.eps, n))
    a_all = a_abs + sm.err
    da_all = _plus(am.eabs(d_a), e_da)
    r_hat = am.rowsum(am.emul(a_all, da_all))
    rest = am.emul(unnorm, da_all + am.bcast_cols(r_hat, n)) + am.emul(
        a_all,
        am.bcast_cols(am.rowsum(am.emul(unnorm, da_all)) + gamma(n) * r_hat, n)
        + 2 * U * (da_all + am.bcast_cols((1 + gamma(n)) * r_hat, n)),
    )
    e_p = e_p + rest * _plus(k_abs, e_k)
    e_dsq = e_dsq + rest.transpose() * _plus(q_abs, e_q)
    e_ds = e_ds + rest
    # --- K's and Q's errors, and the products' roundings (inner dimension n; ``extra`` more for
    # a scale applied to dS, K or Q before the product)
    ds_all = am.eabs(ds) + e_ds
    e_p = e_p + gamma(n + extra) * (ds_all * _plus(k_abs, e_k))
    e_dsq = e_dsq + gamma(n + extra) * (ds_all.transpose() * _plus(q_abs, e_q))
    if e_k is not None:
        e_p = e_p + ds_all * e_k
    if e_q is not None:
        e_dsq = e_dsq + ds_all.transpose() * e_q
    return p, e_p, dsq, e_dsq


def colsum(x_abs: arb_mat, e_x: arb_mat | None) -> arb_mat:
    """Error of the column sums (r x c -> 1 x c) of r terms each."""
    err = gamma(x_abs.nrows()) * am.colsum(_plus(x_abs, e_x))
    return err if e_x is None else err + am.colsum(e_x)


def entry_sub(d_abs: arb_mat, e_x: arb_mat | None, e_y: arb_mat | None) -> arb_mat:
    """Error of ``X - Y`` entrywise, given |X - Y|; the same rule for ``X + Y`` given |X + Y| (a
    transformer's residual adds)."""
    prop = _plus(_plus(am.zeros(*am.shape(d_abs)), e_x), e_y)
    return prop + U * (d_abs + prop)


def sgd(p_abs: arb_mat, e_p: arb_mat | None, g_abs: arb_mat, e_g: arb_mat | None, lr: arb) -> arb_mat:
    """Error of ``p - lr g``: the errors p and g carry in, and the update's two roundings (or one
    with FMA) at the size of its operands."""
    err = gamma(2) * (_plus(p_abs, e_p) + lr * _plus(g_abs, e_g))
    if e_g is not None:
        err = err + lr * e_g
    return err if e_p is None else err + e_p


def loss(rho_y: arb, loss_abs: arb, t_y_abs: arb) -> arb:
    return rho_y + C_LOG * U * (loss_abs + t_y_abs)


def to_storage(x_abs: arb_mat, e_x: arb_mat | None) -> arb_mat:
    """Error of X rounded to the storage format (mixed precision): ``e + u_s (|X| + e) + tau_s``."""
    assert STORAGE_U is not None
    prop = _plus(x_abs, e_x)
    err = STORAGE_U * prop + _tiny_where_nonzero(prop)
    return err if e_x is None else err + e_x


def storage_point(x_abs: arb, e_x: arb) -> arb:
    """One value's error after a declared rounding point to storage (module docstring, "Mixed
    precision"): ``e + u_s (|x| + e) + tau_s`` (no tau_s on an exact 0); ``e`` outside a storage tier."""
    if STORAGE_U is None:
        return e_x
    prop = x_abs + e_x
    return e_x + STORAGE_U * prop + (arb(0) if prop == 0 else STORAGE_TINY)


def storage_node(x_abs: arb_mat, e_x: arb_mat | None) -> arb_mat | None:
    """``to_storage`` at a declared rounding point inside a graph; ``e_x`` outside a storage tier."""
    return e_x if STORAGE_U is None else to_storage(x_abs, e_x)


@contextlib.contextmanager
def storage_arithmetic() -> Iterator[None]:
    """At a storage tier, the rules inside the block charge each operation's rounding at
    ``u_s + u + u_s u`` (module docstring, "Mixed precision"): a kernel whose every elementwise
    operation computes in the accumulation format and stores its result (torch's optimizers on
    bfloat16 tensors); with :func:`op_tiny` per rounding. Nothing changes outside a storage tier."""
    global U
    saved = U
    if STORAGE_U is not None:
        U = STORAGE_U + U + STORAGE_U * U
    try:
        yield
    finally:
        U = saved


@contextlib.contextmanager
def scalar_arithmetic() -> Iterator[None]:
    """At a storage tier, the rules inside the block charge float32's u (2^-24) where that is finer:
    a step's scalars (bias corrections) formed in float32 or wider (torch's Python floats, a
    Float16 port's Float64 keywords), whatever the tensors' format. Nothing changes elsewhere."""
    global U
    saved = U
    if STORAGE_U is not None:
        U = min(U, arb(2.0**-24))
    try:
        yield
    finally:
        U = saved


def op_tiny() -> arb:
    """The absolute error one rounding may add in a storage tier's subnormals (a stored result's
    tau_s, float16 arithmetic's own); 0 elsewhere."""
    return STORAGE_TINY + ARITH_TINY


def _tiny_where_nonzero(m: arb_mat) -> arb_mat:
    """tau_s where an entry may be non-zero: an exact 0 (a removed key's weight, a masked query's
    zero output) is stored exactly, and carries no rounding."""
    r, c = am.shape(m)
    return am.build(r, c, [arb(0) if x == 0 else STORAGE_TINY for x in m.entries()])


def stored(err: arb, expected_abs: arb) -> arb:
    """The stored bound's exact value (before rounding up): SAFETY B + RESOLUTION |e| + UNDERFLOW."""
    return SAFETY * err + RESOLUTION * expected_abs + UNDERFLOW
