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
[mr rows, unrolled] [nr lanes, vectorized]`` with the ``mr x nr`` accumulator tile in a
stack buffer (global scope under 1 KiB: registers), the epilogue applied as the tile is
written back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm_ext.schedules.common import (
    ACC_SCOPE,
    PARALLEL_MIN_WORK,
    STACK_TILE_BYTES,
    lanes_for,
    vector_registers,
)
from tvm_ext.schedules.rules.fallback import loop_extent, parallel_spatial, static_int, work

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernel_base import np_dtype

NAME = "contraction"


@dataclass(frozen=True)
class Axes:
    """The reduction block's iterators by role (indices into its iterator list)."""

    spatial: tuple[int, ...]
    reduction: tuple[int, ...]
    vector: int  # the spatial iterator of the output's last dimension
    row: int | None  # a spatial iterator the vector-loaded operand does not use
    # A grouped convolution's channels per group when the vector axis is its output channel:
    # an operand indexed by ``f // group`` (its input) holds one value for a whole group's
    # lanes, so a panel of lanes within one group broadcasts it.
    group: int | None = None


def schedule_func(func, target):
    try:
        sch = _schedule(tvm_api.Schedule(func), func, target, pad=True)
    except tvm_api.ScheduleError:
        sch = None  # the padded computation did not take the schedule: the plain one
    return sch if sch is not None else _schedule(tvm_api.Schedule(func), func, target, pad=False)


def one_reduction(sch):
    """(pads, reduction, epilogue) of a function that is, after inlining its element-wise
    prologues, padding stages, one reduction block and at most one injective block after it
    (a list of zero or one); None for any other shape. The padding stays a stage of its own
    here (the caller decides: inlined, its condition sits on every load of a contraction's
    inner loop and LLVM scalarizes it; a 3x3 NCHW conv ran at 1.8 GFLOP/s that way)."""
    blocks = tvm_api.dlight.analysis.normalize_prim_func(sch)
    if blocks is None:
        return None
    pads = [b for b in blocks if b.is_injective() and b.is_data_pad(sch)]
    rest = tvm_api.dlight.base.try_inline_contiguous_spatial(
        sch, [b for b in blocks if b not in pads]
    )
    reductions = [b for b in rest if b.is_reduction()]
    if len(reductions) != 1 or len(rest) > 2:
        return None
    main = reductions[0]
    epilogue = [b for b in rest if b is not main]
    if epilogue and (rest.index(main) != 0 or not epilogue[0].is_injective()):
        return None  # a block before the reduction that cannot be inlined: not this shape
    return pads, main, epilogue


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
    mr, nr = tile_sizes(main, axes, target)
    packs, weights = pack_operands(sch, func, main, axes, nr)
    pads = [p for p in pads if _alive(sch, p)]  # a weight's padding went into its panels
    pads, main = inline_window_pads(sch, main, pads, axes)
    if tile(sch, main, axes, target, epilogue[0] if epilogue else None, (mr, nr)):
        pads.append(epilogue[0])  # an elementwise loop nest of its own, scheduled as a pad
    # When the tile loop runs in parallel, so do the copies before it: a 197 x 197 x 256
    # matmul with its padding copies serial ran 1.3x faster on 2 threads than on 1 where the
    # 208 x 208 one (no copies) ran 1.9x faster; with the copies in parallel, 168 -> 138 us
    # (Zen 4, 2 threads; likely the pool's idle workers parking during the serial copy).
    floor = PARALLEL_MIN_WORK if work(main) >= PARALLEL_MIN_WORK else 0
    for stage in pads + [tvm_api.dlight.analysis.get_sblock_info(sch, b) for b in packs]:
        parallel_spatial(sch, stage, target, vectorize=True, work=max(work(stage), floor))
    for block in weights:  # run once, at compile time, when the caller folds weights
        sch.annotate(block, "meta_schedule.layout_rewrite_preproc", True)
    return sch


