"""``attention-ports bench --tolerances``: how tight a precision tier's bounds are, side by side (issue 17, item 7).

Three rules judge the same outputs of a precision tier (a tier name is a parameter: float32
today; a mixed tier such as bfloat16/float32 plugs in once ``spec.precision`` knows its format
and its fixtures exist):

- **certified**: the tier's per-element bound (attention_ports/truth/bounds.py at the format's
  constants), ``|actual - exact| <= bound``: sound for every summation order.
- **assert_close**: PyTorch's default ``torch.testing.assert_close`` tolerances for the storage
  dtype (:data:`ASSERT_CLOSE`), ``|actual - expected| <= atol + rtol |expected|``, with the exact
  truth as ``expected`` (a float64 computation, which such tests use, is within 1e-16 of it).
- **FlashAttention 2x**: the rule of FlashAttention's tests, ``max|out - out_ref| <= 2
  max|out_pt - out_ref| + fwd_atol``, where ``out_ref`` is the exact result in the storage dtype,
  ``out_pt`` PyTorch's own computation in that dtype (here: torch on CPU) and ``fwd_atol = 2
  max|out_ref + 0.3 - 0.3 - out_ref|`` evaluated in the storage dtype. One threshold per output.

On what: the tier's fixtures (the catalogue's softmax and SDPA cases) and generated SDPA at
``L`` in :data:`LENGTHS` with d = 64 (standard normal inputs rounded to the format, from a fixed
seed), whose exact truth and certified bound are those of ``ROWS`` sampled query rows
(``truth.compute(rows=...)`` under ``truth.precision.rules``: ~0.25 s a row at L = 4096); every
implementation runs the whole call and is judged on those rows.

What is measured, per non-degenerate output (one with a finite non-zero exact element):

- **worst fraction**: ``max |actual - ref| / threshold`` of each correct implementation (the
  tier's built-ins, ``runtimes.precision.create``, and the control :class:`Sequential`, which
  takes every sum one term at a time); above 1 is a false alarm.
- **smallest relative error caught**, two injections: ``uniform``, every exact element times
  ``(1 + r)``; ``random sign``, each element of a correct implementation's output (the first one
  measured, the reference) times ``(1 + s r)`` with ``s = +-1`` from a fixed seed, so the injected
  error meets the real rounding. A rule *catches* ``r`` when some element passes its threshold;
  for these per-element rules the smallest such ``r`` has a closed form (:func:`smallest_caught`).
  ``share`` is the part of the catalogue's outputs in which ``GOALS[format]`` is caught (issue 17:
  1e-4 at float32 in at least 95%).

Layer: tools. Imports ``truth``, ``fixtures``, ``runtimes``, ``spec``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.core import paths
from attention_ports.spec.precision import Storage, round_to

FORMAT = 1
LENGTHS = (256, 1024, 4096)
D = 64
ROWS = 32  # sampled query rows per generated case: the first, the last, random others
SEED = 17  # the generated inputs and the random-sign injection
IMPLS = ("reference", "torch", "julia")
SEQUENTIAL = "sequential"  # a control, always measured: correct, every sum one term at a time (:class:`Sequential`)
RULES = ("certified", "assert_close", "flash_2x")
RULE_NAMES = {
    "certified": "certified bound (this suite)",
    "assert_close": "torch assert_close defaults",
    "flash_2x": "FlashAttention 2x rule",
}
# torch.testing.assert_close's default (rtol, atol) per storage dtype (torch/testing/_comparison.py).
ASSERT_CLOSE = {"float64": (1e-7, 1e-7), "float32": (1.3e-6, 1e-5), "bfloat16": (1.6e-2, 1e-3), "float16": (1e-3, 1e-3)}
FLASH_FACTOR = 2.0
# The relative error a tier's bounds should catch in GOAL_SHARE of the catalogue's outputs (issue 17).
GOALS = {"float64": 1e-9, "float32": 1e-4, "bfloat16": 3e-2}
GOAL_SHARE = 0.95


@dataclass
class Output:
    """One non-degenerate output, on the elements whose exact value is finite (flattened)."""

    group: str  # "softmax", "sdpa" (the tier's fixtures) or "sdpa L=4096" (generated)
    case: str
    name: str
    exact: np.ndarray
    bound: np.ndarray
    actual: dict[str, np.ndarray | None] = field(default_factory=dict)  # None: the call failed
    # Generated SDPA only: |A||V| on the judged elements and the number of keys, the size of the
    # product's every-order rounding term gamma(n) |A||V| (truth/bounds.py, weighted_values).
    abs_product: np.ndarray | None = None
    keys: int = 0

    @property
    def catalogue(self) -> bool:
        return " L=" not in self.group


# ------------------------------------------------------------------------------------------- rules
def storage_round(x: np.ndarray, storage: Storage) -> np.ndarray:
    """``x`` rounded to the storage format (bfloat16 too, which NumPy has no dtype for)."""
    return round_to(np.asarray(x, dtype=np.float64), storage)


def flash_atol(ref: np.ndarray, storage: Storage) -> float:
    """FlashAttention's ``fwd_atol = 2 max|out_ref + 0.3 - 0.3 - out_ref|``, every operation rounded
    to the storage format (the sum of two storage values is exact in float64, then rounded once:
    the storage format's own correctly rounded addition)."""
    r = storage_round(ref, storage)
    c = float(storage_round(np.array(0.3), storage))
    back = storage_round(storage_round(r + c, storage) - c, storage)
    return 2 * float(np.max(np.abs(back - r), initial=0.0))


def threshold(rule: str, out: Output, storage: Storage) -> tuple[np.ndarray, np.ndarray] | None:
    """(the values the rule judges against, each element's threshold); None where the rule cannot
    be evaluated (the FlashAttention rule without a torch output)."""
    if rule == "certified":
        return out.exact, out.bound
    if rule == "assert_close":
        rtol, atol = ASSERT_CLOSE[storage.name]
        return out.exact, atol + rtol * np.abs(out.exact)
    if rule == "flash_2x":
        pt = out.actual.get("torch")
        if pt is None:
            return None
        ref = storage_round(out.exact, storage)
        err_pt = float(np.max(np.abs(pt - ref))) if np.all(np.isfinite(pt)) else math.inf
        return ref, np.full(ref.shape, FLASH_FACTOR * err_pt + flash_atol(out.exact, storage))
    raise ValueError(f"unknown rule {rule!r}; known: {', '.join(RULES)}")


def used(actual: np.ndarray | None, ref: np.ndarray, t: np.ndarray) -> float:
    """``max |actual - ref| / t``: the part of its tolerance an output uses (> 1: rejected)."""
    if actual is None or not np.all(np.isfinite(actual)):
        return math.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.where(t > 0, np.abs(actual - ref) / t, np.where(actual == ref, 0.0, np.inf))
    return float(np.max(frac, initial=0.0))


def smallest_caught(base: np.ndarray, signs: np.ndarray, ref: np.ndarray, t: np.ndarray) -> float:
    """The smallest r >= 0 past which ``base (1 + signs r)`` has an element beyond its threshold.

    Element i is caught when ``|d_i + c_i r| > t_i`` (d = base - ref, c = signs base); from a
    start within the threshold that happens for ``r > (t_i - sign(c_i) d_i) / |c_i|``. 0 when
    ``base`` is rejected already; inf when nothing can move (every element zero)."""
    d, c = base - ref, signs * base
    if np.any(np.abs(d) > t):
        return 0.0
    live = c != 0
    if not live.any():
        return math.inf
    with np.errstate(over="ignore"):  # a subnormal base element: it can only be caught at a huge r
        return float(np.min((t[live] - np.sign(c[live]) * d[live]) / np.abs(c[live])))


# ---------------------------------------------------------------------------------------- measures
@dataclass
class Measured:
    """What one rule says of one output."""

    used: dict[str, float]  # implementation -> worst fraction of its tolerance
    uniform: float  # smallest r caught, every exact element times (1 + r)
    random_sign: float | None  # the same on the reference's output times (1 + s r); None without one


def measure_output(out: Output, rule: str, storage: Storage) -> Measured | None:
    judged = threshold(rule, out, storage)
    if judged is None:
        return None
    ref, t = judged
    usage = {name: used(a, ref, t) for name, a in out.actual.items()}
    uniform = smallest_caught(out.exact, np.ones_like(out.exact), ref, t)
    base = next((a for a in out.actual.values() if a is not None and np.all(np.isfinite(a))), None)
    signed = None
    if base is not None:
        signs = np.random.default_rng(SEED).choice((-1.0, 1.0), size=base.shape)
        signed = smallest_caught(base, signs, ref, t)
    return Measured(usage, uniform, signed)


# ------------------------------------------------------------------------------------------ control
class Sequential:
    """Softmax and SDPA in the storage dtype with every sum taken one term at a time, left to right
    (the scores over d, the normaliser and the product with V over the keys): a correct
    implementation that rounds as a naive loop does, where BLAS and torch sum in blocks. The
    certified bound accepts it by construction; the rules fitted to one library's rounding may not.
    Same semantics as the reference (boolean or additive mask, a query with no key gets zeros).
    ``dtype`` is storage = accumulation; a mixed tier's control will sum in its accumulation format."""

    def __init__(self, dtype: Any) -> None:
        self.dtype = dtype

    def _sum(self, terms: np.ndarray) -> np.ndarray:
        """Sum over the last axis, one term after another."""
        total = np.zeros(terms.shape[:-1], dtype=self.dtype)
        for j in range(terms.shape[-1]):
            total += terms[..., j]
        return total

    def _softmax(self, x: np.ndarray) -> np.ndarray:
        peak = np.max(x, axis=-1, keepdims=True)
        with np.errstate(invalid="ignore"):
            e = np.exp(x - peak)
            return e / self._sum(e)[..., None]

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, np.ndarray]:
        from attention_ports.runtimes.impl import OperationMissing

        t = self.dtype
        if op == "softmax":
            return {"y": self._softmax(np.asarray(inputs["x"]).astype(t)).astype(np.float64)}
        if op != "scaled_dot_product_attention":
            raise OperationMissing(f"{op}: the sequential control has softmax and SDPA only")
        q, k, v = (np.asarray(inputs[n]).astype(t) for n in "qkv")
        scale = options.get("scale")
        scale = t(1 / math.sqrt(q.shape[1]) if scale is None else scale)
        scores = np.zeros((q.shape[0], k.shape[0]), dtype=t)
        for f in range(q.shape[1]):
            scores += q[:, f, None] * k[None, :, f]
        scores = scores * scale
        mask = inputs.get("mask")
        if mask is not None:
            mask = np.asarray(mask)
            scores = scores + (np.where(mask, t(0), t(-np.inf)) if mask.dtype == np.bool_ else mask.astype(t))
        dead = np.all(np.isneginf(scores), axis=-1)
        weights = self._softmax(scores)
        weights[dead] = 0
        out = np.zeros((q.shape[0], v.shape[1]), dtype=t)
        for j in range(k.shape[0]):
            out += weights[:, j, None] * v[None, j, :]
        return {"output": out.astype(np.float64), "weights": weights.astype(np.float64)}

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------------ inputs
def _non_degenerate(exact: np.ndarray) -> bool:
    fin = np.isfinite(exact)
    return bool(np.any(exact[fin] != 0))


