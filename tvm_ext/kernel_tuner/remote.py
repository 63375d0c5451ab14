"""Measuring on remote devices through TVM's RPC tracker (MetaSchedule's ``RPCRunner``).

Start a tracker and one server per device (each server with ``TVM_NUM_THREADS`` set to that
device's physical cores, since a remote runtime sizes its own thread pool)::

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190 --port-end 9191
    TVM_NUM_THREADS=8 python -m tvm.exec.rpc_server --tracker tracker-host:9190 --key my-board

then ``tvm_ext.tune(mod, target, runner=tvm_ext.rpc_runner("tracker-host:9190",
key="my-board"))``. With such a runner a tune measures everything on the devices: the
candidates, the hand schedule (the initial cut) and the winner (parity and final time), and
its bound uses the devices' machine model (``machine=``, or probed on a device once per key).
"""

from __future__ import annotations

import warnings

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import checked_int
from tvm_ext.base.errors import TuneError
from tvm_ext.hardware.device import Tracker

ms = tvm_api.ms


@tvm_api.derived_object
class DeviceRunner(ms.runner.PyRunner):
    """MetaSchedule's ``RPCRunner`` for the devices under one tracker key, which asks the
    tracker first: while it does not answer, or no server carries the key, every candidate of
    a batch fails at once with that reason (TVM's client would retry for a minute per
    candidate, or wait without end). Its worker processes start on first use and stop in
    :meth:`close` (a tune closes the runner it was given when it ends)."""

    def __init__(self, tracker: Tracker, evaluator, max_workers: int):
        super().__init__()
        self.tracker, self.evaluator, self.max_workers = tracker, evaluator, max_workers
        self.inner = None  # the RPCRunner, while open

    def run(self, runner_inputs):
        problem = self.tracker.problem()
        if problem is not None:
            message = f"cannot measure on {self.tracker.where}: {problem}"
            return [_failed_future(message) for _ in runner_inputs]
        if self.inner is None:
            config = ms.runner.RPCConfig(
                tracker_host=self.tracker.host,
                tracker_port=self.tracker.port,
                tracker_key=self.tracker.key,
                session_priority=1,
                session_timeout_sec=self.tracker.session_timeout_s,
            )
            self.inner = ms.runner.RPCRunner(
                rpc_config=config, evaluator_config=self.evaluator, max_workers=self.max_workers
            )
        return self.inner.run(runner_inputs)

    def close(self) -> None:
        """Stop the worker processes (they start again on the next :meth:`run`)."""
        if self.inner is not None:
            self.inner.pool.shutdown(wait=True)
            self.inner = None


def _failed_future(message: str):
    result = ms.runner.RunnerResult(None, message)
    return ms.runner.RunnerFuture(lambda: True, lambda: result)


def tracker_of(runner) -> Tracker | None:
    """The tracker a runner measures through (None: this host, or a runner we cannot see
    into)."""
    return runner.tracker if isinstance(runner, DeviceRunner) else None


def reach(tracker: Tracker, label: str) -> None:
    """Raise a :class:`TuneError` naming what is missing unless a device is registered."""
    problem = tracker.problem()
    if problem is not None:
        raise TuneError(
            f"tuning {label} measured nothing: no candidate can reach {tracker.where}: {problem}",
            first_failure=problem,
        )


def unknown_runner_warning(runner) -> None:
    """A runner tune() cannot see into (not ours, not a LocalRunner) may measure elsewhere:
    the hand schedule and the winner are still measured on this host; say so."""
    if runner is None or isinstance(runner, DeviceRunner):
        return
    if isinstance(runner, tvm_api.ms.runner.LocalRunner):
        return
    warnings.warn(
        f"tune() cannot tell where {type(runner).__name__} measures: the hand schedule "
        "(the initial cut) and the winner are measured on this host, with this host's machine "
        "model. For devices, pass tvm_ext.rpc_runner(...) itself (and machine= for their model).",
        UserWarning,
        stacklevel=3,
    )


def rpc_runner(
    tracker: str,
    key: str,
    *,
    session_timeout_s: int = 60,
    max_workers: int = 1,
    number: int = 3,
    repeat: int = 1,
    min_repeat_ms: int = 100,
    check_timeout_s: float = 10.0,
) -> DeviceRunner:
    """A MetaSchedule runner that measures on the servers registered under ``key`` at
    ``tracker`` (``"host:port"``); the tracker must answer within ``check_timeout_s``."""
    host, sep, port = tracker.rpartition(":") if isinstance(tracker, str) else ("", "", "")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"tracker={tracker!r} must be 'host:port'")
    if not isinstance(key, str) or not key:
        raise ValueError(f"key={key!r} must be a non-empty string")
    for name, value in (("session_timeout_s", session_timeout_s), ("max_workers", max_workers)):
        checked_int(name, value)
    evaluator = ms.runner.EvaluatorConfig(
        number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, enable_cpu_cache_flush=False
    )
    device = Tracker(host, int(port), key, check_timeout_s, session_timeout_s)
    return DeviceRunner(device, evaluator, max_workers)
