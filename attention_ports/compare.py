"""The one comparator. Everything that says "agrees" or "differs" goes through ``compare``.

An element agrees when ``|actual - expected| <= atol + rtol * |expected|`` (numpy.isclose's rule,
asymmetric on purpose: the reference is the yardstick). NaN agrees only with NaN at the same
position; infinities only with the same infinity. The message format is a contract pinned by
``tests/test_compare.py``: case, output, tolerances, mismatch count and percentage, the worst
element with expected and actual, max abs/rel error, and the positions of unmatched NaNs. The
reported max rel err covers only elements where the relative bound dominates (see ``compare``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_POSITIONS = 5


@dataclass(frozen=True)
class Comparison:
    ok: bool
    rtol: float
    atol: float
    expected_shape: tuple[int, ...]
    actual_shape: tuple[int, ...]
    mismatches: int = 0
    total: int = 0
    worst_index: tuple[int, ...] | None = None
    worst_expected: float = float("nan")
    worst_actual: float = float("nan")
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    nan_only_expected: tuple[tuple[int, ...], ...] = ()
    nan_only_actual: tuple[tuple[int, ...], ...] = ()

    def describe(self, case: str, output: str) -> str:
        head = f"case {case!r}, output {output!r}"
        if self.expected_shape != self.actual_shape:
            return f"{head}: shape mismatch: expected {self.expected_shape}, actual {self.actual_shape}"
        if self.ok:
            return (
                f"{head}: all {self.total} elements agree within rtol={self.rtol:g}, atol={self.atol:g} "
                f"(max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g})"
            )
        pct = 100.0 * self.mismatches / max(self.total, 1)
        lines = [
            f"{head}: {self.mismatches} of {self.total} elements ({pct:.1f}%) differ beyond "
            f"rtol={self.rtol:g}, atol={self.atol:g}"
        ]
        if self.worst_index is not None:
            abs_err = abs(self.worst_actual - self.worst_expected)
            rel = abs_err / abs(self.worst_expected) if self.worst_expected != 0.0 else float("inf")
            lines.append(
                f"  worst at {list(self.worst_index)}: expected {self.worst_expected!r}, actual {self.worst_actual!r} "
                f"(abs err {abs_err:.3g}, rel err {rel:.3g})"
            )
        lines.append(f"  max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g}")
        if self.nan_only_expected:
            lines.append(f"  NaN expected but not found at {_positions(self.nan_only_expected)}")
        if self.nan_only_actual:
            lines.append(f"  NaN found but not expected at {_positions(self.nan_only_actual)}")
        return "\n".join(lines)


def _positions(positions: tuple[tuple[int, ...], ...]) -> str:
    shown = ", ".join(str(list(p)) for p in positions[:MAX_POSITIONS])
    more = len(positions) - MAX_POSITIONS
    return shown + (f" and {more} more" if more > 0 else "")


def compare(expected: np.ndarray, actual: np.ndarray, rtol: float, atol: float) -> Comparison:
    expected = np.asarray(expected, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    if expected.shape != actual.shape:
        return Comparison(False, rtol, atol, expected.shape, actual.shape, total=expected.size)
    nan_e, nan_a = np.isnan(expected), np.isnan(actual)
    both_nan = nan_e & nan_a
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(actual - expected)
        same_inf = np.isinf(expected) & (actual == expected)
        diff = np.where(both_nan | same_inf, 0.0, diff)
        diff = np.where(nan_e ^ nan_a, np.inf, diff)  # a NaN on one side only is a mismatch
        bound = atol + rtol * np.abs(np.where(np.isfinite(expected), expected, 0.0))
        bad = diff > bound
        # Relative error is reported where it means something: elements whose relative bound
        # dominates (rtol*|e| >= atol). Below that, e.g. a gradient that is zero by symmetry, the
        # absolute error is the honest figure and atol governs; the verdict uses both anyway.
        meaningful = (np.abs(expected) * rtol >= atol) & (expected != 0) if rtol > 0 else expected != 0
        rel = np.where(meaningful, diff / np.where(expected != 0, np.abs(expected), 1.0), 0.0)
        rel = np.where(both_nan | same_inf, 0.0, rel)
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float(rel.max()) if rel.size else 0.0
    mismatches = int(bad.sum())
    worst = None
    w_exp = w_act = float("nan")
    if mismatches:
        # Rank by how far past its own bound each element is, so a tiny-valued element with a
        # huge relative error does not hide a large absolute one (or vice versa).
        with np.errstate(divide="ignore", invalid="ignore"):
            excess = np.where(bad, diff / np.where(bound > 0, bound, np.finfo(float).tiny), -1.0)
        flat = int(np.argmax(excess))
        worst = tuple(int(i) for i in np.unravel_index(flat, expected.shape))
        w_exp, w_act = float(expected[worst]), float(actual[worst])
    return Comparison(
        ok=mismatches == 0,
        rtol=rtol,
        atol=atol,
        expected_shape=expected.shape,
        actual_shape=actual.shape,
        mismatches=mismatches,
        total=int(expected.size),
        worst_index=worst,
        worst_expected=w_exp,
        worst_actual=w_act,
        max_abs_err=max_abs,
        max_rel_err=max_rel,
        nan_only_expected=tuple(tuple(int(i) for i in p) for p in np.argwhere(nan_e & ~nan_a)),
        nan_only_actual=tuple(tuple(int(i) for i in p) for p in np.argwhere(nan_a & ~nan_e)),
    )
