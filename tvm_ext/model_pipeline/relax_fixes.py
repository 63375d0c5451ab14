"""Rewrites of a Relax module around TVM 0.27 bugs that make a correct model fail to build.

- **A comparison of two bool tensors** (``equal(a, b)`` with ``a``, ``b`` bool) is emitted by
  the LLVM code generator as a float compare on ``i1`` (``fcmp oeq i1``: "LLVM module
  verification failed", or ``CreateAdd ... MatchesCode(kDLFloat)`` when folded): transformers'
  attention masks (GPT-2, Llama) hold such comparisons. Both sides are cast to ``int8``
  first; the result is the same bool.
- **A running sum or product of a bool tensor** (``cumsum(mask)``, which transformers' masks
  of GPT-2 and Llama hold) adds ``i1`` values, which the code generator refuses
  (``CreateAdd ... MatchesCode(kDLFloat)``, at ``relax.build``). It is computed in ``int32``
  and cast to the type the call had.
- **A slice along a negative axis with a symbolic end** (``x[..., :seq]``, which GPT-2's and
  Llama's masks hold) fails in ``LegalizeOps``: TOPI's dynamic ``strided_slice`` does not
  normalize the axis (``Check failed: axis < src_tensor_dim (-1 vs. 2)``). The axis is
  written as its non-negative position.
- **A slice of a symbolic axis from its end** (``x[..., -1:]``, whose end torch writes as
  ``2**63 - 1``) overflows TVM's simplifier while Relax infers its shape (``Literal value
  36893488147419103228 exceeds range of int64``), and its begin (-1) leaves Relax no shape
  for it after ``LegalizeOps`` (``emit_te now only supports Tensor that has ShapeExpr
  shape``, at its consumer). Both are written from the axis's extent (``n - 1``, ``n``).
- **A slice with a symbolic end** (``mask[:, :seq]``) is lowered by TOPI with an extent that
  guards a negative end (``T.if_then_else(seq < 0, ...)``), and ``FuseOps`` fails on that
  shape (``Cannot find the FInferType attribute registered to op: prim.if_then_else``). A slice
  the declared bounds prove in range is marked ``assume_inbound``, whose extent is ``end -
  begin``.
- **A shape only the declared bounds simplify** (``from_exported_program`` slices BERT's
  position ids to ``T.min(seq, 512)`` while ``seq <= 128``): Relax's shape inference ignores
  the function's ``tir_var_upper_bound``, so the ``add`` of that and a ``(1, seq, 64)`` tensor
  has no known shape and ``LegalizeOps`` refuses it. Such a call is reshaped to the shape the
  bounds give (a view the VM makes at no cost).

Element-wise math rewritten for speed, not around a bug, is :mod:`.fast_activations`.
"""

from __future__ import annotations

from tvm_ext.base import tvm_api

COMPARISONS = {
    "relax.equal": "equal",
    "relax.not_equal": "not_equal",
    "relax.less": "less",
    "relax.less_equal": "less_equal",
    "relax.greater": "greater",
    "relax.greater_equal": "greater_equal",
}


SCANS = {"relax.cumsum": "cumsum", "relax.cumprod": "cumprod"}


def fixed(mod):
    """``mod`` with every rewrite of this module applied to its Relax functions."""
    mod = tvm_api.rewrite_calls(mod, _rewritten)
    analyzer = tvm_api.bounded_analyzer(mod)
    if analyzer is None:  # no symbolic dimension with a declared range: nothing to rewrite
        return mod
    return tvm_api.rewrite_calls(mod, lambda call: _within_bounds(call, analyzer))


def _rewritten(call):
    name = tvm_api.call_name(call)
    if name in COMPARISONS:
        return _bool_comparison_as_int8(call)
    if name == "relax.strided_slice":
        return _slice_normalized(call)
    return _bool_scan_as_int32(call)


