"""``tune(mod, target)``: MetaSchedule with a cost policy, an admissible cut, a hand-schedule
seed, and the three numbers for the winner."""

from __future__ import annotations

import functools
import logging
import math
import os
import tempfile
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from . import _tvm
from .errors import ParityError, ScheduleNotApplicable, TvmExtError
from .kernels import Workload, from_func
from .logs import log_folder
from .machine import host_machine
from .measure import Measurement, measure
from .target import as_target, host_target, target_cores

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TuneResult:
    """The tuned module with its independent measurement and how the search went."""

    mod: "_tvm.IRModule"
    measurement: Measurement
    trace: str
    stats: Mapping[str, object]
    binding: str
    source: str  # "search" or "hand schedule" (the seed won)
    work_dir: str  # MetaSchedule's working directory (its logs are in <work_dir>/logs)
    log_folder: str | None  # the frozen log this tune added its records to, if log_dir was given


def _space(ms, target):
    """MetaSchedule's design space for ``target``.

    For CPUs: the stock x86 rules less ``MultiLevelTilingWithIntrin``, whose VNNI/AVX-512
    intrinsics are the one reason to import TVM's tensor-intrinsic modules (1-40 s) and whose
    ``vpdpbusd`` call fails LLVM 22's verifier in TVM 0.27 anyway; int8 tensorization comes
    from our own hand schedule instead. CUDA keeps the stock space.
    """
    if target.kind.name != "llvm":
        return "post-order-apply"
    sr = ms.schedule_rule
    rules = [
        sr.ApplyCustomRule(),
        sr.InlineConstantScalars(),
        sr.AutoInline(
            into_producer=False,
            into_consumer=True,
            inline_const_tensor=True,
            disallow_if_then_else=True,
            require_injective=True,
            require_ordered=True,
            disallow_op=["tirx.exp"],
        ),
        sr.AddRFactor(max_jobs_per_core=16, max_innermost_factor=64),
        sr.MultiLevelTiling(
            structure="SSRSRS",
            tile_binds=None,
            max_innermost_factor=64,
            vector_load_lens=None,
            reuse_read=None,
            reuse_write=sr.ReuseType(req="may", levels=[1, 2], scope="global"),
        ),
        sr.ParallelizeVectorizeUnroll(
            max_jobs_per_core=16,
            max_vectorize_extent=64,
            unroll_max_steps=[0, 16, 64, 512],
            unroll_explicit=True,
        ),
        sr.RandomComputeLocation(),
    ]
    return ms.space_generator.PostOrderApply(
        sch_rules=rules, postprocs="llvm", mutator_probs="llvm"
    )


_LOG_HANDLERS: list[logging.Handler] = []


def _route_logs(work_dir: str) -> logging.Logger:
    """Send MetaSchedule's chatter to ``<work_dir>/logs/meta_schedule.log``; only its
    warnings reach the terminal. Returns the task logger to hand to the tuning context."""
    os.makedirs(os.path.join(work_dir, "logs"), exist_ok=True)
    root = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in _LOG_HANDLERS:  # a previous tune's handlers
        root.removeHandler(handler)
        handler.close()
    to_file = logging.FileHandler(os.path.join(work_dir, "logs", "meta_schedule.log"))
    to_file.setFormatter(logging.Formatter("%(asctime)s [%(levelname)s] %(message)s"))
    to_console = logging.StreamHandler()
    to_console.setLevel(logging.WARNING)
    _LOG_HANDLERS[:] = [to_file, to_console]
    for handler in _LOG_HANDLERS:
        root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    root.propagate = False
    return logging.getLogger("tvm.s_tir.meta_schedule.tvm_ext_task")


def _copy_log_into(folder, work_dir: str, func) -> float:
    """Start from an existing log of this workload: its records seed the search; returns its
    best time (the initial cut), or inf when there is no usable log."""
    import pathlib
    import shutil

    from .logs import RECORDS_FILE, WORKLOADS_FILE, read_manifest, structural_hash

    if not (folder / "manifest.json").exists():
        return math.inf
    manifest = read_manifest(folder)
    if manifest.get("structural_hash") != structural_hash(func):
        log.warning("ignoring %s: it was tuned for a different workload", folder)
        return math.inf
    for name in (WORKLOADS_FILE, RECORDS_FILE):
        shutil.copyfile(folder / name, pathlib.Path(work_dir) / name)
    return float(manifest.get("best_seconds") or math.inf)


