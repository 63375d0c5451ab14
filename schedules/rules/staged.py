"""Functions of several stages no single pattern covers: attention as one function (batched
``Q K^T``, mask, softmax, ``P V``), reductions of different shapes side by side.

Reads the IR: after inlining element-wise chains, every block is scheduled where it stands
(at the root, one stage after the other) by the pattern it has on its own: a reduction with a
row axis is tiled as :mod:`.contraction` tiles it, a reduction along a trailing axis
gets vector partial sums in parallel rows as :mod:`.rows` does, an element-wise block is
parallel and vectorized. Stages keep their intermediates in memory (no fusion), but each runs
at its own pattern's speed; computing them inside one row loop instead would recompute a
whole ``K`` and ``V`` per query row.
"""

from __future__ import annotations

from tvm_ext.schedules.common import lanes_for, parallel_pays
from tvm_ext.schedules.rules.axes import find_axes
from tvm_ext.schedules.rules.contraction import tile
from tvm_ext.schedules.rules.fallback import parallel_spatial, work
from tvm_ext.schedules.rules.rows import lane_and_chunk, rfactor_lanes
from tvm_ext.schedules.rules.tile_shape import tile_sizes

from tvm_ext.base import tvm_api

NAME = "staged"


def schedule_func(func, target):
    sch = tvm_api.Schedule(func)
    blocks = tvm_api.dlight.analysis.normalize_prim_func(sch)
    if blocks is None or sum(1 for b in blocks if not b.is_injective()) < 2:
        return None
    blocks = tvm_api.dlight.base.try_inline_contiguous_spatial(sch, blocks)
    plan = []
    for block in blocks:
        if block.is_injective():
            plan.append(("injective", block, None))
            continue
        axes = find_axes(sch, block)
        if axes is not None and axes.row is not None:
            plan.append(("contraction", block, axes))
        elif block.dom_kind().endswith("R") and set(block.dom_kind()[:-1]) == {"S"}:
            plan.append(("reduction", block, None))
        else:
            return None  # a stage of no known pattern: leave the function to the fallback
    for kind, block, axes in plan:
        if kind == "contraction":
            tile(sch, block, axes, target, None, tile_sizes(block, axes, target))
        elif kind == "reduction":
            _parallel_rows(sch, block, target)
        else:
            parallel_spatial(sch, block, target, True, parallel_pays(work(block), target))
    return sch


def _parallel_rows(sch, block, target) -> None:
    """A trailing-axis reduction alone: vector partial sums, its rows in parallel."""
    loops = sch.get_loops(block.block_rv)
    rows = loops[:-1]
    partial = rfactor_lanes(sch, block, lanes_for(target, 32))
    fused = sch.fuse(*rows) if len(rows) > 1 else rows[0]
    if parallel_pays(work(block), target):
        sch.parallel(fused)
    if partial is not None:
        sch.compute_at(partial, fused, preserve_unit_loops=True)  # k0 may be a unit loop
        k1, k0 = lane_and_chunk(sch, partial)
        sch.reorder(k0, k1)
        sch.vectorize(k1)
