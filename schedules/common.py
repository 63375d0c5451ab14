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
