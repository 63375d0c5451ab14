"""Tuning through TVM's RPC tracker with two servers on loopback (slow: starts processes)."""

import os
import socket
import subprocess
import sys
import time

import pytest

from tvm_ext import kernels as K
from tvm_ext.search.remote import rpc_runner


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tracker_with_two_servers():
    port = _free_port()
    env = {**os.environ, "TVM_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tvm.exec.rpc_tracker",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--port-end",
                str(port + 1),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        time.sleep(2)
        for _ in range(2):
            server_port = _free_port()
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tvm.exec.rpc_server",
                        "--tracker",
                        f"127.0.0.1:{port}",
                        "--key",
                        "tvmext-test",
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(server_port),
                        "--port-end",
                        str(server_port + 50),
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        import tvm.rpc

        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                summary = tvm.rpc.connect_tracker("127.0.0.1", port).summary()
                queue = summary["queue_info"].get("tvmext-test", {})
                if queue.get("free", 0) >= 2:
                    break
            except (ConnectionError, OSError, RuntimeError):
                pass
            time.sleep(1)
        else:
            pytest.fail("the two RPC servers did not register with the tracker in 60 s")
        yield f"127.0.0.1:{port}", procs[1:]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


@pytest.mark.slow
def test_tune_through_the_tracker(tracker_with_two_servers, host, tmp_path):
    from tvm_ext.search.tuner import tune

    address, _ = tracker_with_two_servers
    runner = rpc_runner(address, key="tvmext-test", max_workers=2)
    w = K.matmul(32, 32, 32)
    result = tune(
        w.func, host, trials=8, batch=8, seed=1, runner=runner, log_dir=tmp_path, progress=False
    )
    assert result.stats["measured"] >= 1 and result.measurement.max_rel_error < 1e-4
    lines = (
        (
            tmp_path
            / result.log_folder.split(str(tmp_path) + "/", 1)[1]
            / "database_tuning_record.json"
        )
        .read_text()
        .splitlines()
    )
    assert len(lines) >= 2  # the hand schedule plus records measured remotely


@pytest.mark.slow
def test_server_killed_mid_tune(tracker_with_two_servers, host, tmp_path):
    """One of two servers dies after the first batch: the tune finishes on the other one and
    the log holds a record of every candidate sent to a server, measured or failed."""
    from tvm_ext.base.tvm_api import meta_schedule, tvm
    from tvm_ext.search.tuner import tune

    ms = meta_schedule()
    address, servers = tracker_with_two_servers

    @tvm.ir.utils.derived_object
    class KillAfterFirstBatch(ms.runner.PyRunner):
        def __init__(self, inner, victim):
            super().__init__()
            self.inner, self.victim, self.sent = inner, victim, []

        def run(self, runner_inputs):
            if self.sent:  # the first batch is measured; its results are in
                self.victim.kill()
                self.victim.wait(timeout=10)
            self.sent.append(len(runner_inputs))
            return self.inner.run(runner_inputs)

    runner = KillAfterFirstBatch(rpc_runner(address, key="tvmext-test", max_workers=2), servers[0])
    w = K.matmul(32, 32, 32)
    result = tune(
        w.func, host, trials=24, batch=8, seed=2, runner=runner, log_dir=tmp_path, progress=False
    )
    assert len(runner.sent) >= 2 and servers[0].poll() is not None and servers[1].poll() is None
    assert result.measurement.max_rel_error < 1e-4
    folder = next(tmp_path.glob("*/*/database_tuning_record.json"))
    records = folder.read_text().splitlines()
    assert len(records) == 1 + sum(runner.sent)  # the hand schedule, then every candidate
    measured_after = result.stats["measured"] - runner.sent[0]
    assert measured_after > 0  # the surviving server measured later batches


def test_bad_tracker_address():
    with pytest.raises(ValueError, match="must be 'host:port'"):
        rpc_runner("localhost", key="k")
    with pytest.raises(ValueError, match="non-empty string"):
        rpc_runner("localhost:9190", key="")
