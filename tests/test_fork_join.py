"""The threshold below which the rules keep a loop serial is measured on the host (issue 31:
"a kernel is parallelized only as far as its work pays for the fork and join")."""

import json

import pytest
from rule_checks import se_gate
from tvm import te
from tvm_ext.schedules.rules import schedule_func

from tvm_ext.base import tvm_api
from tvm_ext.hardware import fork_join
from tvm_ext.hardware.target import host_target


@pytest.fixture
def unpinned(monkeypatch, tmp_path):
    """No pinned threshold (conftest pins one), a cache of this test's own."""
    monkeypatch.delenv(fork_join.ENV, raising=False)
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))
    fork_join._record.cache_clear()
    yield tmp_path
    fork_join._record.cache_clear()


# Probes of two threads, at most, before the test concludes they never pay on this host: a
# probe is a timing, and while another process holds a core two threads rightly do not pay
# (CI once failed so, a compile running beside it); on an idle host the first one finds it.
PROBE_TRIES = 3


def test_the_probe_finds_where_two_threads_pay_and_one_never_does(unpinned):
    for _ in range(PROBE_TRIES):
        found = fork_join.probe(host_target(num_cores=2))
        if found["min_work"] < fork_join.NEVER:
            break
    two, times = found["min_work"], found["seconds"]
    assert two in times and two < fork_join.NEVER, f"two threads never paid: {times}"
    # It is the first of two sizes in a row at which parallel paid.
    paid = [times[n][0] >= fork_join.PAYS * times[n][1] for n in sorted(times) if n <= two]
    assert paid[-1] and not any(a and b for a, b in zip(paid, paid[1:]))
    # A call to libm's expf costs several of the cheap loop's vector lanes on any x86 core.
    assert found["libm_weight"] > 2
    # One thread: the "parallel" loop is the serial one, it never runs 1.25x faster.
    assert fork_join.probe(host_target(num_cores=1))["min_work"] == fork_join.NEVER


def test_the_threshold_is_probed_once_then_read_from_the_cache(unpinned, monkeypatch):
    host = host_target(num_cores=2)
    calls = []
    record = {"min_work": 4096, "libm_weight": 10.0, "seconds": {4096: [2, 1]}}
    monkeypatch.setattr(fork_join, "probe", lambda t: calls.append(t) or record)
    assert fork_join.parallel_min_work(host) == 4096 and fork_join.libm_weight(host) == 10
    [path] = unpinned.glob("parallel-*.json")
    assert json.loads(path.read_text())["min_work"] == 4096
    fork_join._record.cache_clear()  # a new process reads the file, does not probe
    assert fork_join.parallel_min_work(host) == 4096 and len(calls) == 1
    data = json.loads(path.read_text())
    path.write_text(json.dumps(dict(data, when="2020-01-01T00:00:00+00:00")))
    fork_join._record.cache_clear()  # stale: probed again
    assert fork_join.parallel_min_work(host) == 4096 and len(calls) == 2
    data = json.loads(path.read_text())
    path.write_text(json.dumps(dict(data, how="one pass, each size timed once")))
    fork_join._record.cache_clear()  # probed another way (one pass read it high): again
    assert fork_join.parallel_min_work(host) == 4096 and len(calls) == 3


def test_a_target_that_cannot_run_here_gets_the_default(unpinned, monkeypatch):
    monkeypatch.setattr(fork_join, "probe", lambda t: pytest.fail("probed a foreign target"))
    arm = tvm_api.Target({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "num-cores": 2})
    assert fork_join.parallel_min_work(arm) == fork_join.DEFAULT_MIN_WORK
    monkeypatch.setenv(fork_join.ENV, "abc")
    with pytest.raises(ValueError, match="positive number"):
        fork_join.parallel_min_work(host_target())


