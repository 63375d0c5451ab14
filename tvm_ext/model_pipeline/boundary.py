"""What crosses a compiled model's boundary: each call's inputs checked, and index kernels that
cannot reach outside their tables.

A model's inputs reach its kernels unchecked, and an index op lowers to a kernel that trusts
its indices: the torch importer's embedding lookup is ``take(..., mode="fast")``, which reads
``table[i]`` for any ``i`` (one token id of 10,000,000 against a 30,522-row table is a
segmentation fault), and ``index_tensor`` reads outside its data on a negative index (torch
wraps it). Two guards, both read from the Relax module:

- :func:`index_checks` finds every input that feeds an index (``take``, ``gather_elements``,
  ``gather_nd``, ``scatter_elements``, ``scatter_nd``, ``index_tensor``, ``index_put``),
  followed through the ops that keep its values (reshape, permute, expand/squeeze, flatten,
  broadcast, integer casts), with the extent of the axis it indexes; :func:`check_inputs`
  checks a call's inputs against the model's input specs and those checks and raises
  :class:`~tvm_ext.base.errors.InputError` (naming the input, the position, the value and the
  valid range) where torch raises ``IndexError``.
- :func:`safe_indexing` makes every index kernel memory-safe whatever it is called with (the
  VM the package hands out can be called directly): ``take``'s ``fast`` mode becomes ``clip``,
  the other ops' indices are clamped into range (``index_tensor``'s and ``index_put``'s
  negative ones wrapped first, torch's meaning; ``index_tensor`` becomes the ``take`` or
  ``gather_nd`` it is, on the clamped indices). An index the boundary checked is unchanged
  by the clamp, so the guarded model computes what the model computes on every valid input.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Iterator, Sequence

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import InputError

InputSpec = tuple[tuple["int | None", ...], str]  # None: a symbolic dimension

# Ops whose output holds the values of their first argument (rearranged or repeated): an input
# that reaches an index through them is checked on its own values.
VALUE_KEEPING = {
    "relax.reshape",
    "relax.permute_dims",
    "relax.expand_dims",
    "relax.squeeze",
    "relax.flatten",
    "relax.broadcast_to",
}


@dataclasses.dataclass(frozen=True)
class IndexUse:
    """One index argument of an index op: which argument (and which field of a tuple
    argument), the extents it indexes (one, or one per entry of its last axis for the ``_nd``
    ops), and whether negative indices count from the end (torch's advanced indexing)."""

    arg: int
    field: int | None
    extents: tuple[int | None, ...]
    negatives: bool = False
    columns: bool = False  # the index's last axis holds one index per extent


@dataclasses.dataclass(frozen=True)
class IndexCheck:
    """An input whose values index a table: ``input`` is its position among the model's
    inputs; each value must lie in [-extent, extent) when ``negatives``, else [0, extent)."""

    input: int
    name: str
    op: str
    table: str
    axes: tuple[int, ...]
    extents: tuple[int, ...]
    negatives: bool = False
    columns: bool = False

    def check(self, values: np.ndarray, model: str = "the model") -> None:
        """Raise InputError on the first value out of range (nothing when all are in)."""
        if values.size == 0 or (self.columns and values.shape[-1:] != (len(self.extents),)):
            return  # no value, or a shape the op itself refuses
        high = np.asarray(self.extents) if self.columns else self.extents[0]
        low = -high if self.negatives else 0
        if self.columns:
            flat = values.reshape(-1, len(self.extents))
            if (flat.min(axis=0) >= low).all() and (flat.max(axis=0) < high).all():
                return
        elif values.min() >= low and values.max() < high:  # the fast path: two reductions
            return
        bad = (values < low) | (values >= high)
        position = tuple(int(i) for i in np.argwhere(bad)[0])
        which = position[-1] if self.columns else 0
        extent, axis = self.extents[which], self.axes[which]
        lowest = -extent if self.negatives else 0
        value = values[position].item()
        raise InputError(
            f"{model}: input '{self.name}' holds {value} at position {position}, outside the "
            f"valid range [{lowest}, {extent}): it indexes axis {axis} of {self.table} ({self.op}; "
            f"{int(bad.sum())} of its {values.size} values are out of range)",
            input=self.name,
            position=position,
            value=value,
            valid=(lowest, extent),
        )


def index_uses(call) -> list[IndexUse]:
    """The index arguments of a Relax call of an index op (empty for any other call)."""
    op = tvm_api.call_name(call)
    if op is None or op not in _INDEX_OPS:
        return []
    return _INDEX_OPS[op](call)


def _axis_extent(dims, axis) -> tuple[int | None, int]:
    if dims is None:
        return None, 0
    if axis is None:  # take without an axis indexes the flattened tensor
        return (math.prod(dims) if None not in dims else None), 0
    axis = int(axis) % len(dims)
    return dims[axis], axis


def _single(arg: int, data_arg: int = 0, negatives: bool = False):
    def uses(call) -> list[IndexUse]:
        axis = getattr(call.attrs, "axis", None)
        extent, _ = _axis_extent(tvm_api.tensor_dims(call.args[data_arg]), axis)
        return [IndexUse(arg, None, (extent,), negatives)]

    return uses


def _nd(first_axis_attr: str | None):
    def uses(call) -> list[IndexUse]:
        dims = tvm_api.tensor_dims(call.args[0])
        index_dims = tvm_api.tensor_dims(call.args[1])
        if dims is None or not index_dims or index_dims[-1] is None:
            return [IndexUse(1, None, (None,), columns=True)]
        first = int(getattr(call.attrs, first_axis_attr)) if first_axis_attr else 0
        return [IndexUse(1, None, tuple(dims[first : first + index_dims[-1]]), columns=True)]

    return uses


def _per_axis(call) -> list[IndexUse]:
    dims = tvm_api.tensor_dims(call.args[0])
    fields = getattr(call.args[1], "fields", None)
    if fields is None:  # a tuple variable, not a literal tuple: nothing to follow
        return []
    return [
        IndexUse(1, i, (None if dims is None or i >= len(dims) else dims[i],), negatives=True)
        for i in range(len(fields))
    ]


_INDEX_OPS = {
    "relax.take": _single(1),
    "relax.gather_elements": _single(1),
    "relax.scatter_elements": _single(1),
    "relax.gather_nd": _nd("batch_dims"),
    "relax.scatter_nd": _nd(None),
    "relax.index_tensor": _per_axis,
    "relax.index_put": _per_axis,
}


def _index_expr(call, use: IndexUse):
    arg = call.args[use.arg]
    return arg if use.field is None else arg.fields[use.field]


def _axes(call, use: IndexUse) -> tuple[int, ...]:
    if use.columns:
        first = int(getattr(call.attrs, "batch_dims", 0) or 0)
        return tuple(range(first, first + len(use.extents)))
    if use.field is not None:
        return (use.field,)
    dims = tvm_api.tensor_dims(call.args[0])
    return (_axis_extent(dims, getattr(call.attrs, "axis", None))[1],)


def index_checks(func, inputs: Sequence) -> tuple[IndexCheck, ...]:
    """The checks on ``func``'s inputs (its parameters ``inputs``, in call order) that feed an
    index: each input's values reach the index through value-keeping ops only, and the extent
    it indexes is static. An index computed from an input (a sum, a slice) is not followed:
    :func:`safe_indexing` keeps its kernel inside the table."""
    origin = {var: i for i, var in enumerate(inputs)}
    checks: list[IndexCheck] = []
    for var, value in tvm_api.bindings(func):
        source = _kept_from(value, origin)
        if source is not None:
            origin[var] = source
        for use in index_uses(value):
            index = _index_expr(value, use)
            if index not in origin or None in use.extents:
                continue
            data = value.args[0]
            checks.append(
                IndexCheck(
                    origin[index],
                    str(inputs[origin[index]].name),
                    tvm_api.call_name(value),
                    f"'{data.name}'" if hasattr(data, "name") else "a computed tensor",
                    _axes(value, use),
                    tuple(int(e) for e in use.extents),
                    use.negatives,
                    use.columns,
                )
            )
    return tuple(dict.fromkeys(checks))  # one check per (input, table axis)


def _kept_from(value, origin: dict) -> int | None:
    """The input ``value`` holds the values of, when it is that input, or a value-keeping op
    (an integer-to-integer cast included) of it."""
    if value in origin:
        return origin[value]
    name = tvm_api.call_name(value)
    if name is None or not value.args or value.args[0] not in origin:
        return None
    if name == "relax.astype":
        ints = ("int", "uint")
        source, target = tvm_api.tensor_dtype(value.args[0]), str(value.attrs.dtype)
        if not (source.startswith(ints) and target.startswith(ints)):
            return None
    elif name not in VALUE_KEEPING:
        return None
    return origin[value.args[0]]


def safe_indexing(mod):
    """``mod`` with every index kernel of its Relax functions kept inside its table (see the
    module's docstring); a constant index already in range is left alone."""
    for gv, func in list(mod.functions.items()):
        if isinstance(func, tvm_api.relax.Function):
            mod = tvm_api.rewrite_calls(mod, gv.name_hint, _guarded)
    return mod


def _guarded(call):
    uses = index_uses(call)
    if not uses:
        return None
    relax = tvm_api.relax
    if tvm_api.call_name(call) == "relax.take":
        if call.attrs.mode != "fast":
            return None  # clip, wrap and nan stay inside the table
        return relax.op.take(call.args[0], call.args[1], call.attrs.axis, mode="clip")
    if tvm_api.call_name(call) == "relax.index_tensor":
        return _as_gather(call, uses)
    args = list(call.args)
    changed = False
    for use in uses:
        index = _index_expr(call, use)
        clamped = _clamped(index, use)
        if clamped is None:
            continue
        changed = True
        if use.field is None:
            args[use.arg] = clamped
        else:
            fields = list(args[use.arg].fields)
            fields[use.field] = clamped
            args[use.arg] = relax.Tuple(fields)
    return relax.Call(call.op, args, call.attrs) if changed else None


def _as_gather(call, uses: list[IndexUse]):
    """``index_tensor(data, (i0, ..., ik))`` as a ``take`` (one index) or a ``gather_nd`` on
    the clamped indices: TVM 0.27's FuseTIR fails on an ``index_tensor`` whose index another
    op computes (``global_name != "fused"``), the clamp included; None when an extent or an
    index's shape is symbolic (the op is then left as it is)."""
    relax = tvm_api.relax
    fields = call.args[1].fields
    shapes = [tvm_api.tensor_dims(f) for f in fields]
    if any(None in u.extents for u in uses) or any(s is None or None in s for s in shapes):
        return None
    clamped = [_clamped(f, u) for f, u in zip(fields, uses)]
    indices = [f if c is None else c for f, c in zip(fields, clamped)]
    if len(indices) == 1:
        return relax.op.take(call.args[0], indices[0], axis=0, mode="fast")  # clamped: in range
    shape = np.broadcast_shapes(*shapes)
    stacked = relax.op.stack([relax.op.broadcast_to(i, shape) for i in indices], axis=-1)
    return relax.op.gather_nd(call.args[0], stacked)


def _clamped(index, use: IndexUse):
    """``index`` clamped into [0, extent) (negatives wrapped first when they count from the
    end); None when its extent is symbolic or it is a constant already in range."""
    if None in use.extents:
        return None
    dtype = tvm_api.tensor_dtype(index)
    extents = np.asarray(use.extents if use.columns else use.extents[0], dtype=dtype)
    values = tvm_api.constant_values(index)
    if values is not None:
        low = -extents if use.negatives else 0
        if ((values >= low) & (values < extents)).all():
            return None
    relax = tvm_api.relax
    if use.negatives:
        index = relax.op.where(
            relax.op.less(index, relax.const(0, dtype)),
            relax.op.add(index, relax.const(extents, dtype)),
            index,
        )
    low = relax.const(0, dtype)
    return relax.op.minimum(relax.op.maximum(index, low), relax.const(extents - 1, dtype))


def check_inputs(
    model: str,
    names: Sequence[str],
    specs: Sequence[InputSpec],
    checks: Sequence[IndexCheck],
    inputs: Sequence,
) -> list[np.ndarray]:
    """``inputs`` as the contiguous, native-order numpy arrays the model takes, after the
    checks of one call: their number, each one's kind, rank, shape and dtype against
    ``specs``, and the values of each input that indexes a table. Raises InputError, one
    message per kind of fault; NaN and infinite floats are data and pass."""
    names = list(names) or [f"#{i}" for i in range(len(specs))]
    if len(inputs) != len(specs):
        wanted = ", ".join(f"{n}: {_spec(s)}" for n, s in zip(names, specs))
        raise InputError(f"{model} takes {len(specs)} inputs ({wanted}), got {len(inputs)}")
    arrays = [_array(model, name, a, spec) for name, a, spec in zip(names, inputs, specs)]
    for check in checks:
        check.check(arrays[check.input], model)
    return arrays


def _spec(spec: InputSpec) -> str:
    return f"{spec[1]} {_shape(spec[0])}"


def _shape(dims) -> str:
    """A shape as Python prints a tuple, a symbolic dimension as '?'."""
    text = ", ".join("?" if d is None else str(d) for d in dims)
    return f"({text},)" if len(dims) == 1 else f"({text})"


def _array(model: str, name: str, value, spec: InputSpec) -> np.ndarray:
    dims, dtype = spec
    where = f"{model}: input '{name}'"
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise InputError(f"{where} takes an array of {_spec(spec)}, got a {type(value).__name__} "
                         f"numpy cannot read ({err})", input=name) from err  # fmt: skip
    got = array.dtype
    if got.kind not in "biufc":
        raise InputError(
            f"{where} takes an array of {_spec(spec)}, got an array of {got} "
            f"({type(value).__name__}), not of numbers",
            input=name,
        )
    if array.ndim != len(dims):
        raise InputError(
            f"{where} takes rank {len(dims)} (shape {_shape(dims)}), got rank {array.ndim} "
            f"(shape {array.shape})",
            input=name,
        )
    if any(d is not None and d != g for d, g in zip(dims, array.shape)):
        raise InputError(f"{where} takes shape {_shape(dims)}, got {array.shape}", input=name)
    if str(got.newbyteorder("=")) != dtype:
        wanted = np.dtype(dtype) if dtype != "bfloat16" else None
        hint = (
            f": an integer input (ids, indices) must not arrive as float; cast it "
            f"(.astype(np.{dtype}))"
            if wanted is not None and wanted.kind in "biu" and got.kind in "fc"
            else ""
        )
        raise InputError(f"{where} takes {dtype}, got {got}{hint}", input=name)
    if not got.isnative:  # a big-endian array of the right dtype: the model reads native order
        array = array.astype(got.newbyteorder("="))
    return np.ascontiguousarray(array)


def input_vars(func, weight_vars: Sequence) -> Iterator:
    """The parameters of a Relax function that are inputs (not among ``weight_vars``)."""
    weights = set(weight_vars)
    return (v for v in func.params if v not in weights)


__all__ = [
    "IndexCheck",
    "IndexUse",
    "check_inputs",
    "index_checks",
    "index_uses",
    "input_vars",
    "safe_indexing",
]
