"""The one comparator. Everything that says "agrees" or "differs" goes through ``compare``.

An element agrees when both are NaN, or both are the same infinity, or both are finite and
``|actual - expected| <= bound``, with ``bound`` the element's own error bound from the fixture
(``bound.<name>.npy``, derived in ``attention_ports.truth.bounds``). The expected value is the exact
result correctly rounded, so the errors reported are each implementation's true errors:

* ``max_abs_err``: the largest ``|actual - expected|`` over the elements where both are finite
  (a NaN or an infinity in the wrong place has no size of error: it is counted instead, in
  ``nonfinite_mismatches``, and the summary says which kind it is);
* ``max_rel_err`` and ``max_ulp_err``: relative, and in units in the last place of the expected
  value (``numpy.spacing``), over the finite elements the bound *resolves* (``|expected| > bound``;
  a value that is zero by symmetry or cancellation has no meaningful relative error). The summary
  says how many elements that is (``resolved``), and the worst element's line gives no relative
  error for an element outside them, so the two never disagree (issue 19: "max rel err 3.54e-16"
  under a worst element whose relative error was "inf");
* ``max_err_over_bound``: the worst ``|actual - expected| / bound``, the fraction of its error
  budget an implementation uses (1 = at the limit); infinite when any element is non-finite where
  it should not be, so no failure can show a small one.

**Ulps in the declared format** (issue 17, item 5): judged at a precision tier, ulps are units in
the last place of that format (``compare(..., fmt=...)``: float32's spacing at the expected value,
2^(e - 23) in the binade [2^e, 2^(e+1)), the smallest normal's below it; a mixed format's storage
format's: bfloat16's for "bfloat16/float32"), and the messages say "ulps of float32" (or of
bfloat16, float16); at float64 they are ``numpy.spacing``'s and the messages unchanged.

The message format is a contract pinned by ``tests/judge/test_compare.py``: case, output, mismatch count
and percentage, the worst element (the finite one furthest past its own bound; else the first
non-finite one) with expected, actual and bound, the error summary, and the positions of
unmatched NaNs. Given the implementation's :class:`~attention_ports.portview.PortView`, shapes and
positions are in the port's layout, counted from its index base (1 in R and Julia), under the
port's name for the output, and the reference layout (NumPy, 0-based) comes second.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from attention_ports.spec.portview import PortView
from attention_ports.spec.precision import DEFAULT, FORMATS, Format

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
    # Over the elements where both values are finite (a NaN has no size of error):
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    max_ulp_err: float = 0.0
    # Over every element: infinite when a NaN or an infinity is where it should not be.
    max_err_over_bound: float = 0.0
    finite_err_over_bound: float = 0.0  # the same over the elements where both are finite
    finite_pairs: int = 0  # elements where both values are finite
    resolved: int = 0  # of which |expected| > bound: the elements max_rel_err and max_ulp_err range over
    nonfinite_mismatches: int = 0  # mismatches where either value is NaN or infinite
    nan_only_expected: tuple[tuple[int, ...], ...] = ()
    nan_only_actual: tuple[tuple[int, ...], ...] = ()
    ulp_format: str = DEFAULT  # the format whose ulps max_ulp_err counts (the judged precision)

    @property
    def _ulps(self) -> str:
        """The unit's name in the messages: "ulps" at float64 (the contract's), else "ulps of <format>"."""
        return "ulps" if self.ulp_format == DEFAULT else f"ulps of {FORMATS[self.ulp_format].storage_format.name}"

    def _finite_summary(self) -> str:
        if not self.resolved:
            return f"max abs err {self.max_abs_err:.3g}, no rel err or ulps (no expected value exceeds its bound)"
        scope = (
            f"all {self.total} elements"
            if self.resolved == self.total
            else f"the {self.resolved} of {self.total} elements with |expected| > bound"
        )
        return (
            f"max abs err {self.max_abs_err:.3g}, max rel err {self.max_rel_err:.3g}, "
            f"max {self.max_ulp_err:.3g} {self._ulps} "
            f"(rel and ulps over {scope})"
        )

    def nonfinite_summary(self) -> str:
        """What the non-finite mismatches are, counted: ``2 NaN where a number is expected``."""
        nan_a, nan_e = len(self.nan_only_actual), len(self.nan_only_expected)
        parts = [
            f"{nan_a} NaN where a number is expected" if nan_a else "",
            f"{nan_e} number(s) where NaN is expected" if nan_e else "",
        ]
        other = self.nonfinite_mismatches - nan_a - nan_e
        parts.append(f"{other} infinity/number mismatch(es)" if other else "")
        return ", ".join(p for p in parts if p)

    def summary(self) -> str:
        if not self.nonfinite_mismatches:
            return f"{self._finite_summary()}, worst {self.max_err_over_bound:.3g} x bound"
        # A NaN has no error size: never let it read as "max abs err inf, max rel err 0".
        finite = (
            f"{self._finite_summary()}, worst {self.finite_err_over_bound:.3g} x bound" if self.finite_pairs else "none"
        )
        return f"non-finite mismatches: {self.nonfinite_summary()}; where both are finite: {finite}"

    def describe(self, case: str, output: str, view: PortView | None = None) -> str:
        """The failure message: in the port's own terms first when ``view`` is given (its layout,
        its index base, its name for the output), then the reference layout (NumPy, 0-based)."""
        head = f"case {case!r}, output {output!r}"
        if self.expected_shape != self.actual_shape:
            return self._describe_shapes(head, view)
        if self.ok:
            return f"{head}: all {self.total} elements agree within their error bounds ({self.summary()})"
        pct = 100.0 * self.mismatches / max(self.total, 1)
        lines = [f"{head}: {self.mismatches} of {self.total} elements ({pct:.1f}%) differ beyond their error bounds"]
        at = (lambda i: view.at(i)) if view is not None else (lambda i: str(list(i)))
        if view is not None:
            lines.append(
                f"  as the port sees it ({view.language}, {view.base}-based): {view.name} is "
                f"{view.layout(self.expected_shape)}"
            )
        if self.worst_index is not None:
            e, a, b = self.worst_expected, self.worst_actual, self.worst_bound
            where = f"  worst at {at(self.worst_index)}: expected {e!r}, actual {a!r}"
            if np.isfinite(e) and np.isfinite(a):
                abs_err = abs(a - e)
                frac = abs_err / b if b > 0 else float("inf")
                if abs(e) > b:  # resolved: the summary's rel and ulps range over it (``compare``)
                    ulps = abs_err / float(ulp_of(np.array([abs(e)]), FORMATS[self.ulp_format])[0])
                    rel = f"rel err {abs_err / abs(e):.3g}, {ulps:.3g} {self._ulps}"
                else:
                    rel = "no rel err or ulps: |expected| <= bound"
                lines.append(f"{where}, bound {b:.3g} (abs err {abs_err:.3g}, {rel}, {frac:.3g} x bound)")
            else:
                lines.append(f"{where} ({_nonfinite_kind(e, a)})")
        lines.append(f"  {self.summary()}")
        if self.nan_only_expected:
            lines.append(f"  NaN expected but not found at {_positions(self.nan_only_expected, at)}")
        if self.nan_only_actual:
            lines.append(f"  NaN found but not expected at {_positions(self.nan_only_actual, at)}")
        if view is not None and self.worst_index is not None:
            lines.append(
                f"  reference layout (NumPy, 0-based): shape {self.expected_shape}, worst at {list(self.worst_index)}"
            )
        return "\n".join(lines)

    def _describe_shapes(self, head: str, view: PortView | None) -> str:
        exp, act = self.expected_shape, self.actual_shape
        if view is None:
            return f"{head}: shape mismatch: expected {exp}, actual {act}{_shape_relation(exp, act)}"
        port_exp, port_act = view.shape(exp), view.shape(act)
        return (
            f"{head}: shape mismatch: the port returned {view.name} as {view.format_shape(port_act)}; "
            f"{view.language}'s layout wants {view.layout(exp)}{_shape_relation(port_exp, port_act)}\n"
            f"  reference layout (NumPy): expected {exp}, actual {act}"
        )


def _shape_relation(expected: tuple[int, ...], actual: tuple[int, ...]) -> str:
    if len(expected) == 2 and actual == expected[::-1]:
        return ": the transpose of the expected shape"
    if len(expected) > 1 and sorted(expected) == sorted(actual):
        return ": the expected axes in another order"
    return ""


def _nonfinite_kind(expected: float, actual: float) -> str:
    if np.isnan(actual):
        return "NaN where a number is expected"
    if np.isnan(expected):
        return "a number where NaN is expected"
    return "an infinity where it should not be" if np.isinf(actual) else "a number where an infinity is expected"


def _positions(positions: tuple[tuple[int, ...], ...], at: Callable[[tuple[int, ...]], str]) -> str:
    shown = ", ".join(at(p) for p in positions[:MAX_POSITIONS])
    more = len(positions) - MAX_POSITIONS
    return shown + (f" and {more} more" if more > 0 else "")


def _max(a: np.ndarray) -> float:
    return float(a.max()) if a.size else 0.0


def agree(expected: np.ndarray, actual: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """The rule, element by element (same shapes): both NaN, the same infinity, or both finite
    and ``|actual - expected| <= bound``."""
    expected = np.asarray(expected, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        same = (np.isnan(expected) & np.isnan(actual)) | (np.isinf(expected) & (actual == expected))
        close = np.isfinite(expected) & np.isfinite(actual) & (np.abs(actual - expected) <= bound)
    return same | close


def ulp_of(mag: np.ndarray, fmt: Format) -> np.ndarray:
    """The spacing of ``fmt``'s results at each magnitude (``Format.spacing``: a mixed format's
    storage format's, bfloat16's for "bfloat16/float32", the unit a port author reads)."""
    return fmt.spacing(mag)


def compare(expected: np.ndarray, actual: np.ndarray, bound: np.ndarray, fmt: Format | None = None) -> Comparison:
    """Compare element by element (module docstring); ``fmt``: the judged precision, whose ulps
    the error is counted in (float64 when None)."""
    fmt = fmt or FORMATS[DEFAULT]
    expected = np.asarray(expected, dtype=np.float64)
    actual = np.asarray(actual, dtype=np.float64)
    bound = np.broadcast_to(np.asarray(bound, dtype=np.float64), expected.shape)
    if expected.shape != actual.shape:
        return Comparison(False, expected.shape, actual.shape, total=expected.size)
    nan_e, nan_a = np.isnan(expected), np.isnan(actual)
    fin_e = np.isfinite(expected)
    both = fin_e & np.isfinite(actual)
    bad = ~agree(expected, actual, bound)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        matched = (nan_e & nan_a) | (np.isinf(expected) & (actual == expected))
        diff = np.where(both, np.abs(actual - expected), np.inf)
        diff = np.where(matched, 0.0, diff)
        frac = np.where(bound > 0, diff / np.where(bound > 0, bound, 1.0), np.where(diff > 0, np.inf, 0.0))
        resolved = both & (np.abs(expected) > bound) & (expected != 0)
        mag = np.where(resolved, np.abs(expected), 1.0)
        rel = np.where(resolved, diff / mag, 0.0)
        ulp = np.where(resolved, diff / ulp_of(mag, fmt), 0.0)
    mismatches = int(bad.sum())
    nonfinite = int((bad & ~both).sum())
    worst = None
    w_exp = w_act = w_bound = float("nan")
    if mismatches:
        # The worst finite mismatch (it has an error size); the first non-finite one otherwise.
        finite_bad = bad & both
        flat = int(np.argmax(np.where(finite_bad, frac, -1.0))) if finite_bad.any() else int(np.argmax(bad))
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
        max_abs_err=_max(diff[both]),
        max_rel_err=_max(rel),
        max_ulp_err=_max(ulp),
        max_err_over_bound=_max(frac),
        finite_err_over_bound=_max(frac[both]),
        finite_pairs=int(both.sum()),
        resolved=int(resolved.sum()),
        nonfinite_mismatches=nonfinite,
        nan_only_expected=tuple(tuple(int(i) for i in p) for p in np.argwhere(nan_e & ~nan_a)),
        nan_only_actual=tuple(tuple(int(i) for i in p) for p in np.argwhere(nan_a & ~nan_e)),
        ulp_format=fmt.name,
    )
