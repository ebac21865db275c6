"""The ``reference`` implementation: the NumPy reference, run on every case from its fixture inputs.

The reference is an implementation under test like torch, R and Julia: the fixtures hold the exact
results (``attention_ports.truth.engine``), and the reference is compared with them and reported the same
way, its BLAS rounding (which differs by CPU) included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import attention_ports.reference as reference
from attention_ports.runtimes.impl import Arrays, Implementation, OperationMissing
from attention_ports.spec import ops


def call_reference(op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
    """Call the reference function named ``op`` with the case's arrays and options by name."""
    spec = ops.get(op)
    fn = getattr(reference, op, None)
    if fn is None:
        raise OperationMissing(f"{op} is not defined in reference")
    kwargs: dict[str, Any] = {name: inputs[name] for name in spec.args}
    kwargs.update({name: inputs[name] for name in spec.kwargs if name in inputs})
    for name in spec.groups:
        kwargs[name] = {k: inputs[f"{name}.{k}"] for k in spec.groups[name] if f"{name}.{k}" in inputs}
    for name in (*spec.positional_options, *spec.options):
        if options.get(name) is not None:
            kwargs[name] = options[name]
    result = fn(**kwargs)
    return _flatten(result, spec.outputs)


def _flatten(result: Any, outputs: tuple[str, ...]) -> Arrays:
    if isinstance(result, np.ndarray):
        (name,) = outputs
        return {name: result}
    if hasattr(result, "_asdict"):
        result = result._asdict()
    flat: Arrays = {}
    for key, value in result.items():
        if isinstance(value, Mapping) or hasattr(value, "_asdict"):
            for sub, arr in (value._asdict() if hasattr(value, "_asdict") else value).items():
                flat[f"{key}.{sub}"] = np.asarray(arr, dtype=np.float64)
        else:
            flat[key] = np.asarray(value, dtype=np.float64)
    return flat


class ReferenceImplementation(Implementation):
    name = "reference"

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        return call_reference(op, inputs, options)

    def describe(self) -> str:
        return f"reference {reference.__version__} (NumPy {np.__version__})"
