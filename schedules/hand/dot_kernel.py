"""The loop nest shared by the dot-product tensorized matmuls (VNNI int8, AVX512-BF16).

B is packed into ``Bp[N/w, K/g, w, g]``: ``g`` consecutive k of each column side by side (the
operand layout of a ``g``-deep dot-product instruction), ``w`` columns per block (16: one
64-byte line per block; or the whole ``nr``-column panel, one sequential stream). Each thread
owns column panels (or panel x row-block tiles); for each ``mr``-row block it keeps
``mr x nv`` 16-lane accumulators in registers and, per k group, broadcasts ``g`` elements of A
against each line, through the tensorize intrinsic ``intrin`` (``C[16] += A[g] . B[16, g]``).
Shapes are padded to the tile with zeros (zeros add nothing to a dot product); the write-back
is predicated. batch_matmul runs the same nest per batch; a transposed B is packed the same.
"""

from __future__ import annotations

from tvm_ext.schedules.common import find_block

from tvm_ext.base import tvm_api
from tvm_ext.workloads.kernels import Workload


def _pack_map(width: int, group: int, transposed: bool):
    """Index map from B's layout ((K, N), or (N, K) when transposed) to (N/w, K/g, w, g)."""
    if transposed:
        return lambda *ix: (
            *ix[:-2],
            ix[-2] // width,
            ix[-1] // group,
            ix[-2] % width,
            ix[-1] % group,
        )
    return lambda *ix: (*ix[:-2], ix[-1] // width, ix[-2] // group, ix[-1] % width, ix[-2] % group)


def schedule_dot_kernel(
    workload: Workload,
    *,
    mr: int,
    nv: int,
    group: int,
    intrin: str,
    acc_scope: str,
    panel_layout: bool,
    parallel: str = "panels",
) -> "tvm_api.Schedule":
    nr = 16 * nv
    M, N, K = (workload.args[d] for d in ("M", "N", "K"))
    batched = workload.name == "batch_matmul"
    sch = tvm_api.Schedule(workload.func)
    C = sch.get_sblock("C")
    if M % mr or N % nr or K % group:
        sch.pad_einsum(C, ([1] if batched else []) + [mr, nr, group])
        a_pad = find_block(sch, "A_pad")
        if a_pad is not None:  # kept as a padded copy: an inlined guard would not tensorize
            sch.parallel(sch.get_loops(a_pad)[0])
    *outer, i, j, k = sch.get_loops(C)
    i0, i1 = sch.split(i, [None, mr])
    j0, j1, j2 = sch.split(j, [None, nv, 16])
    k0, k1 = sch.split(k, [None, group])
    sch.reorder(*outer, j0, i0, k0, i1, j1, j2, k1)
    pack = find_block(sch, "B_pad") or sch.cache_read(C, 1, "global")
    width = nr if panel_layout else 16
    transposed = workload.args.get("transpose_b", False)
    sch.transform_layout(pack, ("write", 0), _pack_map(width, group, transposed))
    # Copy in the packed order (column blocks in parallel, k groups, then each block's lines):
    # parallel over B's rows instead scattered every write (measured 4.3x slower for a
    # 2048x2048 bf16 B: 1.88 vs 0.44 ms). Padded or not, the dims divide by the tile here.
    *batch, pk, pj = sch.get_loops(pack)
    if transposed:
        pk, pj = pj, pk
    pk0, pk1 = sch.split(pk, [None, group])
    pj0, pj1 = sch.split(pj, [None, width])
    sch.reorder(*batch, pj0, pk0, pj1, pk1)
    sch.parallel(sch.fuse(*batch, pj0) if batch else pj0)
    sch.unroll(pk1)
    if not transposed:
        sch.vectorize(pj1)  # contiguous reads of B's rows
    acc = sch.cache_write(C, 0, acc_scope)
    sch.reverse_compute_at(acc, i0)
    crop = find_block(sch, "C_pad")
    if crop is not None:
        sch.reverse_compute_inline(crop)
    else:
        sch.vectorize(sch.get_loops(acc)[-1])
    if parallel == "panels":
        sch.parallel(sch.fuse(*outer, j0) if outer else j0)
    else:
        sch.parallel(sch.fuse(*outer, j0, i0))
    init = sch.decompose_reduction(C, k0)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.unroll(i1)
    sch.unroll(j1)
    sch.tensorize(j2, intrin)
    return sch
