"""The library's hand schedule, when a function is one of the suite's kernels: built by the
suite (its workload attribute), or a matmul of a dot-product dtype (bf16, uint8 x int8) that a
user or a model wrote, recognised by structure, so the tensorized schedules (AVX512-BF16,
VNNI) fire wherever the pattern appears and the CPU has the instruction."""

from __future__ import annotations

from tvm_ext.schedules.hand import schedule_workload

from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.workloads.kernels import by_structure, from_func

NAME = "suite"


def schedule_func(func, target):
    """The suite kernel's hand schedule, or None."""
    workload = from_func(func) or by_structure(func)
    if workload is None:
        return None
    try:
        return schedule_workload(workload, target)
    except ScheduleNotApplicable:
        return None
