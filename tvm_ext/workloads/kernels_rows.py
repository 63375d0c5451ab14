"""The suite's row and element-wise kernels: softmax, layernorm, rmsnorm (TE) and axpy
(TVMScript). FLOP conventions are in :mod:`tvm_ext.workloads.kernels`."""

from __future__ import annotations

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.tvm_api import te
from tvm_ext.workloads.kernel_base import (
    ROW_DTYPES,
    Workload,
    check_dims,
    check_dtype,
    check_eps,
    make_workload,
    np_dtype,
    random_array,
    widen,
)
from tvm_ext.workloads.kernels_script import axpy_func


def exp_poly(x):
    """``exp(x)`` of a float32 expression without a libm call, so LLVM can vectorize it:
    ``2**n * p(r)`` with ``n = round(x / ln 2)``, ``r = x - n ln 2`` (in two parts) and Cephes'
    degree-6 ``expf`` polynomial; ``x`` is clamped to [-87.3, 88.3] (the float32 normal range).
    Relative error below 3e-7 (checked against numpy in tests/test_kernels.py)."""
    f32 = lambda v: tvm_api.tirx.const(v, "float32")  # noqa: E731
    x = te.min(te.max(x, f32(-87.33654)), f32(88.37626))
    n = te.floor(x * f32(1.44269504088896341) + f32(0.5))
    r = x - n * f32(0.693359375) + n * f32(2.12194440e-4)
    p = f32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + f32(c)
    two_n = tvm_api.tirx.reinterpret("float32", (n.astype("int32") + 127) << 23)
    return (p * r * r + r + f32(1.0)) * two_n


EXP_IMPLEMENTATIONS = ("libm", "poly")


def softmax(M: int, N: int, dtype: str = "float32", exp: str = "libm") -> Workload:
    """Row softmax over the last axis of ``X[M, N]``, computed in fp32.

    ``exp="libm"`` calls the C library's ``expf`` (one scalar call per element: LLVM has no
    vector math library here); ``exp="poly"`` computes it with :func:`exp_poly`, which
    vectorizes. Both are checked against numpy's ``exp``."""
    check_dims(M=M, N=N)
    check_dtype(dtype, ROW_DTYPES, "softmax")
    if exp not in EXP_IMPLEMENTATIONS:
        raise ValueError(f"exp={exp!r}: choose one of {EXP_IMPLEMENTATIONS}")
    expf = te.exp if exp == "libm" else exp_poly
    X = te.placeholder((M, N), dtype, name="X")
    k1, k2 = te.reduce_axis((0, N), "k1"), te.reduce_axis((0, N), "k2")
    mx = te.compute((M,), lambda i: te.max(X[i, k1].astype("float32"), axis=k1), name="row_max")
    ex = te.compute((M, N), lambda i, j: expf(X[i, j].astype("float32") - mx[i]), name="exp")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="row_sum")
    Y = te.compute((M, N), lambda i, j: (ex[i, j] / sm[i]).astype(dtype), name="softmax")

    def reference(a):
        x = widen(a[0])
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return [e / e.sum(axis=-1, keepdims=True)]

    return make_workload(
        "softmax",
        {"M": M, "N": N, "dtype": dtype} | ({"exp": exp} if exp != "libm" else {}),
        [X, Y],
        5 * M * N,
        dtype,
        lambda rng: [random_array(rng, (M, N), dtype, -4.0, 4.0)],
        reference,
    )


def layernorm(M: int, N: int, dtype: str = "float32", eps: float = 1e-5) -> Workload:
    """LayerNorm over the last axis of ``X[M, N]`` with ``gamma[N]``, ``beta[N]``, in fp32."""
    check_dims(M=M, N=N)
    check_dtype(dtype, ROW_DTYPES, "layernorm")
    check_eps(eps)
    X = te.placeholder((M, N), dtype, name="X")
    g, b = te.placeholder((N,), dtype, name="gamma"), te.placeholder((N,), dtype, name="beta")
    k1, k2 = te.reduce_axis((0, N), "k1"), te.reduce_axis((0, N), "k2")
    # TE allows a reduction only at the top of a stage: the two sums are stages of their own.
    total = te.compute((M,), lambda i: te.sum(X[i, k1].astype("float32"), axis=k1), name="row_sum")
    sq = te.compute(
        (M,),
        lambda i: te.sum(te.power(X[i, k2].astype("float32") - total[i] / N, 2), axis=k2),
        name="row_sqdev",
    )
    Y = te.compute(
        (M, N),
        lambda i, j: (
            (X[i, j].astype("float32") - total[i] / N)
            * te.rsqrt(sq[i] / N + eps)
            * g[j].astype("float32")
            + b[j].astype("float32")
        ).astype(dtype),
        name="layernorm",
    )

    def reference(a):
        x = widen(a[0])
        mu = x.mean(axis=-1, keepdims=True)
        var_ = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return [(x - mu) / np.sqrt(var_ + eps) * widen(a[1]) + widen(a[2])]

    return make_workload(
        "layernorm",
        {"M": M, "N": N, "eps": eps, "dtype": dtype},
        [X, g, b, Y],
        8 * M * N,
        dtype,
        lambda rng: [
            random_array(rng, (M, N), dtype),
            random_array(rng, (N,), dtype),
            random_array(rng, (N,), dtype),
        ],
        reference,
    )


def rmsnorm(M: int, N: int, dtype: str = "float32", eps: float = 1e-6) -> Workload:
    """RMSNorm over the last axis of ``X[M, N]`` with ``weight[N]``, in fp32."""
    check_dims(M=M, N=N)
    check_dtype(dtype, ROW_DTYPES, "rmsnorm")
    check_eps(eps)
    X = te.placeholder((M, N), dtype, name="X")
    w = te.placeholder((N,), dtype, name="weight")
    k = te.reduce_axis((0, N), "k")
    ss = te.compute(
        (M,),
        lambda i: te.sum(X[i, k].astype("float32") * X[i, k].astype("float32"), axis=k),
        name="sumsq",
    )
    Y = te.compute(
        (M, N),
        lambda i, j: (
            X[i, j].astype("float32") * te.rsqrt(ss[i] / N + eps) * w[j].astype("float32")
        ).astype(dtype),
        name="rmsnorm",
    )

    def reference(a):
        x = widen(a[0])
        return [x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * widen(a[1])]

    return make_workload(
        "rmsnorm",
        {"M": M, "N": N, "eps": eps, "dtype": dtype},
        [X, w, Y],
        4 * M * N,
        dtype,
        lambda rng: [random_array(rng, (M, N), dtype), random_array(rng, (N,), dtype)],
        reference,
    )


def axpy(n: int, alpha: float = 2.0, dtype: str = "float32") -> Workload:
    """``z = alpha * x + y`` over ``n`` elements (written in TVMScript, not TE)."""
    check_dims(n=n)
    check_dtype(dtype, ROW_DTYPES, "axpy")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not np.isfinite(alpha):
        raise ValueError(f"alpha={alpha!r} must be a finite number")
    alpha = float(alpha)
    return make_workload(
        "axpy",
        {"n": n, "alpha": alpha, "dtype": dtype},
        None,
        2 * n,
        dtype,
        lambda rng: [random_array(rng, (n,), dtype), random_array(rng, (n,), dtype)],
        lambda a: [np.float64(np_dtype(dtype).type(alpha)) * widen(a[0]) + widen(a[1])],
        func=axpy_func(n, alpha, dtype),
    )
