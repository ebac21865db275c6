"""Certified conversion of arb balls to float64, and outward rounding of error bounds.

Everything here is exact integer arithmetic on Python ints: an arb midpoint or radius is a dyadic
number ``man * 2**exp`` (``arb.man_exp()``), and the double nearest to it is found by shifting
integers, never by a floating-point operation, so the result is the same on every CPU.

``round_ball`` is the certificate: a ball ``[m - r, m + r]`` holds the exact value; if both ends
round (to nearest, ties to even, subnormals included) to the same double, that double *is* the
correctly rounded exact value. If not, the caller raises the working precision and recomputes.

Zero: a value that is exactly zero in exact arithmetic (a gradient that vanishes by symmetry)
comes out of ball arithmetic as a ball around 0 that never shrinks to a point. Its ends round to
-0.0 and +0.0, which we treat as the same double, so such a value certifies as soon as the radius
is below 2**-1075 (half the smallest subnormal). It is stored as +0.0: the sign of a zero is not
part of what the suite checks (the comparator treats -0.0 == +0.0).
"""

from __future__ import annotations

import math

from flint import arb

# float64: 52 stored mantissa bits, exponents of normal numbers -1022..1023.
MANT_BITS = 53
MIN_EXP = -1074  # the smallest subnormal is 2**-1074
MAX_FINITE = float.fromhex("0x1.fffffffffffffp+1023")


def _round_shift(man: int, shift: int) -> int:
    """``round(man / 2**shift)`` to nearest, ties to even, for man >= 0 and shift > 0."""
    q = man >> shift
    rem = man - (q << shift)
    half = 1 << (shift - 1)
    if rem > half or (rem == half and q & 1):
        q += 1
    return q


def dyadic_to_double(man: int, exp: int) -> float:
    """The double nearest to ``man * 2**exp`` (ties to even, gradual underflow, overflow to inf)."""
    if man == 0:
        return 0.0
    neg = man < 0
    man = -man if neg else man
    top = man.bit_length() - 1 + exp  # value in [2**top, 2**(top+1))
    if top < MIN_EXP - 2:  # below 2**-1076, under half the smallest subnormal (no huge shifts)
        return -0.0 if neg else 0.0
    if top > 1024:
        return -math.inf if neg else math.inf
    # The spacing of doubles around the value: 2**(top-52) for normal numbers, 2**-1074 below.
    quantum = max(top - (MANT_BITS - 1), MIN_EXP)
    if exp >= quantum:
        m, q = man, exp  # already a multiple of the spacing: exact (if in range)
    else:
        m, q = _round_shift(man, quantum - exp), quantum
    try:
        value = math.ldexp(m, q)  # exact: m has at most 54 bits and q is in range, or it overflows
    except OverflowError:
        value = math.inf
    if value > MAX_FINITE:
        value = math.inf
    return -value if neg else value


# Exponents reach far beyond double range (exp(-1e12) is a fine arb): keep the integer shifts
# bounded by deciding such balls from their exponents alone.
_FAR = 4000


def _top(man: int, exp: int) -> int:
    """|man * 2**exp| < 2**_top(man, exp)."""
    return abs(man).bit_length() + exp


def arb_ends(x: arb) -> tuple[tuple[int, int], tuple[int, int]]:
    """The ends ``(m - r, m + r)`` of a finite ball as (man, exp) pairs (exact, or widened outward
    when the radius is below 2**-4000 of the midpoint)."""
    m_man, m_exp = (int(v) for v in x.mid().man_exp())
    r_man, r_exp = (int(v) for v in x.rad().man_exp())
    if r_man == 0:
        return (m_man, m_exp), (m_man, m_exp)
    if m_man and _top(m_man, m_exp) - _top(r_man, r_exp) > _FAR:
        r_man, r_exp = 1, _top(m_man, m_exp) - _FAR  # a larger radius: the ends move outward
    if m_man and _top(r_man, r_exp) - _top(m_man, m_exp) > _FAR:
        m_man, m_exp = 0, 0  # the midpoint is negligible next to the radius: widen to [-r', r']
        r_man, r_exp = r_man + 1, r_exp
    e = min(m_exp, r_exp) if m_man else r_exp
    m = m_man << (m_exp - e) if m_man else 0
    r = r_man << (r_exp - e)
    return (m - r, e), (m + r, e)


def round_ball(x: arb) -> float | None:
    """The correctly rounded double of the exact value enclosed by ``x``, or None if ``x`` is too wide.

    Both ends of the ball must round to the same double; -0.0 and +0.0 count as the same value and
    zero is returned as +0.0 (see the module docstring).
    """
    if not x.is_finite():
        return None
    lo, hi = arb_ends(x)
    if max(_top(*lo), _top(*hi)) < MIN_EXP - 1:
        return 0.0  # both ends below 2**-1076 in magnitude: nearer to 0 than to any subnormal
    if min(_top(*lo), _top(*hi)) > 1030 and (lo[0] > 0) == (hi[0] > 0):
        return math.inf if hi[0] > 0 else -math.inf
    a, b = dyadic_to_double(*lo), dyadic_to_double(*hi)
    if a != b:  # note -0.0 == 0.0 in Python
        return None
    return 0.0 if a == 0.0 else a


def missing_bits(x: arb) -> int:
    """A guess of how many more bits of working precision would let ``round_ball(x)`` succeed.

    A ball around zero needs a radius below 2**-1075; any other ball a radius well below one unit
    in the last place of its midpoint. The guess may be short when the exact value lies very close
    to a rounding boundary; the caller then escalates again.
    """
    if not x.is_finite():
        return 64
    r_man, r_exp = (int(v) for v in x.rad().man_exp())
    if r_man == 0:
        return 0
    log_r = r_man.bit_length() + r_exp  # radius < 2**log_r
    m_man, m_exp = (int(v) for v in x.mid().man_exp())
    if x.contains(0) or m_man == 0:
        target = MIN_EXP - 1
    else:
        top = abs(m_man).bit_length() - 1 + m_exp
        target = max(top - (MANT_BITS - 1), MIN_EXP) - 8  # radius at most 1/256 of an ulp
    return max(log_r - target, 1)


def round_up(x: arb, sig_bits: int) -> float:
    """An upper bound of the (non-negative) ball ``x``, rounded up to ``sig_bits`` significant bits.

    Used for error bounds: they are stored rounded *up*, on a coarse grid, so that they are a
    deterministic function of the inputs and never smaller than the computed enclosure.
    """
    if not x.is_finite():
        return math.inf
    (_, _), (man, exp) = arb_ends(x)
    if man <= 0:
        return 0.0
    extra = man.bit_length() - sig_bits
    if extra > 0:
        q = man >> extra
        if (q << extra) != man:
            q += 1
        man, exp = q, exp + extra
    # Now man < 2**(sig_bits+1); make sure the double is >= the value (round up below 2**-1074).
    top = man.bit_length() - 1 + exp
    quantum = max(top - (MANT_BITS - 1), MIN_EXP)
    if exp < quantum:
        shift = quantum - exp
        q = man >> shift
        if (q << shift) != man:
            q += 1
        man, exp = q, quantum
    try:
        return math.ldexp(man, exp)
    except OverflowError:
        return math.inf