def tier_outputs(fixtures_dir: Path) -> list[tuple[str, str, dict[str, np.ndarray], dict[str, Any], dict[str, Any]]]:
    """(group, case id, inputs, options, {output: Expected}) of a tier's softmax and SDPA cases.

    The table is about the attention kernel's sums (the n u growth of the every-order bound), so the
    tier's other operations (projections, the classifier) are left to `verify --precision`.
    """
    from attention_ports.fixtures import store
    from attention_ports.spec.catalogue import load_catalogue

    # The catalogue's cases: issue 17's goal is about them (a tier's own edge cases are judged by
    # verify --precision, not counted here).
    catalogue = {s.id for s in load_catalogue(paths.FIXTURES / store.CATALOGUE).cases}
    found = []
    for entry in store.iter_entries(fixtures_dir):
        if entry["id"] not in catalogue:
            continue
        case = store.load_case(fixtures_dir, entry)
        if case.op not in ("softmax", "scaled_dot_product_attention"):
            continue
        group = "softmax" if case.op == "softmax" else "sdpa"
        found.append((group, case.id, case.inputs, case.options, case.expected))
    return found


def abs_product(inputs: Mapping[str, np.ndarray], rows: Sequence[int]) -> np.ndarray:
    """|A||V| on ``rows`` of an unmasked SDPA with the default scale, in float64 (a size, not a bound)."""
    q, k, v = (np.asarray(inputs[n], dtype=np.float64) for n in "qkv")
    s = q[list(rows)] @ k.T / math.sqrt(q.shape[1])
    a = np.exp(s - s.max(axis=1, keepdims=True))
    return (a / a.sum(axis=1, keepdims=True)) @ np.abs(v)


