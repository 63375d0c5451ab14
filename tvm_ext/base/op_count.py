"""The arithmetic of a TIR expression as the built code must run it: every operation once per
distinct subexpression.

TE inlines a shared value at every use (``fast_erf`` writes its clamped input 22 times and its
square 11; the polynomial ``exp`` of a softmax its reduced argument 7 times), and TVM's FLOP
estimate counts every copy; LLVM's common-subexpression elimination computes each once. A
count that includes the copies reads high: a bound built on it drops a winner, a GFLOP/s
figure passes the peak, and a "kernel faster than the roof" heals a machine model upward
on no evidence (BERT's GELU: 78 operations an element counted for the 30 it runs). The
cost walker (:mod:`tvm_ext.cost.walk`) and the measurement share this count.
"""

from __future__ import annotations

import math

from tvm_ext.base import tvm_api

tirx, ir = tvm_api.tirx, tvm_api.ir

# A shift is a node of its own in TVM 0.27 (``x << 23``, as TE and a specialized function
# write the polynomial ``exp``'s power of two), a call elsewhere (``shift_left``): both
# counted as one operation. Bitwise operations stay uncounted (no arm priced them: they
# issue on more pipes than an FMA on every CPU named, so one FMA slot each could read high).
ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.FloorDiv, tirx.FloorMod, tirx.Max,
         tirx.Min, tirx.Mod, tirx.LShift, tirx.RShift)  # fmt: skip
FREE = (ir.TensorLoad, tirx.Var, tirx.IntImm, tirx.FloatImm, ir.StringImm, tirx.Broadcast,
        tirx.Ramp, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE, tirx.And, tirx.Or,
        tirx.Not, tirx.Select)  # fmt: skip
# Op names are "prim.exp", "tirx.exp", ... across TVM versions: match on the last part.
MATH_CALLS = {"exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "pow", "fabs", "erf",
              "floor", "ceil", "round", "shift_left", "shift_right"}  # fmt: skip
FREE_CALLS = {"if_then_else", "reinterpret", "likely"}


class Uncountable(Exception):
    """An expression or statement holds a construct the count cannot price."""


def first(expr, seen: set) -> bool:
    """Whether ``expr`` occurs in a store's value for the first time (and note it in
    ``seen``): a repeat costs nothing. Keyed by structural hash: a collision could only drop a
    count, which keeps a bound below."""
    key = tvm_api.tvm_ffi.structural_hash(expr)
    if key in seen:
        return False
    seen.add(key)
    return True


def call_name(expr) -> str:
    """A call's operator name without its namespace ("exp" for "tirx.exp")."""
    return str(getattr(expr.op, "name", expr.op)).rsplit(".", 1)[-1]


def op_kinds(expr, seen: set) -> tuple[int, int, int]:
    """(multiplies, adds and subtracts, all operations) of ``expr`` not yet in ``seen`` (one
    store's value: pass a fresh set); :class:`Uncountable` on a construct it cannot price."""
    if isinstance(expr, ARITH):
        if not first(expr, seen):
            return 0, 0, 0
        a, b = op_kinds(expr.a, seen), op_kinds(expr.b, seen)
        mul = int(isinstance(expr, tirx.Mul))
        add = int(isinstance(expr, (tirx.Add, tirx.Sub)))
        return a[0] + b[0] + mul, a[1] + b[1] + add, a[2] + b[2] + 1
    if isinstance(expr, tirx.Cast):
        return op_kinds(expr.value, seen)
    if isinstance(expr, ir.Call):
        op = call_name(expr)
        if op not in MATH_CALLS and op not in FREE_CALLS:
            raise Uncountable(f"call to {op}")
        own = int(op in MATH_CALLS)
        if own and not first(expr, seen):
            return 0, 0, 0
        parts = [op_kinds(a, seen) for a in expr.args if not isinstance(a, str)]
        return (sum(p[0] for p in parts), sum(p[1] for p in parts),
                sum(p[2] for p in parts) + own)  # fmt: skip
    if isinstance(expr, FREE):
        return 0, 0, 0
    raise Uncountable(f"expression {type(expr).__name__}")


def count_ops(expr, seen: set) -> int:
    """Operations of ``expr`` not yet in ``seen`` (:func:`op_kinds`' last count)."""
    return op_kinds(expr, seen)[2]


def stores(stmt) -> list:
    """The buffer stores of a block body (a store or a sequence of them)."""
    if isinstance(stmt, tirx.BufferStore):
        return [stmt]
    if isinstance(stmt, tirx.SeqStmt):
        return [s for part in stmt.seq for s in stores(part)]
    raise Uncountable(f"statement {type(stmt).__name__} in a block body")


def distinct_flops(func) -> int | None:
    """The operations of ``func``'s blocks, each block once per point of its iteration domain
    (its algorithm, whatever the schedule recomputes or predicates) and each distinct
    subexpression of a stored value once; None when a domain is symbolic or a body holds a
    construct :func:`count_ops` cannot count."""
    total = 0
    try:
        for block in tvm_api.sblocks(func):
            if not block.iter_vars:
                continue  # the root (or an opaque wrapper): its leaves are counted
            extents = [iv.dom.extent for iv in block.iter_vars]
            if not all(isinstance(e, tirx.IntImm) for e in extents):
                return None
            ops = sum(count_ops(s.value, set()) for s in stores(block.body))
            total += ops * math.prod(int(e.value) for e in extents)
    except Uncountable:
        return None
    return total


def algorithm_flops(func) -> int | None:
    """The smaller of TVM's FLOP estimate of ``func`` and :func:`distinct_flops`: what its
    algorithm must run at least (TVM's counts repeated subexpressions and, on a scheduled
    function, its split predicates and recomputation). None when neither can count it."""
    counts = [n for n in (tvm_api.estimated_flops(func), distinct_flops(func)) if n is not None]
    return min(counts) if counts else None


__all__ = [
    "ARITH",
    "FREE",
    "FREE_CALLS",
    "MATH_CALLS",
    "Uncountable",
    "algorithm_flops",
    "call_name",
    "count_ops",
    "op_kinds",
    "distinct_flops",
    "first",
    "stores",
]