def inline_window_pads(sch, block, pads: list, axes: Axes) -> tuple[list, object]:
    """Inline each padding stage the reduction reads through a window (``x[y + ry, ..]``: a
    convolution's spatial padding) and not along its vector axis; returns (the pads left,
    the block's refreshed info). Its value is then one broadcast scalar per row of the tile,
    its condition one scalar select with it, where the separate stage wrote and re-read a
    padded copy of the whole input on every call, element by element when the channels are
    fewer than a vector: a 3-channel stem convolution to 16 channels (224 x 224, stride 2)
    took 137 us with the stage and 27 us inlined (Zen 5). A padding read along the vector
    axis (NCHW: the width) stays a stage: inlined, its condition is per lane and LLVM
    scalarizes the tile (a 3x3 NCHW convolution ran at 1.8 GFLOP/s); so does a padding read
    with no window (``pad_einsum``'s copies of a matmul's operands)."""
    stmt = sch.get(block.block_rv)
    names = [it.var.name for it in block.iters]
    spatial = {names[i] for i in axes.spatial}
    reduction = {names[i] for i in axes.reduction}
    vector = names[axes.vector]

    def through_window(read) -> bool:
        dims = [_vars_of(d.min) for d in read.region]
        return not streams(read, vector) and any(d & spatial and d & reduction for d in dims)

    kept = []
    for pad in pads:
        out = sch.get(pad.block_rv).writes[0].source
        reads = [r for r in stmt.reads if r.source.same_as(out)]
        if reads and all(through_window(r) for r in reads):
            sch.compute_inline(pad.block_rv)
        else:
            kept.append(pad)
    if len(kept) == len(pads):
        return pads, block
    return kept, tvm_api.dlight.analysis.get_sblock_info(sch, block.block_rv)


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
        read.source.name in weights and any(vector in _vars_of(d.min) for d in read.region)
        for read in stmt.reads
    )
    padding = [1] * len(block.iters)
    if axes.group is not None:
        pass  # a grouped convolution's panels lie within its groups: never padded
    elif extent is None and not along_weight:
        padding[axes.vector] = 2 * lanes  # the panel tile_sizes takes for a symbolic axis
    elif extent is not None and extent > lanes and extent % lanes:
        # A weight's axis of whole 8-lane statements runs in panels of them (_odd_panel)
        # with no copy; any other odd axis is padded, a weight's too (a copy per call: a
        # pass over the weight, where a per-lane tail scalarizes every panel and ran a
        # 12 x 197 x 197 x 64 batch matmul with a layout-free B 33x slower than at 208).
        if not along_weight or extent % 8:
            padding[axes.vector] = lanes
    row = dom[axes.row] if axes.row is not None else 0
    if padding[axes.vector] == 1 and row is not None:
        return False  # nothing symbolic, every vector whole: no pad
    if axes.row is not None:
        # The rows too, to a whole number of row tiles (the tile tile_sizes will take): a row
        # tail's predicate beside the padded lanes' (the write-back's masked store) wrote
        # outside the output (TVM 0.27).
        step = padding[axes.vector]
        padded = list(dom)
        padded[axes.vector] = None if extent is None else -(-extent // step) * step
        mr, _ = _sizes(padded, axes, target)  # a divisor of a static row extent if any
        # Rows a tile divides run unpadded: no per-call copy of the operand the rows index.
        # Even a tile of fewer accumulators than the core's FMA chains pays (65 rows in tiles
        # of 5: 21 us against 27 us padded to 72 rows in tiles of 8, interleaved A/B, Zen 4).
        if row is None or row % mr:
            padded[axes.row] = None  # as many rows as fit
            mr, _ = _sizes(padded, axes, target)
            padding[axes.row] = mr
    reindexed = _as_einsum(sch, block, padding)
    if reindexed is None:
        return False
    sch.pad_einsum(block.block_rv, padding)
    for copy in reindexed:
        sch.compute_inline(copy)
    return True


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
        if padded & set().union(*(_vars_of(m) for m in mins)):
            return None
        copies.append(sch.reindex(block.block_rv, ("read", index)))
    return copies


def pack_operands(sch, func, block, axes: Axes, nr: int):
    """Copy operands read along the vector axis into a better layout; returns (per-call
    copies, weight copies).

    A weight (a ``layout_free_buffers`` parameter: Relax marks model weights so) is packed
    into ``nr``-wide panels, ``W[.., k, j] -> Wp[j // nr, .., k, j % nr]``: the micro-kernel
    then streams one contiguous panel. The copy is marked as a layout-rewrite pre-process, so
    Relax's ``SplitLayoutRewritePreproc`` lifts it out and constant folding runs it once.
    Any other operand that the vector axis indexes in another dimension than its last
    (``B[j, k]`` of a matmul with B transposed: a strided gather per vector) is copied per
    call into a layout with that dimension last.
    """
    stmt = sch.get(block.block_rv)
    vector = block.iters[axes.vector].var.name
    free_names = weight_names(func)
    padded_weights = _padded_weights(sch, block, free_names)
    packs, weights = [], []
    for index, read in enumerate(stmt.reads):
        dims = [_vars_of(d.min) for d in read.region]
        at = [i for i, used in enumerate(dims) if vector in used]
        if len(at) != 1 or len(dims[at[0]]) != 1 or not streams(read, vector):
            continue
        weight = read.source.name in free_names or read.source.name in padded_weights
        extent = static_int(read.source.shape[at[0]])
        dtype = str(read.source.shape[at[0]].ty)  # the index maps' (int32 or int64)
        if weight and extent is not None and extent % nr == 0:
            copy = sch.cache_read(block.block_rv, index, "global")
            sch.transform_layout(copy, ("write", 0), _panels(len(dims), at[0], nr, dtype))
            if read.source.name in padded_weights:
                # The weight's zero padding goes into its panels: one copy per call instead
                # of two. It stays a per-call copy: TVM's weight-repack passes take only a
                # plain copy as a repack (in a model, `whole_vector_weights` pads such a
                # weight once at compile time, before the rules see it).
                sch.compute_inline(padded_weights[read.source.name])
                packs.append(copy)
            else:
                weights.append(copy)
        elif at[0] != len(dims) - 1:
            order = [i for i in range(len(dims)) if i != at[0]] + at
            copy = sch.cache_read(block.block_rv, index, "global")
            sch.transform_layout(copy, ("write", 0), _permutation(order, dtype))
            packs.append(copy)
    return packs, weights


def _padded_weights(sch, block, weights: set[str]) -> dict:
    """{buffer name: block} of the padding stages before ``block`` that copy one weight."""
    found = {}
    for producer in sch.get_producers(block.block_rv):
        stmt = sch.get(producer)
        if len(stmt.reads) == 1 and stmt.reads[0].source.name in weights and stmt.writes:
            found[stmt.writes[0].source.name] = producer
    return found


def _panels(ndim: int, at: int, nr: int, dtype: str):
    """``W[.., j, ..] -> Wp[j // nr, .., j % nr]`` for the dimension ``at``."""
    rest = [i for i in range(ndim) if i != at]
    return tvm_api.tirx.IndexMap.from_func(
        lambda *idx: [idx[at] // nr, *[idx[i] for i in rest], idx[at] % nr],
        ndim=ndim,
        index_dtype=dtype,
    )


def _alive(sch, info) -> bool:
    try:
        sch.get(info.block_rv)
    except (tvm_api.ScheduleError, ValueError, RuntimeError):
        return False
    return True


def _is_float_accumulator(sch, block) -> bool:
    return str(sch.get(block.block_rv).writes[0].source.dtype).startswith("float")


# A symbolic extent ranks above every static one when the longest axis is chosen.
_SYMBOLIC = 1 << 62


def static_extents(block) -> list[int | None]:
    """The block's iterator extents, None where an extent is symbolic (a sequence length)."""
    return [static_int(d) for d in block.dom()]


def _vars_of(expr) -> set:
    return {v.name for v in tvm_api.dlight.analysis.collect_vars_used_in_prim_expr(expr)}


def _permutation(order: list[int], dtype: str):
    """An index map that reads dimensions in ``order``."""
    return tvm_api.tirx.IndexMap.from_func(
        lambda *idx: [idx[i] for i in order], ndim=len(order), index_dtype=dtype
    )


def weight_names(func) -> set[str]:
    """Names of the parameters Relax marked layout-free (the model's weights)."""
    free = {int(i) for i in (func.attrs.get("layout_free_buffers", []) if func.attrs else [])}
    return {func.params[i].name for i in free if i < len(func.params)}


def find_axes(sch, block, weights: set[str] = frozenset(), lanes: int = 1) -> Axes | None:
    """Which iterator is the vector axis and which the row axis, from the block's accesses.

    The vector axis is the output's last dimension (unit-stride stores), unless that axis
    streams activations while a weight is indexed by another spatial iterator of whole
    vectors (``F`` of an NCHW conv: the output's last axis is its width): then the vectors run
    along that weight axis (packed into panels, one contiguous vector load per step feeds
    ``mr`` broadcasts of the activations), the row axis is the output's last dimension, and
    the accumulator tile keeps the vector axis innermost."""
    stmt = sch.get(block.block_rv)
    kinds = block.dom_kind()
    names = [it.var.name for it in block.iters]  # unit iterators are left out of both
    spatial = tuple(i for i, k in enumerate(kinds) if k == "S")
    reduction = tuple(i for i, k in enumerate(kinds) if k == "R")
    if not spatial or not reduction or len(kinds) != len(spatial) + len(reduction):
        return None
    last = stmt.writes[0].region[-1].min
    if not isinstance(last, tvm_api.tirx.Var) or last.name not in names:
        return None
    vector = names.index(last.name)
    if vector not in spatial:
        return None
    extents = static_extents(block)
    along = _weight_axis(stmt, names, spatial, weights, lanes, extents)
    if along is not None and not _indexes_weight(stmt, last.name, weights):
        vector, preferred = along, names.index(last.name)
    else:
        preferred = None
    group = group_width(stmt, names[vector])
    # Operands read along the vector axis (it indexes one of their dimensions; a grouped
    # input, read at ``f // group``, is one value for a panel's lanes: broadcast, not read
    # along it).
    streamed = [r for r in stmt.reads if streams(r, names[vector])]
    used = set().union(set(), *(_vars_of(d.min) for r in streamed for d in r.region))
    rows = [i for i in spatial if i != vector and names[i] not in used]
    if preferred in rows:
        row = preferred
    else:
        # The longest row axis; a symbolic one (a sequence length) counts as the longest. Of
        # equal ones, the output's later dimension (max keeps the first: rows reversed): an
        # NHWC convolution's width, whose rows are adjacent pixels (contiguous input
        # channels, output rows one after the other), not its height, whose rows are image
        # rows apart (a 1x1 convolution 16 -> 64 channels on a 112 x 112 map, rows along
        # the height: 96 us, along the width: 53 us, Zen 5; resnet18's kernels 3 % faster
        # in all, mobilenet_v3_large's 17 %).
        row = (
            max(rows[::-1], key=lambda i: _SYMBOLIC if extents[i] is None else extents[i])
            if rows
            else None
        )
    return Axes(spatial, reduction, vector, row, group)


def streams(read, var: str) -> bool:
    """Whether ``var`` indexes ``read`` other than through ``var // c`` (a grouped
    convolution's input channel, ``f // group * width + rc``, changes once per group)."""
    return any(_uses(d.min, var)[0] for d in read.region)


def group_width(stmt, var: str) -> int | None:
    """The group of a grouped convolution whose output channel is ``var``: ``c`` when some
    read uses ``var`` only as ``var // c`` (c > 1, the same ``c`` in every such read), else
    None (a plain contraction, or a depthwise convolution: its input channel is ``var``)."""
    divisors: set[int] = set()
    for read in stmt.reads:
        plain, groups = False, set()
        for d in read.region:
            p, g = _uses(d.min, var)
            plain, groups = plain or p, groups | g
        if not plain:
            divisors |= groups
    if len(divisors) != 1:
        return None
    (width,) = divisors
    return width if width > 1 else None


def _uses(expr, var: str) -> tuple[bool, set[int]]:
    """(whether ``expr`` uses ``var`` other than as ``var // c``, the constants ``c`` it is
    divided by), over the arithmetic of an index expression."""
    tirx = tvm_api.tirx
    if isinstance(expr, tirx.Var):
        return expr.name == var, set()
    if (
        isinstance(expr, tirx.FloorDiv)
        and isinstance(expr.a, tirx.Var)
        and expr.a.name == var
        and isinstance(expr.b, tirx.IntImm)
    ):
        return False, {int(expr.b.value)}
    if isinstance(expr, (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod)):
        pa, ga = _uses(expr.a, var)
        pb, gb = _uses(expr.b, var)
        return pa or pb, ga | gb
    if isinstance(expr, tirx.Cast):
        return _uses(expr.value, var)
    return var in _vars_of(expr), set()


def _read_along(read, var: str) -> bool:
    """Whether ``var`` alone indexes one of the dimensions of ``read``."""
    dims = [_vars_of(d.min) for d in read.region]
    return any(d == {var} for d in dims)


def _indexes_weight(stmt, var: str, weights: set[str]) -> bool:
    return any(r.source.name in weights and _read_along(r, var) for r in stmt.reads)


def _weight_axis(stmt, names, spatial, weights, lanes, extents) -> int | None:
    """A spatial iterator of whole vectors that alone indexes a dimension of a weight and that
    no other operand uses (an output channel), or None."""
    if lanes <= 1:
        return None
    others = set().union(
        set(), *(_vars_of(d.min) for r in stmt.reads if r.source.name not in weights
                 for d in r.region)
    )  # fmt: skip
    for i in spatial:
        if extents[i] is None or extents[i] % lanes or names[i] in others:
            continue
        if _indexes_weight(stmt, names[i], weights):
            return i
    return None


def _tile_size(extent: int | None, limit: int, step: int = 1) -> int:
    """``extent`` when it is within ``limit``; else the largest multiple of ``step`` in
    [limit / 2, limit] dividing ``extent``; else ``limit`` (a tail runs under a predicate;
    so does a symbolic ``extent``'s, None)."""
    if extent is None:
        return limit
    if extent <= limit:
        return extent
    for size in range(limit // step * step, max(limit // 2, step) - 1, -step):
        if extent % size == 0:
            return size
    return limit


def tile_sizes(block, axes: Axes, target) -> tuple[int, int]:
    """(mr, nr): ``nr`` lanes of one to three vectors, as many rows as keep the
    accumulators, the vector operands and a broadcast in the registers and the tile on the
    stack; of those, the tile with the most accumulators (independent FMA chains: a core
    needs its FMA latency x pipes of them in flight, 8 on Zen 4/5 and Golden Cove).

    Three vectors only when they divide the axis, and with 32 vector registers (on AVX2's
    16 a 4 x 24 tile would use all of them): BERT's M = 128 rows leave a two-vector tile 4
    rows (the seven that fit do not divide 128), 8 accumulators; 4 x 48 has 12."""
    return _sizes(static_extents(block), axes, target)


def _sizes(dom: list, axes: Axes, target) -> tuple[int, int]:
    """tile_sizes for the iterator extents ``dom`` (None where symbolic)."""
    lanes = lanes_for(target, 32)
    n = dom[axes.vector]
    if axes.group is not None:
        # A panel within one group (its input value is one broadcast for all its lanes).
        nr = _group_panel(axes.group, lanes)
        return _rows(dom, axes, nr, max(nr // statement_width(nr, lanes), 1), target), nr
    if n is not None and n > lanes and n % lanes:
        nr = _odd_panel(n, lanes)
    else:
        nr = _tile_size(n, 2 * lanes, lanes) if n is None or n >= lanes else n
    mr = _rows(dom, axes, nr, max(nr // statement_width(nr, lanes), 1), target)
    if n is not None and n % (3 * lanes) == 0 and vector_registers(target) >= 32:
        mr3 = _rows(dom, axes, 3 * lanes, 3, target)
        if 3 * mr3 > mr * max(nr // lanes, 1):
            return mr3, 3 * lanes
    return mr, nr


def _group_panel(group: int, lanes: int) -> int:
    """The panel of a grouped convolution's output channels: the whole group when it is
    within three vectors (8 channels a group: 8-lane vectors), else its widest divisor that
    is (a 128-channel group in panels of 32 on AVX2)."""
    for size in range(min(group, 3 * lanes), 0, -1):
        if group % size == 0:
            return size
    return 1


def _odd_panel(n: int, lanes: int) -> int:
    """The panel of a vector axis that is no whole number of vectors (it was not padded: a
    weight's output channels, a window's channels): the widest divisor of ``n`` up to three
    vectors that is a whole number of 8-lane statements (24, 40 or 120 channels, 1000
    classes: panels of 24, 40, 40, 40); else the whole axis when it is within three vectors
    (33 channels: a 33-lane vector LLVM splits into two full ones and a scalar); else two
    vectors, the last panel under a per-lane predicate (LLVM scalarizes it: the slow case).
    A tail predicate on every panel costs far more: a 33-channel depthwise convolution in
    32-lane panels ran 15x slower than unscheduled."""
    for size in range(3 * lanes // 8 * 8, 7, -8):
        if n % size == 0:
            return size
    return n if n <= 3 * lanes else 2 * lanes


def _rows(dom, axes: Axes, nr: int, vectors: int, target) -> int:
    """The row tile for an ``nr``-lane panel of ``vectors`` vectors (see tile_sizes)."""
    fit = _row_fit(nr, vectors, target)
    return _tile_size(dom[axes.row], fit) if axes.row is not None else 1


def _row_fit(nr: int, vectors: int, target) -> int:
    """The most rows an ``nr``-lane tile of ``vectors`` vectors keeps in registers."""
    fit = min((vector_registers(target) - vectors - 1) // vectors, 8)
    return min(fit, (STACK_TILE_BYTES - 1) // (4 * nr))


def tile(sch, block, axes: Axes, target, epilogue, sizes: tuple[int, int]) -> bool:
    """The register-blocked loop nest (see the module docstring); returns whether the
    epilogue stays a loop nest of its own (see :func:`_both_guarded`), for the caller to
    schedule."""
    mr, nr = sizes
    loops = [it.loop_rv for it in block.iters]
    v_outer, v_inner = sch.split(loops[axes.vector], [None, nr])
    # Column panels outside row blocks: one panel of the vector-loaded operand (packed, a few
    # KiB) stays in L1 while every row block uses it; row-major tiles would stream the whole
    # operand from memory once per row block.
    inside = panel_inner_axes(sch, block, axes)
    outer = [loops[i] for i in axes.spatial if i not in (axes.vector, axes.row, *inside)]
    outer += [v_outer, *(loops[i] for i in inside)]
    inner = [v_inner]
    if axes.row is not None:
        r_outer, r_inner = sch.split(loops[axes.row], [None, mr])
        outer.append(r_outer)
        inner.insert(0, r_inner)
    reductions = [loops[i] for i in axes.reduction]
    sch.reorder(*outer, *reductions, *inner)
    acc = sch.cache_write(block.block_rv, 0, ACC_SCOPE)
    _vector_innermost(sch, block, axes)
    sch.reverse_compute_at(acc, outer[-1])
    separate = epilogue is not None and (
        broadcasts(block, epilogue) or _both_guarded(sch, block, epilogue, axes, nr)
    )
    if epilogue is not None and not separate:
        sch.reverse_compute_inline(epilogue.block_rv)
    sch.vectorize(sch.get_loops(acc)[-1])
    if len(inner) == 2:
        sch.unroll(inner[0])
    width = statement_width(nr, lanes_for(target, 32))
    if width < nr:
        # One register-wide vector per statement: LLVM keeps `lanes`-wide accumulators of a
        # stack tile in registers, but spilled a 16-wide one on AVX2 on every k step.
        vectors, lane = sch.split(inner[-1], [None, width])
        sch.unroll(vectors)
        sch.vectorize(lane)
    else:
        sch.vectorize(inner[-1])
    if work(block) >= PARALLEL_MIN_WORK:
        _parallel(sch, outer)  # before the init is split off: a loop over it must be complete
    init = sch.decompose_reduction(block.block_rv, reductions[0])
    sch.vectorize(sch.get_loops(init)[-1])
    return separate


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
        size = _buffer_bytes(read.source)
        if size is None:
            return ()  # a symbolic operand: no size to weigh
        if streams(read, vector):
            panel_bytes += size
            used |= set().union(*(_vars_of(d.min) for d in read.region))
        else:
            other_bytes += size
    if panel_bytes <= other_bytes:
        return ()
    return tuple(i for i in axes.spatial
                 if i not in (axes.vector, axes.row) and names[i] not in used)  # fmt: skip


def _buffer_bytes(buffer) -> int | None:
    points = _static_product(buffer.shape)
    return None if points is None else points * np_dtype(str(buffer.dtype)).itemsize


def _static_product(extents) -> int | None:
    """The product of ``extents``, None when one is symbolic."""
    values = [static_int(e) for e in extents]
    return None if any(v is None for v in values) else math.prod(values)


def statement_width(nr: int, lanes: int) -> int:
    """The lanes of one vector statement of an ``nr``-lane tile row: ``lanes`` when they divide
    ``nr``, else the largest power of two that does (an ``nr`` of 24 as three 8-lane
    statements: a 24-lane one is no register size, and LLVM's split of it ran a 1x1
    convolution to 24 channels at 21 GFLOP/s, three 8-lane ones at 210); ``nr`` itself when
    no power of two of at least 4 lanes divides it (a 7-lane tile stays one statement)."""
    width = lanes
    while width > 1 and nr % width:
        width //= 2
    return width if width >= 4 else nr


def broadcasts(block, epilogue) -> bool:
    """Whether the epilogue writes more points than the reduction computes (a squeeze-excitation
    scale: a 1x1 convolution to 480 channels multiplying a 14 x 14 x 480 map): it is no
    element-wise write-back of the tile and stays a loop nest of its own (TVM's inlining of
    it into the write-back failed with an internal error)."""
    main = _static_product(it.dom for it in block.iters if it.kind == "S")
    rest = _static_product(it.dom for it in epilogue.iters)
    return main is not None and rest is not None and rest > main


def _both_guarded(sch, block, epilogue, axes: Axes, nr: int) -> bool:
    """Whether inlining the epilogue into the tile's write-back would need two guards: the
    epilogue is a padded computation's write-back (fewer rows than the padded tile covers)
    and the vector axis ends in a partial panel. TVM 0.27 keeps only one predicate on such a
    block (the epilogue's when it is inlined after ``reverse_compute_at``, the tile's when
    before): a 172-wide output in 32-wide panels, its symbolic rows padded to 7, wrote 20
    columns past each row, or whole padded rows past the output. The epilogue then stays a
    loop of its own (one more pass over the output, 1/K of the contraction's work)."""
    vector = static_extents(block)[axes.vector]
    if vector is not None and vector % nr == 0:
        return False
    main = [it.dom for it in block.iters if it.kind == "S"]
    rest = [it.dom for it in epilogue.iters]
    return len(main) != len(rest) or not all(
        tvm_api.same_structure(a, b) for a, b in zip(main, rest)
    )


def _vector_innermost(sch, block, axes: Axes) -> None:
    """When the vector axis is not the output's last dimension (a weight axis), lay the
    accumulator tile out with it last, so each accumulator is one contiguous vector."""
    region = sch.get(block.block_rv).writes[0].region
    vector = block.iters[axes.vector].var.name
    at = [i for i, d in enumerate(region) if vector in _vars_of(d.min)]
    if len(at) != 1 or at[0] == len(region) - 1:
        return
    order = [i for i in range(len(region)) if i != at[0]] + at
    sch.transform_layout(block.block_rv, ("write", 0), _permutation(order, str(region[0].min.ty)))


def _parallel(sch, outer) -> None:
    """Fuse the outer spatial tile loops and run them in parallel (all of them: a fused
    extent well above the core count balances the threads)."""
    fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
    if (loop_extent(sch, fused) or 2) > 1:
        sch.parallel(fused)


__all__ = [
    "Axes",
    "NAME",
    "find_axes",
    "group_width",
    "one_reduction",
    "schedule_func",
    "streams",
    "tile",
]
