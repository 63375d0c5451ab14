"""The index ops of a Relax module: which argument indexes which axis, and kernels that cannot
reach outside their tables.

An index op lowers to a kernel that trusts its indices: the torch importer's embedding lookup
is ``take(..., mode="fast")``, which reads ``table[i]`` for any ``i`` (one token id of
10,000,000 against a 30,522-row table is a segmentation fault), and ``index_tensor`` reads
outside its data on a negative index (torch wraps it). :func:`safe_indexing` makes every index
kernel memory-safe whatever it is called with (the VM the package hands out can be called
directly): ``take``'s ``fast`` mode becomes ``clip``, the other ops' indices are clamped into
range (``index_tensor``'s and ``index_put``'s negative ones wrapped first, torch's meaning;
``index_tensor`` becomes the ``take`` or ``gather_nd`` it is, on the clamped indices). An
index the boundary (:mod:`~tvm_ext.model_pipeline.boundary`) checked is unchanged by the
clamp, so the guarded model computes what the model computes on every valid input.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tvm_ext.base import tvm_api


@dataclasses.dataclass(frozen=True)
class IndexUse:
    """One index argument of an index op: which argument (and which field of a tuple
    argument), the extents it indexes (one, or one per entry of its last axis for the ``_nd``
    ops), and whether negative indices count from the end (torch's advanced indexing)."""

    arg: int
    field: int | None
    extents: tuple[int | None, ...]
    negatives: bool = False
    columns: bool = False  # the index's last axis holds one index per extent


def index_uses(call) -> list[IndexUse]:
    """The index arguments of a Relax call of an index op (empty for any other call)."""
    op = tvm_api.call_name(call)
    if op is None or op not in _INDEX_OPS:
        return []
    return _INDEX_OPS[op](call)


def axis_extent(dims, axis) -> tuple[int | None, int]:
    if dims is None:
        return None, 0
    if axis is None:  # take without an axis indexes the flattened tensor
        return (math.prod(dims) if None not in dims else None), 0
    axis = int(axis) % len(dims)
    return dims[axis], axis


def _single(arg: int, data_arg: int = 0, negatives: bool = False):
    def uses(call) -> list[IndexUse]:
        axis = getattr(call.attrs, "axis", None)
        extent, _ = axis_extent(tvm_api.tensor_dims(call.args[data_arg]), axis)
        return [IndexUse(arg, None, (extent,), negatives)]

    return uses


def _nd(first_axis_attr: str | None):
    def uses(call) -> list[IndexUse]:
        dims = tvm_api.tensor_dims(call.args[0])
        index_dims = tvm_api.tensor_dims(call.args[1])
        if dims is None or not index_dims or index_dims[-1] is None:
            return [IndexUse(1, None, (None,), columns=True)]
        first = int(getattr(call.attrs, first_axis_attr)) if first_axis_attr else 0
        return [IndexUse(1, None, tuple(dims[first : first + index_dims[-1]]), columns=True)]

    return uses


def _per_axis(call) -> list[IndexUse]:
    dims = tvm_api.tensor_dims(call.args[0])
    fields = getattr(call.args[1], "fields", None)
    if fields is None:  # a tuple variable, not a literal tuple: nothing to follow
        return []
    return [
        IndexUse(1, i, (None if dims is None or i >= len(dims) else dims[i],), negatives=True)
        for i in range(len(fields))
    ]


_INDEX_OPS = {
    "relax.take": _single(1),
    "relax.gather_elements": _single(1),
    "relax.scatter_elements": _single(1),
    "relax.gather_nd": _nd("batch_dims"),
    "relax.scatter_nd": _nd(None),
    "relax.index_tensor": _per_axis,
    "relax.index_put": _per_axis,
}


def index_expr(call, use: IndexUse):
    arg = call.args[use.arg]
    return arg if use.field is None else arg.fields[use.field]


def safe_indexing(mod):
    """``mod`` with every index kernel of its Relax functions kept inside its table (see the
    module's docstring); a constant index already in range is left alone."""
    return tvm_api.rewrite_calls(mod, _guarded)


def _guarded(call):
    uses = index_uses(call)
    if not uses:
        return None
    relax = tvm_api.relax
    if tvm_api.call_name(call) == "relax.take":
        if call.attrs.mode != "fast":
            return None  # clip, wrap and nan stay inside the table
        return relax.op.take(call.args[0], call.args[1], call.attrs.axis, mode="clip")
    if tvm_api.call_name(call) == "relax.index_tensor":
        return _as_gather(call, uses)
    args = list(call.args)
    changed = False
    for use in uses:
        index = index_expr(call, use)
        clamped = _clamped(index, use)
        if clamped is None:
            continue
        changed = True
        if use.field is None:
            args[use.arg] = clamped
        else:
            fields = list(args[use.arg].fields)
            fields[use.field] = clamped
            args[use.arg] = relax.Tuple(fields)
    return relax.Call(call.op, args, call.attrs) if changed else None


def _as_gather(call, uses: list[IndexUse]):
    """``index_tensor(data, (i0, ..., ik))`` as a ``take`` (one index) or a ``gather_nd`` on
    the clamped indices: TVM 0.27's FuseTIR fails on an ``index_tensor`` whose index another
    op computes (``global_name != "fused"``), the clamp included; None when an extent or an
    index's shape is symbolic (the op is then left as it is)."""
    relax = tvm_api.relax
    fields = call.args[1].fields
    shapes = [tvm_api.tensor_dims(f) for f in fields]
    if any(None in u.extents for u in uses) or any(s is None or None in s for s in shapes):
        return None
    clamped = [_clamped(f, u) for f, u in zip(fields, uses)]
    indices = [f if c is None else c for f, c in zip(fields, clamped)]
    if len(indices) == 1:
        return relax.op.take(call.args[0], indices[0], axis=0, mode="fast")  # clamped: in range
    shape = np.broadcast_shapes(*shapes)
    stacked = relax.op.stack([relax.op.broadcast_to(i, shape) for i in indices], axis=-1)
    return relax.op.gather_nd(call.args[0], stacked)


def _clamped(index, use: IndexUse):
    """``index`` clamped into [0, extent) (negatives wrapped first when they count from the
    end); None when its extent is symbolic or it is a constant already in range."""
    if None in use.extents:
        return None
    dtype = tvm_api.tensor_dtype(index)
    extents = np.asarray(use.extents if use.columns else use.extents[0], dtype=dtype)
    values = tvm_api.constant_values(index)
    if values is not None:
        low = -extents if use.negatives else 0
        if ((values >= low) & (values < extents)).all():
            return None
    relax = tvm_api.relax
    if use.negatives:
        index = relax.op.where(
            relax.op.less(index, relax.const(0, dtype)),
            relax.op.add(index, relax.const(extents, dtype)),
            index,
        )
    low = relax.const(0, dtype)
    return relax.op.minimum(relax.op.maximum(index, low), relax.const(extents - 1, dtype))


__all__ = ["IndexUse", "axis_extent", "index_expr", "index_uses", "safe_indexing"]
