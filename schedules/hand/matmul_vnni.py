"""x86 int8 matmul on AVX512-VNNI: a ``vpdpbusd`` micro-kernel over a VNNI-packed B.

The nest is ``_dot_kernel``'s with 4-deep k groups (``vpdpbusd`` multiplies 64 u8 x s8 pairs into
16 int32 lanes) and B packed in 16-column blocks (``Bp[N/16, K/4, 16, 4]``: one 64-byte line per
block and k group). uint8 x int8 (K, N) matmuls only (the VNNI operand convention).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import check, check_config, has_feature, is_cpu
from tvm_ext.schedules.hand.dot_kernel import schedule_dot_kernel
from tvm_ext.schedules.intrinsics.x86 import VNNI_DOT_16x4, register_x86_intrinsics

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload

KERNELS = ("matmul",)


@dataclass(frozen=True)
class MatmulVNNIConfig:
    """``mr`` rows x ``nv`` 16-lane int32 vectors per register tile."""

    mr: int = 4
    nv: int = 4

    def validate(self, target) -> None:
        check_config(self)
        if self.mr * self.nv > 28:
            raise ValueError(f"mr*nv={self.mr * self.nv} accumulators exceed the 32 zmm registers")


def applies(workload: Workload, target=None) -> bool:
    return (
        workload.name in KERNELS
        and workload.dtype == "uint8"
        and not workload.args.get("transpose_b", False)
        and (target is None or has_feature(target, "avx512vnni"))
    )


def default_config(workload: Workload, target) -> MatmulVNNIConfig:
    return MatmulVNNIConfig()


def schedule(workload: Workload, target, config: MatmulVNNIConfig) -> "tvm_api.Schedule":
    check(
        is_cpu(target) and has_feature(target, "avx512vnni"),
        "matmul_vnni: the target CPU lacks AVX512-VNNI",
    )
    check(applies(workload), f"matmul_vnni: {workload.key} is not a uint8 x int8 (K, N) matmul")
    config.validate(target)
    register_x86_intrinsics()
    # 16-column blocks and a `local` accumulator (a workspace), unlike bf16: at 1024^3 here the
    # panel layout measured the same (711 vs 701 GOP/s) and 3x4 / 4x3 stack tiles slower
    # (619-631 vs 686 GOP/s).
    return schedule_dot_kernel(
        workload,
        mr=config.mr,
        nv=config.nv,
        group=4,
        intrin=VNNI_DOT_16x4,
        acc_scope="local",
        panel_layout=False,
    )
