"""Window reductions: depthwise convolutions and pooling (max, average), as Relax legalizes
them, with their padding and element-wise epilogue (batch norm, ReLU6, a residual add).

Reads the IR: one reduction block whose reduction iterators all slide a window, i.e. each
one indexes an activation only together with a spatial iterator (``y * stride + ky``), never
alone (a reduction iterator alone in an index is a dot product over it: a convolution's input
channels, a matmul's ``k``, which :mod:`.contraction` takes), over a window of a few dozen
points at most (7x7 = 49).

Channels last (NHWC, what :func:`~tvm_ext.model_pipeline.layout.channels_last` gives a CNN):
the output's last dimension, the channels, indexes the last dimension of every activation read
too, so a vector of channels is one contiguous load. The schedule is :mod:`.contraction`'s
register tile with the channels as its vector axis and the output width as its row axis:
``[outer tiles, parallel] [ky, kx] [mr output columns, unrolled] [nr channels, vectorized]``;
each window point loads one weight vector (a depthwise weight, packed into channel panels at
compile time) and feeds ``mr`` FMAs (or maxima) with it, the ``mr x nr`` accumulators in
registers, the epilogue applied as the tile is written back.

Any other layout (NCHW: the width is the last dimension, read ``stride`` floats apart for a
strided window, and rarely a whole number of vectors): the output's spatial loops are fused
and run in parallel, each point's window summed in order, as the unscheduled function does.
"""

from __future__ import annotations

from tvm_ext.schedules.common import lanes_for, parallel_pays, vector_registers
from tvm_ext.schedules.rules.axes import (
    Axes,
    group_width,
    indexes_weight,
    static_extents,
    vars_of,
    weight_names,
)
from tvm_ext.schedules.rules.contraction import tile
from tvm_ext.schedules.rules.fallback import loop_extent, parallel_spatial, pays, work
from tvm_ext.schedules.rules.packing import pack_operands
from tvm_ext.schedules.rules.reduction_shape import buffer_bytes, one_reduction
from tvm_ext.schedules.rules.tile_shape import panel_rows, tile_sizes, whole_panel

from tvm_ext.base import tvm_api

NAME = "window"

# The most weight bytes a window's row tiles re-read from L1 (half the smallest L1d of the
# CPUs this project runs on, 32 KiB) when they run outside its channel panels (see
# rows_outside).
ROWS_OUTSIDE_MAX_WEIGHT_BYTES = 16 * 1024

# The most points a window may have: 7x7 (MobileNet's, ConvNeXt's depthwise kernels) fits.
MAX_WINDOW = 64


def schedule_func(func, target):
    sch = tvm_api.Schedule(func)
    shape = one_reduction(sch)
    if shape is None:
        return None
    pads, main, epilogue = shape
    weights = weight_names(func)
    axes = window_axes(sch, main, weights)
    if axes is None:
        return None
    # One-vector panels for an odd number of vectors: each lane's tap is a load of its own
    # here (no broadcast to share), and a depthwise 3x3 of 40 channels on 28 x 28 ran 5.9 us
    # in 8 x 8 tiles, 10.3 us in 2 x 40 (Zen 3).
    mr, nr = tile_sizes(main, axes, target, odd_panels=False)
    channels = static_extents(main)[axes.vector]
    if axes.row is not None and channels is not None and channels % nr:
        panel = odd_channel_panel(channels, lanes_for(target, 32), vector_registers(target))
        if panel is not None:
            mr, nr = panel_rows(main, axes, target, panel), panel
    if axes.row is None or channels is None or channels % nr:
        # Not channels last, or channels no panel tiles without a per-lane tail (LLVM
        # scalarizes a tile under a per-lane predicate, 6x slower than unscheduled): the
        # safe schedule.
        # NCHW: the planes in parallel (pooling 64 x 112 x 112: 2x unscheduled). Channels
        # last, the loop nest stays as it is: LLVM vectorizes the plain nest, and not its
        # body inside a parallel closure (33 channels: 10 us serial, 69 us parallel).
        if axes.row is None:
            for stage in [*pads, main, *epilogue]:
                _parallel_planes(sch, stage, target)
        return sch
    # The padding inlined: its condition is one per output point, the same for every lane
    # of a channel vector (a separate pass over a padded copy took 3-4x longer: pooling
    # 64 x 112 x 112 NHWC 119 -> 34 us, a 3x3 depthwise 960 x 7 x 7 30 -> 14 us).
    for pad in pads:
        sch.compute_inline(pad.block_rv)
    main, pads = tvm_api.dlight.analysis.get_sblock_info(sch, main.block_rv), []
    outside = rows_outside(sch, main, weights)
    packs, packed_weights = pack_operands(sch, func, main, axes, nr)
    if tile(sch, main, axes, target, epilogue[0] if epilogue else None, (mr, nr), outside):
        pads.append(epilogue[0])
    pads += epilogue[1:]  # a broadcast of the epilogue (see one_reduction)
    for stage in pads + [tvm_api.dlight.analysis.get_sblock_info(sch, b) for b in packs]:
        parallel_spatial(sch, stage, target, True, pays(sch, [stage], target))
    for block in packed_weights:
        sch.annotate(block, "meta_schedule.layout_rewrite_preproc", True)
    return sch


