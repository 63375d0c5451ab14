"""A transpose moved before the reshape it follows, where the reshape only merges (or splits)
leading axes the transpose leaves in place.

Grouped-query attention repeats each key head (``repeat_kv``: expand, broadcast, then a
reshape merging the key heads with their repeats) and transposes the keys for the scores
matmul. With a symbolic sequence length the reshape is never fused (its indices divide by
the length, which ``AnnotateTIROpPattern`` calls opaque), so the repeat and the transpose
were two kernels, the repeated keys written and read once more between them. Transposed
first, the expand, broadcast and transpose fuse into one kernel and the reshape is a view:
what the static build gets by fusing all four. The values are the same: the transpose moves
only axes the reshape keeps whole, so it commutes with it.
"""

from __future__ import annotations

from tvm_ext.base import tvm_api


def transposes_before_reshapes(mod):
    """``mod`` with ``permute_dims(reshape(x))`` written ``reshape(permute_dims(x))`` where the
    reshape's shape is symbolic and the two commute (see the module docstring)."""
    return tvm_api.rewrite_calls(mod, _moved, with_bindings=True)


def _moved(call, value_of):
    if tvm_api.call_name(call) != "relax.permute_dims" or call.attrs.axes is None:
        return None
    reshaped = value_of(call.args[0])
    if tvm_api.call_name(reshaped) != "relax.reshape":
        return None
    source = reshaped.args[0]
    inner = tvm_api.shape_values(source)
    outer = tvm_api.shape_values(reshaped)
    axes = [int(a) for a in call.attrs.axes]
    if inner is None or outer is None or None not in tvm_api.tensor_dims(reshaped):
        return None  # a static reshape FuseOps fuses anyway
    kept = _kept_leading(inner, outer, axes)
    if kept is None:
        return None
    merged_in, merged_out = kept
    inner_axes = list(range(merged_in)) + [merged_in + a - merged_out for a in axes[merged_out:]]
    transposed = tvm_api.relax.op.permute_dims(source, inner_axes)
    return tvm_api.relax.op.reshape(transposed, [outer[a] for a in axes])


def _kept_leading(inner, outer, axes):
    """(leading input axes, leading output axes) the reshape merges or splits, when every
    later axis passes through it unchanged and the transpose keeps the leading output axes
    in place and permutes only the later ones; None otherwise."""
    for merged_out in range(len(outer)):  # the longest tail first
        merged_in = len(inner) - (len(outer) - merged_out)
        if merged_in < 0:
            continue
        pairs = zip(inner[merged_in:], outer[merged_out:])
        if all(tvm_api.same_structure(a, b) for a, b in pairs):
            return (merged_in, merged_out) if axes[:merged_out] == list(range(merged_out)) else None
    return None


__all__ = ["transposes_before_reshapes"]
