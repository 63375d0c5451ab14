"""x86 bf16 matmul on AVX512-BF16: a ``vdpbf16ps`` micro-kernel over a pair-packed B.

The nest is ``_dot_kernel``'s with k pairs (``vdpbf16ps`` multiplies 32 bf16 pairs into 16 fp32
lanes) and B packed per panel (``Bp[N/nr, K/2, nr, 2]``: one sequential stream per panel).
Applies to matmul (B as is or transposed) and batch_matmul in bfloat16 on CPUs with AVX512-BF16;
other CPUs fall through to ``matmul_cpu`` (bf16 widened to fp32).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import (
    ACC_SCOPE,
    STACK_TILE_BYTES,
    ceil_div,
    check,
    check_config,
    has_feature,
    is_cpu,
)
from tvm_ext.schedules.hand.dot_kernel import schedule_dot_kernel
from tvm_ext.schedules.intrinsics.x86 import BF16_DOT_16x2, register_x86_intrinsics

from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import target_cores
from tvm_ext.workloads.kernels import Workload

KERNELS = ("matmul", "batch_matmul")
# The accumulator tile stays in registers only below 1 KiB (``_base.ACC_SCOPE``): 15 vectors.
MAX_ACCUMULATORS = (STACK_TILE_BYTES - 1) // 64


@dataclass(frozen=True)
class MatmulBF16Config:
    """``mr`` rows x ``nv`` 16-lane fp32 vectors per register tile; ``parallel`` over column
    ``"panels"`` or over ``"tiles"`` (panels x row blocks, for few panels)."""

    mr: int = 6
    nv: int = 2
    parallel: str = "panels"

    def validate(self, target) -> None:
        check_config(self)
        if self.mr * self.nv > MAX_ACCUMULATORS:
            raise ValueError(
                f"mr*nv={self.mr * self.nv} accumulators: at most {MAX_ACCUMULATORS} stay in "
                "registers (TVM spills a tile of 1 KiB or more to a workspace)"
            )
        if self.parallel not in ("panels", "tiles"):
            raise ValueError(f"parallel={self.parallel!r}: choose 'panels' or 'tiles'")


def applies(workload: Workload, target=None) -> bool:
    return (
        workload.name in KERNELS
        and workload.dtype == "bfloat16"
        and (target is None or (is_cpu(target) and has_feature(target, "avx512bf16")))
    )


def default_config(workload: Workload, target) -> MatmulBF16Config:
    """The tile that wastes least on padding among 12-accumulator shapes (6x2 on ties), one
    vector wide for narrow N; panels in parallel when there are two per thread."""
    M, N = workload.args["M"], workload.args["N"]
    if N <= 16:
        mr, nv = 12, 1
    else:
        candidates = [(6, 2), (4, 3), (3, 4)]
        mr, nv = min(
            candidates, key=lambda t: ceil_div(M, t[0]) * t[0] * ceil_div(N, 16 * t[1]) * 16 * t[1]
        )
    panels = ceil_div(N, 16 * nv) * workload.args.get("batch", 1)
    parallel = "panels" if panels >= 2 * target_cores(target) else "tiles"
    return MatmulBF16Config(mr=mr, nv=nv, parallel=parallel)


def schedule(workload: Workload, target, config: MatmulBF16Config) -> "tvm_api.Schedule":
    check(
        is_cpu(target) and has_feature(target, "avx512bf16"),
        "matmul_bf16: the target CPU lacks AVX512-BF16",
    )
    check(applies(workload), f"matmul_bf16: {workload.key} is not a bfloat16 matmul")
    config.validate(target)
    register_x86_intrinsics()
    # Panel layout: measured 1.3x the 16-column blocks here (one stream per panel).
    return schedule_dot_kernel(
        workload,
        mr=config.mr,
        nv=config.nv,
        group=2,
        intrin=BF16_DOT_16x2,
        acc_scope=ACC_SCOPE,
        panel_layout=True,
        parallel=config.parallel,
    )
