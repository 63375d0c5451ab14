"""Injective functions: transpose, reshape, broadcast, element-wise chains.

Reads the IR: every block is spatial (no reduction). Chains are inlined into one block per
output; its leading loops are fused and run in parallel (above ``PARALLEL_MIN_WORK``), its
innermost loop, which indexes the output's last dimension (unit-stride stores), is split by
the vector width and vectorized.
"""

from __future__ import annotations

from tvm_ext.schedules.rules.fallback import parallel_spatial, work

from tvm_ext.base import tvm_api

NAME = "injective"


def schedule_func(func, target):
    sch = tvm_api.Schedule(func)
    blocks = tvm_api.dlight.analysis.normalize_prim_func(sch)
    if blocks is None or not all(b.is_injective() for b in blocks):
        return None
    for block in tvm_api.dlight.base.try_inline(sch, blocks):
        parallel_spatial(sch, block, target, vectorize=True, work=work(block))
    return sch
