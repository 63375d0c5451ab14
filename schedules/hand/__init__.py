"""The suite's hand schedules: one module per kernel family and target, and
``schedule_workload(workload, target, **config)``.

Each hand schedule is a small module with a frozen config dataclass (its tunables),
per-target defaults (``default_config``), a predicate (``applies``) and the schedule itself.
One that does not apply raises :class:`~tvm_ext.base.errors.ScheduleNotApplicable` saying
why; an invalid config is a ``ValueError`` before any codegen.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

from tvm_ext.schedules.hand import (
    conv2d_cpu,
    conv2d_cuda,
    elementwise_cpu,
    elementwise_cuda,
    matmul_bf16,
    matmul_cpu,
    matmul_cuda,
    matmul_vnni,
    matmul_wmma,
    rows_cpu,
    rows_cuda,
)

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.hardware.target import as_target
from tvm_ext.workloads.kernels import Workload

__all__ = [
    "HAND_SCHEDULES",
    "KERNELS",
    "available",
    "default_config",
    "find_schedule",
    "schedule_workload",
]

# (target kind, hand-schedule module); the first that applies to a workload is used.
HAND_SCHEDULES: list[tuple[str, ModuleType]] = [
    ("llvm", matmul_vnni),  # uint8 x int8 on AVX512-VNNI CPUs; other matmuls fall through
    ("llvm", matmul_bf16),  # bfloat16 on AVX512-BF16 CPUs
    ("llvm", matmul_cpu),
    ("llvm", conv2d_cpu),
    ("llvm", rows_cpu),
    ("llvm", elementwise_cpu),
    ("cuda", matmul_wmma),  # fp16 on tensor cores; other matmuls fall through
    ("cuda", matmul_cuda),
    ("cuda", conv2d_cuda),
    ("cuda", rows_cuda),
    ("cuda", elementwise_cuda),
]
KERNELS = ("matmul", "batch_matmul", "conv2d", "softmax", "layernorm", "rmsnorm", "axpy")


def find_schedule(workload: Workload, target) -> ModuleType:
    """The hand-schedule module that schedules ``workload`` on ``target``."""
    kind = target.kind.name
    for schedule_kind, module in HAND_SCHEDULES:
        if schedule_kind == kind and module.applies(workload, target):
            return module
    raise ScheduleNotApplicable(
        f"no hand schedule for {workload.name} on {kind}; available there: {available(target)}"
    )


def default_config(workload: Workload, target=None):
    """The config ``schedule_workload`` would use for ``workload`` on ``target``."""
    target = as_target(target)
    return find_schedule(workload, target).default_config(workload, target)


def schedule_workload(workload: Workload, target=None, **config) -> "tvm_api.Schedule":
    """The hand schedule of the suite ``workload`` for ``target`` (default the host); keyword
    arguments override fields of its default config, unknown names are a ``ValueError``
    listing the valid ones."""
    target = as_target(target)
    module = find_schedule(workload, target)
    base = module.default_config(workload, target)
    names = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(config) - names)
    if unknown:
        raise ValueError(f"{type(base).__name__} has no field {unknown}; valid: {sorted(names)}")
    return module.schedule(workload, target, dataclasses.replace(base, **config))


def available(target=None) -> list[str]:
    """The kernels that have a hand schedule on ``target``'s kind."""
    kind = as_target(target).kind.name
    modules = [module for schedule_kind, module in HAND_SCHEDULES if schedule_kind == kind]
    return [k for k in KERNELS if any(k in module.KERNELS for module in modules)]
