"""Transposes moved where they cost least: before the reshape they follow, where the reshape
only merges (or splits) leading axes the transpose leaves in place
(:func:`transposes_before_reshapes`), and carried forward through a chain of data movement
until one undoes them (:func:`transposes_carried`).

Grouped-query attention repeats each key head (``repeat_kv``: expand, broadcast, then a
reshape merging the key heads with their repeats) and transposes the keys for the scores
matmul. With a symbolic sequence length the reshape is never fused (its indices divide by
the length, which ``AnnotateTIROpPattern`` calls opaque), so the repeat and the transpose
were two kernels, the repeated keys written and read once more between them. Transposed
first, the expand, broadcast and transpose fuse into one kernel and the reshape is a view:
what the static build gets by fusing all four. The values are the same: the transpose moves
only axes the reshape keeps whole, so it commutes with it.
"""

from __future__ import annotations

from tvm_ext.base import tvm_api


def transposes_before_reshapes(mod):
    """``mod`` with ``permute_dims(reshape(x))`` written ``reshape(permute_dims(x))`` where the
    reshape's shape is symbolic and the two commute (see the module docstring)."""
    return tvm_api.rewrite_calls(mod, _moved, with_bindings=True)


def _moved(call, value_of):
    if tvm_api.call_name(call) != "relax.permute_dims" or call.attrs.axes is None:
        return None
    reshaped = value_of(call.args[0])
    if tvm_api.call_name(reshaped) != "relax.reshape":
        return None
    source = reshaped.args[0]
    inner = tvm_api.shape_values(source)
    outer = tvm_api.shape_values(reshaped)
    axes = [int(a) for a in call.attrs.axes]
    if inner is None or outer is None or None not in tvm_api.tensor_dims(reshaped):
        return None  # a static reshape FuseOps fuses anyway
    kept = _kept_leading(inner, outer, axes)
    if kept is None:
        return None
    merged_in, merged_out = kept
    inner_axes = list(range(merged_in)) + [merged_in + a - merged_out for a in axes[merged_out:]]
    transposed = tvm_api.relax.op.permute_dims(source, inner_axes)
    return tvm_api.relax.op.reshape(transposed, [outer[a] for a in axes])


def _kept_leading(inner, outer, axes):
    """(leading input axes, leading output axes) the reshape merges or splits, when every
    later axis passes through it unchanged and the transpose keeps the leading output axes
    in place and permutes only the later ones; None otherwise."""
    for merged_out in range(len(outer)):  # the longest tail first
        merged_in = len(inner) - (len(outer) - merged_out)
        if merged_in < 0:
            continue
        pairs = zip(inner[merged_in:], outer[merged_out:])
        if all(tvm_api.same_structure(a, b) for a, b in pairs):
            return (merged_in, merged_out) if axes[:merged_out] == list(range(merged_out)) else None
    return None


def transposes_carried(mod):
    """``mod`` with each transpose carried forward through the reshapes, transposes, splits,
    concatenations and element-wise operators after it until one undoes it (see
    :class:`_Carry`); kept only where that leaves fewer transposes and no more bindings (a
    carried copy of a chain something else still reads would compute it twice)."""
    carried = tvm_api.rewrite_bindings(mod, _Carry().visit)
    (moves, total), (moves_after, total_after) = _counts(mod), _counts(carried)
    return carried if moves_after < moves and total_after <= total else mod


class _Carry:
    """Which variables are a transpose of another, ``var == permute_dims(twin, order)``, and
    the twin of each reshape, split, element of a split, concatenation and element-wise
    operation of such variables, computed in the twin's own layout; a transpose whose order
    undoes its input's (or a chain that ends in the twin's order) is replaced by its twin.

    A channels-last CNN whose graph leaves the layout between two convolutions (ShuffleNet's
    channel shuffle: ``concat``, a reshape to ``(n, groups, c / groups, h, w)``, a transpose
    of the two channel axes, a reshape back and a ``split`` along the channels, all in NCHW)
    took a transpose to NCHW before the chain and one back to NHWC after each piece
    (``ConvertLayout`` has no layout rule for a reshape): two more passes over the
    activation a unit. Carried, the chain runs in NHWC (a reshape of the channels to
    ``(groups, c / groups)``, their transpose and a split, one kernel) and both transposes
    are gone (shufflenet_v2_x1_0: 34 of its transposes, 17 kernels)."""

    def __init__(self):
        self.twins = {}

    def visit(self, var, value, emit):
        name = tvm_api.call_name(value)
        if isinstance(value, tvm_api.relax.TupleGetItem):
            found = self.twins.get(value.tuple_value)
            if found is not None:
                twin, order = found
                piece = emit(tvm_api.relax.TupleGetItem(twin, value.index))
                if order == list(range(len(order))):
                    return piece
                self.twins[var] = (piece, order)
            return None
        if name == "relax.permute_dims" and _static_tensor(value):
            axes = _axes(value)
            source = value.args[0]
            twin, order = self.twins.get(source, (source, list(range(len(axes)))))
            composed = [order[a] for a in axes]
            if composed == list(range(len(composed))):
                return twin
            self.twins[var] = (twin, composed)
            return None
        found = self.twins.get(value.args[0]) if name in _CARRIED else None
        if name == "relax.concat":
            found = _common_order([self.twins.get(f) for f in value.args[0].fields])
        elif name in _ELEMENTWISE:
            found = _common_order([self.twins.get(a) for a in value.args], same_shape=True)
        if found is None or not _static_tensor(found[0] if name == "relax.split" else value):
            return None
        carried = _CARRIED[name](value, *found, emit)
        if carried is None:
            return None
        twin, order = carried
        if order == list(range(len(order))) and name != "relax.split":
            return twin  # the chain undid its transposes itself
        self.twins[var] = carried
        return None


