"""CPU element-wise kernels (axpy): vector-wide chunks, parallel across cores."""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import check, check_config, is_cpu, lanes_for

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload


@dataclass(frozen=True)
class ElementwiseCPUConfig:
    """``lanes`` per vector, ``unroll`` vectors per inner step."""

    lanes: int = 16
    unroll: int = 4

    def validate(self, target) -> None:
        check_config(self)
        if self.lanes > lanes_for(target, 32):
            raise ValueError(f"lanes={self.lanes} is wider than the target's vectors")


KERNELS = ("axpy",)


def applies(workload: Workload, target=None) -> bool:
    return workload.name in KERNELS


def default_config(workload: Workload, target) -> ElementwiseCPUConfig:
    return ElementwiseCPUConfig(lanes=lanes_for(target, 32))


def schedule(workload: Workload, target, config: ElementwiseCPUConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"elementwise_cpu: {workload.key} is not element-wise")
    check(is_cpu(target), f"elementwise_cpu: target {target.kind.name} is not a CPU")
    config.validate(target)
    sch = tvm_api.Schedule(workload.func)
    (i,) = sch.get_loops(sch.get_sblock("z"))
    outer, inner = sch.split(i, [None, config.lanes * config.unroll])
    sch.parallel(outer)
    _, vec = sch.split(inner, [None, config.lanes])
    sch.vectorize(vec)
    return sch
