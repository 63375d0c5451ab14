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

from ._walk import BlockFacts, Unsupported, _Walker  # noqa: F401  (BlockFacts re-exported)


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
