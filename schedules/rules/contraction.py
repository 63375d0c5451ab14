"""Matmul-like and conv-like functions: one reduction block with injective neighbours.

Reads the IR: a function whose blocks are, after inlining, one reduction block (spatial and
reduction iterators, e.g. matmul ``SSR``, batch matmul ``SSSR``, conv2d ``SSSSRRR``) and at
most one injective epilogue (bias, activation, residual, scaling: what Relax's FuseOps puts
after a matmul); prologues (casts, padding, transposes of inputs) are inlined into it.

The schedule is the register-blocked micro-kernel of :mod:`.matmul_cpu` derived from the
accesses instead of a kernel name: the *vector* axis is the spatial iterator that indexes the
output's last dimension (unit stride); the *row* axis is a spatial iterator that the operand
read along the vector axis does not use, so one vector load feeds ``mr`` FMAs with broadcast
values of the other operand. Loops: ``[outer spatial tiles, fused, parallel] [reduction]
[mr rows, unrolled] [nr lanes, vectorized]`` with the ``mr x nr`` accumulator tile in
registers (a stack buffer, global scope under 1 KiB; or past it, a workspace LLVM keeps in
registers around one long reduction loop: :func:`~.tile_shape.tile_sizes`), the epilogue
applied as the tile is written back.
"""

from __future__ import annotations

from tvm_ext.schedules.common import ACC_SCOPE, lanes_for, parallel_pays, seeding
from tvm_ext.schedules.rules.axes import (
    Axes,
    find_axes,
    static_extents,
    streams,
    vars_of,
    weight_names,
)
from tvm_ext.schedules.rules.fallback import (
    loop_extent,
    parallel_spatial,
    pays,
    static_int,
    work,
)
from tvm_ext.schedules.rules.map_rows import fuse_map_rows
from tvm_ext.schedules.rules.packing import alive, pack_operands, permutation
from tvm_ext.schedules.rules.padding import inline_window_pads, pad_vector_axis
from tvm_ext.schedules.rules.reduction_shape import (
    broadcasts,
    buffer_bytes,
    one_reduction,
    static_product,
)
from tvm_ext.schedules.rules.tile_shape import (
    MIN_PASS_ROWS,
    statement_runs,
    statement_width,
    tile_sizes,
)

from tvm_ext.base import tvm_api

NAME = "contraction"

# The smallest output whose padded write-back pays for a pass of its own (see
# _partial_panel): a 12 x 197 x 197 x 64 batch matmul (465 k points) 247 -> 206 us with the
# pass; at 12 x 49 x 49 (29 k) the pass lost 1.5 us of 17 (Zen 5, interleaved A/B).
PARTIAL_PANEL_MIN_POINTS = 1 << 17

VECTOR_PANEL_ROWS = 32  # the most rows whose weight panels are one vector wide (see _panel)


def schedule_func(func, target):
    try:
        sch = _schedule(tvm_api.Schedule(func), func, target, pad=True)
    except tvm_api.ScheduleError:
        sch = None  # the padded computation did not take the schedule: the plain one
    return sch if sch is not None else _schedule(tvm_api.Schedule(func), func, target, pad=False)


def _schedule(sch, func, target, pad: bool):
    shape = one_reduction(sch)
    if shape is None or not _is_float_accumulator(sch, shape[1]):
        return None
    pads, main, epilogue = shape
    axes = find_axes(sch, main, weights=weight_names(func), lanes=lanes_for(target, 32))
    if axes is None:
        return None
    if pad and pad_vector_axis(sch, main, axes, target, weight_names(func)):
        return _schedule(sch, func, target, pad=False)
    mr, nr = tile_sizes(main, axes, target, roomy=True)
    lanes, epi = lanes_for(target, 32), epilogue[0] if epilogue else None
    fused = fuse_map_rows(sch, main, epi, axes, (mr, nr), weight_names(func), target)
    if fused is not None:  # a convolution's small map: its rows as one axis
        main, epi, axes = fused
        mr, nr = tile_sizes(main, axes, target, roomy=True)
    packs, weights = pack_operands(sch, func, main, axes, nr, _panel(main, axes, nr, target))
    pads = [p for p in pads if alive(sch, p)]  # a weight's padding went into its panels
    pads, main = inline_window_pads(sch, main, pads, axes, lanes)
    if tile(sch, main, axes, target, epi, (mr, nr)):
        pads.append(epi)  # an elementwise loop nest of its own, scheduled as a pad
    pads += epilogue[1:]  # a broadcast of the epilogue (one_reduction), the same
    # When the tile loop runs in parallel, so do the copies before it: a 197 x 197 x 256
    # matmul with its padding copies serial ran 1.3x faster on 2 threads than on 1 where the
    # 208 x 208 one (no copies) ran 1.9x faster; with the copies in parallel, 168 -> 138 us
    # (Zen 4, 2 threads; likely the pool's idle workers parking during the serial copy).
    tiles_parallel = parallel_pays(work(main), target)
    for stage in pads + [tvm_api.dlight.analysis.get_sblock_info(sch, b) for b in packs]:
        parallel = tiles_parallel or pays(sch, [stage], target)
        parallel_spatial(sch, stage, target, True, parallel)
    for block in weights:  # run once, at compile time, when the caller folds weights
        sch.annotate(block, "meta_schedule.layout_rewrite_preproc", True)
    return sch


