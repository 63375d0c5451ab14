"""What a tune works on and holds while it runs: the :class:`Task` (``prepare``: the function,
its reference, target, machine model, where it is measured) and the :class:`Session`
(``open_session``: MetaSchedule's work dir, builder, runner and logs, closed in ``finally``).
The stages that follow are :mod:`tvm_ext.kernel_tuner.stages`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator

from tvm_ext.base import tvm_api
from tvm_ext.hardware.device import Tracker
from tvm_ext.hardware.machine import device_machine, host_machine
from tvm_ext.hardware.machine_model import MachineModel
from tvm_ext.hardware.target import as_target, host_target, target_cores
from tvm_ext.kernel_tuner.builder import PersistentBuilder
from tvm_ext.kernel_tuner.remote import DeviceRunner, reach, tracker_of
from tvm_ext.measurement.measure import kernel_name
from tvm_ext.workloads.kernels import Workload, from_func


@dataclass(frozen=True)
class Task:
    """One function to tune: its module (``{"main": func}``), workload, target, machine model
    and where it is measured (``tracker`` None: this host)."""

    name: str  # the user's name of the function (its global_symbol)
    mod: "tvm_api.IRModule"
    func: "tvm_api.PrimFunc"
    workload: Workload | None  # the numpy reference, when the function is a suite kernel
    target: "tvm_api.Target"
    cores: int
    machine: MachineModel | None  # the roofline for llvm targets (the devices' with a tracker)
    tracker: Tracker | None = None  # the devices every measurement runs on
    # A model's task: its weights are repacked once, at compile time, so a time excludes
    # the repack (measure's ``weights_repacked_once``), as the search's runner times it.
    weights_repacked_once: bool = False

    @property
    def label(self) -> str:
        return self.workload.key if self.workload is not None else self.name

    @property
    def where(self) -> str:
        return "this host" if self.tracker is None else self.tracker.where


def prepare(mod, target=None, workload: Workload | None = None, name: str | None = None, *,
            with_machine: bool = True, machine: MachineModel | None = None,
            runner=None, weights_repacked_once: bool = False) -> Task:  # fmt: skip
    """A :class:`Task` from a PrimFunc, a one-function IRModule, a Schedule or a suite Workload.

    ``with_machine``: look up the roofline of an llvm target (a stock search needs none):
    ``machine`` when given, else the devices' model when ``runner`` measures on devices
    (probed there once per key, cached), else this host's. A device runner's tracker is asked
    first: a :class:`TuneError` says at once when no device answers.
    """
    target = as_target(target)
    cores = target_cores(target) if target.kind.name == "llvm" else 1
    if isinstance(mod, Workload):  # a suite workload: its function, and it is the reference
        workload = mod if workload is None else workload
        mod = mod.func
    name = name if name is not None else kernel_name(mod)
    func = tvm_api.main_func(tvm_api.as_module(mod)).with_attr("global_symbol", "main")
    workload = workload if workload is not None else from_func(func)
    tracker = tracker_of(runner)
    label = workload.key if workload is not None else name
    if tracker is not None:
        reach(tracker, label)
    if machine is None and target.kind.name == "llvm" and with_machine:
        machine = (
            host_machine(host_target(num_cores=cores))
            if tracker is None
            else device_machine(target, tracker)
        )
    mod = tvm_api.IRModule({"main": func})
    return Task(name, mod, func, workload, target, cores, machine, tracker,
                weights_repacked_once)  # fmt: skip


def refresh_machine(target, machine=None, runner=None) -> None:
    """After a tune on this host with its cached model: probe the model again when a kernel
    proved it low during the tune (:func:`~tvm_ext.hardware.machine.heal`; ``host_machine``
    re-probes once after that), so the tune leaves a healed cache behind."""
    target = as_target(target)
    if machine is None and tracker_of(runner) is None and target.kind.name == "llvm":
        host_machine(host_target(num_cores=target_cores(target)))


@dataclass
class Session:
    """What a tune holds while it runs: MetaSchedule's work dir, builder and runner."""

    work_dir: str
    kept: bool  # the caller named work_dir: it stays; a temporary one is removed
    builder: PersistentBuilder
    runner: object
    logger: logging.Logger  # the task logger handed to the tuning context
    started: float


@contextlib.contextmanager
def open_session(task: Task, work_dir=None, runner=None, build_timeout_s: float = 120.0):
    """A :class:`Session`; on exit (success or not) the builder and our runner are shut down,
    MetaSchedule's logging is restored and a temporary work dir is removed."""
    started = time.perf_counter()
    kept = work_dir is not None
    own_runner = runner is None
    builder = None
    try:
        work_dir = str(work_dir) if kept else tempfile.mkdtemp(prefix="tvm-ext-tune-")
        os.makedirs(work_dir, exist_ok=True)
        # Build workers start first and finish importing TVM before anything is timed: their
        # start-up on the same cores would make the hand schedule (the initial cut) look slow.
        builder = PersistentBuilder(workers=max(task.cores, 1), timeout_s=build_timeout_s)
        if own_runner:
            runner = local_runner(task.cores)
        with routed_logs(work_dir) as logger:
            yield Session(work_dir, kept, builder, runner, logger, started)
    finally:
        _close(builder, runner, own_runner)
        if not kept and work_dir is not None:
            shutil.rmtree(work_dir, ignore_errors=True)


def local_runner(cores: int):
    """MetaSchedule's ``LocalRunner``, each run on ``cores`` threads. Its constructor starts a
    worker that imports TVM and runs a sanity check (~5 s on 2 cores), once per tune."""
    return tvm_api.ms.runner.LocalRunner(
        initializer=functools.partial(tvm_api.set_runner_threads, cores)
    )


def _close(builder, runner, own_runner: bool) -> None:
    """Stop the build workers, our runner's workers and a device runner's (it restarts them
    when used again): no process outlives the tune, whether it succeeded or not."""
    if builder is not None:
        builder.shutdown()
    if own_runner and runner is not None:
        runner.pool.shutdown()
    elif isinstance(runner, DeviceRunner):
        runner.close()


@contextlib.contextmanager
def routed_logs(work_dir: str) -> Iterator[logging.Logger]:
    """MetaSchedule's chatter goes to ``<work_dir>/logs/meta_schedule.log`` and only its
    warnings reach the terminal; its logger's handlers, level and propagation are restored on
    exit. Yields the task logger to hand to the tuning context."""
    os.makedirs(os.path.join(work_dir, "logs"), exist_ok=True)
    root = logging.getLogger("tvm.s_tir.meta_schedule")
    saved = (list(root.handlers), root.level, root.propagate)
    to_file = logging.FileHandler(os.path.join(work_dir, "logs", "meta_schedule.log"))
    to_file.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    to_console = logging.StreamHandler()
    to_console.setLevel(logging.WARNING)
    root.handlers = [to_file, to_console]
    root.setLevel(logging.DEBUG)
    root.propagate = False
    try:
        yield logging.getLogger("tvm.s_tir.meta_schedule.tvm_ext_task")
    finally:
        to_file.close()
        root.handlers, root.level, root.propagate = saved


__all__ = ["Session", "Task", "local_runner", "open_session", "prepare", "routed_logs"]
