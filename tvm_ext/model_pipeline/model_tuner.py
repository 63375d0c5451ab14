"""``tune(model)``: every task of a model scheduled by its IR rule, then the trial budget spent
batch by batch where the proven bound says time can still be won.

The stages: lower the model as :func:`~tvm_ext.model_pipeline.compile.compile` does -> extract its
tasks (MetaSchedule's extraction: deduplicated by structure, weighted by call count) -> seed
each with its rule's schedule, measured, and its proven floor (:func:`tvm_ext.cost.floor_s`)
-> loop: :func:`~tvm_ext.model_pipeline.task_scheduler.next_task` picks the task with the largest
bound-limited gain, the kernel tuner gives it one batch, continuing from the task's log; a task
within ``retire_factor`` of its floor is retired -> apply each task's best, fold the weight
repacking, build, check parity (against the model's reference and the untuned build), time.
:func:`~tvm_ext.model_pipeline.model_replay.replay_model` does the last stage alone from the logs.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import shutil
import tempfile
import time
from typing import Sequence

import numpy as np
from tqdm import tqdm

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import checked_int
from tvm_ext.base.errors import UnsupportedModel
from tvm_ext.kernel_tuner import session as sessions
from tvm_ext.measurement.measure import check_parity
from tvm_ext.model_pipeline import model_tasks
from tvm_ext.model_pipeline.compile import (
    Compiled,
    ModelSource,
    Timing,
    bind_and_lower,
    build_compiled,
    compile_untuned,
    cpu_target,
)
from tvm_ext.model_pipeline.profile import profile
from tvm_ext.model_pipeline.repacks import fold_prepacks
from tvm_ext.model_pipeline.task_scheduler import RETIRE_FACTOR, TaskState, spend
from tvm_ext.records.logs import structural_hash
from tvm_ext.records.model_manifest import write_model_manifest
from tvm_ext.workloads.model_base import Model

log = logging.getLogger("tvm_ext.tune")


def is_model(obj) -> bool:
    """Whether ``tune``/``replay`` should treat ``obj`` as a model: a zoo Model, a Relax
    IRModule, or a module of several PrimFuncs."""
    if isinstance(obj, Model):
        return True
    if not isinstance(obj, tvm_api.IRModule):
        return False
    prims = sum(isinstance(f, tvm_api.PrimFunc) for f in obj.functions.values())
    return model_tasks.has_relax(obj) or prims > 1


@dataclasses.dataclass(frozen=True, eq=False)
class ModelTuneResult:
    """A tuned model: built, parity-checked and timed, with where the trials went.

    ``tasks`` is the per-task table (name, weight, FLOPs, rule, rule time, tuned time, proven
    floor, binding arm, trials, retired, ...); ``history`` one row per batch (task, trials so
    far, the task's best, the end-to-end estimate sum(weight x best), tasks retired).
    ``compiled``/``latency`` are None for a module of PrimFuncs only (nothing to run).
    """

    mod: "tvm_api.IRModule"  # the lowered module with every function's best schedule
    compiled: Compiled | None
    latency: Timing | None
    tasks: object  # pandas DataFrame
    history: object  # pandas DataFrame
    floor_s: float | None  # sum of weight x floor over the tasks: no schedule runs faster
    trials: int  # trials spent (at most the budget)
    seconds: float  # wall time of the whole tune
    log_dir: str | None  # the log root (None: a temporary one, removed)
    manifest: str | None  # the model manifest written there
    # The search's schedules against the rules' alone, end to end, side by side (median of
    # three interleaved rounds: search_s, rules_s, kept); None when the search won no task.
    versus_rules: dict | None = None
    # Audited: every candidate the cut dropped was measured too; ``tasks`` counts each task's
    # violations (a run under its proven bound) and regrets (a dropped one that would have won).
    audit: bool = False
    # The end-to-end estimate the scheduler ended with: sum(weight x best x in_model) plus
    # the model's time outside its kernels, both from a profile of the rules' build before
    # the search (None: no search, or nothing to run).
    model_estimate_s: float | None = None

    @property
    def estimate_error(self) -> float | None:
        """The scheduler's end-to-end estimate over the measured latency, minus 1."""
        if self.latency is None or not self.model_estimate_s:
            return None
        return self.model_estimate_s / self.latency.seconds - 1

    @property
    def floor_ratio(self) -> float | None:
        """End-to-end latency over the proven floor (>= 1; how far the model is above it)."""
        if self.latency is None or not self.floor_s:
            return None
        return self.latency.seconds / self.floor_s

    def trials_by_task(self):
        """Trials each task had after each batch (rows: trials spent so far, columns: tasks
        in table order), for a chart of where the budget went."""
        import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

        running = dict.fromkeys(self.tasks["name"], 0)
        rows, spent = [dict(running)], [0]
        for before, after, task in zip(self.history["trials"], self.history["trials"][1:],
                                       self.history["task"][1:]):  # fmt: skip
            running[task] += int(after - before)
            rows.append(dict(running))
            spent.append(int(after))
        return pd.DataFrame(rows, index=pd.Index(spent, name="trials"))

    @property
    def estimate_s(self) -> float:
        """sum(weight x best time of one call) over the tasks: the kernels' share of a run."""
        return float((self.tasks["tuned_s"] * self.tasks["weight"]).sum())


def tune_model(model, target=None, *, trials: int = 64, log_dir=None, seed: int | None = None,
               batch: int = 16, policy=None, progress: bool = True, machine=None, params=None,
               reference=None, inputs=None, retire_factor: float = RETIRE_FACTOR,
               repeat: int = 10, audit: bool = False) -> ModelTuneResult:  # fmt: skip
    """Tune every task of ``model`` under one budget of ``trials`` (0: the rules alone).

    ``model`` is a zoo Model, a Relax IRModule (``params``, ``reference``, ``inputs`` as for
    :func:`~tvm_ext.model_pipeline.compile.compile`) or a module of PrimFuncs. Each batch of
    ``batch`` trials goes to the task with the largest bound-limited gain; a task within
    ``retire_factor`` of its proven floor gets no more. With ``log_dir`` every task's records
    join ``<log_dir>/<target key>/<workload key>/`` (shared with every model and kernel tune
    of the same function, which start from them) and the model's task list is written to
    ``<log_dir>/<target key>/models/``; without it the logs live in a temporary folder.
    ``audit``: the candidates the cut drops are measured too (they cost their runs), and the
    table, the manifest and :func:`describe` give each task's violations and regrets.
    """
    _check_budget(trials, batch)
    target = cpu_target(target)
    prepared = prepare_model(model, target, params, reference, inputs)
    return tune_prepared(prepared, target, trials=trials, log_dir=log_dir, seed=seed,
                         batch=batch, policy=policy, progress=progress, machine=machine,
                         retire_factor=retire_factor, repeat=repeat, audit=audit)  # fmt: skip


def tune_prepared(prepared: "PreparedModel", target, *, trials: int, log_dir, seed, batch: int,
                  policy, progress: bool, machine, retire_factor: float, repeat: int,
                  audit: bool) -> ModelTuneResult:  # fmt: skip
    """:func:`tune_model` of a model already lowered and its tasks found (``target`` a
    Target, the budget checked)."""
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    started = time.perf_counter()
    root = pathlib.Path(log_dir) if log_dir is not None else None
    scratch = None if root is not None else tempfile.mkdtemp(prefix="tvm-ext-model-logs-")
    try:
        logs = root if root is not None else pathlib.Path(scratch)
        tasks = [model_tasks.start_task(f, target, machine, logs) for f in prepared.found]
        untuned = untuned_outputs(prepared, target) if prepared.source is not None else None
        outside = start = None
        if trials and untuned is not None:
            outside, start = _calibrate(prepared, tasks, target, untuned, repeat)
        start_mods = [t.best_mod for t in tasks]
        start_sources_rules = all(t.source == "rule" for t in tasks)
        # The scheduler weighs and retires each task by its time as the model runs it.
        states = [TaskState(t.name, t.found.weight, t.bound_s, t.best_s * t.in_model)
                  for t in tasks]  # fmt: skip
        history = _search(tasks, states, trials, batch, logs, seed, policy, progress,
                          retire_factor, prepared.key, started, audit, outside)  # fmt: skip
        applied = model_tasks.apply_best(prepared.lowered, tasks)
        unchanged = all(t.best_mod is m for t, m in zip(tasks, start_mods))
        if start is not None and unchanged:  # the search won nothing: the model is built
            compiled, latency = start, start.time(repeat=repeat)
        else:
            compiled, latency = build_model(prepared, applied, target, repeat, untuned)
        versus = None
        if compiled is not None and any(t.source != "rule" for t in tasks):
            # The calibration's build is the rules' model when every task started from its rule.
            rules = start if start is not None and start_sources_rules else None
            applied, compiled, latency, versus = _no_slower_than_rules(
                prepared, tasks, applied, compiled, target, repeat, untuned, rules
            )
        table = model_tasks.table(tasks, [s.retired(retire_factor) for s in states])
        floor = _floor(tasks)
        manifest = None
        if root is not None:
            manifest = _write_manifest(root, target, prepared, table, floor, latency, history,
                                       versus)  # fmt: skip
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)

    sessions.refresh_machine(target, machine)
    spent = sum(t.trials for t in tasks)
    return ModelTuneResult(applied.mod, compiled, latency, table, pd.DataFrame(history), floor,
                           spent, time.perf_counter() - started,
                           str(root) if root is not None else None, manifest,
                           versus, audit,
                           None if outside is None else _estimate(tasks, outside))  # fmt: skip


