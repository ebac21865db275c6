"""The truth: every expected output as the exact result correctly rounded to float64, with bounds.

``compute(op, inputs, options)`` returns, per output name, ``(expected, bound)``: float64 arrays of
the output's shape. ``expected`` is the exact mathematical result of the operation on the float64
inputs, rounded to the nearest double; ``bound`` is the per-element absolute error a correct
float64 implementation stays within (``attention_ports.truth.bounds``). Both are pure functions of the
inputs: no NumPy floating-point operation touches them (NumPy only carries the input arrays in
and the results out), so they are byte-identical on every CPU.

How: the operation's graph (``attention_ports.truth.exact``) runs in arb ball arithmetic (python-flint).
A bound pass at ``BOUND_PREC`` bits gives the error bounds and a first set of balls; every ball
that does not certify its rounding (``rounding.round_ball``) sends the whole case to a value pass
at a higher precision, raised until every element certifies (``MAX_PREC`` caps it; the error then
names the case and the output). A trajectory (``classifier_train``) runs at a precision that
tapers with its number of SGD steps (naive balls lose ~1.3 bits a step on the shipped ones).

Beyond the catalogue: ``masked_query`` selects the convention for a query whose keys are all
masked ("zeros", "nan", "uniform"), ``rows`` restricts the attention operations to a subset
of query rows (rows are independent) and the decoder block to a subset of its token rows (the
keys and values of every token computed, the rest on those rows: transformer.block_rows_t), for
cases too large to compute in full, and ``outputs``
to some of the outputs (the others are computed along the way but neither rounded nor bounded,
which is most of the cost of a long weights row: the scale tier, attention_ports/tiers/scale.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any

import flint
import numpy as np
from flint import arb, arb_mat, ctx

# activations, norms: families whose graphs live in their own modules; importing one registers its
# operations in exact.GRAPHS (exact.register_graph). A new family adds its module to this import.
from attention_ports.truth import (
    activations,
    bounds,
    exact,
    losses,
    norms,
    optim,
    positions,
    rounding,
    transformer,
    transformer_grads,
    transformer_train,
)
from attention_ports.truth.exact import BOUND_PREC, InputError, Out

# the family modules, imported for their registrations
FAMILIES = (activations, losses, norms, optim, positions, transformer, transformer_grads, transformer_train)
LIBRARY = "python-flint"
METHOD = "arb ball arithmetic, certified round-to-nearest"
MAX_PREC = 1 << 16
# Naive balls lose ~1.3 bits per SGD step on the shipped trajectories (measured: 1,483 bits over
# 1,140 steps, unevenly: ~0.1 a step in the first epochs, ~1.45 later); 1.5 covers that, and a
# shortfall makes the first attempt fail and escalate by the measured deficit.
TRAJECTORY_BITS_PER_STEP = 1.5
TRAJECTORY_FINAL_BITS = 128  # the precision the last step runs at

Result = dict[str, tuple[np.ndarray, np.ndarray]]


class TruthError(RuntimeError):
    """The exact result could not be certified (names the case and the output)."""


@dataclass(frozen=True)
class Truth:
    outputs: Result
    precision_bits: int  # the working precision at which every output certified


def describe() -> dict[str, Any]:
    """The manifest's ``truth`` section: how every expected value and bound was made."""
    return {
        "library": LIBRARY,
        "version": flint.__version__,
        "method": METHOD,
        "masked_query": "zeros",  # the convention of the stored outputs for a query with no key
        "zero": "an exact zero certifies once its ball's radius is below 2^-1075; stored as +0.0",
        "bound_precision_bits": BOUND_PREC,
        "bounds": bounds.CONSTANTS,
    }


# ---------------------------------------------------------------- rounding a pass's outputs


def _round_out(out: Out) -> tuple[np.ndarray, int]:
    """(expected array, missing bits): 0 missing bits when every element certified."""
    rows = am_rows(out.t.v)
    flat: list[float] = []
    missing = 0
    for i, row in enumerate(rows):
        if i in out.nan_rows:
            flat.extend([math.nan] * len(row))
            continue
        for x in row:
            r = rounding.round_ball(x)
            if r is None:
                missing = max(missing, rounding.missing_bits(x))
                r = math.nan
            flat.append(r)
    return np.array(flat, dtype=np.float64).reshape(out.shape), missing


def am_rows(m: arb_mat) -> list[list[arb]]:
    c = m.ncols()
    e = m.entries()
    return [e[i * c : (i + 1) * c] for i in range(m.nrows())]


