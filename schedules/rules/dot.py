"""Dot products: a contraction whose long operand is contiguous along its reduction only.

A decode step's attention scores (``einsum("kgd,nkd->kgn", q, keys)``: 3 query heads a key
head against ``n`` cached keys) read the keys in place, ``n`` rows of 64 floats a head, each
row contiguous along the reduction ``d``; the output's unit-stride axis ``n`` strides them
by a row. The contraction rule vectorizes along the output's axis, so it copied the keys
twice a call (padded to whole tiles, then packed transposed) before its micro-kernel: 0.5 ms
a layer for 1 MB of keys at 1024 cached tokens (Xeon, 2 threads). Here the reduction is
vectorized instead: a row of the operand is loaded once, in whole vectors, and feeds one FMA
into a vector partial for each output row that shares it; the partials are summed across
the lanes when the row ends. The operand is read once, in place, in parallel over its rows.

Takes: one reduction block (its element-wise neighbours inlined, as the contraction rule
does; no padding stage) with a float accumulator and one reduction iterator, whose operand
read along the output's last axis is an activation (a weight is packed once, at compile time,
where the contraction rule wins) whose last dimension is that reduction iterator alone, of
whole vectors; and whose output rows that share the operand (the spatial iterators it does
not use) are at most ``MAX_ROWS``. Not mine otherwise: with many rows a packed copy is read
by all of them and the contraction rule's register tile wins (a prefill's scores).
"""

from __future__ import annotations

import math

from tvm_ext.schedules.common import lanes_for, parallel_pays
from tvm_ext.schedules.rules.axes import find_axes, static_extents, streams, vars_of, weight_names
from tvm_ext.schedules.rules.fallback import work
from tvm_ext.schedules.rules.reduction_shape import one_reduction
from tvm_ext.schedules.rules.rows import REDUCE

from tvm_ext.base import tvm_api

NAME = "dot"

# The most output rows one row of the operand feeds (each holds a vector partial in a
# register): Llama's 3 query heads a key head, a multi-head decode's 1.
MAX_ROWS = 8


def schedule_func(func, target):
    sch = tvm_api.Schedule(func)
    shape = one_reduction(sch)
    if shape is None or shape[0] or len(shape[2]) > 1:
        return None  # padding, or an epilogue broadcast: the contraction rule's
    _, main, epilogue = shape
    stmt = sch.get(main.block_rv)
    output = stmt.writes[0].source
    operands = {r.source.name for r in stmt.reads if not r.source.same_as(output)}
    if not str(output.dtype).startswith("float") or len(operands) < 2:
        return None  # a product of two operands: a sum of squares is the rows rule's
    lanes = lanes_for(target, 32)
    axes = find_axes(sch, main, lanes=lanes)
    if axes is None or len(axes.reduction) != 1:
        return None
    names = [it.var.name for it in main.iters]
    extents = static_extents(main)
    (reduce,) = axes.reduction
    operand = _long_operand(stmt, names[axes.vector], names[reduce], weight_names(func))
    if operand is None or not extents[reduce] or extents[reduce] % lanes:
        return None
    used = set().union(*(vars_of(d.min) for d in operand.region))
    rows = [i for i in axes.spatial if names[i] not in used]
    if any(extents[i] is None for i in rows) or math.prod(extents[i] for i in rows) > MAX_ROWS:
        return None
    loops = sch.get_loops(main.block_rv)
    if len(loops) != len(names):
        return None
    # The operand's rows outermost: a symbolic one (the cache length) first and alone, the
    # static ones fused inside it (fused with a symbolic extent, the bindings divide by it and
    # TVM no longer takes the partial for a reduction it can vectorize).
    outer = sorted((i for i in axes.spatial if i not in rows), key=lambda i: extents[i] is not None)
    sch.reorder(*(loops[i] for i in outer), *(loops[i] for i in rows), loops[reduce])
    _, lane = sch.split(loops[reduce], [None, lanes])
    partial = sch.rfactor(lane, 0)  # partial[lane, *output]: one vector partial a row
    symbolic = [loops[i] for i in outer if extents[i] is None]
    static = [loops[i] for i in outer if extents[i] is not None]
    if len(static) > 1:
        static = [sch.fuse(*static)]
    anchor = (symbolic + static)[-1]  # the write-back's loops, which the partial joins
    sch.compute_at(partial, anchor)
    for block in epilogue:
        sch.reverse_compute_at(block.block_rv, anchor)
    # Lanes innermost, the rows inside the chunks: one load of the operand's vector feeds
    # every row's partial.
    lane, chunk, row_loops = _partial_loops(sch, partial, anchor)
    sch.reorder(*([chunk] if chunk is not None else []), *row_loops, lane)
    sch.vectorize(lane)  # before the init is split off: TVM then still takes it for a reduction
    for loop in row_loops:
        sch.unroll(loop)
    if parallel_pays(work(main), target):
        sch.parallel((symbolic + static)[0])
    init = sch.decompose_reduction(partial, chunk if chunk is not None else (row_loops + [lane])[0])
    sch.vectorize(sch.get_loops(init)[-1])
    return sch


def _partial_loops(sch, partial, anchor):
    """(lane loop, chunk loop or None, row loops) of the rfactor-ed partial after
    ``compute_at`` (its loops inside ``anchor``), read from its bindings: its first iterator
    is the lane, its reduction the chunks."""
    loops = sch.get_loops(partial)
    at = next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(anchor)))
    loops = loops[at + 1 :]
    realize = sch.get(loops[-1]).body
    role = {}
    for position, (iv, value) in enumerate(zip(realize.block.iter_vars, realize.iter_values)):
        kind = "lane" if position == 0 else "chunk" if int(iv.iter_type) == REDUCE else "row"
        role.update({id(loop): kind for loop in loops if sch.get(loop).loop_var.same_as(value)})
    by_role = {"lane": [], "chunk": [], "row": []}
    for loop in loops:
        if id(loop) in role:  # a unit loop binds a constant: one chunk when a row is a vector
            by_role[role[id(loop)]].append(loop)
    return by_role["lane"][0], next(iter(by_role["chunk"]), None), by_role["row"]


def _long_operand(stmt, vector: str, reduce: str, weights: set[str]):
    """The read that streams the output's last axis ``vector`` (a dimension other than its
    last uses it) and whose last dimension is the reduction iterator ``reduce`` alone; an
    activation, not one of ``weights``. None when there is no such read or more than one."""
    found = [
        r
        for r in stmt.reads
        if r.source.name not in weights
        and streams(r, vector)
        and isinstance(r.region[-1].min, tvm_api.tirx.Var)
        and r.region[-1].min.name == reduce
    ]
    return found[0] if len(found) == 1 else None


__all__ = ["MAX_ROWS", "NAME", "schedule_func"]
