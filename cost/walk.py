"""The TIR walker behind :func:`tvm_ext.cost.features`: one pass over a scheduled module,
one :class:`~tvm_ext.cost.features.BlockFacts` per leaf block."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from tvm_ext.base import op_count, tvm_api
from tvm_ext.workloads.kernels import np_dtype

from .traffic import TrafficUnknown, run_traffic
from .traffic import children as _children
from .traffic import loads as _loads

# Loops whose inner loop nest holds at most this many iterations may be fully unrolled and
# loop-vectorized by LLVM even when the schedule did not ask (measured: shared/bound-study.md).
AUTO_VECTOR_INNER_LIMIT = 1024
# The same reach bounds what the compiler can unroll into one straight-line body (where it may
# reuse a loaded value, reorder independent work or merge chains): the innermost loops whose
# iterations multiply to at most this, plus every loop TVM itself unrolls or vectorizes.
UNROLL_REACH = AUTO_VECTOR_INNER_LIMIT
tirx, s_tir, ir = tvm_api.tirx, tvm_api.s_tir, tvm_api.ir


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
    # Pipe pressure of one instance: multiplies (FMA or MUL pipes only) and floating-point
    # instructions once every multiply-add pair is fused (None: not counted).
    muls_per_instance: int | None = None
    ops_per_instance: int | None = None
    # The reduction's chain: the steps one output runs back to back (the reduction loops that
    # enclose the innermost one with no spatial loop between), its step ("fma", "add" or "").
    segment_length: int = 0
    chain_op: str = ""
    body_instances: int = 0  # instances of the innermost loops the compiler may unroll as one
    chain_repeats: int = 1  # times each distinct chain is run again (recomputation around it)
    loop_repeats: int = 1  # the same, once the built code shows the chain stayed a loop
    lanes_bound: int = 0  # the most lanes its arithmetic can run at (0: unknown, see possible)
    # Memory-port traffic of one run of the loop around that body (after the register
    # allowance): load and store slots (one per vector-width window) and bytes; ``mem_runs``
    # runs in all; blocks of one ``mem_group`` share that loop (they may share loads).
    mem_runs: float = 0  # runs on all cores together (divided by cores_used per core)
    mem_group: int = -1
    load_slots: float = 0.0
    load_bytes: float = 0.0
    store_slots: float = 0.0
    store_bytes: float = 0.0
    # The outermost parallel loop (extent > 1) around the block, numbered in program order
    # (-1: none). TVM's CPU codegen makes each such loop a parallel body function of its own,
    # launched in this order: stage 2 reads facts per function (cost/post_build.py).
    region: int = -1
    output: str = ""  # the buffer it stores to (its first store's)

    @property
    def flops(self) -> int | None:
        return None if self.flops_per_instance is None else self.flops_per_instance * self.instances

    @property
    def unique_flops(self) -> int | None:
        """FLOPs of the block's distinct instances (what cannot be optimized away)."""
        if self.flops_per_instance is None:
            return None
        return self.flops_per_instance * min(self.instances, self.unique_instances)


# The walker's "cannot count" (a construct in an expression, a statement, a symbolic loop).
Unsupported = op_count.Uncountable


def _body_flops(stmt) -> int:
    return sum(op_count.count_ops(s.value, set()) for s in op_count.stores(stmt))


