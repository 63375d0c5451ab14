"""Facts about one scheduled candidate, derived from its TIR and never measured.

:func:`features` walks the scheduled (block-level) TIR once. Each block contributes a
:class:`BlockFacts` record: how many times it runs, its arithmetic, the cores its enclosing
parallel loops can occupy, the vector lanes it was given (and the lanes LLVM could still give
it), and the dependency chain of a reduction. A construct the walker does not understand
(an opaque intrinsic call, an unknown statement) makes the facts that depend on it
unavailable: ``None`` with a reason in ``missing``, never a silent zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from tvm_ext import _tvm
from tvm_ext.kernels import Workload, from_func, np_dtype
from tvm_ext.target import as_target, lanes_for, target_cores

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
_MATH_CALLS = {"exp", "exp2", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "pow", "fabs", "erf"}
_FREE_CALLS = {"if_then_else", "reinterpret", "likely"}


class Unsupported(Exception):
    """The walker met a construct it cannot count."""


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


@dataclass(frozen=True)
class CandidateFeatures:
    """Immutable facts of a scheduled candidate. ``None`` means unavailable (see ``missing``)."""

    target_kind: str
    cores: int
    flops: int | None
    flops_exact: bool
    dtype: str
    bytes: Mapping[str, tuple[int, int] | None]  # level -> (compulsory lower, access upper)
    blocks: tuple[BlockFacts, ...]
    parallel_extent: int | None
    cores_used: float | None
    vector_lanes: int | None
    unroll: int | None
    threads_per_block: int | None = None
    thread_blocks: int | None = None
    shared_bytes: int | None = None
    local_bytes: int | None = None
    missing: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def available(self, name: str) -> bool:
        """Whether fact ``name`` was derived (False: see ``missing[name]``)."""
        return getattr(self, name) is not None


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


def _on_chip_bytes(mod) -> tuple[int, int]:
    """(shared, local) bytes a GPU thread block allocates, from the compacted buffers.

    Buffers are declared at full size until TVM compacts them to the region each block
    uses; a software-pipelined loop keeps one copy of its shared buffers per stage.
    """
    tx = _tvm.tvm.s_tir.transform
    compact = _tvm.tvm.transform.Sequential(
        [
            tx.LowerCrossThreadReduction(),
            tx.LowerInitBlock(),
            tx.PlanAndUpdateBufferAllocationLocation(),
            tx.ConvertBlocksToOpaque(),
            tx.CompactBufferAllocation(),
        ]
    )(mod)
    text = mod.script()
    stages = 2 if "software_pipeline_stage" in text else 1
    shared = local = 0
    pending = [_tvm.main_func(compact).body]
    while pending:
        node = pending.pop()
        kind = type(node).__name__
        if kind == "SBlockRealize":
            node = node.block
            for buf in node.alloc_buffers:
                size = math.prod(int(d) for d in buf.shape) * np_dtype(str(buf.dtype)).itemsize
                scope = str(buf.scope())
                if scope.startswith("shared"):
                    shared += size * stages
                elif scope == "local" or scope.startswith("wmma"):
                    local += size
        if kind in ("For", "SBlock") or kind == "SBlockRealize":
            pending.append(node.body)
        elif kind == "SeqStmt":
            pending.extend(node.seq)
    return shared, local


def _param_bytes(func) -> int:
    return sum(math.prod(s) * np_dtype(d).itemsize for s, d in _tvm.param_specs(func))


def features(obj, target=None, workload: Workload | None = None) -> CandidateFeatures:
    """Derive :class:`CandidateFeatures` of a ``Schedule``, ``IRModule`` or ``PrimFunc``."""
    target = as_target(target)
    func = _tvm.main_func(_tvm.as_module(obj))
    workload = workload if workload is not None else from_func(func)
    kind = target.kind.name
    cores = target_cores(target) if kind == "llvm" else 1
    walker = _Walker(cores, lanes_for(target, 32) if kind == "llvm" else 1)
    missing: dict[str, str] = {}
    try:
        walker.stmt(func.body, [])
    except Unsupported as why:
        missing["blocks"] = str(why)
    missing.update(walker.missing)
    blocks = tuple(walker.blocks) if "blocks" not in missing else ()
    counted = [b.flops for b in blocks]
    if workload is not None:
        flops, exact = workload.flops, True
    elif blocks and all(f is not None for f in counted):
        flops, exact = sum(counted), True
    else:
        flops, exact = None, False
        missing.setdefault("flops", "no workload and the TIR could not be counted")
    if flops is not None:
        missing.pop("flops", None)
    compulsory = workload.min_bytes if workload is not None else _param_bytes(func)
    # Lower: every parameter byte moves once. Upper: every access of every block misses.
    upper = walker.touched if blocks else None
    level_bytes = {
        level: (compulsory, max(upper, compulsory) if upper is not None else None)
        for level in ("dram", "llc")
    }
    if upper is None:
        missing.setdefault("bytes", "access counts: " + missing.get("flops", "unsupported blocks"))
    agg = blocks or None
    gpu = kind == "cuda"
    shared, local = _on_chip_bytes(_tvm.as_module(obj)) if gpu else (None, None)
    threads = (
        math.prod(v for k, v in walker.threads.items() if k.startswith("threadIdx"))
        if gpu
        else None
    )
    grid = (
        math.prod(v for k, v in walker.threads.items() if k.startswith("blockIdx")) if gpu else None
    )
    return CandidateFeatures(
        target_kind=kind,
        cores=cores,
        flops=flops,
        flops_exact=exact,
        dtype=workload.dtype
        if workload is not None
        else (blocks[-1].dtype if blocks else "float32"),
        bytes=MappingProxyType(level_bytes),
        blocks=blocks,
        parallel_extent=max((b.parallel_extent for b in blocks), default=1) if agg else None,
        cores_used=min((b.cores_used for b in blocks), default=1.0) if agg else None,
        vector_lanes=max((b.explicit_lanes for b in blocks), default=1) if agg else None,
        unroll=max((b.unroll for b in blocks), default=1) if agg else None,
        threads_per_block=threads,
        thread_blocks=grid,
        shared_bytes=shared,
        local_bytes=local,
        missing=MappingProxyType(missing),
    )
