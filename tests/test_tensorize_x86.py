"""x86 tensorize intrinsics: VNNI int8 (skipped on CPUs without AVX512-VNNI)."""

import pytest
from conftest import cpu_has
from tvm_ext.schedules import matmul_vnni

from tvm_ext import _tvm
from tvm_ext import kernels as K
from tvm_ext import schedules as S
from tvm_ext.measure import verify


@pytest.fixture(scope="module")
def vnni_host(host):
    if not cpu_has("avx512vnni", host):
        pytest.skip("this CPU has no AVX512-VNNI")
    return host


def test_registration_is_idempotent_and_explicit():
    S.register_x86_intrinsics()
    S.register_x86_intrinsics()
    assert _tvm.tvm.s_tir.TensorIntrin.get(S.VNNI_DOT_16x4) is not None


@pytest.mark.parametrize("shape", [(128, 128, 128), (100, 70, 33), (1, 16, 4), (64, 200, 64)])
def test_vnni_matmul_matches_numpy(shape, vnni_host):
    w = K.matmul(*shape, dtype="uint8")
    sch = S.schedule(w, vnni_host)
    assert "tensorize" in str(sch.trace)
    verify(sch, w, vnni_host)


def test_vnni_code_uses_vpdpbusd(vnni_host):
    w = K.matmul(64, 64, 64, dtype="uint8")
    asm = _tvm.build(S.schedule(w, vnni_host).mod, vnni_host).inspect_source("asm")
    assert "vpdpbusd" in asm


def test_vnni_does_not_claim_other_matmuls(host):
    assert not matmul_vnni.applies(K.matmul(8, 8, 8, "int8"), host)
    assert not matmul_vnni.applies(K.matmul(8, 8, 8, "uint8", transpose_b=True), host)
    generic = _tvm.Target(
        {"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-unknown-linux-gnu", "num-cores": 1}
    )
    assert not matmul_vnni.applies(K.matmul(8, 8, 8, "uint8"), generic)
    w = K.matmul(20, 20, 20, "uint8")
    verify(S.schedule(w, generic), w, host)  # falls back to the generic CPU schedule


def test_vnni_config_errors(vnni_host):
    with pytest.raises(ValueError, match="accumulators exceed"):
        S.schedule(K.matmul(64, 64, 64, "uint8"), vnni_host, mr=8, nv=4)
