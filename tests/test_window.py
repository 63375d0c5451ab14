"""The window rule (depthwise convolutions, pooling) and the channels-last layout of CNNs.

Each crafted function is legalized from Relax as a model's would be, scheduled by the rules,
and checked against its unscheduled build on random inputs; sizes friendly and odd (channels
off the vector width, maps of 7, 9 and 11, strides 1 and 2, 3x3 and 5x5 windows).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from rule_checks import check_rule
from tvm import relax
from tvm_ext.schedules.common import vector_registers
from tvm_ext.schedules.rules.tile_shape import statements, whole_panel
from tvm_ext.schedules.rules.window import odd_channel_panel

import tvm_ext
from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import lanes_for
from tvm_ext.model_pipeline.layout import channels_last, has_nchw_convolutions
from tvm_ext.workloads.legalized import legalized_func


def depthwise_nhwc(channels, size, kernel, stride):
    """A depthwise convolution (OHWI weights, as ``channels_last`` leaves them) with a
    per-channel scale and shift and ReLU6 after it: a MobileNet layer in NHWC."""
    pad = kernel // 2

    def build(x, w, scale, shift):
        op = relax.op
        y = op.nn.conv2d(x, w, strides=stride, padding=pad, groups=channels,
                         data_layout="NHWC", kernel_layout="OHWI")  # fmt: skip
        y = op.add(op.multiply(y, scale), shift)
        return op.minimum(op.maximum(y, relax.const(0.0)), relax.const(6.0))

    params = [
        ("x", (1, size, size, channels)),
        ("w", (channels, kernel, kernel, 1)),
        ("scale", (1, 1, 1, channels)),
        ("shift", (1, 1, 1, channels)),
    ]
    return legalized_func(build, params, free=(1, 2, 3))


def _asm(sch, target) -> str:
    return tvm_api.build(sch.mod, target).inspect_source("asm")


@pytest.mark.parametrize(
    "channels, size, kernel, stride",
    [
        (32, 14, 3, 1),
        (96, 9, 3, 2),
        (24, 11, 3, 2),
        (40, 7, 5, 1),
        (20, 8, 3, 1),
        (33, 14, 3, 1),
        (34, 9, 3, 2),
        (47, 7, 3, 1),
        (116, 7, 3, 1),
        (58, 9, 3, 2),
    ],  # fmt: skip
)
def test_depthwise_conv_is_a_window_with_channel_vectors(host, channels, size, kernel, stride):
    """Any channel count: 33, 34 or 47 channels (no whole number of 8-lane statements) ran
    the plain loop nest, as slow as unscheduled (3x3, 28 x 28: 6.0 us against 2.4 us at 48
    channels); they tile as whole vectors and a narrower rest (2.2 us, Zen 5). ShuffleNet's
    116 and 58 channels, which no panel of whole 8-lane statements tiles, ran the plain nest
    on AVX2 (45 us for 116 channels on 14 x 14, Zen 3); they tile in 4-lane statements, or
    whole vectors, a 4-lane one and a plain lane (window.odd_channel_panel)."""
    sch = check_rule(depthwise_nhwc(channels, size, kernel, stride), host, "window", rtol=1e-4)
    lanes, registers = lanes_for(host, 32), vector_registers(host)
    panel = whole_panel(channels, lanes, registers) or odd_channel_panel(channels, lanes, registers)
    if channels % (2 * lanes) and panel is None:
        pytest.skip(
            f"{channels} channels on {lanes}-lane vectors: no panel tiles them within the "
            "registers (47 on AVX2: 8 statements a row), so the rule keeps the plain loop "
            "nest (parity checked above); a known gap"
        )
    text = sch.mod.script()
    assert "pad_temp" not in text.split("T.sblock(")[1]  # the padding inlined, no copy
    assert "layout_rewrite_preproc" in text  # the weight packed into channel panels, once
    if channels >= lanes:
        # The hot loop multiplies whole channel vectors: full-width FMAs in the built code
        # (4-lane ones where the panel is 4 lanes: 116 channels on 8-lane vectors).
        widest = lanes if panel is None or channels % panel else max(statements(panel, lanes))
        width = {16: "zmm", 8: "ymm", 4: "xmm"}[widest]
        assert re.search(rf"vfmadd\w+\s+[^\n]*%{width}", _asm(sch, host))


def test_unequal_statements_keep_their_accumulators_in_registers(host):
    """72 channels in panels of 24 run as a 16- and an 8-lane statement on a 16-lane target;
    a write-back loading 24 lanes at once from the two made LLVM spill every accumulator to
    the stack and rebuild it lane by lane (``vinsertps``: 72 x 28 x 28, 3x3 at 0.56x the
    speed of three 8-lane statements). The write-back runs in the same statements."""
    sch = check_rule(depthwise_nhwc(72, 14, 3, 1), host, "window", rtol=1e-4)
    asm = _asm(sch, host)
    assert "vinsertps" not in asm and "vfmadd" in asm


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("channels, size", [(64, 30), (24, 9)])
def test_pooling_is_a_window_in_either_layout(host, layout, kind, channels, size):
    shape = (1, size, size, channels) if layout == "NHWC" else (1, channels, size, size)
    pool = relax.op.nn.max_pool2d if kind == "max" else relax.op.nn.avg_pool2d

    def build(x):
        return pool(x, pool_size=3, strides=2, padding=1, layout=layout)

    sch = check_rule(legalized_func(build, [("x", shape)]), host, "window", rtol=1e-5)
    loops = sch.mod.script()
    # 64 x 15 x 15 outputs of 9 points are worth two threads; 24 x 5 x 5 are not.
    assert ("T.parallel" in loops) == (channels == 64)
    if layout == "NHWC":
        assert "T.vectorized" in loops  # vectors of channels


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_over_channels_no_whole_vectors_tile_runs_in_vectors(host, kind):
    """116 channels (ShuffleNet's) pool in the panels of window.odd_channel_panel, where the
    plain nest ran (3x3, stride 2, 28 x 28: max 18.3 -> 8.1 us, avg 22.3 -> 8.3 us; Zen 3)."""
    pool = relax.op.nn.max_pool2d if kind == "max" else relax.op.nn.avg_pool2d

    def build(x):
        return pool(x, pool_size=3, strides=2, padding=1, layout="NHWC")

    func = legalized_func(build, [("x", (1, 9, 9, 116))])
    sch = check_rule(func, host, "window", rtol=1e-5)
    assert "T.vectorized" in sch.mod.script()  # vectors of channels, not the plain nest


@pytest.mark.parametrize(
    "func, rows_first",
    [
        (lambda: _max_pool_nhwc(64, 30), True),  # no weights
        (lambda: depthwise_nhwc(96, 28, 3, 2), True),  # 3.4 KiB of weights
        (lambda: depthwise_nhwc(960, 7, 5, 1), False),  # 94 KiB
    ],
)
def test_a_window_runs_its_row_tiles_outside_its_channel_panels_where_its_weights_are_few(
    host, func, rows_first
):
    """Row tiles outside the channel panels read each input pixel's channels as one run (a
    max pool of 64 x 112 x 112, batch 3, 763 -> 566 us with its input cold); where the
    weights are many (a 5x5 depthwise over 960 channels on 7 x 7) the panels stay outside,
    their weights in L1 for every row (33.8 us, 41.9 with the rows outside; Zen 3;
    window.rows_outside)."""
    sch = check_rule(func(), host, "window", rtol=1e-4)
    (fused,) = re.findall(r"for (\w+_fused) in T\.parallel", sch.mod.script())
    # NHWC with its unit batch gone: ax0 the output rows, ax1 its width (the row tiles:
    # ax1_0), ax2 the channels (the panels: ax2_0).
    assert (fused.index("ax1_0") < fused.index("ax2_0")) == rows_first, fused


def _max_pool_nhwc(channels, size):
    def build(x):
        return relax.op.nn.max_pool2d(x, pool_size=3, strides=2, padding=1, layout="NHWC")

    return legalized_func(build, [("x", (1, size, size, channels))])


def test_a_convolution_over_channels_is_not_a_window(host):
    """A reduction iterator alone in an index (the input channels) is a dot product: the
    contraction rule's, whatever the window around it."""

    def build(x, w):
        return relax.op.nn.conv2d(x, w, padding=1, data_layout="NHWC", kernel_layout="OHWI")

    func = legalized_func(build, [("x", (1, 9, 9, 16)), ("w", (32, 3, 3, 16))], free=(1,))
    check_rule(func, host, "contraction", rtol=1e-4)


