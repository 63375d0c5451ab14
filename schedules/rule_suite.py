"""The library's hand schedule, when a function is one of the suite's kernels."""

from __future__ import annotations

from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.facts.kernels import from_func

NAME = "suite"


def schedule_func(func, target):
    """The suite kernel's hand schedule (``tvm_ext.schedules.schedule``), or None."""
    from . import schedule  # the suite rules' dispatcher

    workload = from_func(func)
    if workload is None:
        return None
    try:
        return schedule(workload, target)
    except ScheduleNotApplicable:
        return None
