"""The zoo in torch: the same weights (by spec name), the same computation, for comparisons.

``torch_forward(model)`` gives ``f(weights, *inputs)`` over torch tensors; :func:`torch_eager`
wraps a zoo model into a parity-checked callable on a given number of threads. torch is an
optional extra (``pip install -e '.[bench]'``): it is imported only when these are called.
"""

from __future__ import annotations

import pathlib
from typing import Callable

import numpy as np

from tvm_ext.workloads.model_base import Model
from tvm_ext.workloads.models_transformer import DECODER, ENCODER, rope_tables

# torch's fp32 kernels reassociate sums differently from numpy: errors of a few 1e-6 of the
# mean output; a wrong computation is off by far more.
PARITY_TOLERANCE = 1e-4


def _linear(F, x, w, name):
    return F.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))


def torch_mlp(w, x):
    import torch.nn.functional as F  # lazy: torch is optional (the [bench] extra)

    return _linear(F, F.relu(_linear(F, x, w, "fc1")), w, "fc2")


def torch_encoder(w, x, heads):
    import torch.nn.functional as F  # lazy: torch is optional (the [bench] extra)

    b, s, h = x.shape
    q, k, v = (
        _linear(F, x, w, n).view(b, s, heads, h // heads).transpose(1, 2)
        for n in ("query", "key", "value")
    )
    p = F.softmax(q @ k.transpose(-1, -2) / (h // heads) ** 0.5, dim=-1)
    ctx = (p @ v).transpose(1, 2).reshape(b, s, h)
    x = F.layer_norm(
        x + _linear(F, ctx, w, "attn_out"), (h,), w["attn_norm.weight"], w["attn_norm.bias"], 1e-12
    )
    ffn = _linear(F, F.gelu(_linear(F, x, w, "ffn_in")), w, "ffn_out")
    return F.layer_norm(x + ffn, (h,), w["ffn_norm.weight"], w["ffn_norm.bias"], 1e-12)


def torch_decoder(w, x, heads):
    import torch  # lazy: torch is optional (the [bench] extra)
    import torch.nn.functional as F  # lazy: torch is optional (the [bench] extra)

    b, s, h = x.shape
    d = h // heads
    cos, sin = (torch.tensor(t, dtype=torch.float32) for t in rope_tables(s, d))

    def rms(t, weight):
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * weight

    def rope(t):  # (b, s, heads, d)
        return t * cos + torch.cat([-t[..., d // 2 :], t[..., : d // 2]], dim=-1) * sin

    n = rms(x, w["input_norm.weight"])
    q, k, v = (_linear(F, n, w, p).view(b, s, heads, d) for p in ("q_proj", "k_proj", "v_proj"))
    q, k, v = rope(q).transpose(1, 2), rope(k).transpose(1, 2), v.transpose(1, 2)
    ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    x = x + _linear(F, ctx.reshape(b, s, h), w, "o_proj")
    n = rms(x, w["post_norm.weight"])
    gated = F.silu(_linear(F, n, w, "gate_proj")) * _linear(F, n, w, "up_proj")
    return x + _linear(F, gated, w, "down_proj")


def torch_resnet(w, x):
    import torch.nn.functional as F  # lazy: torch is optional (the [bench] extra)

    i = 0
    while f"blocks.{i}.conv1.weight" in w:
        p = f"blocks.{i}"
        y = F.relu(F.conv2d(x, w[f"{p}.conv1.weight"], w[f"{p}.conv1.bias"], padding=1))
        x = F.relu(F.conv2d(y, w[f"{p}.conv2.weight"], w[f"{p}.conv2.bias"], padding=1) + x)
        i += 1
    return x


def torch_forward(model: Model) -> Callable:
    """``f(weights, *inputs)`` in torch for a zoo model."""
    if model.name in ("encoder", "decoder"):
        shapes, fn = {
            "encoder": (ENCODER, torch_encoder),
            "decoder": (DECODER, torch_decoder),
        }[model.name]
        heads = shapes[model.size].heads
        return lambda w, x: fn(w, x, heads)
    return {"mlp": torch_mlp, "resnet": torch_resnet}[model.name]


def torch_eager(model: Model, threads: int) -> Callable[[], "object"]:
    """A no-argument callable running ``model`` in torch eager mode (inference mode) on its
    default inputs with ``threads`` threads, warmed up and parity-checked against the numpy
    reference (ValueError past :data:`PARITY_TOLERANCE` of the mean |reference|); ImportError
    when torch is not installed."""
    return torch_callable(model, threads, compile_=False)


def torch_callable(model: Model, threads: int, compile_: bool) -> Callable[[], "object"]:
    """:func:`torch_eager`, or through ``torch.compile`` (inductor; it compiles at warm-up)."""
    import torch  # lazy: torch is optional (the [bench] extra)

    torch.set_num_threads(threads)
    weights = {k: torch.tensor(np.array(v)) for k, v in model.weights.items()}
    inputs = [torch.tensor(np.array(a)) for a in model.inputs]
    forward = torch_forward(model)
    if compile_:
        compiled = torch.compile(lambda *xs: forward(weights, *xs), dynamic=False)
        body = lambda: compiled(*inputs)  # noqa: E731
    else:
        body = lambda: forward(weights, *inputs)  # noqa: E731

    def call():
        with torch.inference_mode():
            return body()

    ref = model.reference()
    err = float(np.max(np.abs(call().numpy() - ref)) / np.mean(np.abs(ref)))
    if not err <= PARITY_TOLERANCE:
        raise ValueError(f"torch {model.key}: max error {err:.2g} of the mean |reference|")
    return call


def onnxruntime_callable(model: Model, threads: int, folder) -> Callable[[], "object"]:
    """A no-argument callable running ``model`` in onnxruntime (CPU provider, ``threads``
    intra-op threads, all graph optimizations) on its default inputs, parity-checked like
    :func:`torch_eager`. The graph is exported from the torch version with the weights as
    initializers (``torch.onnx.export`` into ``folder``). ImportError without torch, onnx or
    onnxruntime."""

    import onnxruntime as ort  # lazy: onnxruntime is optional (the [bench] extra)
    import torch  # lazy: torch is optional (the [bench] extra)

    weights = {k: torch.tensor(np.array(v)) for k, v in model.weights.items()}
    forward = torch_forward(model)

    class Wrapped(torch.nn.Module):
        def forward(self, *xs):
            return forward(weights, *xs)

    path = pathlib.Path(folder) / f"{model.key.replace('/', '_')}.onnx"
    inputs = tuple(torch.tensor(np.array(a)) for a in model.inputs)
    torch.onnx.export(Wrapped(), inputs, str(path), dynamo=False, opset_version=17)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    feeds = {i.name: np.asarray(a) for i, a in zip(session.get_inputs(), model.inputs)}

    def call():
        return session.run(None, feeds)[0]

    ref = model.reference()
    err = float(np.max(np.abs(call() - ref)) / np.mean(np.abs(ref)))
    if not err <= PARITY_TOLERANCE:
        raise ValueError(f"onnxruntime {model.key}: max error {err:.2g} of the mean |reference|")
    return call
