"""Hand schedules and tensorize intrinsics: ``schedule(workload, target, **config)``.

Each rule is a small module with a frozen config dataclass (its tunables), per-target defaults
(``default_config``), a predicate (``applies``) and the schedule itself. A rule that does not
apply raises :class:`~tvm_ext.base.errors.ScheduleNotApplicable` saying why; an invalid config is a
``ValueError`` before any codegen.
"""

from __future__ import annotations

import dataclasses
from types import ModuleType

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.facts.kernels import Workload
from tvm_ext.facts.target import as_target

from . import apply as apply_mod
from . import (
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
from .apply import Applied, Scheduled, apply
from .intrin_cuda import register_cuda_intrinsics
from .intrin_x86 import BF16_DOT_16x2, VNNI_DOT_16x4, register_x86_intrinsics
from .sweep import tile_sweep

__all__ = [
    "Applied",
    "BF16_DOT_16x2",
    "Scheduled",
    "apply",
    "RULES",
    "KERNELS",
    "VNNI_DOT_16x4",
    "available",
    "default_config",
    "find_rule",
    "register_cuda_intrinsics",
    "register_x86_intrinsics",
    "schedule",
    "tile_sweep",
]

# (target kind, rule module); the first rule that applies to a workload is used.
RULES: list[tuple[str, ModuleType]] = [
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


def find_rule(workload: Workload, target) -> ModuleType:
    """The rule that schedules ``workload`` on ``target``."""
    kind = target.kind.name
    for rule_kind, rule in RULES:
        if rule_kind == kind and rule.applies(workload, target):
            return rule
    raise ScheduleNotApplicable(
        f"no hand schedule for {workload.name} on {kind}; available there: {available(target)}"
    )


def default_config(workload: Workload, target=None):
    """The config ``schedule`` would use for ``workload`` on ``target``."""
    target = as_target(target)
    return find_rule(workload, target).default_config(workload, target)


def schedule(workload, target=None, **config) -> "tvm_api.Schedule":
    """A ``tvm.s_tir.Schedule`` of ``workload`` for ``target`` (default the host).

    ``workload`` is a suite :class:`~tvm_ext.kernels.Workload` (its hand schedule; keyword
    arguments override fields of the rule's default config, unknown names are a ``ValueError``
    listing the valid ones), or any PrimFunc, one-function IRModule or Schedule: the first IR
    rule that takes it (:mod:`tvm_ext.schedules.apply`) schedules it.
    """
    target = as_target(target)
    if isinstance(workload, (tvm_api.PrimFunc, tvm_api.IRModule, tvm_api.Schedule)):
        if config:
            raise ValueError(f"config {sorted(config)} applies to suite workloads only")
        func = tvm_api.main_func(tvm_api.as_module(workload))
        return apply_mod.schedule_func(func, target)[0]
    if not isinstance(workload, Workload):
        raise TypeError(
            "expected a tvm_ext.kernels Workload, a PrimFunc, an IRModule or a Schedule, got "
            f"{type(workload).__name__}"
        )
    rule = find_rule(workload, target)
    base = rule.default_config(workload, target)
    names = {f.name for f in dataclasses.fields(base)}
    unknown = sorted(set(config) - names)
    if unknown:
        raise ValueError(f"{type(base).__name__} has no field {unknown}; valid: {sorted(names)}")
    return rule.schedule(workload, target, dataclasses.replace(base, **config))


def available(target=None) -> list[str]:
    """The kernels that have a hand schedule on ``target``'s kind."""
    kind = as_target(target).kind.name
    rules = [rule for rule_kind, rule in RULES if rule_kind == kind]
    return [k for k in KERNELS if any(k in rule.KERNELS for rule in rules)]
