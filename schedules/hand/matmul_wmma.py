"""CUDA fp16 matmul on tensor cores (WMMA 16x16x16, fp32 accumulation).

A block of ``wm x wn`` warps computes ``(wm*fm*16) x (wn*fn*16)`` of C; each warp owns
``fm x fn`` accumulator fragments. Per K step of ``kf*16`` the block's threads together copy
the A and B tiles into shared memory (``vec`` halves per thread per load), then every warp
loads its A/B fragments from shared memory and issues ``fm*fn*kf`` ``mma_sync``; the
accumulators are stored straight to C. Shapes the tiles do not divide are padded with zeros.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import ceil_div, check, check_config, find_block, is_cuda
from tvm_ext.schedules.intrinsics.cuda import (
    FILL,
    LOAD_A,
    LOAD_B,
    STORE,
    SYNC,
    register_cuda_intrinsics,
)

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload

KERNELS = ("matmul",)


@dataclass(frozen=True)
class MatmulWMMAConfig:
    """``wm x wn`` warps per block, ``fm x fn`` fragments per warp, ``kf`` fragments per K step."""

    wm: int = 2
    wn: int = 2
    fm: int = 2
    fn: int = 2
    kf: int = 2
    vec: int = 8

    def validate(self, target) -> None:
        check_config(self)
        arch = str(target.attrs.get("arch", "sm_50"))
        if int(arch[3:].rstrip("a")) < 70:
            raise ValueError(f"WMMA needs sm_70 or newer, the target is {arch}")
        threads = 32 * self.wm * self.wn
        for name, elems in (
            ("A", self.wm * self.fm * 16 * self.kf * 16),
            ("B", self.kf * 16 * self.wn * self.fn * 16),
        ):
            if elems % (threads * self.vec):
                raise ValueError(
                    f"the {name} tile ({elems} halves) does not split into "
                    f"{threads} threads x vec={self.vec}"
                )


def applies(workload: Workload, target=None) -> bool:
    return (
        workload.name in KERNELS
        and workload.dtype == "float16"
        and not workload.args.get("transpose_b", False)
    )


def default_config(workload: Workload, target) -> MatmulWMMAConfig:
    return MatmulWMMAConfig()


def _split_fragments(sch, block):
    """Split a block's two innermost loops into 16x16 fragments; return the fragment loop."""
    a, b = sch.get_loops(block)[-2:]
    a0, a1 = sch.split(a, [None, 16])
    b0, b1 = sch.split(b, [None, 16])
    sch.reorder(a0, b0, a1, b1)
    return a1


def schedule(workload: Workload, target, config: MatmulWMMAConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"matmul_wmma: {workload.key} is not an fp16 (K, N) matmul")
    check(is_cuda(target), f"matmul_wmma: target {target.kind.name} is not CUDA")
    config.validate(target)
    register_cuda_intrinsics()
    c = config
    bm, bn, bk = c.wm * c.fm * 16, c.wn * c.fn * 16, c.kf * 16
    M, N, K = (workload.args[d] for d in ("M", "N", "K"))
    sch = tvm_api.Schedule(workload.func)
    C = sch.get_sblock("C")
    if M % bm or N % bn or K % bk:
        sch.pad_einsum(C, [ceil_div(M, bm) * bm, ceil_div(N, bn) * bn, ceil_div(K, bk) * bk])
    i, j, k = sch.get_loops(C)
    i0, i1, i2, i3 = sch.split(i, [None, c.wm, c.fm, 16])
    j0, j1, j2, j3 = sch.split(j, [None, c.wn, c.fn, 16])
    k0, k1, k2 = sch.split(k, [None, c.kf, 16])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2, i3, j3, k2)
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    warp = sch.fuse(i1, j1)
    sch.bind(warp, "threadIdx.y")
    acc = sch.cache_write(C, 0, "wmma.accumulator")
    sch.reverse_compute_at(acc, warp)
    for index, scope, intrin in ((0, "wmma.matrix_a", LOAD_A), (1, "wmma.matrix_b", LOAD_B)):
        shared = sch.cache_read(C, index, "shared")
        sch.compute_at(shared, k0)
        fused = sch.fuse(*sch.get_loops(shared)[-2:])
        _, ty, tx, v = sch.split(fused, [None, c.wm * c.wn, 32, c.vec])
        sch.bind(ty, "threadIdx.y")
        sch.bind(tx, "threadIdx.x")
        sch.vectorize(v)
        fragment = sch.cache_read(C, index, scope)
        sch.compute_at(fragment, k1)
        sch.tensorize(_split_fragments(sch, fragment), intrin)
    for name in ("A_pad", "B_pad"):  # zero padding happens while staging into shared memory
        if find_block(sch, name) is not None:
            sch.compute_inline(sch.get_sblock(name))
    init = sch.decompose_reduction(C, k0)
    sch.tensorize(sch.get_loops(init)[-2], FILL)
    sch.tensorize(i3, SYNC)
    sch.tensorize(_split_fragments(sch, acc), STORE)
    crop = find_block(sch, "C_pad")  # padded: a second small kernel crops C_pad into C
    if crop is None:
        return sch
    bx, tx = sch.split(sch.fuse(*sch.get_loops(crop)), [None, 256])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    return sch
