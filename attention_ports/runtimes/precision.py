"""The built-in implementations run in a lower precision, for ``verify --precision P`` (issue 17).

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

Mixed precision (``"bfloat16/float32"``, ``"float16/float32"``: storage / accumulation):

* ``reference``: the NumPy reference in float32 with the declared rounding points applied
  (attention_ports/truth/bounds.py, "Mixed precision"): its inputs are storage values already,
  its weights are rounded to storage before the product with V (done here, in float32, after the
  reference's own float32 softmax), and every output is rounded to storage
  (``spec.precision.round_to``: exact);
* ``torch``: ``torch.softmax`` and ``F.scaled_dot_product_attention`` on bfloat16 / float16 CPU
  tensors. torch's CPU kernels compute such tensors in float32 internally and round the results:
  judged on what they return;
* ``julia``: our port sent Float32 arguments holding the storage values (Julia 1.5 has no
  BFloat16 without a package): a float32 computation, which passes a mixed tier (it is the
  tier's arithmetic without the rounding points);
* ``r``: double, as it is.

float16 (storage = accumulation, ``"float16"``): the reference and torch as for
``"float16/float32"`` (float32 inside, rounded to float16: more accurate than float16 arithmetic,
which passes its tier), and our Julia port sent Float16 arguments: Julia rounds every Float16
operation to float16, the tier's own arithmetic.

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
from attention_ports.spec.precision import round_to


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


def _tier_op(op: str, impl: str, fmt: str = "float32") -> None:
    ops = precision.tier_ops(precision.get(fmt))
    if op not in ops:
        raise OperationMissing(f"{op} is not in the {fmt} tier of {impl} (its operations: {', '.join(ops)})")


def _reference_in_float32(
    op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]
) -> tuple[dict[str, np.ndarray], Any]:
    """The NumPy reference given float32 arrays (and Python floats: weak scalars): its arguments and result."""
    opts = {k: float(v) if isinstance(v, float) else v for k, v in options.items()}
    args = _storage(inputs, np.float32)
    return args, call_reference(op, args, opts)


def reference_in_float32(op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
    """The NumPy reference given float32 arrays, for any operation (a tier's or not), widened to
    float64: what float32 arithmetic does on a case, which a diagnosis compares a port's error with
    where no float32 bound is certified (attention_ports/judge/diagnose.py, the precision line)."""
    if op == "sinusoidal_positions":  # no array input, so the reference computes it in float64
        return {"table": _sinusoidal_in_float32(options).astype(np.float64)}
    return _widened(_reference_in_float32(op, inputs, options)[1])


def _sinusoidal_in_float32(options: Mapping[str, Any]) -> np.ndarray:
    """The reference's sinusoidal table with every operation in float32 (the base converted first)."""
    f32 = np.float32
    n, d = int(options["n"]), int(options["d"])
    base = f32(options.get("base") or 10000.0)
    theta = f32(1) / np.power(base, np.arange(0, d, 2, dtype=f32) / f32(d))
    angles = np.outer(np.arange(n, dtype=f32), theta)
    table = np.empty((n, d), dtype=f32)
    table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles)
    return table


class Float32Reference(ReferenceImplementation):
    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        _tier_op(op, "reference")
        return _widened(_reference_in_float32(op, inputs, options)[1])

    def describe(self) -> str:
        return super().describe() + ", run in float32"


class MixedReference(ReferenceImplementation):
    """The NumPy reference in float32 with a mixed format's rounding points to storage."""

    def __init__(self, fmt: precision.Format) -> None:
        super().__init__()
        assert fmt.storage is not None
        self.fmt = fmt

    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        _tier_op(op, "reference", self.fmt.name)
        args, out = _reference_in_float32(op, inputs, options)
        storage = self.fmt.storage
        assert storage is not None
        if op == "scaled_dot_product_attention":
            # the flash kernels' rounding point: the weights stored before the product with V
            w = round_to(np.asarray(out["weights"], dtype=np.float64), storage).astype(np.float32)
            out = {"weights": w, "output": w @ args["v"]}
        return {k: round_to(np.asarray(v, dtype=np.float64), storage) for k, v in out.items()}

    def describe(self) -> str:
        return super().describe() + f", run in float32 with values stored in {self.fmt.storage.name}"


