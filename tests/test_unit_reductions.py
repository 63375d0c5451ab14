"""Reductions over a unit domain (a 1x1 depthwise convolution, a matmul with K = 1, a maximum
over one element), with element-wise consumers the rules inline into them: each checked against
the unscheduled build of the same function. Before ``rules.unit_reductions``, the depthwise
case computed ``relu(x * w + 2 * bias)``: its block, unit iterators dropped by dlight's
normalization, kept its ``T.init`` and ran it on every iteration after the bias was inlined
into both."""

from __future__ import annotations

import numpy as np
import pytest
from rule_checks import run_built
from tvm import relax, te, tirx
from tvm_ext.schedules.rules import unit_reductions

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api


def _depthwise_1x1(channels: int):
    from tvm_ext.workloads.legalized import legalized_func

    def build(x, w, b):
        op = relax.op
        conv = op.nn.conv2d(x, w, groups=channels, data_layout="NHWC", kernel_layout="OHWI")
        return op.nn.relu(op.add(conv, b))

    params = [("x", (1, 7, 9, channels)), ("w", (channels, 1, 1, 1)), ("b", (1, 1, 1, channels))]
    return legalized_func(build, params)


def _matmul_k1():
    a, b = te.placeholder((13, 1), name="a"), te.placeholder((1, 24), name="b")
    bias = te.placeholder((24,), name="bias")
    k = te.reduce_axis((0, 1), name="k")
    mm = te.compute((13, 24), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="mm")
    out = te.compute((13, 24), lambda i, j: mm[i, j] + bias[j], name="out")
    return te.create_prim_func([a, b, bias, out])


def _max_over_one():
    x = te.placeholder((5, 1, 40), name="x")
    r = te.reduce_axis((0, 1), name="r")
    top = te.compute((5, 40), lambda i, j: te.max(x[i, r, j], axis=r), name="top")
    out = te.compute((5, 40), lambda i, j: top[i, j] * 2.0 - 1.0, name="out")
    return te.create_prim_func([x, out])


@pytest.mark.parametrize(
    "make", [lambda: _depthwise_1x1(16), lambda: _depthwise_1x1(12), _matmul_k1, _max_over_one]
)
def test_a_reduction_over_one_element_keeps_its_consumers_once(host, make):
    func = make().with_attr("global_symbol", "main")
    folded = unit_reductions.folded(func)
    assert folded is not func
    assert all(block.init is None for block in tvm_api.sblocks(folded))
    sch, _rule = S.rules.schedule_func(func, host)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape).astype(dtype) for shape, dtype in tvm_api.param_specs(func)]
    want = run_built(tvm_api.IRModule({"main": func}), [a.copy() for a in args], host)
    got = run_built(sch.mod, [a.copy() for a in args], host)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


def test_a_real_reduction_is_left_as_it_is():
    a, b = te.placeholder((8, 3), name="a"), te.placeholder((3, 8), name="b")
    k = te.reduce_axis((0, 3), name="k")
    mm = te.compute((8, 8), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="mm")
    func = te.create_prim_func([a, b, mm])
    assert unit_reductions.folded(func) is func
    assert isinstance(func, tirx.PrimFunc)


def test_a_torch_depthwise_1x1_convolution_compiles_to_torchs_output():
    torch = pytest.importorskip("torch")
    import tvm_ext

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(16, 16, 1, groups=16), torch.nn.ReLU(), torch.nn.Conv2d(16, 8, 3, padding=1)
    ).eval()
    x = torch.randn(1, 16, 10, 10)
    compiled = tvm_ext.compile(tvm_ext.from_torch(model, (x,)))  # raises ParityError if wrong
    assert compiled.checked
    np.testing.assert_allclose(compiled.run(x.numpy()), model(x).detach().numpy(), atol=1e-4)
