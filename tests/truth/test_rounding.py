"""Certified rounding: arb balls to float64, exact integer arithmetic checked against Fractions.

CPython's ``float(Fraction)`` is correctly rounded (round half to even, gradual underflow, an
OverflowError past the largest double), an independent oracle for ``dyadic_to_double``.
"""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from flint import arb, ctx

from attention_ports.truth.rounding import dyadic_to_double, missing_bits, round_ball, round_up

MAX = float.fromhex("0x1.fffffffffffffp+1023")
TINY = math.ldexp(1.0, -1074)


def oracle(man: int, exp: int) -> float:
    if exp > 10**6:  # Fraction cannot build 2**(10**12); the answers are plain
        return math.inf if man > 0 else -math.inf
    if exp < -(10**6):
        return math.copysign(0.0, man)
    x = Fraction(man) * Fraction(2) ** exp
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def same(a: float, b: float) -> bool:
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b) if a == 0 else a == b


TRICKY = [
    (1, 0),
    ((1 << 53) + 1, 0),  # halfway between 2**53 and 2**53 + 2: ties to even (down)
    ((1 << 53) + 3, 0),  # halfway, ties to even (up)
    ((1 << 54) + 2, -1),  # exactly representable after scaling
    ((1 << 60) - 1, -7),
    (1, -1074),  # the smallest subnormal
    (1, -1075),  # half of it: ties to even -> 0
    (3, -1075),  # 1.5 smallest subnormals: ties to even -> 2 * 2**-1074
    (5, -1076),  # 1.25 -> 1
    ((1 << 52) - 1, -1074),  # the largest subnormal
    ((1 << 53) - 1, -1075),  # halfway between the largest subnormal and the smallest normal
    (1, -1022),
    ((1 << 53) - 1, 971),  # the largest double
    ((1 << 54) - 1, 970),  # halfway to 2**1024: ties to even -> overflow to inf
    ((1 << 54) - 3, 970),  # just below halfway: the largest double
    (1, 1024),  # 2**1024
    (1, -2000),  # far below the smallest subnormal
    (12345, 2000),
    (-((1 << 53) + 1), 0),
    (-1, -1075),  # -0.0
    (-3, -1075),
    (1, -(10**12)),  # far outside double range: no shift by a trillion bits
    (-7, 10**12),
    ((1 << 80) + 1, -1157),  # just under half the smallest subnormal
]


@pytest.mark.parametrize(("man", "exp"), TRICKY)
def test_tricky_values_round_like_fractions(man: int, exp: int) -> None:
    assert same(dyadic_to_double(man, exp), oracle(man, exp))


def test_random_dyadics_round_like_fractions() -> None:
    rnd = random.Random(8)
    for _ in range(20000):
        bits = rnd.choice([1, 2, 52, 53, 54, 55, 64, 120, 400])
        man = rnd.getrandbits(bits) | 1
        if rnd.random() < 0.5:
            man = -man
        exp = rnd.choice([rnd.randint(-1200, 1100), rnd.randint(-1080 - bits, -1070 - bits), rnd.randint(-60, 10)])
        assert same(dyadic_to_double(man, exp), oracle(man, exp)), (man, exp)


def test_halfway_cases_in_every_binade_tie_to_even() -> None:
    for e in (-1074 - 1, -1060, -1023, -1022, -500, 0, 500, 969):
        for m in range(1 << 53, (1 << 53) + 16):
            man = 2 * m + 1  # exactly halfway between m and m + 1 at scale 2**(e)
            assert same(dyadic_to_double(man, e - 1), oracle(man, e - 1))


def test_a_ball_certifies_only_when_both_ends_round_alike() -> None:
    ctx.prec = 200
    try:
        third = arb(1) / 3
        assert round_ball(third) == 1 / 3
        assert round_ball(arb(0.1)) == 0.1  # exact: the double itself
        # a ball straddling the midpoint between 1 and the next double does not certify
        mid = arb(1) + arb(2) ** -53
        assert round_ball(arb(mid, arb(2) ** -80)) is None
        assert round_ball(arb(mid, 0)) == 1.0  # the exact tie rounds to even
        assert round_ball(arb(float("inf"))) is None
    finally:
        ctx.prec = 53


def test_a_ball_around_zero_certifies_as_plus_zero_once_below_half_the_smallest_subnormal() -> None:
    ctx.prec = 64
    try:
        assert round_ball(arb(0, arb(2) ** -1070)) is None
        z = round_ball(arb(0, arb(2) ** -1076))
        assert z == 0.0 and math.copysign(1.0, z) == 1.0
        assert math.copysign(1.0, round_ball(arb(-(arb(2) ** -1080), arb(2) ** -1090))) == 1.0
    finally:
        ctx.prec = 53


def test_missing_bits_asks_for_enough_to_certify() -> None:
    ctx.prec = 64
    try:
        assert missing_bits(arb(1)) == 0
        assert missing_bits(arb(0, arb(2) ** -100)) >= 1075 - 100
        assert missing_bits(arb(1, arb(2) ** -50)) >= 52 - 50
    finally:
        ctx.prec = 53


def test_round_up_never_rounds_down_and_keeps_few_significant_bits() -> None:
    ctx.prec = 128
    try:
        rnd = random.Random(3)
        for _ in range(2000):
            x = arb(rnd.random()) * arb(2) ** rnd.randint(-1100, 50)
            r = round_up(x, 8)
            man, exp = (int(v) for v in x.upper().man_exp())
            assert Fraction(r) >= Fraction(man) * Fraction(2) ** exp
            if r >= math.ldexp(1.0, -1000):
                m, _ = math.frexp(r)
                assert (m * 256).is_integer()  # at most 8 significant bits
        assert round_up(arb(0), 8) == 0.0
        assert round_up(arb(2) ** -1200, 8) == TINY  # below the smallest subnormal: rounded up to it
        assert round_up(arb(MAX) * 2, 8) == math.inf
    finally:
        ctx.prec = 53
