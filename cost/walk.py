"""The TIR walker behind :func:`tvm_ext.cost.features`: one pass over a scheduled module,
one :class:`~tvm_ext.cost.features.BlockFacts` per leaf block."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm_ext.base import tvm_api
from tvm_ext.facts.kernels import np_dtype

# Loops whose inner loop nest holds at most this many iterations may be fully unrolled and
# loop-vectorized by LLVM even when the schedule did not ask (measured: shared/bound-study.md).
AUTO_VECTOR_INNER_LIMIT = 1024
tirx, s_tir, ir = tvm_api.tirx, tvm_api.s_tir, tvm_api.ir
_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.FloorDiv, tirx.FloorMod, tirx.Max,
          tirx.Min, tirx.Mod)  # fmt: skip
_FREE = (ir.TensorLoad, tirx.Var, tirx.IntImm, tirx.FloatImm, ir.StringImm, tirx.Broadcast,
         tirx.Ramp, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.EQ, tirx.NE, tirx.And, tirx.Or,
         tirx.Not, tirx.Select)  # fmt: skip
# Op names are "prim.exp", "tirx.exp", ... across TVM versions: match on the last part.
_MATH_CALLS = {"exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "pow", "fabs", "erf",
               "floor", "ceil", "round", "shift_left", "shift_right"}  # fmt: skip
_FREE_CALLS = {"if_then_else", "reinterpret", "likely"}


@dataclass(frozen=True)
class BlockFacts:
    """Facts of one block (a statement run ``instances`` times by its loop nest).

    ``instances`` counts every execution the loop nest asks for, recomputation included;
    ``unique_instances`` is the block's own iteration domain (each distinct instance once).
    LLVM may remove recomputation it can prove redundant, so a bound counts the latter.
    """

    name: str
    instances: int
    flops_per_instance: int | None  # None: the body holds a construct we cannot count
    dtype: str
    cores_used: float  # P / ceil(P / cores) for a parallel extent P; 1.0 without one
    parallel_extent: int
    explicit_lanes: int  # extent of the vectorized loop around it (1: none)
    possible_lanes: int  # lanes LLVM could still give it (auto-vectorization), >= explicit
    unroll: int  # product of the unrolled loops around it
    reduction_length: int  # dependent steps per output (1: not a reduction)
    independent_outputs: int  # outputs updated inside the innermost reduction loop
    tensorized: bool = False
    unique_instances: int = 0

    @property
    def flops(self) -> int | None:
        return None if self.flops_per_instance is None else self.flops_per_instance * self.instances

    @property
    def unique_flops(self) -> int | None:
        """FLOPs of the block's distinct instances (what cannot be optimized away)."""
        if self.flops_per_instance is None:
            return None
        return self.flops_per_instance * min(self.instances, self.unique_instances)


class Unsupported(Exception):
    """The walker met a construct it cannot count."""


def _count_flops(expr) -> int:
    if isinstance(expr, _ARITH):
        return 1 + _count_flops(expr.a) + _count_flops(expr.b)
    if isinstance(expr, tirx.Cast):
        return _count_flops(expr.value)
    if isinstance(expr, ir.Call):
        op = str(getattr(expr.op, "name", expr.op)).rsplit(".", 1)[-1]
        if op in _MATH_CALLS:
            return 1 + sum(_count_flops(a) for a in expr.args)
        if op in _FREE_CALLS:
            return sum(_count_flops(a) for a in expr.args if not isinstance(a, str))
        raise Unsupported(f"call to {op}")
    if isinstance(expr, _FREE):
        return 0
    raise Unsupported(f"expression {type(expr).__name__}")


def _body_flops(stmt) -> int:
    if isinstance(stmt, tirx.BufferStore):
        return _count_flops(stmt.value)
    if isinstance(stmt, tirx.SeqStmt):
        return sum(_body_flops(s) for s in stmt.seq)
    raise Unsupported(f"statement {type(stmt).__name__} in a block body")


@dataclass
class _Loop:
    var: object
    extent: int
    kind: "tirx.ForKind"
    thread: str | None


def _int(expr) -> int | None:
    return int(expr.value) if isinstance(expr, tirx.IntImm) else None


def _uses(expr, var) -> bool:
    """Whether ``var`` occurs in ``expr`` (integer index arithmetic only)."""
    if isinstance(expr, tirx.Var):
        return expr.same_as(var)
    if hasattr(expr, "a"):
        return _uses(expr.a, var) or _uses(expr.b, var)
    return False