def _no_slower_than_rules(prepared, tasks, applied, compiled, target, repeat: int, untuned,
                          rules=None):  # fmt: skip
    """The tuned model, or the rules' own when that runs faster end to end.

    Each task's winner was timed alone; inside the model, with other kernels' data in the
    caches and a noisy host, a few percent won per task can be lost (the encoder at 88 trials
    ran 6.11 ms against the rules' 5.83, in separate processes). So both models are built,
    checked and timed here side by side (interleaved rounds, medians): the faster is returned.
    Returns (applied, compiled, latency: the median round, the comparison's figures).
    ``rules``: the rules' model already built (the calibration's), else it is built here.
    """
    searched = [t for t in tasks if t.source != "rule"]
    kept = {t.name: (t.best_mod, t.best_s, t.source, t.binding) for t in searched}
    for t in searched:
        t.back_to_rule()
    rules_applied = model_tasks.apply_best(prepared.lowered, tasks)
    if rules is None:
        rules, _ = build_model(prepared, rules_applied, target, 0, untuned)  # timed below
    rounds = {"search": [], "rules": []}
    for _ in range(3):
        for arm, c in (("search", compiled), ("rules", rules)):
            rounds[arm].append(c.time(repeat=repeat))
    middle = {arm: sorted(ts, key=lambda t: t.seconds)[1] for arm, ts in rounds.items()}
    entry = {"search_s": middle["search"].seconds, "rules_s": middle["rules"].seconds}
    if entry["rules_s"] < entry["search_s"]:
        log.info("%s: the rules' schedules ran faster end to end (%.4g vs %.4g s); kept them",
                 prepared.key, entry["rules_s"], entry["search_s"])  # fmt: skip
        return rules_applied, rules, middle["rules"], entry | {"kept": "rules"}
    for t in searched:
        t.best_mod, t.best_s, t.source, t.binding = kept[t.name]
    return applied, compiled, middle["search"], entry | {"kept": "search"}


