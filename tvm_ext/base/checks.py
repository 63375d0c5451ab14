"""Argument checks every layer shares, each raising a ``ValueError`` that names the argument."""

from __future__ import annotations

import numbers
from typing import Sequence

from tvm_ext.base.errors import InputError

# {symbolic dimension's name: (lowest or None, highest or None)}, as tvm_api.symbolic_bounds
# reads them from a Relax function.
Bounds = dict


def checked_int(name: str, value, minimum: int = 1, note: str = "") -> int:
    """``value`` as an int when it is an integer (not a bool) of at least ``minimum``; else a
    ``ValueError`` naming ``name`` (and ``note``, what the smallest value means, when given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        want = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name}={value!r} must be {want}" + (f" ({note})" if note else ""))
    return int(value)


def bind_symbolic(
    model: str,
    names: Sequence[str],
    dims: Sequence[Sequence],
    shapes: Sequence[Sequence[int]],
    bounds: Bounds | None = None,
) -> dict[str, int]:
    """{symbolic name: its length in one call}, given each input's declared ``dims`` (an int,
    a symbolic dimension's name, or None for an expression) and actual ``shapes``. Raises
    InputError when two inputs (or two axes) give one name two lengths, or a length lies
    outside the name's declared ``bounds``. Fixed dimensions are not checked here."""
    bounds = bounds or {}
    bound: dict[str, tuple[int, str, int]] = {}
    for name, declared, shape in zip(names, dims, shapes):
        for axis, (dim, length) in enumerate(zip(declared, shape)):
            if not isinstance(dim, str):
                continue
            if dim in bound and bound[dim][0] != length:
                first, other, at = bound[dim]
                raise InputError(
                    f"{model}: input '{name}' has {dim}={length} (axis {axis}) but input "
                    f"'{other}' has {dim}={first} (axis {at}); they must agree",
                    input=name,
                )
            bound.setdefault(dim, (length, name, axis))
            low, high = bounds.get(dim, (None, None))
            if (low is not None and length < low) or (high is not None and length > high):
                raise InputError(
                    f"{model}: input '{name}' has {dim}={length} (axis {axis}), outside the "
                    f"range the model was compiled for [{low}, {high}]",
                    input=name,
                    value=length,
                    valid=(low, high),
                )
    return {dim: length for dim, (length, _, _) in bound.items()}


__all__ = ["Bounds", "bind_symbolic", "checked_int"]
