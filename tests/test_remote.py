"""Tuning through TVM's RPC tracker with servers on loopback (slow: starts processes).

Every tracker and server runs in its own process group, stopped as a group: TVM's
``popen_worker`` children outlive a kill of their parent otherwise.
"""

import json
import pathlib
import re
import shlex
import sys

import psutil
import pytest
import rpc_farm

from tvm_ext import kernels as K
from tvm_ext.hardware.device import Tracker
from tvm_ext.kernel_tuner.remote import rpc_runner

ROOT = pathlib.Path(__file__).resolve().parent.parent
KEY = "tvmext-test"


@pytest.fixture
def tracker_with_two_servers():
    port = rpc_farm.free_port()
    env = {"TVM_NUM_THREADS": "1"}
    procs = [rpc_farm.start(rpc_farm.tracker_argv(port), env)]
    try:
        for _ in range(2):
            procs.append(rpc_farm.start(rpc_farm.server_argv(port, KEY), env))
        rpc_farm.wait_for(Tracker("127.0.0.1", port, KEY), servers=2)
        yield f"127.0.0.1:{port}", procs[1:]
    finally:
        for proc in procs:
            rpc_farm.stop(proc)


def generous(model):
    """``model`` with peaks 4x up: a bound no noisy probe of this shared host makes cut every
    candidate (these tests check where things are measured, not the model's figures)."""
    return model.with_overrides({f"peak.{k}": 4 * v.value for k, v in model.peaks.items()})


@pytest.mark.slow
def test_tune_through_the_tracker(tracker_with_two_servers, machine, tmp_path):
    """The user gives the devices' model (machine=); every time is taken on a device."""
    from tvm_ext import host_target
    from tvm_ext.kernel_tuner.tuner import tune

    address, _ = tracker_with_two_servers
    runner = rpc_runner(address, key=KEY, max_workers=2)
    w = K.matmul(32, 32, 32)
    device = host_target(num_cores=1)  # the servers run 1 thread each
    result = tune(
        w.func, device, trials=8, batch=8, seed=1, runner=runner, log_dir=tmp_path,
        progress=False, machine=generous(machine),  # the devices' model, given by the user
    )  # fmt: skip
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
    # Every number is the device's: its server runs 1 thread, this host's measure would use
    # the target's cores; the manifest says where the times were taken.
    assert result.measured_on == f"device '{KEY}' via the RPC tracker at {address}"
    assert result.measurement.measured_on == result.measured_on
    assert result.measurement.threads == 1
    manifest = json.loads((pathlib.Path(result.log_folder) / "manifest.json").read_text())
    assert manifest["measured_on"] == result.measured_on
    assert manifest["peak_gflops"] == pytest.approx(4 * machine.peak("float32") / 1e9)


@pytest.mark.slow
def test_device_model_is_probed_on_the_device(tracker_with_two_servers):
    from tvm_ext import host_target
    from tvm_ext.hardware.machine import device_machine

    address, _ = tracker_with_two_servers
    tracker = rpc_runner(address, key=KEY).tracker
    host = host_target(num_cores=1)  # the servers run 1 thread each
    model = device_machine(host, tracker)
    assert tracker.where in model.peaks["float32"].note and model.peaks["float32"].value > 0
    assert model.bandwidth["dram"].source == "unknown"  # not visible through a server
    assert model.memory_level(1e12) == "l2"  # so no memory level bounds a candidate
    assert device_machine(host, tracker) == model  # cached: probed once per key


@pytest.mark.slow
def test_server_killed_mid_tune(tracker_with_two_servers, host, tmp_path):
    """One of two servers dies after the first batch: the tune finishes on the other one and
    the log holds a record of every candidate sent to a server, measured or failed, and of
    every one the cut withheld after its build (committed as a failed build, never run)."""
    from tvm_ext import host_target
    from tvm_ext.base.tvm_api import meta_schedule, tvm
    from tvm_ext.kernel_tuner.tuner import tune

    ms = meta_schedule()
    address, servers = tracker_with_two_servers

    @tvm.ir.utils.derived_object
    class KillAfterFirstBatch(ms.runner.PyRunner):
        def __init__(self, inner, victim):
            super().__init__()
            self.inner, self.victim, self.sent = inner, victim, []

        def run(self, runner_inputs):
            if self.sent:  # the first batch is measured; its results are in
                rpc_farm.stop(self.victim)
            self.sent.append(len(runner_inputs))
            return self.inner.run(runner_inputs)

    inner = rpc_runner(address, key=KEY, max_workers=2)
    runner = KillAfterFirstBatch(inner, servers[0])
    w = K.matmul(32, 32, 32)
    try:
        with pytest.warns(UserWarning, match="cannot tell where KillAfterFirstBatch measures"):
            result = tune(w.func, host_target(num_cores=1), trials=24, batch=8, seed=2,
                          runner=runner, log_dir=tmp_path, progress=False)  # fmt: skip
    finally:
        inner.close()  # tune() closes the runners it knows; this one it was not given
    assert len(runner.sent) >= 2 and servers[0].poll() is not None and servers[1].poll() is None
    assert result.measurement.max_rel_error < 1e-4
    folder = next(tmp_path.glob("*/*/database_tuning_record.json"))
    records = folder.read_text().splitlines()
    # The hand schedule, every candidate sent, every candidate withheld after its build (how
    # many the cut withholds depends on this CPU's bound and times: none on some, 13 on Zen 4).
    assert len(records) == 1 + sum(runner.sent) + result.stats["withheld"]
    measured_after = result.stats["measured"] - runner.sent[0]
    assert measured_after > 0  # the surviving server measured later batches


