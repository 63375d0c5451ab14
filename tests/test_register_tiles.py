"""A contraction's register tile past the 1 KiB stack limit, where LLVM keeps it in registers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from tvm import relax, te
from tvm_ext.schedules.common import vector_registers

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import lanes_for
from tvm_ext.workloads.legalized import legalized_func

# 32 vector registers of 16 lanes: an 8 x 48 tile (24 accumulators, 1.5 KiB) fits them.
AVX512 = {"kind": "llvm", "mcpu": "znver4", "num-cores": 2}


def _dense(m, k, n):
    return legalized_func(
        lambda x, w: relax.op.matmul(x, w), [("x", (m, k)), ("w", (k, n))], free=(1,)
    ).with_attr("global_symbol", "main")


def _conv3x3(hw, c):
    return legalized_func(
        lambda x, w: relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="OHWI"),
        [("x", (1, hw, hw, c)), ("w", (c, 3, 3, c))],
        free=(1,),
    ).with_attr("global_symbol", "main")


def _fma_blocks(func, target) -> list[tuple[int, int]]:
    """(accumulators, vector stores) of each basic block of the built function that has an
    FMA: the registers its FMAs accumulate into, the stores it makes (LLVM may unroll the
    reduction loop: the accumulators, not the FMAs, are the tile)."""
    sch, rule = S.rules.schedule_func(func, target)
    assert rule == "contraction"
    lib = tvm_api.build(tvm_api.without_weight_repack(sch.mod), target)
    blocks, accumulators, stores = [], set(), 0
    for line in tvm_api.assembly(lib).splitlines():
        if re.match(r"^(\.?\w+:|\s*# %bb)", line) or re.match(r"\s+j\w+\s", line):
            if accumulators:  # a label or a jump ends a block
                blocks.append((len(accumulators), stores))
            accumulators, stores = set(), 0
        elif "vfmadd" in line:
            accumulators.add(line.split(",")[-1].strip())
        elif re.search(r"vmov\w*\s+%[xyz]mm\d+, .*\(", line):
            stores += 1
    return blocks + ([(len(accumulators), stores)] if accumulators else [])


def _padded_rows_dense(m, padded, k, n):
    """A matmul over rows padded by a stage of its own: its tile reads a per-call copy."""
    x, w = te.placeholder((m, k), name="x"), te.placeholder((k, n), name="w")
    zero = tvm_api.tirx.const(0.0, "float32")
    x_pad = te.compute(
        (padded, k), lambda i, r: tvm_api.tirx.if_then_else(i < m, x[i, r], zero), name="x_pad"
    )
    r = te.reduce_axis((0, k), name="r")
    y = te.compute((padded, n), lambda i, j: te.sum(x_pad[i, r] * w[r, j], axis=r), name="y")
    out = te.compute((m, n), lambda i, j: y[i, j], name="out")
    func = te.create_prim_func([x, w, out]).with_attr("layout_free_buffers", [1])
    return func.with_attr("global_symbol", "main")


@pytest.mark.parametrize("func", [_dense(128, 512, 768), _padded_rows_dense(197, 200, 512, 768)])
def test_a_matmul_with_one_long_reduction_takes_a_tile_past_the_stack(func):
    """The tile is a runtime workspace (8 x 48, 1.5 KiB), and its 24 accumulators stay in
    registers across the reduction (a loop of 24 accumulators and no store), a per-call
    copy read in the loop included (LLVM tells TVM's buffers apart); 12 accumulators (4 x
    48) under the stack limit before."""
    assert max(_fma_blocks(func, tvm_api.Target(AVX512))) == (24, 0)


@pytest.mark.parametrize("func", [_conv3x3(56, 64), _dense(197, 512, 768), _dense(128, 64, 768)])
def test_a_tile_llvm_would_store_stays_within_the_stack(func):
    """A 3x3 convolution (three reduction loops: the workspace tile went to memory at each
    kernel position), rows under a predicate (197), a short reduction (64 steps): tiles of
    under 1 KiB (at most 15 accumulators of 16 lanes), no store in the FMA loop."""
    blocks = _fma_blocks(func, tvm_api.Target(AVX512))
    assert max(accumulators for accumulators, _ in blocks) <= 15
    assert all(stores == 0 for accumulators, stores in blocks if accumulators >= 8)


def test_a_tile_past_the_stack_computes_the_matmul(host):
    """Parity on the host (the weight's repack included, as a compiled model runs it once);
    on a host of 32 vector registers through the 8 x 48 tile."""
    func = _dense(64, 320, 96)
    sch, _ = S.rules.schedule_func(func, host)
    if vector_registers(host) >= 32 and lanes_for(host, 32) == 16:
        assert re.search(r"T\.unroll\(T\.int64\(8\)\)", sch.mod.script())
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype("float32") for s in ((64, 320), (320, 96))]
    dev = tvm_api.cpu()
    out = tvm_api.tensor(np.zeros((64, 96), "float32"), dev)
    lib = tvm_api.build(sch.mod, host)
    with tvm_api.threads(int(host.attrs["num-cores"])):
        lib(*(tvm_api.tensor(a, dev) for a in args), out)
    np.testing.assert_allclose(out.numpy(), args[0] @ args[1], rtol=1e-4, atol=1e-4)


# 16 vector registers of 8 lanes.
AVX2 = {"kind": "llvm", "mcpu": "znver3", "num-cores": 2}


@pytest.mark.parametrize("m, k, n", [(196, 144, 24), (200, 256, 40)])
def test_an_odd_number_of_vectors_shares_each_broadcast_on_avx2(m, k, n):
    """24 or 40 columns (three, five 8-lane vectors) on AVX2: one-vector panels of 8 rows
    broadcast an input value per FMA; panels of three vectors (4 rows) or five (2 rows)
    share each broadcast across the panel (a 200 x 200 x 256 matmul 228 -> 175 us, a 1x1
    convolution 144 -> 24 on 56 x 56 150 -> 116 us; Zen 3)."""
    sch, rule = S.rules.schedule_func(_dense(m, k, n), tvm_api.Target(AVX2))
    assert rule == "contraction"
    text = tvm_api.assembly(tvm_api.build(tvm_api.without_weight_repack(sch.mod), AVX2))
    fmas, broadcasts = text.count("vfmadd"), text.count("vbroadcastss")
    assert fmas and broadcasts <= fmas / 2, (broadcasts, fmas)


def test_a_gemv_panel_of_unequal_statements_runs_them_in_one_pass(host):
    """1025 classes (25 x 41: no whole number of vectors) run in panels of 41 columns. With
    one row there are too few accumulators for a pass per run of equal statements, and the
    panel was one 41-lane statement, which LLVM legalized on AVX2 with 60 lane inserts and 30
    shuffles an iteration (1 x 1280 @ 1280 x 1025: 70-73 us, 1040 classes 37-40 us, Zen 3).
    Now the statements (8 x 5 and a plain lane on AVX2) sit side by side in one pass: whole
    vector FMAs and no lane inserts in the loop."""
    func = legalized_func(
        lambda x, w: relax.op.matmul(x, w), [("x", (1, 256)), ("w", (256, 1025))], free=(1,)
    ).with_attr("global_symbol", "main")
    sch, rule = S.rules.schedule_func(func, host)
    assert rule == "contraction"
    lib = tvm_api.build(tvm_api.without_weight_repack(sch.mod), host)
    fma_blocks = [
        b for b in re.split(r"\n(?=\.LBB|\s*# %bb)", tvm_api.assembly(lib)) if "vfmadd" in b
    ]
    assert fma_blocks
    for block in fma_blocks:
        assert "vinsertps" not in block and "vshufps" not in block, block[:2000]
    width = {8: "%ymm", 16: "%zmm"}[lanes_for(host, 32)]
    assert any(re.search(rf"vfmadd\w+ps\s.*{width}", b) for b in fma_blocks)
    # parity: the scheduled head against the plain build
    x = np.random.default_rng(0).standard_normal((1, 256)).astype("float32")
    w = np.random.default_rng(1).standard_normal((256, 1025)).astype("float32")
    got = tvm_api.tensor(np.zeros((1, 1025), "float32"), tvm_api.cpu(0))
    built = tvm_api.build(sch.mod, host)
    built(tvm_api.tensor(x, tvm_api.cpu(0)), tvm_api.tensor(w, tvm_api.cpu(0)), got)
    np.testing.assert_allclose(got.numpy(), x @ w, rtol=1e-4, atol=1e-4)
