"""Reductions over nothing, written as plain assignments before any rule reads them.

A block whose reduction iterators all have extent 1 (a depthwise ``Conv2d(c, c, 1,
groups=c)``, a matmul with K = 1, a sum over a unit axis) runs its update once after its
``T.init``: ``out = init; out = out + x * w`` is ``out = init + x * w``. dlight's
``normalize_prim_func`` drops unit iterators, so such a block reaches the rules as a spatial
block that still has an init; inlining an element-wise consumer into it (dlight's
``try_inline``) then rewrites the init and the update both (``init: out = 0 + bias; update:
out = out + x * w + bias``), and a block with no reduction iterator runs its init on every
iteration: the bias was added twice. Written as one assignment (the init's value in place of
the update's read of its own output), the block is what it computes, and every rule may
inline into it.
"""

from __future__ import annotations

from tvm_ext.schedules.rules.fallback import loads, static_int

from tvm_ext.base import tvm_api


def folded(func):
    """``func`` with every block whose reduction iterators all have extent 1 written as a
    spatial block without ``T.init`` (see the module's text); ``func`` itself when it has none.
    A block whose update reads its own output anywhere but at the element it writes, or that
    writes more than one element, is left as it is."""
    if not any(_foldable(block) for block in tvm_api.sblocks(func)):
        return func
    return tvm_api.tvm_ffi.structural_map(func, [(tvm_api.s_tir.SBlock, _fold)])


def _foldable(block) -> bool:
    tirx = tvm_api.tirx
    if block.init is None:
        return False
    reducing = [iv for iv in block.iter_vars if iv.iter_type == tirx.IterVar.CommReduce]
    if not all(static_int(iv.dom.extent) == 1 for iv in reducing):
        return False
    body, init = block.body, block.init
    if not (isinstance(body, tirx.BufferStore) and isinstance(init, tirx.BufferStore)):
        return False
    return body.buffer.same_as(init.buffer) and tvm_api.same_structure(body.indices, init.indices)


def _fold(block):
    if not _foldable(block):
        return block
    tirx = tvm_api.tirx
    store, start = block.body, block.init.value
    own = [load for load in loads(store.value) if load.source.same_as(store.buffer)]
    if any(not tvm_api.same_structure(load.indices, store.indices) for load in own):
        return block
    value = tvm_api.tvm_ffi.structural_map(
        store.value,
        [(tvm_api.ir.expr.TensorLoad, lambda load: start if _is_own(load, store) else load)],
    )
    iters = [
        tirx.IterVar(iv.dom, iv.var, tirx.IterVar.DataPar)
        if iv.iter_type == tirx.IterVar.CommReduce
        else iv
        for iv in block.iter_vars
    ]
    return tvm_api.s_tir.SBlock(
        iters,
        block.reads,
        block.writes,
        block.name_hint,
        tirx.BufferStore(store.buffer, tvm_api.simplify(value), store.indices),
        None,
        block.alloc_buffers,
        block.match_buffers,
        block.annotations,
    )


def _is_own(load, store) -> bool:
    return load.source.same_as(store.buffer) and tvm_api.same_structure(load.indices, store.indices)
