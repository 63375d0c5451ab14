"""Injective functions: transpose, reshape, broadcast, element-wise chains.

Reads the IR: every block is spatial (no reduction). Chains are inlined into one block per
output; its leading loops are fused and run in parallel (when their work pays for the thread
pool: ``common.parallel_pays``), its innermost loop, which indexes the output's last
dimension (unit-stride stores), is split by the vector width and vectorized. A block that
writes the transpose of what it reads (every read strided along the output's last axis, all
contiguous along one other) computes a tile in the reads' order first and transposes it in
one copy (:func:`_through_a_tile`).
"""

from __future__ import annotations

from tvm_ext.schedules.common import lanes_for, parallel_pays
from tvm_ext.schedules.rules.axes import vars_of
from tvm_ext.schedules.rules.fallback import (
    aligned_width,
    branch_points,
    calls_libm,
    loads,
    loop_extent,
    parallel_spatial,
    pays,
    static_int,
    vector_runs,
    weighted_work,
)

from tvm_ext.base import tvm_api

NAME = "injective"


def schedule_func(func, target):
    sch = tvm_api.Schedule(func)
    blocks = tvm_api.dlight.analysis.normalize_prim_func(sch)
    if blocks is None or not all(b.is_injective() for b in blocks):
        return None
    lanes = lanes_for(target, 32)
    outputs = tvm_api.dlight.base.try_inline(sch, blocks)
    plain = []
    for block in outputs:
        across = _transposed_axis(sch, block, lanes)
        if across is not None:
            _through_a_tile(sch, block, *across, lanes, target)
        else:
            plain.append(block)
    merged = _siblings_merged(sch, plain, target) if len(plain) == len(outputs) else None
    if merged is not None:
        return merged
    for block in plain:
        parallel_spatial(sch, block, target, True, pays(sch, [block], target))
    return sch


def _siblings_merged(sch, blocks, target):
    """``blocks`` (the function's outputs, over one iteration space, none reading another's:
    a split's pieces) under one loop nest, run in parallel when their work together pays for
    it; a new schedule, or None when they are not such siblings or TVM refuses the merge.
    Apart, each piece weighed alone: GPT-2's split of its 128 x 2304 query-key-value product into
    three (3 x 98304 iterations) ran serial, each piece under the host's threshold
    (131072 on a 2-core Zen 3), 48 us alone and 118-200 us a call in the model."""
    if len(blocks) < 2 or any(b.dom_kind().strip("S") for b in blocks):
        return None
    extents = [[static_int(d) for d in b.dom()] for b in blocks]
    if not extents[0] or None in extents[0] or any(e != extents[0] for e in extents[1:]):
        return None
    stmts = [sch.get(b.block_rv) for b in blocks]
    written = [region.source.same_as for s in stmts for region in s.writes]
    if any(same(r.source) for s in stmts for r in s.reads for same in written):
        return None  # a piece reads another's output: their order matters
    trial = sch.copy()
    try:
        for block in blocks:
            parallel_spatial(trial, block, target, True, False)
        top = trial.merge(*_top_loops(trial))
    except tvm_api.ScheduleError:
        return None
    libm = any(calls_libm(s.body) for s in stmts)
    if parallel_pays(sum(weighted_work(sch, [b]) for b in blocks), target, libm):
        trial.parallel(top)
    return trial


