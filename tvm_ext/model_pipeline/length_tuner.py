"""``tune(model, lengths=[...])`` for a model of symbolic length, and its replay.

Each length is tuned as a static model (:func:`~tvm_ext.model_pipeline.length_buckets.at_length`,
then the model tuner's own loop, the budget shared); the result is one symbolic executable
whose entry dispatches each call to the schedules tuned for the nearest length
(:func:`~tvm_ext.model_pipeline.length_dispatch.dispatching`). A bucket keeps its tuned
schedules only where the built executable runs its length no slower than the rules' own
symbolic build, side by side; every build is checked for parity at every tuned length.
The lengths, the per-length model keys and which buckets kept their schedules are written
as a model manifest, so :func:`replay_at_lengths` rebuilds the same executable from the logs.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
import shutil
import statistics
import tempfile
import time

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.checks import checked_int
from tvm_ext.base.errors import CorruptLog, NoLogFound, TvmExtError
from tvm_ext.kernel_tuner.replayer import apply_logged_trace, logged_trace
from tvm_ext.model_pipeline import model_tasks
from tvm_ext.model_pipeline.compile import (
    Compiled,
    ModelSource,
    bind_and_lower,
    build_compiled,
    cpu_target,
)
from tvm_ext.model_pipeline.length_buckets import Buckets, at_length, generalized_trace
from tvm_ext.model_pipeline.length_dispatch import bounded_rules, dispatching, merged
from tvm_ext.model_pipeline.model_replay import ModelReplayResult
from tvm_ext.model_pipeline.model_tuner import (
    ModelTuneResult,
    PreparedModel,
    model_key,
    tune_prepared,
)
from tvm_ext.model_pipeline.repacks import fold_prepacks
from tvm_ext.model_pipeline.task_scheduler import RETIRE_FACTOR
from tvm_ext.records.logs import (
    MANIFEST_FILE,
    log_folder,
    read_manifest,
    workload_key,
)
from tvm_ext.records.model_manifest import (
    model_manifest_path,
    read_model_manifest,
    write_model_manifest,
)
from tvm_ext.schedules.rules.dispatch import apply
from tvm_ext.workloads.model_base import Model

log = logging.getLogger("tvm_ext.tune")


@dataclasses.dataclass(frozen=True, eq=False)
class LengthTuneResult:
    """A model of symbolic length tuned at ``buckets.lengths``: one executable for every length.

    ``per_length``: the static tune at each length (its tasks, history, static build);
    ``lengths``: one row per length (the static tuned build's time, this executable's and
    the rules' symbolic build's at that length, side by side, and whether the bucket kept
    its tuned schedules: ``kept``, with ``tuned_functions`` of them)."""

    compiled: Compiled
    buckets: Buckets
    per_length: tuple[ModelTuneResult, ...]
    lengths: object  # pandas DataFrame
    trials: int
    seconds: float
    log_dir: str | None
    manifest: str | None


def tune_at_lengths(model, target=None, lengths=None, *, trials: int = 64, log_dir=None,
                    seed: int | None = None, batch: int = 16, policy=None, progress: bool = True,
                    machine=None, params=None, reference=None, inputs=None,
                    retire_factor: float = RETIRE_FACTOR, repeat: int = 10,
                    audit: bool = False) -> LengthTuneResult:  # fmt: skip
    """Tune a model of symbolic length at ``lengths`` (a list, for a model with one symbolic
    dimension, or {dimension: list}); ``trials`` is shared among them, the other options are
    :func:`~tvm_ext.model_pipeline.model_tuner.tune_model`'s. Returns one executable for
    every length (see the module's docstring)."""
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    checked_int("trials", trials, minimum=0, note="0: the rules' schedules alone")
    checked_int("batch", batch)
    if lengths is None:
        raise ValueError("tune_at_lengths needs lengths= (the lengths to tune at)")
    started = time.perf_counter()
    target = cpu_target(target)
    source, buckets, lowered, key = _symbolic(model, target, params, reference, inputs, lengths)
    root = pathlib.Path(log_dir) if log_dir is not None else None
    scratch = None if root is not None else tempfile.mkdtemp(prefix="tvm-ext-length-logs-")
    logs = root if root is not None else pathlib.Path(scratch)
    try:
        per_length, variants = [], []
        for length, share in zip(buckets.lengths, _shares(trials, len(buckets.lengths))):
            static, origin = at_length(lowered, source.entry, buckets.var, length)
            at = dataclasses.replace(source, inputs=inputs_at(source, buckets.var, length))
            prepared = PreparedModel(at, static, model_tasks.extract(static, target),
                                     f"{key}-{buckets.var}{length}")  # fmt: skip
            result = tune_prepared(prepared, target, trials=share, log_dir=logs, seed=seed,
                                   batch=batch, policy=policy, progress=progress,
                                   machine=machine, retire_factor=retire_factor,
                                   repeat=repeat, audit=audit)  # fmt: skip
            per_length.append(result)
            sources = dict(zip(result.tasks["log"], result.tasks["source"]))
            variants.append(_variants(lowered, static, origin, sources, target, logs))
        compiled, rows = _build_and_choose(source, lowered, buckets, variants, target, repeat)
        for row, result in zip(rows, per_length):
            row["static_ms"] = result.latency.seconds * 1e3 if result.latency else None
        manifest = None
        if root is not None:
            manifest = _write(root, target, key, buckets, rows)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return LengthTuneResult(compiled, buckets, tuple(per_length), pd.DataFrame(rows),
                            sum(r.trials for r in per_length), time.perf_counter() - started,
                            str(root) if root is not None else None, manifest)  # fmt: skip


def replay_at_lengths(model, target=None, log_dir="tuning_logs", *, params=None,
                      reference=None, inputs=None, repeat: int = 10):  # fmt: skip
    """Rebuild the executable a :func:`tune_at_lengths` wrote to ``log_dir``: every length's
    tasks from their logs (no search), the buckets that kept their schedules as the tune
    chose; parity at every length. ``latency`` is None (a length has its own: time
    ``compiled`` at the length you need); ``tasks`` has a row a length."""
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    target = cpu_target(target)
    source, _, lowered, key = _symbolic(model, target, params, reference, inputs, None)
    path = model_manifest_path(log_dir, target, key)
    if not path.exists():
        raise NoLogFound(f"{key} was not tuned at lengths for this target under {log_dir} "
                         f"(no {path}); tune it with lengths= and log_dir= first")  # fmt: skip
    recorded = read_model_manifest(path)
    try:
        buckets = Buckets(recorded["var"], tuple(int(t["length"]) for t in recorded["tasks"]))
        kept = [bool(t["kept"]) for t in recorded["tasks"]]
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptLog(f"{path}: not a manifest of lengths ({err})") from err
    variants = []
    for length, keep, entry in zip(buckets.lengths, kept, recorded["tasks"]):
        if not keep:
            variants.append({})
            continue
        static, origin = at_length(lowered, source.entry, buckets.var, length)
        per = model_manifest_path(log_dir, target, entry["log"])
        if not per.exists():
            raise NoLogFound(f"{key}: length {length} has no manifest {per}; tune it again")
        sources = {t["log"]: t.get("source", "log") for t in read_model_manifest(per)["tasks"]}
        variants.append(_variants(lowered, static, origin, sources, target, log_dir))
    compiled, rows = _build_and_choose(source, lowered, buckets, variants, target, repeat,
                                       choose=False)  # fmt: skip
    return ModelReplayResult(compiled, None, pd.DataFrame(rows), recorded)


def is_symbolic(model) -> bool:
    """Whether a model (zoo Model or Relax IRModule) declares a symbolic dimension."""
    if not isinstance(model, (Model, tvm_api.IRModule)) or (
        isinstance(model, tvm_api.IRModule) and not model_tasks.has_relax(model)
    ):
        return False
    mod = model.mod if isinstance(model, Model) else model
    return bool(tvm_api.symbolic_bounds(mod[tvm_api.relax_entry(mod)]))


def _symbolic(model, target, params, reference, inputs, lengths):
    """(source, buckets or None, the lowered symbolic module, the model's key)."""
    source = ModelSource.of(model, params, reference, inputs)
    bounds = tvm_api.symbolic_bounds(source.mod[source.entry])
    buckets = None if lengths is None else Buckets.named(lengths, bounds, source.name)
    lowered = bind_and_lower(source, target)
    key = model_key(model, source, lowered)
    spans = "-".join(f"{v}{lo}to{hi}" for v, (lo, hi) in sorted(bounds.items()))
    return source, buckets, lowered, f"{key}-{spans}"


def _shares(trials: int, parts: int) -> list[int]:
    return [trials // parts + (i < trials % parts) for i in range(parts)]


def inputs_at(source: ModelSource, var: str, length: int) -> tuple[np.ndarray, ...]:
    """The model's inputs at ``length``: its example inputs cut or repeated along every axis
    of dimension ``var`` (token ids stay token ids), or random ones of that shape."""
    rng = np.random.default_rng(0)
    out = []
    for i, (dims, dtype) in enumerate(source.input_specs):
        axes = [a for a, d in enumerate(dims) if d == var]
        if source.inputs is not None:
            array = np.asarray(source.inputs[i])
            for a in axes:
                array = np.take(array, np.arange(length) % array.shape[a], axis=a)
        else:
            shape = [length if d == var else d for d in dims]
            if any(not isinstance(d, int) for d in shape):
                raise ValueError(f"{source.name}: input {i} of shape {dims}; pass inputs=")
            draw = rng.standard_normal(shape) if "float" in dtype else rng.integers(0, 2, shape)
            array = draw.astype(dtype)
        out.append(np.ascontiguousarray(array))
    return tuple(out)


def _variants(lowered, static, origin: dict, sources: dict, target, logs) -> dict:
    """{symbolic PrimFunc name: its schedule for this length's bucket} for each function
    whose task at this length took a schedule from its log or the search (``sources``: log
    key -> source): the log's best trace, generalized to the symbolic function. A function
    specialized into two tasks, or whose trace does not apply to it, keeps its rule."""
    tasks_of: dict[str, dict] = {}  # symbolic name -> {log key: the static function}
    for name, symbolic_name in origin.items():
        func = model_tasks.normal(static[name])
        tasks_of.setdefault(symbolic_name, {})[workload_key(func)] = func
    chosen = {}
    for name, tasks in tasks_of.items():
        if len(tasks) != 1 or sources.get(next(iter(tasks)), "rule") == "rule":
            continue
        (func,) = tasks.values()
        folder = log_folder(logs, target, func)
        if not (folder / MANIFEST_FILE).exists():
            raise NoLogFound(f"{name}: no log {folder} for the schedule it was tuned with")
        trace = logged_trace(folder, read_manifest(folder))
        symbolic = lowered[name].with_attr("global_symbol", "main")
        try:
            sch = apply_logged_trace(symbolic, generalized_trace(trace))
        except (RuntimeError, TypeError, ValueError, IndexError, TvmExtError) as err:
            log.info("%s: its tuned trace does not apply at every length (%s); rule kept",
                     name, str(err).splitlines()[0])  # fmt: skip
            continue
        chosen[name] = tvm_api.main_func(sch.mod)
    return chosen


def _build_and_choose(source, lowered, buckets, variants, target, repeat, choose=True):
    """Build the rules' symbolic executable and the dispatching one, parity-checked at every
    length; with ``choose``, a bucket whose schedules run its length slower than the rules'
    (median of three interleaved rounds) drops them; the rules' executable is compile()'s
    (its short ranges included). Returns (compiled, one row a length)."""
    start = time.perf_counter()
    applied = apply(lowered, target)
    at = {b: inputs_at(source, buckets.var, b) for b in buckets.lengths}
    # compile()'s own short ranges, under the tuned buckets' schedules.
    ((low, high),) = tvm_api.symbolic_bounds(source.mod[source.entry]).values()
    short = bounded_rules(applied.mod, lowered, target, buckets.var, low, high)

    def build(chosen):
        uppers, ranges = merged(short, (buckets.uppers, chosen))
        mod = fold_prepacks(
            dispatching(applied.mod, source.entry, buckets.var, uppers, ranges), source.entry
        )
        compiled = build_compiled(source, "tuned", target, mod, (), applied, start)
        if source.reference is not None:
            for b in buckets.lengths:
                compiled.check(at[b])  # ParityError past the tolerance
        return compiled

    variants = list(variants)
    compiled = build(variants)
    rows = [{"length": b, "tuned_functions": len(v), "kept": bool(v)}
            for b, v in zip(buckets.lengths, variants)]  # fmt: skip
    if not choose or not any(variants):
        return compiled, rows
    rules = build([{}] * len(variants))
    for row, b in zip(rows, buckets.lengths):
        times = {"ours": [], "rules": []}
        for _ in range(3):
            for arm, c in (("ours", compiled), ("rules", rules)):
                times[arm].append(c.time(at[b], repeat=repeat).seconds)
        row["ours_ms"] = statistics.median(times["ours"]) * 1e3
        row["rules_ms"] = statistics.median(times["rules"]) * 1e3
    dropped = False
    for i, row in enumerate(rows):
        if row["kept"] and row["rules_ms"] < row["ours_ms"]:
            log.info("length %d: the rules' schedules ran faster (%.4g vs %.4g ms); kept them",
                     row["length"], row["rules_ms"], row["ours_ms"])  # fmt: skip
            variants[i], row["kept"], dropped = {}, False, True
            row["ours_ms"] = row["rules_ms"]
    if dropped:
        compiled = rules if not any(variants) else build(variants)
    return compiled, rows


def _write(root, target, key: str, buckets: Buckets, rows: list[dict]) -> str:
    tasks = [{"log": f"{key}-{buckets.var}{r['length']}", "length": r["length"],
              "kept": r["kept"], "tuned_functions": r["tuned_functions"]}
             for r in rows]  # fmt: skip
    figures = {"tasks": tasks, "var": buckets.var, "lengths": list(buckets.lengths),
               "uppers": list(buckets.uppers), "rows": rows}  # fmt: skip
    return str(write_model_manifest(root, target, key, figures))


__all__ = ["LengthTuneResult", "inputs_at", "is_symbolic", "replay_at_lengths", "tune_at_lengths"]
