"""x86 tensorize intrinsics (desc/impl pairs), registered by an explicit, idempotent call.

TVM 0.27 ships VNNI/AVX-512 int8 dot products in ``tvm.s_tir.tensor_intrin.x86``, but
importing that package registers ~500 intrinsics (CUDA's too) and takes ~19 s; the pair here
is the same contract, registered alone.

``VNNI_DOT_16x4``: ``C[16] += A[4] . B[16, 4]`` with A uint8, B int8, C int32: one
``vpdpbusd`` (AVX512-VNNI) multiplies 64 byte pairs and adds them in groups of 4 into 16 lanes.
Unlike TVM's, C is a register (``local``) accumulator, which is how our schedules use it.
"""

from __future__ import annotations

from tvm.script import tirx as T

from tvm_ext import _tvm

VNNI_DOT_16x4 = "tvm_ext.x86.vnni_dot_16x4_u8i8i32"


def _vnni_pair():
    """Parse the desc/impl pair (TVMScript parsing is slow: only when registering)."""

    @T.prim_func(s_tir=True)
    def _dot_16x4_desc(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((16, 4), "int8", offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, 4):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], "int32") * T.cast(B[vi, vk], "int32")

    @T.prim_func(s_tir=True)
    def _dot_16x4_vnni(
        A: T.Buffer((4,), "uint8", offset_factor=1),
        B: T.Buffer((16, 4), "int8", offset_factor=1),
        C: T.Buffer((16,), "int32", offset_factor=1, scope="local"),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:4], B[0:16, 0:4])
            T.writes(C[0:16])
            # LLVM >= 20 types the byte operands <64 x i8> (TVM's own x86 intrinsic still passes
            # <16 x i32> and fails LLVM verification under TVM 0.27's LLVM 22).
            a = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
            a64 = T.reinterpret(T.broadcast(a, 16), dtype="int8x64")
            C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
                T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"),
                C.vload([0], dtype="int32x16"),
                a64,
                B.vload([0, 0], dtype="int8x64"),
                dtype="int32x16",
            )

    return _dot_16x4_desc, _dot_16x4_vnni


def register_x86_intrinsics() -> None:
    """Register this module's intrinsics with TVM (safe to call any number of times)."""
    TensorIntrin = _tvm.tvm.s_tir.TensorIntrin
    if TensorIntrin.get(VNNI_DOT_16x4, allow_missing=True) is None:
        TensorIntrin.register(VNNI_DOT_16x4, *_vnni_pair())
