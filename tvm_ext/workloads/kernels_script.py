"""Kernels written directly in TVMScript (the parser needs them in a source file)."""

from __future__ import annotations

from tvm_ext.base.tvm_api import T


def axpy_func(n: int, alpha: float, dtype: str):
    """``z[i] = alpha * x[i] + y[i]`` as a schedulable PrimFunc."""

    @T.prim_func(s_tir=True)
    def axpy(x: T.Buffer((n,), dtype), y: T.Buffer((n,), dtype), z: T.Buffer((n,), dtype)):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i in range(n):
            with T.sblock("z"):
                vi = T.axis.spatial(n, i)
                z[vi] = T.Cast(dtype, alpha) * x[vi] + y[vi]

    return axpy
