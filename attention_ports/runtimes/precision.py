"""The built-in implementations run in float32, for ``verify --precision float32`` (issue 17).

* ``reference``: the NumPy reference itself, given float32 arrays (it keeps float32 through: its
  products, exp and sums, the classifier's gradients and update run in float32; a boolean mask
  becomes an additive float32 one first). The one widening: a step's loss comes back as a Python
  float (computed in float32), and a trajectory's epoch loss is their mean in float64.
* ``torch``: the float64 oracle's own code (attention_ports/runtimes/torch_impl.py) with float32
  CPU tensors: its kernels, ``nn.MultiheadAttention`` in float32, autograd's gradients and the SGD
  step in float32.
* ``julia``: our Julia port, generic over ``T<:AbstractFloat``, sent Float32 arguments
  (``attention_ports/runtimes/julia/adapter.py``, ``storage``): the same port, no second one.
* ``r``: R has only double. An R port is run as it is and judged on the tier's fixtures: a float64
  implementation passes every lower tier (its errors are far inside the float32 bounds).

Results come back widened to float64, which is exact: the values judged are the float32 values.
:func:`declared` is a Julia port's declared precision (the one the run judges it in).

Layer: runtimes. Imports ``spec`` (the format table) and the implementations beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from attention_ports.runtimes.builtin import ReferenceImplementation, call_reference
from attention_ports.runtimes.impl import Arrays, Implementation, OperationMissing
from attention_ports.spec import precision


def _storage(inputs: Mapping[str, np.ndarray], dtype: type) -> dict[str, np.ndarray]:
    """Real inputs in ``dtype``; a boolean mask made additive (0 / -inf) in it; integers as they are."""
    out = {}
    for name, arr in inputs.items():
        if arr.dtype == np.bool_ and name == "mask":
            arr = np.where(arr, 0.0, -np.inf).astype(dtype)
        elif arr.dtype.kind == "f":
            arr = arr.astype(dtype)
        out[name] = arr
    return out


def _widened(result: Mapping[str, Any]) -> Arrays:
    return {k: np.asarray(v, dtype=np.float64) for k, v in result.items()}


def _tier_op(op: str, impl: str) -> None:
    if op not in precision.TIER_OPS:
        raise OperationMissing(
            f"{op} is not in the float32 tier of {impl} (its operations: {', '.join(precision.TIER_OPS)})"
        )


class Float32Reference(ReferenceImplementation):
    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        _tier_op(op, "reference")
        opts = {k: float(v) if isinstance(v, float) else v for k, v in options.items()}  # weak scalars
        return _widened(call_reference(op, _storage(inputs, np.float32), opts))

    def describe(self) -> str:
        return super().describe() + ", run in float32"


def torch_float32() -> Implementation:
    from attention_ports.runtimes import torch_impl  # torch is optional: imported only when asked for

    class Float32Torch(torch_impl.TorchImplementation):
        """The same torch code with float32 tensors; results widened to float64 (exact)."""

        def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
            _tier_op(op, "torch")
            return _widened(super().run(op, inputs, options))

    return Float32Torch(np.float32)


def create(name: str, port: Path | None, fmt: str) -> Implementation | None:
    """The built-in ``name`` in ``fmt``, or None where the default construction is right."""
    if fmt == precision.DEFAULT:
        return None
    if name == "reference":
        return Float32Reference()
    if name == "torch":
        return torch_float32()
    if name == "julia":
        from attention_ports.runtimes.julia.adapter import JuliaImplementation

        return JuliaImplementation(port, precision=fmt)
    return None  # r: double only, judged as it is


def declared(port: Path) -> tuple[Implementation | None, str]:
    """A Julia port and the precision it declares; a port that cannot load is left to the run."""
    from attention_ports.runtimes.julia.adapter import JuliaImplementation

    try:
        impl = JuliaImplementation(port)
        return impl, impl.precision
    except Exception:  # the run reports it as usual, case by case, judged in float64
        return None, precision.DEFAULT
