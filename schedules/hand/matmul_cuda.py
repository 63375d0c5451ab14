"""CUDA matmul and batch_matmul: block tiles staged cooperatively in shared memory,
register tiles per thread, vectorized global loads, double-buffered K loop.

Each thread block computes ``bm x bn`` of C with ``(bm/tm) x (bn/tn)`` threads, each owning a
``tm x tn`` register tile. Per K step of ``bk`` the block's threads *together* copy the
``bm x bk`` tile of A and the ``bk x bn`` tile of B into shared memory, every thread moving
``vec`` consecutive elements per load (``float4`` for fp32), then synchronize; the K loop is
software-pipelined over two shared buffers so the next tiles load while this one computes.
Shapes the tiles do not divide are padded (predicated loads and stores).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import ceil_div, check, check_config, find_block, is_cuda

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload

KERNELS = ("matmul", "batch_matmul")


@dataclass(frozen=True)
class MatmulCUDAConfig:
    """Block tile ``bm x bn x bk``, per-thread register tile ``tm x tn``, load width ``vec``,
    ``stages`` shared buffers for the K loop (1 = no pipelining)."""

    bm: int = 64
    bn: int = 64
    bk: int = 16
    tm: int = 4
    tn: int = 4
    vec: int = 4
    stages: int = 2

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def validate(self, target) -> None:
        check_config(self)
        if self.bm % self.tm or self.bn % self.tn:
            raise ValueError(
                f"register tile {self.tm}x{self.tn} must divide block tile {self.bm}x{self.bn}"
            )
        max_threads = int(target.attrs["max_num_threads"])
        if not 32 <= self.threads <= max_threads:
            raise ValueError(f"{self.threads} threads per block; must be 32..{max_threads}")
        if self.vec not in (1, 2, 4):
            raise ValueError(f"vec={self.vec}: choose 1, 2 or 4 elements per load")
        for name, elems in (("A", self.bm * self.bk), ("B", self.bk * self.bn)):
            if elems % (self.threads * self.vec):
                raise ValueError(
                    f"the {name} tile ({elems} elements) does not split evenly into "
                    f"{self.threads} threads x vec={self.vec}"
                )
        if self.stages not in (1, 2):
            raise ValueError(f"stages={self.stages}: choose 1 or 2")


def applies(workload: Workload, target=None) -> bool:
    return workload.name in KERNELS


def default_config(workload: Workload, target) -> MatmulCUDAConfig:
    """64x64x16 tiles of 4x4 per thread (256 threads); 32x32 blocks for small matrices."""
    small = workload.args["M"] * workload.args["N"] <= 128 * 128
    return MatmulCUDAConfig(bm=32, bn=32, tm=2, tn=2, vec=2) if small else MatmulCUDAConfig()


def _cooperative_copy(sch, block, threads_y: int, threads_x: int, vec: int) -> None:
    """Spread a shared-memory copy over every thread of the block, ``vec`` elements each."""
    fused = sch.fuse(*sch.get_loops(block)[-2:])
    _, ty, tx, v = sch.split(fused, [None, threads_y, threads_x, vec])
    sch.bind(ty, "threadIdx.y")
    sch.bind(tx, "threadIdx.x")
    sch.vectorize(v)


def schedule(workload: Workload, target, config: MatmulCUDAConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"matmul_cuda: {workload.key} is not a matmul")
    check(is_cuda(target), f"matmul_cuda: target {target.kind.name} is not CUDA")
    config.validate(target)
    c = config
    M, N, K = (workload.args[d] for d in ("M", "N", "K"))
    batched = workload.name == "batch_matmul"
    sch = tvm_api.Schedule(workload.func)
    C = sch.get_sblock("C")
    if M % c.bm or N % c.bn or K % c.bk:
        sch.pad_einsum(
            C,
            ([1] if batched else [])
            + [ceil_div(M, c.bm) * c.bm, ceil_div(N, c.bn) * c.bn, ceil_div(K, c.bk) * c.bk],
        )
        for name in ("A_pad", "B_pad"):
            if find_block(sch, name) is not None:
                sch.compute_inline(sch.get_sblock(name))
    *outer, i, j, k = sch.get_loops(C)
    i0, i1, i2 = sch.split(i, [None, c.bm // c.tm, c.tm])
    j0, j1, j2 = sch.split(j, [None, c.bn // c.tn, c.tn])
    k0, k1 = sch.split(k, [None, c.bk])
    sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
    if outer:
        sch.bind(outer[0], "blockIdx.z")
    sch.bind(i0, "blockIdx.y")
    sch.bind(j0, "blockIdx.x")
    sch.bind(i1, "threadIdx.y")
    sch.bind(j1, "threadIdx.x")
    acc = sch.cache_write(C, 0, "local")
    sch.reverse_compute_at(acc, j1)
    crop = find_block(sch, "C_pad")
    if crop is not None:
        sch.reverse_compute_inline(crop)
    for index in (0, 1):
        shared = sch.cache_read(C, index, "shared")
        sch.compute_at(shared, k0)
        _cooperative_copy(sch, shared, c.bm // c.tm, c.bn // c.tn, c.vec)
    sch.unroll(i2)
    sch.unroll(j2)
    sch.decompose_reduction(C, k0)
    if c.stages == 2:
        # Stage 0: the two shared-memory copies of the next K tile; stage 1: this tile's math.
        sch.annotate(k0, "software_pipeline_stage", [0, 0, 1])
        sch.annotate(k0, "software_pipeline_order", [0, 1, 2])
    sch.annotate(sch.get_sblock("root"), "pragma_auto_unroll_max_step", 64)
    return sch
