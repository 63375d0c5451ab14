"""The layout a CNN runs in: channels last (NHWC), chosen once for the whole graph.

A torch CNN arrives in NCHW. There the vector axis of every convolution, depthwise
convolution and pooling window is the image width (7, 14, 28, 56, 112: rarely a whole number
of vectors, and strided for a stride-2 window), and a 1x1 convolution reads its channels
``H*W`` floats apart. In NHWC the channels are the innermost, contiguous axis of every
activation: a 1x1 convolution is a matmul whose vector axis is its output channels, and a
depthwise convolution or a pooling window is a sum over a few neighbours of whole channel
vectors (:mod:`tvm_ext.schedules.rules.window`). onnxruntime's MLAS does the same with its
channel-blocked NCHWc; channels last is that layout with one block of all channels.

Relax's ``ConvertLayout`` converts every ``conv2d`` (weights to OHWI, which constant folding
then repacks at compile time) and carries the layout through the operators that know how to
(batch norm, element-wise arithmetic, pooling, residual adds, concatenation); a transpose is
left only where the graph leaves the layout (its input, its output, a flatten before the
classifier). ``clip`` (ReLU6) has no layout rule in TVM 0.27 and would take a transpose on
each side: it is written as ``minimum(maximum(x, lo), hi)`` first. A reshape has none either:
the transposes ``ConvertLayout`` leaves around one (ShuffleNet's channel shuffle) are carried
through it until they cancel (:func:`~tvm_ext.model_pipeline.transposes.transposes_carried`).
"""

from __future__ import annotations

import logging

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.transposes import transposes_carried

log = logging.getLogger(__name__)

CONV = "relax.nn.conv2d"


def has_nchw_convolutions(mod) -> bool:
    """Whether a Relax function of ``mod`` binds a 2-D convolution in NCHW (a read of its
    bindings: nothing is rewritten)."""
    return any(
        tvm_api.call_name(value) == CONV and str(value.attrs.data_layout) == "NCHW"
        for func in mod.functions.values()
        if not isinstance(func, tvm_api.PrimFunc)
        for _, value in tvm_api.bindings(func)
    )


def channels_last(mod):
    """``mod`` with its convolutions in NHWC and the layout carried through the graph (see
    the module docstring); a module without NCHW convolutions comes back unchanged."""
    if not has_nchw_convolutions(mod):
        return mod
    converted = tvm_api.rewrite_calls(mod, _clip_as_min_max)
    try:
        converted = tvm_api.relax.transform.ConvertLayout({CONV: ["NHWC", "OHWI"]})(converted)
    except RuntimeError as err:  # TVM's InternalError is one
        # TVM 0.27's ConvertLayout fails (std::bad_alloc) on ViT's patch embedding, a
        # convolution whose output is reshaped into tokens: such a model keeps NCHW.
        log.info("channels last not applied (%s): the model keeps NCHW", str(err).splitlines()[0])
        return mod
    return transposes_carried(converted)


def _clip_as_min_max(call):
    if tvm_api.call_name(call) != "relax.clip":
        return None
    x, lo, hi = call.args
    dtype = tvm_api.tensor_dtype(x)
    if not dtype.startswith("float"):
        return None
    op = tvm_api.relax.op

    def bound(value):
        return tvm_api.relax.const(float(value.value), dtype)

    return op.minimum(op.maximum(x, bound(lo)), bound(hi))


# A weight's output axis is padded to a whole number of these lanes (the widest vector of
# any x86 target the rules run on: 16 fp32 lanes of AVX-512).
PAD_LANES = 16