def rows_outside(sch, block, weights: set[str]) -> bool:
    """Whether the window's row tiles run outside its channel panels: where its weights
    (none, for pooling) fit ``ROWS_OUTSIDE_MAX_WEIGHT_BYTES``. Each row tile then reads its
    inputs' every channel, a contiguous run, where panels outside read one panel's channels
    of every pixel, a stride of all the channels apart; past that size the weights' re-reads
    per row tile cost more. AVX2, Zen 3, 2 threads, interleaved (warm; cold: the input one
    of eight rotated, beyond the L3): max pool 3x3 / 2 of 64 x 112 x 112, batch 3, 216 ->
    172 us (763 -> 566 cold), batch 1 89 -> 79 (291 -> 221); a 3x3 depthwise 144 x 56 x 56
    (5 KiB of weights) 119 -> 115 (332 -> 322 cold, 300 -> 232 in a second run), 96 x 112 x
    112 at stride 2 132 -> 119 (370 -> 321); 5x5 over 960 x 7 x 7 (94 KiB) 33.8 -> 41.9,
    672 x 14 x 14 (66 KiB) 166 -> 176, 240 x 28 x 28 at stride 2 (23 KiB) 31.9 -> 35.8 (these
    keep their panels outside); 3x3 over 480 x 14 x 14 (17 KiB) 26.9 and 28.0, equal."""
    sizes = [
        buffer_bytes(r.source) for r in sch.get(block.block_rv).reads if r.source.name in weights
    ]
    return None not in sizes and sum(sizes) <= ROWS_OUTSIDE_MAX_WEIGHT_BYTES


def odd_channel_panel(channels: int, lanes: int, registers: int) -> int | None:
    """The panel of a channels-last window whose channels no panel of whole 8-lane statements
    tiles (:func:`~.tile_shape.whole_panel` found none: ShuffleNet's 58 and 116): 4-lane
    statements where 4 divides the channels, else the widest panel of whole vectors, narrower
    statements and a plain lane up to four vectors wide (58 channels: 29, as 8 + 8 + 8 + 4 +
    1); None where neither tiles them. Each lane's tap is a load of its own (no broadcast to
    share), so a narrow statement costs a load and an FMA like a full one; left to the plain
    nest, LLVM vectorized none of it (AVX2, Zen 3, 2 threads, a 3x3 depthwise convolution +
    bias: 116 channels on 14 x 14 45 us, in 8 x 4 tiles 7.2-7.9 us, in 2 x 29 10.2 us, 120
    channels 6.6 us; 58 on 28 x 28 90 -> 19.6 us in 2 x 29, 56 channels 8.5 us; 58 from
    56 x 56 at stride 2 107 -> 21.6 us, 116 from 28 x 28 53 -> 10.3 us)."""
    if lanes > 4 and channels % 4 == 0:
        return 4
    return whole_panel(channels, lanes, registers, widest=4)


def _parallel_planes(sch, block, target) -> None:
    """The block's leading spatial loops but its last two (a plane: height and width) fused
    and run in parallel, the plane's loops left as they are (LLVM vectorizes what it can)."""
    kinds, loops = block.dom_kind(), block.get_loops()
    lead = len(kinds) - len(kinds.lstrip("S"))
    outer = loops[: max(lead - 2, 0)]
    if not parallel_pays(work(block), target) or not outer:
        return
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if (loop_extent(sch, fused) or 2) > 1:
        sch.parallel(fused)


def window_axes(sch, block, weights: set[str]) -> Axes | None:
    """The block's axes when it is a window reduction (see the module docstring), None
    otherwise. ``row`` is the output's second-to-last iterator (its width) when the block is
    channels last, with the vector axis a static whole number of lanes; else None."""
    stmt = sch.get(block.block_rv)
    kinds = block.dom_kind()
    names = [it.var.name for it in block.iters]
    spatial = tuple(i for i, k in enumerate(kinds) if k == "S")
    reduction = tuple(i for i, k in enumerate(kinds) if k == "R")
    if not spatial or not reduction or len(kinds) != len(spatial) + len(reduction):
        return None
    extents = static_extents(block)
    if any(extents[i] is None for i in reduction):
        return None
    points = 1
    for i in reduction:
        points *= extents[i]
    if points > MAX_WINDOW:
        return None
    sliding = {names[i] for i in reduction if extents[i] > 1}
    spatial_names = {names[i] for i in spatial}
    activations = [r for r in stmt.reads if r.source.name not in weights]
    if not sliding or not activations:
        return None
    for read in activations:
        for dim in read.region:
            used = vars_of(dim.min)
            if used & sliding and not used & spatial_names:
                return None  # a reduction iterator alone: a dot product, not a window
    read_by_activations = set().union(
        set(), *(vars_of(d.min) for r in activations for d in r.region)
    )
    if any(
        names[i] not in read_by_activations and indexes_weight(stmt, names[i], weights)
        for i in spatial
    ):
        # An output channel only the weight reads: a convolution of one input channel
        # (wav2vec2's first, 1 -> 512 channels, kernel 10, stride 5), each input value
        # broadcast to a panel of output channels, which :mod:`.contraction` tiles.
        return None
    out = stmt.writes[0].region
    last = out[-1].min
    if not isinstance(last, tvm_api.tirx.Var) or last.name not in names:
        return None
    vector = names.index(last.name)
    if vector not in spatial or group_width(stmt, last.name) is not None:
        return None  # a grouped convolution: a dot product over each group's channels
    row = None
    if len(out) >= 2 and _channels_last(activations, last.name, sliding):
        width = out[-2].min
        if isinstance(width, tvm_api.tirx.Var) and names.index(width.name) in spatial:
            row = names.index(width.name)
    return Axes(spatial, reduction, vector, row)


def _channels_last(reads, channel: str, sliding: set[str]) -> bool:
    """Whether every activation's last dimension is indexed by the output's last iterator
    (and no window iterator), so a vector of outputs reads one contiguous vector."""
    for read in reads:
        used = vars_of(read.region[-1].min)
        if channel not in used or used & sliding:
            return False
    return True


__all__ = [
    "MAX_WINDOW",
    "NAME",
    "odd_channel_panel",
    "rows_outside",
    "schedule_func",
    "window_axes",
]
