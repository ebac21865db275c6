"""The bounds' rules evaluated at a format's constants (issue 17).

The error analysis in ``attention_ports.truth.bounds`` is written for a general unit roundoff and
reads its parameters (``bounds.U`` and the rest) at call time, so :func:`rules` is the whole of a
format's analysis: the same rules, the format's constants (``spec.precision.FORMATS``).
:func:`constants` is what a tier's manifest records of them (``truth.bounds``).

Layer: truth. Imports ``spec`` (the format table) and the truth engine.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import numpy as np
from flint import arb

from attention_ports.spec.precision import STORAGE_POINTS, Format
from attention_ports.truth import bounds
from attention_ports.truth import engine as truth

_RULE_PARAMETERS = (
    "U",
    "C_EXP",
    "RESOLUTION",
    "UNDERFLOW",
    "MAX_FIRST_ORDER",
    "NEGLIGIBLE_LOGIT",
    "STORAGE_U",
    "STORAGE_TINY",
    "ARITH_TINY",
    "MAX_FINITE",
)


@contextlib.contextmanager
def rules(fmt: Format) -> Iterator[None]:
    """Evaluate ``attention_ports.truth.bounds``'s rules for ``fmt`` inside the block.

    The rules read their parameters at call time, so this is the whole of a format's analysis:
    the same rules, the format's constants. The truth's in-process memo is set aside for the
    block (a float32 bound must never be served for a float64 call, or the reverse). Not for
    threads: generation runs one case at a time in a process.
    """
    saved = {name: getattr(bounds, name) for name in _RULE_PARAMETERS}
    memo = truth._MEMO
    try:
        bounds.U = arb(fmt.u)
        bounds.C_EXP = fmt.c_exp
        bounds.RESOLUTION = arb(2.0**fmt.resolution_exp)
        bounds.UNDERFLOW = arb(2.0**fmt.underflow_exp)
        bounds.MAX_FIRST_ORDER = arb(2.0**fmt.max_first_order_exp)
        bounds.NEGLIGIBLE_LOGIT = fmt.negligible_logit
        # mixed precision: the rounding points to storage (bounds.py, "Mixed precision")
        bounds.STORAGE_U = arb(fmt.storage.u) if fmt.storage is not None else None
        bounds.STORAGE_TINY = arb(fmt.storage.tiny) * fmt.subnormal_roundings if fmt.storage is not None else arb(0)
        # storage = accumulation (float16): every operation's rounding may land in the subnormals
        bounds.ARITH_TINY = arb(fmt.storage.tiny) if fmt.storage is not None and fmt.dtype == np.float16 else arb(0)
        bounds.MAX_FINITE = arb(fmt.max_finite)
        truth._MEMO = {}
        yield
    finally:
        for name, value in saved.items():
            setattr(bounds, name, value)
        truth._MEMO = memo


def constants(fmt: Format) -> dict[str, Any]:
    """The manifest's record of ``fmt``'s constants (``truth.bounds``)."""
    return {
        **bounds.CONSTANTS,
        "u": f"2^-{fmt.mantissa_bits}",
        "C_EXP": fmt.c_exp,
        "resolution": f"2^{fmt.resolution_exp}",
        "underflow": f"2^{fmt.underflow_exp}",
        "max_first_order": f"2^{fmt.max_first_order_exp}",
        "negligible_logit": fmt.negligible_logit,
        **(
            {
                "storage": fmt.storage.name,
                "u_storage": f"2^-{fmt.storage.mantissa_bits}",
                "tau_storage": f"{fmt.subnormal_roundings} x 2^{fmt.storage.min_subnormal_exp - 1}",
                "rounded_to_storage": {
                    "every operation": ["inputs", "outputs"],
                    **{op: list(points) for op, points in STORAGE_POINTS.items() if points},
                },
            }
            if fmt.storage is not None
            else {}
        ),
    }