def _slice_normalized(call):
    """A ``strided_slice`` with its axes non-negative and, on a symbolic axis, its constant
    begins and ends written from the axis's extent (see the module docstring); None when
    nothing changes."""
    data, axes = call.args[0], call.args[1]
    dims = tvm_api.shape_values(data) or ()
    axes = [int(a) for a in tvm_api.tuple_values(axes)]
    if not dims:
        return None
    positive = [a % len(dims) for a in axes]
    begins, ends = (
        [_from_extent(v, dims[a]) for a, v in zip(positive, tvm_api.tuple_values(bounds))]
        for bounds in call.args[2:4]
    )
    if positive == axes and all(v is None for v in begins + ends):
        return None
    begins, ends = (
        [v if v is not None else old for v, old in zip(values, tvm_api.tuple_values(bounds))]
        for values, bounds in zip((begins, ends), call.args[2:4])
    )
    inbound = bool(call.attrs.assume_inbound)
    return tvm_api.relax.op.strided_slice(data, positive, begins, ends, *call.args[4:],
                                          assume_inbound=inbound)  # fmt: skip


def _from_extent(value, extent):
    """A slice's constant begin or end on a symbolic axis of ``extent``, written from the
    extent: a negative one counted back from it, one no axis reaches (torch's "to the end",
    ``2**63 - 1``) as the extent itself; None when it stays as it is."""
    if isinstance(extent, tvm_api.tirx.IntImm) or not isinstance(value, (int, tvm_api.tirx.IntImm)):
        return None
    value = int(value)
    if value >= 2**62:
        return extent
    return tvm_api.simplify(extent + value) if value < 0 else None


def _within_bounds(call, analyzer):
    """The rewrites that need the declared bounds of the symbolic dimensions (see above)."""
    if tvm_api.call_name(call) == "relax.strided_slice" and not call.attrs.assume_inbound:
        if _slice_in_range(call, analyzer):
            return tvm_api.relax.op.strided_slice(*call.args, assume_inbound=True)
    values = tvm_api.shape_values(call)
    if not values or all(isinstance(v, (tvm_api.tirx.IntImm, tvm_api.tirx.Var)) for v in values):
        return None
    simple = [analyzer.simplify(v) for v in values]
    if all(tvm_api.same_structure(a, b) for a, b in zip(values, simple)):
        return None
    return tvm_api.relax.op.reshape(call, simple)


def _slice_in_range(call, analyzer) -> bool:
    """Whether a ``strided_slice`` with a symbolic begin or end provably slices inside its
    input (``0 <= begin <= end <= extent``, positive strides) under the declared bounds."""
    dims = tvm_api.shape_values(call.args[0])
    axes, begins, ends = (tvm_api.tuple_values(a) for a in call.args[1:4])
    strides = tvm_api.tuple_values(call.args[4]) if len(call.args) > 4 else [1] * len(axes)
    symbolic = not all(isinstance(v, tvm_api.tirx.IntImm) for v in begins + ends)
    if dims is None or not symbolic:
        return False
    for axis, begin, end, stride in zip(axes, begins, ends, strides):
        extent = dims[int(axis) % len(dims)]
        if not isinstance(stride, (int, tvm_api.tirx.IntImm)):
            return False
        checks = (int(stride) > 0, analyzer.can_prove(begin >= 0),
                  analyzer.can_prove(begin <= end), analyzer.can_prove(end <= extent))  # fmt: skip
        if not all(bool(c) for c in checks):
            return False
    return True


def _bool_scan_as_int32(call):
    name = tvm_api.call_name(call)
    if name not in SCANS or tvm_api.tensor_dtype(call.args[0]) != "bool":
        return None
    op, attrs = tvm_api.relax.op, call.attrs
    result = tvm_api.tensor_dtype(call) or "bool"
    scan = getattr(op, SCANS[name])(op.astype(call.args[0], "int32"), axis=attrs.axis,
                                     dtype="int32", exclusive=bool(attrs.exclusive))  # fmt: skip
    return scan if result == "int32" else op.astype(scan, result)


def _bool_comparison_as_int8(call):
    name = tvm_api.call_name(call)
    if name not in COMPARISONS or len(call.args) != 2:
        return None
    if not all(tvm_api.tensor_dtype(a) == "bool" for a in call.args):
        return None
    op = tvm_api.relax.op
    return getattr(op, COMPARISONS[name])(*(op.astype(a, "int8") for a in call.args))


__all__ = ["COMPARISONS", "SCANS", "fixed"]
