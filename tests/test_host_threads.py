"""The process's other thread pools stay off the cores a measurement uses (base/host_threads)."""

import dataclasses
import logging
import os
import threading
import time

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from tvm_ext import kernels as K
from tvm_ext.base.host_threads import other_threads_cpu_s, reference_threads, settle
from tvm_ext.measurement.measure import verify


def _blas_threads() -> int:
    return max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=0)


def _busy_ms(seconds: float) -> float:
    """CPU ms the other threads of this process use while this one sleeps ``seconds``."""
    before = other_threads_cpu_s()
    time.sleep(seconds)
    return (other_threads_cpu_s() - before) * 1e3


needs_threaded_blas = pytest.mark.skipif(
    _blas_threads() < 2 or (os.cpu_count() or 1) < 2,
    reason="numpy's BLAS runs one thread here: no worker to wake",
)


def test_reference_threads_limits_blas_and_restores_it():
    before = _blas_threads()
    with reference_threads():
        assert _blas_threads() in (0, 1)
    assert _blas_threads() == before


@needs_threaded_blas
def test_a_reference_under_the_guard_leaves_no_worker_spinning():
    a = np.random.default_rng(0).random((512, 512))
    settle()
    with reference_threads():
        a @ a  # large enough that OpenBLAS would split it over its workers
    assert _busy_ms(0.2) <= 20  # one 10 ms tick of slack


@needs_threaded_blas
def test_settle_waits_until_a_spinning_worker_parks():
    a = np.random.default_rng(0).random((512, 512))
    a @ a  # unguarded: the worker spins for a while after the call (~110 ms on Zen 5)
    assert settle(timeout_s=3.0)
    assert _busy_ms(0.1) <= 20


def test_settle_gives_up_on_a_thread_that_stays_busy(caplog):
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    worker = threading.Thread(target=spin)
    worker.start()
    try:
        with caplog.at_level(logging.WARNING, logger="tvm_ext.base.host_threads"):
            assert not settle(timeout_s=0.2)
    finally:
        stop.set()
        worker.join()
    assert "shares its cores" in caplog.text


@needs_threaded_blas
def test_parity_reference_runs_single_threaded(host):
    """measure()/verify() compute the numpy reference with BLAS at one thread."""
    w = K.matmul(64, 64, 64)
    seen = []

    def reference(arrays):
        seen.append(_blas_threads())
        return w.reference(arrays)

    recording = dataclasses.replace(w, _reference=reference)
    verify(w.func, recording, host)
    assert seen and all(n in (0, 1) for n in seen)