class Walker:
    def __init__(self, cores: int, max_lanes: int):
        self.cores, self.max_lanes = cores, max_lanes
        self.blocks: list[BlockFacts] = []
        self.missing: dict[str, str] = {}
        self.threads: dict[str, int] = {}
        self.touched: int | None = 0

    def stmt(self, node, loops: list[_Loop]) -> None:
        if isinstance(node, tirx.For):
            extent = _int(node.extent)
            if extent is None:
                raise Unsupported("a loop with a symbolic extent")
            tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else None
            if tag:
                self.threads[tag] = max(self.threads.get(tag, 1), extent)
            self.stmt(node.body, loops + [_Loop(node.loop_var, extent, node.kind, tag)])
        elif isinstance(node, tirx.SeqStmt):
            for s in node.seq:
                self.stmt(s, loops)
        elif isinstance(node, s_tir.SBlockRealize):
            self.block(node, loops)
        elif isinstance(node, s_tir.SBlock):
            self.stmt(node.body, loops)
        elif isinstance(node, (tirx.BufferStore, tirx.Evaluate)):
            pass  # statements directly in a loop nest (not in a block): none in s_tir
        else:
            raise Unsupported(f"statement {type(node).__name__}")

    def block(self, realize, loops: list[_Loop]) -> None:
        block = realize.block
        if any(isinstance(s, (s_tir.SBlockRealize, tirx.For)) for s in _children(block.body)):
            self.stmt(block.body, loops)  # a block around other blocks (the root, say)
            return
        reduce = tirx.IterVar.CommReduce
        pairs = list(zip(block.iter_vars, realize.iter_values))
        reduce_vars = [v for iv, v in pairs if int(iv.iter_type) == reduce]
        spatial_vars = [v for iv, v in pairs if int(iv.iter_type) != reduce]
        is_red = [any(_uses(v, lp.var) for v in reduce_vars) for lp in loops]
        is_spatial = [any(_uses(v, lp.var) for v in spatial_vars) for lp in loops]
        instances = math.prod(lp.extent for lp in loops)
        kinds = tirx.ForKind
        parallel = math.prod(lp.extent for lp in loops if lp.kind == kinds.PARALLEL)
        cores_used = parallel / math.ceil(parallel / self.cores) if parallel > 1 else 1.0
        explicit = max([lp.extent for lp in loops if lp.kind == kinds.VECTORIZED] or [1])
        unroll = math.prod(lp.extent for lp in loops if lp.kind == kinds.UNROLLED)
        possible = explicit
        for depth, lp in enumerate(loops):
            below = math.prod(x.extent for x in loops[depth + 1 :])
            if is_spatial[depth] and not is_red[depth] and below <= AUTO_VECTOR_INNER_LIMIT:
                possible = self.max_lanes
        red_depths = [d for d, r in enumerate(is_red) if r]
        length = math.prod(loops[d].extent for d in red_depths) if red_depths else 1
        inside = math.prod(lp.extent for lp in loops[red_depths[-1] + 1 :]) if red_depths else 1
        tensorized = not all(isinstance(s, tirx.BufferStore) for s in _children(block.body))
        try:
            flops = _body_flops(block.body)
            touched = _access_bytes(block.body) * instances
        except Unsupported as why:
            flops = touched = None
            tensorized = tensorized or "llvm" in str(why) or "call" in str(why)
            self.missing.setdefault("flops", f"block {block.name_hint}: {why}")
        self.touched = None if touched is None or self.touched is None else self.touched + touched
        dtype = str(_store_dtype(block.body) or "float32")
        self.blocks.append(
            BlockFacts(
                block.name_hint,
                instances,
                flops,
                dtype,
                cores_used,
                parallel,
                explicit,
                possible,
                unroll,
                length,
                inside,
                tensorized,
                math.prod(_int(iv.dom.extent) or 1 for iv in block.iter_vars),
            )
        )


def _children(stmt):
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else [stmt]


def _loads(expr) -> list:
    if isinstance(expr, ir.TensorLoad):
        return [expr]
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return _loads(expr.a) + _loads(expr.b)
    if isinstance(expr, tirx.Cast):
        return _loads(expr.value)
    if isinstance(expr, ir.Call):
        return [x for a in expr.args if not isinstance(a, str) for x in _loads(a)]
    return []


def _access_bytes(stmt) -> int:
    """Bytes one run of a block body loads and stores, counting every access (no reuse)."""
    total = 0
    for s in _children(stmt):
        if not isinstance(s, tirx.BufferStore):
            raise Unsupported(f"statement {type(s).__name__} in a block body")
        total += np_dtype(str(s.buffer.dtype)).itemsize
        total += sum(np_dtype(str(ld.source.dtype)).itemsize for ld in _loads(s.value))
    return total


def _store_dtype(stmt):
    for s in _children(stmt):
        if isinstance(s, tirx.BufferStore):
            return s.buffer.dtype
    return None
