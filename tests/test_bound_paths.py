"""Paths on which the bound could read high (and so drop a winner), one test each: a host CPU
LLVM does not know, a non-float dtype, a target that reassociates or has no FMA, an unnamed CPU
at stage 1. The machine models are built from ISA facts alone (see ``test_bound_arms``).
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from tvm_ext.cost import RooflinePolicy, evaluate, features

from tvm_ext.base import tvm_api
from tvm_ext.hardware import isa, machine_probes
from tvm_ext.hardware import target as target_mod
from tvm_ext.hardware.machine import host_machine
from tvm_ext.hardware.machine_model import Figure, MachineModel

te = tvm_api.te
TRIPLE = "x86_64-unknown-linux-gnu"


def _target(mcpu="znver4", **extra):
    return tvm_api.Target({"kind": "llvm", "mcpu": mcpu, "mtriple": TRIPLE, "num-cores": 2,
                           **extra})  # fmt: skip


def _model(cpu: str) -> MachineModel:
    peaks = {d: Figure(1.0, "user") for d in ("float32", "int8", "bfloat16")}
    bw = {"llc": Figure(math.inf, "user"), "dram": Figure(math.inf, "user")}
    return MachineModel(cpu, 2, peaks, bw, 33 << 20, 1 << 20, 16, Figure(1.0, "user"))


def _arms(obj, target, cpu="znver4"):
    return evaluate(RooflinePolicy(), obj, target, machine=_model(cpu)).arms


def _matmul(n: int, a_dtype: str, b_dtype: str, acc: str):
    a = te.placeholder((n, n), a_dtype, name="A")
    b = te.placeholder((n, n), b_dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    c = te.compute(
        (n, n),
        lambda i, j: te.sum(a[i, k].astype(acc) * b[k, j].astype(acc), axis=k),
        name="C",
    )
    return te.create_prim_func([a, b, c])


# 1. A host CPU LLVM does not know is priced with the tables' conservative branch.


def test_a_host_with_features_its_cpu_name_lacks_is_priced_as_unknown(monkeypatch):
    # This 2-core Xeon VM reports Rocket Lake's family and model with AMX and AVX-512 BF16:
    # the tables must not price it at Rocket Lake's clock and reorder window.
    monkeypatch.setattr(target_mod, "_system_cpu", lambda: "rocketlake")
    features = {f: True for f in target_mod._cpu_features("sapphirerapids", TRIPLE)}
    monkeypatch.setattr(tvm_api, "global_func", _with_host_features(features))
    assert target_mod.host_table_cpu(TRIPLE) == "unknown:rocketlake"
    features = {f: True for f in target_mod._cpu_features("rocketlake", TRIPLE)}
    monkeypatch.setattr(tvm_api, "global_func", _with_host_features(features))
    assert target_mod.host_table_cpu(TRIPLE) == "rocketlake"


_REAL_GLOBAL_FUNC = tvm_api.global_func


def _with_host_features(features: dict):
    """``tvm_api.global_func`` with the host feature probe answering ``features``."""

    def lookup(name):
        if name == "tvm.codegen.llvm.GetHostCPUFeatures":
            return lambda: features
        return _REAL_GLOBAL_FUNC(name)

    return lookup


def test_an_unknown_host_cpu_is_not_priced_as_the_closest_known_one(monkeypatch, tmp_path):
    monkeypatch.setattr(target_mod, "_system_cpu", lambda: "znver9")  # no LLVM knows it
    assert target_mod.host_table_cpu(TRIPLE) == "unknown:znver9"
    # The probe builds for the closest CPU LLVM knows, but the model it returns carries the
    # host's own (unknown) name: the tables must not price it as that CPU.
    monkeypatch.setattr(machine_probes, "compute_samples",
                        lambda target, cores: ([1e11] * 3, [1e-9] * 3))  # fmt: skip
    monkeypatch.setattr(machine_probes, "probe_read_bandwidth", lambda *a, **k: 1e11)
    monkeypatch.setattr(machine_probes, "probe_copy_bandwidth", lambda *a, **k: 1e11)
    host = tvm_api.Target({"kind": "llvm", "mcpu": target_mod.target_cpu(_target()),
                           "mtriple": TRIPLE, "num-cores": 2})  # fmt: skip
    monkeypatch.setattr(target_mod, "missing_features", lambda t: [])
    monkeypatch.setattr(machine_probes, "missing_features", lambda t: [])
    model = machine_probes.probe(host)
    assert model.cpu == "unknown:znver9" and not isa.named(model.cpu)
    # A cached model probed under the substituted name is probed again, not trusted.
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))
    stale = MachineModel("znver4", 2, model.peaks, model.bandwidth, model.llc_bytes,
                         model.l2_bytes, model.vector_lanes, model.fma_latency)  # fmt: skip
    from tvm_ext.hardware.machine import cache_path

    cache_path(host).write_text(__import__("json").dumps(stale.to_json()))
    assert host_machine(host).cpu == "unknown:znver9"


def test_an_unknown_cpu_is_never_priced_above_a_named_one():
    """The conservative branch is a bound for every CPU the tables name, arm by arm."""
    func = _matmul(64, "float32", "float32", "float32")
    unknown = _arms(func, _target(), "unknown:x")
    for cpu in isa.MAX_BOOST_GHZ:
        named = _arms(func, _target(), cpu)
        for arm, seconds in unknown.items():
            assert seconds <= named[arm] * (1 + 1e-9), (cpu, arm)


# 1b. A server die is priced at its own fastest clock, and only when the host can be it.


def test_a_server_die_is_priced_at_its_own_clock_and_its_cores_tables(tmp_path):
    genoa = isa.table_cpu("znver4", "AuthenticAMD", 25, 17)
    assert genoa == "znver4+genoa" and isa.named(genoa)
    assert isa.max_boost_hz(genoa) < isa.max_boost_hz("znver4")
    for table in (isa.reorder_window, isa.port_limits, isa.stores_per_cycle):
        assert table(genoa) == table("znver4")
    assert isa.fma_lanes_per_cycle(genoa, 16) == isa.fma_lanes_per_cycle("znver4", 16)
    # A neighbouring model is another part (family 25 model 24: Threadripper 7000, 5.1 GHz),
    # and a die listed under another microarchitecture is not this host's.
    assert isa.table_cpu("znver4", "AuthenticAMD", 25, 24) == "znver4"
    assert isa.table_cpu("znver5", "AuthenticAMD", 25, 17) == "znver5"
    assert isa.table_cpu("znver4", "GenuineIntel", 25, 17) == "znver4"
    # Milan (family 25 model 1) is a Zen 3 server die; the Ryzen 5000 (model 33) is not.
    assert isa.table_cpu("znver3", "AuthenticAMD", 25, 1) == "znver3+milan"
    assert isa.max_boost_hz("znver3+milan") < isa.max_boost_hz("znver3")
    assert isa.table_cpu("znver3", "AuthenticAMD", 25, 33) == "znver3"
    # The bound on a die is the microarchitecture's scaled by the clocks, arm by arm.
    func = _matmul(64, "float32", "float32", "float32")
    die, arch = _arms(func, _target(), genoa), _arms(func, _target(), "znver4")
    clock = isa.max_boost_hz("znver4") / isa.max_boost_hz(genoa)
    for arm in ("compute", "issue", "dependency"):
        assert die[arm] == pytest.approx(arch[arm] * clock), arm
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n"
                    "model\t\t: 17\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\n")  # fmt: skip
    assert target_mod.cpuid(str(info)) == ("AuthenticAMD", 25, 17)
    assert target_mod.cpuid(str(tmp_path / "absent")) == ("", 0, 0)


def test_a_die_the_probed_clock_outruns_is_priced_as_its_microarchitecture(monkeypatch, tmp_path):
    # A VM may report a server die's CPUID on a desktop part: the FMA chain's clock tells.
    monkeypatch.setattr(machine_probes, "host_table_cpu", lambda triple=None: "znver4+genoa")
    monkeypatch.setattr(machine_probes, "probe_read_bandwidth", lambda *a, **k: 1e11)
    monkeypatch.setattr(machine_probes, "probe_copy_bandwidth", lambda *a, **k: 1e11)
    monkeypatch.setattr(machine_probes, "missing_features", lambda t: [])
    host = _target()
    for ghz, expected in ((3.67, "znver4+genoa"), (5.5, "znver4")):
        step = isa.MIN_FMA_LATENCY_CYCLES / (ghz * 1e9)
        monkeypatch.setattr(machine_probes, "compute_samples",
                            lambda target, cores, s=step: ([1e11] * 3, [s] * 3))  # fmt: skip
        assert machine_probes.probe(host).cpu == expected, ghz
    # The model the probe priced as the microarchitecture is this host's: not probed again.
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(target_mod, "_system_cpu", lambda: "znver4")
    monkeypatch.setattr(target_mod, "_features_beyond", lambda cpu, triple: frozenset())
    monkeypatch.setattr(target_mod, "cpuid", lambda: ("AuthenticAMD", 25, 17))
    from tvm_ext.hardware import machine

    model = machine_probes.probe(host)
    machine.cache_path(host).write_text(__import__("json").dumps(model.to_json()))
    monkeypatch.setattr(machine, "probe", lambda target: pytest.fail("probed again"))
    assert host_machine(host).cpu == "znver4"


# 4. ... and at stage 1 with the wider ports stage 2 allows it.


def test_stage_one_widens_an_unknown_cpus_ports_as_stage_two_does():
    func = _matmul(64, "float32", "float32", "float32")
    fastest = max(isa.MAX_BOOST_GHZ, key=isa.MAX_BOOST_GHZ.get)
    named = _arms(func, _target(), fastest)["issue"]
    unknown = _arms(func, _target(), "unknown:x")["issue"]
    clock = isa.max_boost_hz(fastest) / isa.max_boost_hz("unknown:x")
    scale = isa.port_limits("unknown:x")[0] / isa.port_limits(fastest)[0]
    assert scale == 2
    assert unknown == pytest.approx(named * clock / scale)


# 2. Non-float dtypes are priced at their own rate, not at fp32 lanes.


def test_a_u8s8_matmul_is_priced_at_the_int8_rate_not_its_int32_output():
    u8 = _matmul(64, "uint8", "int8", "int32")
    f32 = _matmul(64, "float32", "float32", "float32")
    target = _target()
    assert features(u8, target).dtype in ("int8", "uint8")
    # Without VNNI (this model's int8 peak equals its fp32 one) bytes still fill a register
    # four times over: the compute arm is at most a quarter of the fp32 one.
    assert _arms(u8, target)["compute"] <= _arms(f32, target)["compute"] / 4 * (1 + 1e-9)
    i16 = _matmul(64, "int16", "int16", "int32")
    assert _arms(i16, target)["compute"] <= _arms(f32, target)["compute"] / 2 * (1 + 1e-9)


# 3. The chain arm only where contraction and no reassociation are established.


def test_a_reassociating_target_has_no_chain_arm():
    func = _matmul(64, "float32", "float32", "float32")
    assert "dependency" in _arms(func, _target())
    for flags in ({"fast-math": True}, {"fast-math-reassoc": True}, {"cl-opt": ["-x"]}):
        target = _target(**flags)
        assert features(func, target).fp_reassoc
        assert "dependency" not in _arms(func, target), flags


def test_without_fma_a_multiply_add_chain_steps_at_add_latency():
    func = _matmul(64, "float32", "float32", "float32")
    # Haswell: AVX2 with or without FMA, the same 8 lanes (AVX-512 would go with FMA).
    fused = _arms(func, _target("haswell"))["dependency"]
    plain = _target("haswell", mattr=["-fma"])
    assert not features(func, plain).fp_contract
    unfused = _arms(func, plain)["dependency"]
    ratio = isa.fadd_latency_floor_s("znver4") / isa.fma_latency_floor_s("znver4")
    assert unfused == pytest.approx(fused * ratio)


# 6. No memory arm rests on a bandwidth that may read low.


def test_a_provisional_bandwidth_bounds_nothing():
    n = 1 << 22  # 3 x 16 MiB: beyond this model's 1 MiB of L2
    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((n,), "float32", name="B")
    func = te.create_prim_func([a, b, te.compute((n,), lambda i: a[i] + b[i], name="C")])
    model = _model("znver4")
    bw = {"llc": Figure(1e11, "probed"), "dram": Figure(1e11, "probed")}
    steady = replace(model, bandwidth=bw, llc_bytes=2 << 20)
    arms = evaluate(RooflinePolicy(), func, _target(), machine=steady).arms
    assert "memory.dram" in arms
    shaky = replace(steady, bandwidth={k: replace(f, provisional=True) for k, f in bw.items()})
    arms = evaluate(RooflinePolicy(), func, _target(), machine=shaky).arms
    assert not any(name.startswith("memory") for name in arms)
    # A provisional DRAM figure alone: the bytes beyond L2 still pass the LLC.
    half = replace(steady, bandwidth=dict(bw, dram=replace(bw["dram"], provisional=True)))
    arms = evaluate(RooflinePolicy(), func, _target(), machine=half).arms
    assert "memory.llc" in arms and "memory.dram" not in arms


# The search's candidates are timed without their weight-repacking blocks (a model repacks
# its weights once, at compile time): no bound counts that work.


def test_weight_repacking_blocks_are_not_priced():
    from tvm import topi
    from tvm_ext.schedules.rules.dispatch import schedule_func

    x = te.placeholder((8, 64), name="X")
    w = te.placeholder((96, 64), name="W")
    func = te.create_prim_func([x, w, topi.nn.dense(x, w)]).with_attr("layout_free_buffers", [1])
    sch, _ = schedule_func(func, _target())
    stripped = tvm_api.without_weight_repack(sch.mod)
    # The weight arrives packed: the pack's layout transform is not in the timed function.
    packed = tvm_api.param_specs(tvm_api.main_func(stripped))[1]
    assert packed != tvm_api.param_specs(func)[1]
    assert [b.name for b in features(sch, _target()).blocks] == [
        b.name for b in features(stripped, _target()).blocks
    ]
    assert _arms(sch, _target()) == pytest.approx(_arms(stripped, _target()))
