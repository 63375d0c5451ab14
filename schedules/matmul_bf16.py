"""x86 bf16 matmul on AVX512-BF16: a ``vdpbf16ps`` micro-kernel over a pair-packed B.

B is packed once into ``Bp[N/nr, K/2, nr, 2]``: for each ``nr``-column panel, the k pairs of
each column side by side, one 64-byte line per 16 columns (the operand layout of
``vdpbf16ps``) and the whole panel one sequential stream. Each thread owns panels (or panel x
row-block tiles when panels are few); for each ``mr``-row block it keeps ``mr x nv`` fp32
accumulator vectors in registers and, per k pair, broadcasts 4 bytes of A against each line.
Shapes are padded to the tile with zeros (zeros add nothing to a dot product); the write-back
is predicated. A (and a transposed B) is read as it is; batch_matmul runs the same nest per
batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext import _tvm
from tvm_ext.kernels import Workload

from ._base import ACC_SCOPE, STACK_TILE_BYTES, ceil_div, check, check_config, find_block, is_cpu
from .intrin_x86 import BF16_DOT_16x2, register_x86_intrinsics

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


def has_avx512bf16(target) -> bool:
    return bool(_tvm.global_func("target.llvm_cpu_has_feature")("avx512bf16", target))


def applies(workload: Workload, target=None) -> bool:
    return (
        workload.name in KERNELS
        and workload.dtype == "bfloat16"
        and (target is None or (is_cpu(target) and has_avx512bf16(target)))
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
    parallel = "panels" if panels >= 2 * _tvm.physical_cores() else "tiles"
    return MatmulBF16Config(mr=mr, nv=nv, parallel=parallel)


def _pair_map(nr: int, transposed: bool):
    """Index map from B's layout ((K, N), or (N, K) when transposed) to (N/nr, K/2, nr, 2)."""
    if transposed:
        return lambda *ix: (*ix[:-2], ix[-2] // nr, ix[-1] // 2, ix[-2] % nr, ix[-1] % 2)
    return lambda *ix: (*ix[:-2], ix[-1] // nr, ix[-2] // 2, ix[-1] % nr, ix[-2] % 2)


def schedule(workload: Workload, target, config: MatmulBF16Config) -> "_tvm.Schedule":
    check(
        is_cpu(target) and has_avx512bf16(target),
        "matmul_bf16: the target CPU lacks AVX512-BF16",
    )
    check(applies(workload), f"matmul_bf16: {workload.key} is not a bfloat16 matmul")
    config.validate(target)
    register_x86_intrinsics()
    mr, nv = config.mr, config.nv
    nr = 16 * nv
    M, N, K = (workload.args[d] for d in ("M", "N", "K"))
    transposed = workload.args.get("transpose_b", False)
    batched = workload.name == "batch_matmul"
    sch = _tvm.Schedule(workload.func)
    C = sch.get_sblock("C")
    if M % mr or N % nr or K % 2:
        sch.pad_einsum(C, ([1] if batched else []) + [mr, nr, 2])
        a_pad = find_block(sch, "A_pad")
        if a_pad is not None:  # kept as a padded copy: an inlined guard would not tensorize
            sch.parallel(sch.get_loops(a_pad)[0])
    *outer, i, j, k = sch.get_loops(C)
    i0, i1 = sch.split(i, [None, mr])
    j0, j1, j2 = sch.split(j, [None, nv, 16])
    k0, k1 = sch.split(k, [None, 2])
    sch.reorder(*outer, j0, i0, k0, i1, j1, j2, k1)
    pack = find_block(sch, "B_pad") or sch.cache_read(C, 1, "global")
    sch.transform_layout(pack, ("write", 0), _pair_map(nr, transposed))
    sch.parallel(sch.get_loops(pack)[0])
    acc = sch.cache_write(C, 0, ACC_SCOPE)
    sch.reverse_compute_at(acc, i0)
    crop = find_block(sch, "C_pad")
    if crop is not None:
        sch.reverse_compute_inline(crop)
    else:
        sch.vectorize(sch.get_loops(acc)[-1])
    if config.parallel == "panels":
        sch.parallel(sch.fuse(*outer, j0) if outer else j0)
    else:
        sch.parallel(sch.fuse(*outer, j0, i0))
    init = sch.decompose_reduction(C, k0)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.unroll(i1)
    sch.unroll(j1)
    sch.tensorize(j2, BF16_DOT_16x2)
    return sch
