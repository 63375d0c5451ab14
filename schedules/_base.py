"""Shared pieces of the schedule library: config checks and target facts."""

from __future__ import annotations

import dataclasses

from tvm_ext import _tvm
from tvm_ext.errors import ScheduleNotApplicable


def check(cond: bool, message: str) -> None:
    """Raise ScheduleNotApplicable(message) unless ``cond`` (the schedule does not apply)."""
    if not cond:
        raise ScheduleNotApplicable(message)


def check_config(config) -> None:
    """Every int field of a config dataclass must be a positive int (ValueError otherwise)."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if f.type in ("int", int) and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{type(config).__name__}: {f.name}={value!r} must be a positive int")


def vector_bits(target) -> int:
    """Widest vector register of an llvm target, in bits (512 with AVX-512, 256 with AVX2)."""
    return int(_tvm.global_func("target.llvm_get_vector_width")(target))


def lanes_for(target, dtype_bits: int = 32) -> int:
    """Vector lanes of ``dtype_bits``-wide elements on ``target``."""
    return max(vector_bits(target) // dtype_bits, 1)


def is_cpu(target) -> bool:
    return target.kind.name == "llvm"


def is_cuda(target) -> bool:
    return target.kind.name == "cuda"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
