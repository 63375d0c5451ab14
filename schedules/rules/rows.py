"""Reductions along an axis with their element-wise neighbours: softmax, layernorm, rmsnorm,
mean/max/sum, as Relax's FuseOps leaves them in one function.

Reads the IR: blocks whose iterators are leading spatial axes (the rows) and then either
spatial axes (element-wise stages) or one trailing reduction axis (``S..SR``), the last block
element-wise. The schedule is :mod:`.rows_cpu`'s, derived from the IR instead of block names:
every stage is computed inside the parallel row loop of the output, so a row's intermediates
stay in L1; each reduction is split by the vector width and ``rfactor``-ed (``lanes`` partial
results accumulated as one vector, then folded); element-wise stages are vectorized.
"""

from __future__ import annotations

import math

from tvm_ext.schedules.common import lanes_for, symbolic_extent_least
from tvm_ext.schedules.rules.fallback import calls_libm, loop_extent, pays, static_int

from tvm_ext.base import tvm_api

NAME = "rows"


def schedule_func(func, target):
    sch = tvm_api.Schedule(func)
    blocks = tvm_api.dlight.analysis.normalize_prim_func(sch)
    if blocks is None or len(blocks) < 2 or not blocks[-1].is_injective():
        return None
    reductions = [b for b in blocks if not b.is_injective()]
    if not reductions or any(not _row_reduction(b.dom_kind()) for b in reductions):
        return None
    rows = min(len(b.dom_kind()) - 1 for b in reductions)  # leading spatial axes shared
    if any(len(b.dom_kind()) - 1 != rows for b in reductions):
        return None  # a reduction with its own spatial axes (a matmul inside): not rows
    out_kind = blocks[-1].dom_kind()
    if len(out_kind) <= rows or out_kind[:rows] != "S" * rows:
        return None
    if any(not _same_rows(b, blocks[-1], rows) for b in reductions):
        return None  # the reduction's rows are not the output's leading axes
    stages = _inline_single_use(sch, blocks[:-1])
    lanes = lanes_for(target, 32)
    if any(_odd_reduction(b, lanes) for b in stages) and _one_row_loop(stages, blocks[-1], rows):
        return _merged(sch, stages, blocks[-1], rows, lanes, target)
    ordered, partials = [], []
    for block in stages:
        if not block.is_injective():
            partial = rfactor_lanes(sch, block, lanes)
            ordered += [partial] if partial is not None else []
            partials += [partial] if partial is not None else []
        ordered.append(block.block_rv)
    out = blocks[-1].block_rv
    row, outer = _row_loops(sch, sch.get_loops(out)[:rows])
    for block in reversed(ordered):
        sch.compute_at(block, row, preserve_unit_loops=True)
    if pays(sch, [*stages, blocks[-1]], target):
        sch.parallel(outer)
    for partial in partials:
        k1, k0 = lane_and_chunk(sch, partial)
        sch.reorder(k0, k1)
        sch.vectorize(k1)
    for block in [b.block_rv for b in stages if b.is_injective()] + [out]:
        _vectorize_inner(sch, block, lanes)
    return sch


def _row_loops(sch, loops):
    """(the loop a row's stages are computed at, the loop run in parallel) of the output's
    row loops: one fused loop, unless a symbolic extent is not the outermost (12 heads x
    ``n`` rows: fused, their bindings divide by ``n``, which is not quasi-affine, and
    ``parallel`` refuses the loop; a 12 x n x n softmax then fell to the staged rule and ran
    9x its time at a static ``n``): then the innermost row loop, in the fused static loops
    before the first symbolic one (or the outermost) run in parallel."""
    if len(loops) == 1:
        return loops[0], loops[0]
    if all(loop_extent(sch, loop) is not None for loop in loops[1:]):
        row = sch.fuse(*loops)
        return row, row
    first = next(i for i, loop in enumerate(loops) if loop_extent(sch, loop) is None)
    outer = sch.fuse(*loops[:first]) if first > 1 else loops[0]
    return loops[-1], outer