@dataclass
class _Loop:
    var: object
    extent: int
    kind: "tirx.ForKind"
    thread: str | None
    region: int = -1  # set on an outermost parallel loop: its number in program order


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
        self.allocated: set[str] = set()  # buffers of the function's own (not parameters)
        self.stored: set[str] = set()  # buffers some block writes
        # (block index, loops, body, which loops repeat it: they touch none of its variables)
        self._pending: list[tuple[int, list, object, list[bool]]] = []
        self.regions = 0  # outermost parallel loops (extent > 1) met so far

    def stmt(self, node, loops: list[_Loop]) -> None:
        if isinstance(node, tirx.For):
            extent = _int(node.extent)
            if extent is None:
                raise Unsupported("a loop with a symbolic extent")
            tag = str(node.thread_binding.thread_tag) if node.thread_binding is not None else None
            if tag:
                self.threads[tag] = max(self.threads.get(tag, 1), extent)
            region = -1
            outermost = not any(lp.region >= 0 for lp in loops)
            if node.kind == tirx.ForKind.PARALLEL and extent > 1 and outermost:
                region, self.regions = self.regions, self.regions + 1
            loop = _Loop(node.loop_var, extent, node.kind, tag, region)
            self.stmt(node.body, loops + [loop])
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
        self.allocated.update(str(b.name) for b in block.alloc_buffers)
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
        # The record's historical fact (learned policies read it): a spatial loop only.
        spatial_only = [s and not r for s, r in zip(is_spatial, is_red)]
        possible = self.max_lanes if _loop_vectorizable(loops, spatial_only) else explicit
        lanes = _possible_lanes(loops, is_red, explicit, self.max_lanes)
        red_depths = [d for d, r in enumerate(is_red) if r]
        length = math.prod(loops[d].extent for d in red_depths) if red_depths else 1
        inside = math.prod(lp.extent for lp in loops[red_depths[-1] + 1 :]) if red_depths else 1
        segment, band = 1, len(loops)
        if red_depths:
            for d in range(red_depths[-1], -1, -1):  # outwards while no spatial loop intervenes
                if loops[d].extent > 1 and (is_spatial[d] or not is_red[d]):
                    break
                segment *= loops[d].extent
                band = d
        # Loops that touch none of the block's variables repeat its instances (recomputation
        # asked for by compute-at). Around a whole segment, each repeat runs its chain again:
        # LLVM moves instructions out of loops (LICM), never a loop out of a loop. But a
        # segment inside the unroll reach may become straight-line code (TVM's own unroll
        # pragma, LLVM's full unroll), which LICM can hoist whole: then it may run once.
        repeats = [not is_red[d] and not is_spatial[d] for d in range(len(loops))]
        repeat = [d for d, lp in enumerate(loops) if lp.extent > 1 and repeats[d]]
        body_start = _body_start(loops)
        around = math.prod(loops[d].extent for d in repeat) if all(d < band for d in repeat) else 1
        chained = around if band < body_start else 1
        tensorized = not all(isinstance(s, tirx.BufferStore) for s in _children(block.body))
        muls = ops = None
        try:
            flops = _body_flops(block.body)
            touched = _access_bytes(block.body) * instances
            muls, ops = _pipe_ops(block.body)
        except Unsupported as why:
            flops = touched = None
            tensorized = tensorized or "llvm" in str(why) or "call" in str(why)
            self.missing.setdefault("flops", f"block {block.name_hint}: {why}")
        self.touched = None if touched is None or self.touched is None else self.touched + touched
        dtype = str(_store_dtype(block.body) or "float32")
        self.stored.update(str(s.buffer.name) for s in _children(block.body)
                           if isinstance(s, tirx.BufferStore))  # fmt: skip
        self._pending.append((len(self.blocks), loops, realize, repeats))
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
                muls_per_instance=muls,
                ops_per_instance=ops,
                segment_length=segment if red_depths else 0,
                chain_op=_chain_op(block.body) if red_depths else "",
                body_instances=math.prod(lp.extent for lp in loops[body_start:]),
                chain_repeats=chained if red_depths else 1,
                loop_repeats=around if red_depths else 1,
                lanes_bound=lanes,
                region=next((lp.region for lp in loops if lp.region >= 0), -1),
                output=next(
                    (
                        str(x.buffer.name)
                        for x in _children(block.body)
                        if isinstance(x, tirx.BufferStore)
                    ),
                    "",
                ),  # fmt: skip
            )
        )

    def finish(self) -> list[BlockFacts]:
        """The blocks with their memory-port traffic (needs every block's stores first)."""
        reps: list = []  # the loop variable of each group's run loop
        vector_bytes = self.max_lanes * 4
        for index, loops, realize, repeats in self._pending:
            start = _body_start(loops)
            par = [d for d, lp in enumerate(loops) if lp.kind == tirx.ForKind.PARALLEL]
            if start == 0 or any(d >= start for d in par):
                continue  # the whole nest is one body, or the body is split over cores
            runs = math.prod(lp.extent for lp in loops[: start - 1])
            count = loops[start - 1].extent
            # A run loop that repeats the block (it touches none of its variables) around a
            # body the compiler may unroll: LLVM may hoist the whole straight-line body out of
            # it (LICM), and out of every repeating loop right around it. Then the body runs
            # once for all of their iterations.
            if repeats[start - 1]:
                count, outer = 1, start - 2
                while outer >= 0 and repeats[outer]:  # (a parallel one too: within a core)
                    runs //= loops[outer].extent
                    outer -= 1
            if start - 1 in par:  # the run loop itself is split: a core runs one chunk of it
                if len(par) > 1:
                    continue
                count = math.ceil(count / self.cores)
                runs = runs * self.blocks[index].cores_used  # per core: one chunk per run
            try:
                loads, stores = run_traffic(
                    realize, loops, start, count, self.allocated, self.stored, vector_bytes
                )
            except TrafficUnknown:
                continue
            var = loops[start - 1].var
            group = next((i for i, v in enumerate(reps) if v.same_as(var)), len(reps))
            if group == len(reps):
                reps.append(var)
            self.blocks[index] = dataclasses.replace(
                self.blocks[index],
                mem_runs=runs,
                mem_group=group,
                load_slots=loads[0],
                load_bytes=loads[1],
                store_slots=stores[0],
                store_bytes=stores[1],
            )
        return self.blocks


