"""Optimizers in float64 NumPy: one step of AdamW (``adamw_step``), as ``torch.optim.AdamW``.

One parameter array of any shape, with its gradient and the two moment estimates before the step
(``m``, ``v``: all four of one shape). ``step`` is the step's number t >= 1, a count (torch's
``state["step"]`` after its increment), the same in every language. The update is Loshchilov and
Hutter's decoupled weight decay with bias-corrected moments, written as the contract writes it::

    m     = beta1 m + (1 - beta1) grad
    v     = beta2 v + (1 - beta2) grad^2
    param = param (1 - lr weight_decay) - lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)

Plain Adam is ``weight_decay = 0``. The defaults are torch.optim.AdamW's. float32 arrays stay
float32 (the float32 tier runs the reference in it); the scalars are Python floats throughout.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from attention_ports.reference.validate import check_finite, float_dtype

DEFAULT_LR = 1e-3
DEFAULT_BETA1 = 0.9
DEFAULT_BETA2 = 0.999
DEFAULT_EPS = 1e-8
DEFAULT_WEIGHT_DECAY = 0.01


class AdamWStep(NamedTuple):
    param: np.ndarray
    m: np.ndarray
    v: np.ndarray


def _scalar(value: object, name: str, low: float, high: float | None = None) -> float:
    """A finite real in [low, high) (high None: no upper limit), named in the error."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"adamw_step: {name} must be a number; got {value!r}")
    x = float(value)
    if not math.isfinite(x) or x < low or (high is not None and x >= high):
        where = f"in [{low:g}, {high:g})" if high is not None else f">= {low:g}"
        raise ValueError(f"adamw_step: {name} must be a finite number {where}; got {value!r}")
    return x


def check_step(step: object) -> int:
    """The step's number: an integer t >= 1 (a float holding an integer is accepted)."""
    if isinstance(step, bool) or not isinstance(step, (int, float, np.integer, np.floating)):
        raise ValueError(f"adamw_step: step must be an integer >= 1 (the step's number, a count); got {step!r}")
    if not float(step).is_integer() or step < 1:
        raise ValueError(f"adamw_step: step must be an integer >= 1 (the step's number, a count); got {step!r}")
    return int(step)


def adamw_step(
    param: np.ndarray,
    grad: np.ndarray,
    m: np.ndarray,
    v: np.ndarray,
    step: int,
    lr: float | None = None,
    beta1: float | None = None,
    beta2: float | None = None,
    eps: float | None = None,
    weight_decay: float | None = None,
) -> AdamWStep:
    """One AdamW step: the updated ``param`` and the moments ``m``, ``v`` after it."""
    dtype = float_dtype(param)
    arrays = {name: np.asarray(a, dtype=dtype) for name, a in (("param", param), ("grad", grad), ("m", m), ("v", v))}
    shape = arrays["param"].shape
    for name, a in arrays.items():
        if a.shape != shape:
            sizes = ", ".join(f"{n} {x.shape}" for n, x in arrays.items())
            raise ValueError(f"adamw_step: param, grad, m and v must have one shape; got {sizes}")
        check_finite(a, name)
    if np.any(arrays["v"] < 0):
        raise ValueError("adamw_step: v (the second moment, a mean of squares) must be >= 0")
    t = check_step(step)
    lr = _scalar(DEFAULT_LR if lr is None else lr, "lr", 0.0)
    beta1 = _scalar(DEFAULT_BETA1 if beta1 is None else beta1, "beta1", 0.0, 1.0)
    beta2 = _scalar(DEFAULT_BETA2 if beta2 is None else beta2, "beta2", 0.0, 1.0)
    eps = _scalar(DEFAULT_EPS if eps is None else eps, "eps", 0.0)
    weight_decay = _scalar(DEFAULT_WEIGHT_DECAY if weight_decay is None else weight_decay, "weight_decay", 0.0)
    p, g = arrays["param"], arrays["grad"]
    m_new = beta1 * arrays["m"] + (1.0 - beta1) * g
    v_new = beta2 * arrays["v"] + (1.0 - beta2) * (g * g)
    m_hat = m_new / (1.0 - beta1**t)
    v_hat = v_new / (1.0 - beta2**t)
    p_new = p * (1.0 - lr * weight_decay) - lr * m_hat / (np.sqrt(v_hat) + eps)
    return AdamWStep(p_new, m_new, v_new)