def whole_vector_weights(mod, lanes: int = 8):
    """``mod`` with every ``matmul`` (and NHWC ``conv2d``) by a constant weight whose output
    axis is not a whole number of the target's ``lanes``-lane vectors (a vocabulary of 50257,
    1025 classes, 33 channels; 440 or 24 channels where vectors are 16 lanes) computed on the
    weight zero-padded to a multiple of :data:`PAD_LANES`, the padding sliced off the result.
    An axis of whole 8-lane statements on a 16-lane target is padded too: the rules would
    tile it in 8-lane panels at half the machine's width (regnet_y's 1x1 convolution of 440
    channels on a 7x7 map: 243 us alone, against 40 us at 448 channels; Zen 5).

    The rules then tile the matmul in whole vectors with no per-lane tail, and the padded
    weight is a constant (made once, at compile time), where the rule's own padding of an odd
    weight axis copies the weight on every call (a 1280 x 1025 classifier: 406 us a call
    against 46 us for 1040 classes). The slice is an element-wise epilogue FuseOps keeps in
    the matmul's function. Run after constant folding (a ``Linear``'s weight is a transposed
    constant until then)."""
    return tvm_api.rewrite_calls(mod, lambda call: _padded_matmul(call, lanes))


def _padded_matmul(call, lanes: int):
    name = tvm_api.call_name(call)
    if name == "relax.matmul":
        at = -1  # the weight's output axis: its last (x @ W)
    elif name == CONV and _channels_last_dense(call):
        at = 0  # OHWI: O
    else:
        return None
    a, b = call.args
    weight = tvm_api.constant_values(b)
    if weight is None or not str(weight.dtype).startswith("float"):
        return None
    if name == "relax.matmul" and weight.ndim != 2:
        return None
    n = weight.shape[at]
    if n <= PAD_LANES or n % lanes == 0:
        return None
    pads = [(0, 0)] * weight.ndim
    pads[at] = (0, -(-n // PAD_LANES) * PAD_LANES - n)
    padded = tvm_api.relax.const(np.pad(weight, pads))
    op = tvm_api.relax.op
    if name == "relax.matmul":
        result = op.matmul(a, padded, out_dtype=call.attrs.out_dtype)
    else:
        result = tvm_api.relax.Call(call.op, [a, padded], call.attrs)
    axis = len(call.ty.shape) - 1  # the output's channels / columns: its last axis
    return op.strided_slice(result, axes=[axis], begin=[0], end=[n])


def _channels_last_dense(call) -> bool:
    """An NHWC / OHWI convolution of one group writing NHWC (its output channels last)."""
    attrs = call.attrs
    return (
        str(attrs.data_layout) == "NHWC"
        and str(attrs.kernel_layout) == "OHWI"
        and str(attrs.out_layout) == "NHWC"
        and int(attrs.groups) == 1
    )


# Per-channel arithmetic a convolution's output may go through, folded into its weight and one
# bias: (op, whether the constant may stand on the left).
_AFFINE = {
    "relax.add": True,
    "relax.subtract": False,
    "relax.multiply": True,
    "relax.divide": False,
}


def folded_batch_norm(mod):
    """``mod`` with each chain of per-channel constant arithmetic after a convolution by a
    constant weight (an inference batch norm as Relax decomposes it: ``(conv - mean) / sqrt(var
    + eps) * gamma + beta``; a bias add) folded into the convolution: its weight scaled per
    output channel and one bias added, ``conv(x, W * a) + b``: one add per output element
    instead of a subtract, a divide, a multiply and an add, and one constant per kernel instead
    of four, as onnxruntime and torch.compile's freezing fold it. Measured on Zen 4 (2 threads,
    interleaved A/B with the one timer): no change beyond noise at full size (resnet50 55.2 vs
    55.0 ms, mobilenet_v2 4.52 vs 4.50, resnet18 23.5 vs 24.2): the rules already apply the
    chain to the accumulator tile in registers. Run after constant folding (the divisor
    ``sqrt(var + eps)`` is a constant then); the chain's inner bindings are left for dead-code
    elimination (kept, and still correct, when something else reads them)."""
    ends = []
    for func in mod.functions.values():
        if isinstance(func, tvm_api.PrimFunc):
            continue
        values = dict(tvm_api.bindings(func))
        uses: dict = {}
        for value in values.values():
            for arg in getattr(value, "args", ()):
                uses[arg] = uses.get(arg, 0) + 1
        # A step's variable operand read nowhere else is folded by the step after it.
        inner = {
            step[2]
            for step in (_step(v) for v in values.values() if tvm_api.call_name(v) in _AFFINE)
            if step is not None and uses.get(step[2], 0) == 1
        }
        for var, value in values.items():
            new = None if var in inner else _fold(value, values, uses)
            if new is not None:
                ends.append((value, new))
    if not ends:
        return mod
    return tvm_api.rewrite_calls(mod, lambda call: _replacement(call, ends))


def _replacement(call, ends):
    return next((new for value, new in ends if value.same_as(call)), None)


def _fold(call, values, uses):
    """The folded expression when ``call`` ends a chain of per-channel constant arithmetic
    on a convolution's output, else None."""
    steps = []
    while tvm_api.call_name(call) in _AFFINE:
        step = _step(call)
        if step is None or uses.get(step[2], 0) != 1 or step[2] not in values:
            break
        steps.append(step)
        call = values[step[2]]
    if tvm_api.call_name(call) != CONV or not steps:
        return None
    weight = tvm_api.constant_values(call.args[1])
    attrs = call.attrs
    out_axis = str(attrs.out_layout).find("C")
    shape = [int(d) for d in call.ty.shape]
    if weight is None or weight.dtype != np.float32 or out_axis < 0:
        return None
    channels = shape[out_axis]
    scale, shift = np.ones(channels), np.zeros(channels)
    for name, const, _ in reversed(steps):
        per_channel = _per_channel(const, shape, out_axis)
        if per_channel is None:
            return None
        if name == "relax.add":
            shift = shift + per_channel
        elif name == "relax.subtract":
            shift = shift - per_channel
        elif name == "relax.multiply":
            scale, shift = scale * per_channel, shift * per_channel
        else:
            scale, shift = scale / per_channel, shift / per_channel
    if len(steps) == 1 and steps[0][0] == "relax.add":
        return None  # a bias add alone: nothing to fold
    o_axis = str(attrs.kernel_layout).find("O")
    reshaped = [1] * weight.ndim
    reshaped[o_axis] = channels
    folded_weight = (weight * scale.reshape(reshaped)).astype(weight.dtype)
    bias_shape = [1] * len(shape)
    bias_shape[out_axis] = channels
    conv = tvm_api.relax.Call(call.op, [call.args[0], tvm_api.relax.const(folded_weight)], attrs)
    bias = tvm_api.relax.const(shift.reshape(bias_shape).astype(weight.dtype))
    return tvm_api.relax.op.add(conv, bias)


def _step(call):
    """(op, constant values, the variable operand) of one per-channel step, else None."""
    name = tvm_api.call_name(call)
    a, b = call.args
    left, right = tvm_api.constant_values(a), tvm_api.constant_values(b)  # copies: once each
    if right is not None and left is None:
        return name, right, a
    if _AFFINE[name] and left is not None and right is None:
        return name, left, b
    return None


def _per_channel(const, shape: list[int], axis: int):
    """``const`` as a vector over the ``axis`` of an output of ``shape`` when it broadcasts
    along that axis only (a batch norm's ``(1, 1, 1, C)`` in NHWC, ``(1, C, 1, 1)`` in NCHW, a
    scalar), else None."""
    const = np.asarray(const, dtype=np.float64)
    if const.ndim > len(shape):
        return None
    aligned = [1] * (len(shape) - const.ndim) + list(const.shape)
    if any(d != 1 for i, d in enumerate(aligned) if i != axis):
        return None
    if aligned[axis] not in (1, shape[axis]):
        return None
    return np.broadcast_to(const.reshape(-1), (shape[axis],)).copy()


__all__ = [
    "PAD_LANES",
    "channels_last",
    "folded_batch_norm",
    "has_nchw_convolutions",
    "whole_vector_weights",
]
