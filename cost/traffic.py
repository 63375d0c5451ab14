"""Memory-port traffic of a block's runs, for the roofline's ``issue`` arm.

A run is the loop just outside the body the compiler may unroll as one (see
:data:`tvm_ext.cost.walk.UNROLL_REACH`); the element offsets every access touches in one
iteration of it are enumerated with numpy over the body's loops (at most that many
iterations), with the loops outside fixed: when the index is affine in them, the set only
moves with them.
"""

from __future__ import annotations

import math

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.hardware.isa import REGISTER_BYTES
from tvm_ext.workloads.kernels import np_dtype

MAX_ENUMERATED = 1 << 22  # element offsets enumerated per access and run, beyond: not counted
tirx, ir = tvm_api.tirx, tvm_api.ir


class TrafficUnknown(Exception):
    """A block body whose accesses cannot be enumerated."""


def children(stmt):
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def loads(expr) -> list:
    if isinstance(expr, ir.TensorLoad):
        return [expr]
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return loads(expr.a) + loads(expr.b)
    if isinstance(expr, tirx.Cast):
        return loads(expr.value)
    if isinstance(expr, ir.Call):
        return [x for a in expr.args if not isinstance(a, str) for x in loads(a)]
    return []


def run_traffic(realize, loops, start, count, allocated, stored, vector_bytes):
    """(slots, bytes) of loads and of stores one run (``count`` iterations of
    ``loops[start - 1]``) needs at least.

    Counted: stores to the function's parameters, loads from parameters no block writes (a
    compiler may forward a stored value to a later load, never an input it did not load). An
    element in a register was loaded or computed before; at any moment registers hold at most
    ``REGISTER_BYTES``. So every distinct element the run touches moves through a memory port
    in it, less what was held when it began; and every element an iteration loads moves in
    that iteration, less what was held when it began (not so a store: its value may wait in a
    register for a later iteration that overwrites it). One slot moves at most one vector of
    consecutive elements (a gather or scatter: one slot per element), so a set of elements
    takes at least max(n / vector, aligned vector blocks / 2) slots (a slot spans at most two
    aligned blocks); taking out h held elements takes out at most h blocks and h bytes.
    """
    accesses: dict[tuple[str, str], list] = {}
    binding = [(iv.var, value) for iv, value in zip(realize.block.iter_vars, realize.iter_values)]

    def bound(indices):  # in loop variables, not the block's own
        return [_bind(i, binding) for i in indices]

    for s in children(realize.block.body):
        if not isinstance(s, tirx.BufferStore):
            raise TrafficUnknown(f"statement {type(s).__name__} in a block body")
        if str(s.buffer.name) not in allocated:
            accesses.setdefault(("store", str(s.buffer.name)), []).append(
                (s.buffer, bound(s.indices))
            )
        for ld in loads(s.value):
            name = str(ld.source.name)
            if name not in allocated and name not in stored:
                accesses.setdefault(("load", name), []).append((ld.source, bound(ld.indices)))
    # per kind: [run vectors, run blocks, run bytes, iteration vectors, blocks, bytes, item]
    totals = {kind: [0.0] * 6 + [None] for kind in ("load", "store")}
    for (kind, _), items in accesses.items():
        sets = [_run_offsets(buf, idx, loops, start) for buf, idx in items]
        if any(o is None for o in sets) or len({int(o[1]) for o in sets}) != 1:
            continue  # an index we cannot enumerate (or parts moving apart): not counted
        base, step = np.unique(np.concatenate([o[0] for o in sets])), int(sets[0][1])
        if len(base) * count > MAX_ENUMERATED:
            continue
        item = np_dtype(str(items[0][0].dtype)).itemsize
        vlen = max(vector_bytes // item, 1)
        elements, blocks = distinct_counts(base, step, count, vlen)
        shifts = range(min(count, vlen)) if step else range(1)
        total = totals[kind]
        total[0] += elements / vlen
        total[1] += blocks
        total[2] += elements * item
        total[3] += len(base) / vlen
        total[4] += min(len(np.unique((base + step * t) // vlen)) for t in shifts)
        total[5] += len(base) * item
        total[6] = item if total[6] is None else min(total[6], item)
    out = []
    held_bytes, held_vectors = REGISTER_BYTES, REGISTER_BYTES / vector_bytes
    for kind in ("load", "store"):
        t = totals[kind]
        held = REGISTER_BYTES // (t[6] or 1)  # elements the registers can hold

        def slots(vectors, blocks):
            return max(math.ceil(vectors - held_vectors), math.ceil((blocks - held) / 2), 0)

        per_run = slots(t[0], t[1])
        nbytes = max(t[2] - held_bytes, 0.0)
        if kind == "load":  # a store may wait for a later iteration (its value in a register)
            per_run = max(per_run, count * slots(t[3], t[4]))
            nbytes = max(nbytes, count * (t[5] - held_bytes))
        out.append((float(per_run), float(nbytes)))
    return out[0], out[1]


def distinct_counts(base, step: int, count: int, vlen: int) -> tuple[int, int]:
    """(distinct elements, distinct aligned ``vlen``-element blocks) of the offsets
    ``base + step * t`` for ``t < count`` (``base``: distinct offsets). Counted on a mask of
    the offsets' range when it is not much wider than the offsets (numpy's hash ``unique``
    over a run of a million offsets took 20 ms, the mask a few), else by ``unique``."""
    run = base if step == 0 else (base[None, :] + step * np.arange(count)[:, None]).ravel()
    origin = int(run.min()) // vlen * vlen
    width = (int(run.max()) - origin) // vlen + 1  # blocks
    if width * vlen > 8 * run.size + 4096:
        run = np.unique(run)
        return len(run), len(np.unique(run // vlen))
    mask = np.zeros(width * vlen, dtype=bool)
    mask[run - origin] = True
    return int(np.count_nonzero(mask)), int(np.count_nonzero(mask.reshape(width, vlen).any(1)))


def _run_offsets(buffer, indices, loops, start):
    """(distinct element offsets one access touches in one iteration of ``loops[start - 1]``,
    the offset step from one iteration to the next), the loops outside it fixed; None when
    its index is not affine in the loops outside the body (the set would then change shape
    with where it starts)."""
    body, run = loops[start:], loops[start - 1]
    shape = [_const(d) for d in buffer.shape]
    if any(d is None for d in shape) or len(shape) != len(indices):
        return None
    inner = [lp.var for lp in body]
    if not all(_affine(i, inner, run.var) for i in indices):
        return None
    strides = [math.prod(shape[d + 1 :]) for d in range(len(shape))]
    grid = [(lp.var, np.arange(lp.extent, dtype=np.int64).reshape(
        [-1 if k == j else 1 for k in range(len(body))])) for j, lp in enumerate(body)]  # fmt: skip

    def offsets(t: int):
        env = grid + [(run.var, np.int64(t))]
        total = sum(np.asarray(_evaluate(i, env), dtype=np.int64) * st
                    for i, st in zip(indices, strides))  # fmt: skip
        return np.broadcast_to(total, [lp.extent for lp in body] or [1]).ravel()

    if math.prod(lp.extent for lp in body) > MAX_ENUMERATED:
        return None
    try:
        first, second = offsets(0), offsets(1)
    except TrafficUnknown:
        return None
    step = np.unique(second - first)
    if len(step) != 1:
        return None
    return np.unique(first), int(step[0])


def _only(expr, inner) -> bool:
    if isinstance(expr, tirx.Var):
        return any(expr.same_as(v) for v in inner)
    if isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
        return True
    if isinstance(expr, tirx.Cast):
        return _only(expr.value, inner)
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return _only(expr.a, inner) and _only(expr.b, inner)
    return False


def _mentions(expr, names) -> bool:
    if isinstance(expr, tirx.Var):
        return any(expr.same_as(v) for v in names)
    if isinstance(expr, tirx.Cast):
        return _mentions(expr.value, names)
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return _mentions(expr.a, names) or _mentions(expr.b, names)
    return False


def _affine(expr, inner, run) -> bool:
    """Whether ``expr`` is a sum of (multiples of) terms that each vary with the run: the
    run's variable linearly, or only the body's variables (``inner``), or neither (a term of
    the loops outside the run alone, however nonlinear: ``fused // 128 * 16``, constant
    through a run). Then the offsets one run touches are those with the outer loops at 0,
    moved by a constant: as many elements, and as many vector windows cover them."""
    if not _mentions(expr, list(inner) + [run]):
        return True
    if isinstance(expr, tirx.Var):
        return True
    if isinstance(expr, tirx.Cast):
        return _affine(expr.value, inner, run)
    if isinstance(expr, (tirx.Add, tirx.Sub)):
        return _affine(expr.a, inner, run) and _affine(expr.b, inner, run)
    if isinstance(expr, tirx.Mul):
        if isinstance(expr.a, tirx.IntImm):
            return _affine(expr.b, inner, run)
        if isinstance(expr.b, tirx.IntImm):
            return _affine(expr.a, inner, run)
    return _only(expr, inner)


_REBUILD = {name: getattr(tirx, name) for name in ("Add", "Sub", "Mul", "FloorDiv", "FloorMod",
                                                    "Min", "Max")}  # fmt: skip


def _bind(expr, binding):
    """``expr`` with the block's iteration variables replaced by the loop expressions bound
    to them."""
    if isinstance(expr, tirx.Var):
        return next((value for var, value in binding if var.same_as(expr)), expr)
    if isinstance(expr, tirx.Cast):
        return _bind(expr.value, binding)
    make = _REBUILD.get(type(expr).__name__)
    if make is not None:
        return make(_bind(expr.a, binding), _bind(expr.b, binding))
    if isinstance(expr, (tirx.IntImm, tirx.FloatImm)):
        return expr
    raise TrafficUnknown(f"index expression {type(expr).__name__}")


_NUMPY_OPS = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "FloorDiv": np.floor_divide,
    "FloorMod": np.mod, "Min": np.minimum, "Max": np.maximum,
}  # fmt: skip


def _evaluate(expr, env):
    """An integer index expression over numpy arrays (``env``: (Var, values) pairs; any other
    variable is 0)."""
    if isinstance(expr, tirx.IntImm):
        return np.int64(int(expr.value))
    if isinstance(expr, tirx.Var):
        return next((values for var, values in env if var.same_as(expr)), np.int64(0))
    if isinstance(expr, tirx.Cast):
        return _evaluate(expr.value, env)
    op = _NUMPY_OPS.get(type(expr).__name__)
    if op is None:
        raise TrafficUnknown(f"index expression {type(expr).__name__}")
    return op(_evaluate(expr.a, env), _evaluate(expr.b, env))


def _const(expr) -> int | None:
    return int(expr.value) if isinstance(expr, tirx.IntImm) else None
