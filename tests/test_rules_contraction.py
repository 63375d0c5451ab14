"""The contraction rule (matmuls, convolutions): its tiles, panels, packed weights and
epilogues, each case checked against the unscheduled build of the same function on random
inputs.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from rule_checks import check_rule, script, se_gate, user_matmul_bias_relu
from tvm import relax, te, topi
from tvm.relax.frontend import nn

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
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


def test_a_gate_broadcast_over_a_map_computes_its_activation_once_a_channel(host):
    """A squeeze-excitation gate (a GEMV: a 1x1 convolution on a 1 x 1 map; its bias and
    sigmoid; the product with a 7 x 7 map): the sigmoid runs at the GEMV's write-back, once
    a channel, and the broadcast product is a loop nest of its own with no ``exp`` in it
    (inlined into the product, efficientnet's gates of 1152 channels computed each sigmoid
    49 times: 60 -> 29 us)."""
    func = se_gate(64, 48, 7)
    text = script(check_rule(func, host, "contraction", rtol=1e-4))
    product = text[text.index('T.sblock("out")') :]
    assert "T.reinterpret" not in product and "T.reinterpret" in text  # fast_exp's 2^n
    assert text.count("T.reinterpret") == 1


@pytest.mark.parametrize("groups, channels_in, channels_out", [(4, 384, 384), (4, 384, 1536)])
def test_a_grouped_channels_first_convolution_vectorizes_its_output_channels(
    host, groups, channels_in, channels_out
):
    """SqueezeBERT's grouped 1x1 conv1d in NCW (4 groups, 96 or 384 output channels each):
    its input reads the output channel only as ``f // group``, one value for a panel of a
    group's lanes, so the vectors run along the output channels (the weight packed into
    panels once, marked a layout-rewrite pre-process), not along the 50 positions (a tail
    on each row, the weight broadcast: 351 us a call in the model against 125 packed)."""
    x = te.placeholder((1, channels_in, 50), name="x")
    w = te.placeholder((channels_out, channels_in // groups, 1), name="w")
    y = topi.nn.group_conv1d_ncw(x, w, 1, 0, 1, groups)
    func = te.create_prim_func([x, w, y]).with_attr("layout_free_buffers", [1])
    sch = check_rule(func, host, "contraction", rtol=1e-4)
    text = script(sch)
    assert "layout_rewrite_preproc" in text
    update = text.split('_update"):')[0].rsplit("for ", 3)[1:]  # rows, lane panels, lanes
    lanes = lanes_for(host, 32)
    assert re.search(rf"T\.vectorized\((T\.int64\()?{lanes}\b", update[-1]), update


def test_a_convolution_of_one_input_channel_is_a_contraction_not_a_window(host):
    """wav2vec2's first layer (1 -> 512 channels, kernel 10, stride 5, NCW) sums a window of
    its one input channel per output channel: the output channel indexes only the weight, so
    each input value is broadcast to a panel of output channels (the contraction's register
    tile), not summed along the positions with a stride-5 gather per vector (the window rule
    took it: 2.9 ms, against 0.67 ms as a contraction, weights packed per call, Zen 3)."""
    x = te.placeholder((1, 1, 203), name="x")
    w = te.placeholder((64, 1, 10), name="w")
    y = topi.nn.conv1d_ncw(x, w, 5, 0, 1)
    func = te.create_prim_func([x, w, y]).with_attr("layout_free_buffers", [1])
    sch = check_rule(func, host, "contraction", rtol=1e-4)
    update = script(sch).split('_update"):')[0].rsplit("for ", 3)[1:]
    assert re.search(rf"T\.vectorized\((T\.int64\()?{lanes_for(host, 32)}\b", update[-1]), update
