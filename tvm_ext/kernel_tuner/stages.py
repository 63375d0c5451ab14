"""The stages of a tune, shared by one kernel and by each task of a model.

``prepare`` (what to tune, for which target) -> ``open_session`` (work dir, builder, runner,
MetaSchedule's logs; closed in ``finally``; both in :mod:`tvm_ext.kernel_tuner.session`) -> ``seed``
(the hand schedule measured first, an earlier log copied in) -> ``search`` (MetaSchedule's
task loop with a ranking policy and the admissible cut) -> ``select`` (the winner,
parity-checked, timed beside the hand schedule) -> ``persist`` (records and manifest into the
frozen log).
"""

from __future__ import annotations

import logging
import math
import pathlib
import shutil
import time
from dataclasses import dataclass
from typing import Literal

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import checked_int
from tvm_ext.base.errors import (
    CorruptLog,
    DeviceError,
    ParityError,
    PolicyError,
    ScheduleNotApplicable,
    TuneError,
)
from tvm_ext.cost import evaluate
from tvm_ext.kernel_tuner.cost_models import PolicyCostModel
from tvm_ext.kernel_tuner.progress import ProgressCallback
from tvm_ext.kernel_tuner.pruning import PruningSearch
from tvm_ext.kernel_tuner.replayer import apply_logged_trace, logged_trace
from tvm_ext.kernel_tuner.session import Session, Task
from tvm_ext.kernel_tuner.space import design_space
from tvm_ext.measurement.measure import Measurement, measure
from tvm_ext.records.logs import (
    RECORDS_FILE,
    WORKLOADS_FILE,
    apply_trace,
    make_manifest,
    merge_into_log,
    read_manifest,
    structural_hash,
)
from tvm_ext.schedules import schedule
from tvm_ext.schedules.common import search_seed

log = logging.getLogger("tvm_ext.tune")
Source = Literal["search", "hand schedule"]


@dataclass
class Seed:
    """Where the search starts: the hand schedule (measured first) and an earlier log."""

    database: object  # MetaSchedule's JSONDatabase in the work dir
    hand: "tvm_api.Schedule | None"
    hand_s: float  # the hand schedule's time (inf without one)
    log_best_s: float  # the earlier log's chosen record, re-measured now (inf without one)
    ready_after_s: float | None  # seconds from the session start to the hand measurement

    @property
    def initial_cut_s(self) -> float:
        return min(self.hand_s, self.log_best_s)


def hand_schedule(task: Task):
    """The library's schedule for the task: a suite workload's hand schedule, else (any other
    function, such as a task of a model) the first IR rule's that takes it; None when none
    applies.

    A rule repacks a model's weights (``layout_free_buffers``) itself; MetaSchedule re-applies
    its own weight rewriting (the RewriteLayout post-processor) to every record it starts
    from, and that fails on a schedule that already repacked them (``args.size() ==
    initial_indices_orig.size()``, TVM 0.27). So the rule schedules the function as if no
    weight were marked, and that schedule is replayed on the function: the search then
    repacks the weights of what it finds, as it does for its own candidates.
    """

    try:
        with search_seed():  # no schedule the search's post-processors fail on
            if task.workload is not None:
                return schedule(task.workload, task.target)
            if task.func.attrs is None or "layout_free_buffers" not in task.func.attrs:
                return schedule(task.func, task.target)
            plain = schedule(task.func.without_attr("layout_free_buffers"), task.target)
        return apply_trace(task.func, plain.trace)
    except ScheduleNotApplicable as why:
        log.info("no hand schedule to seed the search: %s", why)
        return None


def seed(task: Task, session: Session, folder=None, use_hand: bool = True) -> Seed:
    """Measure the hand schedule, copy an earlier log of the task in, open the database and
    store the hand schedule in it as a measured record (the search starts from both)."""
    hand = hand_schedule(task) if use_hand else None
    hand_s, ready = math.inf, None
    if hand is not None:
        session.builder.wait_ready()
        hand_s = measure_on_task(task, hand, repeat=5, min_repeat_ms=20).seconds
        ready = time.perf_counter() - session.started
    copied = bool(folder) and copy_log_into(folder, session.work_dir, task.func)
    if copied and hand is None:
        session.builder.wait_ready()
    log_best = verified_log_best(task, folder) if copied else math.inf
    database = tvm_api.ms.database.JSONDatabase(work_dir=session.work_dir)
    if hand is not None:
        ms = tvm_api.ms
        record = ms.database.TuningRecord(
            hand.trace,
            database.commit_workload(task.mod),
            [hand_s],
            task.target,
            ms.arg_info.ArgInfo.from_prim_func(task.func),
        )
        database.commit_tuning_record(record)
    return Seed(database, hand, hand_s, log_best, ready)


