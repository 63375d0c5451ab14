"""The lecture's CPU matmul schedule: tile, cache_write local, vectorize, parallel.

Kept as the baseline every later schedule is measured against (shared/reference/001, section 4).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.workloads.kernels import Workload


@dataclass(frozen=True)
class LectureConfig:
    """Output tile (``tile`` x ``tile``) and reduction step ``k_tile``."""

    tile: int = 32
    k_tile: int = 4

    def __post_init__(self):
        for name in ("tile", "k_tile"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} must be a positive int")


def is_plain_matmul(workload: Workload) -> bool:
    """A 2-D matmul with B in (K, N) layout: what the lecture's schedule was written for."""
    return workload.name == "matmul" and not workload.args.get("transpose_b", False)


def lecture_cpu_matmul(
    workload: Workload, config: LectureConfig = LectureConfig()
) -> "tvm_api.Schedule":
    """Tile i/j by ``config.tile`` and k by ``config.k_tile``, accumulate the output tile
    locally, vectorize the innermost j, parallelize the outer i (tails are guarded)."""
    if not is_plain_matmul(workload):
        raise ScheduleNotApplicable(
            f"lecture CPU schedule needs a (K, N)-layout matmul, got {workload.key}"
        )
    sch = tvm_api.Schedule(workload.func)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    i0, i1 = sch.split(i, factors=[None, config.tile])
    j0, j1 = sch.split(j, factors=[None, config.tile])
    k0, k1 = sch.split(k, factors=[None, config.k_tile])
    sch.reorder(i0, j0, k0, i1, k1, j1)
    local = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(local, j0)
    sch.vectorize(j1)
    sch.parallel(i0)
    return sch
