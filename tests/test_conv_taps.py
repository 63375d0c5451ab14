"""``outside_taps_dropped``: a convolution's kernel rows and columns that read only its zero
padding (DeepLabv3's atrous pyramid: dilation 24 and 36 on a 14 x 14 map) are dropped, the
values unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tvm_ext
from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.conv_taps import outside_taps_dropped


class _Atrous(torch.nn.Module):
    """Three branches over one map, as an atrous pyramid: dilations 2, 6 and 9 on 7 x 9
    (padding = dilation), one of them strided, summed."""

    def __init__(self):
        super().__init__()
        self.near = torch.nn.Conv2d(8, 4, 3, padding=2, dilation=2)
        self.far = torch.nn.Conv2d(8, 4, 3, padding=9, dilation=9)
        self.wide = torch.nn.Conv2d(8, 4, (3, 5), padding=(6, 12), dilation=(6, 6))

    def forward(self, x):
        return self.near(x) + self.far(x) + self.wide(x)


def _kernels(mod) -> list[tuple[int, ...]]:
    return [
        tvm_api.tensor_dims(value.args[1])[2:]
        for _, value in tvm_api.bindings(mod["main"])
        if tvm_api.call_name(value) == "relax.nn.conv2d"
    ]


def test_taps_that_read_only_padding_are_dropped_and_the_values_kept():
    torch.manual_seed(0)
    module = _Atrous().eval()
    x = torch.randn(1, 8, 7, 9)
    model = tvm_ext.from_torch(module, (x,), name="atrous")
    # dilation 2 reads the map at every tap; dilation 9 only at the centre (7 x 9 map);
    # dilation 6 on 7 rows keeps its 3 rows, of its 5 columns (offsets -12..12) the middle 3.
    assert _kernels(model.mod) == [(3, 3), (3, 3), (3, 5)]
    assert _kernels(outside_taps_dropped(model.mod)) == [(3, 3), (1, 1), (3, 3)]
    compiled = tvm_ext.compile(model)
    with torch.no_grad():
        want = module(x).numpy()
    got = compiled.run(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * abs(want).max())


@pytest.mark.parametrize(
    "module",
    [
        torch.nn.Conv2d(4, 4, 3, stride=1, padding=1),
        torch.nn.Conv2d(4, 4, 3, stride=2, padding=1),
        torch.nn.Conv2d(4, 4, 3, padding=1, groups=4),
    ],
)
def test_a_convolution_whose_every_tap_reads_the_map_is_left(module):
    mod = tvm_ext.from_torch(module.eval(), (torch.randn(1, 4, 6, 6),), name="plain").mod
    assert tvm_api.same_structure(outside_taps_dropped(mod)["main"], mod["main"])


@pytest.mark.parametrize("groups", [4, 8])
def test_grouped_and_depthwise_convolutions_on_a_map_smaller_than_their_reach(groups):
    """mobilenet_v2 at a small input runs 3x3 depthwise convolutions on 1 x 1 maps: only the
    centre tap reads the map. Cut to it, the depthwise convolution is a reduction over one
    element with a bias and a ReLU after it (it lost parity before rules.unit_reductions)."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(8, 8, 3, padding=1, groups=groups),
        torch.nn.ReLU6(),
        torch.nn.Conv2d(8, 8, 3, padding=9, dilation=9, groups=groups),
    ).eval()
    x = torch.randn(1, 8, 1, 1)
    model = tvm_ext.from_torch(module, (x,), name="small_map")
    assert _kernels(outside_taps_dropped(model.mod)) == [(1, 1), (1, 1)]
    compiled = tvm_ext.compile(model)  # parity against torch, or ParityError
    with torch.no_grad():
        want = module(x).numpy()
    np.testing.assert_allclose(compiled.run(x.numpy()), want, rtol=1e-4, atol=1e-5)