def _panel(block, axes: Axes, nr: int, target) -> int | None:
    """The width of a weight's packed panels when not the tile's ``nr``: one vector where the
    rows are few (at most ``VECTOR_PANEL_ROWS``, or symbolic) and the weight streamed from
    memory bounds the kernel (decode, a classifier head, a short prefill): a panel is one
    stream, and panels of a vector give a tile ``nr / lanes`` streams in flight. Interleaved
    A/B (Xeon, rocketlake, 2 threads): Llama's decode step 11.68 -> 8.92 ms at 128 cached
    tokens; BERT at 16 tokens 25.4 -> 19.5 ms, Llama at 16 22.1 -> 17.3. Past that no rule
    found (BERT at 128 tokens 81.1 -> 79.5, resnet18 12.5 -> 12.0, ViT 129.7 -> 147.4)."""
    lanes = lanes_for(target, 32)
    rows = static_int(block.dom()[axes.row]) if axes.row is not None else 1
    whole = nr > lanes and nr % lanes == 0
    return lanes if whole and (rows is None or rows <= VECTOR_PANEL_ROWS) else None


def _is_float_accumulator(sch, block) -> bool:
    return str(sch.get(block.block_rv).writes[0].source.dtype).startswith("float")


def tile(
    sch, block, axes: Axes, target, epilogue, sizes: tuple[int, int], rows_outside: bool = False
) -> bool:
    """The register-blocked loop nest (see the module docstring); returns whether the
    epilogue stays a loop nest of its own (see :func:`_both_guarded`), for the caller to
    schedule. ``rows_outside``: the row tiles outside the column panels (a window's, whose
    panels of weights are a few taps: each row tile then reads its inputs' every channel,
    a contiguous run)."""
    mr, nr = sizes
    loops = [it.loop_rv for it in block.iters]
    v_outer, v_inner = sch.split(loops[axes.vector], [None, nr])
    # Column panels outside row blocks: one panel of the vector-loaded operand (packed, a few
    # KiB) stays in L1 while every row block uses it; row-major tiles would stream the whole
    # operand from memory once per row block.
    inside = panel_inner_axes(sch, block, axes)
    outer = [loops[i] for i in axes.spatial if i not in (axes.vector, axes.row, *inside)]
    panels_at = len(outer)
    outer += [v_outer, *(loops[i] for i in inside)]
    inner = [v_inner]
    if axes.row is not None:
        r_outer, r_inner = sch.split(loops[axes.row], [None, mr])
        outer.insert(panels_at if rows_outside else len(outer), r_outer)
        inner.insert(0, r_inner)
    reductions = [loops[i] for i in axes.reduction]
    runs = statement_runs(nr, lanes_for(target, 32))
    if len(runs) > 1 and mr < MIN_PASS_ROWS and seeding():
        # A search seed: no loop cut inside the reduction (common.search_seed); the panel as
        # statements of the widest width dividing it, one when none does (LLVM splits it).
        width = statement_width(nr, lanes_for(target, 32))
        runs = [(width, nr // width)]
    sch.reorder(*outer, *reductions, *inner)
    acc = sch.cache_write(block.block_rv, 0, ACC_SCOPE)
    _vector_innermost(sch, block, axes)
    sch.reverse_compute_at(acc, outer[-1])
    separate = epilogue is not None and (
        broadcasts(block, epilogue)
        or _both_guarded(sch, block, epilogue, axes, sizes)
        or _partial_panel(sch, block, epilogue, axes, nr)
    )
    if epilogue is not None and not separate:
        sch.reverse_compute_inline(epilogue.block_rv)
    # The write-back in the same runs as the tile: one load per stored statement (a 24-lane
    # load of a 16- and an 8-lane accumulator spilled every accumulator of a 72-channel
    # depthwise convolution to the stack and rebuilt it lane by lane; a GEMV's panel of
    # eight vectors is eight statements, not one 64-lane one).
    _cut_into_runs(sch, sch.get_loops(acc)[-1], runs)
    if len(inner) == 2:
        sch.unroll(inner[0])
    one_pass = len(runs) > 1 and mr < MIN_PASS_ROWS
    if len(runs) == 1:
        _vector_statements(sch, inner[-1], *runs[0])
    elif not one_pass:
        # Statements of unequal widths (whole vectors, then narrower ones): the lane loop
        # moved outside the reduction and cut into runs of equal widths, each run its own
        # reduction over the tile's rows (a block of its own: its init split off in it).
        sch.reorder(inner[-1], *reductions, *inner[:-1])
        updates = [sch.get_child_blocks(part)[0] for part in _partition(sch, inner[-1], runs)]
    if parallel_pays(work(block), target):
        _parallel(sch, outer)  # before the init is split off: a loop over it must be complete
    if len(runs) == 1:
        init = sch.decompose_reduction(block.block_rv, reductions[0])
        sch.vectorize(sch.get_loops(init)[-1])
        return separate
    if one_pass:
        # Too few rows for a pass per run: the runs side by side in one reduction (see
        # MIN_PASS_ROWS). The init stays in the update: the cut puts blocks between the
        # reduction loop and the update, which decompose_reduction refuses; LLVM peels the
        # first iteration off (a GEMV's 41-lane panel: five 8-lane FMAs and a scalar one a
        # step, no branch in the loop).
        _cut_into_runs(sch, sch.get_loops(block.block_rv)[-1], runs)
        return separate
    depth = len(inner) + len(reductions)  # the loops of a run: its lanes, reduction, rows
    for update, run in zip(updates, runs):
        lane, *rest = sch.get_loops(update)[-depth:]
        sch.reorder(*rest, lane)
        _vector_statements(sch, lane, *run)
        init = sch.decompose_reduction(update, rest[0])
        sch.vectorize(sch.get_loops(init)[-1])
    return separate


def _cut_into_runs(sch, loop, runs: list[tuple[int, int]]) -> None:
    """Partition ``loop`` into ``runs`` of (width, count) statements, each vectorized (see
    :func:`_vector_statements`)."""
    if len(runs) == 1:
        _vector_statements(sch, loop, *runs[0])
        return
    for part, run in zip(_partition(sch, loop, runs), runs):
        _vector_statements(sch, part, *run)


def _partition(sch, loop, runs: list[tuple[int, int]]) -> list:
    """``loop`` cut after each run of (width, count) statements; returns the parts."""
    return sch.loop_partition(loop, [w * k for w, k in runs[:-1]] + [None])


def _vector_statements(sch, loop, width: int, count: int) -> None:
    """``loop`` (``count`` x ``width`` lanes) as ``count`` unrolled vector statements of
    ``width`` lanes (one register-wide vector per statement: LLVM keeps ``lanes``-wide
    accumulators of a stack tile in registers, but spilled a 16-wide one on AVX2 on every k
    step); a single lane stays a plain statement (a 2-lane piece unrolled as two ran a
    34-channel depthwise convolution 4x slower than vectorized)."""
    if width == 1:
        sch.unroll(loop)
    elif count > 1:
        vectors, lane = sch.split(loop, [count, width])
        sch.unroll(vectors)
        sch.vectorize(lane)
    else:
        sch.vectorize(loop)


def panel_inner_axes(sch, block, axes: Axes) -> tuple[int, ...]:
    """The spatial iterators (besides the row axis) to run inside the column-panel loop: when
    the operands read along the vector axis (the panels: a convolution's weight) outweigh the
    others, every iterator they do not use, so each panel is read from memory once and then
    serves the whole output from the cache; else none (the panel loop inside them, as the
    row axis alone: the larger activations are read once).

    A 3x3 convolution of 512 channels on a 7x7 map (ResNet's last stage) has 9.4 MB of
    weights and a 0.1 MB input: with the output rows outside the panels, every row streamed
    all of the weights again (it ran at half the speed of the same convolution at 56x56)."""
    stmt = sch.get(block.block_rv)
    names = [it.var.name for it in block.iters]
    vector = names[axes.vector]
    panel_bytes = other_bytes = 0
    used: set = set()
    for read in stmt.reads:
        size = buffer_bytes(read.source)
        if size is None:
            return ()  # a symbolic operand: no size to weigh
        if streams(read, vector):
            panel_bytes += size
            used |= set().union(*(vars_of(d.min) for d in read.region))
        else:
            other_bytes += size
    if panel_bytes <= other_bytes:
        return ()
    return tuple(i for i in axes.spatial
                 if i not in (axes.vector, axes.row) and names[i] not in used)  # fmt: skip


def _both_guarded(sch, block, epilogue, axes: Axes, sizes: tuple[int, int]) -> bool:
    """Whether inlining the epilogue into the tile's write-back would need two guards, two
    of: a partial last panel, a padded computation's write-back (the epilogue covers fewer
    points than the tile computes), a partial last row tile (static rows, which
    padding.pad_vector_axis leaves unpadded). TVM 0.27 keeps only one predicate
    on such a block (the epilogue's when it is inlined after ``reverse_compute_at``, the
    tile's when before): a 172-wide output in 32-wide panels, its symbolic rows padded to 7,
    wrote 20 columns past each row, or whole padded rows past the output; 197 rows in tiles
    of 8 wrote three rows past it. The epilogue then stays a loop of its own (one more pass
    over the output, 1/K of the contraction's work)."""
    mr, nr = sizes
    dom = static_extents(block)
    partial = dom[axes.vector] is None or dom[axes.vector] % nr != 0
    row_tail = axes.row is not None and dom[axes.row] is not None and dom[axes.row] % mr != 0
    main = [it.dom for it in block.iters if it.kind == "S"]
    rest = [it.dom for it in epilogue.iters]
    differs = len(main) != len(rest) or not all(
        tvm_api.same_structure(a, b) for a, b in zip(main, rest)
    )
    return (partial and differs) or (row_tail and (partial or differs))


def _partial_panel(sch, block, epilogue, axes: Axes, nr: int) -> bool:
    """Whether the epilogue writes back fewer lanes than the block computes and the last
    ``nr``-lane panel is partial (a padded computation's slice: 197 of 208 columns in panels
    of 16): inlined into the tile's write-back, its condition is per lane and LLVM
    scalarized every panel's write-back. It then stays a pass of its own over the output,
    vectorized in whole vectors and a remainder (:func:`~.fallback.parallel_spatial`), on
    outputs of at least ``PARTIAL_PANEL_MIN_POINTS``."""
    computed = static_extents(block)[axes.vector]
    region = sch.get(block.block_rv).writes[0].region
    at = _vector_dims(sch, block, axes)
    out = sch.get(epilogue.block_rv).writes[0].source.shape
    if computed is None or len(at) != 1 or len(out) != len(region):
        return False
    valid = static_int(out[at[0]])
    points = static_product(out)
    return (
        valid is not None
        and valid < computed
        and valid % nr != 0
        and (points or 0) >= PARTIAL_PANEL_MIN_POINTS
    )


def _vector_dims(sch, block, axes: Axes) -> list[int]:
    """The dimensions of the block's output that its vector iterator indexes."""
    region = sch.get(block.block_rv).writes[0].region
    vector = block.iters[axes.vector].var.name
    return [i for i, d in enumerate(region) if vector in vars_of(d.min)]


def _vector_innermost(sch, block, axes: Axes) -> None:
    """When the vector axis is not the output's last dimension (a weight axis), lay the
    accumulator tile out with it last, so each accumulator is one contiguous vector."""
    region = sch.get(block.block_rv).writes[0].region
    at = _vector_dims(sch, block, axes)
    if len(at) != 1 or at[0] == len(region) - 1:
        return
    order = [i for i in range(len(region)) if i != at[0]] + at
    sch.transform_layout(block.block_rv, ("write", 0), permutation(order, str(region[0].min.ty)))


def _parallel(sch, outer) -> None:
    """Fuse the outer spatial tile loops and run them in parallel (all of them: a fused
    extent well above the core count balances the threads)."""
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if (loop_extent(sch, fused) or 2) > 1:
        sch.parallel(fused)


__all__ = ["NAME", "schedule_func", "tile"]