def measure_on_task(task: Task, sch, **options) -> Measurement:
    """:func:`~tvm_ext.measurement.measure.measure` where the task measures (this host or one of its
    devices), against the task's machine model, named as the user named the kernel. A device
    that cannot be reached is a :class:`TuneError`."""
    reference = None if task.workload else task.func
    try:
        return measure(sch, task.workload, task.target, reference=reference,
                       machine=task.machine, tracker=task.tracker, label=task.label,
                       weights_repacked_once=task.weights_repacked_once,
                       **options)  # fmt: skip
    except DeviceError as err:
        raise TuneError(f"tuning {task.label}: {err}", first_failure=str(err)) from err


def copy_log_into(folder, work_dir: str, func) -> bool:
    """Start from an existing log of this workload: its records seed the search. False when
    there is no usable log."""
    folder = pathlib.Path(folder)
    if not (folder / "manifest.json").exists():
        return False
    manifest = read_manifest(folder)
    if manifest.get("structural_hash") != structural_hash(func):
        log.warning("ignoring %s: it was tuned for a different workload", folder)
        return False
    for name in (WORKLOADS_FILE, RECORDS_FILE):
        shutil.copyfile(folder / name, pathlib.Path(work_dir) / name)
    return True


def verified_log_best(task: Task, folder) -> float:
    """The initial cut an earlier log gives: the record a replay would apply, parity-checked
    and timed now, on this host. Never the manifest's ``best_seconds``: a time from another
    day or host, a lucky run kept as the all-time minimum, or one never checked (a tune
    stopped early stores its incumbent with parity unknown) would cut this tune's candidates
    with a time nothing here achieves. inf (no cut) when the record fails to apply, to build
    or to match the reference (a warning says which)."""
    folder = pathlib.Path(folder)
    try:
        sch = apply_logged_trace(task.func, logged_trace(folder, read_manifest(folder)))
        return measure_on_task(task, sch, repeat=5, min_repeat_ms=20).seconds
    except (ParityError, TuneError, CorruptLog, RuntimeError, ValueError, TypeError) as err:
        log.warning("the best record of %s gives no initial cut: %s", folder,
                    str(err).splitlines()[0] if str(err) else type(err).__name__)  # fmt: skip
        return math.inf


def run_search(task: Task, session: Session, database, *, strategy, cost_model, trials: int,
               batch: int, rng_seed: int | None, callbacks=()) -> None:  # fmt: skip
    """MetaSchedule's task loop over one tuning context, with its default measure callbacks
    (database, logging) plus ``callbacks``; notebook tables suppressed."""
    ms = tvm_api.meta_schedule(task.target.kind.name)
    context = ms.TuneContext(
        mod=task.mod,
        target=task.target,
        space_generator=design_space(task.target),
        search_strategy=strategy,
        task_name=task.name,
        rand_state=-1 if rng_seed is None else rng_seed,
        num_threads=task.cores,
        logger=session.logger,
    )
    with tvm_api.no_notebook_tables():
        ms.tune.tune_tasks(
            tasks=[context],
            task_weights=[1.0],
            work_dir=session.work_dir,
            max_trials_global=trials,
            num_trials_per_iter=batch,
            builder=session.builder,
            runner=session.runner,
            database=database,
            cost_model=cost_model,
            measure_callbacks=list(ms.measure_callback.MeasureCallback.create("default"))
            + list(callbacks),
            task_scheduler="round-robin",
        )


def search(task: Task, session: Session, seeded: Seed, stats, *, policy, bound_policy,
           trials: int, batch: int = 16, rng_seed: int | None = None, audit: bool = False,
           progress: bool = True) -> None:  # fmt: skip
    """Evolutionary search ranked by ``policy``, with every candidate whose proven bound
    (``bound_policy``'s) is at least the best time so far dropped before it is built.
    A policy's failure is re-raised as the :class:`PolicyError` it was."""

    stats.initial_cut_s = stats.incumbent_s = seeded.initial_cut_s
    inner = tvm_api.ms.search_strategy.EvolutionarySearch(
        population_size=64, init_measured_ratio=0.2, init_min_unmeasured=16, genetic_num_iters=2
    )
    args = (task.target, task.machine, task.workload)
    strategy = PruningSearch(inner, bound_policy, *args, stats=stats, audit=audit)
    flops = task.workload.flops if task.workload else None
    bar = ProgressCallback(trials, flops, stats, session.started, enabled=progress)
    attach = getattr(session.builder, "attach", None)  # stage 2 needs our builder
    if attach is not None:
        attach(strategy.post_build)
    try:
        run_search(task, session, seeded.database, strategy=strategy, trials=trials, batch=batch,
                   cost_model=PolicyCostModel(policy, *args, stats=stats), rng_seed=rng_seed,
                   callbacks=[bar])  # fmt: skip
    except RuntimeError as err:  # the FFI turns a callback's PolicyError into RuntimeError
        if stats.policy_error is None:
            raise
        raise stats.policy_error from err
    finally:
        bar.close()
        if attach is not None:
            session.builder.detach(strategy.post_build)
    check_measured(task, stats)


