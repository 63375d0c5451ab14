"""The rule of last resort: any function, its outer spatial loops in parallel.

Every block that can be inlined into its consumer or producer is; each remaining block's
leading spatial loops are fused and run in parallel, and an injective block's innermost
spatial loop is vectorized by the target's lanes. Correct for any PrimFunc TVM can schedule;
fast for none in particular.
"""

from __future__ import annotations

from tvm_ext.schedules.common import parallel_pays, symbolic_extent_work

from tvm_ext.base import tvm_api
from tvm_ext.hardware.fork_join import PROBE_ACCESSES
from tvm_ext.hardware.target import lanes_for, target_cores

NAME = "fallback"


def schedule_func(func, target):
    sch = tvm_api.Schedule(func)
    blocks = tvm_api.dlight.analysis.normalize_prim_func(sch)
    if blocks is None:  # not in dlight's normal form: leave it as it is (still correct)
        return sch
    for block in tvm_api.dlight.base.try_inline(sch, blocks):
        parallel_spatial(sch, block, target, block.is_injective(), pays(sch, [block], target))
    return sch


def work(block) -> int:
    """Iterations of a block's loop nest (its domain size; a symbolic extent counts as large,
    or at its declared upper bound: ``common.symbolic_extent_work``)."""
    total = 1
    for extent in block.dom():
        total *= static_int(extent) or symbolic_extent_work(extent)
    return total


def pays(sch, blocks, target) -> bool:
    """Whether the loop nest of ``blocks[-1]`` (dlight ``SBlockInfo``), with the stages
    ``blocks`` computed inside it, pays for a parallel region: its iterations
    (:func:`weighted_work`), each worth a libm call where a stage makes one
    (``common.parallel_pays``)."""
    libm = any(calls_libm(sch.get(b.block_rv).body) for b in blocks)
    return parallel_pays(weighted_work(sch, blocks), target, libm)


def weighted_work(sch, blocks) -> int:
    """The iterations of ``blocks[-1]``'s loop nest, each weighed by the memory accesses the
    stages ``blocks`` make in it against the two of the probe's iteration (one load, one
    store: ``fork_join.PROBE_ACCESSES``), never below one: a residual add of 128 x 768 (two
    loads and a store, 98304 iterations) ran 15.7 us serial, 8.6 us on 2 threads, at a
    threshold of 131072 iterations (Zen 3)."""
    count = sum(accesses(sch.get(b.block_rv).body) for b in blocks)
    return int(work(blocks[-1]) * max(1.0, count / PROBE_ACCESSES))


def accesses(stmt) -> int:
    """The distinct buffer elements a block body's statement reads and writes in one
    iteration (a load repeated in its value counts once: the compiler loads it once; a
    reduction's load of the element it updates not at all: a register); two, the probe's,
    for a body that is no single store."""
    if not isinstance(stmt, tvm_api.tirx.BufferStore):
        return PROBE_ACCESSES
    seen = {str(load) for load in loads(stmt.value) if not load.source.same_as(stmt.buffer)}
    return len(seen) + 1


def loads(expr) -> list:
    """The buffer loads in ``expr`` (through calls, selects, casts and arithmetic; a load's
    indices are not walked)."""
    if isinstance(expr, tvm_api.ir.expr.TensorLoad):  # TVM 0.27's buffer load
        return [expr]
    return [load for child in expr_children(expr) for load in loads(child)]


def static_int(value) -> int | None:
    """A Python int, an IntImm's value, or None for a symbolic extent."""
    if isinstance(value, int):
        return value
    return int(value.value) if isinstance(value, tvm_api.tirx.IntImm) else None


