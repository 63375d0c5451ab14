"""A convolution's small map computes over its fused rows (schedules/rules/map_rows)."""

from __future__ import annotations

import pytest
from rule_checks import check_rule
from tvm import relax

from tvm_ext.base import tvm_api
from tvm_ext.workloads.legalized import legalized_func


def _conv_bias_relu6(size: int, cin: int, cout: int, kernel: int, stride: int):
    def build(x, w, b):
        y = relax.op.nn.conv2d(x, w, strides=stride, padding=kernel // 2,
                               data_layout="NHWC", kernel_layout="OHWI")  # fmt: skip
        return relax.op.clip(relax.op.add(y, b), 0, 6)

    params = [
        ("x", (1, size, size, cin)),
        ("w", (cout, kernel, kernel, cin)),
        ("b", (1, 1, 1, cout)),
    ]
    return legalized_func(build, params, free=(1, 2))


@pytest.mark.parametrize(
    "size, cin, cout, stride", [(13, 64, 128, 1), (11, 32, 64, 1), (26, 32, 64, 2)]
)
def test_a_pointwise_conv_on_a_small_map_tiles_its_fused_rows(host, size, cin, cout, stride):
    """Columns no row tile divides (13, 11: prime, past the 6 or 8 rows a tile holds) ran a
    partial tile per map row; the fused rows run in whole tiles but one (mobilenet_v2's
    320 -> 1280 on 7 x 7: 421 -> 228 us; strided, resnet50's 1024 -> 2048 from 14 x 14 to
    7 x 7: 2428 -> 1283 us, Zen 3, AVX2)."""
    func = _conv_bias_relu6(size, cin, cout, 1, stride)
    text = check_rule(func, host, "contraction", rtol=1e-4).mod.script()
    out = size // stride  # the accumulator's buffer is laid over the fused rows
    assert f"(T.int64(1), T.int64({out * out}), T.int64({cout}))" in text


# Structure on AVX2 (16 vector registers): the tile sizes, and so which maps fuse, differ with
# 32; the build runs on any x86-64 host with AVX2.
AVX2 = tvm_api.Target({"kind": "llvm", "mcpu": "haswell", "num-cores": 2})


@pytest.mark.parametrize(
    "kernel, stride, size, fused",
    [(3, 1, 7, True), (3, 2, 14, True), (3, 1, 14, False), (3, 1, 8, False), (1, 1, 8, False)],
)
def test_a_window_fuses_its_map_rows_where_their_tiles_cost_less(kernel, stride, size, fused):
    """32 channels on AVX2 take tiles of up to 6 rows: 7 columns run in tiles of 4, 8 rows
    computed for 7, where the 49 fused rows run in tiles of 5, 50 for 49 (resnet's last
    stage, 512 channels on 7 x 7: 1425 -> 1318 us, Zen 3); 14 columns in tiles of 5 (15 for
    14) against 196 rows in tiles of 4 gain too little, and 8 columns tile whole: both keep
    their rows. Each checked against the unscheduled build."""
    func = _conv_bias_relu6(size, 16, 32, kernel, stride)
    text = check_rule(func, AVX2, "contraction", rtol=1e-4).mod.script()
    out = -(-size // stride)
    assert (f"T.int64({out * out}), T.int64(32))" in text) == fused
