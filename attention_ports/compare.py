"""The one comparator. Everything that says "agrees" or "differs" goes through ``compare``.

An element agrees when both are NaN, or both are the same infinity, or both are finite and
``|actual - expected| <= bound``, with ``bound`` the element's own error bound from the fixture
(``bound.<name>.npy``, derived in ``attention_ports.bounds``). The expected value is the exact
result correctly rounded, so the errors reported are each implementation's true errors:

* ``max_abs_err``: the largest ``|actual - expected|``;
* ``max_rel_err`` and ``max_ulp_err``: relative, and in units in the last place of the expected
  value (``numpy.spacing``), over the elements the bound *resolves* (``|expected| > bound``; a
  value that is zero by symmetry or cancellation has no meaningful relative error);
* ``max_err_over_bound``: the worst ``|actual - expected| / bound``, the fraction of its error
  budget an implementation uses (1 = at the limit).

The message format is a contract pinned by ``tests/test_compare.py``: case, output, mismatch count
and percentage, the worst element (ranked by how far past its own bound it is) with expected,
actual and bound, the error summary, and the positions of unmatched NaNs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_POSITIONS = 5


@dataclass(frozen=True)
class Comparison:
    ok: bool
    expected_shape: tuple[int, ...]
    actual_shape: tuple[int, ...]
    mismatches: int = 0
    total: int = 0
    worst_index: tuple[int, ...] | None = None
    worst_expected: float = float("nan")
    worst_actual: float = float("nan")
    worst_bound: float = float("nan")
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp_err: float = 0.0
    max_err_over_bound: float = 0.0
    nan_only_expected: tuple[tuple[int, ...], ...] = ()
    nan_only_actual: tuple[tuple[int, ...], ...] = ()

    def summary(self) -> str:
        return (
            f"max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g}, "
            f"max {self.max_ulp_err:.3g} ulps, worst {self.max_err_over_bound:.3g} x bound"
        )

    def describe(self, case: str, output: str) -> str:
        head = f"case {case!r}, output {output!r}"
        if self.expected_shape != self.actual_shape:
            return f"{head}: shape mismatch: expected {self.expected_shape}, actual {self.actual_shape}"
        if self.ok:
            return f"{head}: all {self.total} elements agree within their error bounds ({self.summary()})"
        pct = 100.0 * self.mismatches / max(self.total, 1)
        lines = [f"{head}: {self.mismatches} of {self.total} elements ({pct:.1f}%) differ beyond their error bounds"]
        if self.worst_index is not None:
            e, a, b = self.worst_expected, self.worst_actual, self.worst_bound
            abs_err = abs(a - e)
            rel = abs_err / abs(e) if e != 0.0 else float("inf")
            ulps = abs_err / float(np.spacing(abs(e))) if np.isfinite(e) else float("inf")
            frac = abs_err / b if b > 0 else float("inf")
            lines.append(
                f"  worst at {list(self.worst_index)}: expected {e!r}, actual {a!r}, bound {b:.3g} "
                f"(abs err {abs_err:.3g}, rel err {rel:.3g}, {ulps:.3g} ulps, {frac:.3g} x bound)"
            )
        lines.append(f"  {self.summary()}")
        if self.nan_only_expected:
            lines.append(f"  NaN expected but not found at {_positions(self.nan_only_expected)}")
        if self.nan_only_actual:
            lines.append(f"  NaN found but not expected at {_positions(self.nan_only_actual)}")
        return "\n".join(lines)


def _positions(positions: tuple[tuple[int, ...], ...]) -> str:
    shown = ", ".join(str(list(p)) for p in positions[:MAX_POSITIONS])
    more = len(positions) - MAX_POSITIONS
    return shown + (f" and {more} more" if more > 0 else "")


def _max(a: np.ndarray) -> float:
    return float(a.max()) if a.size else 0.0


def compare(expected: np.ndarray, actual: np.ndarray, bound: np.ndarray) -> Comparison:
    expected = np.asarray(expected, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), expected.shape)
    if expected.shape != actual.shape:
        return Comparison(False, expected.shape, actual.shape, total=expected.size)
    nan_e, nan_a = np.isnan(expected), np.isnan(actual)
    fin_e = np.isfinite(expected)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        matched = (nan_e & nan_a) | (np.isinf(expected) & (actual == expected))
        diff = np.where(fin_e & np.isfinite(actual), np.abs(actual - expected), np.inf)
        diff = np.where(matched, 0.0, diff)
        bad = ~matched & ~(fin_e & np.isfinite(actual) & (diff <= bound))
        frac = np.where(bound > 0, diff / np.where(bound > 0, bound, 1.0), np.where(diff > 0, np.inf, 0.0))
        resolved = fin_e & (np.abs(expected) > bound) & (expected != 0)
        mag = np.where(resolved, np.abs(expected), 1.0)
        rel = np.where(resolved, diff / mag, 0.0)
        ulp = np.where(resolved, diff / np.spacing(mag), 0.0)
    mismatches = int(bad.sum())
    worst = None
    w_exp = w_act = w_bound = float("nan")
    if mismatches:
        flat = int(np.argmax(np.where(bad, frac, -1.0)))
        worst = tuple(int(i) for i in np.unravel_index(flat, expected.shape))
        w_exp, w_act, w_bound = float(expected[worst]), float(actual[worst]), float(bound[worst])
    return Comparison(
        ok=mismatches == 0,
        expected_shape=expected.shape,
        actual_shape=actual.shape,
        mismatches=mismatches,
        total=int(expected.size),
        worst_index=worst,
        worst_expected=w_exp,
        worst_actual=w_act,
        worst_bound=w_bound,
        max_abs_err=_max(diff),
        max_rel_err=_max(rel),
        max_ulp_err=_max(ulp),
        max_err_over_bound=_max(frac),
        nan_only_expected=tuple(tuple(int(i) for i in p) for p in np.argwhere(nan_e & ~nan_a)),
        nan_only_actual=tuple(tuple(int(i) for i in p) for p in np.argwhere(nan_a & ~nan_e)),
    )
