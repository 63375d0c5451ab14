"""``fills_as_scalars``: a ``where`` operand of one repeated value is a scalar (torch's guarded
softmax read a tensor of zeros as large as its scores), the values unchanged, a fill that
sets the result's shape kept."""

from __future__ import annotations

import numpy as np
import torch

import tvm_ext
from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.fills import fills_as_scalars


class _Attention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _where_operands(mod) -> list[tuple]:
    return [
        tuple(tvm_api.tensor_dims(a) for a in value.args)
        for _, value in tvm_api.bindings(mod["main"])
        if tvm_api.call_name(value) == "relax.where"
    ]


def test_the_guarded_softmax_selects_a_scalar_zero_and_masked_rows_stay_zero():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 3, 21, 8) for _ in range(3))
    mask = torch.zeros(1, 1, 21, 21)
    mask[..., 4, :] = -float("inf")  # a row masked out entirely: torch's guard gives zeros
    mask[..., 9, 5:] = -float("inf")
    model = tvm_ext.from_torch(_Attention().eval(), (q, k, v, mask), name="attention")
    assert _where_operands(model.mod) == [((1, 3, 21, 1), (1, 3, 21, 21), (1, 3, 21, 21))]
    assert _where_operands(fills_as_scalars(model.mod)) == [((1, 3, 21, 1), (), (1, 3, 21, 21))]
    compiled = tvm_ext.compile(model)  # parity against torch first
    got = compiled.run(q.numpy(), k.numpy(), v.numpy(), mask.numpy())
    assert np.all(got[0, :, 4] == 0) and np.abs(got[0, :, 9]).max() > 0
    with torch.no_grad():
        np.testing.assert_allclose(got, _Attention()(q, k, v, mask).numpy(), atol=1e-5)


def test_a_fill_that_sets_the_shape_is_kept():
    bb = tvm_api.relax.BlockBuilder()
    cond = tvm_api.relax.Var("cond", tvm_api.relax.TensorType((1, 4), "bool"))
    x = tvm_api.relax.Var("x", tvm_api.relax.TensorType((1, 4), "float32"))
    y = tvm_api.relax.Var("y", tvm_api.relax.TensorType((3, 4), "float32"))
    zero = tvm_api.relax.const(0.0, "float32")
    with bb.function("main", [cond, x, y]):
        with bb.dataflow():
            wide = bb.emit(tvm_api.relax.op.full_like(y, zero))
            picked = bb.emit(tvm_api.relax.op.where(cond, wide, x))
            scaled = bb.emit(tvm_api.relax.op.where(cond, tvm_api.relax.op.zeros_like(x), x))
            out = bb.emit_output(tvm_api.relax.op.add(picked, scaled))
        bb.emit_func_output(out)
    mod = bb.get()
    assert _where_operands(fills_as_scalars(mod)) == [
        ((1, 4), (3, 4), (1, 4)),
        ((1, 4), (), (1, 4)),
    ]
