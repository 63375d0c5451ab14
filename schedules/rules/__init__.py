"""IR rules, dlight-style: each reads a PrimFunc and returns a Schedule, or None for "not
mine"; :func:`apply` schedules every PrimFunc of a module with the first rule that takes it."""

from tvm_ext.schedules.rules.dispatch import (
    CPU_RULES,
    GPU_RULES,
    Applied,
    Scheduled,
    apply,
    call_counts,
    rules_for,
    schedule_func,
)

__all__ = [
    "CPU_RULES",
    "GPU_RULES",
    "Applied",
    "Scheduled",
    "apply",
    "call_counts",
    "rules_for",
    "schedule_func",
]