def check_measured(task: Task, stats) -> None:
    """Raise a :class:`TuneError` when candidates were sent to be measured and none was: the
    count and the first failure's message (connection refused, no server for the key, a
    build error, a timeout) say why."""
    if stats.measured == 0 and stats.failed > 0:
        raise TuneError(
            f"tuning {task.label} measured nothing: {_all_candidates(stats.failed)} failed to "
            f"build or run (on {task.where}); the first failure: {stats.first_failure}",
            failed=stats.failed,
            first_failure=stats.first_failure,
        )


def _all_candidates(n: int) -> str:
    return "the one candidate" if n == 1 else f"all {n} candidates"


@dataclass(frozen=True)
class Selection:
    """The winner: its schedule, measurement, where it came from and its bound."""

    sch: "tvm_api.Schedule"
    measurement: Measurement
    source: Source
    cost: object  # the bound policy's Cost of the winner


def best_in(task: Task, database, k: int = 1) -> list:
    """The ``k`` fastest records of ``database`` for the task, fastest first."""
    return list(database.get_top_k(database.commit_workload(task.mod), k))


# When the fastest record fails parity, the next fastest are tried, up to this many in all.
PARITY_TRIES = 4


def select(task: Task, session: Session, seeded: Seed, bound_policy,
           failed: list | None = None) -> Selection:  # fmt: skip
    """Parity-check the best record and measure it; when it is not the hand schedule, time
    both side by side (records were timed at different moments on a shared machine), so the
    result is never slower than the hand schedule.

    A record that fails parity (a wrong kernel MetaSchedule's runner timed without checking
    its output) is appended to ``failed`` (its trace, as the log holds it, for
    :func:`persist` to mark it failed) and the next fastest is tried, then the hand schedule;
    a TuneError when none is left. A hand schedule that fails parity raises ParityError: the
    rules' bug, not the search's."""
    failed = [] if failed is None else failed
    records = best_in(task, seeded.database, PARITY_TRIES)
    if not records:
        raise TuneError(
            f"tuning {task.label} measured no valid candidate; pass work_dir= to keep "
            "MetaSchedule's logs"
        )
    hand = seeded.hand
    best = result = None
    for record in records:
        sch = apply_trace(task.func, record.trace)
        if hand is not None and _same(sch, hand):
            best, result = hand, measure_on_task(task, hand)
            break
        try:
            best, result = sch, measure_on_task(task, sch)
            break
        except ParityError as err:
            log.error("a candidate of %s failed parity (marked failed in the log; the next "
                      "fastest is tried): %s", task.label, err)  # fmt: skip
            failed.append(record.as_json()[0])
    if best is None and hand is not None:
        best, result = hand, measure_on_task(task, hand)
    if best is None:
        raise TuneError(
            f"tuning {task.label}: each of its {len(records)} fastest candidates failed parity"
        )
    source: Source = "hand schedule" if best is hand else "search"
    if source == "search" and hand is not None:
        hand_m = measure_on_task(task, hand)
        if hand_m.seconds < result.seconds:
            best, result, source = hand, hand_m, "hand schedule"
    cost = evaluate(bound_policy, best, task.target, machine=task.machine, workload=task.workload)
    return Selection(best, result, source, cost)


def _same(a, b) -> bool:
    return str(a.trace) == str(b.trace)


def persist(folder, task: Task, session: Session, policy, stats, chosen: Selection | None,
            failed: list = ()):  # fmt: skip
    """Add the session's records to the frozen log ``folder`` with a manifest; ``chosen`` is
    None when the tune stopped early (records kept, parity not yet checked); the records of
    the traces in ``failed`` (that failed parity in :func:`select`) are kept as failed runs."""
    result = chosen.measurement if chosen is not None else None
    flops = task.workload.flops if task.workload is not None else None
    best = result.seconds if result is not None else stats.incumbent_s
    manifest = make_manifest(
        task.func,
        task.target,
        threads=task.cores,
        policy=type(policy).__name__,
        stats=stats.as_dict(),
        seconds=best,
        gflops=flops / best / 1e9 if flops and math.isfinite(best) else None,
        max_rel_error=result.max_rel_error if result is not None else None,
        workload=task.workload,
        machine=task.machine,
        measured_on=task.where,
    )
    manifest["binding"] = chosen.cost.binding if chosen is not None else None
    manifest["weights_repacked_once"] = task.weights_repacked_once  # how its times were taken
    if result is None:
        manifest["parity"] = {"max_rel_error": None, "ok": None}  # stopped early: replay checks
    chose_hand = chosen is not None and chosen.source == "hand schedule"
    merge_into_log(folder, pathlib.Path(session.work_dir), manifest, best_is_first_new=chose_hand,
                   failed=failed)  # fmt: skip


def checked_trials(trials) -> int:
    return checked_int("trials", trials)


__all__ = [
    "PolicyError",
    "TuneError",
    "Seed",
    "Selection",
    "persist",
    "run_search",
    "search",
    "seed",
    "select",
]
