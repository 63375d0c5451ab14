"""A small map's rows as one: a pointwise (1x1) convolution over an ``h x w`` output map
whose ``w`` columns no row tile divides computes over ``h * w`` fused rows, as the matmul it
is.

The contraction tiles the map's columns as its rows: 7 columns (resnet's and mobilenet_v2's
last stage) run as a tile of 4 and a partial one of 3 for each of the 7 map rows, or 6 + 1.
Fused, the 49 rows run in tiles of 5 (a partial one in 10). mobilenet_v2's 1x1 convolution of
320 to 1280 channels on 7 x 7 took 421 us over the columns, 228 us over the fused rows (Zen 3,
AVX2, 2 threads); strided, resnet50's 1024 -> 2048 from 14 x 14 to 7 x 7 2428 -> 1283 us
(onnxruntime's node: 1483 us). The block's iteration space is re-laid
(``transform_block_layout``), and so are its intermediate buffers (the accumulator's
write-back covers whole fused rows; over the 4-D buffer, the region a tile of fused rows
writes is a box of whole map rows, and the write-back wrote beyond the tile).
"""

from __future__ import annotations

from tvm_ext.schedules.rules.axes import Axes, find_axes, static_extents, vars_of

from tvm_ext.base import tvm_api

# The strides a fused map's input may be read at (a stride-2 pointwise convolution, resnet's
# downsampling: each row's input is one pixel, wherever it lies).
STRIDES = (1, 2, 3, 4)


def fuse_map_rows(sch, main, epilogue, axes: Axes, mr: int, weights: set[str], lanes: int):
    """Fuse ``main``'s map rows and columns (see the module docstring) when its ``mr``-row tile
    leaves a tail on the columns; returns (main, epilogue, axes) refreshed, or None when it
    does not apply (nothing changed)."""
    h = _map_row(sch, main, epilogue, axes)
    if h is None:
        return None
    w = axes.row
    width = static_extents(main)[w]
    if width is None or width % mr == 0:
        return None
    region = sch.get(main.block_rv).writes[0].region
    at = [vars_of(d.min) for d in region].index({main.iters[h].var.name})  # h's dimension
    _fuse(sch, main.block_rv, len(main.iters), h, width)
    sch.transform_layout(main.block_rv, ("write", 0), _fused_map(len(region), at, width))
    if epilogue is not None:
        _fuse(sch, epilogue.block_rv, len(epilogue.iters), h, width)
    info = tvm_api.dlight.analysis.get_sblock_info
    main = info(sch, main.block_rv)
    epilogue = info(sch, epilogue.block_rv) if epilogue is not None else None
    axes = find_axes(sch, main, weights=weights, lanes=lanes)
    return None if axes is None else (main, epilogue, axes)


def _map_row(sch, main, epilogue, axes: Axes) -> int | None:
    """The iterator of the map's rows, just before the columns (``axes.row``), when the block
    is pointwise over both: every access indexes each by itself times a stride
    (``STRIDES``) plus only reduction iterators of extent 1, and each dimension by one of
    them at most; the written buffer is an intermediate (the epilogue's input) and the
    epilogue iterates the same space."""
    w = axes.row
    if w is None or w == 0 or axes.group is not None or epilogue is None:
        return None
    h = w - 1
    iters, dom = main.iters, static_extents(main)
    if iters[h].kind != "S" or h in (axes.vector,) or dom[h] is None or dom[w] is None:
        return None
    names = {iters[h].var.name: iters[h].var, iters[w].var.name: iters[w].var}
    unit = {it.var.name for it, n in zip(iters, dom) if it.kind == "R" and n == 1}
    stmt = sch.get(main.block_rv)
    for access in [*stmt.reads, *stmt.writes]:
        for d in access.region:
            used = vars_of(d.min) & set(names)
            if len(used) > 1:
                return None
            if used:
                var = names[used.pop()]
                if all(vars_of(tvm_api.simplify(d.min - var * k)) - unit for k in STRIDES):
                    return None  # a window of more than one, or another iterator
    main_dims = [it.dom for it in iters if it.kind == "S"]
    epi_dims = [it.dom for it in epilogue.iters]
    same = len(main_dims) == len(epi_dims) and all(
        tvm_api.same_structure(a, b) for a, b in zip(main_dims, epi_dims)
    )
    out = [v for v in (vars_of(d.min) for d in stmt.writes[0].region) if v]
    spatial = [{it.var.name} for it in iters if it.kind == "S"]
    return h if same and out == spatial and iters[h + 1] is iters[w] else None


def _fuse(sch, block, ndim: int, h: int, width: int) -> None:
    sch.transform_block_layout(block, _fused_map(ndim, h, width))


def _fused_map(ndim: int, h: int, width: int):
    return tvm_api.index_map(lambda *v: (*v[:h], v[h] * width + v[h + 1], *v[h + 2 :]), ndim)


__all__ = ["fuse_map_rows"]
