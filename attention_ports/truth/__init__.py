"""The truth: certified expected values and the error bound a correct float64 result meets.

The orchestration (``engine``: a case's exact outputs, correctly rounded, with their bounds), the
ball-arithmetic graphs (``exact``, on ``arbmat``'s matrices), the error analysis (``bounds``, and
``scale_bounds`` for the scale tier's rows evaluated in float64) and certified rounding
(``rounding``). May import ``core``, ``reference`` and ``spec`` only.
"""
