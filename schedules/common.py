"""Shared pieces of the schedule library: config checks and target facts."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import ScheduleNotApplicable
from tvm_ext.hardware.fork_join import libm_weight, parallel_min_work
from tvm_ext.hardware.target import has_feature, lanes_for, vector_bits  # noqa: F401  (re-exported)

# Register-tile accumulators are `global`-scope buffers: TVM's LowerTVMBuiltin puts a CPU
# allocation of that scope on the stack when it is under 1 KiB, where LLVM keeps it in
# registers; a `local` one (or one of 1 KiB or more) becomes a runtime workspace, whose updates
# LLVM keeps in registers around one reduction loop at most (rules.tile_shape.roomy_holds) and
# otherwise stores to memory at every step (measured: fp32 matmul 256x256x32 148 -> 205
# GFLOP/s, bf16 1536^3 131 -> 406 GFLOP/s on a 2-core Zen 4).
ACC_SCOPE = "global"
STACK_TILE_BYTES = 1024

# Independent FMA chains a core needs in flight to issue an FMA every cycle on every pipe
# (latency x pipes: 4 x 2 on Zen 4/5 and Golden Cove); a tile of fewer accumulators runs at
# that fraction of the peak.
FMA_CHAINS = 8

# What a tile's step over the reduction costs beyond its rows' FMAs (the panel's vector
# loads, the loop), in rows: a row of an ``mr``-row tile costs ``1 + TILE_STEP_ROWS / mr``.
# Measured: a 16 x 768 x 3072 matmul in tiles of 3, 4 and 5 rows of 48 lanes ran 10.2, 9.3
# and 9.0 us per computed row (Zen 5); the fit of that curve.
TILE_STEP_ROWS = 1.2


# A symbolic extent with no declared bound counts as this many iterations: large, so that a
# loop over a length not known at compile time runs in parallel.
SYMBOLIC_WORK = 1 << 30


def parallel_pays(work: int, target, libm: bool = False) -> bool:
    """Whether a loop nest of ``work`` iterations pays for a parallel region on ``target``:
    the thread pool's wake-up and join, measured on the host
    (:func:`tvm_ext.hardware.fork_join.parallel_min_work`). With ``libm`` (each iteration
    calls a libm function) an iteration counts as many as one such call costs
    (``fork_join.libm_weight``: 19 on a 2-core Xeon; a 12 x 16 x 16 softmax ran in 13.3 us
    serial, 7.7 us on 2 threads)."""
    scale = libm_weight(target) if libm else 1.0
    return work * scale >= parallel_min_work(target)


# The bounds of each symbolic dimension ({name: value}, highest and least) of the function
# being scheduled, when it declares them (its ``tir_var_upper_bound`` / ``tir_var_lower_bound``):
# a rule then counts a symbolic extent's work at its highest value, not as large, and may
# rely on its least (see ``dispatch.schedule_func``).
_ASSUMED: contextvars.ContextVar[tuple] = contextvars.ContextVar("bounds", default=({}, {}))


@contextlib.contextmanager
def assumed_bounds(uppers: dict, lowers: dict):
    """Schedule under ``uppers`` and ``lowers`` ({symbolic name: value}) for block extents."""
    token = _ASSUMED.set((dict(uppers), dict(lowers)))
    try:
        yield
    finally:
        _ASSUMED.reset(token)


# Whether the schedule being made seeds MetaSchedule's search (see search_seed).
_SEEDING: contextvars.ContextVar[bool] = contextvars.ContextVar("seeding", default=False)


@contextlib.contextmanager
def search_seed():
    """Schedule a seed for MetaSchedule's search. Its ``RewriteLayout`` post-processor lays
    out again the weights of every record the search starts from, and fails a check inside
    TVM 0.27 ("Unexpected type: prim.Sub") on a weight read in a loop cut into runs inside
    the reduction (the contraction's one-pass statements); the failure raises out of the
    search's parallel loop and ends the whole tune. A seed keeps such cuts out."""
    token = _SEEDING.set(True)
    try:
        yield
    finally:
        _SEEDING.reset(token)


def seeding() -> bool:
    """Whether the schedule being made is a search seed (:func:`search_seed`)."""
    return _SEEDING.get()


def symbolic_extent_work(extent) -> int:
    """What a symbolic extent counts for in a block's work: its highest value under the
    assumed bounds, else ``SYMBOLIC_WORK`` (large: a symbolic length runs in parallel)."""
    high = symbolic_extent_high(extent)
    return SYMBOLIC_WORK if high is None else max(high, 1)


def symbolic_extent_high(extent) -> int | None:
    """The highest value a symbolic extent takes under the assumed bounds (None when
    unknown)."""
    uppers = _ASSUMED.get()[0]
    return tvm_api.upper_bound(extent, uppers) if uppers else None


def symbolic_extent_least(extent) -> int:
    """The least value a symbolic extent takes under the assumed bounds (1 when unknown)."""
    lowers = _ASSUMED.get()[1]
    low = tvm_api.lower_bound(extent, lowers) if lowers else None
    return 1 if low is None else max(low, 1)


def vector_registers(target) -> int:
    """Architectural vector registers of an x86 target: 32 with AVX-512, 16 with AVX/AVX2."""
    return 32 if vector_bits(target) >= 512 else 16


def check(cond: bool, message: str) -> None:
    """Raise ScheduleNotApplicable(message) unless ``cond`` (the schedule does not apply)."""
    if not cond:
        raise ScheduleNotApplicable(message)


def check_config(config) -> None:
    """Every int field of a config dataclass must be a positive int (ValueError otherwise)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.type in ("int", int) and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ValueError(f"{type(config).__name__}: {f.name}={value!r} must be a positive int")


def is_cpu(target) -> bool:
    return target.kind.name == "llvm"


def is_cuda(target) -> bool:
    return target.kind.name == "cuda"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def find_block(sch, name: str):
    """The block called ``name``, or None (``pad_einsum`` pads only the buffers that need it)."""
    try:
        return sch.get_sblock(name)
    except tvm_api.ScheduleError:
        return None


def tile_size(extent: int | None, limit: int, step: int = 1, least: int = 1) -> int:
    """``extent`` when it is within ``limit``; else the largest multiple of ``step`` in
    [limit / 2, limit] (and at least ``least``) dividing ``extent``; else ``limit`` (a tail
    runs under a predicate; so does a symbolic ``extent``'s, None)."""
    if extent is None:
        return limit
    if extent <= limit:
        return extent
    # Never down to one row for a divisor: a 1-row tile of a 65-row matmul had a fifth of a
    # 3-row tile's FMA chains; the rows' tail is a scalar condition per row.
    for size in range(limit // step * step, max(limit // 2, step, min(limit, 2), least) - 1, -step):
        if extent % size == 0:
            return size
    return limit


def tail_rows(extent: int, fit: int, per_row: int) -> int:
    """The row tile of a static extent no tile of ``fit // 2`` to ``fit`` rows divides: the
    one whose tiles, the last (partial) one counted whole, run in the least time (see
    :func:`tile_cost`), where as many rows as fit left a one- or two-row tail tile of a
    quarter of the FMA chains: a 3x3 convolution of 512 channels on a 7 x 7 map in tiles of
    4 x 16 (4 + 3 rows) took 1412 us, 6 + 1 rows 1667 us; 256 channels on 14 x 14 in tiles
    of 5 rows 1200 us, 6 + 6 + 2 1403 us (Zen 3, AVX2, 2 threads, the padding a stage)."""
    candidates = range(fit, max(2, -(-fit // 2)) - 1, -1)
    return min(candidates, key=lambda mr: tile_cost(-(-extent // mr) * mr, mr, per_row))


def tile_cost(padded_rows: int, mr: int, per_row: int) -> float:
    """The time of ``padded_rows`` rows in ``mr``-row tiles of ``per_row`` accumulators a
    row: a row costs ``1 + TILE_STEP_ROWS / mr`` at the fraction of the peak the tile's
    ``FMA_CHAINS`` allow."""
    return padded_rows * (1 + TILE_STEP_ROWS / mr) / min(1.0, mr * per_row / FMA_CHAINS)
