import os
import shutil
import tempfile

import pytest

import tvm_ext
from tvm_ext.hardware import fork_join
from tvm_ext.hardware.machine import host_machine

_SESSION_CACHE: str | None = None


def pytest_configure(config):
    """Tests never write the user's cache directory: the machine model is probed once per test
    session into a temporary folder (``TVM_EXT_CACHE_DIR``, which worker processes, notebook
    kernels and child tunes inherit), removed at the end. A probe taken under load thus lasts
    one session, never every later run. Set ``TVM_EXT_CACHE_DIR`` yourself to keep a probe
    across sessions."""
    global _SESSION_CACHE
    config.addinivalue_line(
        "markers", "own_workers: each tune starts and stops its own build workers and runner"
    )
    if not os.environ.get("TVM_EXT_CACHE_DIR"):
        _SESSION_CACHE = tempfile.mkdtemp(prefix="tvm-ext-test-cache-")
        os.environ["TVM_EXT_CACHE_DIR"] = _SESSION_CACHE
    # A schedule's shape must not follow a noisy host's fork/join probe: the rules' threshold
    # for parallel loops is pinned (tests/test_fork_join.py probes it and unpins it).
    os.environ.setdefault(fork_join.ENV, str(fork_join.DEFAULT_MIN_WORK))
    # Any other tvm-ext cache file this process asks platformdirs for goes there too.
    import platformdirs

    real = platformdirs.user_cache_dir

    def user_cache_dir(appname=None, *args, **kwargs):
        if appname == "tvm-ext":
            return os.environ["TVM_EXT_CACHE_DIR"]
        return real(appname, *args, **kwargs)

    config.add_cleanup(lambda: setattr(platformdirs, "user_cache_dir", real))
    platformdirs.user_cache_dir = user_cache_dir


def pytest_unconfigure(config):
    global _SESSION_CACHE
    if _SESSION_CACHE is not None:
        shutil.rmtree(_SESSION_CACHE, ignore_errors=True)
        if os.environ.get("TVM_EXT_CACHE_DIR") == _SESSION_CACHE:
            del os.environ["TVM_EXT_CACHE_DIR"]
        _SESSION_CACHE = None


@pytest.fixture(scope="session")
def host():
    return tvm_ext.host_target()


@pytest.fixture(scope="session")
def machine(host):
    """The host's machine model: probed once per session into the session cache."""
    return host_machine(host)


def pytest_collection_modifyitems(session, config, items):
    global _NEEDS_MODEL
    _NEEDS_MODEL = any({"host", "machine"} & set(getattr(i, "fixturenames", ())) for i in items)


_NEEDS_MODEL = False


@pytest.fixture(scope="session", autouse=True)
def _session_machine_model():
    """Before the first test (when any test uses the host): the session's machine model, its
    fp32 peak and FMA latency the best of eight more probes, so one probe that read low
    under load does not decide the session. It then stays fixed for the session."""
    if _NEEDS_MODEL and _SESSION_CACHE is not None:
        best_machine(tvm_ext.host_target())


# One pool of build workers per (workers, timeout), and one runner per thread count, for the
# session's tunes: a tune starts its own (fresh processes importing TVM: build workers ~2-8 s,
# the runner's worker and its sanity check ~5 s on 2 cores) and shuts them down at its end,
# which the 30-odd tunes of the fast tier paid each time. Tests of that lifecycle
# (``private_tmp``: no process, no artifact left behind; ``own_workers``: the soak of
# back-to-back tunes) keep the real ones.
_POOLS: dict = {}
_RUNNERS: dict = {}


def _shared_builder(workers: int, timeout_s: float = 120.0):
    from tvm_ext.kernel_tuner.builder import PersistentBuilder

    key = (workers, timeout_s)
    if key not in _POOLS:
        _POOLS[key] = PersistentBuilder(workers=workers, timeout_s=timeout_s)
    builder = _POOLS[key]
    builder.cuts.clear()  # a tune that failed mid-search may have left its cut attached
    return builder


@pytest.fixture(autouse=True)
def _shared_build_workers(request, monkeypatch):
    if "private_tmp" in request.fixturenames or request.node.get_closest_marker("own_workers"):
        yield
        return
    from tvm_ext.kernel_tuner import session

    real_close, real_runner = session._close, session.local_runner

    def shared_runner(cores: int):
        if cores not in _RUNNERS:
            _RUNNERS[cores] = real_runner(cores)
        return _RUNNERS[cores]

    def close(builder, runner, own_runner):
        shared = any(builder is b for b in _POOLS.values())
        ours = own_runner and not any(runner is r for r in _RUNNERS.values())
        real_close(None if shared else builder, runner, ours)

    monkeypatch.setattr(session, "PersistentBuilder", _shared_builder)
    monkeypatch.setattr(session, "local_runner", shared_runner)
    monkeypatch.setattr(session, "_close", close)
    yield


@pytest.fixture(scope="session", autouse=True)
def _shut_shared_build_workers():
    yield
    for builder in _POOLS.values():
        builder.shutdown()
    for runner in _RUNNERS.values():
        runner.pool.shutdown()
    _POOLS.clear()
    _RUNNERS.clear()


def best_machine(host, probes: int = 8):
    """The session's machine model after ``probes`` more fp32-peak and FMA-latency probes: a
    figure the host beat is raised to it in the session cache (which ``tune`` reads).

    Why: the model is a roof, and on a shared 2-core host a probe taken while a neighbour holds
    a core reads low (19.9 GFLOP/s against 200 in one session here); bounds computed from it
    are then too high, and tests that check runs against bounds fail for the probe's sake."""
    import dataclasses
    import json

    from tvm_ext.base import tvm_api
    from tvm_ext.hardware.machine import cache_path
    from tvm_ext.hardware.machine_probes import best_compute

    model = host_machine(host)
    with tvm_api.threads(model.cores):
        fp32, latency = best_compute(host, model.cores, probes, max(probes // 2, 1))
    scale = fp32 / model.peaks["float32"].value
    if scale <= 1 and latency >= model.fma_latency.value:
        return model
    note = "; raised to the best probe of the test session"
    if scale > 1:
        peaks = {k: dataclasses.replace(f, value=f.value * scale, note=f.note + note)
                 for k, f in model.peaks.items()}  # fmt: skip
        model = dataclasses.replace(model, peaks=peaks)
    if latency < model.fma_latency.value:
        model = dataclasses.replace(
            model, fma_latency=dataclasses.replace(model.fma_latency, value=latency)
        )
    path = cache_path(host)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(model.to_json(), indent=2))
    tmp.replace(path)
    return host_machine(host)


def cpu_has(feature: str, target) -> bool:
    from tvm_ext.base import tvm_api

    return bool(tvm_api.global_func("target.llvm_cpu_has_feature")(feature, target))


def raised_in_package(err: BaseException) -> bool:
    """Whether ``err`` was raised by tvm-ext's own code (its innermost frame is in the
    package), not by TVM, the FFI or Python's call machinery."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return False
    import tvm_ext.cost
    import tvm_ext.schedules

    homes = [os.path.dirname(os.path.abspath(m.__file__)) + os.sep
             for m in (tvm_ext, tvm_ext.cost, tvm_ext.schedules)]  # fmt: skip
    return any(os.path.abspath(frames[-1].filename).startswith(h) for h in homes)
