"""The kernel suite: what to compute, with a numpy reference, FLOP and byte counts.

Each constructor validates its arguments and returns a :class:`Workload`. FLOPs count every
add, multiply, compare, exp, division and square root as one operation, in closed form:
matmul ``2*M*N*K``; softmax ``5*M*N`` (max, subtract, exp, sum, divide); layernorm ``8*M*N``
(mean, centre, square, sum, scale, shift); rmsnorm ``4*M*N``; axpy ``2*n``; conv2d
``2*N*F*OH*OW*C*KH*KW``. ``min_bytes`` is what any implementation must move: each parameter
read or written once.
"""

from __future__ import annotations

import json
from typing import Callable

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import checked_int
from tvm_ext.base.tvm_api import te
from tvm_ext.workloads.kernel_base import (  # noqa: F401  (re-exported: the suite's public names)
    ACC_DTYPE,
    FLOAT_DTYPES,
    MATMUL_DTYPES,
    ROW_DTYPES,
    WORKLOAD_ATTR,
    Workload,
    b_dtype_of,
    check_dims,
    check_dtype,
    make_workload,
    np_dtype,
    random_array,
    widen,
)
from tvm_ext.workloads.kernels_rows import axpy, layernorm, rmsnorm, softmax  # noqa: F401


def matmul(M: int, N: int, K: int, dtype: str = "float32", transpose_b: bool = False) -> Workload:
    """``C[M, N] = A[M, K] @ B[K, N]`` (``B[N, K]`` when ``transpose_b``), accumulated wide."""
    check_dims(M=M, N=N, K=K)
    check_dtype(dtype, MATMUL_DTYPES, "matmul")
    if not isinstance(transpose_b, bool):
        raise TypeError(f"transpose_b={transpose_b!r} must be a bool")
    acc = ACC_DTYPE[dtype]
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((N, K) if transpose_b else (K, N), b_dtype_of(dtype), name="B")
    k = te.reduce_axis((0, K), name="k")

    def b_at(kk, j):
        return B[j, kk] if transpose_b else B[kk, j]

    C = te.compute(
        (M, N), lambda i, j: te.sum(A[i, k].astype(acc) * b_at(k, j).astype(acc), axis=k), name="C"
    )
    args = {"M": M, "N": N, "K": K, "dtype": dtype}
    if transpose_b:
        args["transpose_b"] = True
    b_shape = (N, K) if transpose_b else (K, N)
    return make_workload(
        "matmul",
        args,
        [A, B, C],
        2 * M * N * K,
        dtype,
        lambda rng: [
            random_array(rng, (M, K), dtype),
            random_array(rng, b_shape, b_dtype_of(dtype)),
        ],
        lambda a: [widen(a[0]) @ (widen(a[1]).T if transpose_b else widen(a[1]))],
    )


