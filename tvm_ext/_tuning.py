"""The parts of ``tune()``: the CPU design space, log routing, seeding, frozen-log I/O."""

from __future__ import annotations

import logging
import math
import os

from . import _tvm
from .errors import ScheduleNotApplicable
from .kernels import Workload

log = logging.getLogger("tvm_ext.tune")


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


def _close_log_handlers() -> None:
    """Detach and close the file handlers of the last tune (before its folder is removed)."""
    root = logging.getLogger("tvm.s_tir.meta_schedule")
    for handler in _LOG_HANDLERS:
        root.removeHandler(handler)
        handler.close()
    _LOG_HANDLERS.clear()


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
    chose_hand: bool = False,
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
    merge_into_log(folder, pathlib.Path(work_dir), manifest, best_is_first_new=chose_hand)


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


def run_task(ms, context, work_dir, trials, batch, builder, runner, database, cost_model,
             callbacks=()) -> None:  # fmt: skip
    """MetaSchedule's task loop over one tuning context, with its default measure callbacks
    (database, logging) plus ``callbacks``; notebook tables suppressed."""
    with _tvm.no_notebook_tables():
        ms.tune.tune_tasks(
            tasks=[context],
            task_weights=[1.0],
            work_dir=work_dir,
            max_trials_global=trials,
            num_trials_per_iter=batch,
            builder=builder,
            runner=runner,
            database=database,
            cost_model=cost_model,
            measure_callbacks=list(ms.measure_callback.MeasureCallback.create("default"))
            + list(callbacks),
            task_scheduler="round-robin",
        )


def metaschedule_search(
    func,
    target,
    work_dir: str,
    *,
    trials: int,
    batch: int = 16,
    seed: int | None = None,
    cost_model=None,
    population: int = 256,
    callbacks=(),
    build_timeout_s: float = 30.0,
):
    """Plain MetaSchedule (evolutionary search ranked by ``cost_model``, default its own
    online XGB model) over :func:`_space`, measured with the target's cores; returns the
    JSON database in ``work_dir``. No hand seed, no cut: the stock search, with our
    persistent builder (it changes build start-up cost, not what is searched)."""
    import functools

    from ._builder import PersistentBuilder
    from .target import target_cores

    ms = _tvm.meta_schedule(target.kind.name)
    cores = target_cores(target) if target.kind.name == "llvm" else 1
    mod = _tvm.IRModule(
        {"main": _tvm.main_func(_tvm.as_module(func)).with_attr("global_symbol", "main")}
    )
    if cost_model is None:
        cost_model = ms.cost_model.XGBModel(num_tuning_cores=max(cores, 1))
    database = ms.database.JSONDatabase(work_dir=work_dir)
    context = ms.TuneContext(
        mod=mod,
        target=target,
        space_generator=_space(ms, target),
        search_strategy=ms.search_strategy.EvolutionarySearch(population_size=population),
        task_name="main",
        rand_state=-1 if seed is None else seed,
        num_threads=cores,
        logger=_route_logs(work_dir),
    )
    # 30 s is stock MetaSchedule's LocalBuilder timeout: a candidate LLVM takes longer to
    # compile (a huge unrolled loop) is a failed build, as in a stock tune.
    builder = PersistentBuilder(workers=max(cores, 1), timeout_s=build_timeout_s)
    runner = ms.runner.LocalRunner(initializer=functools.partial(_tvm.set_runner_threads, cores))
    try:
        run_task(ms, context, work_dir, trials, batch, builder, runner, database, cost_model,
                 callbacks)  # fmt: skip
    finally:
        builder.shutdown()
        runner.pool.shutdown()
    return database
