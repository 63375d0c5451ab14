"""``transposes_carried``: a transpose carried through the reshapes, transposes, splits and
concatenations after it until one undoes it (ShuffleNet's channel shuffle in a channels-last
graph), values unchanged; a chain nothing undoes is left as it was."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

import tvm_ext
from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.transposes import transposes_carried


def _module(shape, chain):
    """A Relax module of one input of ``shape`` whose body is ``chain(bb, x)``."""
    x = relax.Var("x", relax.TensorType(shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(chain(bb, x))
        bb.emit_func_output(out)
    return bb.get()


def _shuffle(bb, x):
    """NHWC in: to NCHW, the channel shuffle of two groups, a split of the channels, each
    piece back to NHWC, concatenated in the other order."""
    op = relax.op
    n, h, w, c = (int(d) for d in x.ty.shape.values)
    v = bb.emit(op.permute_dims(x, [0, 3, 1, 2]))
    v = bb.emit(op.reshape(v, (n, 2, c // 2, h, w)))
    v = bb.emit(op.permute_dims(v, [0, 2, 1, 3, 4]))
    v = bb.emit(op.reshape(v, (n, c, h, w)))
    pieces = bb.emit(op.split(v, [c // 3], axis=1))
    a = bb.emit(op.permute_dims(bb.emit(relax.TupleGetItem(pieces, 0)), [0, 2, 3, 1]))
    b = bb.emit(op.permute_dims(bb.emit(relax.TupleGetItem(pieces, 1)), [0, 2, 3, 1]))
    return op.concat([b, a], axis=3)


def _shuffle_numpy(x):
    n, h, w, c = x.shape
    v = x.transpose(0, 3, 1, 2).reshape(n, 2, c // 2, h, w).transpose(0, 2, 1, 3, 4)
    v = v.reshape(n, c, h, w)
    a, b = v[:, : c // 3], v[:, c // 3 :]
    return np.concatenate([b.transpose(0, 2, 3, 1), a.transpose(0, 2, 3, 1)], axis=3)


def _undone(bb, x):
    """A transpose, reshapes that drop and insert unit axes, a transpose and a reshape back:
    the identity, written the long way."""
    op = relax.op
    v = bb.emit(op.permute_dims(x, [0, 3, 1, 2]))  # (1, 8, 4, 6)
    v = bb.emit(op.reshape(v, (8, 1, 24)))
    v = bb.emit(op.permute_dims(v, [1, 2, 0]))  # (1, 24, 8)
    return op.reshape(v, (1, 4, 6, 8))


def _flattened(bb, x):
    """To NCHW and flattened (a classifier's input): nothing undoes the transpose."""
    v = bb.emit(relax.op.permute_dims(x, [0, 3, 1, 2]))
    return relax.op.reshape(v, (1, -1))


def _run(mod, x):
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


def _transposes(mod) -> int:
    calls = [tvm_api.call_name(v) for _, v in tvm_api.bindings(mod["main"])]
    return calls.count("relax.permute_dims")


@pytest.mark.parametrize(
    "shape, chain, reference, left",
    [((1, 5, 3, 12), _shuffle, _shuffle_numpy, 1), ((1, 4, 6, 8), _undone, lambda x: x, 0)],
)
def test_a_transpose_carried_until_undone_leaves_the_values(shape, chain, reference, left):
    mod = _module(shape, chain)
    carried = transposes_carried(mod)
    # The shuffle keeps the one transpose that moves data (its two channel groups), in NHWC.
    assert _transposes(carried) == left < _transposes(mod)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    np.testing.assert_array_equal(_run(carried, x), reference(x))
    np.testing.assert_array_equal(_run(mod, x), reference(x))


def test_a_transpose_nothing_undoes_stays():
    mod = _module((1, 3, 3, 4), _flattened)
    assert transposes_carried(mod) is mod


class _ShuffleNet(torch.nn.Module):
    """A stem convolution, two ShuffleNet v2 units over 10 channels (half passes, half goes
    through 1x1, depthwise 3x3 and 1x1 convolutions; concatenated, shuffled in two groups),
    the halves of the last shuffle added and a last convolution."""

    def __init__(self):
        super().__init__()
        nn = torch.nn
        self.stem = nn.Conv2d(3, 10, 3, 1, 1)
        self.branches = nn.ModuleList(
            nn.Sequential(
                nn.Conv2d(5, 5, 1),
                nn.ReLU(),
                nn.Conv2d(5, 5, 3, 1, 1, groups=5),
                nn.Conv2d(5, 5, 1),
            )
            for _ in range(2)
        )
        self.out = nn.Conv2d(5, 6, 1)

    def forward(self, x):
        x = self.stem(x)
        for branch in self.branches:
            a, b = x.chunk(2, dim=1)
            x = torch.cat((a, branch(b)), dim=1)
            n, c, h, w = x.shape
            x = x.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        a, b = x.chunk(2, dim=1)
        return self.out(a + b)


def test_a_channel_shuffle_runs_channels_last_with_no_transpose_between_convolutions():
    torch.manual_seed(0)
    module = _ShuffleNet().eval()
    x = torch.randn(1, 3, 9, 9)
    compiled = tvm_ext.compile(tvm_ext.from_torch(module, (x,), name="shuffle_unit"))
    with torch.no_grad():
        want = module(x).numpy()
    got = compiled.run(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * abs(want).max())
    # One transform in, one out: the chunk, the shuffle, the split and the sum run in NHWC
    # (the shuffle's own transpose fused with them).
    moves = [k for k in compiled.kernels if re.fullmatch(r"(fused_)?transpose\d*", k)]
    assert len(moves) == 2, compiled.kernels
    shuffles = [k for k in compiled.kernels if "concatenate" in k]
    assert len(shuffles) == 2 and "add" in shuffles[-1], compiled.kernels