class SmallCnn(torch.nn.Module):
    """Every layer kind of a torchvision CNN: a strided stem with batch norm and ReLU6, an
    inverted residual (1x1 expand, depthwise, 1x1 project, residual add), max pooling, a
    global average pool and the classifier."""

    def __init__(self, head: bool = True):
        super().__init__()
        self.has_head = head
        nn = torch.nn
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU6())
        self.expand = nn.Sequential(nn.Conv2d(16, 48, 1), nn.BatchNorm2d(48), nn.ReLU6())
        self.depthwise = nn.Sequential(
            nn.Conv2d(48, 48, 3, 1, 1, groups=48), nn.BatchNorm2d(48), nn.ReLU6()
        )
        self.project = nn.Sequential(nn.Conv2d(48, 16, 1), nn.BatchNorm2d(16))
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = self.stem(x)
        x = x + self.project(self.depthwise(self.expand(x)))
        x = self.pool(x)
        return self.head(x.mean((2, 3))) if self.has_head else x


@pytest.mark.parametrize("head", [True, False])
def test_a_cnn_runs_channels_last_with_one_transform_in_and_one_out(head):
    """With the classifier the global pool leaves no layout to change back (one transpose,
    at the input); returning the feature map, it changes back once at the output."""
    torch.manual_seed(0)
    module = SmallCnn(head).eval()
    with torch.no_grad():  # batch norm statistics away from (0, 1), so parity tests them
        for layer in module.modules():
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.running_mean.uniform_(-0.5, 0.5)
                layer.running_var.uniform_(0.5, 2.0)
    x = torch.randn(1, 3, 30, 30)
    model = tvm_ext.from_torch(module, (x,), name="small_cnn")
    assert has_nchw_convolutions(model.mod)
    assert not has_nchw_convolutions(channels_last(model.mod))
    compiled = tvm_ext.compile(model)
    got = compiled.run(x.numpy())
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # Every layer between runs in NHWC (no transpose around a convolution, a ReLU6 or the
    # pooling).
    moves = [k for k in compiled.kernels if "transpose" in k]
    assert compiled.kernels[0] in moves
    assert len(moves) == (1 if head else 2), compiled.kernels
    assert head or compiled.kernels[-1] in moves
    rules = {s.name: s.rule for s in compiled.applied.functions}
    assert sum(1 for n, r in rules.items() if r == "window") == 2  # depthwise, max pool
    assert all(r == "window" for n, r in rules.items() if "pool" in n)


