"""Measuring on remote devices through TVM's RPC tracker (MetaSchedule's ``RPCRunner``).

Start a tracker and one server per device (each server with ``TVM_NUM_THREADS`` set to that
device's physical cores, since a remote runtime sizes its own thread pool)::

    python -m tvm.exec.rpc_tracker --host 0.0.0.0 --port 9190
    TVM_NUM_THREADS=8 python -m tvm.exec.rpc_server --tracker tracker-host:9190 --key my-board

then ``tvm_ext.tune(mod, target, runner=tvm_ext.search.remote.rpc_runner("tracker-host:9190",
key="my-board"))``.
"""

from __future__ import annotations

from tvm_ext.base import tvm_api


def rpc_runner(
    tracker: str,
    key: str,
    *,
    session_timeout_s: int = 60,
    max_workers: int = 1,
    number: int = 3,
    repeat: int = 1,
    min_repeat_ms: int = 100,
):
    """A MetaSchedule runner that measures on the servers registered under ``key`` at
    ``tracker`` (``"host:port"``)."""
    host, sep, port = tracker.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"tracker={tracker!r} must be 'host:port'")
    if not isinstance(key, str) or not key:
        raise ValueError(f"key={key!r} must be a non-empty string")
    ms = tvm_api.meta_schedule()
    config = ms.runner.RPCConfig(
        tracker_host=host,
        tracker_port=int(port),
        tracker_key=key,
        session_priority=1,
        session_timeout_sec=session_timeout_s,
    )
    evaluator = ms.runner.EvaluatorConfig(
        number=number, repeat=repeat, min_repeat_ms=min_repeat_ms, enable_cpu_cache_flush=False
    )
    return ms.runner.RPCRunner(
        rpc_config=config, evaluator_config=evaluator, max_workers=max_workers
    )
