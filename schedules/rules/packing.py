"""Operand layouts for a contraction's tile: a weight packed once into the panels the tile
streams, an operand read along the vector axis in another dimension than its last copied
per call so each vector is one contiguous load.
"""

from __future__ import annotations

from tvm_ext.schedules.rules.axes import Axes, streams, vars_of, weight_names
from tvm_ext.schedules.rules.fallback import static_int

from tvm_ext.base import tvm_api


def pack_operands(sch, func, block, axes: Axes, nr: int, panel: int | None = None):
    """Copy operands read along the vector axis into a better layout; returns (per-call
    copies, weight copies).

    A weight (a ``layout_free_buffers`` parameter: Relax marks model weights so) is packed
    into ``nr``-wide panels (``panel``-wide when given: a divisor of ``nr``), ``W[.., k, j]
    -> Wp[j // nr, .., k, j % nr]``: the micro-kernel then streams one contiguous panel. The
    copy is marked as a layout-rewrite pre-process, so Relax's ``SplitLayoutRewritePreproc``
    lifts it out and constant folding runs it once.
    Any other operand that the vector axis indexes in another dimension than its last
    (``B[j, k]`` of a matmul with B transposed: a strided gather per vector) is copied per
    call into a layout with that dimension last.
    """
    stmt = sch.get(block.block_rv)
    vector = block.iters[axes.vector].var.name
    free_names = weight_names(func)
    padded = _padding_stages(sch, block)  # {padded copy: (its stage, the buffer it pads)}
    padded_weights = {name: stage for name, (stage, source) in padded.items()
                      if source in free_names}  # fmt: skip
    packs, weights = [], []
    for index, read in enumerate(stmt.reads):
        dims = [vars_of(d.min) for d in read.region]
        at = [i for i, used in enumerate(dims) if vector in used]
        if len(at) != 1 or len(dims[at[0]]) != 1 or not streams(read, vector):
            continue
        weight = read.source.name in free_names or read.source.name in padded_weights
        extent = static_int(read.source.shape[at[0]])
        dtype = str(read.source.shape[at[0]].ty)  # the index maps' (int32 or int64)
        if weight and extent is not None and extent % nr == 0:
            copy = sch.cache_read(block.block_rv, index, "global")
            width = panel or nr
            sch.transform_layout(copy, ("write", 0), _panels(len(dims), at[0], width, dtype))
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
            sch.transform_layout(copy, ("write", 0), permutation(order, dtype))
            if read.source.name in padded:
                # Its zero padding goes into the transposed copy: one pass over it, not two
                # (a symbolic-length attention's keys, padded to whole panels, then packed).
                sch.compute_inline(padded[read.source.name][0])
            packs.append(copy)
    return packs, weights


def alive(sch, info) -> bool:
    """Whether the stage ``info`` is still a block of ``sch`` (a weight's padding stage is
    inlined into its panels by :func:`pack_operands`)."""
    try:
        sch.get(info.block_rv)
    except (tvm_api.ScheduleError, ValueError, RuntimeError):
        return False
    return True


def _padding_stages(sch, block) -> dict:
    """{buffer name: (block, name of the buffer it copies)} of the stages before ``block``
    that copy one buffer (its padding)."""
    found = {}
    for producer in sch.get_producers(block.block_rv):
        stmt = sch.get(producer)
        if len(stmt.reads) == 1 and stmt.writes:
            found[stmt.writes[0].source.name] = (producer, stmt.reads[0].source.name)
    return found


def _panels(ndim: int, at: int, nr: int, dtype: str):
    """``W[.., j, ..] -> Wp[j // nr, .., j % nr]`` for the dimension ``at``."""
    rest = [i for i in range(ndim) if i != at]
    return tvm_api.tirx.IndexMap.from_func(
        lambda *idx: [idx[at] // nr, *[idx[i] for i in rest], idx[at] % nr],
        ndim=ndim,
        index_dtype=dtype,
    )


def permutation(order: list[int], dtype: str):
    """An index map that reads dimensions in ``order``."""
    return tvm_api.tirx.IndexMap.from_func(
        lambda *idx: [idx[i] for i in order], ndim=len(order), index_dtype=dtype
    )


__all__ = ["alive", "pack_operands", "permutation"]
