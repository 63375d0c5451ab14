"""The IR rules: which rule takes a function, from its IR alone, and the schedule is correct.

Every case is checked against the unscheduled build of the same function on random inputs.
"""

from __future__ import annotations

import re
import types

import numpy as np
import pytest
import tvm
from rule_checks import check_rule, run_built, script, user_matmul_bias_relu
from tvm import relax, te, topi
from tvm.relax.frontend import nn

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.hardware import fork_join
from tvm_ext.hardware.target import lanes_for


def test_user_te_matmul_with_epilogue_is_a_contraction(host):
    sch = check_rule(user_matmul_bias_relu(48, 40, 24), host, "contraction")
    text = script(sch)
    # The epilogue is applied as the accumulator tile is written back: no separate D loop
    # (N = 40 on 16 lanes is one panel of 16 + 16 + 8 lanes, each run its own init; on 8
    # lanes, five whole vectors).
    assert re.search(r"T\.max\(C(_pad)?_global", text) and "T.vectorized" in text
    assert re.search(r'"C\w*_init"', text)


def test_transposed_b_batched_matmul_packs_b(host):
    A = te.placeholder((3, 20, 16), name="A")
    B = te.placeholder((3, 24, 16), name="B")  # B transposed: the vector axis j is not last
    k = te.reduce_axis((0, 16), name="k")
    C = te.compute((3, 20, 24), lambda b, i, j: te.sum(A[b, i, k] * B[b, j, k], axis=k), name="C")
    sch = check_rule(te.create_prim_func([A, B, C]), host, "contraction")
    # copied once into a layout with j last (N = 24 padded to whole vectors first)
    assert re.search(r"B(_pad)?_global", script(sch))


@pytest.mark.parametrize("mcpu, tile", [("znver5", (4, 48)), ("haswell", (4, 16))])
def test_a_three_vector_panel_where_two_leave_few_accumulators(mcpu, tile):
    """BERT's matmuls have M = 128 rows: a two-vector panel gets 4 rows (the 7 that fit the
    stack tile do not divide 128), 8 accumulators; with 32 vector registers three vectors
    (48 lanes, dividing N = 768) give 4 x 48, 12 accumulators. AVX2's 16 registers keep two."""
    from tvm_ext.schedules.rules.axes import find_axes
    from tvm_ext.schedules.rules.tile_shape import tile_sizes

    X = te.placeholder((128, 64), name="X")
    W = te.placeholder((768, 64), name="W")
    func = te.create_prim_func([X, W, topi.nn.dense(X, W)]).with_attr("layout_free_buffers", [1])
    target = tvm_api.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    sch = tvm_api.Schedule(func)
    block = tvm_api.dlight.analysis.normalize_prim_func(sch)
    (reduction,) = [b for b in block if b.is_reduction()]
    axes = find_axes(sch, reduction, weights={"W"}, lanes=lanes_for(target, 32))
    assert tile_sizes(reduction, axes, target) == tile


def test_nhwc_conv_inlines_its_padding_as_one_scalar_condition(host):
    """An NHWC convolution's input is broadcast to the output channels' vector, so its
    padding's condition is one scalar per broadcast: the padding is inlined (no per-call
    padded copy of the input) and the tile's FMAs stay full width. An NCHW one keeps its
    padding a stage (read along the vector axis, the condition would be per lane)."""

    X = te.placeholder((1, 9, 9, 3), name="X")
    W = te.placeholder((3, 3, 3, 16 * 3), name="W")
    out = topi.nn.conv2d_nhwc(X, W, 2, 1, 1)
    sch = check_rule(te.create_prim_func([X, W, out]), host, "contraction", rtol=1e-4)
    text = script(sch)
    assert 'T.sblock("pad_temp' not in text
    assert "if_then_else" in text.split('T.sblock("conv2d_nhwc_update")')[1].split("T.sblock")[0]
    width = {16: "zmm", 8: "ymm"}[lanes_for(host, 32)]
    asm = tvm_api.build(sch.mod, host).inspect_source("asm")
    assert re.search(rf"vfmadd\w+\s+[^\n]*%{width}", asm)
    Xc = te.placeholder((1, 3, 9, 40), name="X")
    Wc = te.placeholder((16, 3, 3, 3), name="W")
    nchw = te.create_prim_func([Xc, Wc, topi.nn.conv2d_nchw(Xc, Wc, 1, 1, 1)])
    assert 'T.sblock("pad_temp' in script(check_rule(nchw, host, "contraction", rtol=1e-4))


