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
from dataclasses import dataclass, field
from typing import Callable, Sequence

import ml_dtypes
import numpy as np

from . import _tvm
from ._kernels_script import axpy_func
from ._tvm import te

FLOAT_DTYPES = ("float32", "float16", "bfloat16")
# "uint8" is x86's VNNI operand convention: A uint8, B int8, int32 accumulation.
MATMUL_DTYPES = FLOAT_DTYPES + ("int8", "uint8")
ROW_DTYPES = ("float32", "float16")
# Accumulation (and output) dtype per input dtype: fp32 accumulation for narrow floats (the
# WMMA/AMX/AVX512-BF16 contract), int32 for int8 (the VNNI contract).
ACC_DTYPE = {
    "float32": "float32",
    "float16": "float32",
    "bfloat16": "float32",
    "int8": "int32",
    "uint8": "int32",
}


def _b_dtype(dtype: str) -> str:
    return "int8" if dtype == "uint8" else dtype


WORKLOAD_ATTR = "tvm_ext.workload"


def np_dtype(dtype: str) -> np.dtype:
    """The numpy dtype for a TVM dtype string (bfloat16 via ml_dtypes)."""
    return np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)


@dataclass(frozen=True, eq=False)
class Workload:
    """One kernel at one shape: the PrimFunc, its cost in closed form and its reference.

    ``inputs(seed)`` returns numpy arrays for every parameter of ``func`` in order (outputs
    zero-filled); ``reference(arrays)`` returns the expected outputs (float64 or int64), one per
    index in ``outputs``.
    """

    name: str
    args: dict
    func: "_tvm.PrimFunc"
    flops: int
    min_bytes: int
    dtype: str
    outputs: tuple[int, ...]
    _make_inputs: Callable[[np.random.Generator], list[np.ndarray]] = field(repr=False)
    _reference: Callable[[Sequence[np.ndarray]], list[np.ndarray]] = field(repr=False)

    @property
    def key(self) -> str:
        """A stable, readable key: ``matmul_M512_N512_K512_float32``."""
        parts = [self.name] + [f"{k}{v}" for k, v in self.args.items() if k != "dtype"]
        return "_".join(parts + [self.dtype]).replace(".", "p")

    def inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Numpy arrays for every parameter, drawn from ``seed``; outputs are zeros."""
        return self._make_inputs(np.random.default_rng(seed))

    def reference(self, arrays: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The expected outputs for ``arrays`` (as returned by :meth:`inputs`), in float64/int64."""
        return self._reference(arrays)


def _check_dims(**dims) -> None:
    for name, value in dims.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")


def _check_dtype(dtype, choices: Sequence[str], kernel: str) -> None:
    if dtype not in choices:
        raise ValueError(
            f"{kernel}: dtype={dtype!r} is not supported; choose one of {tuple(choices)}"
        )


def _random(rng: np.random.Generator, shape, dtype: str, low=-1.0, high=1.0) -> np.ndarray:
    if dtype == "int8":
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    if dtype == "uint8":
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    return rng.uniform(low, high, size=shape).astype(np_dtype(dtype))


def _wide(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) if np.issubdtype(a.dtype, np.integer) else a.astype(np.float64)


def _nbytes(func) -> int:
    return sum(int(np.prod(s)) * np_dtype(d).itemsize for s, d in _tvm.param_specs(func))


def _make(name, args, tensors, flops, dtype, make_inputs, reference, func=None) -> Workload:
    func = te.create_prim_func(tensors) if func is None else func
    func = func.with_attr(WORKLOAD_ATTR, json.dumps({"kernel": name, "args": args}))
    specs = _tvm.param_specs(func)
    n_out = 1

    def inputs(rng):
        arrays = make_inputs(rng)
        return arrays + [np.zeros(s, np_dtype(d)) for s, d in specs[len(arrays) :]]

    return Workload(
        name,
        dict(args),
        func,
        int(flops),
        _nbytes(func),
        dtype,
        tuple(range(len(specs) - n_out, len(specs))),
        inputs,
        reference,
    )


