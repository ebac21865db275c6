"""Why an output failed, when a known porting mistake explains it: at most one line per output.

Every diagnosis is a hypothesis tested on the numbers, never a guess from the message: the right
answer is transformed the way the mistake would transform it (transposed, multiplied by a
constant, shifted by one query), or recomputed with the mistake (the scores scaled by another
factor, the mask applied another way, another convention for a query with no key), and the port's
array must fit that everywhere. The transforms of the exact answer are judged with the case's own
bounds; a recomputation by the NumPy reference with the bounds widened by float64's own rounding
(``_fits``). A mistake that fits nowhere gets no line: a wrong hint is worse than none.

A mistake must also explain the numbers better than rounding does (issue 19; the rule and its
derivation: docs/ports.md, "When a diagnosis is named"). The competing explanation is
"a correct formulation, rounded at a larger scale than the bound models" (a log-domain softmax
rounds ``x - lse`` at |x|, not at |x - max|): every element within ``ROUNDING_MULTIPLE`` times its
bound, or within ``ROUNDING_RELATIVE`` = sqrt(u) of the output's magnitude. A difference that
small gets no diagnosis at all (``_rounding_sized``); a larger one is blamed on a mistake only
when the mistake's result leaves at most 1/``SEPARATION`` of the observed error, in units of the
bound (``_separates``).

Checks, most specific first (the first that fits is the diagnosis):

1. axes: the array is the expected one with its axes permuted (a transpose), whatever the shape
   says: names the contract's layout rule in the port's language that was broken;
2. masked query: wrong only in the rows of queries whose mask removes every key, and right under
   another ``masked_query`` convention (the exact truth recomputed with it): declare it;
   rotary pairing: a rotary embedding right under the other pairing (the exact truth recomputed
   with it; attention_ports/spec/pairing.py): declare it;
3. scale: the scores scaled by another factor (1, 1/sqrt(d_v), 1/sqrt(d_model), 1/d_k, the scale
   applied twice or as a divisor): names the factor and the likely cause;
4. mask: the mask ignored, subtracted, multiplied into the scores, scaled with the scores, read as
   a boolean, transposed, or a causal mask off by one diagonal;
   softmax: exp of the raw scores, no row maximum subtracted (overflowing or underflowing);
5. constant: the array is a constant multiple of the expected one: names the constant (-1, 2,
   sqrt(2), n, sqrt(d_k), sqrt(d_k/d_model), ...) and a likely cause;
6. whole array: a softmax normalised over the whole array instead of per query (per vector):
   each query's slice is the expected one times its own factor, and the factors sum to 1;
7. row shift: each query's result one query early or late (an index slip);
8. mask rows: wrong only in the queries the mask acts on, the others right (no variant above fits):
   where the error lies, and no cause.

The normalisation layers and gelu (checked right after the axes): the known mistakes recomputed,
the unbiased variance, eps outside the square root or missing, the mean over the tokens, the bias before the
weight or ignored, rms_norm on the centred variance, gelu's other form; and layer_norm's one-pass
variance by its error's envelope on nearly constant tokens. These are tried before the float32
explanation, as every recomputed mistake, since some of them (eps outside the square root with a small eps, the one-pass
variance) err by float32-sized amounts.

The precision line (``_check_precision``, issue 26) comes after every check that recomputes a
mistake, and before the one that only says where the error lies: a port in a language with float32
(not R), judged at float64, whose error is not value-sized and is the size of the NumPy reference's
own error when run in float32; where the float32 tier certifies a bound for the case, its numbers
must also pass that judgement (docs/precision.md, "The precision diagnosis").

The transformer (checked right after the axes too): gpt_forward's logits of the last position only
(the expected last row, in whatever shape it came back), and, recomputed, a decoder block (or
every block of gpt_forward) without the causal mask, gelu's other form, a square weight (w_q, w_k,
w_v, w_o, or all four) applied transposed, the residuals from the normalised inputs (both, or the
attention's alone), the second norm applied to x, post-norm; gpt_grads' loss under each of those
forward mistakes (named only when one alone fits: it is one number); the loss's mean divided by
every position, the ignored ones included (lm_loss and every output of gpt_grads, count / n times
the right ones); the classifier's square weights applied transposed (its forward outputs, and
classifier_step's loss and probs); and, in gelu, feed_forward and the blocks, a tanh gelu
whose sqrt(2/pi) is cut short (0.79788456, ...). That one is tried even on a rounding-sized
difference, since its effect is (the constant's own relative error, 1e-9 for eight digits): named,
as every recomputed mistake, only when it fits the port's numbers and separates from the truth.

The optimizer (``adamw_step``, checked right after them): Adam without bias correction, L2 decay
added to the gradient instead of decoupled from it, and eps inside the square root, each
recomputed from the case's inputs.

Nothing here changes a verdict; an exception inside a check only drops that check's hint.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import math
import threading
import warnings
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.fixtures.store import Case
from attention_ports.judge.compare import agree
from attention_ports.spec import ops, pairing, precision
from attention_ports.spec.conventions import CONVENTIONS
from attention_ports.spec.ops import Role
from attention_ports.spec.portview import PortView, layout_rule
from attention_ports.truth import engine as truth

CONVENTION_OF = {
    "zeros": "zero weights and a zero output: the reference, PyTorch >= 2.5",
    "nan": "NaN weights and output: NNlib.jl, PyTorch before 2.5",
    "uniform": "weights 1/n_k and the mean of the values: the CRAN attention package",
}
# A recomputation by the float64 reference is itself rounded: allow this relative slack on top of
# four times the element's bound (every shipped bound exceeds one float64 attention's own error).
REFERENCE_SLACK = 1e-12
# The rounding alternative a mistake must beat (docs, "When a diagnosis is named"): a correct
# formulation's error is at most a few times the element's bound (the multiple ``_fits`` allows a
# recomputation), or, rounded at a larger scale than the bound models, still a tiny fraction of
# the output: sqrt(u) sits halfway, in orders of magnitude, between rounding (u times a modest
# condition number) and a wrong formula (an O(1) relative change), and no case's condition number
# comes near 1/sqrt(u) ~ 6.7e7.
ROUNDING_MULTIPLE = 4.0
ROUNDING_RELATIVE = math.sqrt(np.finfo(np.float64).eps)
# A mistake explains the numbers when its result is at least this many times closer to the port's
# (worst element, in units of the bound) than the expected result is: it removes 90% of the error.
SEPARATION = 10.0
# A constant factor is named only over this many distinct expected values: two equal ones (a 2-step
# losses vector at lr = 0) are "c times the expected values" for any two equal port values.
MIN_CONSTANT_VALUES = 3
MASKED_OPS = ("scaled_dot_product_attention", "self_attention", "multi_head_attention")
# Which axis of an output indexes the queries, by layout role (reference layout). A language
# model's logits and embedding tables have no queries, but their rows shift the same way (an index
# slip): _check_row_shift names those rows by their own axis (position, token id).
_QUERY_AXIS = {
    Role.TOKENS: 0,
    Role.SCORES: 0,
    Role.ROWS: 0,
    Role.HEAD_SCORES: 1,
    Role.LOGITS: 0,
    Role.TOKEN_TABLE: 0,
    Role.POSITION_TABLE: 0,
}
_NOT_QUERIES = (Role.LOGITS, Role.TOKEN_TABLE, Role.POSITION_TABLE)


@dataclass(frozen=True)
class Context:
    case: Case
    output: str
    expected: np.ndarray
    bound: np.ndarray
    actual: np.ndarray
    view: PortView | None
    masked_query: str
    role: Role | None
    # every output the port returned on the case (reference layout): what the precision line reads
    # the port's arithmetic from; None: this output alone
    returned: Mapping[str, np.ndarray] | None = None

    @property
    def language(self) -> str:
        return self.view.language if self.view is not None else "reference"

    def name(self) -> str:
        return self.view.name if self.view is not None else self.output

    def queries(self, rows: list[int]) -> str:
        """Query positions as the port counts them (its index base: R's and Julia's 1, C's 0)."""
        shown = ", ".join(str(i + (self.view.base if self.view is not None else 0)) for i in rows[:8])
        more = f" and {len(rows) - 8} more" if len(rows) > 8 else ""
        word = "query" if len(rows) == 1 else "queries"
        return f"{word} {shown}{more}" + ("" if self.view is not None else " (0-based)")

    def port_axis_word(self, ref_axis: int) -> str:
        """'row' or 'column': where a reference axis lands in the port's layout (2-D)."""
        ndim = self.expected.ndim
        axes = self.view.axes(ndim) if self.view is not None else tuple(range(ndim))
        pos = axes.index(ref_axis)
        return ("row", "column")[pos] if ndim == 2 else f"index {pos + 1}"


def explain(
    case: Case,
    output: str,
    actual: np.ndarray,
    view: PortView | None = None,
    masked_query: str = "zeros",
    expected: np.ndarray | None = None,
    bound: np.ndarray | None = None,
    returned: Mapping[str, np.ndarray] | None = None,
) -> str:
    """The diagnosis of one failing output (``""`` when no known mistake fits).

    ``expected``/``bound`` default to the case's stored ones (a convention's own expected files
    may be passed instead); ``masked_query`` is the convention the port declared.
    """
    exp = case.expected[output]
    try:
        role = ops.get(case.op).role(output)
    except KeyError:
        role = None
    ctx = Context(
        case,
        output,
        np.asarray(exp.array if expected is None else expected, dtype=np.float64),
        np.asarray(exp.bound if bound is None else bound, dtype=np.float64),
        np.asarray(actual, dtype=np.float64),
        view,
        masked_query,
        role,
        returned,
    )
    if _rounding_sized(ctx):
        # rounding within a correct formulation explains it: no mistake is named, except a
        # constant cut short, whose effect is rounding-sized itself (recomputed, fitted, separated)
        # (and float32's rounding, tested as everywhere: a float64 port's rounding is far below it)
        return _first_line(ctx, (_check_truncated_gelu_constant, _check_precision))
    return _first_line(ctx, CHECKS)


def _first_line(ctx: Context, checks: tuple[Callable[[Context], str], ...]) -> str:
    for check in checks:
        try:
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                line = check(ctx)
        except Exception:  # a hint must never cost a verdict
            line = ""
        if line:
            return line
    return ""


# ---------------------------------------------------------------- fitting


def _fits_exact(candidate: np.ndarray, actual: np.ndarray, bound: np.ndarray) -> bool:
    """``actual`` agrees with a transform of the exact answer (its bounds transformed alike)."""
    return candidate.shape == actual.shape and bool(agree(candidate, actual, bound).all())


def _fits(candidate: np.ndarray, actual: np.ndarray, bound: np.ndarray) -> bool:
    """``actual`` agrees with a float64 recomputation (rounded itself: widened bounds)."""
    if candidate.shape != actual.shape:
        return False
    return bool(agree(candidate, actual, _slack(candidate, bound)).all())


def _slack(candidate: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """The bound a float64 recomputation is judged with: four times the element's, plus its own rounding."""
    return 4 * bound + REFERENCE_SLACK * np.maximum(1.0, np.abs(np.nan_to_num(candidate, posinf=0, neginf=0)))


def _rounding_sized(ctx: Context) -> bool:
    """The difference is one a correct formulation could make: the same shape and the same
    non-finite pattern, and every finite element within ``ROUNDING_MULTIPLE`` times its bound or
    within ``ROUNDING_RELATIVE`` of the output's largest expected magnitude."""
    e, a, b = ctx.expected, ctx.actual, ctx.bound
    if e.shape != a.shape:
        return False
    fin = np.isfinite(e)
    if not (np.isfinite(a) == fin).all() or not agree(e[~fin], a[~fin], b[~fin]).all():
        return False
    scale = float(np.abs(e[fin]).max()) if fin.any() else 0.0
    tolerance = np.maximum(ROUNDING_MULTIPLE * b[fin], ROUNDING_RELATIVE * scale)
    return bool((np.abs(a[fin] - e[fin]) <= tolerance).all())


# ---------------------------------------------------------------- the precision diagnosis (issues 17, 26)

FLOAT32 = precision.FORMATS["float32"]
# Where the float32 tier certifies no bound for a case, the port's error (against the exact truth)
# and the NumPy reference's own error when run in float32 must agree within this factor, either
# way, at the worst element and in norm. Measured over our Julia port run in Float32 on every
# catalogue case judged at float64 (issue 17's run, 824 failing outputs): 0.14 to 10 in norm,
# 0.14 to 8.2 at the worst element (a scalar loss is one rounding of either: the low end); a logic
# bug's error is orders of magnitude off float32's (the mutation kit's: issue 26).
PRECISION_FACTOR = 16.0
# An error past this fraction of the case's largest expected value is value-sized: float32's
# analysis stops being first order at 2^-8 (its softmax rule's guard, FLOAT32.max_first_order_exp),
# so float32's rounding of a case the analysis covers never comes near it.
VALUE_SIZED = 2.0**FLOAT32.max_first_order_exp


_HALF_FLOAT32 = precision.Storage("16 bits", 16, FLOAT32.max_finite, FLOAT32.min_normal_exp, FLOAT32.min_subnormal_exp)


def _check_precision(ctx: Context) -> str:
    """The port computes in float32 and is judged at float64: named only where it is so.

    Never for R (double only), never where the case is judged at float32 already (the port is
    then judged in its own precision), never on a value-sized error, only where every value the
    port returned is a float32 value, and only after every logic
    diagnosis that recomputes a mistake was tried (CHECKS: this one comes after them). Where the
    float32 tier certifies a bound for the case (its inputs rounded to float32, as a float32 port
    rounds them), the port's numbers must pass that judgement element by element; elsewhere (a case
    the tier leaves out, gpt_train, a generated case) its error must be the size of the NumPy
    reference's own error run in float32 (``PRECISION_FACTOR``), and the line says it is a
    measurement, not a certified bound."""
    if ctx.language == "R":
        return ""
    judged = precision.FORMATS.get(ctx.case.precision)
    if judged is None or judged.u >= FLOAT32.u:
        return ""
    e, a, b = ctx.expected, ctx.actual, ctx.bound
    if e.shape != a.shape:
        return ""
    fin = np.isfinite(e)
    if not np.array_equal(np.isfinite(a), fin) or not np.array_equal(np.isnan(a), np.isnan(e)):
        return ""
    if not fin.any() or not agree(e[~fin], a[~fin], b[~fin]).all() or _value_sized(ctx):
        return ""
    # a port computing in float32 returns float32 values: every finite element is one (widened to
    # float64 exactly); a float64 port whose logic errs by float32-sized amounts (eps outside the
    # square root, a cubic coefficient cut short) returns float64 values, and is no float32 port
    if not _float32_values(ctx):
        return ""
    # float32-sized: neither far above nor far below what float32 arithmetic does here (a float64
    # port's error a little past its bound passes a float32 bound too, but is no float32 error)
    ratio = _float32_reference_ratio(ctx)
    if ratio is None:
        return ""
    tier_case, why = _float32_tier_case(ctx.case)
    if tier_case is not None:
        exp32 = tier_case.expected_for(ctx.masked_query if tier_case.conventions else None)[ctx.output]
        if not agree(exp32.array, a, exp32.bound).all():
            return ""  # a certified float32 bound the port's numbers break: not float32's rounding
        return (
            "every error is within float32's rounding: the port's numbers pass this case's float32 judgement "
            "(the float32 tier's certified bounds, at the inputs rounded to float32) and err as much as the NumPy "
            f"reference run in float32 ({ratio:.2g} times its worst error): the port computes in float32, and is "
            f"judged here at float64; {_declare_float32(ctx.language)}"
        )
    return (
        f"the errors are the size of float32's rounding: the NumPy reference run in float32 errs as much here "
        f"(the port's worst error is {ratio:.2g} times its), though no float32 bound is certified for this case "
        f"({why}): the port probably computes in float32, and is judged here at float64; "
        f"{_declare_float32(ctx.language)}"
    )


def _float32_values(ctx: Context) -> bool:
    """Every value the port returned on the case is a float32 value, and some of them tell float32
    apart: need more than 16 of its 24 bits (a saturated softmax's 0 and 1, or a sum of powers of
    two, are exact in any format and say nothing; a float32 result fits in 16 bits with probability
    2^-8). Read over every output returned, so that one output's exact values borrow the others'."""
    arrays = [np.asarray(x, dtype=np.float64) for x in (ctx.returned or {ctx.output: ctx.actual}).values()]
    arrays = [x[np.isfinite(x)] for x in arrays if np.size(x)]
    if not all(np.array_equal(precision.round_to(x, FLOAT32.storage_format), x) for x in arrays):
        return False
    return any(not np.array_equal(precision.round_to(x, _HALF_FLOAT32), x) for x in arrays)


def _declare_float32(language: str) -> str:
    if language == "Julia":
        return 'declare it with const attention_ports = (precision = "float32",) (or run verify --precision float32)'
    return "run verify --precision float32"


def _value_sized(ctx: Context) -> bool:
    """The worst error passes ``VALUE_SIZED`` of the case's largest expected magnitude."""
    arrays = (ctx.expected, *(o.array for o in ctx.case.expected.values()))
    scale = max(float(np.abs(x[np.isfinite(x)]).max(initial=0.0)) for x in arrays)
    fin = np.isfinite(ctx.expected)
    return float(np.abs(ctx.actual[fin] - ctx.expected[fin]).max(initial=0.0)) > VALUE_SIZED * scale


@functools.lru_cache(maxsize=1)
def _float32_tier() -> tuple[Path, dict[str, dict[str, Any]], dict[str, str]]:
    """The float32 tier's folder, its cases by id and the reasons of those it leaves out."""
    from attention_ports.fixtures.store import read_manifest

    folder = precision.fixtures_dir(FLOAT32.name)
    try:
        manifest = read_manifest(folder)
    except Exception:  # no tier here (a wheel without it, a broken file): nothing is certified
        return folder, {}, {}
    left_out = {e["id"]: e["reason"] for e in manifest["truth"].get("not_applicable", [])}
    return folder, {e["id"]: e for e in manifest["cases"]}, left_out


_TIER_CASES: OrderedDict[int, tuple[Case, Case | None, str]] = OrderedDict()


def _float32_tier_case(case: Case) -> tuple[Case | None, str]:
    """The float32 tier's certified case holding ``case``'s inputs rounded to float32, or None and
    why there is none."""
    hit = _TIER_CASES.get(id(case))
    if hit is not None and hit[0] is case:
        return hit[1], hit[2]
    found: Case | None = None
    from attention_ports.fixtures.precision import round_inputs, round_options
    from attention_ports.fixtures.store import load_case

    folder, cases, left_out = _float32_tier()
    if case.op not in precision.TIER_OPS:
        why = f"{case.op} is not in the float32 tier"
    elif case.id in left_out:
        why = f"the float32 tier leaves it out: {left_out[case.id]}"
    elif case.id not in cases or cases[case.id]["op"] != case.op:
        why = "not a case of the float32 tier"
    else:
        tier_case = load_case(folder, cases[case.id])
        rounded = round_inputs(case.inputs, FLOAT32)
        same = rounded.keys() == tier_case.inputs.keys() and all(
            np.array_equal(rounded[k], tier_case.inputs[k]) for k in rounded
        )
        if same and round_options(case.op, case.options, FLOAT32) == tier_case.options:
            found, why = tier_case, ""
        else:
            why = "the float32 tier's case of that name has other inputs"
    _TIER_CASES[id(case)] = (case, found, why)
    while len(_TIER_CASES) > 16:
        _TIER_CASES.popitem(last=False)
    return found, why


def _float32_reference_ratio(ctx: Context) -> float | None:
    """The port's worst error over the float32 reference run's, when the two errors agree within
    ``PRECISION_FACTOR`` either way at the worst element and in norm (None otherwise)."""
    from attention_ports.runtimes.precision import reference_in_float32

    result = _rerun(ctx.case, "float32", lambda: reference_in_float32(ctx.case.op, ctx.case.inputs, ctx.case.options))
    if result is None or ctx.output not in result or result[ctx.output].shape != ctx.expected.shape:
        return None
    ref = result[ctx.output]
    fin = np.isfinite(ctx.expected)
    if not np.array_equal(np.isfinite(ref), fin):
        return None
    port_err = np.abs(ctx.actual[fin] - ctx.expected[fin])
    ref_err = np.abs(ref[fin] - ctx.expected[fin])
    if not ref_err.any() or not port_err.any():
        return None
    worst = float(port_err.max() / ref_err.max())
    norm = float(np.linalg.norm(port_err) / np.linalg.norm(ref_err))
    if all(1 / PRECISION_FACTOR <= r <= PRECISION_FACTOR for r in (worst, norm)):
        return worst
    return None


def _separates(candidate: np.ndarray, actual: np.ndarray, expected: np.ndarray, bound: np.ndarray) -> bool:
    """The mistake's result is ``SEPARATION`` times closer to the port's than the expected one is,
    at the worst element, both distances in units of the element's bound: the same yardstick for
    both explanations. Elements non-finite in any of the three are the fit's business."""
    if candidate.shape != actual.shape or expected.shape != actual.shape:
        return True  # a shape the expected array does not have: no rounding gives it
    fin = np.isfinite(candidate) & np.isfinite(actual) & np.isfinite(expected)
    if not agree(expected[~fin], actual[~fin], bound[~fin]).all() or not fin.any():
        return True  # a NaN or an infinity out of place: no rounding gives it either
    unit = np.maximum(bound[fin], np.finfo(np.float64).tiny)
    residual = float((np.abs(actual[fin] - candidate[fin]) / unit).max())
    observed = float((np.abs(actual[fin] - expected[fin]) / unit).max())
    return residual * SEPARATION <= observed


def _explains(ctx: Context, candidate: np.ndarray) -> bool:
    """``_separates`` for the whole output."""
    return _separates(candidate, ctx.actual, ctx.expected, ctx.bound)


# ---------------------------------------------------------------- 1. axes


def _check_axes(ctx: Context) -> str:
    exp, act = ctx.expected, ctx.actual
    if exp.ndim < 2 or exp.ndim != act.ndim:
        return ""
    for perm in itertools.permutations(range(exp.ndim)):
        if perm == tuple(range(exp.ndim)) or exp.transpose(perm).shape != act.shape:
            continue
        candidate, cand_bound = exp.transpose(perm), ctx.bound.transpose(perm)
        if not _fits_exact(candidate, act, cand_bound) or not _explains(ctx, candidate):
            continue
        if exp.shape == act.shape and _fits_exact(exp, exp.transpose(perm), ctx.bound):
            continue  # a symmetric array: its transpose proves nothing
        return _axes_line(ctx, perm)
    return ""


def _axes_line(ctx: Context, perm: tuple[int, ...]) -> str:
    ndim = ctx.expected.ndim
    names = ops.AXIS_NAMES.get(ctx.role) if ctx.role is not None else None
    if ctx.view is not None:
        port_axes = ctx.view.axes(ndim)
        # actual_port = expected_ref.transpose(perm).transpose(port_axes): the port's axis i holds
        # reference axis perm[port_axes[i]].
        got = [perm[a] for a in port_axes]
        rule = ctx.view.rule(ndim)
    else:
        got = list(perm)
        rule = layout_rule("reference", ctx.output, names)
    what = "the transpose of the expected array" if ndim == 2 else "the expected array with its axes permuted"
    returned = f" (the port returned {' x '.join(names[a] for a in got)})" if names and len(names) == ndim else ""
    return f"{ctx.name()} is {what}: the contract's {rule}{returned}"


# ---------------------------------------------------------------- 2. a query with no key


def _additive_mask(case: Case) -> np.ndarray | None:
    if "mask" not in case.inputs:
        return None
    m = np.asarray(case.inputs["mask"])
    return np.where(m, 0.0, -np.inf) if m.dtype == np.bool_ else m.astype(np.float64)


def _dead_queries(case: Case) -> list[int]:
    """Queries with no key to attend to: a mask row (softmax: an input row) all -inf."""
    if case.op == "softmax":
        x = np.asarray(case.inputs["x"], dtype=np.float64)
        return [int(i) for i in np.flatnonzero(np.all(np.isneginf(x), axis=-1))] if x.ndim == 2 else []
    mask = _additive_mask(case) if case.op in MASKED_OPS else None
    if mask is None or mask.ndim != 2:
        return []
    return [int(i) for i in np.flatnonzero(np.all(np.isneginf(mask), axis=1))]


def _bad_queries(ctx: Context) -> list[int] | None:
    """The query rows holding a mismatch (None when the output has no query axis)."""
    axis = _QUERY_AXIS.get(ctx.role) if ctx.role is not None else None
    if axis is None or ctx.expected.shape != ctx.actual.shape or ctx.expected.ndim <= axis:
        return None
    bad = ~agree(ctx.expected, ctx.actual, ctx.bound)
    other = tuple(a for a in range(bad.ndim) if a != axis)
    return [int(i) for i in np.flatnonzero(bad.any(axis=other))]


def _declaration(ctx: Context, convention: str) -> str:
    if ctx.language == "R":
        return f'attention_ports <- list(masked_query = "{convention}")'
    if ctx.language == "Julia":
        return f'const attention_ports = (masked_query = "{convention}",)'
    return f'masked_query = "{convention}"'


def _check_masked_query(ctx: Context) -> str:
    dead = _dead_queries(ctx.case)
    bad = _bad_queries(ctx)
    if not dead or not bad or not set(bad) <= set(dead):
        return ""
    found = ""
    if ctx.case.op in MASKED_OPS:
        for convention in CONVENTIONS:
            if convention == ctx.masked_query:
                continue
            result = truth.compute(ctx.case.op, ctx.case.inputs, ctx.case.options, masked_query=convention)
            if ctx.output in result:
                expected, bound = result[ctx.output]
                if _fits_exact(expected, ctx.actual, bound) and _explains(ctx, expected):
                    found = convention
                    break
    axis = _QUERY_AXIS[ctx.role]  # type: ignore[index]
    rows = np.take(ctx.actual, dead, axis=axis)
    gives = "NaN" if np.isnan(rows).all() else "zeros" if (rows == 0).all() else "other values"
    wants = "zeros" if ctx.masked_query == "zeros" else ctx.masked_query
    where = f"wrong only in the {ctx.queries(bad)}, whose mask removes every key"
    if not found:
        return f"{where}: the port gives {gives} there where this case expects the {wants} convention"
    return (
        f"{where}: the port follows the {found!r} convention there ({CONVENTION_OF[found]}) and is judged by "
        f"{wants!r}; if {found!r} is its convention, declare it: {_declaration(ctx, found)} "
        f"(ports/CONTRACT.md, masked_query)"
    )


def _check_pairing(ctx: Context) -> str:
    """A rotary embedding that pairs its features the other way (halves vs interleaved)."""
    if ctx.case.op not in pairing.OPS:
        return ""
    wanted = pairing.case_pairing(ctx.case.options)
    for other in pairing.PAIRINGS:
        if other == wanted:
            continue
        expected, bound = truth.compute(ctx.case.op, ctx.case.inputs, {**ctx.case.options, pairing.OPTION: other})[
            ctx.output
        ]
        if _fits_exact(expected, ctx.actual, bound) and _explains(ctx, expected):
            if ctx.language == "R":
                declare = f'attention_ports <- list({pairing.FIELD} = "{other}")'
            elif ctx.language == "Julia":
                declare = f'const attention_ports = ({pairing.FIELD} = "{other}",)'
            else:
                declare = f'{pairing.OPTION} = "{other}"'
            return (
                f"your port pairs features as {other} ({pairing.MEANING[other]}) where this case is judged "
                f"{wanted}: if {other} is the port's pairing, declare {declare} (ports/CONTRACT.md, "
                f"rotary pairing); a port that declares it and still fails here pairs features another way"
            )
    return ""


# ---------------------------------------------------------------- 3./4. recomputed with the mistake


def _dims(case: Case) -> dict[str, int]:
    """The case's sizes by the names a port author uses for them."""
    ins = case.inputs
    shape: Callable[[str], tuple[int, ...]] = lambda n: tuple(np.shape(ins[n])) if n in ins else ()  # noqa: E731
    dims: dict[str, int] = {}
    if case.op == "softmax":
        if shape("x"):
            dims["n"] = shape("x")[-1]
    elif case.op == "scaled_dot_product_attention":
        (dims["n_q"], dims["d_k"]), (dims["n_k"], dims["d_v"]) = shape("q"), shape("v")
    elif case.op == "self_attention":
        dims["n"], dims["d_model"] = shape("x")
        dims["d_k"], dims["d_v"] = shape("w_q")[1], shape("w_v")[1]
    elif case.op == "multi_head_attention":
        dims["n_q"], dims["d_model"] = shape("query")
        dims["n_k"] = shape("key")[0]
        dims["h"] = int(case.options.get("num_heads") or 1)
        dims["d_head"] = dims["d_model"] // dims["h"]
    elif case.op in ("lm_loss", "gpt_grads", "gpt_train") and "targets" in ins:
        # the loss is a mean over the counted positions: a gradient of the sum is count times too large
        targets = np.asarray(ins["targets"]).reshape(-1)
        ignore = ins.get("ignore_index")
        dims["count"] = int((targets != np.asarray(ignore)).sum()) if ignore is not None else targets.size
    elif case.op.startswith("classifier"):
        if shape("params.w_q"):
            dims["d"] = shape("params.w_q")[0]
        if shape("params.w_f"):
            dims["c"] = shape("params.w_f")[1]
        if shape("x_emb"):
            dims["n"] = shape("x_emb")[0]
    return {k: int(v) for k, v in dims.items() if int(v) > 1}


def _reference(op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, np.ndarray]:
    from attention_ports.runtimes.builtin import call_reference

    return call_reference(op, inputs, options)


def _mha_scaled(inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], scale: float) -> dict[str, np.ndarray]:
    """Multi-head attention with every head's scores scaled by ``scale`` (the reference fixes it)."""
    import attention_ports.reference as reference

    def project(x: str, w: str, b: str) -> np.ndarray:
        out = np.asarray(inputs[x], dtype=np.float64) @ np.asarray(inputs[w], dtype=np.float64)
        return out + np.asarray(inputs[b], dtype=np.float64) if b in inputs else out

    q, k, v = project("query", "w_q", "b_q"), project("key", "w_k", "b_k"), project("value", "w_v", "b_v")
    h = int(options["num_heads"])
    d_head = q.shape[1] // h
    heads, weights = [], []
    for i in range(h):
        cols = slice(i * d_head, (i + 1) * d_head)
        res = reference.scaled_dot_product_attention(q[:, cols], k[:, cols], v[:, cols], inputs.get("mask"), scale)
        heads.append(res.output)
        weights.append(res.weights)
    out = np.concatenate(heads, axis=1) @ np.asarray(inputs["w_o"], dtype=np.float64)
    if "b_o" in inputs:
        out = out + np.asarray(inputs["b_o"], dtype=np.float64)
    return {"output": out, "weights": np.stack(weights)}


# Recomputations are shared by a case's outputs (self-attention has five) and by every port that
# fails the same case (the mutation kit runs ~250 ports over the same fixtures, and each model-level
# hypothesis re-runs a whole GPT training step): keyed by what the recomputation reads, the case's
# id, operation, options and the bytes of its inputs, never by the object, which each run loads
# anew. Bounded: at most _MAX_RERUNS results (a few MB), the oldest dropped first.
_RERUNS: OrderedDict[tuple[str, str], dict[str, np.ndarray] | None] = OrderedDict()
_RERUNS_LOCK = threading.Lock()  # implementations are judged in threads of their own
_MAX_RERUNS = 2048


def _case_key(case: Case) -> str:
    h = hashlib.sha256(f"{case.id}|{case.op}|{sorted(case.options.items())!r}".encode())
    for name in sorted(case.inputs):
        a = np.ascontiguousarray(case.inputs[name])
        h.update(f"|{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _rerun(case: Case, key: str, run: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray] | None:
    full = (_case_key(case), key)
    with _RERUNS_LOCK:
        if full in _RERUNS:
            _RERUNS.move_to_end(full)
            return _RERUNS[full]
    try:
        result: dict[str, np.ndarray] | None = run()
    except Exception:  # the mistake cannot be recomputed (e.g. a +inf score): no hint from it
        result = None
    with _RERUNS_LOCK:
        _RERUNS[full] = result
        while len(_RERUNS) > _MAX_RERUNS:
            _RERUNS.popitem(last=False)
    return result


def _fits_variant(ctx: Context, key: str, run: Callable[[], dict[str, np.ndarray]]) -> bool:
    result = _rerun(ctx.case, key, run)
    if result is None or ctx.output not in result or not _fits(result[ctx.output], ctx.actual, ctx.bound):
        return False
    return _explains(ctx, result[ctx.output])


def _scale_candidates(case: Case) -> tuple[str, float, list[tuple[str, float, str]]]:
    """(name of the case's scale, its value, [(name, value, likely cause)]) for the scores."""
    d = _dims(case)
    if case.op == "multi_head_attention":
        dh, dm = d.get("d_head", 1), d.get("d_model", 1)
        want = ("1/sqrt(d_head)", 1 / math.sqrt(dh))
        cands = [
            ("1/sqrt(d_model)", 1 / math.sqrt(dm), "every head scaled by the model width d_model instead of d_head"),
            ("1", 1.0, "the scores are never scaled"),
            ("1/d_head", 1 / dh, "divided by d_head instead of sqrt(d_head)"),
            ("sqrt(d_head)", math.sqrt(dh), "multiplied by sqrt(d_head) instead of divided"),
        ]
        return want[0], want[1], cands
    dk, dv = d.get("d_k", 1), d.get("d_v", 1)
    given = case.options.get("scale")
    want = ("the given scale", float(given)) if given is not None else ("1/sqrt(d_k)", 1 / math.sqrt(dk))
    cands = [
        ("1", 1.0, "the scale is never applied" if given is not None else "the scores are never scaled"),
        ("1/sqrt(d_k)", 1 / math.sqrt(dk), "the given scale is ignored: the default 1/sqrt(d_k) is used"),
        ("1/sqrt(d_v)", 1 / math.sqrt(dv), "the default scale uses d_v (the value width) instead of d_k"),
        ("1/d_k", 1 / dk, "divided by d_k instead of sqrt(d_k)"),
        ("sqrt(d_k)", math.sqrt(dk), "multiplied by sqrt(d_k) instead of divided"),
    ]
    if "d_model" in d:
        cands.append(
            ("1/sqrt(d_model)", 1 / math.sqrt(d["d_model"]), "the default scale uses x's width d_model instead of d_k")
        )
    if given is not None and given not in (0.0, 1.0):
        s = float(given)
        cands += [
            ("1/scale", 1 / s, "the given scale is used as a divisor (a temperature), not a factor"),
            ("scale^2", s * s, "the scale is applied twice"),
        ]
    return want[0], want[1], cands


def _check_scale(ctx: Context) -> str:
    if ctx.case.op not in MASKED_OPS or ctx.output not in ("weights", "output"):
        return ""
    want_name, want, cands = _scale_candidates(ctx.case)
    for name, value, cause in cands:
        if math.isclose(value, want, rel_tol=1e-12):
            continue
        if ctx.case.op == "multi_head_attention":
            run = lambda v=value: _mha_scaled(ctx.case.inputs, ctx.case.options, v)  # noqa: E731
        else:
            run = lambda v=value: _reference(ctx.case.op, ctx.case.inputs, {**ctx.case.options, "scale": v})  # noqa: E731
        if _fits_variant(ctx, f"scale={value!r}", run):
            return (
                f"the scores are scaled by {name} = {value:.4g} where this case wants {want_name} = {want:.4g}: {cause}"
            )
    return ""


def _is_causal(mask: np.ndarray) -> bool:
    n_q, n_k = mask.shape
    return n_q == n_k and n_q > 1 and bool(np.array_equal(mask, np.where(np.tri(n_q, dtype=bool), 0.0, -np.inf)))


def _mask_variants(ctx: Context) -> list[tuple[str, np.ndarray | None]]:
    mask = _additive_mask(ctx.case)
    if mask is None:
        return []
    variants: list[tuple[str, np.ndarray | None]] = []
    if _is_causal(mask):
        n = mask.shape[0]
        variants += [
            (
                "the causal mask is off by one diagonal: each query also sees the next key",
                np.where(np.tri(n, k=1, dtype=bool), 0.0, -np.inf),
            ),
            (
                "the causal mask is off by one diagonal: each query misses its own key",
                np.where(np.tri(n, k=-1, dtype=bool), 0.0, -np.inf),
            ),
        ]
    scale = ctx.case.options.get("scale")
    if scale is None and ctx.case.op == "scaled_dot_product_attention":
        scale = 1 / math.sqrt(np.shape(ctx.case.inputs["q"])[1])
    elif scale is None and ctx.case.op == "self_attention":
        scale = 1 / math.sqrt(np.shape(ctx.case.inputs["w_q"])[1])
    finite = mask[np.isfinite(mask)]
    biased = bool(finite.size and (finite != 0).any())  # finite nonzero entries: a bias, not a cut
    if biased and not np.isneginf(mask).any():
        variants.append(("the mask is never applied, or only its -Inf entries (this mask has none)", None))
    else:
        variants.append(("the mask is never applied", None))
    if biased:
        variants.append(("the mask is subtracted instead of added", -mask if not np.isneginf(mask).any() else None))
        boolean = np.where(np.isneginf(mask), -np.inf, 0.0)
        if np.isneginf(mask).any():
            variants.append(("only the mask's -Inf entries are applied (read as a boolean)", boolean))
        if scale is not None and scale != 1.0 and ctx.case.op != "multi_head_attention":
            variants.append(("the mask is added before the scaling (scaled with the scores)", mask * scale))
    if mask.shape[0] == mask.shape[1] and not np.array_equal(mask, mask.T):
        if ctx.language == "Julia":
            what = "the mask is applied transposed; Julia's mask already is key x query, like its scores"
        else:
            what = "the mask is applied transposed (as key x query)"
        variants.append((what, mask.T))
    return variants


def _check_mask(ctx: Context) -> str:
    if ctx.case.op not in MASKED_OPS or ctx.output not in ("weights", "output"):
        return ""
    for i, (what, variant) in enumerate(_mask_variants(ctx)):
        if variant is None and "never applied" not in what:
            continue
        inputs = {k: v for k, v in ctx.case.inputs.items() if k != "mask"}
        if variant is not None:
            inputs["mask"] = variant
        if _fits_variant(ctx, f"mask#{i}:{what}", lambda ins=inputs: _reference(ctx.case.op, ins, ctx.case.options)):
            return f"right for a different mask: {what}"
    mask = _additive_mask(ctx.case)
    if mask is not None and np.isneginf(mask).any() and np.all((mask == 0) | np.isneginf(mask)):
        # a keep/remove mask multiplied into the scores (scores * (mask == 0)): a removed key gets
        # the score 0, not -Inf; no additive mask gives that, so the attention is recomputed
        if _fits_variant(ctx, "mask=multiplied", lambda: _attention_as(ctx.case, multiply_mask=True)):
            return (
                "right for a different mask: the mask multiplies the scores (keep = 1, remove = 0) instead of being "
                "added (keep = 0, remove = -Inf): a removed key gets the score 0 instead of -Inf, so it keeps a weight"
            )
    return ""


# ---------------------------------------------------------------- 4b. a softmax without its maximum


def _naive_softmax(s: np.ndarray) -> np.ndarray:
    """exp(s) / sum(exp(s)) over the last axis, no maximum subtracted: Inf / Inf = NaN where a
    score exceeds ~709.78, 0 / 0 = NaN where a whole row is below ~-745, as a port computes it."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
        e = np.exp(s)
        return e / e.sum(axis=-1, keepdims=True)


def _attention_as(case: Case, naive: bool = False, multiply_mask: bool = False) -> dict[str, np.ndarray]:
    """The case's attention recomputed with one mistake: the softmax without its maximum
    (``naive``), or the mask multiplied into the scaled scores (``multiply_mask``). A query whose
    every score is -Inf gets zero weights, as the reference gives it (the "zeros" convention)."""
    import attention_ports.reference as reference

    ins = {k: np.asarray(v) for k, v in case.inputs.items()}
    f64 = lambda n: np.asarray(ins[n], dtype=np.float64)  # noqa: E731

    def project(x: str, w: str, b: str) -> np.ndarray:
        out = f64(x) @ f64(w)
        return out + f64(b) if b in ins else out

    if case.op == "scaled_dot_product_attention":
        q, k, v = f64("q"), f64("k"), f64("v")
    elif case.op == "self_attention":
        q, k, v = project("x", "w_q", "b_q"), project("x", "w_k", "b_k"), project("x", "w_v", "b_v")
    else:
        q, k, v = project("query", "w_q", "b_q"), project("key", "w_k", "b_k"), project("value", "w_v", "b_v")
    h = int(case.options.get("num_heads") or 1) if case.op == "multi_head_attention" else 1
    d, dv = q.shape[1] // h, v.shape[1] // h
    given = case.options.get("scale") if case.op != "multi_head_attention" else None
    scale = float(given) if given is not None else 1 / math.sqrt(d)
    mask = _additive_mask(case)
    heads, weights = [], []
    for i in range(h):
        cols = slice(i * d, (i + 1) * d)
        s = (q[:, cols] @ k[:, cols].T) * scale
        if mask is not None:
            s = s * (mask == 0) if multiply_mask else s + mask
        dead = np.all(np.isneginf(s), axis=-1)
        w = _naive_softmax(s) if naive else reference.softmax(s, axis=-1)
        w[dead] = 0.0
        heads.append(w @ v[:, i * dv : (i + 1) * dv])
        weights.append(w)
    out = np.concatenate(heads, axis=1)
    if case.op != "multi_head_attention":
        res = {"weights": weights[0], "output": out}
        return res if case.op == "scaled_dot_product_attention" else {"q": q, "k": k, "v": v, **res}
    out = out @ f64("w_o")
    return {"output": out + f64("b_o") if "b_o" in ins else out, "weights": np.stack(weights)}


def _check_softmax_maximum(ctx: Context) -> str:
    if ctx.case.op == "softmax":
        x = np.asarray(ctx.case.inputs["x"], dtype=np.float64)
        run: Callable[[], dict[str, np.ndarray]] = lambda: {"y": _naive_softmax(x)}  # noqa: E731
        what, sym = "x as it is", "x"
    elif ctx.case.op in MASKED_OPS and ctx.output in ("weights", "output"):
        if _dead_queries(ctx.case) and ctx.masked_query != "zeros":
            return ""  # recomputed with the zeros convention only
        run = lambda: _attention_as(ctx.case, naive=True)  # noqa: E731
        what, sym = "the scores as they are", "s"
    else:
        return ""
    if not _fits_variant(ctx, "softmax=naive", run):
        return ""
    # Evidence needs a query the naive softmax leaves finite (a dead query's zeros excepted): where
    # every row overflows or underflows it gives NaN everywhere, which any port giving NaN "fits"
    # (a softmax normalising columns did, on scores all near -1000).
    cand = _rerun(ctx.case, "softmax=naive", run)[ctx.output]  # type: ignore[index]
    finite = np.isfinite(cand).all(axis=-1)
    dead = _dead_queries(ctx.case)
    if dead and finite.ndim >= 1:
        finite[..., dead] = False
    if not finite.any():
        return ""
    return (
        f"the softmax exponentiates {what}, exp({sym}) / sum(exp({sym})), without subtracting each row's "
        f"maximum first: exp overflows (Inf / Inf = NaN) or underflows (0 / 0) at this case's values; "
        f"compute exp({sym} - max({sym})) / sum(exp({sym} - max({sym})))"
    )


# ---------------------------------------------------------------- 5. a constant factor


def _constants(case: Case) -> list[tuple[str, float, str]]:
    """Named constants, plain numbers first, each with its likely cause."""
    dims = _dims(case)
    out: list[tuple[str, float, str]] = [
        ("-1", -1.0, "the sign is flipped (a subtraction reversed, gradient ascent instead of descent)"),
        ("2", 2.0, "a term counted twice (or the 2 of a squared error's derivative)"),
        ("1/2", 0.5, "a term halved (a mean over two, or a missing factor 2)"),
        ("sqrt(2)", math.sqrt(2), "a dimension doubled inside a square root (sqrt(d_model) vs sqrt(d_k)?)"),
        ("1/sqrt(2)", 1 / math.sqrt(2), "a dimension doubled inside a square root (sqrt(d_model) vs sqrt(d_k)?)"),
    ]
    for name, v in dims.items():
        sum_or_mean = name in ("n", "n_q", "n_k", "count")
        out += [
            (
                name,
                float(v),
                f"a factor {name} = {v} too many" + (" (a sum where the mean is meant?)" if sum_or_mean else ""),
            ),
            (
                f"1/{name}",
                1.0 / v,
                f"divided by {name} = {v} once too often"
                + (" (a mean where the sum is meant?)" if sum_or_mean else ""),
            ),
            (f"sqrt({name})", math.sqrt(v), f"a 1/sqrt({name}) factor is missing (the scale's, in a chain rule?)"),
            (f"1/sqrt({name})", 1 / math.sqrt(v), f"a 1/sqrt({name}) factor too many (the scale applied twice?)"),
        ]
    for (a, va), (b, vb) in itertools.permutations(dims.items(), 2):
        if va != vb:
            out.append(
                (
                    f"sqrt({a}/{b})",
                    math.sqrt(va / vb),
                    f"1/sqrt({b}) used where 1/sqrt({a}) is meant (e.g. sqrt(d_k) vs sqrt(d_model))",
                )
            )
    return out + [(f"-{n}", -v, c) for n, v, c in out[1:]]


def _sizes_equal_to(case: Case, value: float) -> str:
    """' (or a size of the case: n_q)': the case's sizes a plain constant could also stand for."""
    dims = _dims(case)
    a = abs(value)
    hits = [k for k, v in dims.items() if math.isclose(a, v) or math.isclose(a, 1 / v)]
    hits += [f"sqrt({k})" for k, v in dims.items() if math.isclose(a * a, v) or math.isclose(a * a, 1 / v)]
    return f" (or a size of the case: {', '.join(hits)})" if hits else ""


def _check_constant(ctx: Context) -> str:
    e, a = ctx.expected, ctx.actual
    if e.shape != a.shape or not np.array_equal(np.isfinite(e), np.isfinite(a)):
        return ""
    use = np.isfinite(e) & (np.abs(e) > ctx.bound)
    if len(np.unique(e[use])) < MIN_CONSTANT_VALUES:
        return ""  # too few to tell a factor from chance (two equal values fit any equal pair)
    c = float(np.dot(a[use], e[use]) / np.dot(e[use], e[use]))
    if not math.isfinite(c) or c == 0 or math.isclose(c, 1.0, rel_tol=1e-6):
        return ""
    fin = np.isfinite(e)
    slack = 4 * abs(c) * ctx.bound + 4 * np.spacing(np.abs(c * e))
    if not (np.abs(a[fin] - c * e[fin]) <= slack[fin]).all() or not _explains(ctx, c * e):
        return ""
    for name, value, cause in _constants(ctx.case):
        if math.isclose(c, value, rel_tol=1e-9):
            named = name if _is_number(name) else f"{name} = {value:.6g}"
            plain = name.lstrip("-") in ("2", "1/2", "sqrt(2)", "1/sqrt(2)")
            also = _sizes_equal_to(ctx.case, value) if plain else ""
            return f"{ctx.name()} is {named} times the expected values, element by element: {cause}{also}"
    return f"{ctx.name()} is {c:.6g} times the expected values, element by element (a constant factor)"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------- 6. a softmax over the whole array

# Outputs a softmax over the whole array would scale query by query: the softmax itself, the
# attention weights (per head: a port calls its softmax once per head) and the attention output.
_WHOLE_ARRAY_OUTPUTS = {("softmax", "y"), *((op, out) for op in MASKED_OPS for out in ("weights", "output"))}


def _check_whole_array(ctx: Context) -> str:
    """``exp(x) / sum(exp(x))`` over the whole matrix: row i of the result is row i of the per-row
    softmax times ``c_i = Z_i / Z`` (its own normaliser over the total), so each query's slice is
    the expected one times its own factor and the factors sum to 1. Fitted per query by least
    squares, judged like a constant factor (``_check_constant``), and the sum must be 1 to within
    the factors' own rounding."""
    axis = _QUERY_AXIS.get(ctx.role) if ctx.role is not None else None
    e, a = ctx.expected, ctx.actual
    if (ctx.case.op, ctx.output) not in _WHOLE_ARRAY_OUTPUTS or axis is None or e.shape != a.shape:
        return ""
    if not np.array_equal(np.isfinite(e), np.isfinite(a)) or e.shape[axis] < 2:
        return ""
    if ctx.role == Role.HEAD_SCORES:  # (h, n_q, n_k): one softmax call per head, or one for all
        for head in range(e.shape[0]):
            sub = Context(ctx.case, ctx.output, e[head], ctx.bound[head], a[head], None, ctx.masked_query, Role.SCORES)
            if not _whole_array_fits(sub, 0):
                return ""
    elif not _whole_array_fits(ctx, axis):
        return ""
    return _whole_array_line(ctx, axis)


def _whole_array_fits(ctx: Context, axis: int) -> bool:
    e = np.moveaxis(np.nan_to_num(ctx.expected, nan=0.0, posinf=0.0, neginf=0.0), axis, 0)
    a = np.moveaxis(np.nan_to_num(ctx.actual, nan=0.0, posinf=0.0, neginf=0.0), axis, 0)
    b = np.moveaxis(ctx.bound, axis, 0)
    e2, a2, b2 = e.reshape(len(e), -1), a.reshape(len(a), -1), b.reshape(len(b), -1)
    norm = (e2 * e2).sum(axis=1)
    live = norm > 0  # a query with no key (all-zero expected) carries no factor: it must stay zero
    factors = np.where(live, (a2 * e2).sum(axis=1) / np.where(live, norm, 1.0), 0.0)
    if live.sum() < 2 or np.allclose(factors[live], factors[live][0], rtol=1e-9, atol=0.0):
        return False  # one factor for every query is a constant (``_check_constant``'s business)
    candidate = factors[:, None] * e2
    slack = 4 * np.abs(factors)[:, None] * b2 + 4 * np.spacing(np.abs(candidate)) + np.where(live[:, None], 0.0, b2)
    if not (np.abs(a2 - candidate) <= slack).all():
        return False
    # The factors sum to 1 (the whole array is one distribution), each known to its fit's slack.
    if abs(float(factors.sum()) - 1.0) > 1e-9 * len(factors):
        return False
    shape = lambda x: np.moveaxis(x.reshape(e.shape), 0, axis)  # noqa: E731
    return _separates(shape(candidate), ctx.actual, ctx.expected, ctx.bound)


def _whole_array_line(ctx: Context, axis: int) -> str:
    unit = "vector" if ctx.role == Role.ROWS else "query"
    word = ctx.port_axis_word(axis) if ctx.expected.ndim == 2 else unit
    n = ctx.expected.shape[axis]
    if ctx.language == "R":
        idiom = "e / sum(e) where e / rowSums(e) is meant"
    elif ctx.language == "Julia":
        idiom = "e ./ sum(e) where e ./ sum(e; dims = 1) is meant"
    else:
        idiom = "e / e.sum() where e / e.sum(axis=-1, keepdims=True) is meant"
    per_head = " (in each head)" if ctx.role == Role.HEAD_SCORES else ""
    scaled = f"each of its {n} {word}s is the expected {word} times a factor of its own, and the factors sum to 1"
    if ctx.output == "output":
        return (
            f"{ctx.name()}: {scaled}: the attention weights are normalised over the whole score matrix, not per "
            f"query ({idiom}; the contract wants one softmax per query)"
        )
    return (
        f"{ctx.name()} is normalised over the whole array, not per {unit}{per_head}: {scaled}: the softmax divides "
        f"by one sum over every element ({idiom}; the contract wants one sum per {unit})"
    )


# ---------------------------------------------------------------- 7. off by one query


def _check_row_shift(ctx: Context) -> str:
    axis = _QUERY_AXIS.get(ctx.role) if ctx.role is not None else None
    e, a, b = ctx.expected, ctx.actual, ctx.bound
    if axis is None or e.shape != a.shape or e.ndim <= axis or e.shape[axis] < 3:
        return ""
    n = e.shape[axis]

    def rows(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
        return np.take(x, range(lo, hi), axis=axis)

    if _fits_exact(rows(e, 0, n - 1), rows(e, 1, n), rows(b, 0, n - 1)):
        return ""  # neighbouring queries agree anyway: a shift proves nothing
    word = ctx.port_axis_word(axis)
    base = ctx.view.base if ctx.view is not None else 0  # as the port counts (R and Julia from 1, C from 0)
    unit = ops.AXIS_NAMES[ctx.role][axis] if ctx.role in _NOT_QUERIES else "query"
    for late in (True, False):
        lo_a, hi_a, lo_e, hi_e = (0, n - 1, 1, n) if late else (1, n, 0, n - 1)
        candidate, cand_bound, actual = rows(e, lo_e, hi_e), rows(b, lo_e, hi_e), rows(a, lo_a, hi_a)
        if not np.any(np.abs(candidate) > cand_bound):
            continue  # the shifted rows are all zero: any zero output "fits" them (an all-zero gradient)
        if _fits_exact(candidate, actual, cand_bound) and _separates(
            candidate, actual, rows(e, lo_a, hi_a), rows(b, lo_a, hi_a)
        ):
            return (
                f"off by one {unit}: {word} i of {ctx.name()} holds what {word} i{'+' if late else '-'}1 should "
                f"({word}s {base + (0 if late else 1)}..{base + n - (2 if late else 1)}): an index shifted by one "
                f"(a 0-based loop ported to 1-based, or the reverse)"
            )
    return ""


# ---------------------------------------------------------------- 8. only where the mask acts


def _check_mask_rows(ctx: Context) -> str:
    # Where the error lies, and no cause: every mask mistake the checks know (4) and the unstable
    # softmax (4b) were tried and none fits. A cause named here would be a guess (a softmax that
    # fails only on the masked rows' extreme scores was once told "the mask is applied wrongly").
    mask = _additive_mask(ctx.case) if ctx.case.op in MASKED_OPS else None
    bad = _bad_queries(ctx)
    if mask is None or not bad:
        return ""
    touched = set(int(i) for i in np.flatnonzero((mask != 0).any(axis=1)))
    untouched = set(range(mask.shape[0])) - touched
    if not untouched or not set(bad) <= touched:
        return ""
    return (
        f"wrong only in the {ctx.queries(bad)}, where the mask acts; the {len(untouched)} unmasked "
        f"quer{'y agrees' if len(untouched) == 1 else 'ies agree'} (no known mask mistake, nor a softmax "
        f"without its maximum, gives these numbers)"
    )


# ---------------------------------------------------------------- 9. the layers' known mistakes


def _norm_parts(inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]):
    eps = options.get("eps")
    return inputs["x"], inputs.get("weight"), inputs.get("bias"), 1e-5 if eps is None else float(eps)


def _affine(y: np.ndarray, w: np.ndarray | None, b: np.ndarray | None) -> np.ndarray:
    y = y if w is None else y * w
    return y if b is None else y + b


def _ln(x, eps, axis=1, ddof=0, outside=False, mu=None):
    mu = x.mean(axis=axis, keepdims=True) if mu is None else mu
    c = x - mu
    var = (c * c).sum(axis=1, keepdims=True) / (x.shape[1] - ddof)
    return c / (np.sqrt(var) + eps) if outside else c / np.sqrt(var + eps)


def _other_gelu(options: Mapping[str, Any]) -> tuple[str, str]:
    """gelu's form the case did not ask for, and the line naming that mistake."""
    form = options.get("approximate") or "none"
    other = "tanh" if form == "none" else "none"
    want = {"none": "the erf form", "tanh": "the tanh approximation"}
    return other, f'gelu computes {want[other]} where approximate = "{form}" asks for {want[form]}'


def _norm_variants(op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]):
    """(key, what the port did, its output y) for the known mistakes of ``op``."""
    if op == "gelu":
        other, line = _other_gelu(options)
        yield (f"gelu={other}", line, lambda: _reference("gelu", inputs, {**options, "approximate": other})["y"])
        return
    x, w, b, eps = _norm_parts(inputs, options)
    if op == "rms_norm":
        yield (
            "rms=centred",
            "rms_norm divides by the centred standard deviation (layer_norm's), not the root mean square",
            lambda: _affine(x / np.sqrt(x.var(axis=1, keepdims=True) + eps), w, None),
        )
        yield (
            "rms=no_eps",
            "eps is missing: x / sqrt(mean(x^2)) (a zero token divides 0 by 0)",
            lambda: _affine(x / np.sqrt((x * x).mean(axis=1, keepdims=True)), w, None),
        )
        yield (
            "rms=eps_outside",
            "eps is added outside the square root: sqrt(mean(x^2)) + eps instead of sqrt(mean(x^2) + eps)",
            lambda: _affine(x / (np.sqrt((x * x).mean(axis=1, keepdims=True)) + eps), w, None),
        )
        return
    if x.shape[1] > 1:
        yield (
            "ln=unbiased",
            "the variance is the unbiased one (divided by d - 1, as R's var() or Julia's Statistics.var); "
            "layer_norm's is the biased one (divided by d)",
            lambda: _affine(_ln(x, eps, ddof=1), w, b),
        )
    yield (
        "ln=eps_outside",
        "eps is added outside the square root: sqrt(var) + eps instead of sqrt(var + eps)",
        lambda: _affine(_ln(x, eps, outside=True), w, b),
    )
    if x.shape[1] > 1:
        no_eps = "eps is missing: (x - mean) / sqrt(var) (a constant token divides 0 by 0)"
    else:  # one feature: the unbiased variance divides by d - 1 = 0 and gives the same 0 / 0
        no_eps = (
            "eps is missing, or the variance is the unbiased one (divided by d - 1, as R's var() or Julia's "
            "Statistics.var): with one feature either gives (x - mean) / sqrt(0) = 0 / 0; layer_norm's "
            "variance is the biased one plus eps"
        )
    yield ("ln=no_eps", no_eps, lambda: _affine(_ln(x, 0.0), w, b))
    yield (
        "ln=mean_over_tokens",
        "the mean is taken over the tokens (each feature's mean) instead of over each token's features",
        lambda: _affine(_ln(x, eps, mu=x.mean(axis=0, keepdims=True)), w, b),
    )
    if w is not None and b is not None:
        yield (
            "ln=bias_first",
            "the bias is added before the weight multiplies: (y + bias) * weight",
            lambda: (_ln(x, eps) + b) * w,
        )
    if b is not None:
        yield ("ln=no_bias", "the bias is ignored", lambda: _affine(_ln(x, eps), w, None))


def _check_layer_mistakes(ctx: Context) -> str:
    """The normalisation layers' and gelu's known mistakes, each recomputed (docs/ports.md)."""
    if ops.get(ctx.case.op).family not in ("norm", "activation"):
        return ""
    for key, line, run in _norm_variants(ctx.case.op, ctx.case.inputs, ctx.case.options):
        if _fits_variant(ctx, key, lambda run=run: {ctx.output: run()}):
            return line
    return ""


def _check_one_pass_variance(ctx: Context) -> str:
    """layer_norm's variance as mean(x^2) - mean(x)^2: its error, about d u (mu^2 / (var + eps))
    relative to each normalised value, is the only one, and only on nearly constant tokens."""
    if ctx.case.op != "layer_norm" or ctx.expected.shape != ctx.actual.shape:
        return ""
    x, w, _, eps = _norm_parts(ctx.case.inputs, ctx.case.options)
    d = x.shape[1]
    mu, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    kappa2 = mu * mu / (var + eps)  # (n, 1)
    core = np.abs(_ln(x, eps)) * (1.0 if w is None else np.abs(w))
    err = np.abs(ctx.actual - ctx.expected)
    bad_rows = (err > ctx.bound).any(axis=1)
    u = precision.FORMATS["float64"].u
    envelope = 4 * ctx.bound + 4 * d * u * (kappa2 + 1) * core
    if not bad_rows.any() or not (kappa2[bad_rows] >= 1e4).all() or not (err <= envelope).all():
        return ""
    return (
        "the variance is computed in one pass, mean(x^2) - mean(x)^2, which cancels on tokens whose mean is "
        f"large beside their spread (here |mean| / std up to {math.sqrt(float(kappa2.max())):.3g}): "
        "take the mean first, then the mean of (x - mean)^2 (or Welford's recurrence)"
    )


# ---------------------------------------------------------------- 10. the transformer's known mistakes


def _tanh_gelu(constant: float) -> Callable[[np.ndarray], np.ndarray]:
    """gelu's tanh approximation with ``constant`` in place of sqrt(2/pi)."""
    from attention_ports.reference.activations import TANH_CUBIC

    return lambda z: 0.5 * z * (1.0 + np.tanh(constant * (z + TANH_CUBIC * z**3)))


# How a block's attention may mask its scores (``_variant_block``): the causal mask, none, the
# causal mask transposed (query i sees keys i..n: the later ones), or without its diagonal (query i
# sees keys before it only: the first query sees none, and its softmax is 0/0).
MASKS = ("causal", "none", "transposed", "strict")


def _variant_block(
    x: np.ndarray,
    p: Mapping[str, np.ndarray],
    options: Mapping[str, Any],
    causal: bool | str,
    act: Callable[[np.ndarray], np.ndarray],
    residual: str = "input",
) -> np.ndarray:
    """GPT-2's block from the reference's own pieces, with the attention's mask ``causal`` (a name
    of ``MASKS``; True: "causal", False: "none"), ``act`` as the feed-forward's activation, and each
    residual added to the sublayer's ``input`` (the contract) or to its normalised input ("norm"; the
    attention's only: "attn_norm"), or the second norm applied to x, not h ("ln2_x"), or the block
    post-norm ("post")."""
    import attention_ports.reference as reference

    kind = {True: "causal", False: "none"}.get(causal, causal) if isinstance(causal, bool) else causal
    eps = options.get("eps")
    n = x.shape[0]
    keep = {
        "causal": np.tri(n, dtype=bool),
        "transposed": np.tri(n, dtype=bool).T,
        "strict": np.tri(n, k=-1, dtype=bool),
    }
    mask = np.where(keep[kind], 0.0, -np.inf) if kind in keep else None
    a = reference.layer_norm(x, p["ln1_w"], p["ln1_b"], eps=eps)
    attn = reference.multi_head_attention(
        a, a, a, p["w_q"], p["w_k"], p["w_v"], p["w_o"], int(options["num_heads"]),
        b_q=p["b_q"], b_k=p["b_k"], b_v=p["b_v"], b_o=p["b_o"], mask=mask,
    ).output  # fmt: skip
    if residual == "post":  # the 2017 Transformer's: each sublayer on x, the norm after the residual
        attn = reference.multi_head_attention(
            x, x, x, p["w_q"], p["w_k"], p["w_v"], p["w_o"], int(options["num_heads"]),
            b_q=p["b_q"], b_k=p["b_k"], b_v=p["b_v"], b_o=p["b_o"], mask=mask,
        ).output  # fmt: skip
        h = reference.layer_norm(x + attn, p["ln1_w"], p["ln1_b"], eps=eps)
        return reference.layer_norm(
            h + act(h @ p["w_1"] + p["b_1"]) @ p["w_2"] + p["b_2"], p["ln2_w"], p["ln2_b"], eps=eps
        )
    h = (a if residual in ("norm", "attn_norm") else x) + attn
    # "ln2_x": the second norm applied to the block's input x where it normalises h = x + attention
    f = reference.layer_norm(x if residual == "ln2_x" else h, p["ln2_w"], p["ln2_b"], eps=eps)
    return (f if residual == "norm" else h) + act(f @ p["w_1"] + p["b_1"]) @ p["w_2"] + p["b_2"]


def _variant(
    op: str,
    inputs: Mapping[str, np.ndarray],
    options: Mapping[str, Any],
    causal: bool | str = True,
    act: Callable[[np.ndarray], np.ndarray] | None = None,
    residual: str = "input",
) -> np.ndarray:
    """feed_forward's or decoder_block's y, or gpt_forward's logits, recomputed with a mistake: the
    attention's mask (``causal``: ``MASKS``), ``act`` as gelu (default: the reference's, as the case
    asks), or the residuals from the normalised inputs (``residual`` "norm")."""
    import attention_ports.reference as reference

    if act is None:
        act = lambda z: reference.gelu(z, approximate=options.get("approximate"))  # noqa: E731
    if op == "feed_forward":
        x = np.asarray(inputs["x"], dtype=np.float64)
        w_1, b_1, w_2, b_2 = (np.asarray(inputs[n], dtype=np.float64) for n in ops.FFN_PARAMS)
        return act(x @ w_1 + b_1) @ w_2 + b_2
    p = {k.split(".", 1)[1]: np.asarray(a, dtype=np.float64) for k, a in inputs.items() if k.startswith("params.")}
    if op == "decoder_block":
        return _variant_block(np.asarray(inputs["x"], dtype=np.float64), p, options, causal, act, residual)
    tokens = np.asarray(inputs["tokens"]).astype(np.int64)
    x = p["wte"][tokens] + p["wpe"][: len(tokens)]
    for b in range(p["ln1_w"].shape[0]):
        x = _variant_block(x, {m: p[m][b] for m in ops.BLOCK_PARAMS}, options, causal, act, residual)
    return reference.layer_norm(x, p["lnf_w"], p["lnf_b"], eps=options.get("eps")) @ p["w_head"]


def _first_row_nan(y: np.ndarray) -> np.ndarray:
    out = np.array(y, copy=True)
    out[0] = np.nan
    return out


def _heads_permuted(
    inputs: Mapping[str, np.ndarray], heads: int, kind: str, out_too: bool, prefix: str = "params."
) -> dict[str, np.ndarray]:
    """The inputs under which the reference's contiguous heads are the port's ``kind`` of heads:
    "strided" (head h = projected features h, h + H, h + 2H, ...) or "reversed" (head h = the
    contiguous block H - 1 - h), by permuting w_q, w_k, w_v's columns and their biases (each block's,
    for stacks); ``out_too``: the heads' outputs written back the same way (w_o's rows permuted)."""
    out = dict(inputs)
    d = np.shape(inputs[f"{prefix}w_q"])[-1]
    dh = d // heads
    if kind == "strided":
        perm = np.array([h + heads * j for h in range(heads) for j in range(dh)])
    else:
        perm = np.array([(heads - 1 - h) * dh + j for h in range(heads) for j in range(dh)])
    for t in "qkv":
        out[f"{prefix}w_{t}"] = np.asarray(inputs[f"{prefix}w_{t}"])[..., perm]
        if f"{prefix}b_{t}" in inputs:
            out[f"{prefix}b_{t}"] = np.asarray(inputs[f"{prefix}b_{t}"])[..., perm]
    if out_too:
        out[f"{prefix}w_o"] = np.asarray(inputs[f"{prefix}w_o"])[..., perm, :]
    return out


def _scores_scaled(inputs: Mapping[str, np.ndarray], factor: float, prefix: str = "params.") -> dict[str, np.ndarray]:
    """The inputs under which the reference's scores are ``factor`` times the case's: q scaled."""
    out = dict(inputs)
    for n in (f"{prefix}w_q", f"{prefix}b_q"):
        if n in inputs:
            out[n] = np.asarray(inputs[n], dtype=np.float64) * factor
    return out


# The square weights of a block a port may apply transposed without a shape error (w_1 and w_2
# too when d_ff = d): x W^T where x W is meant, e.g. torch's (out x in) storage taken as it is.
_ATTENTION_WEIGHTS = ("w_q", "w_k", "w_v", "w_o")
_WEIGHT_LAYOUT = {
    "R": "R's weights are d_in x d_out, applied as x %*% W",
    "Julia": "Julia's weights are d_out x d_in, applied as W * x",
}


def _transposed(inputs: Mapping[str, np.ndarray], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The inputs with the block weights ``names`` transposed (each block's, for gpt_forward's stacks)."""
    out = dict(inputs)
    for n in names:
        out[f"params.{n}"] = np.swapaxes(np.asarray(inputs[f"params.{n}"]), -1, -2)
    return out


def _transformer_variants(ctx: Context):
    """(key, what the port did, run: every output recomputed) for the transformer's known mistakes."""
    op, inputs, options = ctx.case.op, ctx.case.inputs, ctx.case.options
    first = ops.get(op).outputs[0]
    ref = lambda ins=inputs, opts=options: _reference(op, ins, opts)  # noqa: E731
    forward = op in ("feed_forward", "decoder_block", "gpt_forward")
    n = len(inputs["tokens"]) if "tokens" in inputs else np.shape(inputs["x"])[0]
    other, line = _other_gelu(options)
    yield f"tf=gelu_{other}", line, lambda: ref(opts={**options, "approximate": other})
    if op == "feed_forward":
        return
    if "ignore_index" in inputs:
        yield (
            "tf=ignore_index_ignored",
            "ignore_index is ignored: every position's loss is counted, the ones whose target is ignore_index "
            "included (they must be left out of the mean and of its count)",
            lambda: ref(ins={k: v for k, v in inputs.items() if k != "ignore_index"}),
        )
    heads = int(options["num_heads"])
    d = np.shape(inputs["params.w_q"])[-1]
    where = " (in every block)" if "tokens" in inputs else ""
    if forward and n > 1:
        for kind, what in (
            ("none", "the attention is not causal: each query attends to every key, later ones included; a decoder's "
             "query i may see keys 1..i only (mask the scores of keys j > i with -Inf before the softmax)"),
            ("transposed", "the causal mask is transposed: each query attends to itself and the keys after it, where "
             "query i may see keys 1..i only (mask j > i, not j < i)"),
            ("strict", "the causal mask leaves out the diagonal: each query attends to the keys before it but not to "
             "its own (mask j > i, not j >= i; the first query then has no key)"),
        ):  # fmt: skip
            key = "tf=no_causal_mask" if kind == "none" else f"tf=mask_{kind}"
            yield key, what + where, lambda kind=kind: {first: _variant(op, inputs, options, causal=kind)}
            if kind == "strict" and op == "decoder_block":  # the first query's softmax as 0/0: NaN in its row
                yield (
                    "tf=mask_strict_nan",
                    what + " (its row is NaN here)",
                    lambda: {first: _first_row_nan(_variant(op, inputs, options, causal="strict"))},
                )
        yield (
            "tf=residual_from_norm",
            f"each residual is added to the normalised input: ln1(x) + attention(ln1(x)) where the block adds x "
            f"(and likewise around the feed-forward){where}",
            lambda: {first: _variant(op, inputs, options, residual="norm")},
        )
    if forward and op != "feed_forward":
        yield (
            "tf=attention_residual_from_norm",
            f"the attention's residual is added to the normalised input{where}: h = ln1(x) + attention(ln1(x)) "
            "where the block adds x, h = x + attention(ln1(x)) (the feed-forward's residual is right)",
            lambda: {first: _variant(op, inputs, options, residual="attn_norm")},
        )
        yield (
            "tf=ln2_of_x",
            f"the second layer norm is applied to the block's input x{where}: ffn(ln2(x)) where the block "
            "normalises h = x + attention(ln1(x)), ffn(ln2(h))",
            lambda: {first: _variant(op, inputs, options, residual="ln2_x")},
        )
        yield (
            "tf=post_norm",
            f"the block is post-norm (the 2017 Transformer's: ln1(x + attention(x)), then ln2(h + ffn(h))) where "
            f"GPT-2's is pre-norm: x + attention(ln1(x)), then h + ffn(ln2(h)){where}",
            lambda: {first: _variant(op, inputs, options, residual="post")},
        )
    if forward and heads > 1:
        for kind, out_too, what in _HEAD_MISTAKES:
            yield (
                f"tf=heads_{kind}_{out_too}",
                _heads_said(what, where),
                lambda kind=kind, out_too=out_too: ref(ins=_heads_permuted(inputs, heads, kind, out_too)),
            )
    if forward:
        dh = d // heads
        for name, factor in (("1/sqrt(d_model)", math.sqrt(dh / d)), ("1", math.sqrt(dh))):
            if heads == 1 and name != "1":
                continue
            yield (
                f"tf=scale_{name}",
                f"the scores are scaled by {name} where multi-head attention scales them by 1/sqrt(d_head) = "
                f"1/sqrt(d_model / num_heads){where}",
                lambda factor=factor: ref(ins=_scores_scaled(inputs, factor)),
            )
    square = [w for w in (*_ATTENTION_WEIGHTS, "w_1", "w_2") if _is_square(inputs[f"params.{w}"])]
    groups = [(w,) for w in square] + [_ATTENTION_WEIGHTS]
    sep = "$" if ctx.language == "R" else "."
    layout = _WEIGHT_LAYOUT.get(ctx.language, "the reference's weights are d_in x d_out, applied as x @ W")
    for names in groups:
        *rest, last = [f"params{sep}{w}" for w in names]
        which = f"{', '.join(rest)} and {last}" if rest else last
        yield (
            f"tf=transposed_{'_'.join(names)}",
            f"{which} {'is' if len(names) == 1 else 'are'} applied transposed{where}: a square weight, so no "
            f"shape error shows it (torch's nn.Linear stores out x in); {layout}",
            lambda names=names: ref(ins=_transposed(inputs, names)),
        )


# The ways a port splits or joins heads wrongly (kind, whether the output is written back the same
# way, what the port did): the block's and multi-head attention's variants both try each.
_HEAD_MISTAKES = (
    ("strided", False, "each head takes every H-th projected feature (h, h + H, ...), not a contiguous block of d / H"),
    ("strided", True, "each head takes every H-th projected feature (h, h + H, ...) and writes its output back the "
     "same way, not a contiguous block of d / H"),
    ("reversed", False, "the heads' outputs are concatenated in reverse order before w_o"),
)  # fmt: skip


def _heads_said(what: str, where: str = "") -> str:
    return (
        f"the heads are split wrongly{where}: {what} (head h is projected features (h - 1) d / H + 1 .. h d / H, "
        "counted from 1, in order)"
    )


def _is_square(weight: np.ndarray) -> bool:
    shape = np.shape(weight)
    return len(shape) >= 2 and shape[-1] == shape[-2]


def _attention_variants(ctx: Context):
    """(key, what the port did, run) for multi_head_attention's and self_attention's projection and
    head mistakes: heads strided or reversed, a square weight applied transposed."""
    op, inputs, options = ctx.case.op, ctx.case.inputs, ctx.case.options
    ref = lambda ins: _reference(op, ins, options)  # noqa: E731
    heads = int(options.get("num_heads") or 1)
    if op == "multi_head_attention" and heads > 1:
        for kind, out_too, what in _HEAD_MISTAKES:
            yield (
                f"mha=heads_{kind}_{out_too}",
                _heads_said(what),
                lambda kind=kind, out_too=out_too: ref(_heads_permuted(inputs, heads, kind, out_too, prefix="")),
            )
    names = ("w_q", "w_k", "w_v", "w_o") if op == "multi_head_attention" else ("w_q", "w_k", "w_v")
    square = tuple(w for w in names if _is_square(inputs[w]))
    layout = _WEIGHT_LAYOUT.get(ctx.language, "the reference's weights are d_in x d_out, applied as x @ W")
    for group in [(w,) for w in square] + ([square] if len(square) > 1 else []):
        *rest, last = group
        which = f"{', '.join(rest)} and {last}" if rest else last
        yield (
            f"att=transposed_{'_'.join(group)}",
            f"{which} {'is' if len(group) == 1 else 'are'} applied transposed: a square weight, so no shape error "
            f"shows it (torch's nn.Linear stores out x in); {layout}",
            lambda group=group: ref({**inputs, **{w: np.swapaxes(np.asarray(inputs[w]), -1, -2) for w in group}}),
        )


def _check_attention_projections(ctx: Context) -> str:
    if ctx.case.op in CLASSIFIER_FORWARD:
        return _check_classifier_projections(ctx)
    if ctx.case.op not in ("multi_head_attention", "self_attention"):
        return ""
    for key, line, run in _attention_variants(ctx):
        if _fits_variant(ctx, key, run):
            return line
    return ""


# The classifier's outputs its forward pass alone gives: a weight applied transposed in the forward
# is recomputed there; its gradients follow the port's own backward, and are not claimed.
CLASSIFIER_FORWARD = {
    "classifier_forward": ("q", "k", "v", "weights", "z", "f", "pooled", "probs"),
    "classifier_step": ("loss", "probs"),
}


def _check_classifier_projections(ctx: Context) -> str:
    """The classifier's square weights (w_q, w_k, w_v, d x d) applied transposed, one or all three,
    recomputed by the reference with those weights transposed."""
    op, inputs, options = ctx.case.op, ctx.case.inputs, ctx.case.options
    if ctx.output not in CLASSIFIER_FORWARD[op]:
        return ""
    names = tuple(w for w in ("w_q", "w_k", "w_v") if _is_square(inputs[f"params.{w}"]))
    sep = "$" if ctx.language == "R" else "."
    layout = _WEIGHT_LAYOUT.get(ctx.language, "the reference's weights are d_in x d_out, applied as x @ W")
    for group in [(w,) for w in names] + ([names] if len(names) > 1 else []):
        *rest, last = [f"params{sep}{w}" for w in group]
        which = f"{', '.join(rest)} and {last}" if rest else last
        run = lambda group=group: _reference(op, _transposed(inputs, group), options)  # noqa: E731
        if _fits_variant(ctx, f"clf=transposed_{'_'.join(group)}", run):
            return (
                f"{which} {'is' if len(group) == 1 else 'are'} applied transposed: a square weight (d x d), so no "
                f"shape error shows it; {layout}"
            )
    return ""


# lm_loss's (and the gradient's, the training's) ignore_index mistakes: ignored, or compared in the
# other base (a 1-based port comparing the 0-based id, or the reverse)
def _check_loss_mistakes(ctx: Context) -> str:
    if ctx.case.op in ("lm_loss", "gpt_grads") and "ignore_index" in ctx.case.inputs:
        line = _check_mean_over_every_position(ctx)
        if line:
            return line
    if ctx.case.op not in ("lm_loss",) or "ignore_index" not in ctx.case.inputs:
        return ""
    inputs, options = ctx.case.inputs, ctx.case.options
    ignore = np.asarray(inputs["ignore_index"])
    variants = [
        ("ignored", "ignore_index has no effect: every position's loss is counted, the ones whose target is "
         "ignore_index included (ignored, or compared in the other base: ignore_index is in the targets' base, and "
         "those positions are left out of the mean and of its count)",
         {k: v for k, v in inputs.items() if k != "ignore_index"}),
        ("minus1", "ignore_index is compared one off (as a 0-based id against 1-based targets, or the reverse): the "
         "positions left out are those whose target is ignore_index - 1; ignore_index is in the targets' base",
         {**inputs, "ignore_index": ignore - 1}),
        ("plus1", "ignore_index is compared one off (as a 1-based id against 0-based targets, or the reverse): the "
         "positions left out are those whose target is ignore_index + 1; ignore_index is in the targets' base",
         {**inputs, "ignore_index": ignore + 1}),
    ]  # fmt: skip
    for key, line, ins in variants:
        if _fits_variant(ctx, f"loss={key}", lambda ins=ins: _reference(ctx.case.op, ins, options)):
            return line
    return ""


def _check_mean_over_every_position(ctx: Context) -> str:
    """The loss's mean divided by every position, n, where the ignored ones are left out of its count
    (llm.c's mean over B * T, kept with an ignore_index): lm_loss's loss and every gradient of
    gpt_grads are then count / n times the right ones, recomputed so. Where no position counts, the
    right loss is NaN and a 0 is any sum's (over n, over the vocabulary, a sum not a mean): no line."""
    inputs, options = ctx.case.inputs, ctx.case.options
    targets = np.asarray(inputs["targets"]).reshape(-1)
    n, count = targets.size, int((targets != np.asarray(inputs["ignore_index"])).sum())
    if count in (0, n):
        # none counted: 0 where 0 / 0 = NaN is meant is any sum's, over n or the vocabulary or none
        return ""
    vocab = np.shape(inputs["logits"])[-1] if "logits" in inputs else np.shape(inputs["params.wte"])[0]
    if any(math.isclose(count / n, other) for other in (count, count / vocab)):
        return ""  # a sum (count times the mean) or a mean over the vocabulary gives the same numbers

    def run() -> dict[str, np.ndarray]:
        right = _reference(ctx.case.op, inputs, options)
        return {k: np.asarray(v) * (count / n) for k, v in right.items()}

    if not _fits_variant(ctx, "loss=mean_over_n", run):
        return ""
    what = "the loss" if ctx.output == "loss" else f"{ctx.name()}, the gradient of that loss,"
    return (
        f"the loss's mean is divided by every position (n = {n}), the ignored ones included, where it is over the "
        f"positions counted (count = {count}): {what} is count / n = {count / n:.6g} times the right one (divide the "
        "sum of the counted positions' losses by their count, and its gradient by the same count)"
    )


def _check_gpt_grads_loss(ctx: Context) -> str:
    """gpt_grads' loss, a forward quantity, recomputed under each of gpt_forward's known mistakes
    (its logits recomputed so, then lm_loss): one number, so a mistake is named only when it alone of
    them fits (and separates), whatever the gradients are."""
    case = ctx.case
    if case.op != "gpt_grads" or ctx.output != "loss":
        return ""
    fwd_inputs = {k: v for k, v in case.inputs.items() if k == "tokens" or k.startswith("params.")}
    fwd_options = {k: v for k, v in case.options.items() if k in ("num_heads", "eps", "approximate")}
    forward = dataclasses.replace(case, op="gpt_forward", inputs=fwd_inputs, options=fwd_options)
    fwd_ctx = dataclasses.replace(ctx, case=forward, output="logits")
    loss_inputs = {k: case.inputs[k] for k in ("targets", "ignore_index") if k in case.inputs}
    fitting = []
    for key, line, run in _transformer_variants(fwd_ctx):
        if key.startswith("tf=gelu"):  # the gradients' own check recomputes every output with it
            continue

        def loss(run=run) -> dict[str, np.ndarray]:
            logits = run()["logits"]
            return {"loss": _reference("lm_loss", {"logits": logits, **loss_inputs}, {})["loss"]}

        if _fits_variant(ctx, f"gg_loss:{key}", loss):
            fitting.append(line)
    if len(fitting) != 1:
        return ""
    return f"the loss is the one a forward pass with this mistake gives: {fitting[0]}"


def _check_transformer_mistakes(ctx: Context) -> str:
    """The transformer's known mistakes, each recomputed: a missing causal mask, the other gelu, a
    square weight applied transposed."""
    if ops.get(ctx.case.op).family != "transformer":
        return ""
    for key, line, run in _transformer_variants(ctx):
        if _fits_variant(ctx, key, run):
            return line
    return _check_gpt_grads_loss(ctx)


# ---------------------------------------------------------------- 11. the optimizer's known mistakes


def _hyper(options: Mapping[str, Any], eps_key: str | None = "eps") -> tuple[float, float, float, float, float]:
    """(lr, beta1, beta2, eps, weight_decay) of an AdamW step, the reference's defaults for the absent."""
    from attention_ports.reference import optim

    def get(key: str | None, default: float) -> float:
        value = options.get(key) if key is not None else None
        return default if value is None else float(value)

    return (
        get("lr", optim.DEFAULT_LR),
        get("beta1", optim.DEFAULT_BETA1),
        get("beta2", optim.DEFAULT_BETA2),
        get(eps_key, optim.DEFAULT_EPS),
        get("weight_decay", optim.DEFAULT_WEIGHT_DECAY),
    )


def _adam(
    p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, t: int, hyper: tuple[float, ...], mistake: str = ""
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One AdamW step (param, m, v) computed with ``mistake`` (:data:`ADAMW_MISTAKES`' names; "": none)."""
    lr, b1, b2, eps, wd = hyper
    if mistake == "betas_swapped":
        b1, b2 = b2, b1
    t = t + 1 if mistake == "step_plus_one" else t - 1 if mistake == "step_minus_one" else t
    decay = 1 - lr * wd
    if mistake == "l2_decay":  # Adam with L2: the decay joins the gradient, the moments see it
        g, decay = g + wd * p, 1.0
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    c1 = 1.0 if mistake in ("no_bias_correction", "no_bias_correction_m") else 1 - b1**t
    c2 = 1.0 if mistake in ("no_bias_correction", "no_bias_correction_v") else 1 - b2**t
    v_hat = v / c2
    denom = np.sqrt(v_hat + eps) if mistake == "eps_inside" else np.sqrt(v_hat) + eps
    return p * decay - lr * (m / c1) / denom, m, v


def _adamw_variant(inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], mistake: str) -> dict[str, np.ndarray]:
    """One AdamW step of the case computed with ``mistake``."""
    p, g, m, v = (np.asarray(inputs[k], dtype=np.float64) for k in ("param", "grad", "m", "v"))
    param, m, v = _adam(p, g, m, v, int(options["step"]), _hyper(options), mistake)
    return {"param": param, "m": m, "v": v}


ADAMW_MISTAKES = (
    (
        "no_bias_correction",
        "Adam without bias correction: m and v are used as they are, not divided by 1 - beta1^t and 1 - beta2^t "
        "(t is the step's number, counted from 1)",
    ),
    (
        "no_bias_correction_m",
        "the first moment m is used without its bias correction (divided by 1 - beta1^t), v with its own",
    ),
    (
        "no_bias_correction_v",
        "the second moment v is used without its bias correction (divided by 1 - beta2^t), m with its own",
    ),
    (
        "l2_decay",
        "L2 decay instead of decoupled weight decay: weight_decay * param is added to the gradient (so the moments "
        "carry it) where AdamW multiplies the parameter by 1 - lr * weight_decay",
    ),
    ("eps_inside", "eps is added inside the square root: sqrt(v_hat + eps) instead of sqrt(v_hat) + eps"),
    (
        "step_plus_one",
        "the bias corrections use t + 1 for step t (a step counter incremented before it is read): 1 - beta^t, "
        "t counted from 1",
    ),
    (
        "step_minus_one",
        "the bias corrections use t - 1 for step t (a step counted from 0): 1 - beta^t, t counted from 1",
    ),
    ("betas_swapped", "beta1 and beta2 are swapped: m decays with beta2 and v with beta1"),
)


def _check_optimizer_mistakes(ctx: Context) -> str:
    """adamw_step's known mistakes, each recomputed from the case's inputs (the module docstring)."""
    if ops.get(ctx.case.op).family != "optimizer":
        return ""
    for mistake, line in ADAMW_MISTAKES:
        if mistake == "step_minus_one" and int(ctx.case.options["step"]) < 2:
            continue  # step 0's bias correction divides by zero
        key = f"adamw={mistake}"
        if _fits_variant(ctx, key, lambda m=mistake: _adamw_variant(ctx.case.inputs, ctx.case.options, m)):
            return line
    return ""


# gpt_train's training-loop mistakes (each recomputed, step by step, with the reference's gpt_grads
# and the AdamW step above): (name, what the port did)
TRAINING_MISTAKES = (
    ("m_not_carried", "Adam's first moment m is not carried from step to step: each step starts from m = 0 (v is "
     "carried); carry m"),
    ("moments_not_carried", "Adam's moments are not carried from step to step: each step starts from m = v = 0 (an "
     "optimizer made anew every step); carry m and v"),
    ("grads_accumulated", "each step's gradients are added to the previous step's: they are not zeroed between "
     "steps (torch without zero_grad)"),
    ("decay_matrices_only", "the weight decay skips the biases and the norms' gains (nanoGPT's parameter groups); "
     "gpt_train decays every parameter"),
    *((m, line) for m, line in ADAMW_MISTAKES if m != "step_minus_one"),
)  # fmt: skip
_NOT_DECAYED = ("ln1_w", "ln1_b", "ln2_w", "ln2_b", "lnf_w", "lnf_b", "b_q", "b_k", "b_v", "b_o", "b_1", "b_2")


def _train_variant(inputs: Mapping[str, np.ndarray], options: Mapping[str, Any], mistake: str) -> dict[str, np.ndarray]:
    """gpt_train recomputed with a training-loop or AdamW ``mistake``."""
    import attention_ports.reference as reference

    p = {k: np.asarray(inputs[f"params.{k}"], dtype=np.float64) for k in ops.GPT_PARAMS}
    m = {k: np.zeros_like(a) for k, a in p.items()}
    v = {k: np.zeros_like(a) for k, a in p.items()}
    lr, b1, b2, _, wd = _hyper(options)
    from attention_ports.reference.transformer_train import ADAM_EPS

    losses, last = [], None
    for t in range(1, int(options["steps"]) + 1):
        kwargs = {"ignore_index": inputs["ignore_index"]} if "ignore_index" in inputs else {}
        step = reference.gpt_grads(
            inputs["tokens"], inputs["targets"], p, int(options["num_heads"]), eps=options.get("eps") or 1e-5,
            approximate=options.get("approximate") or "none", **kwargs,
        )  # fmt: skip
        grads = {k: np.asarray(g, dtype=np.float64) for k, g in step["grads"].items()}
        if mistake == "grads_accumulated" and last is not None:
            grads = {k: grads[k] + last[k] for k in grads}
        last = grads
        losses.append(float(step["loss"]))
        for k in ops.GPT_PARAMS:
            if mistake in ("moments_not_carried", "m_not_carried"):
                m[k] = np.zeros_like(m[k])
            if mistake == "moments_not_carried":
                v[k] = np.zeros_like(v[k])
            decay = 0.0 if mistake == "decay_matrices_only" and k in _NOT_DECAYED else wd
            p[k], m[k], v[k] = _adam(p[k], grads[k], m[k], v[k], t, (lr, b1, b2, ADAM_EPS, decay), mistake)
    return {"losses": np.array(losses), **{f"params.{k}": a for k, a in p.items()}}


def _check_training_mistakes(ctx: Context) -> str:
    """gpt_train's training-loop and AdamW mistakes, each recomputed over every step."""
    if ctx.case.op != "gpt_train":
        return ""
    for mistake, line in TRAINING_MISTAKES:
        if _fits_variant(
            ctx, f"train={mistake}", lambda m=mistake: _train_variant(ctx.case.inputs, ctx.case.options, m)
        ):
            return line
    return ""


# sqrt(2/pi) cut short, as ports copy it: Megatron-LM's and many CUDA kernels' 0.79788456, ten
# digits, and the rounded short forms. (written as it is found, how many significant digits)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
TRUNCATED_SQRT_2_OVER_PI = (("0.79788456", 8), ("0.7978845608", 10), ("0.7978846", 7), ("0.797885", 6))
_GELU_OPS = ("gelu", "feed_forward", "decoder_block", "gpt_forward")


def _check_truncated_gelu_constant(ctx: Context) -> str:
    """The tanh gelu's sqrt(2/pi) written with too few digits, recomputed with each known short form.

    Its effect is about the constant's own relative error (1e-9 for eight digits), below the
    rounding-sized threshold sqrt(u): this is the one check ``explain`` tries on a rounding-sized
    difference, and it names the constant only when the recomputation fits and separates as any
    other (a correct port's rounding is nowhere near a 1e-9 change of the constant)."""
    if ctx.case.op not in _GELU_OPS or (ctx.case.options.get("approximate") or "none") != "tanh":
        return ""
    for text, digits in TRUNCATED_SQRT_2_OVER_PI:
        act = _tanh_gelu(float(text))
        if ctx.case.op == "gelu":
            run = lambda act=act: {ctx.output: act(np.asarray(ctx.case.inputs["x"], dtype=np.float64))}  # noqa: E731
        else:
            run = lambda act=act: {ctx.output: _variant(ctx.case.op, ctx.case.inputs, ctx.case.options, act=act)}  # noqa: E731
        if _fits_variant(ctx, f"gelu_constant={text}", run):
            return (
                f"your tanh gelu uses sqrt(2/pi) truncated to {text} ({digits} significant digits); the contract's "
                f"constant is sqrt(2/pi) to double precision ({SQRT_2_OVER_PI!r}: write sqrt(2 / pi))"
            )
    return ""


def _sinusoidal_layouts(e: np.ndarray):
    """(what the port did, the expected table rearranged so) for the sinusoidal table's other layouts."""
    sin, cos = e[:, 0::2], e[:, 1::2]
    swapped = np.empty_like(e)
    swapped[:, 0::2], swapped[:, 1::2] = cos, sin
    yield (
        "the table is laid out as two halves, [sin | cos], where it interleaves them (sin, cos per frequency)",
        np.hstack([sin, cos]),
    )
    yield (
        "the table is laid out as two halves, [cos | sin], where it interleaves sin, cos per frequency",
        np.hstack([cos, sin]),
    )
    yield (
        "each frequency's pair is (cos, sin) where the table puts sin first: PE[p, 2i] = sin, PE[p, 2i+1] = cos",
        swapped,
    )


def _check_sinusoidal_layout(ctx: Context) -> str:
    """The sinusoidal table in another layout: a rearrangement of the exact table (and its bounds)."""
    if ctx.case.op != "sinusoidal_positions" or ctx.expected.ndim != 2 or ctx.expected.shape[1] % 2:
        return ""
    bounds = dict(_sinusoidal_layouts(ctx.bound))
    for what, candidate in _sinusoidal_layouts(ctx.expected):
        if _fits_exact(candidate, ctx.actual, bounds[what]) and _explains(ctx, candidate):
            return what
    return ""


def _check_last_position_only(ctx: Context) -> str:
    """gpt_forward's logits of the last position only (generation's logits[-1]): the expected
    array's last row, whatever shape it came back in (1 x vocab, vocab x 1, a vector)."""
    if ctx.case.op != "gpt_forward" or ctx.output != "logits" or ctx.expected.ndim != 2:
        return ""
    n, vocab = ctx.expected.shape
    if n < 2 or ctx.actual.size != vocab:
        return ""
    if not _fits_exact(ctx.expected[-1], ctx.actual.reshape(vocab), ctx.bound[-1]):
        return ""
    per = ctx.port_axis_word(0) if ctx.view is not None else "row"
    return (
        f"{ctx.name()} holds the last position's logits only ({vocab} values): gpt_forward returns one "
        f"{per} of next-token logits for every position, {n} here (the loss of a training step needs them all)"
    )


CHECKS: tuple[Callable[[Context], str], ...] = (
    _check_axes,
    _check_last_position_only,
    _check_sinusoidal_layout,
    _check_transformer_mistakes,
    _check_attention_projections,
    _check_loss_mistakes,
    _check_truncated_gelu_constant,
    _check_layer_mistakes,
    _check_optimizer_mistakes,
    _check_training_mistakes,
    _check_one_pass_variance,
    _check_masked_query,
    _check_pairing,
    _check_scale,
    _check_mask,
    _check_softmax_maximum,
    _check_constant,
    _check_whole_array,
    _check_row_shift,
    # after every check that recomputes a mistake, before the one that only says where it lies
    _check_precision,
    _check_mask_rows,
)
