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
from dataclasses import asdict, dataclass, field, fields
from types import MappingProxyType
from typing import Mapping

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.hardware.target import as_target, cpu_features, lanes_for, target_cores
from tvm_ext.workloads.kernels import Workload, from_func, np_dtype

from .walk import BlockFacts, Unsupported, Walker  # noqa: F401  (BlockFacts re-exported)

_DEFAULT_FP = {"fp_contract": True, "fp_reassoc": False}


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
    # MetaSchedule's per-store features aggregated to a fixed width (see
    # :func:`store_feature_summary`); derived only on request (``features(..., stores=True)``).
    store_features: tuple[float, ...] | None = None
    missing: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # What the target lets LLVM do with a floating-point reduction (see
    # :func:`fp_reduction_facts`): fuse ``acc + x * y`` into one FMA (the target has FMA), and
    # reorder its steps (fast-math flags, or LLVM options the facts cannot read). Records
    # written before these facts were derived come from FMA targets without fast-math.
    fp_contract: bool = True
    fp_reassoc: bool = False

    def available(self, name: str) -> bool:
        """Whether fact ``name`` was derived (False: see ``missing[name]``)."""
        return getattr(self, name) is not None

    def to_dict(self) -> dict:
        """Plain JSON-ready data; :meth:`from_dict` gives back an equal record."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["bytes"] = {k: list(v) if v is not None else None for k, v in self.bytes.items()}
        out["blocks"] = [asdict(b) for b in self.blocks]
        out["missing"] = dict(self.missing)
        out["store_features"] = list(self.store_features) if self.store_features else None
        for name in ("fp_contract", "fp_reassoc"):  # written only where not the default, so
            if out[name] == _DEFAULT_FP[name]:  # records of FMA targets without fast-math
                del out[name]  # read the same as before these facts existed
        return out

    @classmethod
    def from_dict(cls, data: Mapping) -> "CandidateFeatures":
        data = dict(data)
        data["bytes"] = MappingProxyType(
            {k: tuple(v) if v is not None else None for k, v in data["bytes"].items()}
        )
        data["blocks"] = tuple(BlockFacts(**b) for b in data["blocks"])
        data["missing"] = MappingProxyType(dict(data["missing"]))
        if data.get("store_features") is not None:
            data["store_features"] = tuple(data["store_features"])
        return cls(**data)


def _on_chip_bytes(mod) -> tuple[int, int]:
    """(shared, local) bytes a GPU thread block allocates, from the compacted buffers.

    Buffers are declared at full size until TVM compacts them to the region each block
    uses; a software-pipelined loop keeps one copy of its shared buffers per stage.
    """
    tx = tvm_api.s_tir.transform
    compact = tvm_api.transform.Sequential(
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
    pending = [tvm_api.main_func(compact).body]
    while pending:
        node = pending.pop()
        if isinstance(node, tvm_api.s_tir.SBlockRealize):
            node = node.block
            for buf in node.alloc_buffers:
                size = math.prod(int(d) for d in buf.shape) * np_dtype(str(buf.dtype)).itemsize
                scope = str(buf.scope())
                if scope.startswith("shared"):
                    shared += size * stages
                elif scope == "local" or scope.startswith("wmma"):
                    local += size
        if isinstance(node, (tvm_api.tirx.For, tvm_api.s_tir.SBlock)):
            pending.append(node.body)
        elif isinstance(node, tvm_api.tirx.SeqStmt):
            pending.extend(node.seq)
    return shared, local


def _param_bytes(func) -> int:
    """The bytes every schedule of ``func`` moves: each parameter once, except a parameter
    read only through data-dependent indices (a gather's table, ``table[ids[i], j]``), which
    counts none: how much of it one call touches depends on the indices (all equal: one row),
    so no more than that is compulsory. Counting it whole made the floor of an embedding
    lookup read its whole table (30522 x 64 floats for 16 ids) and exceed the measured time."""
    gathered = tvm_api.gathered_params(func)
    return sum(
        math.prod(s) * np_dtype(d).itemsize
        for i, (s, d) in enumerate(tvm_api.param_specs(func))
        if i not in gathered
    )


# The dtype a candidate's arithmetic is priced at (the compute arm's dtype speedup), from the
# dtypes of its parameters: the one whose class the hardware runs fastest, so that a bound can
# only read low. 8-bit ints (and booleans, one byte each) come first: dot-product instructions
# (VNNI, AMX) or 64 byte lanes a register; then the 16-bit types (twice the fp32 lanes).
_PRICING_ORDER = ("int8", "uint8", "bool", "bfloat16", "float16", "int16", "uint16")


def pricing_dtype(func) -> str:
    """The dtype :class:`CandidateFeatures` prices ``func``'s arithmetic at: the fastest class
    among its parameters' dtypes (see ``_PRICING_ORDER``), else ``float32`` for floats, else
    the first parameter's (all price at the fp32 rate). Not the output's: a u8 x s8 -> i32
    matmul stores ``int32`` but multiplies bytes, at 4x the fp32 FMA rate or more."""
    dtypes = [str(p.dtype) for p in func.params]
    for name in _PRICING_ORDER:
        if name in dtypes:
            return name
    return "float32" if any(d.startswith("float") for d in dtypes) or not dtypes else dtypes[0]


N_STORE_FEATURES = 164  # the width of MetaSchedule's PerStoreFeature rows (TVM 0.27)
STORE_SUMMARY = ("n_stores",) + tuple(
    f"{agg}_{i}" for agg in ("mean", "max") for i in range(N_STORE_FEATURES)
)
_STORE_CONTEXTS: dict = {}


def store_feature_summary(obj, target) -> tuple[float, ...]:
    """MetaSchedule's ``PerStoreFeature`` matrix of a (post-processed) candidate, one row per
    buffer store, aggregated to :data:`STORE_SUMMARY`: the store count, then the mean and
    the max of each of the 164 columns over stores."""

    ms = tvm_api.meta_schedule()
    target = as_target(target)
    key = str(target)
    if key not in _STORE_CONTEXTS:
        _STORE_CONTEXTS[key] = (
            ms.TuneContext(target=target),
            ms.feature_extractor.PerStoreFeature(extract_workload=False),
        )
    context, extractor = _STORE_CONTEXTS[key]
    mod = tvm_api.as_module(obj)
    sch = obj if isinstance(obj, tvm_api.Schedule) else tvm_api.Schedule(mod)
    args = ms.arg_info.ArgInfo.from_prim_func(tvm_api.main_func(mod))
    matrix = extractor.extract_from(context, [ms.MeasureCandidate(sch, args)])[0].numpy()
    count = float(matrix.shape[0])
    if matrix.shape[0] == 0:
        matrix = np.zeros((1, N_STORE_FEATURES))
    if matrix.shape[1] != N_STORE_FEATURES:
        raise RuntimeError(
            f"PerStoreFeature returned {matrix.shape[1]} columns, expected {N_STORE_FEATURES}"
        )
    return (count, *map(float, matrix.mean(axis=0)), *map(float, matrix.max(axis=0)))


def _as_timed(mod):
    """``mod`` as the runner times it: its weight-repacking blocks' layout transforms left out
    (:func:`~tvm_ext.base.tvm_api.without_weight_repack`), where it has any. A module stripped
    already (its weights arrive packed; TVM's pass then fails on the copy it left) is left as
    it is."""
    marked = any("meta_schedule.layout_rewrite_preproc" in b.annotations
                 for b in tvm_api.sblocks(tvm_api.main_func(mod)))  # fmt: skip
    if not marked:
        return mod
    try:
        return tvm_api.without_weight_repack(mod)
    except RuntimeError:  # TVM's InternalError: the blocks are copies of packed weights already
        return mod


_REASSOC_FLAGS = ("fast-math", "fast-math-reassoc")


def fp_reduction_facts(target) -> tuple[bool, bool]:
    """(contract, reassoc) for an llvm ``target``: whether ``acc + x * y`` may be one FMA (the
    target's CPU has FMA: TVM lets LLVM fuse, every candidate of the bound study did), and
    whether a reduction's steps may be reordered (``fast-math``, ``fast-math-reassoc``, or any
    ``cl-opt``, whose LLVM options the facts do not interpret). Other targets: (True, True),
    i.e. no chain is established."""
    if target.kind.name != "llvm":
        return True, True
    attrs = target.attrs
    reassoc = any(bool(attrs.get(flag, False)) for flag in _REASSOC_FLAGS) or bool(
        list(attrs.get("cl-opt", ()))
    )
    return "fma" in cpu_features(target), reassoc


def features(
    obj, target=None, workload: Workload | None = None, *, stores: bool = False
) -> CandidateFeatures:
    """Derive :class:`CandidateFeatures` of a ``Schedule``, ``IRModule`` or ``PrimFunc``
    (with ``stores=True`` also MetaSchedule's per-store summary, for learned policies)."""
    target = as_target(target)
    # Weight-repacking blocks (MetaSchedule's RewriteLayout, the contraction rule's packs) are
    # left out: the runner builds every candidate without them (a model repacks its weights
    # once, at compile time), so a bound counting their work could exceed what it times.
    func = tvm_api.main_func(_as_timed(tvm_api.as_module(obj)))
    workload = workload if workload is not None else from_func(func)
    kind = target.kind.name
    contract, reassoc = fp_reduction_facts(target)
    cores = target_cores(target) if kind == "llvm" else 1
    walker = Walker(cores, lanes_for(target, 32) if kind == "llvm" else 1)
    missing: dict[str, str] = {}
    try:
        walker.stmt(func.body, [])
    except Unsupported as why:
        missing["blocks"] = str(why)
    missing.update(walker.missing)
    blocks = tuple(walker.finish()) if "blocks" not in missing else ()
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
    shared, local = _on_chip_bytes(tvm_api.as_module(obj)) if gpu else (None, None)
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
        dtype=workload.dtype if workload is not None else pricing_dtype(func),
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
        store_features=store_feature_summary(obj, target) if stores else None,
        fp_contract=contract,
        fp_reassoc=reassoc,
        missing=MappingProxyType(missing),
    )
