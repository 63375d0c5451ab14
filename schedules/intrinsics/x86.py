"""x86 tensorize intrinsics (desc/impl pairs), registered by an explicit, idempotent call.

TVM 0.27 ships VNNI/AVX-512 int8 dot products in ``tvm.s_tir.tensor_intrin.x86``, but
importing that package registers ~500 intrinsics (CUDA's too) and takes ~19 s; the pair here
is the same contract, registered alone.

``VNNI_DOT_16x4``: ``C[16] += A[4] . B[16, 4]`` with A uint8, B int8, C int32: one
``vpdpbusd`` (AVX512-VNNI) multiplies 64 byte pairs and adds them in groups of 4 into 16 lanes.
Unlike TVM's, C is a register (``local``) accumulator, which is how our schedules use it.

``BF16_DOT_16x2``: ``C[16] += A[2] . B[16, 2]`` with A, B bfloat16 and C float32: one
``vdpbf16ps`` (AVX512-BF16) multiplies 32 bf16 pairs and adds them in pairs into 16 fp32 lanes.
TVM 0.27 cannot emit it from TIR: LLVM types its operands ``<32 x bfloat>`` while TVM's BF16
legalization turns every bf16 vector into fp32 or uint16 before codegen. So the impl calls a
four-line LLVM function (``_DPBF16PS_SHIM``, linked into the module by
``pragma_import_llvm`` and inlined: no call survives) that takes the operand addresses and does
the bit casts TIR cannot. Its C is a ``global``-scope buffer: TVM's ``LowerTVMBuiltin`` puts a
small (< 1 KiB) ``global`` allocation on the stack, where LLVM keeps it in registers, while a
``local`` one on a CPU becomes a workspace allocation whose every update is stored to memory
(measured: 131 vs 406 GFLOP/s on a bf16 1536^3 matmul).
"""

from __future__ import annotations

from tvm_ext.base import tvm_api
from tvm_ext.base.tvm_api import T

VNNI_DOT_16x4 = "tvm_ext.x86.vnni_dot_16x4_u8i8i32"
BF16_DOT_16x2 = "tvm_ext.x86.avx512bf16_dot_16x2_bf16bf16f32"

# acc + (a[0:2] broadcast to 16 pairs) . b[0:32], operands by address (bf16 as i16 storage).
# The sources commute; with B last, LLVM folded B's load into every vdpbf16ps (each 64-byte
# line loaded mr times); with the broadcast last, each line is loaded once into a register.
_DPBF16PS_SHIM = r"""
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)
define linkonce_odr <16 x float> @tvm_ext_dpbf16ps_16x2(<16 x float> %acc,
    ptr %a, i64 %a_off, ptr %b, i64 %b_off) #0 {
  %ap = getelementptr i16, ptr %a, i64 %a_off
  %bp = getelementptr i16, ptr %b, i64 %b_off
  %pair = load i32, ptr %ap, align 2
  %ins = insertelement <16 x i32> poison, i32 %pair, i64 0
  %pairs = shufflevector <16 x i32> %ins, <16 x i32> poison, <16 x i32> zeroinitializer
  %av = bitcast <16 x i32> %pairs to <32 x bfloat>
  %bv = load <32 x bfloat>, ptr %bp, align 2
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %acc,
    <32 x bfloat> %bv, <32 x bfloat> %av)
  ret <16 x float> %r
}
attributes #0 = { alwaysinline nounwind "target-features"="+avx512f,+avx512bf16" }
"""


def _dot_desc(group: int, a_dtype: str, b_dtype: str, acc: str, acc_scope: str):
    """``C[16] += A[group] . B[16, group]``, widened to ``acc``: what a 16-lane dot product
    instruction computes (TVMScript parsing is slow: only when registering)."""

    @T.prim_func(s_tir=True)
    def desc(
        A: T.Buffer((group,), a_dtype, offset_factor=1),
        B: T.Buffer((16, group), b_dtype, offset_factor=1),
        C: T.Buffer((16,), acc, offset_factor=1, scope=acc_scope),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:group], B[0:16, 0:group])
            T.writes(C[0:16])
            for i in T.serial(0, 16):
                for k in T.serial(0, group):
                    with T.sblock("update"):
                        vi, vk = T.axis.remap("SR", [i, k])
                        C[vi] = C[vi] + T.cast(A[vk], acc) * T.cast(B[vi, vk], acc)

    return desc


def _vnni_pair():

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

    return _dot_desc(4, "uint8", "int8", "int32", "local"), _dot_16x4_vnni


def _bf16_pair():
    @T.prim_func(s_tir=True)
    def _dot_16x2_avx512bf16(
        A: T.Buffer((2,), "bfloat16", offset_factor=1),
        B: T.Buffer((16, 2), "bfloat16", offset_factor=1),
        C: T.Buffer((16,), "float32", offset_factor=1),
    ) -> None:
        with T.sblock("root"):
            T.reads(C[0:16], A[0:2], B[0:16, 0:2])
            T.writes(C[0:16])
            T.attr(0, "pragma_import_llvm", _DPBF16PS_SHIM)
            C[T.ramp(T.int32(0), 1, 16)] = T.call_extern(
                "float32x16",
                "tvm_ext_dpbf16ps_16x2",
                C.vload([0], dtype="float32x16"),
                A.data,
                T.Cast("int64", A.elem_offset),
                B.data,
                T.Cast("int64", B.elem_offset),
            )

    return _dot_desc(2, "bfloat16", "bfloat16", "float32", "global"), _dot_16x2_avx512bf16


def register_x86_intrinsics() -> None:
    """Register this module's intrinsics with TVM (safe to call any number of times)."""
    TensorIntrin = tvm_api.TensorIntrin
    if TensorIntrin.get(VNNI_DOT_16x4, allow_missing=True) is None:
        TensorIntrin.register(VNNI_DOT_16x4, *_vnni_pair())
    if TensorIntrin.get(BF16_DOT_16x2, allow_missing=True) is None:
        TensorIntrin.register(BF16_DOT_16x2, *_bf16_pair())