def parallel_spatial(sch, block, target, vectorize: bool, parallel: bool) -> None:
    """Fuse ``block``'s (a dlight ``SBlockInfo``) leading spatial loops and run them in
    parallel (unless ``parallel`` is False: its work does not pay for the thread pool,
    ``common.parallel_pays``); with ``vectorize``, split the innermost loop of an all-spatial
    nest by the target's lanes and vectorize it.

    A stored value that selects on the innermost iterator (a concatenation's
    ``if_then_else(480 <= c, x12[c - 480], ...)`` chain, a padding's ``j < 65``) is cut at
    the bounds it compares with, so that no vector straddles one: LLVM scalarizes a per-lane
    condition (a DenseNet concatenation of 13 inputs with its batch norm ran at 4-9 GB/s,
    slower than unscheduled; cut, each piece simplifies to one input's load: 180 GB/s).
    Bounds on whole vectors (of ``lanes``, or of the widest power of two of at least 4 lanes
    dividing them): the loop split by that width, vectorized, its outer part partitioned at
    the bounds (:func:`aligned_width`). Otherwise (:func:`vector_pieces`): whole vectors
    first, then the rest as plain loops; a matmul's 256 x 80 padding copy of B ran element by
    element with a compare and a branch each, 40 % of a 65 x 65 x 256 matmul's time.

    A symbolic innermost extent (a sequence length) stays a loop of its own, outside the
    fused one: fused, every element would pay integer divisions by the symbolic extent to
    recover its indices, and split by the lanes its tail would be a per-lane predicate; a
    plain loop LLVM vectorizes with a scalar remainder."""
    kinds, loops = block.dom_kind(), block.get_loops()
    lead = len(kinds) - len(kinds.lstrip("S"))
    if lead == 0:
        return
    vectorize = vectorize and not calls_libm(sch.get(block.block_rv).body)
    inner = None
    lanes = lanes_for(target, 32)
    last_extent = loop_extent(sch, loops[-1])
    pieces = aligned = None
    if vectorize and lead == len(loops) and (last_extent or 0) >= lanes:
        bounds = [b for b in branch_points(sch.get(block.block_rv).body, block.iters[-1].var)
                  if 0 < b < last_extent]  # fmt: skip
        width = aligned_width(bounds, last_extent, lanes)
        if width is not None:
            outer, inner = sch.split(loops[-1], [None, width])
            aligned = (outer, vector_runs(bounds, last_extent, width))
            loops, lead = loops[:-1], lead - 1
        else:
            pieces = vector_pieces(sch, block, last_extent, lanes)
    if pieces is not None:
        last, lead = loops[-1], lead - 1
        loops = loops[:-1]
    elif aligned is None and vectorize and lead == len(loops) and (last_extent or 0) >= lanes:
        last, inner = sch.split(loops[-1], [None, lanes])
        loops = [*loops[:-1], last]
        if lead > 1 and (not parallel or _rows_busy_cores(sch, loops[: lead - 1], target)):
            lead -= 1
    elif lead == len(loops) and lead > 1 and last_extent is None:
        lead -= 1
    elif lead == len(loops) and lead > 1 and inner is None and aligned is None:
        # A last axis shorter than a vector (an image's 3 channels), or a nest not vectorized:
        # its loop stays LLVM's where the rows keep the cores busy (fused, every element paid
        # divisions for its indices: a 1 x 3 x 224 x 224 image to channels-last 151 us, the
        # plain nest 20 us; Zen 3).
        if not parallel or _rows_busy_cores(sch, loops[: lead - 1], target):
            lead -= 1
    if lead:
        outer = sch.fuse(*loops[:lead]) if lead > 1 else loops[0]
        if (loop_extent(sch, outer) or 2) > 1 and parallel:
            sch.parallel(outer)
    if pieces is not None:
        _vectorize_pieces(sch, last, pieces, lanes, parallel=not lead and parallel)
    if inner is not None:
        sch.vectorize(inner)
    if aligned is not None:
        sch.loop_partition(aligned[0], [*aligned[1][:-1], None])


# The parallel iterations per core from which a nest's rows alone keep the cores busy.
ROWS_PER_CORE = 4


def _rows_busy_cores(sch, rows, target) -> bool:
    """Whether the loops ``rows`` (a nest's leading loops, outside the one over its last
    axis's vectors) give every core of ``target`` ``ROWS_PER_CORE`` iterations or more: the
    parallel loop is then theirs alone, and each row's vectors run in a loop of their own (as
    they do in a serial nest).
    Fused with the rows, the loop over the vectors recovers its row by a division at every
    vector, and a gather's row index with it: GPT-2's token embedding (128 rows of 768 from
    a 50257-row table) ran 12.8 us so, 4.0 us over the rows, 7.1 us serial (Zen 3)."""
    if not rows:
        return False
    total = 1
    for loop in rows:
        total *= loop_extent(sch, loop) or 0
    return total >= ROWS_PER_CORE * target_cores(target)


def aligned_width(bounds: list[int], extent: int, lanes: int) -> int | None:
    """The vector width for cutting a loop of ``extent`` at ``bounds`` with no vector across a
    bound: ``lanes`` when every bound and the extent are whole vectors, else the widest power
    of two of at least 4 that divides them all (a concatenation of 24 and 40 channels: 8
    lanes); None when there is no bound, or no such width."""
    if not bounds:
        return None
    width = lanes
    while width >= 4 and any(v % width for v in (*bounds, extent)):
        width //= 2
    return width if width >= 4 else None


