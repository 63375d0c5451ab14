"""CPU matmul and batch_matmul: register-blocked micro-kernel over packed B panels.

Loop nest (per batch): ``for j0 (panels of nr columns, parallel): pack B[:, panel] as
Bp[K, nr]; for i0 (blocks of mr rows): acc[mr, nr] = 0; for k: for i1 (unrolled): for j1
(vectorized): acc += A[i, k] * Bp[k, j1]; C[i0 block, panel] = acc``. The ``mr x nr``
accumulator lives in vector registers (kept under 1 KiB: see ``_base.ACC_SCOPE``); the packed
panel (``K x nr``) stays in L1/L2 while every row block streams past it, and packing removes
the 4 KiB-stride aliasing of a row-major B with a power-of-two N. Shapes the tiles do not
divide are padded with ``pad_einsum`` (zeros in, a predicated write-back out), so tails stay
vectorized.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.common import (
    ACC_SCOPE,
    STACK_TILE_BYTES,
    ceil_div,
    check,
    check_config,
    find_block,
    is_cpu,
    lanes_for,
    tail_rows,
    tile_size,
    vector_registers,
)

from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import target_cores
from tvm_ext.workloads.kernels import Workload, np_dtype


@dataclass(frozen=True)
class MatmulCPUConfig:
    """``mr x nr`` register tile, ``lanes`` per vector, how to pack B, what to parallelize.

    ``pack``: ``"panel"`` packs each ``K x nr`` panel of B inside the parallel panel loop (each
    thread packs what it uses); ``"full"`` packs all of B up front (in parallel), for when the
    threads split rows rather than panels; ``"none"`` reads B in place (when it fits in L1).
    ``parallel``: ``"panels"`` (over column panels) or ``"tiles"`` (over panels x row blocks).
    ``unroll_k``: reduction steps unrolled in the micro-kernel (must divide K).
    """

    mr: int = 8
    nr: int = 32
    lanes: int = 16
    pack: str = "panel"
    parallel: str = "panels"
    unroll_k: int = 1  # reduction steps unrolled in the micro-kernel

    def validate(self, target) -> None:
        check_config(self)
        if self.nr % self.lanes:
            raise ValueError(f"nr={self.nr} must be a multiple of lanes={self.lanes}")
        widest = lanes_for(target, 32)
        if self.lanes > widest:
            raise ValueError(f"lanes={self.lanes} is wider than the target's {widest}-lane vectors")
        if self.parallel not in ("panels", "tiles"):
            raise ValueError(f"parallel={self.parallel!r}: choose 'panels' or 'tiles'")
        if self.pack not in ("panel", "full", "none"):
            raise ValueError(f"pack={self.pack!r}: choose 'panel', 'full' or 'none'")
        if self.pack == "panel" and self.parallel == "tiles":
            raise ValueError(
                "pack='panel' packs once per panel: use parallel='panels' or pack='full'"
            )


KERNELS = ("matmul", "batch_matmul")


def applies(workload: Workload, target=None) -> bool:
    return workload.name in KERNELS


def default_config(workload: Workload, target) -> MatmulCPUConfig:
    """Per-target, per-shape defaults: a panel two vectors wide (four when M is short and N
    wide); pack B unless it is small, untransposed and the panel divides N; split panels across
    threads when there are enough of them, else panels x row blocks."""
    lanes = lanes_for(target, 32)
    M, N, K = (workload.args[d] for d in ("M", "N", "K"))
    nr = 4 * lanes if (M <= 4 * lanes and N >= 8 * lanes) or N == 4 * lanes else 2 * lanes
    nr = min(nr, lanes * ceil_div(N, lanes))
    # As many rows as keep the fp32 tile under the stack limit (7 x 32, 3 x 64 on AVX-512) and
    # its accumulators, B vectors and one A broadcast in the vector registers (6 x 16 on AVX2:
    # 8 x 16 needs 19 of its 16 registers and spills).
    vectors = nr // lanes
    fit = (vector_registers(target) - vectors - 1) // vectors
    fit = min(4 if nr >= 4 * lanes else 8, (STACK_TILE_BYTES - 1) // (4 * nr), fit)
    # Rows a tile divides where one of fit/2..fit does: padded rows are guarded A reads in
    # the micro-kernel (256 rows in tiles of 6, padded to 258: 74 GFLOP/s; tiles of 4: 132,
    # Zen 3, 2 threads); else the tile whose padded rows run in the least time.
    mr = tile_size(M, fit)
    if M % mr:
        mr = tail_rows(M, fit, vectors)
    small_b = K * N * np_dtype(workload.dtype).itemsize <= 32 * 1024
    in_place = small_b and not workload.args.get("transpose_b", False) and N % nr == 0
    parallel = "panels" if ceil_div(N, nr) >= 2 * target_cores(target) else "tiles"
    pack = "none" if in_place else ("panel" if parallel == "panels" else "full")
    # A narrow, short-K product (2048x64x64) is loop-overhead bound: unroll k (measured 1.1x).
    # Not with padded rows: the padded A reads are guarded, and unrolled they ran 2.7x slower.
    unroll_k = 8 if in_place and nr == 4 * lanes and K % 8 == 0 and M % mr == 0 else 1
    return MatmulCPUConfig(
        mr=mr, nr=nr, lanes=lanes, pack=pack, parallel=parallel, unroll_k=unroll_k
    )


def _panel_map(nr: int, transposed: bool):
    """Index map from B's layout ((K, N), or (N, K) when transposed) to panels (N/nr, K, nr)."""
    if transposed:
        return lambda *ix: (*ix[:-2], ix[-2] // nr, ix[-1], ix[-2] % nr)
    return lambda *ix: (*ix[:-2], ix[-1] // nr, ix[-2], ix[-1] % nr)


def schedule(workload: Workload, target, config: MatmulCPUConfig) -> "tvm_api.Schedule":
    check(applies(workload), f"matmul_cpu: {workload.key} is not a matmul")
    check(is_cpu(target), f"matmul_cpu: target {target.kind.name} is not a CPU")
    config.validate(target)
    mr, nr = config.mr, config.nr
    M, N, K = (workload.args[d] for d in ("M", "N", "K"))
    if K % config.unroll_k:
        raise ValueError(f"unroll_k={config.unroll_k} must divide K={K}")
    transposed = workload.args.get("transpose_b", False)
    batched = workload.name == "batch_matmul"
    sch = tvm_api.Schedule(workload.func)
    C = sch.get_sblock("C")
    padded = bool(M % mr or N % nr)
    if padded:
        sch.pad_einsum(
            C, ([1] if batched else []) + [ceil_div(M, mr) * mr, ceil_div(N, nr) * nr, K]
        )
        if find_block(sch, "A_pad") is not None:
            sch.compute_inline(sch.get_sblock("A_pad"))
    b_pad = find_block(sch, "B_pad")
    if b_pad is not None and config.pack == "none":
        sch.compute_inline(b_pad)
    *outer, i, j, k = sch.get_loops(C)
    i0, i1 = sch.split(i, [None, mr])
    j0, j1 = sch.split(j, [None, nr])
    sch.reorder(j0, i0, k, i1, j1)
    if config.pack != "none":
        pack = b_pad if b_pad is not None else sch.cache_read(C, 1, "global")
        sch.transform_layout(pack, ("write", 0), _panel_map(nr, transposed))
        if config.pack == "panel":
            sch.compute_at(pack, j0)
        else:
            sch.parallel(sch.get_loops(pack)[0])
        if not transposed:
            sch.vectorize(sch.get_loops(pack)[-1])
    acc = sch.cache_write(C, 0, ACC_SCOPE)
    sch.reverse_compute_at(acc, i0)
    crop = find_block(sch, "C_pad")
    if crop is not None:
        sch.reverse_compute_inline(crop)  # the write-back stores straight into C, predicated
    else:
        sch.vectorize(sch.get_loops(acc)[-1])
    if config.unroll_k > 1:
        k, k_in = sch.split(k, [None, config.unroll_k])
        sch.unroll(k_in)
    jj, jv = sch.split(j1, [None, config.lanes])
    sch.unroll(i1)
    sch.unroll(jj)
    sch.vectorize(jv)
    if config.parallel == "panels":
        sch.parallel(sch.fuse(*outer, j0) if outer else j0)
    else:
        sch.parallel(sch.fuse(*outer, j0, i0))
    init = sch.decompose_reduction(C, k)
    sch.vectorize(sch.get_loops(init)[-1])
    return sch