def _odd_reduction(block, lanes: int) -> bool:
    """Whether ``block`` is a reduction of more than ``lanes`` of an odd extent (197 columns,
    49: no vector divides it, its steps one chain). An even one keeps partials of the power
    of two dividing it: a 12 x 66 x 66 softmax ran in 93 us with 2-lane partials, 107 us
    with 16 predicated ones (12 x 98 x 98 and 100: equal). A symbolic extent is taken so
    where its declared least value fills the lanes: a lane no step reaches is never
    initialized (the partial's init is inside the tail predicate; 5 columns read NaNs), and
    ``decompose_reduction`` refuses after ``merge``."""
    if block.is_injective():
        return False
    extent = static_int(block.dom()[-1])
    if extent is None:  # symbolic: as odd, where it is known to fill every lane (see _merged)
        return symbolic_extent_least(block.dom()[-1]) >= lanes
    return extent > lanes and extent % 2 == 1


def _one_row_loop(stages, out, rows: int) -> bool:
    """Whether every stage's leading ``rows`` extents are the output's (the same expressions):
    their row loops can then be merged into one (see _merged)."""
    want = out.dom()[:rows]
    return all(
        all(tvm_api.same_structure(a, b) for a, b in zip(s.dom()[:rows], want)) for s in stages
    )


def _merged(sch, stages, out, rows: int, lanes: int, target):
    """The schedule for a row whose reduction no vector divides: each reduction split by
    ``lanes`` under a tail predicate and ``rfactor``-ed where it stands, every stage's row
    loops fused and all merged into one parallel row loop (``merge``), each stage where
    it was. ``compute_at`` would rebuild the partial's loops and drop the tail predicate
    (TVM 0.27: a softmax over 197 columns read past its rows and summed them); unsplit,
    the max and the sum ran as chains of 197 dependent scalar steps (12 x 197 x 197:
    1.35x the time of 208 columns; as ``lanes`` partials, 1.02x). The partial's loop holds
    the predicate, so LLVM runs its lanes as independent scalar steps, not a vector."""
    nests, partials = [], []
    for block in stages:
        if not block.is_injective():
            partial = rfactor_lanes(sch, block, lanes, tail=_odd_reduction(block, lanes))
            if partial is not None:
                nests.append(partial)
                partials.append(partial)
        nests.append(block.block_rv)
    nests.append(out.block_rv)
    if all(loop_extent(sch, loop) is not None for loop in sch.get_loops(out.block_rv)[1:rows]):
        tops = []
        for block in nests:
            loops = sch.get_loops(block)[:rows]
            tops.append(sch.fuse(*loops) if rows > 1 else loops[0])
        row = sch.merge(*tops)
    else:  # a symbolic inner row extent (heads x n rows) cannot be fused: merged level by level
        row = sch.merge(*[sch.get_loops(block)[0] for block in nests])
        for level in range(1, rows):
            sch.merge(*[sch.get_loops(block)[level] for block in nests])
    if pays(sch, [*stages, out], target):
        sch.parallel(row)
    for partial in partials:
        sch.vectorize(sch.get_loops(partial)[-1])
    for block in [b.block_rv for b in stages if b.is_injective()] + [out.block_rv]:
        _vectorize_inner(sch, block, lanes)
    return sch


def _row_reduction(kind: str) -> bool:
    """``S..SR``: spatial rows, one trailing reduction axis."""
    return len(kind) >= 2 and kind.endswith("R") and set(kind[:-1]) == {"S"}


def _same_rows(reduction, out, rows: int) -> bool:
    """Whether ``reduction``'s row extents are the output's leading ones: every stage is
    computed per output row. EfficientNet's squeeze-excitation (a 1x1 conv over 20 channels
    to 480, its sigmoid scaling a 14 x 14 x 480 map) has one reduction row per channel, the
    output's last axis, not its first: taken as rows, the whole reduction ran once per map
    row in a 480-lane vector statement that LLVM took 40 s to compile."""
    want = [static_int(d) for d in reduction.dom()[:rows]]
    have = [static_int(d) for d in out.dom()[:rows]]
    return all(a is None or b is None or a == b for a, b in zip(want, have))


