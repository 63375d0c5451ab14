"""Feed-forward zoo models: an MLP and a stack of ResNet basic blocks."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.workloads.model_base import Model, check_size, conv2d_3x3, linear, make_model

nn = tvm_api.relax_nn

MLP = {"full": (784, 256, 10), "small": (64, 32, 10)}  # (inputs, hidden, classes)


class _MLP(nn.Module):
    def __init__(self, sizes: tuple[int, int, int]):
        n_in, hidden, n_out = sizes
        self.fc1, self.fc2 = nn.Linear(n_in, hidden), nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.fc2(nn.op.relu(self.fc1(x)))


def mlp(size: str = "full", batch: int = 1, seed: int = 0) -> Model:
    """Two Linear layers with a ReLU between them (MNIST's 784-256-10 at full size)."""
    check_size(size, batch)
    n_in, hidden, n_out = MLP[size]

    def forward_np(w, inputs):
        return linear(np.maximum(linear(inputs[0], w, "fc1"), 0.0), w, "fc2")

    flops = 2 * batch * (n_in * hidden + hidden * n_out)
    return make_model(
        "mlp", size, batch, seed, _MLP(MLP[size]), {"x": (batch, n_in)}, flops, forward_np
    )


@dataclass(frozen=True)
class Stack:
    """A stack of ResNet basic blocks on (channels, height, width) feature maps."""

    channels: int
    height: int
    width: int
    blocks: int = 2


RESNET = {"full": Stack(64, 56, 56), "small": Stack(8, 8, 8)}  # ResNet-18/34's conv2_x stage


class _BasicBlock(nn.Module):
    # Inference-time BatchNorm is a per-channel affine map: folded into the convolution's
    # weight and bias, as deployment does, it leaves conv + bias + ReLU.
    def __init__(self, channels: int):
        self.conv1 = nn.Conv2D(channels, channels, 3, padding=1, bias=True)
        self.conv2 = nn.Conv2D(channels, channels, 3, padding=1, bias=True)

    def forward(self, x):
        return nn.op.relu(self.conv2(nn.op.relu(self.conv1(x))) + x)


class _Stack(nn.Module):
    def __init__(self, stack: Stack):
        self.blocks = nn.ModuleList([_BasicBlock(stack.channels) for _ in range(stack.blocks)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


def _resnet_np(w: dict[str, np.ndarray], x: np.ndarray, blocks: int) -> np.ndarray:
    for i in range(blocks):
        p = f"blocks.{i}"
        y = np.maximum(conv2d_3x3(x, w[f"{p}.conv1.weight"], w[f"{p}.conv1.bias"]), 0.0)
        x = np.maximum(conv2d_3x3(y, w[f"{p}.conv2.weight"], w[f"{p}.conv2.bias"]) + x, 0.0)
    return x


def resnet(size: str = "full", batch: int = 1, seed: int = 0) -> Model:
    """ResNet basic blocks (3x3 conv + bias + ReLU, twice, plus the residual), NCHW."""
    check_size(size, batch)
    s = RESNET[size]

    def forward_np(w, inputs):
        return _resnet_np(w, inputs[0], s.blocks)

    flops = 2 * s.blocks * 2 * batch * s.channels**2 * 9 * s.height * s.width
    shape = (batch, s.channels, s.height, s.width)
    return make_model("resnet", size, batch, seed, _Stack(s), {"x": shape}, flops, forward_np)
