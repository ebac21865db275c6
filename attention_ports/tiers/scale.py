"""The scale tier: ``attention-ports verify --tier scale``, attention at L = 1024, 4096 and 16384.

The cases are fixtures/scale.toml (the catalogue's format and seeded input makers): SDPA,
self-attention and multi-head attention (h = 8), d = 64, with and without a causal mask; and the
transformer's decoder block (d = 512, 8 heads, L = 512 to 2048). Nothing is stored as a fixture:
the inputs are made at run time, and the truth is established two ways (the decoder block: the
first only, on ``MAX_ROWS`` token rows, in float64 only; docs/truth-and-bounds.md, "The transformer at
scale").

1. **Sampled rows, exactly.** ``ROWS`` query rows per case (the first, the last, and random ones
   from the case's own seed) get their exact values and bounds from ``truth.compute(rows=...)``
   (arb ball arithmetic, as for the fixtures), and every implementation is compared on them with
   the fixtures' rule: ``output`` (self-attention's ``q``, ``k``, ``v`` too) on all ``ROWS`` rows,
   the weights (L values per row and head) exactly on ``WEIGHT_ROWS`` of them (the first, the
   last, evenly spaced others) and on all ``ROWS`` within 2B of this harness's own float64
   weights (B from attention_ports/truth/scale_bounds.py: two correct results differ by at most 2B).
   Each exact row costs O(L d) in Python (rounding and bounding each of its L weights is most of
   it): minutes per case at L = 16384, so the truth is cached on disk (``.local/scale-truth``,
   keyed by the inputs' content and the truth code's own bytes; ``--no-cache`` recomputes), and
   so are the every-row bounds of 2. (keyed by the same and the bound code's bytes).
2. **Every row, between implementations.** For the outputs of size O(L d) (``output``; ``q``, ``k``,
   ``v`` of self-attention) each element gets the bound B of the error analysis, evaluated in
   float64 and certified upward (attention_ports/truth/scale_bounds.py; on the sampled rows it equals
   the arb bound). Two correct implementations differ by at most 2B, so every pair is compared
   within 2B; an implementation *fails* this check when it disagrees with more than half of the
   others (with only two, a disagreement fails both).

The weights (an L x L matrix per head: 2 GiB per copy at L = 16384, 16 GiB for 8 heads) are
compared on the sampled rows only; the other rows are kept only until their sampled rows are
taken out. A call whose weights exceed ``MAX_WEIGHTS_ELEMENTS`` (1 GiB) is split into blocks of
query rows with all keys (SDPA, multi-head attention: rows are independent, so each block is
exactly what one call would compute for those rows; self-attention cannot be split and is called
whole). Implementations run one after another, each over every case, and are closed before the
next starts, so only one runtime's memory is held at a time. Before a call the free memory is
checked against ``MEMORY_FACTOR`` times its weights' size; a call that would not fit is skipped
and reported (the run then does not agree).

**At a precision tier** (``verify --tier scale --precision float32``, issue 17): the inputs and
real options rounded to the format (as the fixture tier's, attention_ports/fixtures/precision.py),
the sampled rows' truth certified under ``truth.precision.rules(fmt)``, the every-row bounds at the
format's constants (``scale_bounds.compute(fmt=...)``), the built-ins run in it
(attention_ports/runtimes/precision.py) and errors counted in its ulps. Cached apart from float64's.

Reported per implementation and case: the verdicts, the worst error over bound on the sampled
rows and between implementations, the call's wall time and the port's own time (R, Julia), the
peak resident memory of the process that ran it and of its worker; and the harness's own time
for the truth and the bounds.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.core import paths
from attention_ports.spec import precision
from attention_ports.spec.catalogue import CaseSpec, build_inputs, load_catalogue
from attention_ports.spec.precision import Format
from attention_ports.truth import scale_bounds

CATALOGUE = paths.FIXTURES / "scale.toml"
ROWS = 64
WEIGHT_ROWS = 8  # of the ROWS, those whose weights get exact values too (the first, the last, 6 others)
MAX_WEIGHTS_ELEMENTS = 1 << 27  # 1 GiB of float64 weights per call
MAX_INPUT_ELEMENTS = 1 << 28  # one generated input: the L = 16384 causal mask (256 MiB of bool)
MEMORY_FACTOR = 6  # free memory a call needs, in multiples of its weights' size
# The outputs compared on every row between implementations (scale_bounds bounds them): none for
# the decoder block, whose every-row bounds scale_bounds does not evaluate (module docstring).
FULL_OUTPUTS = {
    "scaled_dot_product_attention": ("output",),
    "self_attention": ("q", "k", "v", "output"),
    "multi_head_attention": ("output",),
    "decoder_block": (),
}
# The exact outputs per query row (the weights are separate: WEIGHT_ROWS).
ROW_OUTPUTS = {
    "scaled_dot_product_attention": ("output",),
    "self_attention": ("q", "output"),
    "multi_head_attention": ("output",),
    "decoder_block": ("y",),
}
ATTENTION_OPS = ("scaled_dot_product_attention", "self_attention", "multi_head_attention")  # weights, every-row bounds
# A decoder block's exact row costs ~8 s at d = 512 (its feed-forward's Jacobian, one row at a time:
# truth/transformer.py, block_rows_t), against milliseconds for an attention row: fewer rows.
MAX_ROWS = {"decoder_block": 16}
# Operations judged in float64 only at this tier, and why (run_tier leaves them out at a lower one).
FLOAT64_ONLY = {
    "decoder_block": "at d = 512 its worst-case logit error bound at float32's u (0.038, measured) is past "
    "the analysis's first-order guard (2^-8): the truth refuses it (docs/truth-and-bounds.md)",
}
# The truth modules an operation's exact graph reads beyond the engine's own (its cache key).
TRUTH_MODULES = {"decoder_block": ("transformer", "norms", "activations")}


# --- cases, rows, truth --------------------------------------------------------------------------
def load_cases(globs: Iterable[str] = (), catalogue: Path = CATALOGUE) -> list[CaseSpec]:
    from attention_ports.fixtures.store import FixtureError

    cases = list(load_catalogue(catalogue, MAX_INPUT_ELEMENTS).cases)
    globs = list(globs)
    if globs:
        cases = [c for c in cases if any(fnmatch.fnmatchcase(c.id, g) for g in globs)]
        if not cases:
            raise FixtureError(f"no case in {catalogue} matches {' or '.join(globs)}")
    return cases


def length(case: CaseSpec) -> int:
    first = next(iter(case.inputs.values()))
    return int(first["normal"][0])


def sample_rows(case: CaseSpec, n: int = ROWS) -> list[int]:
    """The first and last query rows and random others, from the case's own seed: ``n`` in all
    (at most ``MAX_ROWS`` of the operation)."""
    size = length(case)
    n = min(n, MAX_ROWS.get(case.op, n))
    rng = np.random.default_rng(case.seed ^ 0x5CA1E)
    others = [int(i) for i in rng.permutation(np.arange(1, size - 1))[: max(0, n - 2)]]
    return sorted({0, size - 1, *others})


def weight_rows(rows: list[int]) -> list[int]:
    """The rows whose weights get exact values: the first and last sampled rows and evenly spaced others."""
    picks = np.linspace(0, len(rows) - 1, min(WEIGHT_ROWS, len(rows))).round().astype(int)
    return sorted({rows[i] for i in picks})


CACHE_ENV = "ATTENTION_PORTS_SCALE_CACHE"


def cache_dir() -> Path:
    """``$ATTENTION_PORTS_SCALE_CACHE``, else .local/scale-truth in a checkout (the per-user data
    folder for an installed package)."""
    return Path(os.environ.get(CACHE_ENV) or paths.julia_prefix().parent / "scale-truth")


def _truth_code(op: str) -> str:
    import importlib

    import flint

    from attention_ports.truth import arbmat, bounds, exact, rounding
    from attention_ports.truth import engine as truth

    h = hashlib.sha256(flint.__version__.encode())
    extra = [importlib.import_module(f"attention_ports.truth.{m}") for m in TRUTH_MODULES.get(op, ())]
    for mod in (truth, exact, bounds, rounding, arbmat, *extra):
        h.update(Path(mod.__file__).read_bytes())
    return h.hexdigest()


def _truth_key(case: CaseSpec, inputs: Mapping[str, np.ndarray], rows: list[int], fmt: str = precision.DEFAULT) -> str:
    from attention_ports.truth import engine as truth

    head = f"{WEIGHT_ROWS}:" + truth.cache_key(case.op, inputs, case.options, "zeros", rows) + _truth_code(case.op)
    if fmt != precision.DEFAULT:  # a tier's bounds differ at the same inputs; float64's keys unchanged
        head += f":{fmt}"
    return hashlib.sha256(head.encode()).hexdigest()[:32]


def in_format(case: CaseSpec, fmt: str = precision.DEFAULT) -> tuple[CaseSpec, dict[str, np.ndarray]]:
    """The case (its real options) and its inputs as judged in ``fmt``: rounded to it at a lower tier."""
    inputs = build_inputs(case)
    if fmt == precision.DEFAULT:
        return case, inputs
    from attention_ports.fixtures.precision import round_inputs, round_options

    f = precision.FORMATS[fmt]
    return replace(case, options=round_options(case.op, case.options, f)), round_inputs(inputs, f)


def exact_truth(case: CaseSpec, inputs: Mapping[str, np.ndarray], rows: list[int]) -> Truth:
    """The exact values and bounds on the sampled rows (arb, ``truth.compute``): the per-row outputs
    on ``rows``, the weights on ``weight_rows(rows)``, self-attention's k and v on ``rows`` (as the
    projections of those tokens alone: a projection is row by row)."""
    from attention_ports.truth import engine as truth

    where = f"scale case {case.id!r}"
    found = dict(truth.compute(case.op, inputs, case.options, rows=rows, outputs=ROW_OUTPUTS[case.op], label=where))
    if case.op not in ATTENTION_OPS:  # the decoder block: its output on the rows is all
        return found
    found["weights"] = truth.compute(
        case.op, inputs, case.options, rows=weight_rows(rows), outputs=["weights"], label=where
    )["weights"]
    if case.op == "self_attention":
        tokens = {n: a for n, a in inputs.items() if n != "mask"}
        tokens["x"] = np.asarray(inputs["x"])[rows]
        found.update(truth.compute(case.op, tokens, case.options, outputs=["k", "v"], label=where))
    return found


Truth = dict[str, tuple[np.ndarray, np.ndarray]]


def _read_cached(folder: Path) -> Truth | None:
    try:
        names = json.loads((folder / "outputs.json").read_text())
        return {
            n: (np.load(folder / f"{n}.expected.npy", allow_pickle=False), np.load(folder / f"{n}.bound.npy"))
            for n in names
        }
    except (OSError, ValueError):
        return None


def _write_cached(folder: Path, truth: Truth) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".tmp-", dir=folder.parent))
    try:
        for n, (expected, bound) in truth.items():
            np.save(work / f"{n}.expected.npy", expected, allow_pickle=False)
            np.save(work / f"{n}.bound.npy", bound, allow_pickle=False)
        (work / "outputs.json").write_text(json.dumps(sorted(truth)))
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(work, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# A worker's per-call limit at this tier: one call at L = 16384 takes R ~30 to 60 s (self-attention
# cannot be split into query blocks), past the 30 s default that suits the catalogue.
SCALE_CALL_TIMEOUT = 600.0
_TIMEOUT_VARS = ("ATTENTION_PORTS_R_TIMEOUT", "ATTENTION_PORTS_JULIA_TIMEOUT")


@contextlib.contextmanager
def _scale_timeouts() -> Iterator[None]:
    """While a worker is made (its limits are read then): SCALE_CALL_TIMEOUT unless the user set one."""
    unset = [v for v in _TIMEOUT_VARS if v not in os.environ]
    for v in unset:
        os.environ[v] = str(SCALE_CALL_TIMEOUT)
    try:
        yield
    finally:
        for v in unset:
            os.environ.pop(v, None)


def every_row_bounds(
    case: CaseSpec, inputs: Mapping[str, np.ndarray], rows: list[int], use_cache: bool, fmt: str = precision.DEFAULT
) -> tuple[scale_bounds.Bounds, bool]:
    """scale_bounds.compute for one case, cached beside the truth (keyed by the truth's key and the
    bound code's own bytes: ~50 s of matrix products per case at L = 16384). (bounds, cached).
    Empty for an operation scale_bounds does not cover (the decoder block: judged on its sampled rows only)."""
    if case.op not in ATTENTION_OPS:
        return scale_bounds.Bounds({}), True
    h = hashlib.sha256(_truth_key(case, inputs, rows, fmt).encode())
    h.update(Path(scale_bounds.__file__).read_bytes())
    folder = cache_dir() / f"bounds-{h.hexdigest()[:32]}"
    if use_cache:
        found = _read_cached(folder)
        if found is not None:
            weights = found.pop("weights", None)
            return scale_bounds.Bounds({n: b for n, (_, b) in found.items()}, weights), True
    computed = scale_bounds.compute(case.op, inputs, case.options, rows=rows, fmt=precision.FORMATS[fmt])
    store = {n: (np.zeros(0), b) for n, b in computed.full.items()}
    if computed.weights is not None:
        store["weights"] = computed.weights
    _write_cached(folder, store)
    return computed, False


def _truth_job(
    case_id: str, catalogue: str, use_cache: bool, n_rows: int, fmt: str = precision.DEFAULT
) -> tuple[str, float, bool]:
    """Compute (or find) one case's sampled-row truth; in a pool process. (id, seconds, cached)."""
    from attention_ports.truth.precision import rules

    case = next(c for c in load_catalogue(Path(catalogue), MAX_INPUT_ELEMENTS).cases if c.id == case_id)
    rows = sample_rows(case, n_rows)
    case, inputs = in_format(case, fmt)
    folder = cache_dir() / _truth_key(case, inputs, rows, fmt)
    if use_cache and _read_cached(folder) is not None:
        return case_id, 0.0, True
    start = time.perf_counter()
    with rules(precision.FORMATS[fmt]) if fmt != precision.DEFAULT else contextlib.nullcontext():
        result = exact_truth(case, inputs, rows)
    _write_cached(folder, result)
    return case_id, time.perf_counter() - start, False


def prepare_truth(
    cases: list[CaseSpec],
    catalogue: Path,
    use_cache: bool,
    workers: int,
    say: Callable[[str], None],
    n_rows: int,
    fmt: str = precision.DEFAULT,
) -> dict[str, float]:
    """Every case's sampled-row truth into the cache; {case: seconds spent computing it}."""
    seconds: dict[str, float] = {}
    counts = {c.id: len(sample_rows(c, n_rows)) for c in cases}
    # the longest first (cost ~ L x heads), so that two workers finish together
    todo = [c.id for c in sorted(cases, key=lambda c: -length(c) * int(c.options.get("num_heads") or 1))]
    with ProcessPoolExecutor(max_workers=max(1, min(workers, len(todo))), mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(_truth_job, cid, str(catalogue), use_cache, n_rows, fmt) for cid in todo]
        for fut in as_completed(futures):
            cid, secs, cached = fut.result()
            seconds[cid] = secs
            say(f"truth {cid}: " + ("cached" if cached else f"{secs:.1f} s (exact, {counts[cid]} rows)"))
    return seconds


def load_truth(
    case: CaseSpec, inputs: Mapping[str, np.ndarray], rows: list[int], fmt: str = precision.DEFAULT
) -> Truth:
    folder = cache_dir() / _truth_key(case, inputs, rows, fmt)
    found = _read_cached(folder)
    if found is None:
        raise RuntimeError(f"scale case {case.id!r}: its truth is missing from {folder}")
    return found


# --- running one implementation on one case ------------------------------------------------------
@dataclass
class Run:
    impl: str
    case: str
    status: str = "ok"  # ok, error, missing, skipped (memory), unavailable
    message: str = ""
    seconds: float = 0.0  # wall time of the calls
    port_seconds: float | None = None  # the port's own time (R, Julia)
    calls: int = 0
    full: dict[str, np.ndarray] = field(default_factory=dict)  # O(L d) outputs, every row
    rows: dict[str, np.ndarray] = field(default_factory=dict)  # every output on the sampled rows
    peak_rss: int | None = None  # the process that ran the call (this one, for in-process ones)
    worker_peak_rss: int | None = None


def _reset_peak(pid: int | str = "self") -> None:
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # Linux: VmHWM := the current RSS


def mem_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _blocks(case: CaseSpec) -> list[slice]:
    n = length(case)
    heads = int(case.options.get("num_heads") or 1)
    # self-attention and the decoder block cannot be split into query rows (their keys are the queries' tokens)
    if case.op not in QUERY_INPUTS or heads * n * n <= MAX_WEIGHTS_ELEMENTS:
        return [slice(0, n)]
    step = max(1, MAX_WEIGHTS_ELEMENTS // (heads * n))
    return [slice(s, min(n, s + step)) for s in range(0, n, step)]


QUERY_INPUTS = {"scaled_dot_product_attention": "q", "multi_head_attention": "query"}


def run_case(name: str, impl: Any, case: CaseSpec, inputs: Mapping[str, np.ndarray], rows: list[int]) -> Run:
    from attention_ports.runtimes.impl import ImplementationError, OperationMissing
    from attention_ports.tools.bench import peak_rss, worker_pid

    run = Run(name, case.id)
    n = length(case)
    heads = int(case.options.get("num_heads") or 1)
    blocks = _blocks(case)
    need = MEMORY_FACTOR * 8 * heads * n * (blocks[0].stop - blocks[0].start)
    free = mem_available()
    if free is not None and free < need:
        run.status = "skipped"
        run.message = f"needs ~{need / 2**30:.1f} GiB free for a call, {free / 2**30:.1f} GiB available"
        return run
    pid = worker_pid(impl)
    _reset_peak()
    if pid:
        _reset_peak(pid)
    wanted = set(rows)
    parts: dict[str, list[np.ndarray]] = {}
    row_parts: dict[str, list[np.ndarray]] = {}
    port_seconds = 0.0
    for block in blocks:
        call_inputs = dict(inputs)
        if len(blocks) > 1:
            q_name = QUERY_INPUTS[case.op]
            call_inputs[q_name] = inputs[q_name][block]
            if "mask" in inputs:
                call_inputs["mask"] = inputs["mask"][block]
        start = time.perf_counter()
        try:
            out = impl.run(case.op, call_inputs, case.options)
        except OperationMissing as exc:
            run.status, run.message = "missing", str(exc)
            return run
        except ImplementationError as exc:
            run.status, run.message = "error", f"{name} raised: {exc}"
            return run
        except Exception as exc:  # an adapter bug (or MemoryError) must not stop the tier
            run.status, run.message = "error", f"{name} adapter failed: {type(exc).__name__}: {exc}"
            return run
        run.seconds += time.perf_counter() - start
        run.calls += 1
        if impl.last_seconds is not None:
            port_seconds += impl.last_seconds
        local = [r - block.start for r in range(block.start, block.stop) if r in wanted]
        for out_name, arr in out.items():
            arr = np.asarray(arr)
            if out_name in FULL_OUTPUTS[case.op]:
                parts.setdefault(out_name, []).append(np.array(arr))
            if case.op == "self_attention" and out_name in ("k", "v"):
                continue  # a whole call's tokens: their sampled rows are taken below
            axis = 1 if (case.op == "multi_head_attention" and out_name == "weights") else 0
            if arr.ndim <= axis or arr.shape[axis] != block.stop - block.start:
                run.status = "error"
                run.message = f"{name} returned {out_name} of shape {arr.shape} for {block.stop - block.start} queries"
                return run
            row_parts.setdefault(out_name, []).append(np.take(arr, local, axis=axis))
        del out
    run.port_seconds = port_seconds if impl.last_seconds is not None else None
    for out_name, pieces in parts.items():
        try:
            run.full[out_name] = np.concatenate(pieces, axis=0) if len(pieces) > 1 else pieces[0]
        except ValueError as exc:  # blocks of different widths: the comparison cannot use them
            run.status, run.message = "error", f"{name} returned {out_name} blocks that do not fit together: {exc}"
            return run
    for out_name, pieces in row_parts.items():
        axis = 1 if (case.op == "multi_head_attention" and out_name == "weights") else 0
        run.rows[out_name] = np.concatenate(pieces, axis=axis) if len(pieces) > 1 else pieces[0]
    if case.op == "self_attention":
        for out_name in ("k", "v"):
            if out_name in run.full:
                if run.full[out_name].ndim < 1 or run.full[out_name].shape[0] != n:
                    run.status = "error"
                    run.message = f"{name} returned {out_name} of shape {run.full[out_name].shape} for {n} tokens"
                    return run
                run.rows[out_name] = run.full[out_name][rows]
    run.peak_rss = peak_rss()
    run.worker_peak_rss = peak_rss(pid) if pid else None
    return run


# --- judging ---------------------------------------------------------------------------------------
@dataclass
class Verdict:
    impl: str
    case: str
    status: str  # pass, fail, error, missing, unavailable
    rows_over_bound: float | None = None  # worst |actual - exact| / bound on the sampled rows
    full_over_bound: float | None = None  # worst |X - Y| / (2 B) against any other implementation
    messages: list[str] = field(default_factory=list)
    # The two checks apart (None: the call did not run): the sampled rows against the exact truth,
    # and every row against the other implementations within 2B (its message, when it fails).
    rows_ok: bool | None = None
    pairs_ok: bool | None = None
    pairs_message: str = ""


def judge_rows(
    run: Run, truth: Truth, rows: list[int], estimate: tuple[np.ndarray, np.ndarray] | None, fmt: Format | None = None
) -> tuple[bool, float | None, list[str]]:
    """The sampled rows: every output against its exact values (the weights on ``weight_rows``),
    and the weights on every sampled row against this harness's own float64 weights within 2B."""
    from attention_ports.judge.compare import compare

    w_axis = 1 if run.rows.get("weights") is not None and run.rows["weights"].ndim == 3 else 0
    exact_w = [rows.index(r) for r in weight_rows(rows)]
    checks = []
    for name, (expected, bound) in truth.items():
        actual = run.rows.get(name)
        if actual is not None and name == "weights":
            actual = np.take(actual, exact_w, axis=w_axis)
        checks.append((name, "sampled rows, exact", expected, actual, bound))
    if estimate is not None:
        checks.append(
            (
                "weights",
                "every sampled row, within 2B of a float64 evaluation",
                estimate[0],
                run.rows.get("weights"),
                2 * estimate[1],
            )
        )
    ok, worst, msgs = True, None, []
    for name, what, expected, actual, bound in checks:
        if actual is None:
            ok = False
            msgs.append(f"case {run.case!r}, output {name!r}: not returned")
            continue
        cmp = compare(expected, actual, bound, fmt)  # ulps of the judged format
        if cmp.max_err_over_bound is not None and cmp.expected_shape == cmp.actual_shape:
            worst = max(worst or 0.0, cmp.max_err_over_bound)
        if not cmp.ok:
            ok = False
            msgs.append(cmp.describe(run.case, f"{name} ({what})"))
    return ok, worst, msgs


def judge_pairs(
    runs: list[Run], bounds: Mapping[str, np.ndarray], fmt: Format | None = None
) -> dict[tuple[str, str], tuple[bool, float, str]]:
    """{(X, Y): (agree, worst |X - Y| / 2B, first difference)} over every every-row output."""
    from attention_ports.judge.compare import compare

    out = {}
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            agree, worst, first = True, 0.0, ""
            for name, bound in bounds.items():
                if name not in a.full or name not in b.full:
                    agree = False
                    first = first or f"case {a.case!r}, output {name!r}: not returned by both {a.impl} and {b.impl}"
                    continue
                cmp = compare(a.full[name], b.full[name], 2 * bound, fmt)
                if cmp.max_err_over_bound is not None:
                    worst = max(worst, cmp.max_err_over_bound)
                if not cmp.ok:
                    agree = False
                    first = first or cmp.describe(a.case, f"{name}: {b.impl} against {a.impl}, bound 2B")
            out[(a.impl, b.impl)] = out[(b.impl, a.impl)] = (agree, worst, first)
    return out


def verdicts_for_case(
    case: CaseSpec,
    runs: list[Run],
    truth: Truth,
    rows: list[int],
    bounds: scale_bounds.Bounds,
    fmt: Format | None = None,
) -> list[Verdict]:
    done = [r for r in runs if r.status == "ok"]
    pairs = judge_pairs(done, bounds.full, fmt)
    result = []
    for run in runs:
        if run.status != "ok":
            status = "fail" if run.status == "skipped" else run.status
            result.append(Verdict(run.impl, case.id, status, messages=[f"case {case.id!r}: {run.message}"]))
            continue
        ok, worst_rows, msgs = judge_rows(run, truth, rows, bounds.weights, fmt)
        others = [r for r in done if r is not run]
        against = [pairs[(run.impl, o.impl)] for o in others]
        disagree = [o.impl for o, p in zip(others, against, strict=True) if not p[0]]
        full_worst = max((p[1] for p in against), default=None) if bounds.full else None
        rows_ok, pairs_message = ok, ""
        # Wrong when it disagrees with most of the others (with one other, a disagreement fails both).
        if disagree and (len(disagree) * 2 > len(others) or len(others) == 1):
            ok = False
            first = next(p[2] for o, p in zip(others, against, strict=True) if not p[0])
            who = ", ".join(disagree)
            pairs_message = f"case {case.id!r}: disagrees with {who} on every-row outputs beyond 2B; {first}"
            msgs.append(pairs_message)
        verdict = Verdict(run.impl, case.id, "pass" if ok else "fail", worst_rows, full_worst, msgs)
        verdict.rows_ok, verdict.pairs_ok, verdict.pairs_message = rows_ok, not pairs_message, pairs_message
        result.append(verdict)
    return result


# --- the tier ----------------------------------------------------------------------------------------
@dataclass
class Report:
    cases: list[CaseSpec]
    runs: dict[str, list[Run]]  # impl -> one Run per case
    verdicts: list[Verdict]
    truth_seconds: dict[str, float]
    bound_seconds: dict[str, float]
    wall_seconds: float
    describe: dict[str, str]
    harness_peak_rss: int | None
    n_rows: int = ROWS
    precision: str = precision.DEFAULT  # the format judged in

    def as_json(self) -> dict[str, Any]:
        def runs(name: str) -> list[dict[str, Any]]:
            return [
                {
                    "case": r.case,
                    "status": r.status,
                    "message": r.message,
                    "seconds": r.seconds,
                    "port_seconds": r.port_seconds,
                    "calls": r.calls,
                    "peak_rss_bytes": r.peak_rss,
                    "worker_peak_rss_bytes": r.worker_peak_rss,
                }
                for r in self.runs[name]
            ]

        return {
            "tier": "scale",
            **({} if self.precision == precision.DEFAULT else {"precision": self.precision}),
            "rows_per_case": self.n_rows,
            "wall_seconds": self.wall_seconds,
            "truth_seconds": self.truth_seconds,
            "bound_seconds": self.bound_seconds,
            "harness_peak_rss_bytes": self.harness_peak_rss,
            "implementations": {
                n: {"describe": self.describe.get(n, ""), "runs": runs(n), **totals(self.runs[n])} for n in self.runs
            },
            "verdicts": [
                {
                    "impl": v.impl,
                    "case": v.case,
                    "status": v.status,
                    "rows_err_over_bound": v.rows_over_bound,
                    "full_err_over_bound": v.full_over_bound,
                    "messages": v.messages,
                }
                for v in self.verdicts
            ],
        }


def totals(runs: list[Run]) -> dict[str, Any]:
    port = [r.port_seconds for r in runs if r.port_seconds is not None]
    return {
        "seconds": sum(r.seconds for r in runs),
        "port_seconds": sum(port) if port else None,
        "peak_rss_bytes": max((r.peak_rss or 0 for r in runs), default=None) or None,
        "worker_peak_rss_bytes": max((r.worker_peak_rss or 0 for r in runs), default=None) or None,
    }


def run_tier(
    impl_names: list[str],
    ports: Mapping[str, Path] | None = None,
    case_globs: Iterable[str] = (),
    *,
    use_cache: bool = True,
    workers: int = 2,
    say: Callable[[str], None] = lambda s: None,
    catalogue: Path = CATALOGUE,
    required: set[str] | None = None,
    n_rows: int = ROWS,
    fmt: Format | None = None,
) -> Report:
    from attention_ports.runtimes import precision as in_precision
    from attention_ports.runtimes import registry
    from attention_ports.runtimes.impl import ImplementationUnavailable
    from attention_ports.tools.bench import peak_rss

    ports = dict(ports or {})
    required = required or set()
    fmt = fmt or precision.FORMATS[precision.DEFAULT]
    start = time.perf_counter()
    cases = load_cases(case_globs, catalogue)
    if fmt.name != precision.DEFAULT:
        from attention_ports.fixtures.store import FixtureError

        for op in sorted({c.op for c in cases if c.op in FLOAT64_ONLY}):
            say(f"{op}: not at {fmt.name} ({FLOAT64_ONLY[op]})")
        cases = [c for c in cases if c.op not in FLOAT64_ONLY]
        if not cases:
            raise FixtureError(f"no selected scale case is judged at {fmt.name}: {'; '.join(FLOAT64_ONLY.values())}")
    truth_seconds = prepare_truth(cases, catalogue, use_cache, workers, say, n_rows, fmt.name)
    bounds: dict[str, scale_bounds.Bounds] = {}
    bound_seconds: dict[str, float] = {}
    truths: dict[str, Truth] = {}
    rows: dict[str, list[int]] = {}
    for spec in cases:
        case, inputs = in_format(spec, fmt.name)
        rows[case.id] = sample_rows(case, n_rows)
        truths[case.id] = load_truth(case, inputs, rows[case.id], fmt.name)
        t = time.perf_counter()
        bounds[case.id], cached = every_row_bounds(case, inputs, rows[case.id], use_cache, fmt.name)
        bound_seconds[case.id] = 0.0 if cached else time.perf_counter() - t
        at = "" if fmt.name == precision.DEFAULT else f", {fmt.name}'s rules"
        done = "cached" if cached else f"{bound_seconds[case.id]:.1f} s (every row, float64{at})"
        say(f"bounds {case.id}: " + (done if case.op in ATTENTION_OPS else "none (the sampled rows only)"))
        del inputs
    harness_peak = peak_rss()
    runs: dict[str, list[Run]] = {}
    describe: dict[str, str] = {}
    for name in impl_names:
        runs[name] = []
        try:
            with _scale_timeouts():
                impl = in_precision.create(name, ports.get(name), fmt.name) or registry.create(name, ports.get(name))
        except ImplementationUnavailable as exc:
            status = "error" if name in required else "unavailable"
            runs[name] = [Run(name, c.id, status, f"{name} unavailable: {exc}") for c in cases]
            say(f"{name}: unavailable ({exc})")
            continue
        try:
            describe[name] = impl.describe()
            for spec in cases:
                case, inputs = in_format(spec, fmt.name)
                run = run_case(name, impl, case, inputs, rows[case.id])
                del inputs
                runs[name].append(run)
                rss = f"{(run.worker_peak_rss or run.peak_rss or 0) / 2**30:.1f} GiB"
                say(f"{name} {case.id}: {run.status} in {run.seconds:.1f} s ({run.calls} call(s), peak {rss})")
        finally:
            impl.close()
    verdicts = []
    for i, case in enumerate(cases):
        verdicts += verdicts_for_case(
            case, [runs[n][i] for n in impl_names], truths[case.id], rows[case.id], bounds[case.id], fmt
        )
    wall = time.perf_counter() - start
    return Report(cases, runs, verdicts, truth_seconds, bound_seconds, wall, describe, harness_peak, n_rows, fmt.name)


# --- presentation -------------------------------------------------------------------------------------
def _gib(b: int | None) -> str:
    return "-" if not b else f"{b / 2**30:.2f}"


def render(report: Report) -> str:
    names = list(report.runs)
    by = {(v.impl, v.case): v for v in report.verdicts}
    at = "" if report.precision == precision.DEFAULT else f" at {report.precision}"
    fewer = sorted({c.op for c in report.cases if c.op in MAX_ROWS and MAX_ROWS[c.op] < report.n_rows})
    lines = [
        f"scale tier{at}: {len(report.cases)} cases, {report.n_rows} exact rows each"
        + "".join(f" ({op}: {MAX_ROWS[op]}, and no every-row comparison)" for op in fewer)
        + "; every row compared between implementations",
        "",
        "| case |" + "".join(f" {n} |" for n in names),
        "|---|" + "---|" * len(names),
    ]
    for i, case in enumerate(report.cases):
        row = f"| {case.id} |"
        for n in names:
            v, r = by[(n, case.id)], report.runs[n][i]
            if v.status in ("pass", "fail") and r.status == "ok":
                rows = "-" if v.rows_over_bound is None else f"{v.rows_over_bound:.2g}"
                full = "-" if v.full_over_bound is None else f"{v.full_over_bound:.2g}"
                row += f" {v.status} {r.seconds:.2f}s rows {rows} all {full} |"
            else:
                row += f" {v.status} |"
        lines.append(row)
    lines += [
        "",
        "(err/bound: rows = worst |actual - exact| / bound on the sampled rows; all = worst |X - Y| / 2B against"
        " the other implementations, every row)",
        "",
        "| implementation | calls s | port's own s | peak RSS GiB (process / worker) |",
        "|---|---:|---:|---:|",
    ]
    for n in names:
        t = totals(report.runs[n])
        port = "-" if t["port_seconds"] is None else f"{t['port_seconds']:.1f}"
        lines.append(
            f"| {n} | {t['seconds']:.1f} | {port} | {_gib(t['peak_rss_bytes'])} / {_gib(t['worker_peak_rss_bytes'])} |"
        )
    truth_s = sum(report.truth_seconds.values())
    cached = sum(1 for s in report.truth_seconds.values() if s == 0)
    lines += [
        "",
        f"harness: exact truth {truth_s:.1f} s ({cached} of {len(report.truth_seconds)} cases from the cache), "
        f"every-row bounds {sum(report.bound_seconds.values()):.1f} s, peak RSS {_gib(report.harness_peak_rss)} GiB; "
        f"wall {report.wall_seconds:.1f} s",
    ]
    return "\n".join(lines)
