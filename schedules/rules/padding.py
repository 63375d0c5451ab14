"""Padding around a contraction's tile: the vector axis padded to whole vectors (and symbolic
rows to whole row tiles) so that no tile runs under a per-lane predicate, and a
convolution's spatial padding inlined where its condition is one scalar per broadcast.
"""

from __future__ import annotations

import math

from tvm_ext.schedules.common import lanes_for, vector_registers
from tvm_ext.schedules.rules.axes import Axes, static_extents, streams, vars_of
from tvm_ext.schedules.rules.fallback import static_int, work
from tvm_ext.schedules.rules.tile_shape import (
    MIN_PASS_ROWS,
    padded_row_tile,
    statements,
    symbolic_panel,
    whole_panel,
)

from tvm_ext.base import tvm_api

# Multiply-adds per element of a padded input past which a window's padding pays as a stage
# of its own even when its channels are fewer than a vector (see inline_window_pads).
PAD_STAGE_MIN_MACS = 512


def inline_window_pads(sch, block, pads: list, axes: Axes, lanes: int) -> tuple[list, object]:
    """Inline each padding stage the reduction reads through a window (``x[y + ry, ..]``: a
    convolution's spatial padding) and not along its vector axis, when its innermost axis
    (the channels) is shorter than ``lanes``; returns (the pads left, the block's refreshed
    info). Its value is then one broadcast scalar per row of the tile, its condition one
    scalar select with it, where the separate stage wrote and re-read a padded copy of the
    whole input on every call, element by element: a 3-channel stem convolution to 16
    channels (224 x 224, stride 2) took 137 us with the stage and 27 us inlined (Zen 5).
    With a vector of channels or more the stage is a vector copy, and inlined, the edge rows'
    conditions stayed branches inside the channel loop (LLVM does not hoist them): a 3x3
    convolution of 64 channels on 56 x 56 ran 1382 us inlined, 1313 us with the stage; 256
    channels on 14 x 14 1467 -> 1403 us (Zen 3, AVX2, 2 threads). A padding read along the vector
    axis (NCHW: the width) stays a stage: inlined, its condition is per lane and LLVM
    scalarizes the tile (a 3x3 NCHW convolution ran at 1.8 GFLOP/s); so does a padding read
    with no window (``pad_einsum``'s copies of a matmul's operands).

    Fewer channels than a vector, the stage still pays when the convolution's work dwarfs
    the copy: resnet's stem (3 channels to 64, 7x7, stride 2: 743 multiply-adds per padded
    input element) took 2396 us inlined, 1483 us with the stage; mobilenet_v2's (3 to 32,
    3x3, stride 2: 71 per element) 138 us inlined, 351 us with the stage; 3 to 16 channels
    7x7 (186 per element) 551 and 493 us (Zen 3, AVX2, 2 threads)."""
    stmt = sch.get(block.block_rv)
    names = [it.var.name for it in block.iters]
    spatial = {names[i] for i in axes.spatial}
    reduction = {names[i] for i in axes.reduction}
    vector = names[axes.vector]

    def through_window(read) -> bool:
        dims = [vars_of(d.min) for d in read.region]
        return not streams(read, vector) and any(d & spatial and d & reduction for d in dims)

    kept = []
    for pad in pads:
        out = sch.get(pad.block_rv).writes[0].source
        reads = [r for r in stmt.reads if r.source.same_as(out)]
        if reads and all(through_window(r) for r in reads) and not _stage_pays(block, out, lanes):
            sch.compute_inline(pad.block_rv)
        else:
            kept.append(pad)
    if len(kept) == len(pads):
        return pads, block
    return kept, tvm_api.dlight.analysis.get_sblock_info(sch, block.block_rv)


def _stage_pays(block, padded, lanes: int) -> bool:
    """Whether a window's padding runs better as a stage of its own (see
    :func:`inline_window_pads`): its channels are a vector or more (a vector copy), or the
    convolution does ``PAD_STAGE_MIN_MACS`` or more per element of the padded input (the
    element-by-element copy is then small beside it)."""
    dims = [static_int(d) for d in padded.shape]
    if not dims or None in dims:
        return False
    return dims[-1] >= lanes or work(block) >= PAD_STAGE_MIN_MACS * math.prod(dims)