def _check_budget(trials, batch) -> None:
    # A model may take no trials (its rules' schedules alone); a kernel tune needs one.
    checked_int("trials", trials, minimum=0, note="0: the rules' schedules alone")
    checked_int("batch", batch)


@dataclasses.dataclass(frozen=True, eq=False)
class PreparedModel:
    source: ModelSource | None  # None: a module of PrimFuncs only
    lowered: "tvm_api.IRModule"
    found: list
    key: str  # the model's name in manifests and progress bars


def prepare_model(model, target, params, reference, inputs) -> PreparedModel:
    """Lower the model as compile does (weights bound and folded, fused, weights marked for
    repacking) and find its tasks."""
    if isinstance(model, tvm_api.IRModule) and not model_tasks.has_relax(model):
        if params is not None or reference is not None or inputs is not None:
            raise ValueError("a module of PrimFuncs has no weights, reference or inputs")
        key = f"prim_funcs-{structural_hash(model)}"
        return PreparedModel(None, model, model_tasks.extract(model, target), key)
    source = ModelSource.of(model, params, reference, inputs)
    symbolic = tvm_api.symbolic_bounds(source.mod[source.entry])
    if symbolic:
        # MetaSchedule tunes static shapes only (upstream #11747): say so before any work.
        raise UnsupportedModel(
            f"{source.name}: symbolic dimensions {sorted(symbolic)}: tune it at the lengths "
            "it will run at (tune(model, lengths=[...])); compile() takes it as it is"
        )
    lowered = bind_and_lower(source, target)
    key = model_key(model, source, lowered)
    return PreparedModel(source, lowered, model_tasks.extract(lowered, target), key)


