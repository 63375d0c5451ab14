"""tvm-ext: hand schedules, admissible cost policies and trustworthy tuning logs for TensorIR.

The public names. The package is in layers, each a folder, imports pointing one way
(``tests/test_layers.py`` holds the contract): ``base`` (the door to TVM, errors, files) and
``built_code`` (readers of built assembly and IR) <- ``hardware`` (targets, ISA tables, the
machine model) and ``workloads`` (the kernel suite, the model zoo) <- ``measurement`` (build,
parity, time) <- ``records`` (every on-disk format) <- ``schedules`` / ``cost`` <-
``kernel_tuner`` (tune and replay one kernel) <- ``model_pipeline`` (compile, tune and replay a
model) <- ``commands`` (cli, lab). ``tune`` and ``replay`` here decide kernel or model.
"""

from __future__ import annotations

__version__ = "0.1.0"

# tvm_api comes first: it raises TVM's thread-pool ceiling before anything can create the pool.
from tvm_ext.base import errors, tvm_api  # noqa: F401  # isort: skip
from tvm_ext.base.errors import (
    InputError,
    ParityError,
    ScheduleNotApplicable,
    TuneError,
    TvmExtError,
    UnsupportedModel,
)
from tvm_ext.hardware.machine import host_machine
from tvm_ext.hardware.machine_model import MachineModel
from tvm_ext.hardware.target import cuda_target, generic_target, host_target
from tvm_ext.kernel_tuner.remote import rpc_runner
from tvm_ext.kernel_tuner.replayer import replay as replay_kernel
from tvm_ext.kernel_tuner.tuner import tune as tune_kernel
from tvm_ext.measurement.measure import Measurement, measure
from tvm_ext.model_pipeline.compile import compile
from tvm_ext.model_pipeline.decode_session import DecodeSession
from tvm_ext.model_pipeline.length_tuner import is_symbolic, replay_at_lengths, tune_at_lengths
from tvm_ext.model_pipeline.model_replay import replay_model
from tvm_ext.model_pipeline.model_tuner import is_model, tune_model
from tvm_ext.model_pipeline.profile import profile
from tvm_ext.workloads import kernels, models
from tvm_ext.workloads.decode import build_decode
from tvm_ext.workloads.from_torch import from_torch
from tvm_ext.workloads.suite import build_suite

# Options of a kernel tune that a model tune does not take (it seeds each task by its rule and
# runs every batch with its own settings), with the values that mean "not given".
_KERNEL_ONLY = {"runner": None, "workload": None, "work_dir": None, "hand_schedule": True}


def tune(mod, target=None, **options):
    """Tune a kernel, or a whole model.

    A model (a ``models.ZOO`` model, a Relax IRModule, a module of several PrimFuncs) goes to
    :func:`~tvm_ext.model_pipeline.model_tuner.tune_model` (every task seeded by its IR rule,
    the budget spent where the proven bound leaves room; ``trials`` is the whole model's
    budget, 0 allowed), anything else to :func:`~tvm_ext.kernel_tuner.tuner.tune`. A model
    of symbolic length takes ``lengths=[...]``: tuned at each, run from one executable that
    dispatches a call to the nearest length's schedules
    (:func:`~tvm_ext.model_pipeline.length_tuner.tune_at_lengths`).
    """
    lengths = options.pop("lengths", None)
    if is_model(mod):
        odd = sorted(k for k, v in options.items() if k in _KERNEL_ONLY and v != _KERNEL_ONLY[k])
        if odd:
            raise ValueError(f"tune() of a model takes no {odd} (each task is seeded by its rule)")
        options = {k: v for k, v in options.items() if k not in _KERNEL_ONLY}
        if lengths is not None:
            return tune_at_lengths(mod, target, lengths, **options)
        return tune_model(mod, target, **options)
    if lengths is not None:
        raise ValueError("lengths= is for a model of symbolic length, not a kernel")
    return tune_kernel(mod, target, **options)


def replay(obj, target=None, **options):
    """Replay a frozen log with no search: a model task by task
    (:func:`~tvm_ext.model_pipeline.model_replay.replay_model`), anything else from its kernel
    log (:func:`~tvm_ext.kernel_tuner.replayer.replay`)."""
    if is_model(obj):
        if is_symbolic(obj):
            return replay_at_lengths(obj, target, **options)
        return replay_model(obj, target, **options)
    return replay_kernel(obj, target, **options)


__all__ = [
    "MachineModel",
    "Measurement",
    "InputError",
    "ParityError",
    "ScheduleNotApplicable",
    "TuneError",
    "TvmExtError",
    "UnsupportedModel",
    "DecodeSession",
    "build_decode",
    "build_suite",
    "compile",
    "from_torch",
    "cuda_target",
    "errors",
    "generic_target",
    "host_machine",
    "host_target",
    "kernels",
    "measure",
    "models",
    "profile",
    "replay",
    "rpc_runner",
    "tune",
]