def generated_case(length: int, fmt: Any, rows: int = ROWS) -> tuple[dict[str, np.ndarray], list[int], dict]:
    """SDPA inputs at ``length`` x D (standard normal rounded to the format), the sampled rows, and
    the exact output and certified bound on those rows (``truth.compute`` at the format's rules)."""
    from attention_ports.truth import engine as truth
    from attention_ports.truth.precision import rules

    rng = np.random.default_rng(SEED + length)
    inputs = {n: storage_round(rng.standard_normal((length, D)), fmt.storage_format) for n in "qkv"}
    others = rng.permutation(np.arange(1, length - 1))[: max(0, rows - 2)]
    picked = sorted({0, length - 1, *(int(i) for i in others)})
    with rules(fmt):
        tr = truth.compute(
            "scaled_dot_product_attention",
            inputs,
            {},
            rows=picked,
            outputs=["output"],
            label=f"generated SDPA L={length}",
        )
    return inputs, picked, dict(tr)


def run(
    precision: str = "float32",
    impls: Sequence[str] = IMPLS,
    lengths: Sequence[int] = LENGTHS,
    fixtures_dir: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every measure of ``precision``'s tier: the document ``table`` prints and ``--json`` writes."""
    from attention_ports.runtimes import precision as in_precision
    from attention_ports.runtimes.impl import ImplementationError, ImplementationUnavailable, OperationMissing
    from attention_ports.spec import precision as formats

    fmt = formats.get(precision, "--precision")
    if fmt.name == formats.DEFAULT:
        raise formats.PrecisionError("--tolerances measures a precision tier: name one below float64 (--precision)")
    fixtures_dir = fixtures_dir or formats.fixtures_dir(fmt.name)
    say = progress or (lambda _msg: None)

    say(f"tolerances: the {fmt.name} tier's fixtures ({fixtures_dir})")
    outputs: list[Output] = []
    # (output, operation, inputs, options, output name, the judged elements of the whole result)
    calls: list[tuple[Output, str, dict[str, np.ndarray], dict[str, Any], str, Callable[[np.ndarray], np.ndarray]]] = []
    for group, case_id, inputs, options, expected in tier_outputs(fixtures_dir):
        op = "softmax" if group == "softmax" else "scaled_dot_product_attention"
        for name, exp in expected.items():
            if not _non_degenerate(exp.array):
                continue
            fin = np.isfinite(exp.array)
            out = Output(group, case_id, name, exp.array[fin], exp.bound[fin])
            outputs.append(out)
            calls.append((out, op, inputs, options, name, lambda a, fin=fin: a[fin]))
    for length in lengths:
        say(f"tolerances: generated SDPA L={length}, d={D}: exact truth on {ROWS} sampled rows")
        inputs, picked, tr = generated_case(length, fmt)
        exact, bound = tr["output"]
        out = Output(f"sdpa L={length}", f"generated_sdpa_L{length}_d{D}", "output", exact.ravel(), bound.ravel())
        out.abs_product, out.keys = abs_product(inputs, picked).ravel(), length
        outputs.append(out)
        calls.append((out, "scaled_dot_product_attention", inputs, {}, "output", lambda a, p=picked: a[p].ravel()))

    unavailable: dict[str, str] = {}
    measured_impls: list[str] = []
    for name in [*impls, SEQUENTIAL]:
        try:
            impl = Sequential(fmt.dtype) if name == SEQUENTIAL else in_precision.create(name, None, fmt.name)
        except ImplementationUnavailable as exc:
            unavailable[name] = str(exc)
            continue
        if impl is None:
            unavailable[name] = f"no {fmt.name} implementation (R has only double)"
            continue
        say(f"tolerances: {name} in {fmt.name}")
        try:
            last: tuple[int, Mapping[str, np.ndarray] | None] = (-1, None)
            for out, op, inputs, options, output_name, pick in calls:
                if last[0] != id(inputs):  # a case's outputs come one after another: one call each
                    try:
                        last = (id(inputs), impl.run(op, inputs, options))
                    except (ImplementationError, OperationMissing):
                        last = (id(inputs), None)
                res = last[1]
                try:
                    out.actual[name] = pick(np.asarray(res[output_name], np.float64))
                except (TypeError, KeyError, IndexError):  # no result, no such output, a wrong shape
                    out.actual[name] = None
            measured_impls.append(name)
        except ImplementationUnavailable as exc:
            unavailable[name] = str(exc)
            for out in outputs:
                out.actual.pop(name, None)
        finally:
            impl.close()
    return summarise(outputs, fmt, measured_impls, unavailable)


# --------------------------------------------------------------------------------------- summaries
def _median(xs: Sequence[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.median(xs)) if xs else None


def summarise(outputs: Sequence[Output], fmt: Any, impls: Sequence[str], unavailable: Mapping[str, str]) -> dict:
    goal = GOALS.get(fmt.storage_format.name)
    groups = list(dict.fromkeys(o.group for o in outputs))
    doc: dict[str, Any] = {
        "format": FORMAT,
        "precision": fmt.name,
        "u": fmt.u,
        "implementations": list(impls),
        "unavailable": dict(unavailable),
        "goal": {"relative_error": goal, "share": GOAL_SHARE},
        "rows_sampled": ROWS,
        "groups": groups,
        "outputs": [],
        "rules": {},
    }
    per_rule: dict[str, list[tuple[Output, Measured]]] = {r: [] for r in RULES}
    for out in outputs:
        row: dict[str, Any] = {"group": out.group, "case": out.case, "output": out.name}
        row["elements"] = int(out.exact.size)
        for rule in RULES:
            m = measure_output(out, rule, fmt.storage_format)
            if m is None:
                continue
            per_rule[rule].append((out, m))
            row[rule] = {"used": m.used, "uniform": m.uniform, "random_sign": m.random_sign}
        doc["outputs"].append(row)
    for rule, pairs in per_rule.items():
        if not pairs:
            doc["rules"][rule] = None
            continue
        cat = [(o, m) for o, m in pairs if o.catalogue]
        summary: dict[str, Any] = {
            "false_alarms": sum(1 for _, m in pairs for v in m.used.values() if v > 1),
            "judged": sum(len(m.used) for _, m in pairs),
            "worst_used": {i: max((m.used.get(i, 0.0) for _, m in pairs), default=None) for i in impls},
            "catalogue_outputs": len(cat),
        }
        if goal is not None:
            summary["caught_uniform"] = sum(1 for _, m in cat if m.uniform < goal)
            summary["caught_random_sign"] = sum(1 for _, m in cat if m.random_sign is not None and m.random_sign < goal)
        summary["median_uniform"] = _median([m.uniform for _, m in cat])
        summary["by_group"] = {}
        for g in groups:
            mine = [(o, m) for o, m in pairs if o.group == g]
            summary["by_group"][g] = {
                "worst_used": {i: max((m.used.get(i, 0.0) for _, m in mine), default=None) for i in impls},
                "median_uniform": _median([m.uniform for _, m in mine]),
                "median_random_sign": _median([m.random_sign for _, m in mine]),
            }
            if rule == "certified":
                summary["by_group"][g].update(order_free(mine, fmt.u))
        doc["rules"][rule] = summary
    return doc


def order_free(pairs: Sequence[tuple[Output, Measured]], u: float) -> dict[str, float]:
    """Where |A||V| is known (generated SDPA): the every-order rounding term gamma(n) |A||V| as a
    share of the certified bound (median over the elements), and the worst real error of a correct
    implementation in units of u |A||V| (an every-order analysis allows ~n of them, real rounding
    ~sqrt(n))."""
    shares, real = [], []
    for out, _ in pairs:
        if out.abs_product is None:
            continue
        g = out.keys * u / (1 - out.keys * u)
        shares.append(float(np.median(g * out.abs_product / out.bound)))
        for a in out.actual.values():
            if a is not None:
                real.append(float(np.max(np.abs(a - out.exact) / (u * out.abs_product))))
    if not shares:
        return {}
    return {"order_free_share": float(np.median(shares)), "worst_error_in_u_abs_product": max(real, default=math.nan)}


def _g(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if math.isinf(x):
        return "inf"
    return f"{x:.{digits}g}" if x and (abs(x) < 1e-2 or abs(x) >= 1e3) else f"{x:.{digits + 1}g}"


def table(doc: dict) -> str:
    """The report: the side-by-side table, then the certified bound's use per group and implementation."""
    fmt, goal = doc["precision"], doc["goal"]["relative_error"]
    impls = doc["implementations"]
    lines = [
        f"tolerances at {fmt} (u = 2^{round(math.log2(doc['u']))}): the tier's fixtures and generated SDPA "
        f"(d = {D}, {doc['rows_sampled']} sampled rows); implementations: {', '.join(impls) or 'none'}",
    ]
    for name, why in doc["unavailable"].items():
        lines.append(f"not measured: {name}: {why}")
    shown = f"{goal:g}" if goal is not None else "-"
    lines += [
        "",
        f"| rule | false alarms (correct outputs) | worst share of the tolerance used | "
        f"{shown} caught, uniform | {shown} caught, random sign | median smallest r caught (catalogue) |"
        + "".join(f" smallest r caught, {g} |" for g in doc["groups"] if " L=" in g),
        "|---|---:|---:|---:|---:|---:|" + "---:|" * sum(1 for g in doc["groups"] if " L=" in g),
    ]
    for rule in RULES:
        s = doc["rules"].get(rule)
        if s is None:
            lines.append(f"| {RULE_NAMES[rule]} | not measured (needs torch) | | | | |")
            continue
        n = s["catalogue_outputs"]
        worst = max((v for v in s["worst_used"].values() if v is not None), default=None)
        caught = [
            f"{s[k]} of {n} ({100 * s[k] / n:.1f}%)" if goal is not None and n else "-"
            for k in ("caught_uniform", "caught_random_sign")
        ]
        row = (
            f"| {RULE_NAMES[rule]} | {s['false_alarms']} of {s['judged']} | {_g(worst)} | {caught[0]} | {caught[1]} | "
            f"{_g(s['median_uniform'])} |"
        )
        row += "".join(f" {_g(s['by_group'][g]['median_uniform'])} |" for g in doc["groups"] if " L=" in g)
        lines.append(row)
    cert = doc["rules"].get("certified")
    if cert and impls:
        lines += [
            "",
            "worst fraction of the certified bound used, per implementation",
            "",
            "| group |" + "".join(f" {i} |" for i in impls) + " smallest r caught (median) |"
            " gamma(n) abs(A) abs(V), share of the bound | worst error, in u abs(A) abs(V) |",
            "|---|" + "---:|" * (len(impls) + 3),
        ]
        for g in doc["groups"]:
            b = cert["by_group"][g]
            lines.append(
                f"| {g} |"
                + "".join(f" {_g(b['worst_used'][i])} |" for i in impls)
                + f" {_g(b['median_uniform'])} | {_g(b.get('order_free_share'))} |"
                f" {_g(b.get('worst_error_in_u_abs_product'))} |"
            )
    return "\n".join(lines)
