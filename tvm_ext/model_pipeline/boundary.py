"""What crosses a compiled model's boundary: each call's inputs checked.

:func:`index_checks` finds every input that feeds an index (``take``, ``gather_elements``,
``gather_nd``, ``scatter_elements``, ``scatter_nd``, ``index_tensor``, ``index_put``: their
arguments are :mod:`~tvm_ext.model_pipeline.index_guard`'s), followed through the ops that keep
its values (reshape, permute, expand/squeeze, flatten, broadcast, integer casts), with the
extent of the axis it indexes; :func:`check_inputs` checks a call's inputs against the
model's input specs and those checks and raises :class:`~tvm_ext.base.errors.InputError`
(naming the input, the position, the value and the valid range) where torch raises
``IndexError``. The kernels themselves stay inside their tables whatever they are called with
(:func:`~tvm_ext.model_pipeline.index_guard.safe_indexing`).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator, Sequence

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import Bounds, bind_symbolic
from tvm_ext.base.errors import InputError
from tvm_ext.model_pipeline.index_guard import IndexUse, axis_extent, index_expr, index_uses

# A dimension is an int, a symbolic dimension's name (one length for every input that names
# it) or None (a symbolic expression).
InputSpec = tuple[tuple["int | str | None", ...], str]

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


def _axes(call, use: IndexUse) -> tuple[int, ...]:
    if use.columns:
        first = int(getattr(call.attrs, "batch_dims", 0) or 0)
        return tuple(range(first, first + len(use.extents)))
    if use.field is not None:
        return (use.field,)
    dims = tvm_api.tensor_dims(call.args[0])
    return (axis_extent(dims, getattr(call.attrs, "axis", None))[1],)


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
            index = index_expr(value, use)
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


def check_inputs(
    model: str,
    names: Sequence[str],
    specs: Sequence[InputSpec],
    checks: Sequence[IndexCheck],
    inputs: Sequence,
    bounds: Bounds | None = None,
) -> list[np.ndarray]:
    """``inputs`` as the contiguous, native-order numpy arrays the model takes, after the
    checks of one call: their number, each one's kind, rank, shape and dtype against
    ``specs`` (a symbolic dimension takes one length in every input that names it, within its
    ``bounds``), and the values of each input that indexes a table. Raises InputError, one
    message per kind of fault; NaN and infinite floats are data and pass."""
    names = list(names) or [f"#{i}" for i in range(len(specs))]
    if len(inputs) != len(specs):
        wanted = ", ".join(f"{n}: {_spec(s)}" for n, s in zip(names, specs))
        raise InputError(f"{model} takes {len(specs)} inputs ({wanted}), got {len(inputs)}")
    arrays = [_array(model, name, a, spec) for name, a, spec in zip(names, inputs, specs)]
    bind_symbolic(model, names, [dims for dims, _ in specs], [a.shape for a in arrays], bounds)
    for check in checks:
        check.check(arrays[check.input], model)
    return arrays


def _spec(spec: InputSpec) -> str:
    return f"{spec[1]} {_shape(spec[0])}"


def _shape(dims) -> str:
    """A shape as Python prints a tuple, a symbolic dimension as its name (or '?')."""
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
    if any(isinstance(d, int) and d != g for d, g in zip(dims, array.shape)):
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
    "InputSpec",
    "check_inputs",
    "index_checks",
    "input_vars",
]