def _bias_relu(rows: int, cols: int):
    x = te.placeholder((rows, cols), name="x")
    b = te.placeholder((cols,), name="b")
    y = te.compute((rows, cols), lambda i, j: te.max(x[i, j] + b[j], 0.0), name="y")
    return te.create_prim_func([x, b, y]).with_attr("global_symbol", "main")


@pytest.mark.parametrize("min_work, parallel", [(1 << 10, True), (1 << 20, False)])
def test_the_rules_run_a_loop_in_parallel_only_past_the_threshold(monkeypatch, min_work, parallel):
    # 64 x 1024 = 65536 iterations: parallel on a host where 1024 pay, serial where 2^20 do.
    monkeypatch.setenv(fork_join.ENV, str(min_work))
    sch, _ = schedule_func(_bias_relu(64, 1024), host_target(num_cores=2))
    assert ("T.parallel" in sch.mod.script()) == parallel


def test_an_iteration_weighs_as_many_accesses_as_it_makes(monkeypatch):
    """A 64 x 1024 bias + ReLU (two loads and a store an iteration) weighs 1.5 of the probe's
    iterations (one load, one store): parallel at a threshold of 80000 iterations; a copy of
    the same size (the probe's two accesses) stays serial there."""
    monkeypatch.setenv(fork_join.ENV, "80000")
    x = te.placeholder((64, 1024), name="x")
    copy = te.create_prim_func([x, te.compute(x.shape, lambda i, j: x[i, j], name="y")])
    host = host_target(num_cores=2)
    for func, parallel in ((_bias_relu(64, 1024), True), (copy, False)):
        sch, _ = schedule_func(func.with_attr("global_symbol", "main"), host)
        assert ("T.parallel" in sch.mod.script()) == parallel


def test_a_contraction_s_separate_stage_weighs_its_accesses_too(monkeypatch):
    """A squeeze-excitation gate's broadcast product (two loads and a store an iteration,
    7 x 7 x 64 = 3136) runs in parallel at a threshold of 4000 iterations, its GEMV's tiles
    (64 x 48) serial: the contraction rule weighs its separate stages as the injective rule
    does (efficientnet's gate of 1152 channels 28.5 -> 26.2 us, Zen 3)."""
    monkeypatch.setenv(fork_join.ENV, "4000")
    host = host_target(num_cores=2)
    sch, _ = schedule_func(se_gate(64, 48, 7).with_attr("global_symbol", "main"), host)
    text = sch.mod.script()
    assert text.count("T.parallel") == 1
    assert text.index("T.parallel") > text.index('T.sblock("y_update")')


def _rows(n: int, libm: bool):
    """A 12 x n x n softmax (exp: a libm call), or the same row normalization without exp."""
    x = te.placeholder((12, n, n), name="x")
    k = te.reduce_axis((0, n), name="k")
    e = te.compute(x.shape, lambda h, i, j: te.exp(x[h, i, j]) if libm else x[h, i, j] * 2.0,
                   name="e")  # fmt: skip
    total = te.compute((12, n), lambda h, i: te.sum(e[h, i, k], axis=k), name="total")
    y = te.compute(x.shape, lambda h, i, j: e[h, i, j] / total[h, i], name="y")
    return te.create_prim_func([x, y]).with_attr("global_symbol", "main")


def test_a_loop_of_libm_calls_runs_in_parallel_sooner(unpinned, monkeypatch):
    # 12 x 16 x 16 = 3072 iterations: serial as cheap ones (65536 pay), in parallel as calls
    # to expf worth 30 each (a 12 x 16 x 16 softmax 13.3 us serial, 7.7 us on 2 threads).
    record = {"min_work": 1 << 16, "libm_weight": 30.0, "seconds": {}}
    monkeypatch.setattr(fork_join, "probe", lambda t: record)
    host = host_target(num_cores=2)
    for libm in (True, False):
        sch, rule = schedule_func(_rows(16, libm), host)
        assert rule == "rows" and ("T.parallel" in sch.mod.script()) == libm
