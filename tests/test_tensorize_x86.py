"""x86 tensorize intrinsics: VNNI int8 and AVX512-BF16 (each skipped on CPUs without it)."""

import re

import numpy as np
import pytest
from conftest import cpu_has
from tvm_ext.schedules.hand import matmul_bf16, matmul_vnni

from tvm_ext import host_target
from tvm_ext import kernels as K
from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.measurement.measure import verify


@pytest.fixture(scope="module")
def vnni_host(host):
    if not cpu_has("avx512vnni", host):
        pytest.skip("this CPU has no AVX512-VNNI")
    return host


def _described(host, feature: str, cpu: str):
    """This host when it has ``feature``, else a ``cpu`` described by its target: scheduling
    and code generation need no such CPU (running the code does)."""
    return host if cpu_has(feature, host) else host_target(mcpu=cpu, num_cores=2)


@pytest.fixture(scope="module")
def vnni_target(host):
    return _described(host, "avx512vnni", "cascadelake")


@pytest.fixture(scope="module")
def bf16_target(host):
    return _described(host, "avx512bf16", "sapphirerapids")


EXPLICIT = """
from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
get = tvm_api.TensorIntrin.get
names = (S.VNNI_DOT_16x4, S.BF16_DOT_16x2)
before = [get(n, allow_missing=True) is None for n in names]
S.register_x86_intrinsics()
first = [get(n) for n in names]
S.register_x86_intrinsics()  # a second call registers nothing again
print(before, [a.same_as(get(n)) for a, n in zip(first, names)])
"""


def test_registration_is_idempotent_and_explicit():
    import subprocess
    import sys

    # A fresh process: importing the schedules registers nothing; one call registers both
    # intrinsics, a second call keeps the same objects (no error, no re-registration).
    out = subprocess.run([sys.executable, "-c", EXPLICIT], capture_output=True, text=True,
                         check=True, timeout=300).stdout  # fmt: skip
    assert out.strip().splitlines()[-1] == "[True, True] [True, True]"
    # Each name holds our intrinsic: the 16-lane dot product it claims, on the instruction
    # it claims.
    import tvm_ffi
    from tvm_ext.schedules.intrinsics import x86 as intrin_x86

    S.register_x86_intrinsics()
    for name, pair, instruction in (
        (S.VNNI_DOT_16x4, intrin_x86._vnni_pair(), "llvm.x86.avx512.vpdpbusd.512"),
        (S.BF16_DOT_16x2, intrin_x86._bf16_pair(), "tvm_ext_dpbf16ps_16x2"),
    ):
        intrin = tvm_api.TensorIntrin.get(name)
        assert tvm_ffi.structural_equal(intrin.desc, pair[0]), name
        assert tvm_ffi.structural_equal(intrin.impl, pair[1]), name
        assert instruction in intrin.impl.script()


@pytest.mark.parametrize("shape", [(128, 128, 128), (100, 70, 33), (1, 16, 4), (64, 200, 64)])
def test_vnni_matmul_matches_numpy(shape, vnni_host):
    w = K.matmul(*shape, dtype="uint8")
    sch = S.schedule(w, vnni_host)
    assert "tensorize" in str(sch.trace)
    verify(sch, w, vnni_host)


@pytest.mark.parametrize("shape", [(64, 64, 64), (100, 70, 33)])
def test_vnni_code_uses_vpdpbusd(shape, vnni_target):
    w = K.matmul(*shape, dtype="uint8")
    sch = S.schedule(w, vnni_target)
    assert S.VNNI_DOT_16x4 in str(sch.trace)  # tensorized onto our intrinsic
    assert "vpdpbusd" in tvm_api.build(sch.mod, vnni_target).inspect_source("asm")


