"""Tensorize intrinsics, one module per ISA, registered by an explicit idempotent call."""

from tvm_ext.schedules.intrinsics.cuda import register_cuda_intrinsics
from tvm_ext.schedules.intrinsics.x86 import BF16_DOT_16x2, VNNI_DOT_16x4, register_x86_intrinsics

__all__ = ["BF16_DOT_16x2", "VNNI_DOT_16x4", "register_cuda_intrinsics", "register_x86_intrinsics"]
