"""Stock MetaSchedule's own model tuning (``tune_relax``), on the module ``tvm_ext.compile``
lowers: the arm our model tunes are compared with."""

from __future__ import annotations

import dataclasses
import functools
import time

from tvm_ext.base import tvm_api
from tvm_ext.model_pipeline.compile import (
    ModelSource,
    bind_and_lower,
    build_compiled,
)
from tvm_ext.model_pipeline.compiled import Compiled
from tvm_ext.model_pipeline.repacks import fold_prepacks


@dataclasses.dataclass(frozen=True, eq=False)
class StockModelTune:
    """Stock ``tune_relax`` on a model: its build (parity checked), time and coverage."""

    compiled: Compiled
    seconds: float  # tuning wall time (extraction, search; not the final build)
    trials: int
    tasks: int
    tasks_tuned: int  # tasks stock measured at least one candidate of (the rest run naive)


def tune_model_stock(model, target, work_dir: str, *, trials: int, batch: int = 16,
                     seed: int | None = None,
                     build_timeout_s: float = 120.0) -> StockModelTune:  # fmt: skip
    """MetaSchedule's own model tuning on the module ``tvm_ext.compile`` lowers (the same
    tasks ours tunes): ``ms.relax_integration.tune_relax`` with its gradient task scheduler,
    XGB model, evolutionary search and stock rules, ``trials`` in all, ``batch`` per
    iteration (its default 64 hands a small budget to the first tasks only), a runner on the
    target's cores and ``build_timeout_s`` (stock's 30 s kills builds while fresh workers
    import every tensor intrinsic). The tuned schedules are applied with
    ``MetaScheduleApplyDatabase`` (a task stock never measured keeps its unscheduled loops),
    the weight repacking folded, and the build parity-checked against the model's reference."""
    started = time.perf_counter()
    ms, relax = tvm_api.ms, tvm_api.relax
    cores = int(target.attrs["num-cores"])
    source = ModelSource.of(model, None, None, None)
    lowered = bind_and_lower(source, target)
    tasks = ms.relax_integration.extract_tasks(lowered, target)
    tvm_api.stock_intrinsics(target.kind.name)  # its default rules name them
    database = ms.relax_integration.tune_relax(
        lowered,
        None,
        target,
        work_dir,
        max_trials_global=trials,
        num_trials_per_iter=batch,
        seed=seed,
        builder=ms.builder.LocalBuilder(timeout_sec=build_timeout_s),
        runner=ms.runner.LocalRunner(
            initializer=functools.partial(tvm_api.set_runner_threads, cores)
        ),
    )
    with target, database, tvm_api.transform.PassContext(opt_level=3):
        applied = relax.transform.MetaScheduleApplyDatabase(enable_warning=False)(lowered)
    seconds = time.perf_counter() - started
    mod = fold_prepacks(applied, source.entry)
    compiled = build_compiled(source, "stock", target, mod, (), None, time.perf_counter())
    return StockModelTune(compiled, seconds, trials, len(tasks), _tuned(database, tasks))


def _tuned(database, tasks) -> int:
    """How many tasks stock measured at least one candidate of."""
    tuned = 0
    for task in tasks:
        if database.has_workload(task.dispatched[0]):
            workload = database.commit_workload(task.dispatched[0])
            tuned += bool(database.get_top_k(workload, 1))
    return tuned
