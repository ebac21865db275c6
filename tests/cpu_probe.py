"""Regenerate fixtures in this process and compare them with the committed bytes (not a test module).

``tests/fixtures/test_bytes.py`` runs ``python -m tests.cpu_probe`` under other BLAS kernels
(``OPENBLAS_CORETYPE``) and SIMD levels (``NPY_DISABLE_CPU_FEATURES``). It rebuilds every case's
inputs and compares their bytes with the committed ones, computes the truth afresh, with no memo,
and compares the expected and bound bytes (every case but :data:`LONG_TRAJECTORIES`, whose truth
test_bytes.py's docstring says why it leaves to the in-process generation test; ``python -m
tests.cpu_probe all`` includes them, ~35 s more; ``sample``, one case per operation); then it runs
the NumPy reference on every case against the committed fixtures. It prints one JSON object.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import math
import os
import sys

import numpy as np

# The seed's two training runs (1,170 and 780 SGD steps in balls, plus the estimated bound's
# amplification pass): ~35 s of CPU; the other cases' truth, the transformer's gradients and
# training steps among them, ~60 s more (measured at 191 cases).
LONG_TRAJECTORIES = ("clf_train_sentiment_30_epochs", "clf_train_sentiment_frozen_ff_20_epochs")


def blas_core() -> str:
    libs = glob.glob(os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*"))
    for lib in libs:
        handle = ctypes.CDLL(lib)
        for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_", "openblas_get_corename"):
            if hasattr(handle, name):
                fn = getattr(handle, name)
                fn.restype = ctypes.c_char_p
                return fn().decode()
    return "unknown"


def simd_targets() -> dict[str, bool]:
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    return {t: bool(__cpu_features__.get(t)) for t in __cpu_dispatch__}


def sample(cases: list[dict]) -> list[str]:
    """The "sample" scope's cases (manifest entries, in any order): of each operation the median
    by the number of input elements (the lower one; ties by id), :data:`LONG_TRAJECTORIES` left
    out; every family's truth module runs on one case. The median, not the first by id: that was
    mha_L160_d64_h4_bias, sdpa_L128_d64_causal and self_attn_L128_d64 (~3.5 s of each probe's
    ~4.9 s), and not the smallest, which is an edge case (one key, every target ignored, lr 0)
    that can leave code of its family's module unrun."""
    by_op: dict[str, list[tuple[int, str]]] = {}
    for entry in cases:
        if entry["id"] not in LONG_TRAJECTORIES:
            size = sum(math.prod(meta["shape"]) for meta in entry["inputs"].values())
            by_op.setdefault(entry["op"], []).append((size, entry["id"]))
    return sorted(ranked[(len(ranked) - 1) // 2][1] for ranked in map(sorted, by_op.values()))


def main(scope: str = "fast") -> dict:
    """``scope``: "fast" (the truth of every case but :data:`LONG_TRAJECTORIES`), "all", or
    "sample" (the truth of one case per operation, :func:`sample`); inputs and the reference's run
    are every case's in each."""
    from attention_ports.fixtures.store import ESTIMATED_FLAG, REPO_FIXTURES, load_case, npy_bytes, read_manifest
    from attention_ports.judge.runner import judge
    from attention_ports.runtimes.builtin import ReferenceImplementation
    from attention_ports.spec.catalogue import build_inputs, load_catalogue
    from attention_ports.truth import engine as truth

    if scope not in ("fast", "all", "sample"):
        raise SystemExit(f"scope must be 'fast', 'all' or 'sample', got {scope!r}")

    def sha(a: np.ndarray) -> str:
        return hashlib.sha256(npy_bytes(a)).hexdigest()

    entries = {c["id"]: c for c in read_manifest(REPO_FIXTURES)["cases"]}
    missing = set(LONG_TRAJECTORIES) - set(entries)
    if missing:  # a renamed case would silently widen nothing, but the skip list must name real cases
        raise SystemExit(f"tests/cpu_probe.py: LONG_TRAJECTORIES names no case {sorted(missing)}")
    mismatches: list[str] = []
    jobs = []
    estimated = []  # trajectories whose bound is the flagged estimate (docs/truth-and-bounds.md)
    n_inputs = 0
    specs = load_catalogue(REPO_FIXTURES / "catalogue.toml").cases
    sampled = set(sample(list(entries.values())))
    for spec in specs:
        inputs = build_inputs(spec)
        for name, arr in inputs.items():
            n_inputs += 1
            if sha(arr) != entries[spec.id]["inputs"][name]["sha256"]:
                mismatches.append(f"{spec.id}/input.{name}")
        if scope == "all" or (scope == "fast" and spec.id not in LONG_TRAJECTORIES) or spec.id in sampled:
            jobs.append((spec.id, spec.op, inputs, spec.options))
            if ESTIMATED_FLAG in spec.flags:
                estimated.append(spec.id)
    n_truth = 0
    for (case_id, *_), tr in zip(
        jobs, truth.compute_many(jobs, workers=1, memo=False, estimated=estimated), strict=True
    ):
        entry = entries[case_id]
        if tr.precision_bits != entry["truth"]["precision_bits"]:
            mismatches.append(f"{case_id}: precision {tr.precision_bits} != {entry['truth']['precision_bits']}")
        for name, (expected, bound) in tr.outputs.items():
            n_truth += 1
            meta = entry["expected"][name]
            if sha(expected) != meta["sha256"]:
                mismatches.append(f"{case_id}/expected.{name}")
            if sha(bound) != meta["bound_sha256"]:
                mismatches.append(f"{case_id}/bound.{name}")
    reference = ReferenceImplementation()
    failures = []
    for entry in entries.values():
        case = load_case(REPO_FIXTURES, entry)
        failures += [r.message for r in judge("reference", case, reference) if r.status != "pass"]
    return {
        "blas_core": blas_core(),
        "simd": simd_targets(),
        "inputs_checked": n_inputs,
        "truth_cases_checked": sorted(job[0] for job in jobs),
        "truth_outputs_checked": n_truth,
        "mismatches": mismatches,
        "reference_failures": failures,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1] if len(sys.argv) > 1 else "fast")))