def _inline_single_use(sch, blocks):
    """Inline element-wise stages read by one consumer only (a cast, a square): inlining one
    read by several (softmax's ``exp``) would compute it once per reader."""
    kept = []
    for block in blocks:
        if block.is_injective() and len(sch.get_consumers(block.block_rv)) == 1:
            try:
                sch.compute_inline(block.block_rv)
                continue
            except tvm_api.ScheduleError:
                pass
        kept.append(block)
    return kept


# A row of one vector folds no partials: its lanes are reduced one by one all the same, after
# a store and a load of the partial (a 12 x 16 x 16 softmax: 13.4 us, 7.0 unscheduled).
MIN_CHUNKS = 2


def rfactor_lanes(sch, block, lanes: int, tail: bool = False):
    """Split the reduction loop by the widest power of two up to ``lanes`` dividing it and
    rfactor the inner part: the block then folds ``lanes`` vector partials. With ``tail``,
    split by ``lanes`` under a tail predicate (an odd extent, see _merged: the caller must
    not ``compute_at`` the partial, which would drop the predicate)."""
    k = sch.get_loops(block.block_rv)[-1]
    extent = loop_extent(sch, k)
    width = lanes if tail else math.gcd(extent, lanes) if extent else 1
    if width < 2 or (not tail and extent // width < MIN_CHUNKS):
        return None
    _, k1 = sch.split(k, [None, width])
    return sch.rfactor(k1, len(block.dom_kind()) - 1)  # partial[*rows, lane]


def lane_and_chunk(sch, partial):
    """(lanes loop, chunks loop) of an rfactor-ed partial block after ``compute_at``: the
    loops its lane iterator and its reduction iterator are bound to. Read from the bindings,
    not the loop order: a row axis of extent 1 (BERT's batch of one) leaves a unit loop after
    them, and taking the last two loops vectorized that unit loop while the lanes ran scalar
    (a 16 x 64 layer norm at 32x its floor)."""
    loops = sch.get_loops(partial)
    realize = sch.get(loops[-1]).body
    by_var = {sch.get(loop).loop_var: loop for loop in loops}
    lanes, chunks = [], []
    for iv, value in zip(realize.block.iter_vars, realize.iter_values):
        loop = next((by_var[v] for v in by_var if v.same_as(value)), None)
        if loop is None or loop_extent(sch, loop) == 1:
            continue
        (chunks if int(iv.iter_type) == REDUCE else lanes).append(loop)
    if len(lanes) == 1 and len(chunks) == 1:
        return lanes[0], chunks[0]
    return loops[-2], loops[-1]  # the order compute_at leaves when every row loop is fused


REDUCE = 2  # IterVar.CommReduce


def _vectorize_inner(sch, block, lanes: int) -> None:
    """Vectorize an element-wise stage's row loop by the widest power of two up to ``lanes``
    that divides it; a row of more than ``lanes`` that no wide vector divides (197 columns,
    50) is cut into whole ``lanes`` vectors and a plain remainder loop instead (a 50-column
    softmax ran its ``exp`` and its division in 2-lane vectors). A symbolic row (a sequence
    length) stays a plain loop: split by the lanes, its tail is a predicate inside the
    vectorized loop, and TVM's vectorizer then emits every lane as a scalar statement (a
    12 x n x n softmax at n = 384 in 873 us, the static one in 255; plain, 367 us)."""
    loops = sch.get_loops(block)
    if len(loops) <= 1 or calls_libm(sch.get(block).body):
        return
    extent = loop_extent(sch, loops[-1])
    if extent is None:
        return  # a plain loop, which LLVM vectorizes with a remainder (see the docstring)
    width = math.gcd(extent, lanes)
    if width < min(lanes, 8) and extent > lanes:
        first = sch.loop_partition(loops[-1], [extent // lanes * lanes, None])[0]
        _, inner = sch.split(first, [None, lanes])
        sch.vectorize(inner)
    elif width >= 2:
        _, inner = sch.split(loops[-1], [None, width])
        sch.vectorize(inner)
