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
    return tvm_api.rewrite_calls(mod, _rewritten)


def _rewritten(call):
    return _bool_comparison_as_int8(call) if tvm_api.call_name(call) in COMPARISONS else (
        _bool_scan_as_int32(call))  # fmt: skip


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