def model_key(model, source: ModelSource, lowered) -> str:
    """The model's name in manifests and progress bars: a zoo model's name, size and batch,
    else its entry and the structural hash of its lowered module."""
    if isinstance(model, Model):
        return f"{model.name}-{model.size}-b{model.batch}"
    return f"{source.entry}-{structural_hash(lowered)}"


def _estimate(tasks, outside: float | None = None) -> float:
    """sum(weight x best) over the tasks; calibrated (``outside`` given): each best time as
    the model runs it, plus the model's time outside its kernels."""
    if outside is None:
        return sum(t.found.weight * t.best_s for t in tasks)
    return sum(t.found.weight * t.best_s * t.in_model for t in tasks) + outside


def _calibrate(prepared, tasks, target, untuned, repeat: int):
    """Build the model with each task's incumbent (its rule's schedule, or a log's), profile
    it and set each task's ``in_model`` factor (one call's time in the model over its time
    alone); returns (the time a run spends outside the kernels, the model built).

    Measured on the decoder block (Zen 4, rules): kernels ran 1.17-1.30x slower in the model
    than alone, small ones up to 3.2x, and 13 % of the run was outside them: the uncalibrated
    estimate read 1.39x low. With 32 trials the calibrated estimate ended at -0 % (decoder)
    and -7 % (mobilenet_v2) of the measured latency, the uncalibrated sum at -16 % and -18 %.
    The estimate of the incumbents is then the measured run, by construction; how far the
    factors hold for the search's schedules, :attr:`ModelTuneResult.estimate_error` says."""
    applied = model_tasks.apply_best(prepared.lowered, tasks)
    compiled, timing = build_model(prepared, applied, target, max(repeat, 3), untuned)
    prof = profile(compiled, min_seconds=0.5)
    # The run is timed as the tune's end times the tuned model (one timer for the estimate
    # and the figure it is compared with), and the instrumented calls' times, which add the
    # profiler's per-call cost (a Python callback, ~1 us: a small model's calls summed to
    # 1.2x its plain run), are scaled down to it.
    latency = timing.seconds
    scale = min(1.0, latency / prof.timed_s) if prof.timed_s > 0 else 1.0
    per_call = prof.per_call()
    for t in tasks:
        times = [per_call[g] for g in t.found.globals if g in per_call]
        if times and t.best_s > 0:
            t.in_model = scale * sum(times) / len(times) / t.best_s
    return max(latency - scale * prof.kernels_s, 0.0), compiled


