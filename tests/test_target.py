import re
import warnings

import numpy as np
import pytest
import tvm
from conftest import cpu_has

import tvm_ext
from tvm_ext.base import tvm_api
from tvm_ext.hardware import target as tgt
from tvm_ext.workloads.kernels import axpy


def test_host_target_names_the_real_cpu_and_cores(host):
    assert host.kind.name == "llvm"
    system_cpu = str(tvm_api.global_func("target.llvm_get_system_cpu")())
    assert str(host.attrs["mcpu"]) in (system_cpu, tgt._resolve_host_cpu(tgt.host_triple())[0])
    assert str(host.attrs["mcpu"]) != "generic"
    assert "conda" not in str(host.attrs["mtriple"])
    assert int(host.attrs["num-cores"]) == tvm_api.physical_cores()


def _asm_of_vectorized_axpy(target) -> str:
    w = axpy(4096)
    sch = tvm_api.Schedule(w.func)
    (i,) = sch.get_loops(sch.get_sblock("z"))
    _, inner = sch.split(i, [None, 64])
    sch.vectorize(inner)
    return tvm_api.build(sch.mod, target).inspect_source("asm")


def test_host_code_uses_the_widest_vector_isa(host):
    asm = _asm_of_vectorized_axpy(host)
    if cpu_has("avx512f", host):
        assert re.search(r"%zmm\d+", asm), "AVX-512 CPU but no zmm register in the code"
    elif cpu_has("avx2", host):
        assert re.search(r"%ymm\d+", asm), "AVX2 CPU but no ymm register in the code"
    generic = _asm_of_vectorized_axpy(tgt.generic_target())
    assert not re.search(r"%[yz]mm\d+", generic), "generic x86-64 code should be SSE only"


def test_unknown_cpu_gets_closest_known_cpu_with_a_warning(monkeypatch):
    real = tvm_api.global_func

    def fake(name):
        if name == "target.llvm_get_system_cpu":
            return lambda: "futurelake"
        return real(name)

    monkeypatch.setattr(tvm_api, "global_func", fake)
    tgt._resolve_host_cpu.cache_clear()
    try:
        with pytest.warns(tgt.HostCPUWarning, match="futurelake"):
            target = tgt.host_target()
        cpu = str(target.attrs["mcpu"])
        assert cpu != "generic" and real("target.llvm_is_valid_cpu")(cpu, tgt.host_triple())
        # The stand-in must keep the widest vector ISA of the real CPU.
        if real("tvm.codegen.llvm.GetHostCPUFeatures")()["avx512f"]:
            assert real("target.llvm_cpu_has_feature")("avx512f", target)
    finally:
        tgt._resolve_host_cpu.cache_clear()


def test_known_cpu_gives_no_warning():
    tgt._resolve_host_cpu.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tgt.host_target()


def test_bad_mcpu_and_cores_are_value_errors():
    with pytest.raises(ValueError, match="mcpu='pentium9000'"):
        tgt.host_target(mcpu="pentium9000")
    with pytest.raises(ValueError, match="num_cores=0"):
        tgt.host_target(num_cores=0)


def test_cuda_target_and_bad_arch():
    t = tvm_ext.cuda_target()
    assert t.kind.name == "cuda" and str(t.attrs["arch"]) == "sm_90"
    assert str(tvm_ext.cuda_target("sm_80").attrs["arch"]) == "sm_80"
    for bad in ("sm_91", "90", "compute_90", None):
        with pytest.raises(ValueError, match="not a CUDA architecture"):
            tvm_ext.cuda_target(bad)


def test_as_target_rejects_unknown_kinds_and_types():
    with pytest.raises(ValueError, match="kind 'opencl' is not supported"):
        tgt.as_target({"kind": "opencl"})
    with pytest.raises(ValueError, match="kind 'opencl' is not supported"):
        tgt.as_target("opencl")
    with pytest.raises(TypeError, match="target must be"):
        tgt.as_target(42)
    assert tgt.as_target(None).kind.name == "llvm"


def test_string_llvm_is_the_host_cpu_with_its_cores(host):
    # TVM 0.27 takes "llvm" itself, with the conda triple under which mcpu=native is SSE2.
    for text in ("llvm", "llvm -mcpu=native"):
        t = tgt.as_target(text)
        assert str(t) == str(host), text
    t = tgt.as_target("llvm -mcpu=haswell -num-cores=3 -mattr=+avx2,+fma")
    assert str(t.attrs["mcpu"]) == "haswell" and int(t.attrs["num-cores"]) == 3
    assert str(t.attrs["mtriple"]) == tgt.host_triple() and list(t.attrs["mattr"]) == [
        "+avx2",
        "+fma",
    ]


def test_string_cuda_targets():
    t = tgt.as_target("cuda -arch=sm_80")
    assert t.kind.name == "cuda" and str(t.attrs["arch"]) == "sm_80"
    if not tvm_api.cuda(0).exist:
        with pytest.warns(UserWarning, match="no GPU to read it from: assuming sm_90"):
            t = tgt.as_target("cuda")
        assert str(t.attrs["arch"]) == "sm_90"


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "names no target kind"),
        ("llvm mcpu", "'mcpu' is not an option of the form -name=value"),
        ("llvm -mcpu=pentium9000", "mcpu='pentium9000' is not a CPU LLVM knows"),
        ("llvm -num-cores=0", "num-cores=0 must be a positive int"),
        ("llvm -bogus=1", "target 'llvm -bogus=1': Unknown config option 'bogus'"),
    ],
)
def test_bad_target_strings_say_what_is_wrong(text, match):
    with pytest.raises(ValueError, match=match):
        tgt.as_target(text)


def test_tune_measure_and_replay_take_target_strings(tmp_path):
    from tvm_ext.kernel_tuner.replayer import replay

    w = axpy(256)
    m = tvm_ext.measure(tvm_api.Schedule(w.func), w, "llvm", repeat=1)
    assert m.threads == tvm_api.physical_cores() and m.max_rel_error < 1e-6
    r = tvm_ext.tune(w, "llvm", trials=2, batch=2, seed=0, log_dir=tmp_path, progress=False)
    assert r.measurement.max_rel_error < 1e-6 and r.measured_on == "this host"
    assert replay(w, "llvm", tmp_path).measurement.max_rel_error < 1e-6


def test_cpu_features_follow_mattr():
    t = tvm_api.Target(
        {"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-unknown-linux-gnu",
         "mattr": ["+avx512f", "-avx2"]}
    )  # fmt: skip
    feats = tgt.cpu_features(t)
    assert "avx512f" in feats and "avx2" not in feats and "fma" in feats


def test_target_cores_requires_num_cores():
    with pytest.raises(ValueError, match="num-cores"):
        tgt.target_cores(tvm.target.Target({"kind": "llvm"}))
    assert np.isscalar(tgt.target_cores(tgt.host_target(num_cores=1)))


@pytest.mark.parametrize(
    "mcpu, bits", [("haswell", 256), ("x86-64", 128), ("skylake-avx512", 512), ("znver4", 512)]
)
def test_vector_bits_follow_the_target_not_the_host(mcpu, bits):
    from tvm_ext.hardware.target import lanes_for, vector_bits

    t = tvm_api.Target({"kind": "llvm", "mcpu": mcpu, "mtriple": "x86_64-unknown-linux-gnu"})
    assert vector_bits(t) == bits and lanes_for(t, 32) == bits // 32