def test_a_square_nhwc_conv_tiles_rows_along_its_width(host):
    """Of two equally long row axes (a square map's height and width), the output's later
    dimension: a row tile of adjacent pixels (their input channels one contiguous stream,
    output rows written one after the other), not of image rows a whole row apart."""
    X = te.placeholder((1, 12, 12, 16), name="X")
    W = te.placeholder((1, 1, 16, 32), name="W")
    out = topi.nn.conv2d_nhwc(X, W, 1, 0, 1)
    func = te.create_prim_func([X, W, out])
    sch = tvm_api.Schedule(func)
    (main,) = [b for b in tvm_api.dlight.analysis.normalize_prim_func(sch) if b.is_reduction()]
    axes = S.rules.axes.find_axes(sch, main)
    names = [it.var.name for it in main.iters]
    write = sch.get(main.block_rv).writes[0].region
    assert names[axes.row] == write[2].min.name  # NHWC: the width
    check_rule(func, host, "contraction", rtol=1e-4)


@pytest.mark.parametrize("size, channels, panels_outermost", [(4, 128, True), (28, 64, False)])
def test_a_conv_whose_weights_outweigh_its_map_reads_each_panel_once(
    host, size, channels, panels_outermost
):
    """A late-stage convolution (small map, many channels: ResNet's 7x7 x 512, 9.4 MB of
    weights for a 0.1 MB input) runs its weight panels outermost, the output rows inside, so
    each panel is read from memory once; an early one (large map, few channels) keeps the
    rows outside the panels, reading the larger input once."""
    X = te.placeholder((1, size, size, channels), name="X")
    W = te.placeholder((3, 3, channels, channels), name="W")
    out = topi.nn.conv2d_nhwc(X, W, 1, 1, 1)
    func = te.create_prim_func([X, W, out]).with_attr("layout_free_buffers", [1])
    sch = check_rule(func, host, "contraction", rtol=1e-4)
    block = script(sch).split('T.sblock("conv2d_nhwc_update")')[1].split("T.reads")[0]
    # The output channel's binding: the panel index is the fused tile loop divided (its
    # outermost part) or divided after a modulo (an inner part).
    channel = re.search(rf"T\.axis\.spatial\({channels}, (\w+_fused)( % \d+)? // ", block)
    assert channel, block
    assert (channel[2] is None) == panels_outermost, block


def test_nchw_conv_with_weights_vectorizes_output_channels(host):
    """An NCHW conv's output rows are its width (here 10: no whole vectors); with the weight
    marked layout-free (as Relax marks model weights), the vectors run along the output
    channels of a packed weight panel and the accumulator tile keeps channels innermost."""
    X = te.placeholder((1, 8, 10, 10), name="X")
    W = te.placeholder((32, 8, 3, 3), name="W")
    bias = te.placeholder((1, 32, 1, 1), name="bias")
    conv = topi.nn.conv2d_nchw(X, W, 1, 1, 1)
    out = te.compute(
        conv.shape, lambda n, f, y, x: te.max(conv[n, f, y, x] + bias[0, f, 0, 0], 0.0)
    )
    func = te.create_prim_func([X, W, bias, out]).with_attr("layout_free_buffers", [1, 2])
    sch = check_rule(func, host, "contraction", rtol=1e-4)
    text = script(sch)
    # W repacked into panels of whole channel vectors (a layout-rewrite pre-process, folded at
    # compile time), the accumulator tile (n, y, x, f): channels innermost.
    panel = re.search(r"W_global = T.sblock_alloc_buffer\(\((\d+), 8, 3, 3, (\d+)\)\)", text)
    assert panel and int(panel[1]) * int(panel[2]) == 32 and int(panel[2]) % 8 == 0, text[:1500]
    assert "meta_schedule.layout_rewrite_preproc" in text
    assert "conv2d_nchw_global = T.sblock_alloc_buffer((1, 10, 10, 32))" in text
    update = text.split('T.sblock("conv2d_nchw_update")')[0].rsplit("for ", 1)[1]
    assert "T.vectorized" in update  # the channel vector is the update's innermost loop


