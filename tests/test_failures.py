"""Failures that speak: a tune that measured nothing raises, partial failure is visible, and
no failed tune leaves a process or a temporary folder behind."""

from __future__ import annotations

import functools
import json
import logging
import tempfile
import time

import psutil
import pytest
import rpc_farm

import tvm_ext
from tvm_ext import kernels as K
from tvm_ext.base import tvm_api
from tvm_ext.base.errors import TuneError
from tvm_ext.kernel_tuner import session
from tvm_ext.kernel_tuner.testing import FailingBuilder
from tvm_ext.records.logs import find_logs, read_manifest, run_seconds

ms = tvm_api.ms
W = K.matmul(64, 64, 64)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temporary directory of this test's own (tempfile's default and TMPDIR for workers),
    and the worker processes alive before it: the test checks both are as they were."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield tmp
    deadline = time.time() + 10
    while time.time() < deadline:
        now = {p.pid for p in psutil.Process().children(recursive=True)} - before
        if not now:
            break
        time.sleep(0.2)
    assert not now, f"the tune left processes {sorted(now)} behind"
    assert not list(tmp.glob("tvm-ext-tune-*")), "the tune left its work dir behind"
    assert not list(tmp.glob("tvm-ext-build*")), "the builder left build artifacts behind"


def _runner_input():
    args = ms.arg_info.ArgInfo.from_prim_func(W.func)
    return ms.runner.RunnerInput("/nonexistent/mod.tar", "cpu", args)


def test_unreachable_tracker_raises_at_once(host, private_tmp):
    port = rpc_farm.free_port()  # nothing listens there
    runner = tvm_ext.rpc_runner(f"127.0.0.1:{port}", key="none")
    started = time.perf_counter()
    with pytest.raises(TuneError) as info:
        tvm_ext.tune(W.func, host, trials=8, runner=runner, progress=False)
    assert time.perf_counter() - started < 30
    message = str(info.value)
    assert message.startswith("tuning matmul_M64_N64_K64_float32 measured nothing")
    assert f"the RPC tracker at 127.0.0.1:{port} does not answer" in message
    assert "Connection refused" in message
    # A batch sent while the tracker is silent fails at once, each candidate saying why.
    results = [f.result() for f in runner.run([_runner_input(), _runner_input()])]
    assert all(r.run_secs is None and "does not answer" in r.error_msg for r in results)


def test_tracker_without_a_server_for_the_key(host, private_tmp):
    port = rpc_farm.free_port()
    tracker = rpc_farm.start(rpc_farm.tracker_argv(port))
    try:
        runner = tvm_ext.rpc_runner(f"127.0.0.1:{port}", key="none")
        rpc_farm.wait_for(runner.tracker, servers=0)
        started = time.perf_counter()
        with pytest.raises(TuneError, match="has no server for key 'none'"):
            tvm_ext.tune(W.func, host, trials=8, runner=runner, progress=False)
        assert time.perf_counter() - started < 30
        (result,) = [f.result() for f in runner.run([_runner_input()])]
        assert result.run_secs is None and "no server for key 'none'" in result.error_msg
    finally:
        rpc_farm.stop(tracker)


def test_every_build_failing_raises_and_keeps_the_log(host, tmp_path, private_tmp, monkeypatch):
    message = "PersistentBuilder: RuntimeError('injected build failure')"
    failing = functools.partial(FailingBuilder, message=message)
    monkeypatch.setattr(session, "PersistentBuilder", failing)
    func = W.func.with_attr("global_symbol", "my_matmul")
    # No hand schedule: its time (the initial cut) could drop every candidate before a build
    # on this noisy shared host, and a tune that sends nothing has nothing failing.
    with pytest.raises(TuneError) as info:
        tvm_ext.tune(func, host, trials=8, batch=4, seed=0, log_dir=tmp_path / "logs",
                     progress=False, hand_schedule=False)  # fmt: skip
    err = info.value
    (folder,) = find_logs(tmp_path / "logs")  # what was recorded stays: every failed record
    rows = [json.loads(line) for line in (folder / "database_tuning_record.json").open()]
    failed = sum(run_seconds(r[1][1]) is None for r in rows)
    assert err.failed == failed == len(rows) >= 4 and err.first_failure == message
    assert str(err) == (
        f"tuning matmul_M64_N64_K64_float32 measured nothing: all {failed} candidates failed to "
        f"build or run (on this host); the first failure: {message}"
    )
    assert read_manifest(folder)["parity"]["ok"] is None


