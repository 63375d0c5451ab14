"""The rule of last resort: any function, its outer spatial loops in parallel.

Every block that can be inlined into its consumer or producer is; each remaining block's
leading spatial loops are fused and run in parallel, and an injective block's innermost
spatial loop is vectorized by the target's lanes. Correct for any PrimFunc TVM can schedule;
fast for none in particular.
"""

from __future__ import annotations

from tvm_ext.schedules.common import PARALLEL_MIN_WORK

from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import lanes_for

NAME = "fallback"


def schedule_func(func, target):
    sch = tvm_api.Schedule(func)
    blocks = tvm_api.dlight.analysis.normalize_prim_func(sch)
    if blocks is None:  # not in dlight's normal form: leave it as it is (still correct)
        return sch
    for block in tvm_api.dlight.base.try_inline(sch, blocks):
        parallel_spatial(sch, block, target, vectorize=block.is_injective(), work=work(block))
    return sch


def work(block) -> int:
    """Iterations of a block's loop nest (its domain size; symbolic extents count as large)."""
    total = 1
    for extent in block.dom():
        total *= static_int(extent) or PARALLEL_MIN_WORK
    return total


def static_int(value) -> int | None:
    """A Python int, an IntImm's value, or None for a symbolic extent."""
    if isinstance(value, int):
        return value
    return int(value.value) if isinstance(value, tvm_api.tirx.IntImm) else None


def parallel_spatial(sch, block, target, vectorize: bool, work: int = PARALLEL_MIN_WORK) -> None:
    """Fuse ``block``'s (a dlight ``SBlockInfo``) leading spatial loops and run them in
    parallel; with ``vectorize``, split the innermost loop of an all-spatial nest by the
    target's lanes and vectorize it. Below ``PARALLEL_MIN_WORK`` the loop stays serial.

    A symbolic innermost extent (a sequence length) stays a loop of its own, outside the
    fused one: fused, every element would pay integer divisions by the symbolic extent to
    recover its indices, and split by the lanes its tail would be a per-lane predicate; a
    plain loop LLVM vectorizes with a scalar remainder."""
    kinds, loops = block.dom_kind(), block.get_loops()
    lead = len(kinds) - len(kinds.lstrip("S"))
    if lead == 0:
        return
    inner = None
    lanes = lanes_for(target, 32)
    last_extent = loop_extent(sch, loops[-1])
    if vectorize and lead == len(loops) and (last_extent or 0) >= lanes:
        last, inner = sch.split(loops[-1], [None, lanes])
        loops = [*loops[:-1], last]
    elif lead == len(loops) and lead > 1 and last_extent is None:
        lead -= 1
    outer = sch.fuse(*loops[:lead]) if lead > 1 else loops[0]
    if (loop_extent(sch, outer) or 2) > 1 and work >= PARALLEL_MIN_WORK:
        sch.parallel(outer)
    if inner is not None:
        sch.vectorize(inner)


def loop_extent(sch, loop) -> int | None:
    return static_int(sch.get(loop).extent)