def _fused_primfuncs(module: nn.Module, shape):
    mod, _ = module.export_tvm({"forward": {"x": nn.spec.Tensor(shape, "float32")}})
    mod = relax.get_pipeline("zero")(mod)
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm_api.PrimFunc)}


class _Rows(nn.Module):
    def __init__(self):
        self.norm = nn.LayerNorm(64)

    def forward(self, x):
        return nn.softmax(self.norm(x), axis=-1)


def test_softmax_and_layernorm_as_fuseops_gives_them_are_rows(host):
    funcs = _fused_primfuncs(_Rows(), (4, 16, 64))
    for name in ("layer_norm", "softmax"):
        sch = check_rule(funcs[name], host, "rows")
        text = script(sch)
        assert "_rf" in text and "T.vectorized" in text  # vector partial sums, folded


def test_injective_functions_and_rule_order(host):
    """Where two rules could take a function, the earlier one in ``CPU_RULES`` does: the
    fallback takes a transpose too and the contraction rule a depthwise convolution too, but
    ``injective`` and ``window`` come first."""
    from tvm_ext.schedules.rules import contraction, fallback

    from tvm_ext.workloads.legalized import legalized_func

    X = te.placeholder((32, 48), name="X")
    Y = te.compute((48, 32), lambda i, j: X[j, i] * 2.0, name="Y")
    transpose = te.create_prim_func([X, Y]).with_attr("global_symbol", "main")
    assert fallback.schedule_func(transpose, host) is not None
    check_rule(transpose, host, "injective")

    def depthwise(x, w):
        return relax.op.nn.conv2d(x, w, padding=1, groups=32, data_layout="NHWC",
                                  kernel_layout="OHWI")  # fmt: skip

    conv = legalized_func(depthwise, [("x", (1, 9, 9, 32)), ("w", (32, 3, 3, 1))], free=(1,))
    assert contraction.schedule_func(conv.with_attr("global_symbol", "main"), host) is not None
    check_rule(conv, host, "window", rtol=1e-4)
    names = [rule.NAME for rule in S.rules.CPU_RULES]
    assert names.index("injective") < names.index("fallback")
    assert names.index("window") < names.index("contraction")


def test_apply_covers_every_function_of_a_model(host):
    class Block(nn.Module):
        def __init__(self):
            self.fc1, self.fc2, self.norm = nn.Linear(64, 128), nn.Linear(128, 64), nn.LayerNorm(64)

        def forward(self, x):
            return self.norm(x + self.fc2(nn.gelu(self.fc1(x))))

    mod, _ = Block().export_tvm({"forward": {"x": nn.spec.Tensor((8, 64), "float32")}})
    applied = S.apply(relax.get_pipeline("zero")(mod), host)
    table = applied.table()
    assert set(table["rule"]) <= {"contraction", "rows", "injective"}
    assert table["share"].sum() == pytest.approx(1.0)
    assert applied.share_by_rule()["contraction"] > 0.9
    for gv, func in applied.mod.functions.items():  # every PrimFunc was replaced by a schedule
        if isinstance(func, tvm_api.PrimFunc):
            assert "T.parallel" in func.script() or "T.vectorized" in func.script(), gv


def test_schedule_takes_a_primfunc_module_or_schedule(host):
    func = user_matmul_bias_relu(16, 16, 16)
    for obj in (func, tvm_api.IRModule({"main": func}), tvm_api.Schedule(func)):
        assert isinstance(S.schedule(obj, host), tvm_api.Schedule)
    with pytest.raises(ValueError, match="suite workloads only"):
        S.schedule(func, host, mr=4)
    with pytest.raises(TypeError, match="PrimFunc"):
        S.schedule("matmul", host)
    # A GPU target gets the GPU rules (TVM's dlight behind the same interface).
    _, rule = S.rules.schedule_func(func, tvm_api.Target({"kind": "cuda", "arch": "sm_90"}))
    assert rule.startswith("dlight.")
    with pytest.raises(ScheduleNotApplicable, match="no IR rules for c targets"):
        S.schedule(func, tvm_api.Target({"kind": "c"}))


