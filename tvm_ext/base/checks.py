"""Argument checks every layer shares, each raising a ``ValueError`` that names the argument."""

from __future__ import annotations

import numbers


def checked_int(name: str, value, minimum: int = 1, note: str = "") -> int:
    """``value`` as an int when it is an integer (not a bool) of at least ``minimum``; else a
    ``ValueError`` naming ``name`` (and ``note``, what the smallest value means, when given)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        want = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name}={value!r} must be {want}" + (f" ({note})" if note else ""))
    return int(value)


__all__ = ["checked_int"]