def test_vnni_does_not_claim_other_matmuls(host):
    assert not matmul_vnni.applies(K.matmul(8, 8, 8, "int8"), host)
    assert not matmul_vnni.applies(K.matmul(8, 8, 8, "uint8", transpose_b=True), host)
    generic = tvm_api.Target(
        {"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-unknown-linux-gnu", "num-cores": 1}
    )
    assert not matmul_vnni.applies(K.matmul(8, 8, 8, "uint8"), generic)
    w = K.matmul(20, 20, 20, "uint8")
    verify(S.schedule(w, generic), w, host)  # falls back to the generic CPU schedule


def test_vnni_config_errors(vnni_host):
    with pytest.raises(ValueError, match="accumulators exceed"):
        S.schedule(K.matmul(64, 64, 64, "uint8"), vnni_host, mr=8, nv=4)


@pytest.fixture(scope="module")
def bf16_host(host):
    if not cpu_has("avx512bf16", host):
        pytest.skip("this CPU has no AVX512-BF16")
    return host


BF16_CASES = [
    K.matmul(128, 128, 128, "bfloat16"),
    K.matmul(100, 70, 33, "bfloat16"),  # no tile divides M, N or K (odd K: a zero pair)
    K.matmul(1, 16, 2, "bfloat16"),
    K.matmul(7, 5, 9, "bfloat16", transpose_b=True),
    K.matmul(64, 96, 64, "bfloat16", transpose_b=True),
    K.batch_matmul(3, 20, 40, 30, "bfloat16"),
]


@pytest.mark.parametrize("w", BF16_CASES, ids=lambda w: w.key)
def test_bf16_matmul_matches_numpy(w, bf16_host):
    sch = S.schedule(w, bf16_host)
    assert S.BF16_DOT_16x2 in str(sch.trace)
    verify(sch, w, bf16_host)


@pytest.mark.parametrize(
    "cfg", [dict(mr=6, nv=2), dict(mr=15, nv=1), dict(mr=1, nv=3, parallel="tiles")]
)
def test_bf16_configs_match_numpy(cfg, bf16_host):
    w = K.matmul(37, 50, 20, "bfloat16")
    verify(S.schedule(w, bf16_host, **cfg), w, bf16_host)


def test_bf16_exactness_on_representable_products(bf16_host):
    # Integer-valued bf16 inputs: every product and partial sum is exact in fp32, so the
    # tensorized kernel must equal numpy bit for bit (any operand mix-up would show).
    w = K.matmul(48, 64, 40, "bfloat16")
    rng = np.random.default_rng(3)
    a = rng.integers(-8, 9, size=(48, 40)).astype(w.inputs(0)[0].dtype)
    b = rng.integers(-8, 9, size=(40, 64)).astype(a.dtype)
    lib = tvm_api.build(S.schedule(w, bf16_host).mod, bf16_host)
    out = np.zeros((48, 64), np.float32)
    dev = tvm_api.cpu()
    args = [tvm_api.tensor(x, dev) for x in (a, b, out)]
    lib[lib.entry_name](*args)
    np.testing.assert_array_equal(args[2].numpy(), a.astype(np.float32) @ b.astype(np.float32))


@pytest.mark.parametrize("w", [BF16_CASES[0], BF16_CASES[3], BF16_CASES[5]], ids=lambda w: w.key)
def test_bf16_code_is_tensorized_on_any_host(w, bf16_target):
    sch = S.schedule(w, bf16_target)
    assert S.BF16_DOT_16x2 in str(sch.trace)  # tensorized onto our intrinsic
    assert "vdpbf16ps" in tvm_api.build(sch.mod, bf16_target).inspect_source("asm")


def test_bf16_code_uses_vdpbf16ps_with_accumulators_in_registers(bf16_target):
    bf16_host = bf16_target  # code generation only: no BF16 CPU needed
    w = K.matmul(64, 64, 64, "bfloat16")
    lib = tvm_api.build(S.schedule(w, bf16_host).mod, bf16_host)
    asm = lib.inspect_source("asm")
    assert "vdpbf16ps" in asm
    assert "tvm_ext_dpbf16ps_16x2" not in asm  # the shim was inlined: no call remains
    # The accumulator tile lives on the stack (so in registers), not in a runtime workspace.
    assert not re.search(r"%C_local\S* = (tail )?call", lib.inspect_source("ll"))


