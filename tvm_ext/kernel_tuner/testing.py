"""Helpers for testing tools built on tvm-ext: fault injection into MetaSchedule's runners.

They live in the package (not in ``tests/``) because MetaSchedule runs candidates in worker
processes that import them by name.
"""

from __future__ import annotations

import os
import signal
import time

from tvm_ext.base import tvm_api


def faulty_run_evaluator(state_dir, plan, rt_mod, device, evaluator_config, repeated_args):
    """A ``LocalRunner`` ``f_run_evaluator`` whose n-th run (0-based, counted in
    ``state_dir`` across worker restarts) does what ``plan[n]`` says: ``"crash"`` (the worker
    dies of SIGSEGV, as a candidate with a wild store would), ``"hang"`` (it never returns),
    ``"raise"`` (a Python error); any other run measures normally.

    Use ``functools.partial(faulty_run_evaluator, state_dir, plan)``.
    """
    n = len(os.listdir(state_dir))
    with open(os.path.join(state_dir, f"run-{n}"), "w"):
        pass
    action = plan.get(n)
    if action == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif action == "hang":
        time.sleep(3600)
    elif action == "raise":
        raise RuntimeError(f"injected failure in run {n}")
    return tvm_api.ms.runner.local_runner.default_run_evaluator(
        rt_mod, device, evaluator_config, repeated_args
    )


@tvm_api.derived_object
class FailingBuilder(tvm_api.ms.builder.PyBuilder):
    """A stand-in for :class:`~tvm_ext.kernel_tuner.builder.PersistentBuilder` whose every build
    fails with ``message`` (as a build error of every candidate would)."""

    def __init__(self, workers: int = 1, timeout_s: float = 0.0, message: str = "injected"):
        super().__init__()
        self.message = message

    def wait_ready(self) -> None:
        pass

    def build(self, build_inputs):
        ms = tvm_api.ms
        return [ms.builder.BuilderResult(None, self.message) for _ in build_inputs]

    def shutdown(self) -> None:
        pass
