"""A small map's rows as one: a pointwise (1x1) convolution over an ``h x w`` output map
whose ``w`` columns no row tile divides computes over ``h * w`` fused rows, as the matmul it
is; so does a windowed one (3x3, strided or not) where the fused rows' tiles cost markedly
less than the columns' (:data:`WINDOW_GAIN`).

The contraction tiles the map's columns as its rows: 7 columns (resnet's and mobilenet_v2's
last stage) run as a tile of 4 and a partial one of 3 for each of the 7 map rows, or 6 + 1.
Fused, the 49 rows run in tiles of 5 (a partial one in 10). mobilenet_v2's 1x1 convolution of
320 to 1280 channels on 7 x 7 took 421 us over the columns, 228 us over the fused rows (Zen 3,
AVX2, 2 threads); strided, resnet50's 1024 -> 2048 from 14 x 14 to 7 x 7 2428 -> 1283 us
(onnxruntime's node: 1483 us). A 3x3 convolution reads its input at ``row // w + ry`` and
``row % w + rx`` over the fused rows: each row of a tile its own base address, fixed over the
reduction (resnet's last stage, 512 channels on 7 x 7: 1425 -> 1318 us, 256 -> 512 strided
from 14 x 14 695 -> 631 us, 160 channels on 7 x 7 137 -> 123 us; Zen 3, AVX2, 2 threads,
best of 3 interleaved). The block's iteration space is re-laid
(``transform_block_layout``), and so are its intermediate buffers (the accumulator's
write-back covers whole fused rows; over the 4-D buffer, the region a tile of fused rows
writes is a box of whole map rows, and the write-back wrote beyond the tile).
"""

from __future__ import annotations

from tvm_ext.schedules.common import lanes_for, tile_cost
from tvm_ext.schedules.rules.axes import Axes, find_axes, static_extents, vars_of
from tvm_ext.schedules.rules.tile_shape import sizes, statements

from tvm_ext.base import tvm_api

# The strides a fused map's input may be read at (a stride-2 pointwise convolution, resnet's
# downsampling: each row's input is one pixel, wherever it lies).
STRIDES = (1, 2, 3, 4)

# The most a windowed convolution's fused rows may cost, as a fraction of its columns' (by
# common.tile_cost, the partial tiles counted whole), for the fusion: 7 columns in tiles of 4
# (8 computed) against 49 rows in tiles of 5 (50) is 0.85 and ran 7-10 % faster; 14 columns
# in tiles of 5 against 196 rows in tiles of 4 is 0.98 and ran within noise, 5 % slower at
# best of 3 (256 channels; Zen 3).
WINDOW_GAIN = 0.9


def fuse_map_rows(sch, main, epilogue, axes: Axes, tile: tuple[int, int], weights, target):
    """Fuse ``main``'s map rows and columns (see the module docstring) when its ``tile``
    (``mr`` rows, ``nr`` lanes) leaves a tail on the columns (and, for a window, the fused
    rows cost less: WINDOW_GAIN); returns (main, epilogue, axes) refreshed, or None when it
    does not apply (nothing changed)."""
    h, window = _map_row(sch, main, epilogue, axes)
    if h is None:
        return None
    w, mr = axes.row, tile[0]
    width = static_extents(main)[w]
    if width is None or width % mr == 0:
        return None
    if window and not _window_pays(static_extents(main), axes, h, tile, target):
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
    axes = find_axes(sch, main, weights=weights, lanes=lanes_for(target, 32))
    return None if axes is None else (main, epilogue, axes)


def _window_pays(dom: list, axes: Axes, h: int, tile: tuple[int, int], target) -> bool:
    """Whether the fused rows' tiles cost at most WINDOW_GAIN of the columns' (the tile the
    fused rows would take: :func:`~.tile_shape.sizes` over ``h * w`` rows)."""
    lanes, (mr, nr), rows, width = lanes_for(target, 32), tile, dom[h], dom[axes.row]
    fused_dom = list(dom)
    fused_dom[axes.row] = rows * width
    fused_mr, fused_nr = sizes(fused_dom, axes, target)
    columns = tile_cost(rows * -(-width // mr) * mr, mr, len(statements(nr, lanes)))
    fused = -(-rows * width // fused_mr) * fused_mr
    return tile_cost(fused, fused_mr, len(statements(fused_nr, lanes))) <= WINDOW_GAIN * columns


def _map_row(sch, main, epilogue, axes: Axes) -> tuple[int | None, bool]:
    """(the iterator of the map's rows, just before the columns (``axes.row``), whether the
    block reads a window) when the block is pointwise or windowed over both: every access
    indexes each by itself times a stride (``STRIDES``) plus only reduction iterators (a
    window's when any has an extent past 1), and each dimension by one of them at most; the
    written buffer is an intermediate (the epilogue's input) and the epilogue iterates the
    same space. (None, False) for any other block."""
    w, none = axes.row, (None, False)
    if w is None or w == 0 or axes.group is not None or epilogue is None:
        return none
    h = w - 1
    iters, dom = main.iters, static_extents(main)
    if iters[h].kind != "S" or h in (axes.vector,) or dom[h] is None or dom[w] is None:
        return none
    names = {iters[h].var.name: iters[h].var, iters[w].var.name: iters[w].var}
    reduction = {it.var.name: n for it, n in zip(iters, dom) if it.kind == "R"}
    stmt, window = sch.get(main.block_rv), False
    for access in [*stmt.reads, *stmt.writes]:
        for d in access.region:
            used = vars_of(d.min) & set(names)
            if len(used) > 1:
                return none
            if used:
                var = names[used.pop()]
                offsets = [vars_of(tvm_api.simplify(d.min - var * k)) for k in STRIDES]
                offset = next((o for o in offsets if o <= set(reduction)), None)
                if offset is None:
                    return none  # another iterator in the index
                window = window or any(reduction[r] != 1 for r in offset)
    main_dims = [it.dom for it in iters if it.kind == "S"]
    epi_dims = [it.dom for it in epilogue.iters]
    same = len(main_dims) == len(epi_dims) and all(
        tvm_api.same_structure(a, b) for a, b in zip(main_dims, epi_dims)
    )
    out = [v for v in (vars_of(d.min) for d in stmt.writes[0].region) if v]
    spatial = [{it.var.name} for it in iters if it.kind == "S"]
    return (h, window) if same and out == spatial and iters[h + 1] is iters[w] else none


def _fuse(sch, block, ndim: int, h: int, width: int) -> None:
    sch.transform_block_layout(block, _fused_map(ndim, h, width))


def _fused_map(ndim: int, h: int, width: int):
    return tvm_api.index_map(lambda *v: (*v[:h], v[h] * width + v[h + 1], *v[h + 2 :]), ndim)


__all__ = ["fuse_map_rows"]