def test_bf16_rule_claims_only_bf16_on_bf16_cpus(host):
    assert not matmul_bf16.applies(K.matmul(8, 8, 8, "float32"), host)
    generic = tvm_api.Target(
        {"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-unknown-linux-gnu", "num-cores": 1}
    )
    w = K.matmul(20, 20, 20, "bfloat16")
    assert not matmul_bf16.applies(w, generic)
    assert S.find_schedule(w, generic).__name__.endswith("matmul_cpu")
    verify(S.schedule(w, generic), w, host)  # falls back to the generic CPU schedule


def test_bf16_config_errors(bf16_host):
    w = K.matmul(64, 64, 64, "bfloat16")
    with pytest.raises(ValueError, match="at most 15"):
        S.schedule(w, bf16_host, mr=8, nv=2)
    with pytest.raises(ValueError, match="parallel"):
        S.schedule(w, bf16_host, parallel="rows")
    with pytest.raises(ValueError, match="positive int"):
        S.schedule(w, bf16_host, mr=0)


def _user_matmul(M, N, K, a_dtype, b_dtype, acc, transpose_b=False):
    """A matmul as a user writes it in TE: their own names, no suite attribute."""
    X = tvm_api.te.placeholder((M, K), a_dtype, name="x")
    W = tvm_api.te.placeholder((N, K) if transpose_b else (K, N), b_dtype, name="w")
    r = tvm_api.te.reduce_axis((0, K), name="r")

    def w_at(kk, j):
        return W[j, kk] if transpose_b else W[kk, j]

    out = tvm_api.te.compute(
        (M, N),
        lambda i, j: tvm_api.te.sum(X[i, r].astype(acc) * w_at(r, j).astype(acc), axis=r),
        name="y",
    )
    return tvm_api.te.create_prim_func([X, W, out]).with_attr("global_symbol", "main")


@pytest.mark.parametrize(
    "dtypes, target_fixture, instruction, transpose_b",
    [
        (("bfloat16", "bfloat16", "float32"), "bf16_target", "vdpbf16ps", False),
        (("bfloat16", "bfloat16", "float32"), "bf16_target", "vdpbf16ps", True),
        (("uint8", "int8", "int32"), "vnni_target", "vpdpbusd", False),  # VNNI: B as (K, N)
    ],
    ids=["bf16", "bf16-B^T", "u8s8"],
)
def test_a_users_matmul_is_tensorized_where_the_pattern_appears(
    dtypes, target_fixture, instruction, transpose_b, request
):
    target = request.getfixturevalue(target_fixture)
    func = _user_matmul(48, 32, 64, *dtypes, transpose_b=transpose_b)
    sch, rule = S.rules.schedule_func(func, target)
    assert rule == "suite"
    asm = tvm_api.build(sch.mod, target).inspect_source("asm")
    assert instruction in asm


def test_structure_decides_not_names(host):
    """An fp32 matmul, a bf16 one with an epilogue or a different contraction are not the
    suite's dot matmuls: the generic rules take them."""
    from tvm_ext.workloads.kernels import by_structure

    assert by_structure(_user_matmul(16, 16, 16, "bfloat16", "bfloat16", "float32")) is not None
    assert by_structure(_user_matmul(16, 16, 16, "float32", "float32", "float32")) is None
    X = tvm_api.te.placeholder((16, 16), "bfloat16", name="x")
    W = tvm_api.te.placeholder((16, 16), "bfloat16", name="w")
    r = tvm_api.te.reduce_axis((0, 16), name="r")
    # X[i, r] * W[r, i]: W indexed by the row, not the column: no matmul
    y = tvm_api.te.compute(
        (16, 16),
        lambda i, j: tvm_api.te.sum(X[i, r].astype("float32") * W[r, i].astype("float32"), axis=r),
        name="y",
    )
    assert by_structure(tvm_api.te.create_prim_func([X, W, y])) is None