def vector_runs(bounds: list[int], extent: int, width: int) -> list[int]:
    """The vectors of ``width`` between the cuts at ``bounds`` (each a whole number of them:
    :func:`aligned_width`) of a loop of ``extent``, for ``loop_partition`` of the loop over
    the vectors."""
    edges = [0, *sorted({b // width for b in bounds}), extent // width]
    return [b - a for a, b in zip(edges, edges[1:])]


def vector_pieces(sch, block, extent: int, lanes: int) -> list[int] | None:
    """How to cut an all-spatial block's innermost loop (``extent`` iterations) so that its
    first piece is whole vectors with no per-lane condition: at the last whole vector below
    ``extent`` and below each bound ``j < c`` a padding condition puts on the innermost
    iterator (and at ``c`` itself: past it the value is the pad constant). None when the
    loop needs no cut (every vector whole, no condition inside one) or none would leave a
    vector."""
    var = block.iters[-1].var
    cuts = {extent // lanes * lanes}
    for bound in branch_points(sch.get(block.block_rv).body, var, upper=True):
        if 0 < bound < extent:
            cuts |= {bound // lanes * lanes, bound}
    cuts = sorted(c for c in cuts if 0 < c < extent)
    if not cuts or cuts[0] < lanes:
        return None
    edges = [0, *cuts, extent]
    return [b - a for a, b in zip(edges, edges[1:])]


def branch_points(stmt, var, upper: bool = False) -> list[int]:
    """The points where a block body's stored value changes branch along ``var``: ``c`` for
    each comparison of ``var`` with a constant ``c`` anywhere in it (``var < c``, ``c <= var``,
    ...; ``var <= c`` and ``var > c`` change at ``c + 1``). With ``upper``, only the bounds
    ``var`` is compared to from below (``var < c``: a padding's end)."""
    tirx = tvm_api.tirx
    # (comparison, whether the variable is its left operand) -> offset of the change point
    offsets = {(tirx.LT, True): 0, (tirx.GE, True): 0, (tirx.LE, True): 1, (tirx.GT, True): 1,
               (tirx.GT, False): 0, (tirx.LE, False): 0, (tirx.GE, False): 1,
               (tirx.LT, False): 1}  # fmt: skip
    found = []

    def visit(expr):
        kind = type(expr)
        if (kind, True) in offsets:
            for left, c in ((True, expr.b), (False, expr.a)):
                if _is_var(expr.a if left else expr.b, var) and _const(c):
                    below = (kind in (tirx.LT, tirx.LE)) == left  # var on the small side
                    if below or not upper:
                        found.append(int(c.value) + offsets[(kind, left)])
                    return
        for child in expr_children(expr):
            visit(child)

    if isinstance(stmt, tirx.BufferStore):
        visit(stmt.value)
    return found


def expr_children(expr) -> list:
    """The operands of an expression the rules walk: a call's arguments, a select's three
    parts, a cast's or a negation's operand, a binary operation's two (arithmetic, min/max,
    comparisons, and/or); none for a leaf or a buffer load (its indices are not walked)."""
    tirx = tvm_api.tirx
    if isinstance(expr, tvm_api.ir.Call):
        return list(expr.args)
    if isinstance(expr, tirx.Select):
        return [expr.condition, expr.true_value, expr.false_value]
    if isinstance(expr, tirx.Cast):
        return [expr.value]
    if isinstance(expr, tirx.Not):
        return [expr.a]
    if hasattr(expr, "a") and hasattr(expr, "b"):
        return [expr.a, expr.b]
    return []


# Math calls LLVM has no vector instruction for: vectorized, each lane becomes a call to
# libm with the vector spilled around it (every vector register is caller-saved).
LIBM_CALLS = frozenset(f"tirx.{name}" for name in (
    "exp", "exp2", "exp10", "expm1", "log", "log2", "log10", "log1p", "pow", "erf", "tanh",
    "sigmoid", "sin", "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "atan2",
))  # fmt: skip


def calls_libm(stmt) -> bool:
    """Whether a block body's stored value calls a math function of :data:`LIBM_CALLS`."""

    def visit(expr) -> bool:
        if isinstance(expr, tvm_api.ir.Call) and str(getattr(expr.op, "name", "")) in LIBM_CALLS:
            return True
        return any(visit(child) for child in expr_children(expr))

    return isinstance(stmt, tvm_api.tirx.BufferStore) and visit(stmt.value)


def _is_var(expr, var) -> bool:
    return isinstance(expr, tvm_api.tirx.Var) and expr.same_as(var)


def _const(expr) -> bool:
    return isinstance(expr, tvm_api.tirx.IntImm)


def _vectorize_pieces(sch, loop, pieces: list[int], lanes: int, parallel: bool) -> None:
    """Partition ``loop`` into ``pieces``; the first (whole vectors) is split by ``lanes`` and
    vectorized (its outer loop in parallel when nothing outside is), the rest stay plain
    loops for LLVM (a remainder, a run of pad constants)."""
    first = sch.loop_partition(loop, [*pieces[:-1], None])[0]
    outer, inner = sch.split(first, [None, lanes])
    if parallel and (loop_extent(sch, outer) or 2) > 1:
        sch.parallel(outer)
    sch.vectorize(inner)


def loop_extent(sch, loop) -> int | None:
    return static_int(sch.get(loop).extent)
