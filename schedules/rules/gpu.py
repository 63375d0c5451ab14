"""CUDA targets: TVM's own dlight GPU rules behind the package's rule interface.

A GPU has what the CPU lacks in TVM: default schedules that read the IR (``s_tir.dlight.gpu``:
matmul with shared-memory tiles, GEMV, reductions, transposes, and a thread-binding fallback).
Each is wrapped here as a rule (``NAME`` and ``schedule_func(func, target) -> Schedule |
None``) and placed after the suite's own CUDA hand schedules (``suite``), so
:func:`tvm_ext.schedules.apply` schedules every PrimFunc of a model for a GPU the way it does
for a CPU and reports which rule took each.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.base import tvm_api

GPU_KINDS = ("cuda", "rocm", "vulkan", "metal", "opencl")

# dlight's own order (as in TVM's GPU default pipeline): the most specific pattern first, the
# fallback (bind every spatial loop to blocks and threads) last.
RULE_NAMES = ("Matmul", "GEMV", "LowBatchGEMV", "Reduction", "GeneralReduction", "Transpose",
              "Fallback")  # fmt: skip


@dataclass(frozen=True)
class DlightRule:
    """One dlight GPU rule as a package rule."""

    rule: str  # the class name in ``tvm.s_tir.dlight.gpu``

    @property
    def NAME(self) -> str:  # noqa: N802 (the rule interface's attribute)
        return f"dlight.{self.rule}"

    def schedule_func(self, func, target):
        """dlight's schedule of ``func``, or None (not a GPU target, or not this pattern)."""
        if target.kind.name not in GPU_KINDS:
            return None
        with target:
            try:
                sch = getattr(tvm_api.dlight.gpu, self.rule)().apply(func, target, False)
            except AssertionError:  # some dlight rules check their pattern with asserts
                return None
        if isinstance(sch, list):
            sch = sch[0] if sch else None
        return sch


DLIGHT_RULES = tuple(DlightRule(name) for name in RULE_NAMES)

__all__ = ["DLIGHT_RULES", "DlightRule", "GPU_KINDS", "RULE_NAMES"]
