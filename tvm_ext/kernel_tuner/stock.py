"""Stock MetaSchedule over our design space, for one kernel: the arm our searches are compared
with (the stock model tune is :mod:`tvm_ext.model_pipeline.stock`)."""

from __future__ import annotations

from tvm_ext.base import tvm_api
from tvm_ext.kernel_tuner.session import open_session, prepare
from tvm_ext.kernel_tuner.stages import run_search


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
    online XGB model) over our design space, measured with the target's cores; returns the
    JSON database in ``work_dir`` (kept). No hand seed, no cut: the stock search, with our
    persistent builder (it changes build start-up cost, not what is searched). 30 s is stock
    MetaSchedule's build timeout: a candidate LLVM takes longer to compile is a failed build,
    as in a stock tune."""
    task = prepare(func, target, with_machine=False)
    ms = tvm_api.ms
    if cost_model is None:
        cost_model = ms.cost_model.XGBModel(num_tuning_cores=max(task.cores, 1))
    with open_session(task, work_dir, build_timeout_s=build_timeout_s) as session:
        database = ms.database.JSONDatabase(work_dir=session.work_dir)
        strategy = ms.search_strategy.EvolutionarySearch(population_size=population)
        run_search(task, session, database, strategy=strategy, cost_model=cost_model,
                   trials=trials, batch=batch, rng_seed=seed, callbacks=callbacks)  # fmt: skip
    return database
