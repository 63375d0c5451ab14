"""CUDA WMMA tensorize intrinsics for fp16 x fp16 -> fp32, 16x16x16 (tensor cores, sm_70+).

Five desc/impl pairs: load an A or B fragment from shared memory, fill the accumulator with
zeros, ``mma_sync``, store the accumulator to global memory. TVM 0.27 ships the same contract
in ``tvm.s_tir.tensor_intrin.cuda``, whose import registers ~500 intrinsics (~13 s); these are
registered alone by :func:`register_cuda_intrinsics`.
"""

from __future__ import annotations

from tvm_ext.base import tvm_api
from tvm_ext.base.tvm_api import T

M = N = K = 16
LOAD_A = "tvm_ext.cuda.wmma_load_16x16x16_f16_a_shared"
LOAD_B = "tvm_ext.cuda.wmma_load_16x16x16_f16_b_shared"
FILL = "tvm_ext.cuda.wmma_fill_16x16x16_f32"
SYNC = "tvm_ext.cuda.wmma_sync_16x16x16_f16f16f32"
STORE = "tvm_ext.cuda.wmma_store_16x16x16_f32_global"


def _fragment_index(buf, stride):
    """Which 16x16 fragment of a fragment buffer ``buf`` (row stride ``stride``) this is."""
    return buf.elem_offset // stride // 16 * (stride // 16) + buf.elem_offset % stride // 16