def test_a_model_without_convolutions_keeps_its_layout():
    mod = tvm_ext.build_suite("bert", "small").mod
    assert not has_nchw_convolutions(mod)
    assert channels_last(mod) is mod


@pytest.mark.parametrize("channels", [24, 40, 120])
def test_channels_off_the_vector_width_tile_in_whole_vectors_and_a_narrower_rest(host, channels):
    """A 1x1 convolution to 24, 40 or 120 channels (MobileNet's): the weight's channel panels
    run as full-width vector statements and one 8-lane statement for the rest (40 on 16
    lanes: 16, 16, 8), with no per-lane predicate in the tile. A 24-lane vector statement
    ran such a convolution at 21 GFLOP/s, three 8-lane ones at 210; five 8-lane ones for 40
    channels on a 16-lane target at 38 GFLOP/s, 16 + 16 + 8 at 164 (Zen 5)."""

    def build(x, w):
        return relax.op.nn.conv2d(x, w, data_layout="NHWC", kernel_layout="OHWI")

    func = legalized_func(build, [("x", (1, 14, 14, 32)), ("w", (channels, 1, 1, 32))], free=(1,))
    sch = check_rule(func, host, "contraction", rtol=1e-4)
    text = sch.mod.script()
    pieces = text.split('_update"):')
    assert len(pieces) >= 2
    widths = set()
    for before, after in zip(pieces, pieces[1:]):
        loops = before.rsplit("for ", 3)[1:]  # the loops around an update: k, rows, lanes
        (lane,) = re.findall(r"(\w+) in T\.vectorized", loops[-1])
        body = after.split("T.sblock(")[0]
        # No per-lane predicate (a row tile's tail is one scalar condition per row).
        assert all(lane not in cond for cond in re.findall(r"T\.where\((.*)\)", body)), body
        # T.vectorized(n) or T.vectorized(start, stop): a run's loop starts where the last ends
        found = re.findall(
            r"T\.vectorized\((?:T\.int64\()?(\d+)\)?(?:, (?:T\.int64\()?(\d+))?", "".join(loops)
        )
        assert len(found) == 1, loops  # every update's lanes are one vectorized loop
        widths |= {int(b) - int(a) if b else int(a) for a, b in found}
    lanes = lanes_for(host, 32)
    # Every statement a whole 8-lane vector at least, the widest a full one.
    assert max(widths) == lanes and all(w % 8 == 0 for w in widths), widths
    assert (len(widths) > 1) == bool(channels % lanes), widths