def _search(tasks, states, trials, batch, logs, rng_seed, policy, progress, retire_factor, key,
            started, audit: bool = False, outside: float | None = None) -> list[dict]:  # fmt: skip
    """The batch loop (:func:`~tvm_ext.model_pipeline.task_scheduler.spend`); returns one history
    row for the seeds and one per batch."""
    history = [_row(0, None, 0, tasks, states, retire_factor, outside=outside) | _since(started)]
    if not trials or not tasks:
        return history
    bar = tqdm(total=trials, desc=f"tuning {key}", unit="trial", disable=not progress or not trials,
               dynamic_ncols=True)  # fmt: skip

    def run_batch(i: int, n: int) -> float | None:
        step = len(history)
        batch_seed = None if rng_seed is None else rng_seed + step
        best = model_tasks.search_batch(tasks[i], n, logs, rng_seed=batch_seed, policy=policy,
                                        shared=shared, audit=audit)  # fmt: skip
        spent = history[-1]["trials"] + n
        history.append(_row(step, tasks[i].name, spent, tasks, states, retire_factor, i,
                            tasks[i].best_s * tasks[i].in_model, outside)
                       | _since(started))  # fmt: skip
        bar.set_postfix({"task": tasks[i].name, "end-to-end est ms":
                         f"{_estimate(tasks, outside) * 1e3:.3f}",
                         "retired": f"{history[-1]['retired']}/{len(tasks)}"})  # fmt: skip
        bar.update(n)
        return None if best is None else min(best, tasks[i].best_s) * tasks[i].in_model

    try:
        with model_tasks.batch_session(tasks) as shared:
            spend(states, trials, batch, run_batch, retire_factor)
    finally:
        bar.close()
    if len(history) - 1 == 0 and trials:
        log.info("%s: every task is within %.2fx of its floor", key, retire_factor)
    return history


def _row(step, name, spent, tasks, states, retire_factor, index=None, best=None,
         outside=None) -> dict:  # fmt: skip
    """One history row; ``index``/``best``: the batch's task and its new incumbent (its
    state is updated only after the batch returns)."""
    incumbents = [s.incumbent_s for s in states]
    if index is not None:
        incumbents[index] = min(incumbents[index], best)
    retired = sum(
        s.bound_s is not None and inc <= retire_factor * s.bound_s
        for s, inc in zip(states, incumbents)
    )
    return {"step": step, "task": name, "trials": spent, "task_best_s": best,
            "estimate_s": _estimate(tasks, outside), "retired": retired}  # fmt: skip


def _since(started: float) -> dict:
    return {"seconds": time.perf_counter() - started}


def _floor(tasks) -> float | None:
    """sum(weight x floor), a task with no proven floor counting 0 (still a floor: no time
    is below 0); None when no task has one."""
    if all(t.bound_s is None for t in tasks):
        return None
    return sum(t.found.weight * (t.bound_s or 0.0) for t in tasks)


def build_model(prepared: PreparedModel, applied, target, repeat: int, untuned=None):
    """Build the model with the chosen schedules, check parity against its reference (a zoo
    model's numpy) and against TVM's untuned build of the same model, and time it (``repeat``
    0: not timed). ``untuned``: :func:`untuned_outputs` already computed for this model (its
    build and run are the costly part). Returns (compiled, timing)."""
    if prepared.source is None:
        return None, None
    start = time.perf_counter()
    source, inputs, expected = untuned if untuned is not None else untuned_outputs(prepared, target)
    mod = fold_prepacks(applied.mod, source.entry)
    compiled = build_compiled(source, "tuned", target, mod, (), applied, start)
    check_parity(_as_list(compiled.run(*inputs)), _as_list(expected),
                 f"{source.name} (tuned) vs the untuned build")  # fmt: skip
    return compiled, compiled.time(repeat=repeat) if repeat else None


