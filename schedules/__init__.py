"""Schedules, by kind: IR rules (:mod:`.rules`: any PrimFunc of a model), the suite's hand
schedules (:mod:`.hand`: one module per kernel family and target), tensorize intrinsics
(:mod:`.intrinsics`) and the mini-lab's teaching pieces (:mod:`.teaching`).

``schedule(workload, target, **config)`` schedules a suite workload with its hand schedule, or
any PrimFunc with the first IR rule that takes it; ``apply(mod, target)`` schedules every
PrimFunc of a module.
"""

from __future__ import annotations

from tvm_ext.schedules import hand, intrinsics, rules, teaching
from tvm_ext.schedules.hand import (
    HAND_SCHEDULES,
    KERNELS,
    available,
    default_config,
    find_schedule,
    schedule_workload,
)
from tvm_ext.schedules.intrinsics import (
    BF16_DOT_16x2,
    VNNI_DOT_16x4,
    register_cuda_intrinsics,
    register_x86_intrinsics,
)
from tvm_ext.schedules.rules import Applied, Scheduled, apply
from tvm_ext.schedules.teaching import tile_sweep

from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import as_target
from tvm_ext.workloads.kernels import Workload

__all__ = [
    "Applied",
    "BF16_DOT_16x2",
    "HAND_SCHEDULES",
    "KERNELS",
    "Scheduled",
    "VNNI_DOT_16x4",
    "apply",
    "available",
    "default_config",
    "find_schedule",
    "hand",
    "intrinsics",
    "register_cuda_intrinsics",
    "register_x86_intrinsics",
    "rules",
    "schedule",
    "schedule_workload",
    "teaching",
    "tile_sweep",
]


def schedule(workload, target=None, **config) -> "tvm_api.Schedule":
    """A ``tvm.s_tir.Schedule`` of ``workload`` for ``target`` (default the host).

    ``workload`` is a suite :class:`~tvm_ext.kernels.Workload` (its hand schedule, see
    :func:`~tvm_ext.schedules.hand.schedule_workload`), or any PrimFunc, one-function IRModule
    or Schedule: the first IR rule that takes it (:func:`tvm_ext.schedules.apply`) schedules it.
    """
    target = as_target(target)
    if isinstance(workload, (tvm_api.PrimFunc, tvm_api.IRModule, tvm_api.Schedule)):
        if config:
            raise ValueError(f"config {sorted(config)} applies to suite workloads only")
        func = tvm_api.main_func(tvm_api.as_module(workload))
        return rules.schedule_func(func, target)[0]
    if not isinstance(workload, Workload):
        raise TypeError(
            "expected a tvm_ext.kernels Workload, a PrimFunc, an IRModule or a Schedule, got "
            f"{type(workload).__name__}"
        )
    return schedule_workload(workload, target, **config)
