"""CPU row kernels (softmax, layernorm, rmsnorm): parallel rows, vectorized reductions.

Every stage is computed inside the parallel row loop of the output, so a row's intermediates
(row max, ``exp``, sums) stay in L1. Each reduction over the row is split by the vector width
and ``rfactor``-ed: ``lanes`` partial results are accumulated as one vector, then folded. When
the vector width does not divide the row, the widest power of two that does is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm_ext.schedules.common import check, check_config, is_cpu, lanes_for

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload


@dataclass(frozen=True)
class RowsCPUConfig:
    """``lanes``: vector width for both the reductions and the element-wise stages."""

    lanes: int = 16

    def validate(self, target) -> None:
        check_config(self)
        if self.lanes & (self.lanes - 1):
            raise ValueError(f"lanes={self.lanes} must be a power of two")
        if self.lanes > lanes_for(target, 32):
            raise ValueError(f"lanes={self.lanes} is wider than the target's vectors")


KERNELS = ("softmax", "layernorm", "rmsnorm")


def applies(workload: Workload, target=None) -> bool:
    return workload.name in KERNELS


def default_config(workload: Workload, target) -> RowsCPUConfig:
    return RowsCPUConfig(lanes=lanes_for(target, 32))


def _is_reduction(sch, block) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)  # 2 = CommReduce


def schedule(workload: Workload, target, config: RowsCPUConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"rows_cpu: {workload.key} is not one of {KERNELS}")
    check(is_cpu(target), f"rows_cpu: target {target.kind.name} is not a CPU")
    config.validate(target)
    lanes = math.gcd(workload.args["N"], config.lanes)
    sch = tvm_api.Schedule(workload.func)
    *stages, out = sch.get_child_blocks(sch.get_sblock("root"))
    ordered, partials = [], []
    for block in stages:
        if _is_reduction(sch, block) and lanes > 1:
            _, k = sch.get_loops(block)
            _, k1 = sch.split(k, [None, lanes])
            partial = sch.rfactor(k1, 1)  # partial[i, k1] over k0; then folded over k1
            ordered += [partial, block]
            partials.append(partial)
        else:
            ordered.append(block)
    row, col = sch.get_loops(out)
    for block in reversed(ordered):
        sch.compute_at(block, row)
    sch.parallel(row)
    for block in partials:
        k1, k0 = sch.get_loops(block)[-2:]
        sch.reorder(k0, k1)
        sch.vectorize(k1)
    if lanes > 1:
        for block in [b for b in ordered if not _is_reduction(sch, b)] + [out]:
            _, inner = sch.split(sch.get_loops(block)[-1], [None, lanes])
            sch.vectorize(inner)
    return sch
