"""The tasks of a model: its PrimFuncs as MetaSchedule extracts them (deduplicated by
structure, weighted by call count), each seeded with its IR rule's schedule, bounded by its
proven floor, and logged in the per-workload folder every model with that function shares.

A task's log is the kernel tuner's: ``<log root>/<target key>/<workload key>/``, its key the
structural hash of the function (named ``main``), so the same function in two models, or
tuned alone, is one log. Seeding writes the rule's schedule into that log as a measured
record: every later batch (and ``replay``) starts from it, and the seed is measured once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import pathlib
import shutil
import tempfile
import time
from dataclasses import dataclass

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import TuneError
from tvm_ext.cost import RooflinePolicy, evaluate, floor_s
from tvm_ext.kernel_tuner import session as sessions
from tvm_ext.kernel_tuner import stages
from tvm_ext.kernel_tuner.pruning import PruneStats
from tvm_ext.kernel_tuner.replayer import apply_logged_trace, logged_trace
from tvm_ext.kernel_tuner.tuner import policies, run_stages
from tvm_ext.records.logs import (
    MANIFEST_FILE,
    add_record,
    log_folder,
    make_manifest,
    read_manifest,
    structural_hash,
    workload_key,
)
from tvm_ext.schedules import Applied, Scheduled
from tvm_ext.schedules.rules.dispatch import call_counts, schedule_func

log = logging.getLogger("tvm_ext.tune")
# A measured time this far under its proven floor is reported as a bug in the bound (the
# margin absorbs the timer's noise, as the kernel tuner's violation count does).
FLOOR_NOISE = 0.05


@dataclass(frozen=True)
class FoundTask:
    """One deduplicated function of a module: its name, the function (named ``main``), how
    often one model run calls it, and the module's functions it stands for."""

    name: str
    func: "tvm_api.PrimFunc"
    weight: int
    globals: tuple[str, ...]

    @property
    def key(self) -> str:
        return workload_key(self.func)


def normal(func) -> "tvm_api.PrimFunc":
    """The function as the kernel tuner keys its log: named ``main``, without the blocks'
    ``layout_free_placeholders`` annotations.

    TE's operators (``batch_matmul``, ``dense``) mark their weight operand so; in a fused
    function that operand can be an intermediate buffer, and a buffer held in an annotation
    does not survive a log's JSON round trip structurally equal (MetaSchedule's database then
    holds the task twice, and a log cannot be merged). Nothing reads the annotation: weight
    repacking follows the function's ``layout_free_buffers`` attribute (parameters only)."""
    func = func.with_attr("global_symbol", "main")
    marked = [b.name_hint for b in tvm_api.sblocks(func) if LAYOUT_FREE_MARK in b.annotations]
    if not marked:
        return func
    sch = tvm_api.Schedule(func)
    for name in marked:
        sch.unannotate(sch.get_sblock(name), LAYOUT_FREE_MARK)
    return tvm_api.main_func(sch.mod)


LAYOUT_FREE_MARK = "layout_free_placeholders"


def has_relax(mod) -> bool:
    return any(not isinstance(f, tvm_api.PrimFunc) for f in mod.functions.values())


def extract(lowered, target) -> list[FoundTask]:
    """The tasks of a lowered module: MetaSchedule's extraction (its structural
    deduplication, call counts as weights) when the module has Relax functions; every PrimFunc
    the extraction does not cover (or every one of a module of PrimFuncs only) is a task of
    its own with its call count (at least 1), so no function is left unscheduled."""
    groups: dict[str, list[str]] = {}
    funcs: dict[str, object] = {}
    for gv, func in lowered.functions.items():
        if isinstance(func, tvm_api.PrimFunc):
            key = structural_hash(normal(func))
            groups.setdefault(key, []).append(gv.name_hint)
            funcs.setdefault(key, normal(func))
    names, weights = {}, {}
    if has_relax(lowered):
        for t in tvm_api.ms.relax_integration.extract_tasks(lowered, target):
            key = structural_hash(normal(tvm_api.main_func(t.mod)))
            names.setdefault(key, str(t.task_name))
            weights[key] = weights.get(key, 0) + int(t.weight)
    counts = call_counts(lowered)
    tasks = []
    for key, members in groups.items():
        weight = weights.get(key) or max(sum(counts.get(n, 0) for n in members), 1)
        tasks.append(FoundTask(names.get(key, members[0]), funcs[key], weight, tuple(members)))
    return sorted(tasks, key=lambda t: t.name)