def test_weights_are_packed_once_at_compile_time(host):
    class Linear(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(24, 32)

        def forward(self, x):
            return nn.relu(self.fc(x))

    mod, spec = Linear().export_tvm({"forward": {"x": nn.spec.Tensor((40, 24), "float32")}})
    rng = np.random.default_rng(1)
    params = {n: rng.standard_normal([int(d) for d in p.shape]).astype("float32") for n, p in spec}
    bound = {k: tvm.runtime.tensor(v) for k, v in params.items()}
    mod = relax.get_pipeline("zero")(relax.transform.BindParams("forward", bound)(mod))
    mod = S.apply(relax.transform.AttachAttrLayoutFreeBuffers()(mod), host).mod
    packed = [f.script() for f in mod.functions.values() if isinstance(f, tvm_api.PrimFunc)]
    assert any("meta_schedule.layout_rewrite_preproc" in text for text in packed)
    mod = relax.transform.FoldConstant()(relax.transform.SplitLayoutRewritePreproc()(mod))
    called = tvm_api.called_prim_funcs(mod["forward"])
    assert called and not any(name.endswith("_weight_prepack") for name in called)  # folded
    vm = relax.VirtualMachine(tvm.compile(mod, target=host), tvm.cpu())
    x = rng.standard_normal((40, 24)).astype("float32")
    want = np.maximum(x @ params["fc.weight"].T + params["fc.bias"], 0)
    with tvm_api.threads(int(host.attrs["num-cores"])):
        got = vm["forward"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_attention_as_one_function_is_staged(host):
    from tvm_ext import models
    from tvm_ext.model_pipeline.compile import lower

    model = models.build("decoder", "small", batch=1)
    weights = list(model.mod["forward"].params)[len(model.inputs) :]
    bound = relax.transform.BindParams(
        "forward", {v: tvm.runtime.tensor(np.asarray(w)) for v, w in zip(weights, model.params)}
    )(model.mod)
    lowered = lower(bound, host, "forward")
    (name,) = [gv.name_hint for gv in lowered.functions if "attention" in gv.name_hint]
    sch = check_rule(lowered[name], host, "staged", rtol=1e-4)
    # Q K^T and P V are register-tiled stages, not recomputed inside a row loop.
    assert script(sch).count("_global") >= 2 and "T_batch_matmul_NT_update" in script(sch)


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


def test_a_row_off_the_vector_width_vectorizes_its_element_wise_stages(host):
    """A 50-column softmax ran its exp and division in 2-lane vectors (the widest power of two
    dividing 50); they now run in whole vectors of the target's lanes and a remainder."""
    from tvm_ext.workloads.legalized import legalized_func

    lanes = lanes_for(host, 32)
    softmax = legalized_func(lambda x: relax.op.nn.softmax(x, axis=-1), [("x", (3, 50, 50))])
    text = script(check_rule(softmax, host, "rows"))
    # (its exp is a libm call: a plain loop, see the test below)
    pattern = rf'T\.vectorized\(T\.int64\({lanes}\)\):\s*with T\.sblock\("T_softmax_norm_ax20"\)'
    assert re.search(pattern, text)


def _vectorized(sch, name: str) -> bool:
    loops = sch.get_loops(sch.get_sblock(name))
    return any(sch.get(loop).kind == tvm.tirx.ForKind.VECTORIZED for loop in loops)


@pytest.mark.parametrize("cols", [50, 64, 197])
def test_a_stage_calling_libm_runs_as_a_plain_loop(host, cols):
    """LLVM has no vector exp: vectorized, each lane became a call with the vector spilled
    around it (a user's TE sigmoid over 64 x 1000 ran 195 us vectorized, 121 us as plain
    calls as unscheduled; a 12 x 197 x 197 softmax 854 -> 636 us; Xeon, 2 threads). Stages
    without such a call keep their vectors."""
    from tvm_ext.workloads.legalized import legalized_func

    x = te.placeholder((16, cols), name="x")
    z = te.compute(x.shape, lambda i, j: x[i, j] / (1.0 + te.exp(-x[i, j])), name="z")
    assert not _vectorized(check_rule(te.create_prim_func([x, z]), host, "injective"), "z")
    softmax = legalized_func(lambda x: relax.op.nn.softmax(x, axis=-1), [("x", (3, cols, cols))])
    sch = check_rule(softmax, host, "rows")
    text = script(sch)
    exps = {n for n in re.findall(r'sblock\("(T_softmax_exp[^"]*)"\)', text) if "sum" not in n}
    assert exps and not any(_vectorized(sch, name) for name in exps)
    assert _vectorized(sch, "T_softmax_expsum_rf") or cols % 2  # the sum keeps its lanes


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


@pytest.mark.parametrize("combine", ["max", "sum"])
def test_an_odd_reduction_runs_as_independent_lanes(host, combine):
    """A row reduction over 197 columns (no vector divides it) ran as one chain of 197
    dependent scalar steps: a 12 x 197 x 197 softmax at 1.35x the time of 208 columns. It
    is split by the lanes under a tail predicate and ``rfactor``-ed into as many independent
    partials (1.05x, Zen 5). Its stages share one row loop by ``merge``: ``compute_at``
    dropped the partial's tail predicate (TVM 0.27), reading past the row. A centring by
    the row's max (not shift-invariant as a softmax is) and a normalization by its sum
    check that the tail is neither read past nor lost."""
    x = te.placeholder((6, 197), name="x")
    k = te.reduce_axis((0, 197), name="k")
    if combine == "max":
        r = te.compute((6,), lambda i: te.max(x[i, k], axis=k), name="r")
        out = te.compute((6, 197), lambda i, j: x[i, j] - r[i], name="out")
    else:
        r = te.compute((6,), lambda i: te.sum(x[i, k], axis=k), name="r")
        out = te.compute((6, 197), lambda i, j: x[i, j] / r[i], name="out")
    text = script(check_rule(te.create_prim_func([x, out]), host, "rows", rtol=1e-4))
    assert '"r_rf"' in text and text.count("T.where") == 1  # the partial's tail alone


def test_a_rule_failing_inside_tvm_hands_the_function_to_the_next(host, caplog):
    """A rule whose primitive trips one of TVM's internal checks (an InternalError, not a
    ScheduleError: it happened inlining a broadcasting epilogue) gives the function up with
    a warning naming it; the next rule takes it, instead of the whole compile failing."""

    def crash(func, target):
        raise tvm_api.InternalError("Check failed: (node.defined()) is false")

    broken = types.SimpleNamespace(NAME="broken", schedule_func=crash)
    func = user_matmul_bias_relu(16, 16, 16).with_attr("global_symbol", "main")
    with caplog.at_level("WARNING"):
        _, took = S.rules.schedule_func(func, host, rules=(broken, S.rules.contraction))
    assert took == "contraction"
    assert "rule broken gave up on main" in caplog.text


def test_a_few_row_matmul_streams_its_weight_in_one_vector_panels(host):
    """A GEMV (a decode step's projection: one row, every weight element used once) or a
    matmul of a few rows (a short prefill: 16 tokens) packs its weight in panels of one
    vector, so a tile of several vectors streams several panels at once (Llama's decode step
    11.7 -> 8.9 ms, BERT at 16 tokens 25.4 -> 19.5 ms); a matmul of many rows keeps panels as
    wide as its tile."""
    lanes = S.common.lanes_for(host, 32)
    widths = {}
    for rows in (1, 16, 64):
        X = te.placeholder((rows, 256), name="X")
        W = te.placeholder((256, 6 * lanes), name="W")
        r = te.reduce_axis((0, 256), "r")
        Y = te.compute((rows, 6 * lanes), lambda i, j: te.sum(X[i, r] * W[r, j], axis=r), name="Y")
        func = te.create_prim_func([X, W, Y]).with_attr("layout_free_buffers", [1])
        sch = check_rule(func, host, "contraction", rtol=1e-4)
        packed = re.search(r"W_global = T\.sblock_alloc_buffer\(\((.*?)\)\)", script(sch))
        widths[rows] = int(packed[1].split(",")[-1].strip())
    assert widths[1] == widths[16] == lanes and widths[64] > lanes, widths


def test_a_row_of_one_vector_folds_no_partials(host):
    """A 16-column row split into 16 lane partials folded nothing: its 16 partials were
    reduced one by one after a store and a load (a 64 x 16 layer norm 0.95 -> 0.77 us, a
    12 x 16 x 16 softmax 13.9 -> 12.7 us; Xeon). Two vectors or more keep their partials."""
    from tvm_ext.workloads.legalized import legalized_func

    lanes = lanes_for(host, 32)
    for cols, partials in ((lanes, False), (2 * lanes, True)):
        norm = legalized_func(
            lambda x, g, b: relax.op.nn.layer_norm(x, g, b, axes=[-1]),
            [("x", (64, cols)), ("g", (cols,)), ("b", (cols,))],
        )
        assert ("_rf" in script(check_rule(norm, host, "rows"))) == partials, cols
