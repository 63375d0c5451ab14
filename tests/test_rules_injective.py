"""The injective rule (copies, transposes, concatenations, splits, gathers): its loop nests,
each case checked against the unscheduled build of the same function on random inputs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from rule_checks import check_rule, run_built, script
from tvm import relax, te

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.hardware import fork_join
from tvm_ext.hardware.target import lanes_for


@pytest.mark.parametrize("widths, lanes_used", [((64, 32, 48), None), ((24, 40), 8)])
def test_a_concatenation_is_cut_at_its_inputs(host, widths, lanes_used):
    """A channel concatenation with the batch norm and ReLU after it (DenseNet's, as FuseOps
    leaves it) selects its input per channel by a chain of ``if_then_else(96 <= c, ...)``:
    vectorized as one loop, LLVM scalarized every lane's chain (slower than unscheduled).
    The channel loop is cut at the inputs' edges, every piece whole vectors of one input:
    only full-width vector maxima in the built code (8 lanes where an edge is no whole
    16-lane vector), no scalar one."""
    from tvm_ext.workloads.legalized import legalized_func

    def build(*args):
        xs, (mean, scale) = args[:-2], args[-2:]
        op = relax.op
        return op.nn.relu(op.multiply(op.subtract(op.concat(list(xs), axis=3), mean), scale))

    params = [(f"x{i}", (1, 5, 5, w)) for i, w in enumerate(widths)]
    params += [("mean", (1, 1, 1, sum(widths))), ("scale", (1, 1, 1, sum(widths)))]
    sch = check_rule(legalized_func(build, params), host, "injective")
    lanes = lanes_used or lanes_for(host, 32)
    register = {16: "zmm", 8: "ymm", 4: "xmm"}[lanes]
    asm = tvm_api.build(sch.mod, host).inspect_source("asm")
    maxima = re.findall(r"\bvmax\w+\s+[^\n]*", asm)
    assert maxima and all(m.startswith("vmaxps") and f"%{register}" in m for m in maxima), maxima


@pytest.mark.parametrize("batched", [False, True])
def test_a_transposing_chain_computes_a_tile_in_its_reads_order(host, batched):
    """Llama's rotary embedding of the keys, written transposed for ``Q K^T``, read four
    operands strided along the output's last axis: each output vector assembled lane by
    lane from four (69.5 us a call, 142x its floor; Zen 5). A tile of output columns is now
    computed in vectors along the axis the reads are contiguous in (the rotation's halves
    cut apart), then transposed by one copy: 10.7 us. This smaller one: 4.3 -> 1.4 us, its
    built code 75 -> 15 lane inserts. ``batched``: the keys as the suite's Llama leaves them,
    ``1 x heads x 64 x tokens`` with each key head shared by two query heads (grouped-query
    attention), which the rule missed for its unit batch dimension: 294 us a call, 141x its
    floor (Zen 3)."""
    x = te.placeholder((64, 128), name="x")  # tokens x (2 heads x 64)
    cos, sin = te.placeholder((64, 64), name="cos"), te.placeholder((64, 64), name="sin")

    def rotated(h, d, s):
        half = te.if_then_else(d < 32, -x[s, h * 64 + d + 32], x[s, h * 64 + d - 32])
        return x[s, h * 64 + d] * cos[s, d] + half * sin[s, d]

    if batched:  # 4 query heads on the 2 key heads
        out = te.compute((1, 4, 64, 64), lambda b, h, d, s: rotated(h // 2, d, s), name="out")
    else:
        out = te.compute((2, 64, 64), rotated, name="out")  # heads x dims x tokens
    text = script(check_rule(te.create_prim_func([x, cos, sin, out]), host, "injective"))
    tile = r"out_global\[0, v0, v2, v1\] =" if batched else r"out_global\[v0, v2, v1\] ="
    assert re.search(tile, text)  # the tile, in the reads' order
    compute = re.search(
        r'for (\w+) in T\.vectorized\(\d+\):\s*with T\.sblock\("out(_ax\w+)?"\)', text
    )
    assert compute, "the tile is computed in vectors"
    binding = re.search(r"v1 = T\.axis\.spatial\([^\n]*", text[compute.end() :]).group(0)
    assert compute.group(1) in binding  # ... along d, where x, cos and sin are contiguous


def test_a_one_read_transpose_computes_a_tile_in_its_read_s_order(host):
    """GPT-2's keys written transposed for ``Q K^T`` read one operand, strided along the
    output's last axis: each output vector a gather of 8 (12 x 64 x 128: 64 us, slower than
    the 55 us unscheduled; Zen 3). As the rotary keys above, a tile in the read's order, then
    one transposing copy: 21 us."""
    k = te.placeholder((1, 64, 128), name="k")  # tokens x (2 heads x 64)
    kt = te.compute((1, 2, 64, 64), lambda n, h, d, s: k[n, s, h * 64 + d], name="kt")
    text = script(check_rule(te.create_prim_func([k, kt]), host, "injective"))
    assert "kt_global" in text and re.search(r"kt_global\[0, v0, v2, v1\] =", text)


def test_a_split_runs_its_pieces_under_one_parallel_loop(host):
    """GPT-2 splits its query-key-value product into three: three outputs over one space,
    each read from its own columns. Weighed one by one, no piece paid for the thread pool
    (98304 iterations each under the host's 131072), and the three serial loops took 47 us
    against 36 us unscheduled (128 x 3 x 768, Zen 3); under one loop, their work together
    pays: 18 us. Here each piece (32768) is under the tests' pinned threshold (65536), the
    three over it."""
    x = te.placeholder((64, 3 * 512), name="x")

    def piece(k):
        return te.compute((1, 64, 512), lambda b, i, j: x[i, j + k * 512], name=f"piece{k}")

    pieces = [piece(k) for k in range(3)]
    assert 64 * 512 < fork_join.parallel_min_work(host) <= 3 * 64 * 512
    text = script(check_rule(te.create_prim_func([x, *pieces]), host, "injective"))
    assert text.count("T.parallel(") == 1
    after = text[text.index("T.parallel(") :]
    assert all(f'T.sblock("piece{k}")' in after for k in range(3))
    assert text.count("T.vectorized(") == 3


def test_a_gather_runs_its_rows_in_parallel_and_each_row_s_vectors_in_a_loop(host):
    """An embedding lookup: its rows (the parallel loop) are enough for the cores, so each
    row's vectors run in a loop of their own; fused into the parallel loop, every vector
    recovered its row by a division and reloaded the token's index: GPT-2's 128 x 768 lookup
    12.8 us, over the rows 4.0 us (Zen 3)."""
    table = te.placeholder((1000, 256), name="table")
    ids = te.placeholder((256,), "int32", name="ids")
    out = te.compute((256, 256), lambda i, j: table[te.max(te.min(ids[i], 999), 0), j], name="out")
    assert fork_join.parallel_min_work(host) <= 256 * 256 * 1.5
    func = te.create_prim_func([table, ids, out])
    sch, took = S.rules.schedule_func(func.with_attr("global_symbol", "main"), host)
    assert took == "injective"
    text = script(sch)
    assert "T.parallel(256)" in text and re.search(r"T\.vectorized\(8|16\)", text)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 1000, 256).astype("int32")
    args = [rng.standard_normal((1000, 256)).astype("float32"), ids, np.zeros((256, 256), "f")]
    got = run_built(sch.mod, [a.copy() for a in args], host)
    np.testing.assert_array_equal(got, args[0][args[1]])


def test_an_image_to_channels_last_keeps_its_channel_loop(host):
    """A CNN's first kernel, its 3-channel image to channels-last: the channel axis is shorter
    than a vector, and all three loops fused into one parallel loop of 150528 scalar
    iterations, each dividing for its indices: 151 us against 20 us unscheduled (1 x 3 x 224
    x 224, Zen 3). The rows now run in parallel and the channels in a loop of their own."""
    x = te.placeholder((1, 3, 224, 224), name="x")
    y = te.compute((1, 224, 224, 3), lambda n, h, w, c: x[n, c, h, w], name="y")
    text = script(check_rule(te.create_prim_func([x, y]), host, "injective"))
    assert "T.parallel(50176)" in text and "T.parallel(150528)" not in text
