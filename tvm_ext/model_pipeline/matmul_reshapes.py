"""A reshape of a batched matmul's result moved onto its operands, where it only regroups the
batch axes, so the matmul's element-wise consumers fuse into it.

``torch.export`` decomposes a matmul of 4-D tensors into a 3-D batched matmul between two
reshapes (``aten.matmul``'s own decomposition: ``view``, ``bmm``, ``view``): attention's
scores come out as ``(heads, n, n)`` and are reshaped to ``(1, heads, n, n)`` before the scale
and the mask. ``FuseOps`` fuses element-wise consumers into a matmul but not a reshape, so
the scale and the mask ran as a pass of their own over the score matrix (BERT at 384 tokens:
``fused_reshape6_multiply_add31``, 5.4 ms a run, 1.2 % of the model, Zen 3). With the
reshape on the operands (a view of each: their producers end in a reshape already), the
matmul's result has the consumers' shape, and the scale and the mask are its epilogue.
"""

from __future__ import annotations

from tvm_ext.base import tvm_api


def matmuls_before_reshapes(mod):
    """``mod`` with ``reshape(matmul(a, b), s)`` written ``matmul(reshape(a), reshape(b))``
    where the reshape only regroups the batch axes and the matmul's result has no other use
    (see the module docstring)."""
    shared = _shared_vars(mod)

    def moved(call, value_of):
        if tvm_api.call_name(call) != "relax.reshape" or _is_shared(call.args[0], shared):
            return None
        product = value_of(call.args[0])
        if tvm_api.call_name(product) != "relax.matmul":
            return None
        return _on_operands(product, tvm_api.shape_values(call))

    # The replaced matmuls, now unused, are removed.
    return tvm_api.rewrite_calls(mod, moved, with_bindings=True, prune=True)


def reshapes_merged(mod):
    """``mod`` with ``reshape(reshape(x, a), b)`` written ``reshape(x, b)``.

    A reshape alone is a view (``RewriteDataflowReshape`` turns its kernel into the VM's
    ``reshape``), but two in a row fuse into one kernel with an intermediate buffer, which
    that pass does not recognize: it stayed a copy. torch's attention leaves such pairs
    around the probabilities (``(1, h, n, n) -> (h, n, n)`` for the values' matmul), and a
    moved matmul's operands gain one: whisper's encoder at 1500 frames copied its 6 x 1500 x
    1500 probabilities once more a layer (``fused_reshape7_reshape81``, 4.1 ms a call, 5 % of
    the model, Zen 3)."""

    def merged(call, value_of):
        if tvm_api.call_name(call) != "relax.reshape":
            return None
        inner = value_of(call.args[0])
        if tvm_api.call_name(inner) != "relax.reshape":
            return None
        return tvm_api.relax.op.reshape(inner.args[0], tvm_api.shape_values(call))

    # The inner reshapes nothing else reads are removed.
    return tvm_api.rewrite_calls(mod, merged, with_bindings=True, prune=True)


def _on_operands(matmul, shape):
    """``matmul`` computed straight into ``shape``: its operands reshaped to ``shape``'s batch
    axes (a 2-D right operand, a weight, broadcast as it was); None when ``shape`` changes
    more than the batch axes or an operand is broadcast along them."""
    a, b = matmul.args
    out, sa, sb = (tvm_api.shape_values(e) for e in (matmul, a, b))
    if None in (out, sa, sb, shape) or len(out) < 3 or len(shape) < 3 or len(sa) != len(out):
        return None
    if len(sb) not in (2, len(out)):
        return None
    same = tvm_api.same_structure
    if not (same(out[-2:], shape[-2:]) and same(_product(out[:-2]), _product(shape[:-2]))):
        return None
    if not same(sa[:-2], out[:-2]) or (len(sb) > 2 and not same(sb[:-2], out[:-2])):
        return None  # an operand broadcast along a batch axis: no reshape of it regroups it
    batch = list(shape[:-2])
    reshape = tvm_api.relax.op.reshape
    left = reshape(a, [*batch, *sa[-2:]])
    right = b if len(sb) == 2 else reshape(b, [*batch, *sb[-2:]])
    return tvm_api.relax.op.matmul(left, right, out_dtype=matmul.attrs.out_dtype)


def _product(dims):
    value = tvm_api.tirx.IntImm("int64", 1)
    for d in dims:
        value = value * d
    return tvm_api.simplify(value)


def _shared_vars(mod) -> list:
    """The variables of ``mod``'s dataflow blocks used more than once, or used after their
    block (its outputs: ``udchain`` sees the uses inside the block only)."""
    relax = tvm_api.relax
    shared = []
    for func in mod.functions.values():
        if not isinstance(func, relax.Function):
            continue
        for block in getattr(func.body, "blocks", ()):
            if isinstance(block, relax.DataflowBlock):
                uses = relax.analysis.udchain(block)
                shared += [var for var, users in uses.items() if len(users) > 1]
                shared += [
                    b.var for b in block.bindings if not isinstance(b.var, relax.DataflowVar)
                ]
    return shared


def _is_shared(var, shared: list) -> bool:
    return any(var.same_as(v) for v in shared)


__all__ = ["matmuls_before_reshapes", "reshapes_merged"]
