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
]
