"""The TIR walker behind :func:`tvm_ext.cost.features`: one pass over a scheduled module,
one :class:`~tvm_ext.cost.features.BlockFacts` per leaf block."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tvm_ext.kernels import np_dtype

# Loops whose inner loop nest holds at most this many iterations may be fully unrolled and
# loop-vectorized by LLVM even when the schedule did not ask (measured: shared/bound-study.md).
AUTO_VECTOR_INNER_LIMIT = 1024
_ARITH = {"Add", "Sub", "Mul", "Div", "FloorDiv", "FloorMod", "Max", "Min", "Mod"}
_FREE = {
    "Cast",
    "TensorLoad",
    "Var",
    "IntImm",
    "FloatImm",
    "StringImm",
    "Broadcast",
    "Ramp",
    "LT",
    "LE",
    "GT",
    "GE",
    "EQ",
    "NE",
    "And",
    "Or",
    "Not",
    "Select",
}
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
    kind = type(expr).__name__
    if kind in _ARITH:
        return 1 + _count_flops(expr.a) + _count_flops(expr.b)
    if kind in ("Cast",):
        return _count_flops(expr.value)
    if kind == "Call":
        op = str(getattr(expr.op, "name", expr.op)).rsplit(".", 1)[-1]
        if op in _MATH_CALLS:
            return 1 + sum(_count_flops(a) for a in expr.args)
        if op in _FREE_CALLS:
            return sum(_count_flops(a) for a in expr.args if not isinstance(a, str))
        raise Unsupported(f"call to {op}")
    if kind in _FREE:
        return 0
    raise Unsupported(f"expression {kind}")


def _body_flops(stmt) -> int:
    kind = type(stmt).__name__
    if kind == "BufferStore":
        return _count_flops(stmt.value)
    if kind == "SeqStmt":
        return sum(_body_flops(s) for s in stmt.seq)
    raise Unsupported(f"statement {kind} in a block body")


@dataclass
class _Loop:
    var: object
    extent: int
    kind: int
    thread: str | None


def _int(expr) -> int | None:
    return int(expr.value) if type(expr).__name__ == "IntImm" else None


def _uses(expr, var) -> bool:
    """Whether ``var`` occurs in ``expr`` (integer index arithmetic only)."""
    kind = type(expr).__name__
    if kind == "Var":
        return expr.same_as(var)
    if hasattr(expr, "a"):
        return _uses(expr.a, var) or _uses(expr.b, var)
    return False


class _Walker:
    def __init__(self, cores: int, max_lanes: int):
        self.cores, self.max_lanes = cores, max_lanes
        self.blocks: list[BlockFacts] = []
        self.missing: dict[str, str] = {}
        self.threads: dict[str, int] = {}
        self.touched: int | None = 0

    def stmt(self, node, loops: list[_Loop]) -> None:
        kind = type(node).__name__
        if kind == "For":
            extent = _int(node.extent)
            if extent is None:
                raise Unsupported("a loop with a symbolic extent")
            tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else None
            if tag:
                self.threads[tag] = max(self.threads.get(tag, 1), extent)
            self.stmt(node.body, loops + [_Loop(node.loop_var, extent, int(node.kind), tag)])
        elif kind == "SeqStmt":
            for s in node.seq:
                self.stmt(s, loops)
        elif kind == "SBlockRealize":
            self.block(node, loops)
        elif kind == "SBlock":
            self.stmt(node.body, loops)
        elif kind in ("BufferStore", "Evaluate"):
            pass  # statements directly in a loop nest (not in a block): none in s_tir
        else:
            raise Unsupported(f"statement {kind}")

    def block(self, realize, loops: list[_Loop]) -> None:
        block = realize.block
        if any(type(s).__name__ in ("SBlockRealize", "For") for s in _children(block.body)):
            self.stmt(block.body, loops)  # a block around other blocks (the root, say)
            return
        reduce_vars = [
            v for iv, v in zip(block.iter_vars, realize.iter_values) if int(iv.iter_type) == 2
        ]
        spatial_vars = [
            v for iv, v in zip(block.iter_vars, realize.iter_values) if int(iv.iter_type) != 2
        ]
        is_red = [any(_uses(v, lp.var) for v in reduce_vars) for lp in loops]
        is_spatial = [any(_uses(v, lp.var) for v in spatial_vars) for lp in loops]
        instances = math.prod(lp.extent for lp in loops)
        parallel = math.prod(lp.extent for lp in loops if lp.kind == 1)  # ForKind.PARALLEL
        cores_used = parallel / math.ceil(parallel / self.cores) if parallel > 1 else 1.0
        explicit = max([lp.extent for lp in loops if lp.kind == 2] or [1])  # VECTORIZED
        unroll = math.prod(lp.extent for lp in loops if lp.kind == 3)  # UNROLLED
        possible = explicit
        for depth, lp in enumerate(loops):
            below = math.prod(x.extent for x in loops[depth + 1 :])
            if is_spatial[depth] and not is_red[depth] and below <= AUTO_VECTOR_INNER_LIMIT:
                possible = self.max_lanes
        red_depths = [d for d, r in enumerate(is_red) if r]
        length = math.prod(loops[d].extent for d in red_depths) if red_depths else 1
        inside = math.prod(lp.extent for lp in loops[red_depths[-1] + 1 :]) if red_depths else 1
        tensorized = not all(type(s).__name__ == "BufferStore" for s in _children(block.body))
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
    kind = type(stmt).__name__
    return list(stmt.seq) if kind == "SeqStmt" else [stmt]


def _loads(expr) -> list:
    kind = type(expr).__name__
    if kind == "TensorLoad":
        return [expr]
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return _loads(expr.a) + _loads(expr.b)
    if kind == "Cast":
        return _loads(expr.value)
    if kind == "Call":
        return [x for a in expr.args if not isinstance(a, str) for x in _loads(a)]
    return []


def _access_bytes(stmt) -> int:
    """Bytes one run of a block body loads and stores, counting every access (no reuse)."""
    total = 0
    for s in _children(stmt):
        if type(s).__name__ != "BufferStore":
            raise Unsupported(f"statement {type(s).__name__} in a block body")
        total += np_dtype(str(s.buffer.dtype)).itemsize
        total += sum(np_dtype(str(ld.source.dtype)).itemsize for ld in _loads(s.value))
    return total


def _store_dtype(stmt):
    for s in _children(stmt):
        if type(s).__name__ == "BufferStore":
            return s.buffer.dtype
    return None