@dataclass(eq=False)  # holds TVM objects: compared by identity
class ModelTask:
    """A task while the model tuner works on it: its rule seed, bound and incumbent."""

    found: FoundTask
    task: sessions.Task  # prepared for the target (machine model, cores)
    rule: str  # the IR rule that scheduled it
    rule_traces: set  # the rule's schedules (traces as text): never a search result
    rule_s: float
    flops: int | None
    bound_s: float | None  # proven floor of one call (None: nothing proven)
    best_mod: "tvm_api.IRModule"
    best_s: float
    source: str  # "rule", "log" (an earlier tune's record) or "search"
    binding: str  # the binding roofline arm of the incumbent's bound
    trials: int = 0
    measured: int = 0
    dropped: int = 0
    # One call's time in the built model over its time alone (the kernel meets cold weights,
    # the previous kernel's output, the VM's calls there): 1 until calibrated by a profile.
    in_model: float = 1.0
    violations: int = 0  # audit: runs faster than their proven bound (a bound bug)
    regrets: int = 0  # audit: dropped candidates that would have beaten the incumbent
    rule_mod: "tvm_api.IRModule | None" = None  # the rule's schedule (the seed)
    rule_binding: str = ""

    def __post_init__(self) -> None:
        if self.rule_mod is None:
            self.rule_mod, self.rule_binding = self.best_mod, self.binding

    def back_to_rule(self) -> None:
        """Make the rule's schedule the incumbent again (the model ran faster with it)."""
        self.best_mod, self.best_s = self.rule_mod, self.rule_s
        self.source, self.binding = "rule", self.rule_binding

    @property
    def name(self) -> str:
        return self.found.name

    def below_floor(self) -> bool:
        """Whether a measured time beat the proven floor (beyond noise): a bug in the bound."""
        return self.bound_s is not None and self.best_s < self.bound_s * (1 - FLOOR_NOISE)

    def take(self, mod, seconds: float, source: str, binding: str) -> None:
        if seconds < self.best_s:
            self.best_mod, self.best_s, self.source, self.binding = mod, seconds, source, binding


def start_task(found: FoundTask, target, machine, log_root) -> ModelTask:
    """Schedule the task with its IR rule, measure it (parity against the unscheduled
    function), compute its proven floor, start from its log when one exists (another model's
    or an earlier tune's) and add the rule's record to the log.

    The incumbent is the rule's schedule as the model is compiled (weights repacked at
    compile time). The log gets the rule's schedule as the search can start from it
    (:func:`~tvm_ext.kernel_tuner.stages.hand_schedule`: weights left to the search's own
    repacking), measured when it differs. Every time of a model's task leaves out the weight
    repacking (the model does it once, at compile time; MetaSchedule's runner times the
    search's candidates so too): the rule's schedule, the plain seed, a log's best and the
    search's winners are compared as the model runs them.
    """
    named = found.func.with_attr("global_symbol", found.name)
    task = sessions.prepare(named, target, name=found.name, machine=machine,
                          weights_repacked_once=True)  # fmt: skip
    sch, rule = schedule_func(task.func, task.target)
    m = stages.measure_on_task(task, sch)
    bound = floor_s(task.func, task.target, machine=task.machine)
    mt = ModelTask(found, task, rule, {str(sch.trace)}, m.seconds, m.flops, bound,
                   sch.mod, m.seconds, "rule", _binding(sch, task))  # fmt: skip
    plain = stages.hand_schedule(task)
    if plain is not None and str(plain.trace) != str(sch.trace):
        mt.rule_traces.add(str(plain.trace))
        plain_m = stages.measure_on_task(task, plain)
    else:
        plain_m = m
    if log_root is not None:
        folder = log_folder(log_root, task.target, task.func)
        logged = logged_best(folder, task)
        if logged is not None and str(logged.trace) not in mt.rule_traces:
            lm = stages.measure_on_task(task, logged)
            mt.take(logged.mod, lm.seconds, "log", _binding(logged, task))
        if plain is not None:
            record_schedule(folder, task, plain, plain_m, _binding(plain, task))
    if mt.below_floor():
        log.error("%s ran in %.3g s, under its proven floor %.3g s: a bug in the bound",
                  found.name, mt.best_s, bound)  # fmt: skip
    return mt


def _binding(sch, task: sessions.Task) -> str:
    return evaluate(RooflinePolicy(), sch, task.target, machine=task.machine).binding


def logged_best(folder: pathlib.Path, task: sessions.Task):
    """The best schedule of an existing log of the task (None: no log, or one of another
    workload, which is left alone with a warning)."""
    if not (folder / MANIFEST_FILE).exists():
        return None
    manifest = read_manifest(folder)
    if manifest.get("structural_hash") != structural_hash(task.func):
        log.warning("ignoring %s: it was tuned for a different workload", folder)
        return None
    return apply_logged_trace(task.func, logged_trace(folder, manifest))


def record_schedule(folder, task: sessions.Task, sch, m, binding: str) -> None:
    """Add ``sch`` with its measured time to the log ``folder`` as a record (unless the log
    already holds that schedule), so a search or a replay starts from it."""
    manifest = make_manifest(
        task.func,
        task.target,
        threads=task.cores,
        policy="IR rule seed",
        stats={"generated": 0, "dropped": 0, "measured": 0, "regrets": 0},
        seconds=m.seconds,
        gflops=m.gflops,
        max_rel_error=m.max_rel_error,
        workload=task.workload,
        machine=task.machine,
        measured_on=task.where,
    )
    manifest["binding"] = binding
    manifest["weights_repacked_once"] = task.weights_repacked_once  # how times were taken
    add_record(folder, task.mod, task.func, sch.trace, m.seconds, task.target, manifest)


