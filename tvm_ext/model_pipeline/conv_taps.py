"""A convolution's taps that read only its zero padding, dropped.

A dilated convolution on a small map reads, at some kernel offsets, nothing but padding for
every output: DeepLabv3's atrous pyramid runs 3x3 convolutions of dilation 24 and 36 on its
14 x 14 map (padding 24, 36), whose eight outer taps fall outside the map everywhere. Counted
as written they are 9x the work of the one tap that reads the map (960 -> 256 channels: 5.6
and 6.2 ms a call, against onnxruntime's 1.6 and 2.3, Zen 3). Such a convolution is the
convolution over the taps that read the map (the kernel sliced, the padding reduced by the
rows and columns dropped): a 1x1 convolution there. The values are the same: a dropped tap
multiplied zeros only.
"""

from __future__ import annotations

from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.layout import CONV


def outside_taps_dropped(mod):
    """``mod`` with each NCHW / OIHW 2-D convolution (dense, grouped or depthwise) whose outer
    kernel rows or columns read only its padding computed over the taps that read its input
    (see the module docstring). A depthwise one cut to one tap is a reduction over one
    element (mobilenet_v2's 3x3 depthwise convolutions on its 1 x 1 maps at a small input),
    which the rules write as a plain product (``schedules.rules.unit_reductions``)."""
    return tvm_api.rewrite_calls(mod, _dropped)


def _dropped(call):
    if tvm_api.call_name(call) != CONV:
        return None
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
        return None
    data, weight = call.args
    shape, kernel = tvm_api.tensor_dims(data), tvm_api.tensor_dims(weight)
    if shape is None or kernel is None or None in shape[2:] or None in kernel:
        return None
    top, left, bottom, right = (int(p) for p in attrs.padding)
    strides = [int(s) for s in attrs.strides]
    dilation = [int(d) for d in attrs.dilation]
    out = tvm_api.tensor_dims(call)
    if out is None or None in out[2:]:
        return None
    kept = [
        _reading_taps(shape[2 + a], out[2 + a], kernel[2 + a], strides[a], dilation[a], pad)
        for a, pad in ((0, top), (1, left))
    ]
    if any(k is None for k in kept) or all(k == (0, kernel[2 + a] - 1) for a, k in enumerate(kept)):
        return None
    (y0, y1), (x0, x1) = kept
    new_top, new_left = top - y0 * dilation[0], left - x0 * dilation[1]
    new_bottom = bottom - (kernel[2] - 1 - y1) * dilation[0]
    new_right = right - (kernel[3] - 1 - x1) * dilation[1]
    if min(new_top, new_left, new_bottom, new_right) < 0:
        return None  # the output would need a crop: left as it is
    sliced = tvm_api.relax.op.strided_slice(
        weight, axes=[2, 3], begin=[y0, x0], end=[y1 + 1, x1 + 1]
    )
    return tvm_api.relax.op.nn.conv2d(
        data,
        sliced,
        strides=strides,
        padding=[new_top, new_left, new_bottom, new_right],
        dilation=dilation,
        groups=int(attrs.groups),
        data_layout="NCHW",
        kernel_layout="OIHW",
        out_layout=str(attrs.out_layout),
        out_dtype=str(attrs.out_dtype) or None,
    )


def _reading_taps(size, outputs, taps, stride, dilation, pad) -> tuple[int, int] | None:
    """(first, last) kernel offset along one axis that reads the input for some output
    (position ``o * stride - pad + k * dilation`` within ``[0, size)``); None if none does
    or the ones that do are not one run."""
    reading = [
        k
        for k in range(taps)
        if any(0 <= o * stride - pad + k * dilation < size for o in range(outputs))
    ]
    if not reading or reading != list(range(reading[0], reading[-1] + 1)):
        return None
    return reading[0], reading[-1]


__all__ = ["outside_taps_dropped"]
