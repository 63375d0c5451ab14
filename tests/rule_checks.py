"""Checks the rule tests share: a function scheduled by the rules computes what its plain build
does, and a user's TE matmul to schedule."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import te

from tvm_ext import schedules as S
from tvm_ext.base import tvm_api


def run_built(mod, func_args, target):
    """Build ``mod`` for ``target``, run it on ``func_args`` (its last is the output), return
    the output."""
    lib = tvm.tirx.build(mod, target=target)
    dev = tvm.cpu()
    tensors = [tvm.runtime.tensor(a, dev) for a in func_args]
    with tvm_api.threads(int(target.attrs["num-cores"])):
        lib(*tensors)
    return tensors[-1].numpy()


def check_rule(func, target, rule: str, rtol=1e-5):
    """Schedule ``func``; assert ``rule`` took it and it computes what the plain build does."""
    func = func.with_attr("global_symbol", "main")
    sch, took = S.rules.schedule_func(func, target)
    assert took == rule
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(shape).astype(dtype) for shape, dtype in tvm_api.param_specs(func)]
    want = run_built(tvm_api.IRModule({"main": func}), [a.copy() for a in args], target)
    got = run_built(sch.mod, [a.copy() for a in args], target)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())
    return sch


def script(sch) -> str:
    """The TVMScript of a schedule's module."""
    return sch.mod.script()


def user_matmul_bias_relu(M, N, K):
    """A user's own TE kernel with an epilogue."""
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    bias = te.placeholder((N,), name="bias")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((M, N), lambda i, j: te.max(C[i, j] + bias[j], 0.0), name="D")
    return te.create_prim_func([A, B, bias, D])


def se_gate(c: int, k: int, h: int):
    """A squeeze-excitation gate: a GEMV of ``c`` channels over ``k`` (a 1x1 convolution on a
    1 x 1 map), its bias and sigmoid, multiplying an ``h x h x c`` map; weight and bias
    layout-free."""
    from tvm import topi

    x = te.placeholder((1, k), name="x")
    w = te.placeholder((c, k), name="w")
    b = te.placeholder((c,), name="b")
    fmap = te.placeholder((h, h, c), name="fmap")
    r = te.reduce_axis((0, k), name="r")
    y = te.compute((1, c), lambda i, j: te.sum(x[i, r] * w[j, r], axis=r), name="y")
    z = te.compute((1, c), lambda i, j: y[i, j] + b[j], name="z")
    e = topi.fast_exp(topi.negative(z))
    g = te.compute((1, c), lambda i, j: 1.0 / (1.0 + e[i, j]), name="g")
    out = te.compute((h, h, c), lambda u, v, j: fmap[u, v, j] * g[0, j], name="out")
    return te.create_prim_func([x, w, b, fmap, out]).with_attr("layout_free_buffers", [1, 2])