def _save_log(
    folder,
    work_dir,
    func,
    target,
    cores,
    policy,
    stats,
    workload,
    result,
    binding: str | None = None,
) -> None:
    import pathlib

    from .logs import make_manifest, merge_into_log

    flops = workload.flops if workload is not None else None
    best = result.seconds if result is not None else stats.incumbent_s
    manifest = make_manifest(
        func,
        target,
        threads=cores,
        policy=type(policy).__name__,
        stats=stats.as_dict(),
        seconds=best,
        gflops=flops / best / 1e9 if flops and math.isfinite(best) else None,
        max_rel_error=result.max_rel_error if result is not None else None,
        workload=workload,
    )
    manifest["binding"] = binding
    if result is None:
        manifest["parity"] = {"max_rel_error": None, "ok": None}  # interrupted: replay checks
    merge_into_log(folder, pathlib.Path(work_dir), manifest)


def _hand_schedule(workload: Workload | None, target):
    if workload is None:
        return None
    from tvm_ext import schedules

    try:
        return schedules.schedule(workload, target)
    except ScheduleNotApplicable as why:
        log.info("no hand schedule to seed the search: %s", why)
        return None


def _seed_database(ms, database, mod, sch, seconds: float, target) -> None:
    """Store the hand schedule as a measured record: the search starts from it."""
    workload = database.commit_workload(mod)
    args = ms.arg_info.ArgInfo.from_prim_func(_tvm.main_func(mod))
    database.commit_tuning_record(
        ms.database.TuningRecord(sch.trace, workload, [seconds], target, args)
    )


def _best(ms, database, mod, target):
    records = database.get_top_k(database.commit_workload(mod), 1)
    if not records:
        return None, math.inf
    rec = records[0]
    secs = [float(s) for s in rec.run_secs]
    sch = _tvm.Schedule(_tvm.tvm.ir.load_json(_tvm.tvm.ir.save_json(mod)))
    rec.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch, float(sum(secs) / len(secs))


