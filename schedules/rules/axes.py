"""The roles of a reduction block's iterators, read from its accesses: the *vector* axis (the
output's last dimension, or a weight's axis of whole vectors), the *row* axis (a spatial
iterator the operands read along the vector axis do not use: their one vector load feeds a
broadcast of each row) and, for a grouped convolution, its group width. What the contraction,
window and staged rules tile by.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm_ext.schedules.rules.fallback import expr_children, static_int

from tvm_ext.base import tvm_api


@dataclass(frozen=True)
class Axes:
    """The reduction block's iterators by role (indices into its iterator list)."""

    spatial: tuple[int, ...]
    reduction: tuple[int, ...]
    vector: int  # the spatial iterator of the output's last dimension
    row: int | None  # a spatial iterator the vector-loaded operand does not use
    # A grouped convolution's channels per group when the vector axis is its output channel:
    # an operand indexed by ``f // group`` (its input) holds one value for a whole group's
    # lanes, so a panel of lanes within one group broadcasts it.
    group: int | None = None


# A symbolic extent ranks above every static one when the longest axis is chosen.
_SYMBOLIC = 1 << 62


def static_extents(block) -> list[int | None]:
    """The block's iterator extents, None where an extent is symbolic (a sequence length)."""
    return [static_int(d) for d in block.dom()]


def vars_of(expr) -> set:
    return {v.name for v in tvm_api.dlight.analysis.collect_vars_used_in_prim_expr(expr)}


def weight_names(func) -> set[str]:
    """Names of the parameters Relax marked layout-free (the model's weights)."""
    free = {int(i) for i in (func.attrs.get("layout_free_buffers", []) if func.attrs else [])}
    return {func.params[i].name for i in free if i < len(func.params)}


def find_axes(sch, block, weights: set[str] = frozenset(), lanes: int = 1) -> Axes | None:
    """Which iterator is the vector axis and which the row axis, from the block's accesses.

    The vector axis is the output's last dimension (unit-stride stores), unless that axis
    streams activations while a weight is indexed by another spatial iterator of whole
    vectors (``F`` of an NCHW conv: the output's last axis is its width): then the vectors run
    along that weight axis (packed into panels, one contiguous vector load per step feeds
    ``mr`` broadcasts of the activations), the row axis is the output's last dimension, and
    the accumulator tile keeps the vector axis innermost."""
    stmt = sch.get(block.block_rv)
    kinds = block.dom_kind()
    names = [it.var.name for it in block.iters]  # unit iterators are left out of both
    spatial = tuple(i for i, k in enumerate(kinds) if k == "S")
    reduction = tuple(i for i, k in enumerate(kinds) if k == "R")
    if not spatial or not reduction or len(kinds) != len(spatial) + len(reduction):
        return None
    last = stmt.writes[0].region[-1].min
    if not isinstance(last, tvm_api.tirx.Var) or last.name not in names:
        return None
    vector = names.index(last.name)
    if vector not in spatial:
        return None
    extents = static_extents(block)
    along = _weight_axis(stmt, names, spatial, weights, lanes, extents)
    if along is not None and not indexes_weight(stmt, last.name, weights):
        vector, preferred = along, names.index(last.name)
    else:
        preferred = None
    group = group_width(stmt, names[vector])
    # Operands read along the vector axis (it indexes one of their dimensions; a grouped
    # input, read at ``f // group``, is one value for a panel's lanes: broadcast, not read
    # along it).
    streamed = [r for r in stmt.reads if streams(r, names[vector])]
    used = set().union(set(), *(vars_of(d.min) for r in streamed for d in r.region))
    rows = [i for i in spatial if i != vector and names[i] not in used]
    if preferred in rows:
        row = preferred
    else:
        # The longest row axis; a symbolic one (a sequence length) counts as the longest. Of
        # equal ones, the output's later dimension (max keeps the first: rows reversed): an
        # NHWC convolution's width, whose rows are adjacent pixels (contiguous input
        # channels, output rows one after the other), not its height, whose rows are image
        # rows apart (a 1x1 convolution 16 -> 64 channels on a 112 x 112 map, rows along
        # the height: 96 us, along the width: 53 us, Zen 5; resnet18's kernels 3 % faster
        # in all, mobilenet_v3_large's 17 %).
        row = (
            max(rows[::-1], key=lambda i: _SYMBOLIC if extents[i] is None else extents[i])
            if rows
            else None
        )
    return Axes(spatial, reduction, vector, row, group)


