"""tvm-ext: hand schedules, admissible cost policies and trustworthy tuning logs for TensorIR."""

from __future__ import annotations

__version__ = "0.1.0"

from . import (  # noqa: E402
    _tvm,  # noqa: F401  (raises TVM's thread-pool ceiling before anything runs)
    errors,
    kernels,
)
from .errors import ParityError, ScheduleNotApplicable, TvmExtError  # noqa: E402
from .machine import MachineModel, host_machine  # noqa: E402
from .measure import Measurement, measure  # noqa: E402
from .target import cuda_target, generic_target, host_target  # noqa: E402


def __getattr__(name: str):
    """``tvm_ext.tune`` and ``tvm_ext.replay``, imported on first use (they load MetaSchedule)."""
    if name in ("tune", "replay"):
        import importlib

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MachineModel",
    "Measurement",
    "ParityError",
    "ScheduleNotApplicable",
    "TvmExtError",
    "cuda_target",
    "errors",
    "generic_target",
    "host_machine",
    "host_target",
    "kernels",
    "measure",
    "replay",
    "tune",
]
