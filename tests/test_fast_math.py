"""Element-wise math a model holds runs as vector arithmetic, not per-element libm calls:
GELU (erf and tanh forms), the sigmoid, and powers with a constant exponent, each checked
against torch, and the lowered module checked for the libm calls the rewrites remove."""

from __future__ import annotations

import numpy as np
import torch

import tvm_ext
from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.compile import ModelSource, bind_and_lower, cpu_target


class _Math(torch.nn.Module):
    def forward(self, x):
        gelu = torch.nn.functional.gelu(x) + torch.nn.functional.gelu(x, approximate="tanh")
        silu = x * torch.sigmoid(x)
        powers = x**2 + x**3 + x.pow(4) + (x.abs() + 1.0) ** 0.5
        return gelu + silu + powers + (x.abs() + 1.0) ** 2.5  # 2.5: left to powf


def _lowered_text(model) -> str:
    mod = bind_and_lower(ModelSource.of(model, None, None, None), cpu_target(None))
    return "\n".join(f.script() for f in mod.functions.values() if isinstance(f, tvm_api.PrimFunc))


def test_activations_and_powers_match_torch_without_libm_calls():
    x = torch.randn(4, 40) * 2
    model = tvm_ext.from_torch(_Math().eval(), (x,), name="math")
    compiled = tvm_ext.compile(model)
    with torch.no_grad():
        want = _Math()(x).numpy()
    got = compiled.run(x.numpy())
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    text = _lowered_text(model)
    assert "T.erf(" not in text and "T.tanh(" not in text and "T.exp(" not in text
    # One powf is left: x ** 2.5, which no product or sqrt writes exactly.
    assert text.count("T.pow(") == 1


class _SiLU(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.silu(x)


def test_silu_is_one_block_of_onnxruntime_s_logistic_and_a_bare_sigmoid_keeps_its_tail():
    """SiLU (``x * sigmoid(x)``, as torch exports it) is legalized as one block with MLAS's
    rational logistic: no ``exp`` in it, within its absolute error of torch over the whole
    float range (clamped past 18, infinities included); a bare sigmoid keeps the ``exp`` form,
    whose relative error holds far in the negative tail, where the rational's does not."""
    x = torch.cat([torch.linspace(-30, 30, 4001), torch.tensor([float("inf"), -float("inf")])])
    x = x.reshape(1, -1)
    silu = tvm_ext.from_torch(_SiLU().eval(), (x,), name="silu")
    got = tvm_ext.compile(silu).run(x.numpy())
    with torch.no_grad():
        want = _SiLU()(x.double()).numpy()
    finite = np.isfinite(want)
    assert np.array_equal(got[~finite], want[~finite], equal_nan=True)  # inf * 1, -inf * 0
    np.testing.assert_array_less(
        np.abs(got[finite] - want[finite]), 2.5e-7 * np.abs(x.numpy()[finite]) + 1e-6
    )
    silu_funcs = [
        f.script() for gv, f in _lowered(silu).functions.items()
        if isinstance(f, tvm_api.PrimFunc) and "silu" in gv.name_hint
    ]  # fmt: skip
    assert len(silu_funcs) == 1 and "T.exp(" not in silu_funcs[0]
    assert silu_funcs[0].count('T.sblock("silu")') == 1 and "exp" not in silu_funcs[0]

    class _Sigmoid(torch.nn.Module):
        def forward(self, x):
            return torch.sigmoid(x)

    tail = torch.linspace(-15, -10, 101).reshape(1, -1)
    sigmoid = tvm_ext.from_torch(_Sigmoid().eval(), (tail,), name="sigmoid")
    got = tvm_ext.compile(sigmoid).run(tail.numpy())
    np.testing.assert_allclose(got, torch.sigmoid(tail.double()).numpy(), rtol=1e-5)


def _lowered(model):
    return bind_and_lower(ModelSource.of(model, None, None, None), cpu_target(None))
