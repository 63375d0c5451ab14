"""Weights repacked once, at compile time: the layout-rewrite blocks the rules add (a
weight's panels) become PrimFuncs of their own on the bound weights
(``SplitLayoutRewritePreproc``), run here on each weight, their results bound as constants;
the model then calls only the packed kernels.

A symbolic model's length ranges (``length_dispatch``) each call their own variant of a
kernel, and each variant its own repack of the same weights: alike repacks are one function
(:func:`shared_prim_funcs`), run once per weight (:func:`folded_repacks`). TVM's
``FoldConstant`` builds a function once per Relax function that calls it and runs every call:
BERT's symbolic model with 14 length ranges spent 51-61 s in it (its static build 20 s in
all)."""

from __future__ import annotations

from tvm_ext.base import tvm_api


def fold_prepacks(mod, entry: str):
    """``mod`` with its weight repacks split out and run once on the bound weights (see the
    module docstring), what else folds folded by ``FoldConstant``, dead functions dropped."""
    transform = tvm_api.relax.transform
    split = shared_prim_funcs(transform.SplitLayoutRewritePreproc()(mod))
    folded = tvm_api.transform.Sequential(
        [transform.FoldConstant(), transform.DeadCodeElimination([entry])]
    )(folded_repacks(split))
    return uncalled_dropped(folded)


def uncalled_dropped(mod):
    """``mod`` without the PrimFuncs no Relax function refers to (a repack run here, a copy
    :func:`shared_prim_funcs` replaced): ``DeadCodeElimination`` keeps any function with a
    ``global_symbol``, and the build would compile them all."""
    used: set[str] = set()

    def visit(expr):
        if isinstance(expr, tvm_api.ir.GlobalVar):
            used.add(expr.name_hint)

    for func in mod.functions.values():
        if isinstance(func, tvm_api.relax.Function):
            tvm_api.relax.analysis.post_order_visit(func, visit)
    kept = {gv: f for gv, f in mod.functions.items()
            if not isinstance(f, tvm_api.PrimFunc) or gv.name_hint in used}  # fmt: skip
    return tvm_api.IRModule(kept, attrs=mod.attrs)


def shared_prim_funcs(mod):
    """``mod`` with every call of a PrimFunc that computes what an earlier one does (TVM's
    structural equality, its name aside) calling that one instead; the copies are left for
    dead-code elimination."""
    canonical: dict = {}
    seen: dict[int, list] = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tvm_api.PrimFunc):
            continue
        plain = func.without_attr("global_symbol")
        bucket = seen.setdefault(tvm_api.tvm_ffi.structural_hash(plain), [])
        first = next((g for g, f in bucket if tvm_api.same_structure(f, plain)), None)
        if first is None:
            bucket.append((gv, plain))
        else:
            canonical[gv.name_hint] = first
    return tvm_api.retarget_calls(mod, canonical) if canonical else mod


def folded_repacks(mod):
    """``mod`` with every ``call_tir`` of a PrimFunc that the rules marked a weight repack
    (``SplitLayoutRewritePreproc`` names it ``<kernel>_weight_prepack``) on constants replaced
    by its result: each function built once, each (function, weights) pair run once, the
    result one constant wherever the pair is called."""
    built: dict = {}
    results: dict = {}

    def rewrite(call):
        callee = tvm_api.call_tir_callee(call)
        if callee is None or not callee.name_hint.endswith(REPACK_SUFFIX):
            return None
        args = call.args[1].fields if hasattr(call.args[1], "fields") else [call.args[1]]
        values = [getattr(a, "value", None) for a in args]
        shape = tvm_api.tensor_dims(call)
        if not all(isinstance(v, tvm_api.runtime.Tensor) for v in values):
            return None
        if shape is None or None in shape:
            return None  # not one tensor of a known shape: FoldConstant's to fold, if any
        key = (callee.name_hint, tuple(v.data_ptr() for v in values))
        if key not in results:
            if callee.name_hint not in built:
                func = mod[callee].with_attr("global_symbol", "main")
                built[callee.name_hint] = tvm_api.tirx.build(func, target="llvm")["main"]
            result = tvm_api.runtime.empty(shape, tvm_api.tensor_dtype(call), tvm_api.cpu(0))
            built[callee.name_hint](*values, result)
            results[key] = tvm_api.relax.const(result)
        return results[key]

    return tvm_api.rewrite_calls(mod, rewrite)


REPACK_SUFFIX = "_weight_prepack"  # the name SplitLayoutRewritePreproc gives a weight's repack

__all__ = [
    "REPACK_SUFFIX",
    "fold_prepacks",
    "folded_repacks",
    "shared_prim_funcs",
    "uncalled_dropped",
]
