"""The one interface every implementation (reference, torch, R, Julia, a user's port) implements.

Arrays cross this interface in the *reference layout*: tokens are rows (n x d), projection
weights are (d_in x d_out) so that ``x @ w`` projects, biases are 1-D, per-head weights are
(h, n_q, n_k). An adapter whose language prefers another layout converts on its side of the seam;
that conversion is exactly what port verification has to exercise.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

import numpy as np

from attention_ports.spec.portview import PortView

Arrays = dict[str, np.ndarray]


class OperationMissing(Exception):
    """The implementation does not define this operation (a partial port): status ``missing``."""


class ImplementationError(Exception):
    """The implementation raised while running a case: status ``error``.

    ``message`` carries the foreign language's own error text (R's condition message and call,
    Julia's exception and backtrace) so a user can act on it without re-running anything.
    """


class ImplementationUnavailable(Exception):
    """The runtime behind an implementation (R, Julia, torch) cannot be started on this machine."""


class Implementation(abc.ABC):
    """One implementation under test.

    ``run`` takes the operation name (a reference function name, e.g. ``"self_attention"``),
    the case's input arrays (absent optional inputs such as biases or a mask are simply absent
    from the mapping) and its scalar options (``scale``, ``num_heads``, ...), and returns the
    named outputs in the reference layout.
    """

    name: str
    # The convention for a query whose mask removes every key (ports/CONTRACT.md, "Declaring what a
    # port offers"): "zeros", "nan" or "uniform". The reference's is "zeros"; a port declares its own.
    masked_query: str = "zeros"
    # The rotary pairing it implements (attention_ports/spec/pairing.py): a port declares one and
    # takes no ``pairing`` argument; None (the reference, torch) takes the case's ``pairing`` option.
    rope_pairing: str | None = None
    # What the implementation printed during its last ``run`` (a port's captured stdout and stderr).
    last_output: str = ""
    # Seconds the port's own function took in its last successful ``run``, timed inside its worker
    # (protocol reply 'T'); None for in-process implementations and when not reported. What
    # `attention-ports bench` calls compute; the rest of a call is the transport's.
    last_seconds: float | None = None

    def masked_query_for(self, op: str) -> str:
        """The convention this implementation follows for ``op``'s fully masked queries.

        One for every operation (``masked_query``) unless an implementation's operations differ,
        as torch's do (its SDPA gives zeros, its nn.MultiheadAttention NaN): it says so per operation.
        """
        return self.masked_query

    @abc.abstractmethod
    def run(self, op: str, inputs: Mapping[str, np.ndarray], options: Mapping[str, Any]) -> Arrays:
        """Run one operation; raise OperationMissing / ImplementationError, never return junk.

        A result may lack some of the operation's outputs (the judge fails each absent one and
        judges the others), but not all of them: that is an ImplementationError."""

    def load_failure(self) -> str | None:
        """Why the port can never run here (its load error: a syntax error, a refused declaration),
        once known; None otherwise. The runner then says it once, not once per case."""
        return None

    def view(self, op: str, output: str) -> PortView | None:
        """How the port sees ``output`` of ``op`` (its name, layout, index base) for messages in its
        own terms; None when its layout and indexing are the reference's (NumPy, 0-based)."""
        return None

    def describe(self) -> str:
        """One line for reports: the runtime and where the port came from."""
        return self.name

    def close(self) -> None:  # noqa: B027 (optional hook: most implementations hold nothing)
        """Release the runtime (worker processes, interpreters); safe to call twice."""

    def __enter__(self) -> Implementation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
