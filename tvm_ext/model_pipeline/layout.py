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
each side: it is written as ``minimum(maximum(x, lo), hi)`` first.
"""

from __future__ import annotations

import logging

import numpy as np

from tvm_ext.base import tvm_api

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
        return tvm_api.relax.transform.ConvertLayout({CONV: ["NHWC", "OHWI"]})(converted)
    except RuntimeError as err:  # TVM's InternalError is one
        # TVM 0.27's ConvertLayout fails (std::bad_alloc) on ViT's patch embedding, a
        # convolution whose output is reshaped into tokens: such a model keeps NCHW.
        log.info("channels last not applied (%s): the model keeps NCHW", str(err).splitlines()[0])
        return mod


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


def whole_vector_weights(mod):
    """``mod`` with every ``matmul`` (and NHWC ``conv2d``) by a constant weight whose output
    axis is not a whole number of 8-lane statements (a vocabulary of 50257, 1025 classes, 33
    channels) computed on the weight zero-padded to a multiple of :data:`PAD_LANES`, the
    padding sliced off the result.

    The rules then tile the matmul in whole vectors with no per-lane tail, and the padded
    weight is a constant (made once, at compile time), where the rule's own padding of an odd
    weight axis copies the weight on every call (a 1280 x 1025 classifier: 406 us a call
    against 46 us for 1040 classes). The slice is an element-wise epilogue FuseOps keeps in
    the matmul's function. Run after constant folding (a ``Linear``'s weight is a transposed
    constant until then)."""
    return tvm_api.rewrite_calls(mod, _padded_matmul)


def _padded_matmul(call):
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
    if n <= PAD_LANES or n % 8 == 0:
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


__all__ = ["PAD_LANES", "channels_last", "has_nchw_convolutions", "whole_vector_weights"]
