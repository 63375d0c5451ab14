"""Replay a tuned model from its tasks' logs: every task's best record applied, no search,
one build, parity against the reference and the untuned build, an end-to-end time."""

from __future__ import annotations

import dataclasses
import pathlib

from tvm_ext.base.errors import NoLogFound, TargetMismatch, WorkloadMismatch
from tvm_ext.kernel_tuner import session, stages
from tvm_ext.kernel_tuner.replayer import replay
from tvm_ext.model_pipeline import model_tasks
from tvm_ext.model_pipeline.compile import Compiled, Timing, cpu_target
from tvm_ext.model_pipeline.model_tuner import build_model, prepare_model
from tvm_ext.records.logs import MANIFEST_FILE, target_key
from tvm_ext.records.model_manifest import (
    model_manifest_path,
    read_model_manifest,
    tuned_targets,
)
from tvm_ext.schedules.rules.dispatch import schedule_func


@dataclasses.dataclass(frozen=True, eq=False)
class ModelReplayResult:
    """A model rebuilt from its tasks' logs with no search: parity-checked and timed."""

    compiled: Compiled | None
    latency: Timing | None
    tasks: object  # pandas DataFrame: name, weight, log, source, tuned and replayed time
    recorded: dict | None  # the model manifest, when one was written for this target


def replay_model(model, target=None, log_dir="tuning_logs", *, params=None, reference=None,
                 inputs=None, allow_other_target: bool = False,
                 repeat: int = 10) -> ModelReplayResult:  # fmt: skip
    """Apply every task's best record from ``log_dir`` with no search, build, check parity
    (against the reference and the untuned build) and time the model.

    The model's manifest (written by the tune) says where each task's schedule came from: its
    rule (re-derived: the rules are deterministic) or its log's best record (checked as
    :func:`~tvm_ext.kernel_tuner.replayer.replay` checks a kernel's: workload, ISA features, corrupt
    files). A model or a task without its log for ``target`` is a
    :class:`~tvm_ext.base.errors.NoLogFound` naming it; a model tuned only for other targets a
    :class:`~tvm_ext.base.errors.TargetMismatch` naming them; a task the manifest does not
    list (the model changed) a :class:`~tvm_ext.base.errors.WorkloadMismatch`.
    """
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    target = cpu_target(target)
    prepared = prepare_model(model, target, params, reference, inputs)
    here = model_manifest_path(log_dir, target, prepared.key)
    if not here.exists():
        _refuse_other_targets(log_dir, target, prepared.key)
        raise NoLogFound(
            f"{prepared.key} was not tuned for {target_key(target)} under {log_dir} (no {here}); "
            "tune it with log_dir= first"
        )
    recorded = read_model_manifest(here)
    listed = {t["log"]: t for t in recorded["tasks"]}
    sources = {k: t.get("source", "log") for k, t in listed.items()}
    tasks, rows = [], []
    for found in prepared.found:
        source = _source(found, sources, here, prepared.key, target, log_dir)
        mod, seconds = _replay_task(found, source, target, log_dir, allow_other_target,
                                              repeat)  # fmt: skip
        tasks.append(model_tasks.ModelTask(found, None, "", set(), seconds, None, None, mod,
                                           seconds, source, ""))  # fmt: skip
        rows.append({"name": found.name, "weight": found.weight, "log": found.key,
                     "source": source, "tuned_s": listed[found.key].get("tuned_s"),
                     "replayed_s": seconds})  # fmt: skip
    applied = model_tasks.apply_best(prepared.lowered, tasks)
    compiled, latency = build_model(prepared, applied, target, repeat)

    return ModelReplayResult(compiled, latency, pd.DataFrame(rows), recorded)


def _source(found, sources: dict, here, key: str, target, log_dir) -> str:
    """Where the tuned model took the task's schedule from; every task needs its log."""
    if found.key not in sources:
        raise WorkloadMismatch(
            f"{key}: task {found.name} ({found.key}) is not among the tasks {here} lists: the "
            "model changed since it was tuned; tune it again"
        )
    folder = pathlib.Path(log_dir) / target_key(target) / found.key
    if not (folder / MANIFEST_FILE).exists():
        raise NoLogFound(
            f"{key}: task {found.name} ({found.key}) has no log for {target_key(target)} under "
            f"{log_dir} (no {folder / MANIFEST_FILE}); tune the model with log_dir= again"
        )
    return sources[found.key]


def _replay_task(found, source: str, target, log_dir, allow_other_target: bool, repeat: int):
    """(scheduled module, its time now) of one task: the rule's schedule
    when the tune kept it (the rules are deterministic), else its log's best, checked as a
    kernel replay checks it (workload, ISA features, corrupt files)."""

    if source == "rule":
        named = found.func.with_attr("global_symbol", found.name)
        task = session.prepare(named, target, name=found.name, weights_repacked_once=True)
        sch = schedule_func(task.func, target)[0]
        return sch.mod, stages.measure_on_task(task, sch, repeat=repeat).seconds
    r = replay(found.func, target, log_dir, allow_other_target=allow_other_target, repeat=repeat)
    return r.mod, r.measurement.seconds


def _refuse_other_targets(log_dir, target, key: str) -> None:
    others = [k for k in tuned_targets(log_dir, key) if k != target_key(target)]
    if others:
        raise TargetMismatch(
            f"{key} was tuned for {others}, not for {target_key(target)} (under {log_dir}); "
            "replay with that target or tune it here"
        )


__all__ = ["ModelReplayResult", "replay_model"]
