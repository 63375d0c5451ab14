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
