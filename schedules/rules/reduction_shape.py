"""The shape the contraction, window and dot rules take: after inlining a function's
element-wise prologues, padding stages, one reduction block and its injective epilogue
(:func:`one_reduction`), with the part of the epilogue a later block broadcasts held apart
(:func:`broadcasts`)."""

from __future__ import annotations

import math

from tvm_ext.schedules.rules.fallback import static_int

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernel_base import np_dtype


def one_reduction(sch):
    """(pads, reduction, epilogue) of a function that is, after inlining its element-wise
    prologues, padding stages, one reduction block and at most one injective block after it
    (a list of zero or one), or two where the second broadcasts the first (see
    :func:`_held_before_broadcast`); None for any other shape. The padding stays a stage of
    its own here (the caller decides: inlined, its condition sits on every load of a
    contraction's inner loop and LLVM scalarizes it; a 3x3 NCHW conv ran at 1.8 GFLOP/s that
    way). Past the first, the epilogue's blocks are loop nests of their own, the caller's to
    schedule."""
    blocks = tvm_api.dlight.analysis.normalize_prim_func(sch)
    if blocks is None:
        return None
    pads = [b for b in blocks if b.is_injective() and b.is_data_pad(sch)]
    held = _held_before_broadcast(blocks)
    rest = tvm_api.dlight.base.try_inline_contiguous_spatial(
        sch, [b for b in blocks if b not in pads and b is not held]
    )
    if held is not None:
        held = tvm_api.dlight.analysis.get_sblock_info(sch, held.block_rv)
        at = next((i + 1 for i, b in enumerate(rest) if b.is_reduction()), None)
        if at is None:
            return None
        rest = [*rest[:at], held, *rest[at:]]
    reductions = [b for b in rest if b.is_reduction()]
    if len(reductions) != 1 or len(rest) > (3 if held is not None else 2):
        return None
    main = reductions[0]
    epilogue = [b for b in rest if b is not main]
    if epilogue and (rest.index(main) != 0 or not all(b.is_injective() for b in epilogue)):
        return None  # a block before the reduction that cannot be inlined: not this shape
    return pads, main, epilogue


def _held_before_broadcast(blocks):
    """The last block of a reduction's element-wise epilogue when a block after it broadcasts
    it over more points (a squeeze-excitation gate: a 1x1 convolution on a 1 x 1 map, its
    bias and sigmoid, multiplying a 7 x 7 x 1152 map), kept a block of its own: inlined
    into the broadcast it ran once per point of the map, not once per channel (the sigmoid
    49 times over; 60 us, serial, for a gate of 1152 channels). None where there is none."""
    reductions = [i for i, b in enumerate(blocks) if b.is_reduction()]
    if len(reductions) != 1:
        return None
    main = blocks[reductions[0]]
    extents = [static_int(it.dom) for it in main.iters if it.kind == "S"]
    if None in extents:
        return None
    chain = []
    for block in blocks[reductions[0] + 1 :]:
        if not block.is_injective():
            return None
        if [static_int(it.dom) for it in block.iters] == extents:
            chain.append(block)
        elif chain and broadcasts(main, block):
            return chain[-1]
        else:
            return None
    return None


def static_product(extents) -> int | None:
    """The product of ``extents``, None when one is symbolic."""
    values = [static_int(e) for e in extents]
    return None if any(v is None for v in values) else math.prod(values)


def buffer_bytes(buffer) -> int | None:
    """The bytes of ``buffer``, None when a dimension is symbolic."""
    points = static_product(buffer.shape)
    return None if points is None else points * np_dtype(str(buffer.dtype)).itemsize


def broadcasts(block, epilogue) -> bool:
    """Whether the epilogue writes more points than the reduction computes (a squeeze-excitation
    scale: a 1x1 convolution to 480 channels multiplying a 14 x 14 x 480 map): it is no
    element-wise write-back of the tile and stays a loop nest of its own (TVM's inlining of
    it into the write-back failed with an internal error)."""
    main = static_product(it.dom for it in block.iters if it.kind == "S")
    rest = static_product(it.dom for it in epilogue.iters)
    return main is not None and rest is not None and rest > main


__all__ = ["broadcasts", "buffer_bytes", "one_reduction", "static_product"]
