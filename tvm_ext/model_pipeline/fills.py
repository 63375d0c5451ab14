"""A tensor of one repeated value that a ``where`` selects from, written as a scalar.

``scaled_dot_product_attention`` decomposes (``torch.export``) into ``_safe_softmax``: the
softmax, then ``where(all(x == -inf, dim), zeros_like(p), p)``, so that a row masked out
entirely gives zeros instead of NaN. The ``zeros_like`` folds into a constant the size of the
probabilities, bound as a weight: every attention's softmax kernel read a tensor of zeros as
large as its scores (ViT-B/16: 12 x 197 x 197, 1.9 MB a layer, 22 MB a run) and the model
carried them. ``where`` broadcasts its operands, so a scalar of that value selects the same.

The guard's condition is left as it is: ``max(x, dim) == -inf`` is not the same test in
TVM, whose maximum starts from the dtype's lowest finite value (a row all ``-inf`` has the
maximum ``-3.4e38``).
"""

from __future__ import annotations

import numpy as np

from tvm_ext.base import tvm_api


def fills_as_scalars(mod):
    """``mod`` with each operand of a ``where`` that holds one repeated value (a
    ``zeros_like``, ``ones_like``, ``full_like`` or a constant of equal elements) written as a
    scalar of that value, where the other two operands alone broadcast to the result's shape
    (see the module docstring); anything else kept."""

    def rewritten(call, value_of):
        if tvm_api.call_name(call) != "relax.where":
            return None
        out = tvm_api.tensor_dims(call)
        if out is None or None in out:
            return None
        args, changed = list(call.args), False
        for i in (1, 2):
            fill = _filled_with(args[i], value_of)
            others = [a for j, a in enumerate(args) if j != i]
            if fill is None or _broadcast(others) != out:
                continue
            args[i], changed = tvm_api.relax.const(fill, tvm_api.tensor_dtype(args[i])), True
        return tvm_api.relax.op.where(*args) if changed else None

    return tvm_api.rewrite_calls(mod, rewritten, with_bindings=True, prune=True)


def _filled_with(expr, value_of) -> float | bool | None:
    """The one value of ``zeros_like`` / ``ones_like`` / ``full_like(_, c)`` / a constant of
    equal elements (not already a scalar), None for anything else."""
    values = tvm_api.constant_values(expr)
    if values is not None:
        flat = values.reshape(-1)
        return flat[0].item() if flat.size > 1 and np.all(flat == flat[0]) else None
    bound = value_of(expr)
    name = tvm_api.call_name(bound)
    if name in ("relax.zeros_like", "relax.ones_like"):
        return 0 if name == "relax.zeros_like" else 1
    if name == "relax.full_like":
        values = tvm_api.constant_values(bound.args[1])
        return values.reshape(-1)[0].item() if values is not None and values.size == 1 else None
    return None


def _broadcast(args) -> tuple | None:
    """The static shape ``args`` broadcast to (numpy's rule), None when one is not static."""
    shapes = [tvm_api.tensor_dims(a) for a in args]
    if any(s is None or None in s for s in shapes):
        return None
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


__all__ = ["fills_as_scalars"]
