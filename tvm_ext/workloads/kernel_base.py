"""The kernel suite's common parts: the Workload record, dtypes, inputs and validation."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable, Sequence

import ml_dtypes
import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import checked_int
from tvm_ext.base.tvm_api import te

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


def b_dtype_of(dtype: str) -> str:
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
    func: "tvm_api.PrimFunc"
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


def check_dims(**dims) -> None:
    for name, value in dims.items():
        checked_int(name, value)


def check_dtype(dtype, choices: Sequence[str], kernel: str) -> None:
    if dtype not in choices:
        raise ValueError(
            f"{kernel}: dtype={dtype!r} is not supported; choose one of {tuple(choices)}"
        )


def check_eps(eps) -> None:
    if isinstance(eps, bool) or not isinstance(eps, float) or not eps > 0:
        raise ValueError(f"eps={eps!r} must be a positive float")


def random_array(rng: np.random.Generator, shape, dtype: str, low=-1.0, high=1.0) -> np.ndarray:
    if dtype == "int8":
        return rng.integers(-128, 128, size=shape, dtype=np.int8)
    if dtype == "uint8":
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    return rng.uniform(low, high, size=shape).astype(np_dtype(dtype))


def widen(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) if np.issubdtype(a.dtype, np.integer) else a.astype(np.float64)


def param_bytes(func) -> int:
    return sum(int(np.prod(s)) * np_dtype(d).itemsize for s, d in tvm_api.param_specs(func))


def make_workload(name, args, tensors, flops, dtype, make_inputs, reference, func=None) -> Workload:
    func = te.create_prim_func(tensors) if func is None else func
    func = func.with_attr(WORKLOAD_ATTR, json.dumps({"kernel": name, "args": args}))
    specs = tvm_api.param_specs(func)
    n_out = 1

    def inputs(rng):
        arrays = make_inputs(rng)
        return arrays + [np.zeros(s, np_dtype(d)) for s, d in specs[len(arrays) :]]

    return Workload(
        name,
        dict(args),
        func,
        int(flops),
        param_bytes(func),
        dtype,
        tuple(range(len(specs) - n_out, len(specs))),
        inputs,
        reference,
    )
