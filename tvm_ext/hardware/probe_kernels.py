"""Kernels TVM generates to probe the machine: independent FMA chains and a streaming copy.

They are written in TVMScript so the probe measures what TVM's own codegen reaches.
"""

from __future__ import annotations

from tvm_ext.base.tvm_api import T


def fma_chains(cores: int, chains: int, lanes: int, steps: int):
    """Each core runs ``chains`` independent ``lanes``-wide FMA recurrences for ``steps`` steps.

    FLOPs: ``2 * cores * chains * lanes * steps``. Without fast-math LLVM cannot fold or
    reassociate the recurrence, so every step is one FMA per chain.
    """
    width = chains * lanes

    @T.prim_func
    def fma(a: T.Buffer((cores * width,), "float32"), out: T.Buffer((cores * width,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for p in T.parallel(cores):
            acc = T.decl_buffer((width,), "float32", scope="local")
            for c in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[c * lanes + v] = a[p * width + c * lanes + v]
            for _t in range(steps):
                for c in T.unroll(chains):
                    for v in T.vectorized(lanes):
                        acc[c * lanes + v] = acc[c * lanes + v] * T.float32(0.999999) + T.float32(
                            1e-7
                        )
            for c in T.unroll(chains):
                for v in T.vectorized(lanes):
                    out[p * width + c * lanes + v] = acc[c * lanes + v]

    return fma


def stream_copy(cores: int, n: int, lanes: int):
    """``out = a`` over ``n`` floats split across ``cores``: ``8 * n`` bytes (STREAM copy)."""
    per_core = n // cores
    rows = per_core // lanes

    @T.prim_func
    def copy(a: T.Buffer((n,), "float32"), out: T.Buffer((n,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for p in T.parallel(cores):
            for r in range(rows):
                for v in T.vectorized(lanes):
                    out[p * per_core + r * lanes + v] = a[p * per_core + r * lanes + v]

    return copy


def stream_read(cores: int, n: int, lanes: int, chains: int = 4):
    """Sum ``n`` floats split across ``cores`` with ``chains`` vector accumulators each; reads
    ``4 * n`` bytes and writes almost nothing (no write-allocate traffic to hide)."""
    width = chains * lanes
    per_core = n // cores
    rows = per_core // width

    @T.prim_func
    def read(a: T.Buffer((n,), "float32"), out: T.Buffer((cores * width,), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for p in T.parallel(cores):
            acc = T.decl_buffer((width,), "float32", scope="local")
            for c in T.unroll(chains):
                for v in T.vectorized(lanes):
                    acc[c * lanes + v] = T.float32(0)
            for r in range(rows):
                for c in T.unroll(chains):
                    for v in T.vectorized(lanes):
                        acc[c * lanes + v] = (
                            acc[c * lanes + v] + a[p * per_core + r * width + c * lanes + v]
                        )
            for c in T.unroll(chains):
                for v in T.vectorized(lanes):
                    out[p * width + c * lanes + v] = acc[c * lanes + v]

    return read