def pad_vector_axis(sch, block, axes: Axes, target, weights: set[str]) -> bool:
    """Pad the computation's vector axis up to a whole number of vectors when it is not one
    (ViT's 197 tokens, 1000 classes; a weight axis is left alone: its panels need no pad),
    and its rows to a whole number of row tiles when they are symbolic (a sequence length);
    returns whether it padded anything.

    A tail inside the vectorized loop is a per-lane predicate, and LLVM scalarizes the whole
    tile under it: a 12 x 197 x 197 x 64 batch matmul ran at 3 GFLOP/s, 27x slower than at
    208 x 208. A symbolic row tail is worse: the accumulator tile's extent becomes symbolic,
    so it is allocated at the output's size instead of in registers (a 197 x 256 x 1024
    matmul ran 3.5x slower than at a fixed 197). ``pad_einsum`` computes on zero-padded
    copies of the operands the axes index (a stage of their own, as padding is) and writes
    the valid part back, so the tile runs without a predicate; a symbolic extent is padded
    to ``ceil(n / tile) * tile``, a whole number of tiles whatever ``n`` is."""
    lanes = lanes_for(target, 32)
    dom = static_extents(block)
    extent = dom[axes.vector]
    vector = block.iters[axes.vector].var.name
    stmt = sch.get(block.block_rv)
    along_weight = any(
        read.source.name in weights and any(vector in vars_of(d.min) for d in read.region)
        for read in stmt.reads
    )
    padding = [1] * len(block.iters)
    if axes.group is not None:
        pass  # a grouped convolution's panels lie within its groups: never padded
    elif extent is None and not along_weight:
        # The panel tile_sizes takes for a symbolic axis (one vector where it fits one).
        padding[axes.vector] = symbolic_panel(block.dom()[axes.vector], lanes)
    elif extent is not None and extent > lanes and extent % lanes:
        # A weight's axis that whole panels tile (whole_panel_pays) runs in them with no
        # copy; any other odd axis is padded, a weight's too (a copy per call: a pass over
        # the weight, where a per-lane tail scalarizes every panel and ran a 12 x 197 x 197
        # x 64 batch matmul with a layout-free B 33x slower than at 208).
        rows = dom[axes.row] if axes.row is not None else 1
        registers = vector_registers(target)
        if not whole_panel_pays(extent, rows, lanes, registers, weight=along_weight):
            padding[axes.vector] = odd_axis_step(lanes, registers)
    row = dom[axes.row] if axes.row is not None else 0
    if padding[axes.vector] == 1 and row is not None:
        return False  # nothing symbolic, every vector whole: no pad
    if axes.row is not None and row is None:
        # Symbolic rows too, to a whole number of the row tiles tile_sizes then takes
        # (tile_shape.padded_row_tile): a row tail's predicate beside the padded lanes'
        # (the write-back's masked store) wrote outside the output (TVM 0.27). Static rows
        # run unpadded, a tail tile under a per-row guard: no per-call copy of the operand
        # the rows index (the contraction then writes back in a pass of its own:
        # contraction._both_guarded). Even a tile of fewer accumulators than the core's FMA
        # chains pays (65 rows in tiles of 5: 21 us against 27 us padded to 72 rows in tiles
        # of 8, interleaved A/B, Zen 4); 197 rows in tiles of 8 and a tail: 106 us, 258 us
        # padded to 200, 99 us for the same matmul at 208 x 208 (197 x 197 x 256 + bias +
        # ReLU, median of 3 interleaved rounds, Zen 4).
        step = padding[axes.vector]
        padded = list(dom)
        padded[axes.vector] = None if extent is None else -(-extent // step) * step
        padding[axes.row] = padded_row_tile(block, padded, axes, target)
    reindexed = _as_einsum(sch, block, padding)
    if reindexed is None:
        return False
    sch.pad_einsum(block.block_rv, padding)
    for copy in reindexed:
        sch.compute_inline(copy)
    for pad in sch.get_producers(block.block_rv):
        # The operands padded along the rows alone read clamped (those along the vector axis
        # stay copies: the panels pack_operands packs them into).
        out = sch.get(pad).writes[0].source
        reads = [r for r in sch.get(block.block_rv).reads if r.source.same_as(out)]
        lanes_along = any(vector in vars_of(d.min) for r in reads for d in r.region)
        if not lanes_along and clamp_pad(sch, pad):
            sch.compute_inline(pad)
    return True


def clamp_pad(sch, pad) -> bool:
    """Make ``pad_einsum``'s zero-fill of an operand, ``X_pad[i, k] = (i < n ? X[i, k] : 0)``,
    a read of the last valid element, ``X[min(i, n - 1), k]``, for the caller to inline;
    returns whether ``pad`` was such a block. Sound for the spatial axes ``pad_einsum`` pads:
    a padded row's products land only in that row of the padded output, which the write-back
    discards, so what the row holds does not matter (a copy of a valid row is as finite as
    the input). Inlined, the contraction reads the activation where it lies, one ``min`` per
    row of the tile: no per-call copy (a parallel region of its own) and no condition on
    every load. A BERT layer's symbolic-length matmul (16 x 768 x 768 + bias, rows padded to
    tiles of 4): 92.3 us with the copy, 96.0 inlined under the condition, 85.4 clamped
    (static 16 rows: 86.4); at 13 rows 100.9 -> 85.5 (interleaved, Zen 4, 2 threads).

    The block is replaced through the schedule's state (no primitive rewrites a block's
    body), so the change is not in the trace: a replayed trace inlines the zero-fill, the
    same values at the conditional load's speed."""
    stmt = sch.get(pad)
    store = stmt.body
    if not (isinstance(store, tvm_api.tirx.BufferStore) and _is_zero_fill(store.value)):
        return False
    load = store.value.args[1]
    source = load.source
    padded = stmt.writes[0].source.shape
    index = [
        i if tvm_api.same_structure(full, have) else tvm_api.tirx.Min(i, full - 1)
        for i, full, have in zip(load.indices, source.shape, padded)
    ]
    clamped = tvm_api.tirx.BufferStore(
        store.buffer, tvm_api.tirx.BufferLoad(source, index), store.indices
    )
    region = [tvm_api.ir.Range.from_min_extent(i, 1) for i in index]
    new = tvm_api.s_tir.SBlock(
        stmt.iter_vars, [tvm_api.tirx.BufferRegion(source, region)], stmt.writes,
        stmt.name_hint, clamped,
    )  # fmt: skip
    sch.state.replace(sch.get_sref(pad), new, {stmt: new})
    return True


def _is_zero_fill(value) -> bool:
    """Whether ``value`` is ``if_then_else(cond, X[i, j, ..], 0)``, plain variables indexing X."""
    if not isinstance(value, tvm_api.ir.Call) or value.op.name != "prim.if_then_else":
        return False
    load, zero = value.args[1], value.args[2]
    return (
        isinstance(load, tvm_api.ir.expr.TensorLoad)
        and all(isinstance(i, tvm_api.tirx.Var) for i in load.indices)
        and isinstance(zero, (tvm_api.tirx.FloatImm, tvm_api.tirx.IntImm))
        and float(zero.value) == 0.0
    )


def odd_axis_step(lanes: int, registers: int) -> int:
    """The multiple an odd vector axis is padded up to: two vectors with 16 registers, where
    one-vector panels (as many rows as fit, 8 x 8) ran at 60 % of the two-vector tile's speed;
    one vector with 32 (AVX-512 measured so: 197 in 13 vectors of 16 within 1.12-1.44x of
    208). AVX2, Zen 3, 2 threads, interleaved: 197 x 197 x 256 + bias + ReLU padded to 200
    columns 403 us, to 208 139 us (208 itself 140); 12 x 197 x 197 x 64 with B transposed
    1293 -> 552 us (208: 445-538); 12 x 49 x 49 x 64 69 -> 44 us."""
    return 2 * lanes if registers < 32 else lanes


def whole_panel_pays(
    extent: int, rows: int | None, lanes: int, registers: int, *, weight: bool = True
) -> bool:
    """Whether a weight axis of ``extent`` (no whole number of vectors) runs in the panels
    :func:`~.tile_shape.whole_panel` finds rather than padded to whole vectors on every call:
    when it is a whole number of 8-lane statements (120 channels in panels of 40, 16 + 16 +
    8: a 1x1 convolution 32 -> 120 on 14 x 14 ran 5 % slower padded), when the rows are too
    few to amortize the copy (``MIN_PASS_ROWS``: a 1 x 1280 @ 1280 x
    1025 classifier head, 318 us padded, 33 us in panels of 41), or when the panels need no
    more vector statements per row than the padded axis (33 channels: 16 + 16 + 1 against
    three padded vectors; a 3x3 convolution 33 -> 33 on 14 x 14, 19.6 -> 12.1 us). 50
    columns in panels of 25 (16 + 8 + 1, twice) against four padded vectors: padded (a
    12 x 50 x 50 x 64 batch matmul 20.6 us in panels, 17.3 us padded; Zen 5).

    An axis that is not a weight's has no compile-time pack to amortize: it runs unpadded by
    the last test alone (65 columns as one panel of 16 x 4 + 1, five statements as padded;
    see tile_shape.whole_panel)."""
    panel = whole_panel(extent, lanes, registers)
    if panel is None:
        return False
    if weight and (extent % 8 == 0 or (rows is not None and rows < MIN_PASS_ROWS)):
        return True
    return extent // panel * len(statements(panel, lanes)) <= -(-extent // lanes)


def _as_einsum(sch, block, padding: list[int]) -> list | None:
    """Make ``block`` an einsum for ``pad_einsum``: each read indexed by sums of iterators (a
    convolution's ``x[h + kh, w + kw, c]``) becomes a copy indexed by the block's own
    iterators (``reindex``), for the caller to inline back once the padding is done. Returns
    the copies; None when such a read uses an axis that is padded (its copy would be padded
    too: a per-call pass over an im2col buffer)."""
    padded = {block.iters[i].var.name for i, p in enumerate(padding) if p > 1}
    copies = []
    for index, read in enumerate(sch.get(block.block_rv).reads):
        mins = [d.min for d in read.region]
        if all(isinstance(m, (tvm_api.tirx.Var, tvm_api.tirx.IntImm)) for m in mins):
            continue
        if padded & set().union(*(vars_of(m) for m in mins)):
            return None
        copies.append(sch.reindex(block.block_rv, ("read", index)))
    return copies


__all__ = ["inline_window_pads", "pad_vector_axis", "whole_panel_pays"]