def _load(scope: str):
    @T.prim_func(s_tir=True)
    def desc(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(a, (16, 16), "float16", align=64, offset_factor=16, scope="shared")
        C = T.match_buffer(c, (16, 16), "float16", align=64, offset_factor=16, scope=scope)
        with T.sblock("root"):
            T.reads(A[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            for i, j in T.grid(16, 16):
                with T.sblock("load"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = A[vi, vj]

    @T.prim_func(s_tir=True)
    def impl(a: T.handle, c: T.handle) -> None:
        s1, s0, d1, d0 = T.int32(), T.int32(), T.int32(), T.int32()
        A = T.match_buffer(
            a, (16, 16), "float16", align=64, offset_factor=16, scope="shared", strides=[s1, s0]
        )
        C = T.match_buffer(
            c, (16, 16), "float16", align=64, offset_factor=16, scope=scope, strides=[d1, d0]
        )
        with T.sblock("root"):
            T.reads(A[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            T.evaluate(
                T.tvm_load_matrix_sync(
                    C.data,
                    M,
                    N,
                    K,
                    _fragment_index(C, d1),
                    A.access_ptr("r", ptr_type="float16"),
                    s1,
                    "row_major",
                    dtype="void",
                )
            )

    return desc, impl


def _pairs():
    """Parse every desc/impl pair (TVMScript parsing is slow: only when registering)."""

    @T.prim_func(s_tir=True)
    def _fill_desc(c: T.handle) -> None:
        C = T.match_buffer(
            c, (16, 16), "float32", align=64, offset_factor=16, scope="wmma.accumulator"
        )
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:16, 0:16])
            for i, j in T.grid(16, 16):
                with T.sblock("init"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = T.float32(0)

    @T.prim_func(s_tir=True)
    def _fill_impl(c: T.handle) -> None:
        d1, d0 = T.int32(), T.int32()
        C = T.match_buffer(
            c,
            (16, 16),
            "float32",
            align=64,
            offset_factor=16,
            scope="wmma.accumulator",
            strides=[d1, d0],
        )
        with T.sblock("root"):
            T.reads()
            T.writes(C[0:16, 0:16])
            T.evaluate(
                T.tvm_fill_fragment(
                    C.data, M, N, K, _fragment_index(C, d1), T.float32(0), dtype="void"
                )
            )

    @T.prim_func(s_tir=True)
    def _sync_desc(a: T.handle, b: T.handle, c: T.handle) -> None:
        A = T.match_buffer(
            a, (16, 16), "float16", align=64, offset_factor=16, scope="wmma.matrix_a"
        )
        B = T.match_buffer(
            b, (16, 16), "float16", align=64, offset_factor=16, scope="wmma.matrix_b"
        )
        C = T.match_buffer(
            c, (16, 16), "float32", align=64, offset_factor=16, scope="wmma.accumulator"
        )
        with T.sblock("root"):
            T.reads(C[0:16, 0:16], A[0:16, 0:16], B[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            for i, j, k in T.grid(16, 16, 16):
                with T.sblock(""):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    C[vi, vj] = C[vi, vj] + T.Cast("float32", A[vi, vk]) * T.Cast(
                        "float32", B[vk, vj]
                    )

    @T.prim_func(s_tir=True)
    def _sync_impl(a: T.handle, b: T.handle, c: T.handle) -> None:
        a1, a0, b1, b0, c1, c0 = T.int32(), T.int32(), T.int32(), T.int32(), T.int32(), T.int32()
        A = T.match_buffer(
            a,
            (16, 16),
            "float16",
            align=64,
            offset_factor=16,
            scope="wmma.matrix_a",
            strides=[a1, a0],
        )
        B = T.match_buffer(
            b,
            (16, 16),
            "float16",
            align=64,
            offset_factor=16,
            scope="wmma.matrix_b",
            strides=[b1, b0],
        )
        C = T.match_buffer(
            c,
            (16, 16),
            "float32",
            align=64,
            offset_factor=16,
            scope="wmma.accumulator",
            strides=[c1, c0],
        )
        with T.sblock("root"):
            T.reads(C[0:16, 0:16], A[0:16, 0:16], B[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            T.evaluate(
                T.tvm_mma_sync(
                    C.data,
                    _fragment_index(C, c1),
                    A.data,
                    _fragment_index(A, a1),
                    B.data,
                    _fragment_index(B, b1),
                    C.data,
                    _fragment_index(C, c1),
                    dtype="void",
                )
            )

    @T.prim_func(s_tir=True)
    def _store_desc(a: T.handle, c: T.handle) -> None:
        A = T.match_buffer(
            a, (16, 16), "float32", align=64, offset_factor=16, scope="wmma.accumulator"
        )
        C = T.match_buffer(c, (16, 16), "float32", align=64, offset_factor=16, scope="global")
        with T.sblock("root"):
            T.reads(A[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            for i, j in T.grid(16, 16):
                with T.sblock("store"):
                    vi, vj = T.axis.remap("SS", [i, j])
                    C[vi, vj] = A[vi, vj]

    @T.prim_func(s_tir=True)
    def _store_impl(a: T.handle, c: T.handle) -> None:
        s1, s0, d1, d0 = T.int32(), T.int32(), T.int32(), T.int32()
        A = T.match_buffer(
            a,
            (16, 16),
            "float32",
            align=64,
            offset_factor=16,
            scope="wmma.accumulator",
            strides=[d1, d0],
        )
        C = T.match_buffer(
            c, (16, 16), "float32", align=64, offset_factor=16, scope="global", strides=[s1, s0]
        )
        with T.sblock("root"):
            T.reads(A[0:16, 0:16])
            T.writes(C[0:16, 0:16])
            T.evaluate(
                T.tvm_store_matrix_sync(
                    A.data,
                    M,
                    N,
                    K,
                    _fragment_index(A, d1),
                    C.access_ptr("w", ptr_type="float32"),
                    s1,
                    "row_major",
                    dtype="void",
                )
            )

    return {
        LOAD_A: _load("wmma.matrix_a"),
        LOAD_B: _load("wmma.matrix_b"),
        FILL: (_fill_desc, _fill_impl),
        SYNC: (_sync_desc, _sync_impl),
        STORE: (_store_desc, _store_impl),
    }


def register_cuda_intrinsics() -> None:
    """Register the WMMA intrinsics with TVM (safe to call any number of times)."""
    TensorIntrin = tvm_api.TensorIntrin
    if all(
        TensorIntrin.get(n, allow_missing=True) is not None
        for n in (LOAD_A, LOAD_B, FILL, SYNC, STORE)
    ):
        return
    for name, (desc, impl) in _pairs().items():
        if TensorIntrin.get(name, allow_missing=True) is None:
            TensorIntrin.register(name, desc, impl)