def _bound_array(err: arb_mat | None, expected: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    old = ctx.prec
    ctx.prec = BOUND_PREC
    try:
        exp_flat = expected.reshape(-1).tolist()
        errs = err.entries() if err is not None else [arb(0)] * len(exp_flat)
        out = []
        for e, x in zip(errs, exp_flat, strict=True):
            if not math.isfinite(x):
                out.append(0.0)  # NaN matches NaN, an infinity only itself: no bound applies
                continue
            out.append(rounding.round_up(bounds.stored(e, arb(abs(x))), bounds.BOUND_SIG_BITS))
        return np.array(out, dtype=np.float64).reshape(shape)
    finally:
        ctx.prec = old


def _next_prec(prec: int, missing: int) -> int:
    return max(prec + missing + 64, prec * 3 // 2)


# ---------------------------------------------------------------- the public entry points


def compute(
    op: str,
    inputs: Mapping[str, np.ndarray],
    options: Mapping[str, Any],
    *,
    masked_query: str = "zeros",
    rows: Sequence[int] | None = None,
    label: str = "",
    outputs: Collection[str] | None = None,
) -> Result:
    """``{output: (expected, bound)}`` for one operation call; see the module docstring."""
    return compute_detailed(
        op, inputs, options, masked_query=masked_query, rows=rows, label=label, outputs=outputs
    ).outputs


def compute_detailed(
    op: str,
    inputs: Mapping[str, np.ndarray],
    options: Mapping[str, Any],
    *,
    masked_query: str = "zeros",
    rows: Sequence[int] | None = None,
    label: str = "",
    memo: bool = True,
    outputs: Collection[str] | None = None,
    estimate: bool = False,
) -> Truth:
    """``compute`` with the working precision; ``memo=False`` neither reads nor fills the memo.

    ``estimate``: a trajectory whose carried bound leaves the first-order regime gets the
    estimated bound (a catalogue case flagged ``estimated_bound``) instead of ``bounds.BoundError``.
    """
    key = cache_key(op, inputs, options, masked_query, rows, outputs, estimate)
    hit = _MEMO.get(key) if memo else None
    if hit is not None:
        return hit
    where = label or op
    try:
        if op == "classifier_train":
            if masked_query != "zeros" or rows is not None or outputs is not None:
                raise InputError("classifier_train takes neither masked_query, rows nor outputs")
            result = _trajectory(inputs, options, where, estimate)
        else:
            result = _single(op, inputs, options, masked_query, rows, where, outputs)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from exc
    if memo:
        _MEMO[key] = result
    return result


def _single(op, inputs, options, masked_query, rows, where: str, outputs=None) -> Truth:
    tracked = exact.run_graph(op, inputs, options, prec=BOUND_PREC, track=True, masked_query=masked_query, rows=rows)
    if outputs is not None:
        unknown = set(outputs) - set(tracked)
        if unknown:
            raise InputError(f"{op} has no outputs {sorted(unknown)}")
    prec = BOUND_PREC
    values = tracked
    while True:
        rounded = {name: _round_out(out) for name, out in values.items() if outputs is None or name in outputs}
        missing = max(m for _, m in rounded.values())
        if missing == 0:
            break
        if prec >= MAX_PREC:
            worst = [n for n, (_, m) in rounded.items() if m]
            raise TruthError(f"{where}: outputs {worst} do not certify at {prec} bits")
        prec = min(_next_prec(prec, missing), MAX_PREC)
        values = exact.run_graph(op, inputs, options, prec=prec, track=False, masked_query=masked_query, rows=rows)
    errs = {name: tracked[name].t.e for name in rounded}
    if bounds.STORAGE_U is not None:  # mixed precision: every output is stored (bounds.to_storage)
        errs = {name: bounds.to_storage(tracked[name].t.abs, e) for name, e in errs.items()}
    result = {name: (arr, _bound_array(errs[name], arr, tracked[name].shape)) for name, (arr, _) in rounded.items()}
    return Truth(result, prec)


def _trajectory(inputs, options, where: str, estimate: bool) -> Truth:
    # The precision tapers from base + 1.5 x steps at the first step to base at the last
    # (quadratically: exact.trajectory_values). A trajectory's exact zeros (b_k, by an identity; frozen
    # parameters, copied) stay exact balls, so no step pays the ~1,100 bits a zero ball needs to
    # certify; any other zero makes the first attempt fail and escalate by its deficit.
    lengths = np.asarray(inputs["lengths"])
    steps = int(options.get("epochs") or 0) * int(np.count_nonzero(lengths))
    base = TRAJECTORY_FINAL_BITS
    while True:
        traj = exact.trajectory_values(inputs, options, base, taper=TRAJECTORY_BITS_PER_STEP)
        outs = _trajectory_outs(traj)
        rounded = {name: _round_out(out) for name, out in outs.items()}
        missing = max(m for _, m in rounded.values())
        if missing == 0:
            break
        if base >= MAX_PREC:
            raise TruthError(f"{where}: the trajectory does not certify at {base} bits")
        base = min(_next_prec(base, missing), MAX_PREC)

    def amplification() -> arb:
        return exact.trajectory_amplification(inputs, options, traj, base, TRAJECTORY_BITS_PER_STEP)

    loss_err, param_err = exact.trajectory_bounds(traj, options, amplification if estimate else None)
    errs = {"epoch_losses": loss_err, **{f"params.{n}": m for n, m in param_err.items()}}
    outputs = {name: (arr, _bound_array(errs[name], arr, outs[name].shape)) for name, (arr, _) in rounded.items()}
    # The working precision recorded is the first step's, the highest.
    return Truth(outputs, base + math.ceil(TRAJECTORY_BITS_PER_STEP * steps))


def _trajectory_outs(traj: exact.Trajectory) -> dict[str, Out]:
    losses = arb_mat(1, len(traj.epoch_losses), traj.epoch_losses) if traj.epoch_losses else arb_mat(1, 0)
    outs = {"epoch_losses": Out(exact.T(losses), (len(traj.epoch_losses),))}
    for name, m in traj.params.items():
        outs[f"params.{name}"] = Out(exact.T(m), (m.ncols(),) if name.startswith("b_") else (m.nrows(), m.ncols()))
    return outs


# ---------------------------------------------------------------- memo and parallel generation

_MEMO: dict[str, Truth] = {}


def cache_key(
    op, inputs: Mapping[str, np.ndarray], options, masked_query: str, rows, outputs=None, estimate=False
) -> str:
    """Content address of one call: the operation, options and every input's dtype, shape, bytes."""
    h = hashlib.sha256()
    head = {"op": op, "options": options, "masked_query": masked_query, "rows": None if rows is None else list(rows)}
    if outputs is not None:
        head["outputs"] = sorted(outputs)
    if estimate:
        head["estimate"] = True
    h.update(json.dumps(head, sort_keys=True, default=str).encode())
    for name in sorted(inputs):
        arr = np.ascontiguousarray(inputs[name])
        h.update(f"\0{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


Job = tuple[str, str, dict[str, np.ndarray], dict[str, Any]]  # (label, op, inputs, options)


def _run_job(job: Job, memo: bool = True, estimate: bool = False) -> Truth:
    label, op, inputs, options = job
    return compute_detailed(op, inputs, options, label=label, memo=memo, estimate=estimate)


def _cost(job: Job) -> float:
    """A rough relative cost, to start the longest jobs first."""
    _, op, inputs, options = job
    if op == "classifier_train":
        return 1e9 * float(options.get("epochs") or 1)
    return float(sum(np.asarray(a).size for a in inputs.values())) ** 1.5


def default_workers() -> int:
    env = os.environ.get("ATTENTION_PORTS_JOBS")
    if env:
        return max(1, int(env))
    return max(1, min(os.cpu_count() or 1, 4))


def compute_many(
    jobs: Sequence[Job],
    workers: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    memo: bool = True,
    estimated: Collection[str] = (),
) -> list[Truth]:
    """Every job's truth, in job order; the memo first, then ``workers`` processes for the rest.

    Results do not depend on the worker count or the order of completion. The memo is this
    process's only (nothing is cached on disk): ``memo=False`` computes everything afresh.
    ``estimated``: the labels of the jobs that ``compute_detailed(estimate=True)``.
    """
    workers = default_workers() if workers is None else workers
    results: list[Truth | None] = [None] * len(jobs)
    todo = []
    for i, (_, op, inputs, options) in enumerate(jobs):
        hit = _MEMO.get(cache_key(op, inputs, options, "zeros", None, None, jobs[i][0] in estimated)) if memo else None
        if hit is not None:
            results[i] = hit
        else:
            todo.append(i)
    done = len(jobs) - len(todo)
    if progress:
        progress(done, len(jobs), "")
    order = sorted(todo, key=lambda i: -_cost(jobs[i]))
    if workers <= 1 or len(order) <= 1:
        for i in order:
            results[i] = _run_job(jobs[i], memo, jobs[i][0] in estimated)
            done += 1
            if progress:
                progress(done, len(jobs), jobs[i][0])
    else:
        # spawn, not fork: the parent may hold R, Julia workers or torch threads.
        pool = ProcessPoolExecutor(max_workers=min(workers, len(order)), mp_context=get_context("spawn"))
        try:
            futures = {pool.submit(_run_job, jobs[i], memo, jobs[i][0] in estimated): i for i in order}
            from concurrent.futures import as_completed

            for fut in as_completed(futures):
                i = futures[fut]
                results[i] = fut.result()
                done += 1
                if progress:
                    progress(done, len(jobs), jobs[i][0])
        except BaseException:
            # SIGINT/SIGTERM or a failed case: stop now. A `with` block would wait for every
            # submitted case (a whole generation) before letting the exception out.
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()
    for (label, op, inputs, options), res in zip(jobs, results, strict=True):
        assert res is not None
        if memo:
            _MEMO[cache_key(op, inputs, options, "zeros", None, None, label in estimated)] = res
    return [r for r in results if r is not None]


if __name__ == "__main__":  # pragma: no cover - a manual probe: python -m attention_ports.truth
    print(json.dumps(describe(), indent=1), file=sys.stdout)