def test_a_user_function_is_named_as_the_user_named_it(host, private_tmp, monkeypatch):
    monkeypatch.setattr(session, "PersistentBuilder", FailingBuilder)
    te = tvm_api.te
    x, y = te.placeholder((64,), name="x"), te.placeholder((64,), name="y")
    z = te.compute((64,), lambda i: x[i] * 2.0 + y[i], name="z")  # not a suite kernel
    func = te.create_prim_func([x, y, z]).with_attr("global_symbol", "my_saxpy")
    assert K.from_func(func) is None
    with pytest.raises(
        TuneError, match=r"^tuning my_saxpy measured nothing: (all \d+|the one) can"
    ):
        tvm_ext.tune(func, host, trials=2, batch=2, progress=False)


def test_a_tune_that_fails_early_leaves_no_work_dir(host, private_tmp, monkeypatch):
    def no_workers(*args, **kwargs):
        raise RuntimeError("no build workers today")

    monkeypatch.setattr(session, "PersistentBuilder", no_workers)
    with pytest.raises(RuntimeError, match="no build workers today"):
        tvm_ext.tune(W.func, host, trials=2, progress=False)
    # private_tmp checks: no tvm-ext-tune-* folder, no process left


class ScriptedSearch:
    """Stands in for EvolutionarySearch: hands out fixed batches."""

    def __init__(self, batches):
        self.batches = list(batches)

    def generate_measure_candidates(self):
        return self.batches.pop(0) if self.batches else None

    def notify_runner_results(self, candidates, results):
        pass

    def clone(self):
        return self


def test_partial_failure_is_counted_and_a_bad_batch_warns(host, machine, caplog):
    from tvm_ext.cost import RooflinePolicy

    from tvm_ext.kernel_tuner.pruning import PruneStats, PruningSearch

    w = K.matmul(32, 32, 32)
    args = ms.arg_info.ArgInfo.from_prim_func(w.func)
    batch = [ms.search_strategy.MeasureCandidate(tvm_api.Schedule(w.func), args) for _ in range(4)]
    stats = PruneStats()
    search = PruningSearch(ScriptedSearch([batch]), RooflinePolicy(), host, machine, w, stats)
    sent = search.generate_measure_candidates()
    results = [ms.runner.RunnerResult([1e-3], None)] + [
        ms.runner.RunnerResult(None, "RPCRunner: An exception occurred\nTraceback ...\n"
                               "ConnectionRefusedError: [Errno 111] Connection refused")
    ] * 3  # fmt: skip
    with caplog.at_level(logging.WARNING):
        search.notify_runner_results(sent, results)
    assert stats.measured == 1 and stats.failed == 3 and stats.batches[-1]["failed"] == 3
    assert stats.first_failure == (
        "RPCRunner: An exception occurred ... ConnectionRefusedError: [Errno 111] "
        "Connection refused"
    )
    assert "3 of 4 candidates of this batch failed to build or run" in caplog.text
    assert stats.as_dict()["failed"] == 3


def test_progress_bar_shows_failed(host):
    from tvm_ext.kernel_tuner.progress import ProgressCallback
    from tvm_ext.kernel_tuner.pruning import PruneStats

    bar = ProgressCallback(8, 1000, PruneStats(), time.perf_counter(), enabled=True)
    results = [ms.runner.RunnerResult(None, "boom"), ms.runner.RunnerResult([1e-6], None)] * 2
    bar.record(results)
    assert "failed=2" in bar.bar.postfix and "dropped=0" in bar.bar.postfix
    bar.close()


def test_tune_reports_failed_candidates(host):
    result = tvm_ext.tune(W, host, trials=2, batch=2, seed=0, progress=False)
    assert result.stats["failed"] == 0 and result.measured_on == "this host"


def test_roofline_warning_knows_the_memory_level_and_names_the_users_function(
    host, machine, caplog
):
    te = tvm_api.te
    x, y = te.placeholder((1024,), name="x"), te.placeholder((1024,), name="y")
    z = te.compute((1024,), lambda i: x[i] * 2.0 + y[i], name="z")
    func = te.create_prim_func([x, y, z]).with_attr("global_symbol", "my_saxpy")
    sch = tvm_api.Schedule(func)
    # 12 KiB fit in L2, whose bandwidth no probe measures: slow LLC and DRAM figures are no
    # roof for it, and no re-probe would change that.
    slow_memory = machine.with_overrides({"bw.llc": 1.0, "bw.dram": 1.0})
    assert slow_memory.memory_level(3 * 4 * 1024) == "l2"
    with caplog.at_level(logging.WARNING, logger="tvm_ext.measurement.measure"):
        tvm_ext.measure(sch, target=host, reference=func, machine=slow_memory, repeat=1)
    assert "roofline" not in caplog.text
    tiny_peak = machine.with_overrides({"peak.float32": 1.0})  # a model below the machine
    with caplog.at_level(logging.WARNING, logger="tvm_ext.hardware.machine"):
        m = tvm_ext.measure(sch, target=host, reference=func, machine=tiny_peak, repeat=1)
    assert m.roofline_fraction > 1
    assert "my_saxpy ran at" in caplog.text and "fit in L2: the roof is its compute peak" in (
        caplog.text
    )