def _transposed_axis(sch, block, lanes: int) -> tuple[int, int] | None:
    """The iterator along which every read of ``block`` is contiguous, and the output's
    dimension it indexes, when every read is strided along the output's last axis (a Llama
    key's rotary embedding written transposed for ``Q K^T``: four gathers per output vector;
    GPT-2's keys, one: 64 -> 21 us for 12 heads x 64 x 128 tokens, 55 us unscheduled, Zen 3);
    None when the block is not such a transpose, or an extent is no whole number of vectors."""
    stmt = sch.get(block.block_rv).body
    iters = [it.var for it in block.iters]
    if not isinstance(stmt, tvm_api.tirx.BufferStore) or len(iters) < 2:
        return None
    dims = _output_dims(stmt, iters)
    if dims is None:
        return None  # the output is not indexed by the iterators in order
    reads = loads(stmt.value)
    if not reads or any(len(load.indices) == 0 for load in reads):
        return None  # nothing read, or a 0-d scalar (broadcast, not strided)
    last = iters[-1].name
    lasts = [vars_of(load.indices[-1]) for load in reads]
    others = [set().union(*(vars_of(i) for i in load.indices[:-1])) for load in reads]
    if any(last in a or last not in b for a, b in zip(lasts, others)):
        return None
    common = set.intersection(*lasts)
    extents = [static_int(d) for d in block.dom()]
    for pos, var in enumerate(iters[:-1]):
        if var.name in common and extents[pos] and extents[-1]:
            if extents[pos] % lanes == 0 and extents[-1] % lanes == 0:
                return pos, dims[pos]
    return None


def _top_loops(sch) -> list:
    """The outermost loops of ``sch``'s function (a loop a partition wrapped blocks inside
    once)."""
    tops = []
    for child in sch.get_child_blocks(sch.get_sblock("root")):
        loop = sch.get_loops(child)[0]
        if not any(sch.get_sref(loop).same_as(sch.get_sref(t)) for t in tops):
            tops.append(loop)
    return tops


def _output_dims(stmt, iters) -> list[int] | None:
    """The dimension of ``stmt``'s output each iterator indexes, when the output is indexed by
    the iterators in order, the last one last, and by constants between them (a unit
    dimension: Llama's ``1 x heads x 64 x tokens`` keys); None otherwise."""
    dims = [d for d, index in enumerate(stmt.indices) if not isinstance(index, tvm_api.tirx.IntImm)]
    if len(dims) != len(iters) or dims[-1] != len(stmt.indices) - 1:
        return None
    if any(not stmt.indices[d].same_as(v) for d, v in zip(dims, iters)):
        return None
    return dims


def _through_a_tile(sch, block, across: int, dim: int, lanes: int, target) -> None:
    """Compute ``lanes`` output columns at a time into a tile laid out as the reads are
    (vectors along iterator ``across``, the output's dimension ``dim``: contiguous loads),
    then copy the tile to the output in vectors along its last axis (one gather from the
    tile per vector): the Llama key's 12 x 64 x 128 rotary transpose 76 -> 10 us (Zen 5)."""
    n = len(sch.get(block.block_rv).writes[0].region)
    order = list(range(n))
    order[dim], order[-1] = order[-1], order[dim]
    copy = sch.cache_write(block.block_rv, 0, "global")
    sch.transform_layout(
        block.block_rv,
        ("write", 0),
        tvm_api.tirx.IndexMap.from_func(lambda *idx: [idx[p] for p in order], ndim=n),
    )
    loops = sch.get_loops(copy)
    outer, inner = sch.split(loops[-1], [None, lanes])
    lead = [loop for i, loop in enumerate(loops[:-1]) if i != dim]
    sch.reorder(*lead, outer, loops[dim], inner)
    row = sch.fuse(*lead, outer)
    if pays(sch, [block], target):
        sch.parallel(row)
    sch.vectorize(inner)
    sch.compute_at(block.block_rv, row)
    tile = sch.get_loops(block.block_rv)[1:]
    realize = sch.get(tile[-1]).body
    var = realize.block.iter_vars[across].var
    along = next(
        loop for loop in tile
        if sch.get(loop).loop_var.name in vars_of(realize.iter_values[across])
    )  # fmt: skip
    sch.reorder(*[loop for loop in tile if not loop.same_as(along)], along)
    extent = loop_extent(sch, along)
    points = [b for b in branch_points(realize.block.body, var) if 0 < b < extent]
    width = aligned_width(points, extent, lanes) if points else lanes
    if width is None:
        width = lanes  # a bound inside a vector: LLVM selects per lane there
        points = []
    cut, vec = sch.split(along, [None, width])
    sch.vectorize(vec)
    runs = vector_runs(points, extent, width)
    if len(runs) > 1:
        sch.loop_partition(cut, [*runs[:-1], None])