def streams(read, var: str) -> bool:
    """Whether ``var`` indexes ``read`` other than through ``var // c`` (a grouped
    convolution's input channel, ``f // group * width + rc``, changes once per group)."""
    return any(_uses(d.min, var)[0] for d in read.region)


def group_width(stmt, var: str) -> int | None:
    """The group of a grouped convolution whose output channel is ``var``: ``c`` when some
    read uses ``var`` only as ``var // c`` (c > 1, the same ``c`` in every such read), else
    None (a plain contraction, or a depthwise convolution: its input channel is ``var``)."""
    divisors: set[int] = set()
    for read in stmt.reads:
        plain, groups = False, set()
        for d in read.region:
            p, g = _uses(d.min, var)
            plain, groups = plain or p, groups | g
        if not plain:
            divisors |= groups
    if len(divisors) != 1:
        return None
    (width,) = divisors
    return width if width > 1 else None


def _uses(expr, var: str) -> tuple[bool, set[int]]:
    """(whether ``expr`` uses ``var`` other than as ``var // c``, the constants ``c`` it is
    divided by), over the arithmetic of an index expression."""
    tirx = tvm_api.tirx
    if isinstance(expr, tirx.Var):
        return expr.name == var, set()
    if (
        isinstance(expr, tirx.FloorDiv)
        and isinstance(expr.a, tirx.Var)
        and expr.a.name == var
        and isinstance(expr.b, tirx.IntImm)
    ):
        return False, {int(expr.b.value)}
    children = expr_children(expr)
    if not children:  # a leaf, or a load: any use of var in it is a plain one
        return var in vars_of(expr), set()
    plain, groups = False, set()
    for child in children:
        p, g = _uses(child, var)
        plain, groups = plain or p, groups | g
    return plain, groups


def _read_along(read, var: str) -> bool:
    """Whether ``var`` alone indexes one of the dimensions of ``read``."""
    dims = [vars_of(d.min) for d in read.region]
    return any(d == {var} for d in dims)


def indexes_weight(stmt, var: str, weights: set[str]) -> bool:
    """Whether ``var`` alone indexes a dimension of one of the weights ``stmt`` reads."""
    return any(r.source.name in weights and _read_along(r, var) for r in stmt.reads)


def _weight_axis(stmt, names, spatial, weights, lanes, extents) -> int | None:
    """A spatial iterator of whole vectors that alone indexes a dimension of a weight and that
    no other operand reads along (an output channel), or None. A grouped convolution's input
    reads its output channel only as ``f // group``: one value for a panel of a group's lanes
    (broadcast) where the group is whole vectors (SqueezeBERT's grouped 1x1 conv1d in NCW, 4
    groups of 96 output channels: vectors along its 50 positions before, 351 us a call)."""
    if lanes <= 1:
        return None
    activations = [r for r in stmt.reads if r.source.name not in weights]
    for i in spatial:
        if extents[i] is None or extents[i] % lanes:
            continue
        if any(streams(r, names[i]) for r in activations):
            continue
        group = group_width(stmt, names[i])
        if any(names[i] in vars_of(d.min) for r in activations for d in r.region) and (
            group is None or group % lanes
        ):
            continue
        if indexes_weight(stmt, names[i], weights):
            return i
    return None


__all__ = [
    "Axes",
    "find_axes",
    "group_width",
    "static_extents",
    "indexes_weight",
    "streams",
    "vars_of",
    "weight_names",
]