def _possible_lanes(loops, is_red, explicit, max_lanes) -> int:
    """Lanes the block's arithmetic may run at. TVM's own vectors (an explicitly vectorized
    loop) narrower than a register are no cap: LLVM's x86 instruction selection joins vector
    operations of a basic block whose results it concatenates into one wider operation (the
    violation hunt, seed 7: a TVM 8-lane multiply-add pair of a matmul ran as one 16-lane
    zmm FMA, 5 % under the 8-lane bound); only the built code shows the width (stage 2).
    Else any loop but a reduction loop (a spatial loop, or one that repeats the block) with
    at most ``AUTO_VECTOR_INNER_LIMIT`` inner iterations may be unrolled and loop-vectorized
    by LLVM at full width (shared/bound-study.md)."""
    if explicit > 1 or _loop_vectorizable(loops, [not r for r in is_red]):  # spatial or repeat
        return max_lanes
    return explicit


def _loop_vectorizable(loops, allowed) -> bool:
    """Whether LLVM's loop vectorizer may take one of the ``allowed`` loops: one with at most
    ``AUTO_VECTOR_INNER_LIMIT`` iterations inside it (shared/bound-study.md)."""
    return any(
        ok and math.prod(x.extent for x in loops[depth + 1 :]) <= AUTO_VECTOR_INNER_LIMIT
        for depth, ok in enumerate(allowed)
    )


def _body_start(loops) -> int:
    """Index of the outermost loop of the body the compiler may unroll as one (see
    ``UNROLL_REACH``); ``len(loops)`` when even the innermost loop is beyond the reach."""
    start, product = len(loops), 1
    for d in range(len(loops) - 1, -1, -1):
        if product * loops[d].extent > UNROLL_REACH:
            break
        product *= loops[d].extent
        start = d
    kinds = tirx.ForKind
    forced = [d for d, lp in enumerate(loops) if lp.kind in (kinds.UNROLLED, kinds.VECTORIZED)]
    return min([start] + forced)


def _pipe_ops(stmt) -> tuple[int, int]:
    """(multiplies, floating-point instructions with every multiply-add pair fused), each
    distinct subexpression of a store's value once (:func:`~tvm_ext.base.op_count.first`)."""
    muls = adds = flops = 0
    for s in _children(stmt):
        m, a, f = op_count.op_kinds(s.value, set())
        muls, adds, flops = muls + m, adds + a, flops + f
    return muls, flops - min(muls, adds)


def _chain_op(stmt) -> str:
    """How a reduction's update combines (``acc + x * y``: "fma"; ``acc + x``: "add";
    ``max(acc, x)`` or ``min``: "max")."""
    kids = _children(stmt)
    if len(kids) != 1 or not isinstance(kids[0], tirx.BufferStore):
        return ""
    value = kids[0].value
    while isinstance(value, tirx.Cast):
        value = value.value
    if isinstance(value, tirx.Max) or isinstance(value, tirx.Min):
        return "max"
    if not isinstance(value, tirx.Add):
        return ""
    terms = [value.a, value.b]
    stripped = [t.value if isinstance(t, tirx.Cast) else t for t in terms]
    return "fma" if any(isinstance(t, tirx.Mul) for t in stripped) else "add"


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
