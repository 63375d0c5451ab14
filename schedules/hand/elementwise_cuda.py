"""CUDA element-wise kernels (axpy): one element per thread per step, vector loads."""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import check, check_config, is_cuda

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload

KERNELS = ("axpy",)


@dataclass(frozen=True)
class ElementwiseCUDAConfig:
    """``threads`` per block, ``vec`` consecutive elements per thread (one vector load)."""

    threads: int = 256
    vec: int = 4

    def validate(self, target) -> None:
        check_config(self)
        if self.vec not in (1, 2, 4):
            raise ValueError(f"vec={self.vec}: choose 1, 2 or 4")
        if self.threads > int(target.attrs["max_num_threads"]):
            raise ValueError(f"threads={self.threads} exceeds {target.attrs['max_num_threads']}")


def applies(workload: Workload, target=None) -> bool:
    return workload.name in KERNELS


def default_config(workload: Workload, target) -> ElementwiseCUDAConfig:
    return ElementwiseCUDAConfig(vec=4 if workload.args["n"] % 4 == 0 else 1)


def schedule(workload: Workload, target, config: ElementwiseCUDAConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"elementwise_cuda: {workload.key} is not element-wise")
    check(is_cuda(target), f"elementwise_cuda: target {target.kind.name} is not CUDA")
    config.validate(target)
    sch = tvm_api.Schedule(workload.func)
    (i,) = sch.get_loops(sch.get_sblock("z"))
    bx, tx, v = sch.split(i, [None, config.threads, config.vec])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)
    return sch
