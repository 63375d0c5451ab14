"""Every CPU hand schedule, checked against numpy on regular and awkward shapes."""

import pytest

from tvm_ext import kernels as K
from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.measurement.measure import verify

CASES = [
    K.matmul(128, 128, 128),
    K.matmul(100, 70, 33),
    K.matmul(37, 45, 19, transpose_b=True),
    K.matmul(64, 512, 64),
    K.matmul(1, 1, 1),
    K.matmul(64, 40, 24, "bfloat16"),
    K.matmul(48, 64, 96, "int8"),
    K.matmul(20, 33, 17, "float16", transpose_b=True),
    K.batch_matmul(3, 30, 50, 17),
    K.batch_matmul(2, 64, 64, 64),
    K.conv2d(1, 16, 14, 14, 16, 3, 3, 1, 1),
    K.conv2d(2, 3, 17, 13, 6, 3, 3, 2, 1),
    K.conv2d(1, 8, 7, 9, 4, 1, 1),
    K.conv2d(1, 4, 8, 8, 6, 3, 3, 1, 0, "bfloat16"),
    K.softmax(64, 256),
    K.softmax(37, 1000),
    K.softmax(37, 1000, exp="poly"),
    K.softmax(3, 7, "float16"),
    K.layernorm(16, 512),
    K.layernorm(5, 33),
    K.rmsnorm(16, 384),
    K.rmsnorm(3, 24, "float16"),
    K.axpy(1 << 16),
    K.axpy(1001),
    K.axpy(77, dtype="float16"),
]


@pytest.mark.parametrize("w", CASES, ids=lambda w: w.key)
def test_cpu_schedule_matches_numpy(w, host):
    sch = S.schedule(w, host)
    assert isinstance(sch, tvm_api.Schedule)
    verify(sch, w, host)


@pytest.mark.parametrize(
    "config",
    [
        dict(mr=4, nr=64),
        dict(mr=6, nr=16, pack="full", parallel="tiles"),
        dict(mr=8, nr=32, pack="none", parallel="tiles"),
        dict(lanes=8, nr=24, mr=3),
    ],
)
def test_matmul_configs_on_an_awkward_shape(config, host):
    w = K.matmul(50, 90, 21)
    verify(S.schedule(w, host, **config), w, host)


@pytest.mark.parametrize(
    "w, config",
    [
        (K.conv2d(2, 5, 11, 12, 32, 3, 3, 1, 1), dict(axis="f", fb=16, xt=4, lanes=8)),
        (K.conv2d(1, 3, 9, 9, 8, 3, 2, 2, 1), dict(axis="f", fb=8, xt=5, lanes=4)),
        (K.conv2d(1, 6, 10, 10, 12, 3, 3, 1, 0), dict(axis="x", fb=3, xt=8, lanes=8)),
    ],
    ids=["channels-2vec", "channels-stride2-odd-width", "columns"],
)
def test_conv2d_both_vector_axes_on_awkward_shapes(w, config, host):
    verify(S.schedule(w, host, **config), w, host)


def test_conv2d_defaults_vectorize_channels_when_vectors_divide_f(host):
    from tvm_ext.schedules.common import lanes_for

    lanes = lanes_for(host)
    wide = S.default_config(K.conv2d(1, 64, 56, 56, 64, 3, 3, 1, 1), host)
    assert wide.axis == "f" and wide.fb % lanes == 0 and 56 % wide.xt == 0
    assert S.default_config(K.conv2d(1, 4, 8, 8, 6), host).axis == "x"


def test_matmul_defaults_pack_large_b_and_use_the_vector_width(host):
    from tvm_ext.schedules.common import lanes_for

    big = S.default_config(K.matmul(1024, 1024, 1024), host)
    assert big.pack == "panel" and big.lanes == lanes_for(host) and big.nr % big.lanes == 0
    # A narrow B is used in place; the split follows the target's cores and vector width:
    # 64 columns are one AVX-512 panel (too few for 2 cores: tiles) but four 16-wide AVX2 ones.
    for mcpu, cores, parallel in (("skylake-avx512", 2, "tiles"), ("haswell", 2, "panels"),
                                  ("haswell", 4, "tiles")):  # fmt: skip
        target = tvm_api.Target(
            {
                "kind": "llvm",
                "mcpu": mcpu,
                "mtriple": "x86_64-unknown-linux-gnu",
                "num-cores": cores,
            }
        )
        small = S.default_config(K.matmul(2048, 64, 64), target)
        assert (small.pack, small.parallel) == ("none", parallel), (mcpu, cores)


@pytest.mark.parametrize("mcpu", ["znver3", "znver4"])
def test_matmul_rows_take_a_tile_that_divides_them(mcpu):
    """256 rows took tiles of as many rows as fit (6 on AVX2, 7 on AVX-512), padded to 258 /
    259 with every A read guarded in the micro-kernel: 74 GFLOP/s against 132 in tiles of 4
    (256^3, Zen 3). A tile of fit/2..fit rows that divides M, no guard in the update."""
    target = tvm_api.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    w = K.matmul(256, 256, 256)
    config = S.default_config(w, target)
    assert 256 % config.mr == 0 and config.mr >= 3, config
    update = S.schedule(w, target).mod.script().split('sblock("C_update")')[1].split("sblock(")[0]
    assert "if_then_else" not in update and "T.where" not in update


@pytest.mark.parametrize(
    "w,config,match",
    [
        (K.matmul(8, 8, 8), dict(nr=20), "nr=20 must be a multiple of lanes"),
        (K.matmul(8, 8, 8), dict(lanes=64, nr=64), "wider than the target"),
        (K.matmul(8, 8, 8), dict(mr=0), "mr=0 must be a positive int"),
        (
            K.matmul(8, 8, 8),
            dict(pack="panel", parallel="tiles"),
            "pack='panel' packs once per panel",
        ),
        (K.matmul(8, 8, 8), dict(bogus=1), r"has no field \['bogus'\]"),
        (K.conv2d(1, 4, 8, 8, 6), dict(fb=4), "fb=4 must divide F=6"),
        (K.conv2d(1, 4, 8, 8, 6), dict(xt=4, lanes=4), "xt=4 must divide the output width 6"),
        (K.conv2d(1, 4, 8, 8, 16), dict(axis="c"), "axis='c': choose"),
        (K.conv2d(1, 4, 8, 8, 16), dict(axis="f", fb=4, lanes=8), "fb=4 must be a multiple"),
        (K.softmax(4, 8), dict(lanes=12), "lanes=12 must be a power of two"),
    ],
)
def test_invalid_configs_fail_before_codegen(w, config, match, host):
    with pytest.raises(ValueError, match=match):
        S.schedule(w, host, **config)


def test_registry_lists_and_refuses(host):
    assert set(S.available(host)) == set(S.KERNELS)
    assert set(S.available({"kind": "cuda", "arch": "sm_90"})) == set(S.KERNELS)
    with pytest.raises(TypeError, match="expected a tvm_ext.kernels Workload"):
        S.schedule("matmul", host)
    from tvm_ext.schedules.hand import matmul_cpu

    with pytest.raises(ScheduleNotApplicable, match="is not a matmul"):
        matmul_cpu.schedule(K.softmax(4, 4), host, matmul_cpu.MatmulCPUConfig())
    with pytest.raises(ScheduleNotApplicable, match="is not a CPU"):
        matmul_cpu.schedule(
            K.matmul(4, 4, 4), tvm_api.Target({"kind": "cuda"}), matmul_cpu.MatmulCPUConfig()
        )
