"""Per-element error bounds that every correct float64 implementation meets: the error analysis.

This module is the one place where the suite's tolerances are derived. Each rule below maps the
magnitudes of exact quantities (computed in ball arithmetic in the same pass as the values, see
``attention_ports.exact``) and the error bounds of its operands to an error bound of its result.
Composed along an operation's computation graph they give, for every element of every expected
output, a bound ``B`` on ``|computed - exact|`` for a float64 implementation with

* any summation order (BLAS blocking, pairwise or sequential sums, multi-threaded reductions),
  with or without fused multiply-add;
* an ``exp``/``log`` accurate to ``C_EXP`` ulps (glibc, openlibm, Julia, SLEEF, NumPy's SIMD
  kernels are all within 1-4 ulps);
* any of the usual formulations: the scale applied to the scores or to q and k, the softmax as
  ``exp(s - max) / sum`` or times ``1 / sum`` or as ``exp(s - logsumexp)``, the loss as a stable
  log-softmax or ``-log(probs[label])``.

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
  A finite non-zero additive mask entry adds ``u |S|`` (the addition's rounding).
* **Softmax** along a row with kept keys K (|K| = n) and exact shifted scores ``t = S - max S``:
  a perturbation ``eta`` of the logits changes ``A_j`` by ``A_j (eta_j - sum_l A_l eta_l)`` to
  first order. The logit of key j is perturbed by its score error ``e_S,j``, by the rounding of
  the shift (``C_SHIFT u |t_j|``: ``s - max``, and ``- logsumexp`` in log-domain formulations), and
  by ``exp``'s own error (``C_EXP u``); the normalising sum of n positive terms adds gamma(n), the
  division (or reciprocal and product) ``C_DIV u``. Hence the relative error bound::

      rel_j   = e_S,j + C_SHIFT u |t_j| + C_EXP u
      rho_j   = rel_j + sum_l A_l rel_l + gamma(n) + C_DIV u
      e_A,j   = A_j rho_j

  Note the ``u |t_j|`` terms: scores of order 1e3 make every correct implementation's weights
  wrong by ~1e-13 relative. Keys removed by the mask have weight exactly 0 and error 0.
  First order: ``exp(rho) - 1 <= rho (1 + rho)``, and the engine refuses a case where any rho
  exceeds ``MAX_FIRST_ORDER`` (2**-20), so the neglected terms are below 2**-20 of the bound.
* **Attention output** ``O = A V``: the matmul rule with k = n_k. A fully masked query row under
  the "zeros" convention is exactly 0 (error 0); under "uniform" its weights are 1/n_k with one
  rounding (``C_DIV u / n_k``) and its output goes through the matmul rule.
* **Sums and means** of n terms: ``e = sum e_i + gamma(n) sum (|x_i| + e_i)`` (a mean: the same,
  divided by n, its division's rounding inside gamma(n)).
* **Entrywise** ``X - Y``: ``e_X + e_Y + u (|X - Y| + e_X + e_Y)``; ``X * Y``:
  ``|X| e_Y + e_X (|Y| + e_Y) + u (|X| + e_X)(|Y| + e_Y)``.
* **Loss** ``L = -log p_y`` (however computed): ``e_L = rho_y + C_LOG u (|L| + |t_y|)``, with
  ``rho_y`` the relative error bound of ``p_y`` (softmax rule, its logits being the pooled
  outputs with their errors): ``-log(p_y (1 + rho)) = L - rho + O(rho^2)``, and the ``log`` of a
  log-sum-exp formulation rounds a value of size at most ``|L| + |t_y|``.
* **Backward**: the reference's analytic gradient is a chain of the operations above (products,
  sums, entrywise differences and products, the softmax Jacobian ``A (dA - rowsum(dA A))``), so
  the gradient bounds are the same rules applied along it, propagating the forward errors. Other
  correct formulations (torch autograd, the R and Julia ports) differ in the order of the same
  products; the rules do not depend on the order.
* **SGD** ``p - lr g``: ``lr e_g + gamma(2) (|p| + lr (|g| + e_g))`` (two roundings, or one with FMA).
* **Trajectories** (many SGD steps): the bound on the final parameters is the *sum over steps* of
  each step's own rounding bound (the rule above with exact parameters at that step), and an
  epoch loss's is the mean of its steps' loss bounds plus ``|g| . D_t`` (first-order effect of
  the error ``D_t`` accumulated in the parameters by then) plus the mean's own rounding. This is
  the one part that is **not rigorous**: it assumes the training dynamics do not amplify an
  earlier step's error (they contract at these learning rates). Evidence: measured, every
  implementation's final error stays well below this sum (README, "Tolerances").

Stored bound per element::

    bound = SAFETY * B  +  RESOLUTION * |expected|  +  UNDERFLOW

* ``SAFETY = 2`` is the one safety factor: it covers the neglected second-order terms (< 2**-20
  of B, see above) and libm functions up to twice ``C_EXP`` ulps.
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

from flint import arb, arb_mat

from attention_ports import arbmat as am

U = arb(2.0**-53)
C_EXP = 4  # ulps of exp / log
C_SHIFT = 2  # roundings on a shifted score (s - max, then - logsumexp)
C_DIV = 2  # roundings of the normalisation (a division, or a reciprocal and a product)
C_LOG = 8  # ulps of the loss's log and final subtraction, relative to |L| + |t_y|
SCORE_EXTRA = 6  # roundings of the scale beyond the dot product's own
SAFETY = 2
RESOLUTION = arb(2.0**-46)
UNDERFLOW = arb(2.0**-1000)
BOUND_SIG_BITS = 8
MAX_FIRST_ORDER = arb(2.0**-20)
NEGLIGIBLE_LOGIT = 745  # exp(-745) is below half the smallest subnormal

CONSTANTS = {
    "u": "2^-53",
    "gamma(n)": "n u / (1 - n u)",
    "C_EXP": C_EXP,
    "C_SHIFT": C_SHIFT,
    "C_DIV": C_DIV,
    "C_LOG": C_LOG,
    "SCORE_EXTRA": SCORE_EXTRA,
    "safety_factor": SAFETY,
    "resolution": "2^-46",
    "underflow": "2^-1000",
    "bound_significant_bits": BOUND_SIG_BITS,
}


class BoundError(ValueError):
    """The first-order analysis does not apply (a relative error bound above MAX_FIRST_ORDER)."""


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


def softmax_row(a: list[arb], t_abs: list[arb], e_s: list[arb] | None, kept: list[bool]) -> tuple[list, list]:
    """Errors and relative errors of one softmax row (removed keys: weight 0, error 0)."""
    n = sum(kept)
    rel = [
        ((e_s[j] if e_s is not None else 0) + C_SHIFT * U * t_abs[j] + C_EXP * U) if kept[j] else arb(0)
        for j in range(len(a))
    ]
    common = sum((a[j] * rel[j] for j in range(len(a)) if kept[j]), arb(0)) + gamma(n) + C_DIV * U
    rho = [rel[j] + common if kept[j] else arb(0) for j in range(len(a))]
    for j, r in enumerate(rho):
        if not kept[j] or (t_abs[j] - r > NEGLIGIBLE_LOGIT):
            # A weight below e^-745 even with its logit perturbed by rho: a correct implementation
            # returns 0 or a subnormal, and its error is under the UNDERFLOW allowance whatever rho.
            continue
        if not (r.upper() < MAX_FIRST_ORDER):  # an arb comparison is True only when certain
            raise BoundError(f"a softmax weight's relative error bound {r.upper()} exceeds 2^-20")
    return [a[j] * rho[j] for j in range(len(a))], rho


def colsum(x_abs: arb_mat, e_x: arb_mat | None) -> arb_mat:
    """Error of the column sums (r x c -> 1 x c) of r terms each."""
    err = gamma(x_abs.nrows()) * am.colsum(_plus(x_abs, e_x))
    return err if e_x is None else err + am.colsum(e_x)


def entry_sub(d_abs: arb_mat, e_x: arb_mat | None, e_y: arb_mat | None) -> arb_mat:
    """Error of ``X - Y`` entrywise, given |X - Y|."""
    prop = _plus(_plus(am.zeros(*am.shape(d_abs)), e_x), e_y)
    return prop + U * (d_abs + prop)


def entry_mul(x_abs, e_x, y_abs, e_y) -> arb_mat:
    """Error of ``X * Y`` entrywise."""
    err = U * am.emul(_plus(x_abs, e_x), _plus(y_abs, e_y))
    if e_y is not None:
        err = err + am.emul(x_abs, e_y)
    if e_x is not None:
        err = err + am.emul(e_x, _plus(y_abs, e_y))
    return err


def rowdot(x_abs, e_x, y_abs, e_y) -> arb_mat:
    """Error of ``r_i = sum_l X_il Y_il`` (r x c -> r x 1)."""
    n = x_abs.ncols()
    err = gamma(n) * am.rowsum(am.emul(_plus(x_abs, e_x), _plus(y_abs, e_y)))
    if e_y is not None:
        err = err + am.rowsum(am.emul(x_abs, e_y))
    if e_x is not None:
        err = err + am.rowsum(am.emul(e_x, _plus(y_abs, e_y)))
    return err


def sgd(p_abs: arb_mat, g_abs: arb_mat, e_g: arb_mat | None, lr: arb) -> arb_mat:
    """Error of ``p - lr g`` for an exact p."""
    err = gamma(2) * (p_abs + lr * _plus(g_abs, e_g))
    return err if e_g is None else err + lr * e_g


def loss(rho_y: arb, loss_abs: arb, t_y_abs: arb) -> arb:
    return rho_y + C_LOG * U * (loss_abs + t_y_abs)


def stored(err: arb, expected_abs: arb) -> arb:
    """The stored bound's exact value (before rounding up): SAFETY B + RESOLUTION |e| + UNDERFLOW."""
    return SAFETY * err + RESOLUTION * expected_abs + UNDERFLOW
