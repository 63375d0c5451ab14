"""CUDA row kernels (softmax, layernorm, rmsnorm): one thread block per row, warp-shuffle
reductions.

Every reduction over the row is bound to ``threadIdx.x``: each thread folds a strided slice,
then TVM's cross-thread reduction lowering combines the partial results with
``__shfl_down_sync`` inside each warp and shared memory across warps. Row statistics live in
shared memory; element-wise intermediates (``exp``) are recomputed in the consumer rather than
stored, so a row of any length fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import check, check_config, is_cuda

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload

KERNELS = ("softmax", "layernorm", "rmsnorm")


@dataclass(frozen=True)
class RowsCUDAConfig:
    """``threads`` per block (one block per row), a multiple of the warp size."""

    threads: int = 256

    def validate(self, target) -> None:
        check_config(self)
        warp = int(target.attrs["thread_warp_size"])
        if self.threads % warp or self.threads > int(target.attrs["max_num_threads"]):
            raise ValueError(
                f"threads={self.threads} must be a multiple of {warp} up to "
                f"{target.attrs['max_num_threads']}"
            )


def applies(workload: Workload, target=None) -> bool:
    return workload.name in KERNELS


def default_config(workload: Workload, target) -> RowsCUDAConfig:
    """Enough threads that each folds at least 4 elements, between one and eight warps."""
    n = workload.args["N"]
    return RowsCUDAConfig(threads=max(32, min(256, 32 * (n // 128))))


def _is_reduction(sch, block) -> bool:
    return any(int(iv.iter_type) == 2 for iv in sch.get(block).iter_vars)


def schedule(workload: Workload, target, config: RowsCUDAConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"rows_cuda: {workload.key} is not one of {KERNELS}")
    check(is_cuda(target), f"rows_cuda: target {target.kind.name} is not CUDA")
    config.validate(target)
    sch = tvm_api.Schedule(workload.func)
    *stages, out = sch.get_child_blocks(sch.get_sblock("root"))
    reductions = []
    for block in stages:
        if _is_reduction(sch, block):
            reductions.append(block)
        else:
            sch.compute_inline(block)
    row, _ = sch.get_loops(out)
    sch.bind(row, "blockIdx.x")
    for block in reversed(reductions):
        sch.compute_at(block, row)
        sch.set_scope(block, 0, "shared")
    for block in reductions + [out]:
        _, tx = sch.split(sch.get_loops(block)[-1], [None, config.threads])
        sch.bind(tx, "threadIdx.x")
    return sch