def readme_farm() -> tuple[list[str], str]:
    """The shell commands (tracker, server) and the Python of the README's scaling-out
    section, as written there."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Scaling out", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    shell = [line for lang, body in blocks if lang == "bash" for line in body.splitlines()]
    commands = [line for line in shell if "tvm.exec.rpc_" in line]
    python = [body for lang, body in blocks if lang == "python"]
    assert len(commands) == 2 and len(python) == 1, (commands, python)
    return commands, python[0]


def _as_run_here(line: str, port: int, key: str) -> tuple[dict, list[str]]:
    """A README command on loopback: its placeholders filled in; the device's Python (a
    virtualenv with TVM) is this one."""
    for old, new in (("0.0.0.0", "127.0.0.1"), ("9191", str(port + 1)), ("9190", str(port)),
                     ("<coordinator>", "127.0.0.1"), ("<board>", key), ("<its cores>", "1"),
                     ("~/tvm-rpc/bin/python", sys.executable)):  # fmt: skip
        line = line.replace(old, new)
    words = shlex.split(line)
    env = {}
    while "=" in words[0] and not words[0].startswith(("-", ".", "/")):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    return env, words


@pytest.mark.slow
def test_readme_farm_commands_work_as_written(host, monkeypatch):
    from tvm_ext.kernel_tuner import session as session_module
    from tvm_ext.measurement import measure as measure_module

    commands, python = readme_farm()
    port, key = rpc_farm.free_port(), KEY
    children_before = {p.pid for p in psutil.Process().children(recursive=True)}
    procs = []
    try:
        for line in commands:
            env, argv = _as_run_here(line, port, key)
            procs.append(rpc_farm.start(argv, env, cwd=ROOT))
        rpc_farm.wait_for(Tracker("127.0.0.1", port, key), servers=1)

        def coordinator_model(*args, **kwargs):
            raise AssertionError("a remote tune used the coordinator's machine model")

        probed = []

        def device_model(target, tracker):  # the devices' model, probed there
            probed.append(tracker)
            return generous(real_device_machine(target, tracker))

        real_device_machine = session_module.device_machine
        monkeypatch.setattr(session_module, "host_machine", coordinator_model)
        monkeypatch.setattr(measure_module, "host_machine", coordinator_model)
        monkeypatch.setattr(session_module, "device_machine", device_model)
        code = python
        cpu = str(host.attrs["mcpu"])
        for old, new in (("<coordinator>", "127.0.0.1"), ("9190", str(port)), ("<board>", key),
                         ("<device cpu>", cpu), ("<its cores>", "1")):  # fmt: skip
            code = code.replace(old, new)
        scope: dict = {}
        exec(compile(code, "README.md (scaling out)", "exec"), scope)
        result = scope["result"]
        assert result.stats["measured"] >= 1 and result.stats["failed"] == 0
        assert result.measured_on == f"device '{key}' via the RPC tracker at 127.0.0.1:{port}"
        assert result.measurement.measured_on == result.measured_on
        assert result.measurement.threads == 1  # the server's pool (TVM_NUM_THREADS=1)
        assert result.measurement.max_rel_error < 1e-4
        assert [t.key for t in probed] == [key]  # the bound used the devices' model
    finally:
        for proc in procs:
            rpc_farm.stop(proc)  # asserts no popen_worker of the group survives
    left = {p.pid for p in psutil.Process().children(recursive=True)} - children_before
    assert not [p for p in left if psutil.pid_exists(p)], "the tune left worker processes"


def test_bad_tracker_address():
    with pytest.raises(ValueError, match="must be 'host:port'"):
        rpc_runner("localhost", key="k")
    with pytest.raises(ValueError, match="non-empty string"):
        rpc_runner("localhost:9190", key="")
    with pytest.raises(ValueError, match="max_workers=0 must be a positive int"):
        rpc_runner("localhost:9190", key="k", max_workers=0)