def tune(
    mod,
    target=None,
    *,
    trials: int = 64,
    policy=None,
    log_dir=None,
    runner=None,
    seed: int | None = None,
    workload: Workload | None = None,
    audit: bool = False,
    batch: int = 16,
    progress: bool = True,
) -> TuneResult:
    """Tune a PrimFunc or single-function IRModule for ``target`` (default the host CPU).

    The policy (default :class:`~tvm_ext.cost.RooflinePolicy`) ranks candidates and, when it
    proves lower bounds, drops every candidate that cannot beat the best time measured so far
    before it is built. The library's hand schedule, when one exists, is measured first: it is
    the initial cut and a seed, and the result is never slower than it. Measurement uses the
    target's ``num-cores`` threads; the winner is parity-checked and measured again.

    With ``log_dir`` (e.g. ``"tuning_logs"``) the records join the frozen log
    ``<log_dir>/<target key>/<workload key>/`` (see :mod:`tvm_ext.logs`); an existing log of the
    same workload seeds the search and tightens the initial cut. The log is written
    atomically at the end, and also when the tune is interrupted.
    """
    from tvm_ext.cost import RooflinePolicy
    from tvm_ext.cost.metaschedule import PolicyCostModel, PruneStats, PruningSearch

    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials={trials!r} must be a positive int")
    target = as_target(target)
    cores = target_cores(target) if target.kind.name == "llvm" else 1
    mod = _tvm.as_module(mod)
    func = _tvm.main_func(mod)
    mod = _tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    workload = workload if workload is not None else from_func(func)
    policy = policy if policy is not None else RooflinePolicy()
    machine = host_machine(host_target(num_cores=cores)) if target.kind.name == "llvm" else None
    ms = _tvm.meta_schedule(target.kind.name)
    work_dir = tempfile.mkdtemp(prefix="tvm-ext-tune-")
    folder = log_folder(log_dir, target, func) if log_dir is not None else None
    started = time.perf_counter()

    from ._builder import PersistentBuilder

    stats = PruneStats()
    builder = None  # started below, after the hand schedule, so its workers start meanwhile
    hand = _hand_schedule(workload, target)
    if hand is not None:
        builder = PersistentBuilder(workers=max(cores, 1))
        stats.initial_cut_s = stats.incumbent_s = measure(
            hand, workload, target, repeat=5, min_repeat_ms=20
        ).seconds
    log_best = _copy_log_into(folder, work_dir, func) if folder is not None else math.inf
    database = ms.database.JSONDatabase(work_dir=work_dir)
    if hand is not None:
        _seed_database(ms, database, mod, hand, stats.incumbent_s, target)
    stats.initial_cut_s = stats.incumbent_s = min(stats.incumbent_s, log_best)

    inner = ms.search_strategy.EvolutionarySearch(
        population_size=64, init_measured_ratio=0.2, init_min_unmeasured=16, genetic_num_iters=2
    )
    strategy = (
        PruningSearch(inner, policy, target, machine, workload, stats, audit)
        if getattr(policy, "proves_bounds", False)
        else inner
    )
    logger = _route_logs(work_dir)
    context = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator=_space(ms, target),
        search_strategy=strategy,
        task_name="main",
        rand_state=-1 if seed is None else seed,
        num_threads=cores,
        logger=logger,
    )
    builder = builder if builder is not None else PersistentBuilder(workers=max(cores, 1))
    own_runner = runner is None
    if own_runner:
        runner = ms.runner.LocalRunner(
            initializer=functools.partial(_tvm.set_runner_threads, cores)
        )
    callbacks = ms.measure_callback.MeasureCallback.create("default")
    from ._progress import ProgressCallback

    bar = ProgressCallback(
        trials, workload.flops if workload else None, stats, started, enabled=progress
    )
    log.info(
        "tune: %.2f s to the search start (hand schedule measured: %s)",
        time.perf_counter() - started,
        hand is not None,
    )
    try:
        ms.tune.tune_tasks(
            tasks=[context],
            task_weights=[1.0],
            work_dir=work_dir,
            max_trials_global=trials,
            num_trials_per_iter=batch,
            builder=builder,
            runner=runner,
            database=database,
            cost_model=PolicyCostModel(policy, target, machine, workload),
            measure_callbacks=list(callbacks) + [bar],
            task_scheduler="round-robin",
        )
    except KeyboardInterrupt:
        if folder is not None:  # keep every record measured so far; parity not yet checked
            _save_log(folder, work_dir, func, target, cores, policy, stats, workload, None)
            log.warning("interrupted: %d records kept in %s", stats.measured, folder)
        raise
    finally:
        bar.close()
        builder.shutdown()
        if own_runner:
            runner.pool.shutdown()

    best, best_s = _best(ms, database, mod, target)
    if best is None:
        raise TvmExtError(
            f"tuning {workload.key if workload else 'the kernel'} measured no "
            f"valid candidate in {trials} trials; see the logs in {work_dir}"
        )
    source = (
        "hand schedule" if hand is not None and str(best.trace) == str(hand.trace) else "search"
    )
    try:
        result = measure(best, workload, target, reference=None if workload else func)
    except ParityError:
        log.error("the best candidate failed parity; logs in %s", work_dir)
        raise
    from tvm_ext.cost import evaluate

    binding = evaluate(policy, best, target, machine=machine, workload=workload).binding
    if folder is not None:
        _save_log(folder, work_dir, func, target, cores, policy, stats, workload, result, binding)
    summary = stats.as_dict() | {
        "seconds": time.perf_counter() - started,
        "hand_s": stats.initial_cut_s if hand is not None else None,
        "first_measured_s": bar.first_measured_s,
        "batches": list(stats.batches),
    }
    return TuneResult(
        best.mod,
        result,
        str(best.trace),
        MappingProxyType(summary),
        binding,
        source,
        work_dir,
        str(folder) if folder is not None else None,
    )
