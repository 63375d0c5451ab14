"""x86 int8 matmul on AVX512-VNNI: ``vpdpbusd`` micro-kernel over a VNNI-packed B.

B is packed once into ``Bp[N/16, K/4, 16, 4]`` (16 columns x 4 consecutive k per 64-byte
line: the operand layout of ``vpdpbusd``). Each thread owns column panels of ``16*nv``; for
each ``mr``-row block it keeps ``mr x nv`` int32 accumulator vectors in registers and, per
4-deep k step, broadcasts 4 bytes of A against each 64-byte B line. Shapes are padded to the
tile with zeros (zeros add nothing to a dot product).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext import _tvm
from tvm_ext.kernels import Workload

from ._base import ceil_div, check, check_config, find_block, is_cpu
from .intrin_x86 import VNNI_DOT_16x4, register_x86_intrinsics

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


def has_vnni(target) -> bool:
    return bool(_tvm.global_func("target.llvm_cpu_has_feature")("avx512vnni", target))


def applies(workload: Workload, target=None) -> bool:
    return (
        workload.name in KERNELS
        and workload.dtype == "uint8"
        and not workload.args.get("transpose_b", False)
        and (target is None or has_vnni(target))
    )


def default_config(workload: Workload, target) -> MatmulVNNIConfig:
    return MatmulVNNIConfig()


def schedule(workload: Workload, target, config: MatmulVNNIConfig) -> "_tvm.Schedule":
    check(is_cpu(target) and has_vnni(target), "matmul_vnni: the target CPU lacks AVX512-VNNI")
    check(applies(workload), f"matmul_vnni: {workload.key} is not a uint8 x int8 (K, N) matmul")
    config.validate(target)
    register_x86_intrinsics()
    mr, nr = config.mr, 16 * config.nv
    M, N, K = (workload.args[d] for d in ("M", "N", "K"))
    sch = _tvm.Schedule(workload.func)
    C = sch.get_sblock("C")
    if M % mr or N % nr or K % 4:
        sch.pad_einsum(C, [ceil_div(M, mr) * mr, ceil_div(N, nr) * nr, ceil_div(K, 4) * 4])
        a_pad = find_block(sch, "A_pad")
        if a_pad is not None:  # kept as a padded copy: an inlined guard would not tensorize
            sch.parallel(sch.get_loops(a_pad)[0])
    i, j, k = sch.get_loops(C)
    i0, i1 = sch.split(i, [None, mr])
    j0, j1, j2 = sch.split(j, [None, config.nv, 16])
    k0, k1 = sch.split(k, [None, 4])
    sch.reorder(j0, i0, k0, i1, j1, j2, k1)
    pack = find_block(sch, "B_pad") or sch.cache_read(C, 1, "global")
    sch.transform_layout(pack, ("write", 0), lambda kk, jj: (jj // 16, kk // 4, jj % 16, kk % 4))
    sch.parallel(sch.get_loops(pack)[0])
    acc = sch.cache_write(C, 0, "local")
    sch.reverse_compute_at(acc, i0)
    crop = find_block(sch, "C_pad")
    if crop is not None:
        sch.reverse_compute_inline(crop)
    else:
        sch.vectorize(sch.get_loops(acc)[-1])
    sch.parallel(j0)
    init = sch.decompose_reduction(C, k0)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.unroll(i1)
    sch.unroll(j1)
    sch.tensorize(j2, VNNI_DOT_16x4)
    return sch