def untuned_outputs(prepared: PreparedModel, target):
    """(source, inputs, outputs) of TVM's untuned build of the model: the second reference of
    every build (and the reference itself when the model brings none)."""
    source = prepared.source
    untuned = compile_untuned(source.mod, target, _weights_by_name(source))
    inputs = source.inputs if source.inputs is not None else _random_inputs(source)
    expected = untuned.run(*inputs)
    if source.reference is None:  # the untuned build is the reference

        def reference(xs: Sequence[np.ndarray]):
            return untuned.run(*xs)

        source = dataclasses.replace(source, reference=reference, inputs=tuple(inputs))
    return source, inputs, expected


def _weights_by_name(source: ModelSource) -> dict | None:
    names = [str(v.name) for v in source.weight_vars]
    return dict(zip(names, source.weights)) if names else None


def _random_inputs(source: ModelSource) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    inputs = []
    for dims, dtype in source.input_specs:
        if any(not isinstance(d, int) for d in dims):
            raise ValueError(f"{source.name}: input of symbolic shape {dims}; pass inputs=")
        inputs.append(rng.standard_normal(dims).astype(dtype))
    return tuple(inputs)


def _as_list(out) -> list:
    return [out] if isinstance(out, np.ndarray) else list(out)


def _write_manifest(root, target, prepared, table, floor, latency, history, versus) -> str:
    """The model's tasks (each a log folder beside) and its figures, written atomically."""
    found = {f.name: f for f in prepared.found}
    figures = {
        "tasks": [
            {
                "name": r["name"],
                "log": found[r["name"]].key,
                "weight": int(r["weight"]),
                "rule": r["rule"],
                "source": r["source"],
                "rule_s": r["rule_s"],
                "tuned_s": r["tuned_s"],
                "bound_s": r["bound_s"],
                "trials": int(r["trials"]),
                "measured": int(r["measured"]),
                "dropped": int(r["dropped"]),
                "violations": int(r["violations"]),
                "regrets": int(r["regrets"]),
                "retired": bool(r["retired"]),
            }
            for r in table.to_dict(orient="records")
        ],  # fmt: skip
        "trials": int(table["trials"].sum()),
        "latency_s": latency.seconds if latency is not None else None,
        "floor_s": floor,
        "batches": len(history) - 1,
        "estimate_s": history[-1]["estimate_s"] if history else None,
        "versus_rules": versus,
    }
    return str(write_model_manifest(root, target, prepared.key, figures))


def describe(result) -> str:
    """The end-to-end line the CLI prints."""
    lat = result.latency
    if lat is None:
        return "no model to run (a module of PrimFuncs): per-task times above"
    line = f"end to end {lat.seconds * 1e3:.4g} ms ({lat.threads} threads, parity ok)"
    floor = getattr(result, "floor_s", None)
    if floor:
        line += f"; proven floor {floor * 1e3:.4g} ms ({lat.seconds / floor:.1f}x above it)"
    if getattr(result, "trials", None) is not None:
        line += f"; {result.trials} trials in {result.seconds:.0f} s"
    if getattr(result, "estimate_error", None) is not None:
        line += (
            f"; the scheduler's estimate {result.model_estimate_s * 1e3:.4g} ms "
            f"({100 * result.estimate_error:+.0f} % of the measured)"
        )
    if getattr(result, "audit", False):
        t = result.tasks
        line += (
            f"; audit: {int(t['violations'].sum())} violations, {int(t['regrets'].sum())} "
            f"regrets over {int(t['measured'].sum())} candidates measured "
            f"({int(t['dropped'].sum())} of them dropped by the cut)"
        )
    versus = getattr(result, "versus_rules", None)
    if versus:
        line += (
            f"\nside by side: the search's schedules {versus['search_s'] * 1e3:.4g} ms, the "
            f"rules' {versus['rules_s'] * 1e3:.4g} ms: kept the {versus['kept']}"
        )
    return line


__all__ = [
    "ModelTuneResult",
    "describe",
    "is_model",
    "PreparedModel",
    "build_model",
    "model_key",
    "prepare_model",
    "tune_model",
    "tune_prepared",
    "untuned_outputs",
]
