"""A few AdamW steps of the GPT in float64 NumPy: ``gpt_train``.

``steps`` times, on the same batch: the loss and every parameter's gradient (``gpt_grads``), then
one ``adamw_step`` on every parameter (ports/CONTRACT.md, "gpt_train"). The moments start at 0 and
are carried from step to step, step t's bias corrections use t (1, 2, ...), the weight decay is
decoupled and applies to every parameter (``torch.optim.AdamW(model.parameters())``), and Adam's
eps is torch's 1e-8 (``eps`` is the layer norms'). Returns each step's loss, computed before the
step's update, and the final parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from attention_ports.reference.optim import DEFAULT_EPS, adamw_step
from attention_ports.reference.transformer import GPT_PARAMS
from attention_ports.reference.transformer_grads import gpt_grads

ADAM_EPS = DEFAULT_EPS  # Adam's eps: torch's default (the option eps is the layer norms')


def check_steps(steps: object) -> int:
    """The number of steps: an integer >= 1 (a float holding an integer is accepted)."""
    ok = not isinstance(steps, bool) and isinstance(steps, (int, float, np.integer, np.floating))
    if not ok or not float(steps).is_integer() or steps < 1:
        raise ValueError(f"gpt_train: steps must be an integer >= 1 (the number of AdamW steps); got {steps!r}")
    return int(steps)


def gpt_train(
    tokens: np.ndarray,
    targets: np.ndarray,
    params: Mapping[str, Any],
    num_heads: int,
    steps: int,
    ignore_index: int | np.ndarray | None = None,
    eps: float = 1e-5,
    approximate: str = "none",
    lr: float | None = None,
    beta1: float | None = None,
    beta2: float | None = None,
    weight_decay: float | None = None,
) -> dict[str, Any]:
    """``{"losses": (steps,), "params": {name: array shaped as params[name]}}``."""
    n_steps = check_steps(steps)
    p = {k: np.array(params[k]) for k in GPT_PARAMS if k in params}  # gpt_grads names what is missing
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    losses = []
    for t in range(1, n_steps + 1):
        step = gpt_grads(tokens, targets, p, num_heads, ignore_index, eps, approximate)
        losses.append(step["loss"])
        for k in GPT_PARAMS:  # every gradient first (above), then every update
            p[k], m[k], v2[k] = adamw_step(
                p[k], step["grads"][k], m[k], v2[k], t, lr, beta1, beta2, ADAM_EPS, weight_decay
            )
    return {"losses": np.array(losses, dtype=p["wte"].dtype), "params": p}