def batch_matmul(batch: int, M: int, N: int, K: int, dtype: str = "float32") -> Workload:
    """``C[b, M, N] = A[b, M, K] @ B[b, K, N]``, accumulated wide."""
    check_dims(batch=batch, M=M, N=N, K=K)
    check_dtype(dtype, MATMUL_DTYPES, "batch_matmul")
    acc = ACC_DTYPE[dtype]
    A = te.placeholder((batch, M, K), dtype, name="A")
    B = te.placeholder((batch, K, N), b_dtype_of(dtype), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute(
        (batch, M, N),
        lambda b, i, j: te.sum(A[b, i, k].astype(acc) * B[b, k, j].astype(acc), axis=k),
        name="C",
    )
    return make_workload(
        "batch_matmul",
        {"batch": batch, "M": M, "N": N, "K": K, "dtype": dtype},
        [A, B, C],
        2 * batch * M * N * K,
        dtype,
        lambda rng: [
            random_array(rng, (batch, M, K), dtype),
            random_array(rng, (batch, K, N), b_dtype_of(dtype)),
        ],
        lambda a: [np.matmul(widen(a[0]), widen(a[1]))],
    )


def conv2d(
    N: int,
    C: int,
    H: int,
    W: int,
    F: int,
    KH: int = 3,
    KW: int = 3,
    stride: int = 1,
    padding: int = 0,
    dtype: str = "float32",
) -> Workload:
    """NCHW convolution of ``X[N, C, H, W]`` with ``Wt[F, C, KH, KW]``, zero padding."""
    check_dims(N=N, C=C, H=H, W=W, F=F, KH=KH, KW=KW, stride=stride)
    checked_int("padding", padding, minimum=0)
    check_dtype(dtype, FLOAT_DTYPES, "conv2d")
    OH, OW = (H + 2 * padding - KH) // stride + 1, (W + 2 * padding - KW) // stride + 1
    if OH < 1 or OW < 1:
        raise ValueError(f"kernel {KH}x{KW} does not fit the padded input {H}x{W} ({padding=})")
    acc = ACC_DTYPE[dtype]
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((F, C, KH, KW), dtype, name="W")
    Xp = te.compute(
        (N, C, H + 2 * padding, W + 2 * padding),
        lambda n, c, h, w: tvm_api.tirx.if_then_else(
            tvm_api.tirx.all(h >= padding, h < H + padding, w >= padding, w < W + padding),
            X[n, c, h - padding, w - padding],
            tvm_api.tirx.const(0, dtype),
        ),
        name="pad",
    )
    c, r, s = (
        te.reduce_axis((0, C), "c"),
        te.reduce_axis((0, KH), "r"),
        te.reduce_axis((0, KW), "s"),
    )
    Y = te.compute(
        (N, F, OH, OW),
        lambda n, f, y, x: te.sum(
            Xp[n, c, y * stride + r, x * stride + s].astype(acc) * Wt[f, c, r, s].astype(acc),
            axis=[c, r, s],
        ),
        name="conv",
    )

    def reference(a):
        x = np.pad(widen(a[0]), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
        win = np.lib.stride_tricks.sliding_window_view(x, (KH, KW), axis=(2, 3))
        win = win[:, :, ::stride, ::stride][:, :, :OH, :OW]
        return [np.einsum("ncyxrs,fcrs->nfyx", win, widen(a[1]), optimize=True)]

    args = {
        "N": N,
        "C": C,
        "H": H,
        "W": W,
        "F": F,
        "KH": KH,
        "KW": KW,
        "stride": stride,
        "padding": padding,
        "dtype": dtype,
    }
    return make_workload(
        "conv2d",
        args,
        [X, Wt, Y],
        2 * N * F * OH * OW * C * KH * KW,
        dtype,
        lambda rng: [
            random_array(rng, (N, C, H, W), dtype),
            random_array(rng, (F, C, KH, KW), dtype),
        ],
        reference,
    )


SUITE: dict[str, Callable[..., Workload]] = {
    "matmul": matmul,
    "batch_matmul": batch_matmul,
    "conv2d": conv2d,
    "softmax": softmax,
    "layernorm": layernorm,
    "rmsnorm": rmsnorm,
    "axpy": axpy,
}


def from_func(func) -> Workload | None:
    """The suite workload a PrimFunc was built from (it survives scheduling), else None."""
    attrs = func.attrs
    if attrs is None or WORKLOAD_ATTR not in attrs:
        return None
    spec = json.loads(str(attrs[WORKLOAD_ATTR]))
    return SUITE[spec["kernel"]](**spec["args"])


# Input dtypes with a dot-product instruction on some CPU (AVX512-BF16 ``vdpbf16ps``, VNNI
# ``vpdpbusd``): a matmul of these is worth recognizing wherever it appears.
DOT_DTYPES = ("bfloat16", "uint8")


def by_structure(func, dtypes=DOT_DTYPES) -> Workload | None:
    """The suite matmul or batch_matmul (B transposed or not) that ``func`` computes, found by
    structure (a user's own TE or TVMScript kernel, whatever its names), for inputs of
    ``dtypes``; else None."""
    try:
        specs = tvm_api.param_specs(func)
    except ValueError:  # a scalar or symbolic parameter: not a suite matmul
        return None
    if len(specs) != 3 or specs[0][1] not in dtypes:
        return None
    (a, dtype), (b, _), (c, _) = specs
    if len(a) == 2 and len(c) == 2:
        M, K = a
        N = c[1]
        candidates = [(matmul, (M, N, K, dtype, t)) for t in (False, True)]
    elif len(a) == 3 and len(c) == 3:
        candidates = [(batch_matmul, (a[0], a[1], c[2], a[2], dtype))]
    else:
        return None
    bare = _without_attrs(func)
    for make, args in candidates:
        try:
            workload = make(*args)
        except (ValueError, TypeError):
            continue
        if tvm_api.same_structure(bare, _without_attrs(workload.func)):
            return workload
    return None


def _without_attrs(func):
    """The function with no attributes (a model's functions carry Relax's, a user's TE none
    of ours): only what it computes is compared."""
    for key in list(func.attrs.keys()) if func.attrs else []:
        func = func.without_attr(key)
    return func