@contextlib.contextmanager
def batch_session(tasks: list[ModelTask]):
    """One build/run session (build workers, runner) for every batch of a model tune: starting
    one costs seconds of worker start-up (~8 s on a loaded 2-core host), more than a batch of
    small kernels takes. Each batch still gets a work dir (MetaSchedule's database) of its
    own. Closed, with every worker, on exit."""
    with sessions.open_session(tasks[0].task) as shared:
        yield shared


def search_batch(mt: ModelTask, trials: int, log_root, *, rng_seed, policy, shared,
                 audit: bool = False) -> float | None:  # fmt: skip
    """Give the task ``trials`` more trials through the kernel tuner's stages (ranking policy,
    admissible cut) in the ``shared`` session, continuing from its log (the rule's record and
    every earlier batch, also of other models); returns the batch's winner's time (None when
    nothing could be measured, or nothing beat the rule's seed). ``audit``: the candidates
    the cut drops are measured too, and the task counts its violations and regrets."""

    folder = log_folder(log_root, mt.task.target, mt.task.func)
    stats = PruneStats()
    work = tempfile.mkdtemp(prefix="batch-", dir=shared.work_dir)
    session = dataclasses.replace(shared, work_dir=work, kept=False, started=time.perf_counter())
    mt.trials += trials
    try:
        _, chosen = run_stages(mt.task, session, folder, policies(policy), stats, trials=trials,
                               batch=trials, rng_seed=rng_seed, progress=False,
                               use_hand=False, audit=audit)  # fmt: skip
    except TuneError as err:  # every candidate failed: the task keeps its incumbent
        log.warning("%s: a batch of %d trials measured nothing: %s", mt.name, trials, err)
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _count(mt, stats)
    if str(chosen.sch.trace) in mt.rule_traces:  # nothing faster than the rule's seed
        return None
    mt.take(chosen.sch.mod, chosen.measurement.seconds, "search", chosen.cost.binding)
    if mt.below_floor():
        log.error("%s ran in %.3g s, under its proven floor %.3g s: a bug in the bound",
                  mt.name, mt.best_s, mt.bound_s)  # fmt: skip
    return chosen.measurement.seconds


def _count(mt: ModelTask, stats: PruneStats) -> None:
    """Add a batch's counts to its task's, whether the batch chose a winner or not."""
    mt.measured += stats.measured
    mt.dropped += stats.dropped
    mt.violations += stats.violations
    mt.regrets += stats.regrets


def apply_best(lowered, tasks: list[ModelTask]) -> Applied:
    """The lowered module with every PrimFunc replaced by its task's best schedule, and the
    table of who scheduled what (the rule's name, or ``search`` / ``log``)."""
    by_name = {g: t for t in tasks for g in t.found.globals}
    out = tvm_api.IRModule(dict(lowered.functions.items()), attrs=lowered.attrs)
    total = sum((t.flops or 0) * t.found.weight for t in tasks) or 1
    rows = []
    counts = call_counts(lowered)
    for gv, func in lowered.functions.items():
        if not isinstance(func, tvm_api.PrimFunc):
            continue
        t = by_name[gv.name_hint]
        best = tvm_api.main_func(t.best_mod).with_attr("global_symbol", gv.name_hint)
        out[gv] = best
        calls = counts.get(gv.name_hint, 1)
        rule = t.rule if t.source == "rule" else f"{t.source} ({t.rule} seed)"
        rows.append(Scheduled(gv.name_hint, rule, t.flops or 0, calls,
                              (t.flops or 0) * calls / total))  # fmt: skip
    return Applied(out, tuple(rows))


def table(tasks: list[ModelTask], retired: list[bool]) -> "object":
    """The per-task table (pandas), heaviest incumbent first (``retired``: per task)."""
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    rows = [
        {
            "name": t.name,
            "log": t.found.key,
            "weight": t.found.weight,
            "flops": t.flops,
            "rule": t.rule,
            "rule_s": t.rule_s,
            "tuned_s": t.best_s,
            "bound_s": t.bound_s,
            "binding": t.binding,
            "trials": t.trials,
            "measured": t.measured,
            "dropped": t.dropped,
            "in_model": t.in_model,
            "violations": t.violations,
            "regrets": t.regrets,
            "source": t.source,
            "retired": bool(gone),
            "x_floor": t.best_s / t.bound_s if t.bound_s else math.nan,
            "below_floor": t.below_floor(),
        }
        for t, gone in zip(tasks, retired)
    ]
    frame = pd.DataFrame(rows)
    order = frame["tuned_s"] * frame["weight"]
    return frame.loc[order.sort_values(ascending=False).index].reset_index(drop=True)
