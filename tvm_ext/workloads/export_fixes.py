"""Rewrites of a program ``torch.export`` gives around TVM 0.27 importer bugs that make a
correct model fail to import (each names the model it was found on); the values are the
same. :func:`repair_exported` applies them all, in place, before the import.
"""

from __future__ import annotations

import math


def repair_exported(torch, program) -> None:
    """``program``'s graph rewritten in place where TVM's importer would mis-convert it."""
    _drop_empty_cat_inputs(program)
    _indexed_axes_moved_first(torch, program)
    _aranges_counted_up(torch, program)


def _drop_empty_cat_inputs(program) -> None:
    """Drop the 1-D tensors of shape ``(0,)`` a ``cat`` joins with tensors of more dimensions:
    torch skips them (its legacy rule), TVM's importer refuses mixed ranks. transformers'
    ``DynamicCache`` starts every layer's keys and values as such a tensor, so any decoder
    exported with ``use_cache=True`` (Qwen2's, Mistral's, OPT's default) failed to import
    ("Concat expects all input tensors to have same ndim")."""
    changed = False
    for node in program.graph_module.graph.nodes:
        if node.op != "call_function" or node.target.__name__ != "cat.default":
            continue
        tensors = list(node.args[0])
        shapes = [_traced_shape(t) for t in tensors]
        if any(s is None for s in shapes) or max(len(s) for s in shapes) < 2:
            continue
        kept = [t for t, shape in zip(tensors, shapes) if shape != (0,)]
        if kept and len(kept) < len(tensors):
            node.args = (kept, *node.args[1:])
            changed = True
    if changed:
        program.graph_module.recompile()


def _indexed_axes_moved_first(torch, program) -> None:
    """An ``x[:, :, i, j]`` (``aten.index.Tensor`` whose index tensors follow full slices)
    written ``x.permute(...)[i, j].permute(...)``: the indexed axes first, the sliced ones
    moved back after the gather. TVM 0.27's importer lines the index tensors up against the
    data's leading axes, sliced or not ("index_tensor: cannot broadcast index shapes"), so
    ``F.unfold`` (im2col: transformers' ConvBERT) failed to import. Index tensors that are
    not adjacent (torch moves their axes first) are left as they are."""
    aten = torch.ops.aten
    changed = False
    graph = program.graph_module.graph
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.index.Tensor:
            continue
        source, indices = node.args[0], list(node.args[1])
        used = [k for k, i in enumerate(indices) if i is not None]
        shape, out = _traced_shape(source), _traced_shape(node)
        if not used or used[0] == 0 or used != list(range(used[0], used[-1] + 1)):
            continue
        if shape is None or out is None:
            continue
        if any(getattr(indices[k].meta.get("val"), "dtype", None) == torch.bool for k in used):
            continue  # a mask selects, it does not gather
        first, count, rank = used[0], len(used), len(shape)
        order = [*used, *range(first), *range(first + count, rank)]
        gathered = len(out) - (rank - count)  # the broadcast index shape's rank
        back = [
            *range(gathered, gathered + first),
            *range(gathered),
            *range(gathered + first, len(out)),
        ]
        with graph.inserting_before(node):
            moved = graph.call_function(aten.permute.default, (source, order))
            picked = graph.call_function(aten.index.Tensor, (moved, [indices[k] for k in used]))
            result = graph.call_function(aten.permute.default, (picked, back))
        value = source.meta["val"]
        with value.fake_mode:
            moved.meta["val"] = value.permute(order)
            picked.meta["val"] = moved.meta["val"][tuple(indices[k].meta["val"] for k in used)]
            result.meta["val"] = picked.meta["val"].permute(back)
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        changed = True
    if changed:
        program.graph_module.recompile()


def _aranges_counted_up(torch, program) -> None:
    """An ``arange(start, end, step)`` of constants with a negative step written ``start + step
    * arange(n)``: TVM 0.27's Relax counts such a range two elements too long (``arange(50,
    -50, -1)``: 102), and the first operator to meet its true length fails (transformers'
    funnel: "broadcast_to expects ... 100 ... 102")."""
    aten = torch.ops.aten
    graph = program.graph_module.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.arange.start_step:
            continue
        start, end, step = (list(node.args) + [1])[:3]
        if not all(isinstance(v, (int, float)) for v in (start, end, step)) or step >= 0:
            continue
        count = max(math.ceil((end - start) / step), 0)
        value = node.meta.get("val")
        if value is None or tuple(value.shape) != (count,):
            continue
        kwargs = {k: v for k, v in node.kwargs.items() if k == "device"}
        kwargs["dtype"] = value.dtype  # a float range counts in floats, as torch's does
        with graph.inserting_before(node):
            counted = graph.call_function(aten.arange.default, (count,), kwargs)
            scaled = graph.call_function(aten.mul.Tensor, (counted, step))
            shifted = graph.call_function(aten.add.Tensor, (scaled, start))
        with value.fake_mode:
            counted.meta["val"] = aten.arange.default(count, dtype=value.dtype)
            scaled.meta["val"] = counted.meta["val"] * step
            shifted.meta["val"] = scaled.meta["val"] + start
        node.replace_all_uses_with(shifted)
        graph.erase_node(node)
        changed = True
    if changed:
        program.graph_module.recompile()


def _traced_shape(node) -> tuple | None:
    """The shape export traced for ``node`` (None: not a tensor node, or no traced value)."""
    value = getattr(node, "meta", {}).get("val")
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(shape)


__all__ = ["repair_exported"]
