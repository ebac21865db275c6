"""The fixtures are the same bytes on every CPU: regenerated under other BLAS kernels and SIMD levels.

NumPy's BLAS picks a kernel per CPU (OPENBLAS_CORETYPE reproduces another CPU's) and its ufuncs
a SIMD level (NPY_DISABLE_CPU_FEATURES turns the dispatched ones off). Each configuration runs
``tests/cpu_probe.py`` in its own process, which must reproduce the committed input, expected and
bound bytes, and in which the NumPy reference, itself an implementation under test, must pass
every case.

What this proves, honestly: every input of every case, and the truth of every case, is
reproduced byte for byte under Sandybridge; under Prescott, Haswell and without NumPy's SIMD
dispatch, every input and every non-trajectory case (the two trajectories take most of the run
time; they touch NumPy only through their inputs, which are checked everywhere). The truth engine
itself calls no BLAS and no NumPy floating point (``attention_ports/truth.py``), and the in-process
generation test covers this machine's default kernel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from numpy._core._multiarray_umath import __cpu_dispatch__

ROOT = Path(__file__).resolve().parent.parent
DISPATCH = " ".join(__cpu_dispatch__)
CONFIGS = {
    "Sandybridge": ({"OPENBLAS_CORETYPE": "Sandybridge"}, "all"),
    "Prescott": ({"OPENBLAS_CORETYPE": "Prescott"}, "forward"),
    "Haswell": ({"OPENBLAS_CORETYPE": "Haswell"}, "forward"),
    "no-SIMD": ({"NPY_DISABLE_CPU_FEATURES": DISPATCH}, "forward"),
}


@pytest.fixture(scope="module")
def probes() -> dict[str, dict]:
    procs = {}
    for label, (env, scope) in CONFIGS.items():
        full_env = {**os.environ, **env, "ATTENTION_PORTS_JOBS": "1"}
        procs[label] = subprocess.Popen(
            [sys.executable, "-m", "tests.cpu_probe", scope],
            cwd=ROOT,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    results = {}
    for label, proc in procs.items():
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, f"{label}: probe failed\n{err[-3000:]}"
        results[label] = json.loads(out.strip().splitlines()[-1])
    return results


@pytest.mark.parametrize("label", list(CONFIGS))
def test_fixtures_are_byte_identical_and_the_reference_passes(label: str, probes: dict[str, dict]) -> None:
    res = probes[label]
    assert res["mismatches"] == [], f"{label} ({res['blas_core']}): bytes differ: {res['mismatches'][:10]}"
    assert res["reference_failures"] == [], "\n".join(res["reference_failures"][:5])
    assert res["inputs_checked"] > 300
    assert res["truth_outputs_checked"] > (300 if CONFIGS[label][1] == "all" else 250)


def test_the_environments_took_effect(probes: dict[str, dict]) -> None:
    assert probes["Sandybridge"]["blas_core"] == "Sandybridge"
    assert probes["Haswell"]["blas_core"] == "Haswell"
    assert probes["Prescott"]["blas_core"] not in {"", "unknown", probes["Sandybridge"]["blas_core"]}
    assert probes["no-SIMD"]["simd"] and not any(probes["no-SIMD"]["simd"].values())