def _reshaped(value, twin, order, emit):
    """(twin, order) of ``reshape(permute_dims(twin, order), shape)``: the twin's axes that
    each group of the reshape merges or splits transposed next to each other (in the order
    the reshape reads them) where they are not, then reshaped; None where a dimension is
    symbolic."""
    dims = tvm_api.tensor_dims(twin)
    out = tvm_api.tensor_dims(value)
    if dims is None or None in dims or out is None or None in out:
        return None
    groups = _groups([dims[a] for a in order], out)
    if groups is None:
        return None
    twin_axes = [[order[a] for a in ins] for ins, _ in groups]
    ranked = sorted(range(len(groups)), key=lambda g: min(twin_axes[g]))
    sequence = [a for g in ranked for a in twin_axes[g]]
    placement = list(range(len(dims)))
    for slot, axis in zip((i for i, d in enumerate(dims) if d != 1), sequence):
        placement[slot] = axis
    if placement != list(range(len(dims))):
        twin = emit(tvm_api.relax.op.permute_dims(twin, placement))
    laid = [o for o in range(len(out)) if out[o] == 1 and all(out[p] == 1 for p in range(o))]
    for g in ranked:
        for o in groups[g][1]:
            laid.append(o)
            o += 1
            while o < len(out) and out[o] == 1:
                laid.append(o)
                o += 1
    twin = emit(tvm_api.relax.op.reshape(twin, [out[o] for o in laid]))
    return twin, [laid.index(o) for o in range(len(out))]


def _split(value, twin, order, emit):
    sections = value.attrs.indices_or_sections
    if isinstance(sections, tvm_api.tirx.IntImm):
        sections = int(sections)
    else:
        sections = [int(i) for i in sections]
    axis = order[int(value.attrs.axis) % len(order)]
    return emit(tvm_api.relax.op.split(twin, sections, axis)), order


def _concatenated(value, twins, order, emit):
    axis = order[int(value.attrs.axis) % len(order)]
    return emit(tvm_api.relax.op.concat(twins, axis)), order


def _elementwise(value, twins, order, emit):
    return emit(tvm_api.relax.Call(value.op, twins, value.attrs)), order


# Element-wise operators whose every operand has a twin of one shape and order: computed
# on the twins (an operand broadcast against another is left alone).
_ELEMENTWISE = {
    f"relax.{op}"
    for op in (
        "add subtract multiply divide maximum minimum nn.relu nn.gelu nn.gelu_tanh nn.silu "
        "sigmoid tanh exp negative"
    ).split()
}
_CARRIED = {
    "relax.reshape": _reshaped,
    "relax.split": _split,
    "relax.concat": _concatenated,
    **dict.fromkeys(_ELEMENTWISE, _elementwise),
}


def _common_order(found, same_shape=False):
    """(twins, order) of operands that each have a twin in the same order (and, with
    ``same_shape``, of the same shape); None otherwise."""
    if not found or any(f is None for f in found):
        return None
    orders = {tuple(order) for _, order in found}
    shapes = {tvm_api.tensor_dims(twin) for twin, _ in found}
    if len(orders) != 1 or (same_shape and len(shapes) != 1):
        return None
    return [twin for twin, _ in found], found[0][1]


def _groups(dims, out):
    """The reshape of ``dims`` to ``out`` as groups (input axes, output axes) of the
    dimensions other than 1, each group's products equal, in order; None if they do not
    pair."""
    ins = [i for i, d in enumerate(dims) if d != 1]
    outs = [o for o, d in enumerate(out) if d != 1]
    groups, i, o = [], 0, 0
    while i < len(ins) and o < len(outs):
        group_in, group_out = [ins[i]], [outs[o]]
        left, right = dims[ins[i]], out[outs[o]]
        while left != right:
            if left < right:
                i += 1
                if i == len(ins):
                    return None
                group_in.append(ins[i])
                left *= dims[ins[i]]
            else:
                o += 1
                if o == len(outs):
                    return None
                group_out.append(outs[o])
                right *= out[outs[o]]
        groups.append((group_in, group_out))
        i, o = i + 1, o + 1
    return groups if i == len(ins) and o == len(outs) else None


def _axes(call) -> list[int]:
    axes = call.attrs.axes
    rank = len(tvm_api.shape_values(call))
    return list(range(rank))[::-1] if axes is None else [int(a) for a in axes]


def _static_tensor(expr) -> bool:
    dims = tvm_api.tensor_dims(expr)
    return dims is not None and None not in dims


def _relax_funcs(mod):
    return [f for f in mod.functions.values() if isinstance(f, tvm_api.relax.Function)]


def _counts(mod) -> tuple[int, int]:
    """(transposes, bindings) over ``mod``'s Relax functions, unused bindings left out."""
    moves = total = 0
    for func in _relax_funcs(mod):
        for _, value in tvm_api.bindings(tvm_api.relax.analysis.remove_all_unused(func)):
            if isinstance(value, tvm_api.relax.Var):
                continue  # an alias (the block's output named again): no work
            total += 1
            name = tvm_api.call_name(value)
            moves += name == "relax.permute_dims"
    return moves, total


__all__ = ["transposes_before_reshapes", "transposes_carried"]