def matmul(M: int, N: int, K: int, dtype: str = "float32", transpose_b: bool = False) -> Workload:
    """``C[M, N] = A[M, K] @ B[K, N]`` (``B[N, K]`` when ``transpose_b``), accumulated wide."""
    _check_dims(M=M, N=N, K=K)
    _check_dtype(dtype, MATMUL_DTYPES, "matmul")
    if not isinstance(transpose_b, bool):
        raise TypeError(f"transpose_b={transpose_b!r} must be a bool")
    acc = ACC_DTYPE[dtype]
    A = te.placeholder((M, K), dtype, name="A")
    B = te.placeholder((N, K) if transpose_b else (K, N), _b_dtype(dtype), name="B")
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
    return _make(
        "matmul",
        args,
        [A, B, C],
        2 * M * N * K,
        dtype,
        lambda rng: [_random(rng, (M, K), dtype), _random(rng, b_shape, _b_dtype(dtype))],
        lambda a: [_wide(a[0]) @ (_wide(a[1]).T if transpose_b else _wide(a[1]))],
    )


def batch_matmul(batch: int, M: int, N: int, K: int, dtype: str = "float32") -> Workload:
    """``C[b, M, N] = A[b, M, K] @ B[b, K, N]``, accumulated wide."""
    _check_dims(batch=batch, M=M, N=N, K=K)
    _check_dtype(dtype, MATMUL_DTYPES, "batch_matmul")
    acc = ACC_DTYPE[dtype]
    A = te.placeholder((batch, M, K), dtype, name="A")
    B = te.placeholder((batch, K, N), _b_dtype(dtype), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute(
        (batch, M, N),
        lambda b, i, j: te.sum(A[b, i, k].astype(acc) * B[b, k, j].astype(acc), axis=k),
        name="C",
    )
    return _make(
        "batch_matmul",
        {"batch": batch, "M": M, "N": N, "K": K, "dtype": dtype},
        [A, B, C],
        2 * batch * M * N * K,
        dtype,
        lambda rng: [
            _random(rng, (batch, M, K), dtype),
            _random(rng, (batch, K, N), _b_dtype(dtype)),
        ],
        lambda a: [np.matmul(_wide(a[0]), _wide(a[1]))],
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
    _check_dims(N=N, C=C, H=H, W=W, F=F, KH=KH, KW=KW, stride=stride)
    if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
        raise ValueError(f"padding={padding!r} must be a non-negative int")
    _check_dtype(dtype, FLOAT_DTYPES, "conv2d")
    OH, OW = (H + 2 * padding - KH) // stride + 1, (W + 2 * padding - KW) // stride + 1
    if OH < 1 or OW < 1:
        raise ValueError(f"kernel {KH}x{KW} does not fit the padded input {H}x{W} ({padding=})")
    acc = ACC_DTYPE[dtype]
    X = te.placeholder((N, C, H, W), dtype, name="X")
    Wt = te.placeholder((F, C, KH, KW), dtype, name="W")
    Xp = te.compute(
        (N, C, H + 2 * padding, W + 2 * padding),
        lambda n, c, h, w: _tvm.tvm.tirx.if_then_else(
            _tvm.tvm.tirx.all(h >= padding, h < H + padding, w >= padding, w < W + padding),
            X[n, c, h - padding, w - padding],
            _tvm.tvm.tirx.const(0, dtype),
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
        x = np.pad(_wide(a[0]), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
        win = np.lib.stride_tricks.sliding_window_view(x, (KH, KW), axis=(2, 3))
        win = win[:, :, ::stride, ::stride][:, :, :OH, :OW]
        return [np.einsum("ncyxrs,fcrs->nfyx", win, _wide(a[1]), optimize=True)]

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
    return _make(
        "conv2d",
        args,
        [X, Wt, Y],
        2 * N * F * OH * OW * C * KH * KW,
        dtype,
        lambda rng: [_random(rng, (N, C, H, W), dtype), _random(rng, (F, C, KH, KW), dtype)],
        reference,
    )


def softmax(M: int, N: int, dtype: str = "float32") -> Workload:
    """Row softmax over the last axis of ``X[M, N]``, computed in fp32."""
    _check_dims(M=M, N=N)
    _check_dtype(dtype, ROW_DTYPES, "softmax")
    X = te.placeholder((M, N), dtype, name="X")
    k1, k2 = te.reduce_axis((0, N), "k1"), te.reduce_axis((0, N), "k2")
    mx = te.compute((M,), lambda i: te.max(X[i, k1].astype("float32"), axis=k1), name="row_max")
    ex = te.compute((M, N), lambda i, j: te.exp(X[i, j].astype("float32") - mx[i]), name="exp")
    sm = te.compute((M,), lambda i: te.sum(ex[i, k2], axis=k2), name="row_sum")
    Y = te.compute((M, N), lambda i, j: (ex[i, j] / sm[i]).astype(dtype), name="softmax")

    def reference(a):
        x = _wide(a[0])
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return [e / e.sum(axis=-1, keepdims=True)]

    return _make(
        "softmax",
        {"M": M, "N": N, "dtype": dtype},
        [X, Y],
        5 * M * N,
        dtype,
        lambda rng: [_random(rng, (M, N), dtype, -4.0, 4.0)],
        reference,
    )


def layernorm(M: int, N: int, dtype: str = "float32", eps: float = 1e-5) -> Workload:
    """LayerNorm over the last axis of ``X[M, N]`` with ``gamma[N]``, ``beta[N]``, in fp32."""
    _check_dims(M=M, N=N)
    _check_dtype(dtype, ROW_DTYPES, "layernorm")
    if not isinstance(eps, float) or not eps > 0:
        raise ValueError(f"eps={eps!r} must be a positive float")
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
        x = _wide(a[0])
        mu = x.mean(axis=-1, keepdims=True)
        var_ = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        return [(x - mu) / np.sqrt(var_ + eps) * _wide(a[1]) + _wide(a[2])]

    return _make(
        "layernorm",
        {"M": M, "N": N, "eps": eps, "dtype": dtype},
        [X, g, b, Y],
        8 * M * N,
        dtype,
        lambda rng: [
            _random(rng, (M, N), dtype),
            _random(rng, (N,), dtype),
            _random(rng, (N,), dtype),
        ],
        reference,
    )


def rmsnorm(M: int, N: int, dtype: str = "float32", eps: float = 1e-6) -> Workload:
    """RMSNorm over the last axis of ``X[M, N]`` with ``weight[N]``, in fp32."""
    _check_dims(M=M, N=N)
    _check_dtype(dtype, ROW_DTYPES, "rmsnorm")
    if not isinstance(eps, float) or not eps > 0:
        raise ValueError(f"eps={eps!r} must be a positive float")
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
        x = _wide(a[0])
        return [x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * _wide(a[1])]

    return _make(
        "rmsnorm",
        {"M": M, "N": N, "eps": eps, "dtype": dtype},
        [X, w, Y],
        4 * M * N,
        dtype,
        lambda rng: [_random(rng, (M, N), dtype), _random(rng, (N,), dtype)],
        reference,
    )


def axpy(n: int, alpha: float = 2.0, dtype: str = "float32") -> Workload:
    """``z = alpha * x + y`` over ``n`` elements (written in TVMScript, not TE)."""
    _check_dims(n=n)
    _check_dtype(dtype, ROW_DTYPES, "axpy")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not np.isfinite(alpha):
        raise ValueError(f"alpha={alpha!r} must be a finite number")
    alpha = float(alpha)
    return _make(
        "axpy",
        {"n": n, "alpha": alpha, "dtype": dtype},
        None,
        2 * n,
        dtype,
        lambda rng: [_random(rng, (n,), dtype), _random(rng, (n,), dtype)],
        lambda a: [np.float64(np_dtype(dtype).type(alpha)) * _wide(a[0]) + _wide(a[1])],
        func=axpy_func(n, alpha, dtype),
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
