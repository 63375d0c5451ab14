"""tvm-ext: hand schedules, admissible cost policies and trustworthy tuning logs for TensorIR.

The public names. The package is in layers, each a folder, imports pointing one way
(``tests/test_layers.py`` holds the contract): ``base`` (the door to TVM, errors) <- ``facts``
(targets, machines, kernels, measurement) <- ``records`` (the tuning-log format) <-
``schedules`` / ``cost`` <- ``search`` (tune, replay) <- ``faces`` (cli, lab).
"""

from __future__ import annotations

__version__ = "0.1.0"

# tvm_api comes first: it raises TVM's thread-pool ceiling before anything can create the pool.
from tvm_ext.base import errors, tvm_api  # noqa: F401
from tvm_ext.base.errors import ParityError, ScheduleNotApplicable, TuneError, TvmExtError
from tvm_ext.facts import kernels, models
from tvm_ext.facts.machine import host_machine
from tvm_ext.facts.machine_model import MachineModel
from tvm_ext.facts.measure import Measurement, measure
from tvm_ext.facts.target import cuda_target, generic_target, host_target


def tune(mod, target=None, **options):
    """Tune a kernel, or a whole model (a ``models.ZOO`` model, a Relax IRModule, a module of
    several PrimFuncs: every task seeded by its IR rule, the budget spent where the proven
    bound leaves room); see :func:`tvm_ext.search.tuner.tune` and
    :func:`tvm_ext.search.model_tuner.tune_model` (imported on first call: they load
    MetaSchedule)."""
    from tvm_ext.search.tuner import tune as _tune

    return _tune(mod, target=target, **options)


def replay(obj, target=None, **options):
    """Replay a frozen log, or a model from its tasks' logs, with no search; see
    :func:`tvm_ext.search.replayer.replay` and :func:`tvm_ext.search.model_tuner.replay_model`."""
    from tvm_ext.search.replayer import replay as _replay

    return _replay(obj, target=target, **options)


def compile(model, target=None, params=None, **options):
    """Compile a model (a ``models.ZOO`` model or a Relax IRModule) to a VM, every kernel
    scheduled by the IR rules, parity checked; see :func:`tvm_ext.search.compile.compile`."""
    from tvm_ext.search.compile import compile as _compile

    return _compile(model, target=target, params=params, **options)


def rpc_runner(tracker: str, key: str, **options):
    """A MetaSchedule runner measuring on remote devices through TVM's RPC tracker
    (``"host:port"``) under ``key``: a tune given one measures everything there; see
    :func:`tvm_ext.search.remote.rpc_runner`."""
    from tvm_ext.search.remote import rpc_runner as _rpc_runner

    return _rpc_runner(tracker, key, **options)


__all__ = [
    "MachineModel",
    "Measurement",
    "ParityError",
    "ScheduleNotApplicable",
    "TuneError",
    "TvmExtError",
    "compile",
    "cuda_target",
    "errors",
    "generic_target",
    "host_machine",
    "host_target",
    "kernels",
    "measure",
    "models",
    "replay",
    "rpc_runner",
    "tune",
]