def test_an_odd_weight_axis_is_padded_once_at_compile_time(host):
    """A classifier of 37 classes (no whole number of 8-lane statements): its weight is
    padded to 48 columns as a constant, the matmul runs on whole vectors and the slice back
    to 37 is the matmul's epilogue; no copy of the weight is left in the kernel."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(64, 37)).eval()
    x = torch.randn(3, 64)
    model = tvm_ext.from_torch(module, (x,), name="head37")
    compiled = tvm_ext.compile(model)
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(compiled.run(x.numpy()), want, rtol=1e-5, atol=1e-5)
    (kernel,) = [k for k in compiled.kernels if "matmul" in k]
    assert "strided_slice" in kernel
    text = compiled.applied.mod[kernel.removesuffix("_prepacked")].script()
    assert "_pad" not in text  # the rule had nothing to pad
    assert "T.int64(48)" in text
    # A weight axis of whole vectors is left as it is; 40 columns are whole 8-lane vectors
    # (AVX2), and padded to 48 where vectors are 16 lanes (8-lane panels: half the width).
    even = tvm_ext.compile(tvm_ext.from_torch(torch.nn.Linear(64, 40).eval(), (x,), name="h40"))
    padded = any("strided_slice" in k for k in even.kernels)
    assert padded == (40 % lanes_for(host, 32) != 0), even.kernels


def test_a_convolution_to_odd_channels_is_padded_once_at_compile_time():
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Conv2d(8, 33, 3, 1, 1), torch.nn.ReLU()).eval()
    x = torch.randn(1, 8, 9, 9)
    compiled = tvm_ext.compile(tvm_ext.from_torch(module, (x,), name="conv33"))
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(compiled.run(x.numpy()), want, rtol=1e-4, atol=1e-4)
    (kernel,) = [k for k in compiled.kernels if "conv2d" in k]
    assert "strided_slice" in kernel
    assert "_pad" not in compiled.applied.mod[kernel.removesuffix("_prepacked")].script()


def test_a_row_reduction_with_a_unit_batch_vectorizes_its_lanes(host):
    """A layer norm over (1, rows, 64) as BERT has it: the rfactor-ed partial sums run as
    whole vectors (the unit batch loop once took the vector and left the lanes scalar)."""

    def build(x, gamma, beta):
        return relax.op.nn.layer_norm(x, gamma, beta, axes=[-1])

    params = [("x", (1, 16, 64)), ("gamma", (64,)), ("beta", (64,))]
    sch = check_rule(legalized_func(build, params, free=(1, 2)), host, "rows", rtol=1e-4)
    text = sch.mod.script()
    lanes = lanes_for(host, 32)
    vectorized = re.findall(
        r"for \w+ in T\.vectorized\(T\.int64\((\d+)\)\):\n *with T\.sblock\(\"(\w+_rf)\"\)", text
    )
    # The sum and the sum of squares, each a whole vector of partial sums.
    assert sorted(int(width) for width, _ in vectorized) == [lanes, lanes], vectorized


def _random_statistics(module) -> None:
    """Batch norm statistics and affine parameters away from (0, 1), so parity tests them."""
    with torch.no_grad():
        for layer in module.modules():
            if isinstance(layer, torch.nn.BatchNorm2d):
                layer.running_mean.uniform_(-0.5, 0.5)
                layer.running_var.uniform_(0.5, 2.0)
                layer.weight.uniform_(0.5, 1.5)
                layer.bias.uniform_(-0.5, 0.5)


def _compiled_and_checked(module, shape, name):
    """``module`` (batch norms randomized) compiled, its output checked against torch's."""
    module = module.eval()
    _random_statistics(module)
    x = torch.randn(*shape)
    compiled = tvm_ext.compile(tvm_ext.from_torch(module, (x,), name=name))
    with torch.no_grad():
        want = module(x).numpy()
    got = compiled.run(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * abs(want).max())
    return compiled


