"""How an implementation sees one of its outputs: the name it gives it, its layout, its index base.

Failure messages speak the port author's language first. A Julia port's attention weights are
key x query and indexed from 1, so the reference's weights[2, 0] is the port's ``weights[1, 3]``;
an R port keeps the reference layout but counts from 1 and nests results in lists (``grads$w_q``).
The axis permutation itself belongs to the adapter (attention_ports/runtimes/julia/adapter.py owns Julia's, driven by
the roles of attention_ports/spec/ops.py): a view only applies the permutation it is given.

Implementations whose language is the reference's (the NumPy reference, torch) have no view:
their messages are already in the reference layout, 0-based.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from attention_ports.spec.ops import AXIS_NAMES, Role


def identity(ndim: int) -> tuple[int, ...]:
    return tuple(range(ndim))


@dataclass(frozen=True)
class PortView:
    language: str  # "Julia", "R": how messages name the port's layout
    name: str  # the output as the port writes it: weights, grads$w_q (R), grads.w_q (Julia)
    role: Role | None  # the output's layout role (ops.py); None when the operation declares none
    # rank -> axes such that port_array = reference_array.transpose(axes): the adapter's own rule
    permutation: Callable[[int], tuple[int, ...]] = identity
    base: int = 1  # the index of a first element

    def axes(self, ndim: int) -> tuple[int, ...]:
        return tuple(self.permutation(ndim))

    def shape(self, reference_shape: Sequence[int]) -> tuple[int, ...]:
        return tuple(int(reference_shape[a]) for a in self.axes(len(reference_shape)))

    def index(self, reference_index: Sequence[int]) -> tuple[int, ...]:
        return tuple(int(reference_index[a]) + self.base for a in self.axes(len(reference_index)))

    def to_port(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array, self.axes(array.ndim))

    def axis_names(self, ndim: int) -> tuple[str, ...] | None:
        """What each of the port's axes indexes (e.g. key, query), when the role fixes it."""
        names = AXIS_NAMES.get(self.role) if self.role is not None else None
        if names is None or len(names) != ndim:
            return None
        return tuple(names[a] for a in self.axes(ndim))

    def format_shape(self, port_shape: Sequence[int]) -> str:
        """A shape as the language prints it: Julia's size() tuple, R's dim."""
        dims = [int(d) for d in port_shape]
        if self.language == "R":
            if not dims:
                return "a single number"
            return f"length {dims[0]}" if len(dims) == 1 else " x ".join(map(str, dims))
        return "(" + ", ".join(map(str, dims)) + ("," if len(dims) == 1 else "") + ")"

    def layout(self, reference_shape: Sequence[int]) -> str:
        """The port-layout shape with its axis names: ``(2, 7) (key x query)``."""
        text = self.format_shape(self.shape(reference_shape))
        names = self.axis_names(len(reference_shape))
        return f"{text} ({' x '.join(names)})" if names and len(names) > 1 else text

    def at(self, reference_index: Sequence[int]) -> str:
        """An element as the port indexes it: ``weights[1, 3]``."""
        if len(reference_index) == 0:
            return self.name
        return f"{self.name}[{', '.join(map(str, self.index(reference_index)))}]"

    def rule(self, ndim: int) -> str:
        """The contract's layout rule for this output in the port's language (ports/CONTRACT.md)."""
        return layout_rule(self.language, self.name, self.axis_names(ndim))


def layout_rule(language: str, name: str, axis_names: Sequence[str] | None) -> str:
    """``Julia layout: weights is key x query, one query per column``: a column-major language
    reads a matrix by columns, R and NumPy by rows (ports/CONTRACT.md, "Layouts")."""
    if not axis_names:
        return f"{language} layout of {name}"
    text = f"{language} layout: {name} is {' x '.join(axis_names)}"
    if len(axis_names) == 2:
        text += f", one {axis_names[1]} per column" if language == "Julia" else f", one {axis_names[0]} per row"
    return text
