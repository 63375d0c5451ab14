"""``tune(mod, target)``: MetaSchedule with a cost policy, an admissible cut, a hand-schedule
seed, and the three numbers for the winner."""

from __future__ import annotations

import functools
import logging
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from . import _tvm
from ._callable_module import make_callable
from ._tuning import (
    _best,
    _close_log_handlers,
    _copy_log_into,
    _hand_schedule,
    _route_logs,
    _save_log,
    _seed_database,
    _space,
    run_task,
)
from .errors import ParityError, TvmExtError
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
    work_dir: str | None  # MetaSchedule's working directory, when kept (logs in <work_dir>/logs)
    log_folder: str | None  # the frozen log this tune added its records to, if log_dir was given


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
    hand_schedule: bool = True,
    work_dir=None,
) -> TuneResult:
    """Tune a PrimFunc, single-function IRModule or suite Workload for ``target`` (default the
    host CPU).

    The policy (default :class:`~tvm_ext.cost.RooflinePolicy`) ranks candidates. A proven lower
    bound drops every candidate that cannot beat the best time measured so far before it is
    built: the policy's own bound when it proves one, else the roofline's (a learned or
    service policy ranks, the roofline still prunes). The library's hand schedule, when one
    exists (and ``hand_schedule`` is left True), is measured first: it is the initial cut and
    a seed, and the result is never slower than it. Measurement uses the
    target's ``num-cores`` threads; the winner is parity-checked and measured again.

    With ``log_dir`` (e.g. ``"tuning_logs"``) the records join the frozen log
    ``<log_dir>/<target key>/<workload key>/`` (see :mod:`tvm_ext.logs`); an existing log of the
    same workload seeds the search and tightens the initial cut. The log is written
    atomically at the end, and also when the tune is interrupted.

    MetaSchedule works in ``work_dir`` (its database and ``logs/meta_schedule.log``); a given
    ``work_dir`` is kept. Without one, a temporary folder is used and removed when the tune
    succeeds (kept, and named in the error, when it fails), so tuning leaves no files behind.
    """
    from tvm_ext.cost import RooflinePolicy
    from tvm_ext.cost.metaschedule import (
        LAST_POLICY_ERROR,
        PolicyCostModel,
        PruneStats,
        PruningSearch,
    )

    if not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials={trials!r} must be a positive int")
    target = as_target(target)
    cores = target_cores(target) if target.kind.name == "llvm" else 1
    if isinstance(mod, Workload):  # a suite workload: its function, and it is the reference
        workload = mod if workload is None else workload
        mod = mod.func
    mod = _tvm.as_module(mod)
    func = _tvm.main_func(mod)
    mod = _tvm.IRModule({"main": func.with_attr("global_symbol", "main")})
    workload = workload if workload is not None else from_func(func)
    policy = policy if policy is not None else RooflinePolicy()
    bound_policy = policy if getattr(policy, "proves_bounds", False) else RooflinePolicy()
    machine = host_machine(host_target(num_cores=cores)) if target.kind.name == "llvm" else None
    ms = _tvm.meta_schedule(target.kind.name)
    keep_work_dir = work_dir is not None
    if keep_work_dir:
        work_dir = str(work_dir)
        os.makedirs(work_dir, exist_ok=True)
    else:
        work_dir = tempfile.mkdtemp(prefix="tvm-ext-tune-")
    folder = log_folder(log_dir, target, func) if log_dir is not None else None
    started = time.perf_counter()

    from ._builder import PersistentBuilder

    stats = PruneStats()
    # Build workers start first and finish importing TVM before anything is timed: their
    # start-up on the same cores would make the hand schedule (the initial cut) look slow.
    builder = PersistentBuilder(workers=max(cores, 1))
    hand = _hand_schedule(workload, target) if hand_schedule else None
    if hand is not None:
        builder.wait_ready()
        stats.initial_cut_s = stats.incumbent_s = measure(
            hand, workload, target, repeat=5, min_repeat_ms=20
        ).seconds
    hand_measured_s = time.perf_counter() - started if hand is not None else None
    log_best = _copy_log_into(folder, work_dir, func) if folder is not None else math.inf
    database = ms.database.JSONDatabase(work_dir=work_dir)
    if hand is not None:
        _seed_database(ms, database, mod, hand, stats.incumbent_s, target)
    stats.initial_cut_s = stats.incumbent_s = min(stats.incumbent_s, log_best)

    inner = ms.search_strategy.EvolutionarySearch(
        population_size=64, init_measured_ratio=0.2, init_min_unmeasured=16, genetic_num_iters=2
    )
    # The ranking policy feeds the cost model; the bound (the policy's own, or the roofline
    # behind a policy that proves none) decides what is dropped before build.
    strategy = PruningSearch(
        inner,
        bound_policy,
        target,
        machine,
        workload,
        stats,
        audit,
        prune=bool(getattr(bound_policy, "proves_bounds", False)),
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
    own_runner = runner is None
    if own_runner:
        runner = ms.runner.LocalRunner(
            initializer=functools.partial(_tvm.set_runner_threads, cores)
        )
    from ._progress import ProgressCallback

    bar = ProgressCallback(
        trials, workload.flops if workload else None, stats, started, enabled=progress
    )
    log.info(
        "tune: %.2f s to the search start (hand schedule measured: %s)",
        time.perf_counter() - started,
        hand is not None,
    )
    LAST_POLICY_ERROR.clear()
    try:
        cost_model = PolicyCostModel(policy, target, machine, workload)
        run_task(ms, context, work_dir, trials, batch, builder, runner, database, cost_model, [bar])
    except KeyboardInterrupt:
        if folder is not None:  # keep every record measured so far; parity not yet checked
            _save_log(folder, work_dir, func, target, cores, policy, stats, workload, None)
            log.warning("interrupted: %d records kept in %s", stats.measured, folder)
        raise
    except RuntimeError as err:
        policy_error = LAST_POLICY_ERROR[0] if LAST_POLICY_ERROR else None
        if policy_error is None or str(policy_error) not in str(err):
            raise
        if folder is not None:  # the records measured before the policy failed are kept
            _save_log(folder, work_dir, func, target, cores, policy, stats, workload, None)
        raise policy_error from err
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
    if source == "search" and hand is not None:
        # Records were timed at different moments on a shared machine: time the winner and
        # the hand schedule side by side, so the result is never slower than the hand one.
        hand_m = measure(hand, workload, target)
        if hand_m.seconds < result.seconds:
            best, result, source = hand, hand_m, "hand schedule"
    from tvm_ext.cost import evaluate

    cost = evaluate(bound_policy, best, target, machine=machine, workload=workload)
    binding = cost.binding
    if folder is not None:
        _save_log(
            folder,
            work_dir,
            func,
            target,
            cores,
            policy,
            stats,
            workload,
            result,
            binding,
            chose_hand=source == "hand schedule",
        )
    summary = stats.as_dict() | {
        "seconds": time.perf_counter() - started,
        "hand_s": stats.initial_cut_s if hand is not None else None,
        "first_measured_s": bar.first_measured_s,
        "hand_measured_s": hand_measured_s,
        "batches": list(stats.batches),
        # How close the winner came to its proven bound (1.0 = at the bound; None: no bound).
        "envelope_fraction": cost.envelope_fraction(result.seconds),
    }
    _close_log_handlers()
    if not keep_work_dir:
        shutil.rmtree(work_dir, ignore_errors=True)
    return TuneResult(
        best.mod,
        result,
        str(best.trace),
        MappingProxyType(summary),
        binding,
        source,
        work_dir if keep_work_dir else None,
        str(folder) if folder is not None else None,
    )


make_callable(__name__, "tune")  # tvm_ext.tune(mod, target) calls tune()