def test_batch_norm_folds_into_the_convolution_before_it():
    """Every batch norm after a convolution becomes the convolution's weight, scaled per
    output channel, and one bias add: no kernel subtracts the mean or divides by the deviation
    per element (the rules' kernels are named after the operators they fuse)."""
    torch.manual_seed(1)
    compiled = _compiled_and_checked(SmallCnn(head=False), (1, 3, 30, 30), "small_cnn_bn")
    convs = [k for k in compiled.kernels if "conv2d" in k]
    assert len(convs) == 4, compiled.kernels
    assert not any(op in k for k in compiled.kernels for op in ("subtract", "divide")), convs


def test_a_convolution_read_elsewhere_keeps_its_batch_norm():
    """A convolution whose output is also read past its batch norm is not folded (the fold
    would compute the convolution twice); the result is right either way."""

    class Both(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.norm = torch.nn.Conv2d(4, 8, 3, 1, 1), torch.nn.BatchNorm2d(8)

        def forward(self, x):
            y = self.conv(x)
            return self.norm(y) + y

    torch.manual_seed(2)
    compiled = _compiled_and_checked(Both(), (1, 4, 10, 10), "conv_bn_both")
    assert any("divide" in k for k in compiled.kernels), compiled.kernels


def test_a_squeeze_excitation_scale_is_no_row_reduction(host):
    """EfficientNet's squeeze-excitation as FuseOps leaves it: a 1x1 convolution of the pooled
    20 channels to 480, its sigmoid scaling the 14 x 14 x 480 map. Its reduction rows are
    channels, not the output's leading axis: the rows rule once took it and emitted a
    480-lane vector statement LLVM took 40 s to compile (a whole model's build hung). The
    contraction takes it, the scaling a loop nest of its own; no vector statement is wider
    than four registers."""

    def build(pooled, w, b, x):
        op = relax.op
        s = op.add(op.nn.conv2d(pooled, w, data_layout="NHWC", kernel_layout="OHWI"), b)
        return op.multiply(op.sigmoid(s), x)

    params = [("pooled", (1, 1, 1, 20)), ("w", (480, 1, 1, 20)), ("b", (1, 1, 1, 480)),
              ("x", (1, 14, 14, 480))]  # fmt: skip
    sch = check_rule(legalized_func(build, params, free=(1, 2)), host, "contraction", rtol=1e-4)
    widths = [int(w) for w in re.findall(r"T\.vectorized\((?:T\.int64\()?(\d+)", sch.mod.script())]
    assert widths and max(widths) <= 4 * lanes_for(host, 32), widths


def grouped_conv_nhwc(channels, groups, size, stride):
    """A grouped 3x3 convolution with a bias and ReLU (ResNeXt's, RegNet's), NHWC / OHWI."""

    def build(x, w, b):
        op = relax.op
        y = op.nn.conv2d(x, w, strides=stride, padding=1, groups=groups,
                         data_layout="NHWC", kernel_layout="OHWI")  # fmt: skip
        return op.nn.relu(op.add(y, b))

    params = [("x", (1, size, size, channels)), ("w", (channels, 3, 3, channels // groups)),
              ("b", (1, 1, 1, channels))]  # fmt: skip
    return legalized_func(build, params, free=(1, 2))


@pytest.mark.parametrize(
    "channels, groups, size, stride",
    [(48, 6, 13, 2), (64, 16, 8, 1), (96, 3, 7, 1), (40, 5, 10, 1), (512, 16, 5, 1)],
)
def test_a_grouped_convolution_broadcasts_its_input_over_a_group_of_lanes(
    host, channels, groups, size, stride
):
    """A grouped convolution reads its input at ``f // width * width + c``: one value for all
    of a group's output channels. The contraction tiles the output channels in panels within
    one group (its input broadcast, its packed weights one vector load) and the output width
    as rows; the input read along the lanes (a per-lane gather: 10 GFLOP/s for regnet_y's
    stem-side 48-channel one, 150 as panels) and the window rule (it once took groups of 4)
    are both wrong."""
    width = channels // groups
    func = grouped_conv_nhwc(channels, groups, size, stride)
    sch = check_rule(func, host, "contraction", rtol=1e-4)
    text = sch.mod.script()
    before, after = text.split('_update"):')
    # No per-lane predicate (a row tail's guard names no lane: 7 columns in tiles of 4 on
    # AVX2, whose 16 registers hold no 7 x 32 tile).
    lane = re.findall(r"for (\w+) in T\.vectorized", before)[-1]
    assert not re.search(rf"T\.where\([^\n]*\b{lane}\b", after.split("T.sblock(")[0])
    lanes = lanes_for(host, 32)
    panel = max(p for p in range(1, min(width, 3 * lanes) + 1) if width % p == 0)
    loops = before.rsplit("for ", 4)[1:]  # the update's loops: window, channels, rows, lanes
    assert re.search(r"T\.unroll", "".join(loops))  # several output columns share a load
    widths = {int(w) for w in re.findall(r"T\.vectorized\((?:T\.int64\()?(\d+)", "".join(loops))}
    assert widths and max(widths) <= panel and panel % max(widths) == 0, (widths, panel)
    assert "layout_rewrite_preproc" in text  # the weight packed into group panels, once
    assert "vgather" not in _asm(sch, host)


def test_a_resnext_block_with_grouped_convolutions_matches_torch():
    """ResNeXt's bottleneck (1x1, grouped 3x3 of 8 groups of 4, 1x1, batch norms, residual)
    through the whole pipeline: the grouped convolution keeps its groups (no dense rewrite,
    no padding of its channels) and the model matches torch."""
    nn = torch.nn
    torch.manual_seed(3)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Sequential(nn.Conv2d(24, 32, 1), nn.BatchNorm2d(32), nn.ReLU())
            self.b = nn.Sequential(nn.Conv2d(32, 32, 3, 2, 1, groups=8), nn.BatchNorm2d(32))
            self.c = nn.Conv2d(32, 24, 1)
            self.skip = nn.Conv2d(24, 24, 1, 2)

        def forward(self, x):
            return torch.relu(self.c(torch.relu(self.b(self.a(x)))) + self.skip(x))

    compiled = _compiled_and_checked(Block(), (1, 24, 11, 11), "resnext_block")
    convs = {s.name: s.rule for s in compiled.applied.functions if "conv2d" in s.name}
    assert set(convs.values()) == {"contraction"}, convs
    (grouped,) = [name for name in convs if "group_conv2d" in compiled.applied.mod[name].script()]
    # Panels of one group's 4 output channels (its input value broadcast to them).
    assert "T.vectorized(T.int64(4))" in compiled.applied.mod[grouped].script()