def torch_mixed(fmt: precision.Format) -> Implementation:
    """torch on CPU tensors of ``fmt``'s storage dtype (bfloat16 or float16)."""
    from attention_ports.runtimes import torch_impl  # torch is optional: imported only when asked for

    torch = torch_impl.torch
    assert fmt.storage is not None
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[fmt.storage.name]

    def tensor(a: np.ndarray) -> Any:
        # a storage value in float64 converts to the storage dtype exactly (the tier's inputs are)
        return torch_impl._t(a).to(dtype)

    class MixedTorch(torch_impl.TorchImplementation):
        def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
            _tier_op(op, "torch", fmt.name)
            return _widened(super().run(op, inputs, options))

        def _op_softmax(self, inputs, options):
            return {"y": torch.softmax(tensor(inputs["x"]), dim=-1).float()}

        def _op_scaled_dot_product_attention(self, inputs, options):
            mask = inputs.get("mask")
            if mask is not None:
                mask = torch.from_numpy(np.ascontiguousarray(mask)) if mask.dtype == np.bool_ else tensor(mask)
            q, k, v = (tensor(inputs[n]) for n in "qkv")
            out, w = torch_impl._sdpa(q, k, v, mask, options.get("scale"))
            return {"output": out.float(), "weights": w.float()}

        # The storage tiers' other operations: the float64 oracle's own code on storage tensors
        # (torch_impl's _t converts to a torch dtype), torch's CPU kernels for them (measured:
        # layer_norm, rms_norm, gelu and linear compute in float32 and round their result once;
        # cross_entropy stores its log_softmax; AdamW stores every elementwise operation's result;
        # scaled_dot_product_attention stores the weights before V), but the positions below.
        def _op_sinusoidal_positions(self, inputs, options):
            # a buffer made in float32, then cast with the model (``.to(dtype)``)
            return {"table": in_float32._op_sinusoidal_positions(inputs, options)["table"].to(dtype).float()}

        def _op_rotary_embedding(self, inputs, options):
            x = tensor(inputs["x"])
            if (options.get("pairing") or "halves") != "halves":
                # Meta's Llama: the complex product in float32, then ``type_as(x)``
                return {"output": in_float32._op_rotary_embedding(inputs, options)["output"].to(dtype).float()}
            # Hugging Face's Llama: cos and sin made in float32, cast to x's dtype, rotate_half in it
            n, d = x.shape
            base = float(options.get("base") or 10000.0)
            pos = torch.arange(n, dtype=torch.float32)
            if "positions" in inputs:
                pos = torch.from_numpy(np.ascontiguousarray(inputs["positions"], dtype=np.float32))
            inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            emb = torch.cat((torch.outer(pos, inv_freq),) * 2, dim=-1)
            cos, sin = emb.cos().to(dtype), emb.sin().to(dtype)
            rotated = torch.cat((-x[:, d // 2 :], x[:, : d // 2]), dim=-1)
            return {"output": (x * cos + rotated * sin).float()}

        def describe(self) -> str:
            return super().describe().replace("(float64, CPU)", f"({fmt.storage.name} tensors, CPU)")

    in_float32 = torch_impl.TorchImplementation(np.float32)
    in_storage = torch_impl.TorchImplementation(dtype)

    def on_storage(name: str) -> Any:
        def op(self: Any, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> dict[str, Any]:
            return {k: v.float() for k, v in getattr(in_storage, name)(inputs, options).items()}

        return op

    for op_name in STORAGE_TORCH_OPS:
        setattr(MixedTorch, f"_op_{op_name}", on_storage(f"_op_{op_name}"))
    return MixedTorch()


# The storage tiers' operations torch runs with the float64 oracle's code on storage tensors
# (torch_mixed; softmax, SDPA and the positions are written there).
STORAGE_TORCH_OPS = (
    "layer_norm",
    "rms_norm",
    "gelu",
    "feed_forward",
    "decoder_block",
    "gpt_forward",
    "lm_loss",
    "adamw_step",
)


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
    mixed = precision.get(fmt).storage is not None
    if name == "reference":  # float16: float32 arithmetic stored in float16 (the reference keeps
        # float32 or float64 only), more accurate than float16's, which passes its tier
        return MixedReference(precision.get(fmt)) if mixed else Float32Reference()
    if name == "torch":  # float16: torch's float16 CPU tensors (computed in float32, stored in float16)
        return torch_mixed(precision.get(fmt)) if mixed else torch_float32()
    if name == "julia":
        from attention_ports.runtimes.julia.adapter import JuliaImplementation

        return JuliaImplementation(port, precision=fmt)
    if port is not None and name not in ("r", "reference", "torch"):  # a port run as a command
        from attention_ports.runtimes.command.adapter import CommandImplementation

        return CommandImplementation(name, port, precision=fmt)
    return None  # r: double only, judged as it is


def declares_precision(name: str) -> bool:
    """Whether a ``--port`` under ``name`` is judged in the precision it declares (Julia, a command)."""
    return name not in ("r", "reference", "torch")


def declared(port: Path, name: str = "julia") -> tuple[Implementation | None, str]:
    """A Julia port (or a port run as a command under ``name``) and the precision it declares; a
    port that cannot load is left to the run."""
    try:
        if name == "julia":
            from attention_ports.runtimes.julia.adapter import JuliaImplementation

            impl: Any = JuliaImplementation(port)
        else:
            from attention_ports.runtimes.command.adapter import CommandImplementation

            impl = CommandImplementation(name, port)
        return impl, impl.precision
    except Exception:  # the run reports it as usual, case by case, judged in float64
        return None, precision.DEFAULT
