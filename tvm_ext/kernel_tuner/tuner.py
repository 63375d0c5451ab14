"""``tune(mod, target)``: MetaSchedule with a cost policy, an admissible cut, a hand-schedule
seed, and the three numbers for the winner."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import PolicyError, TuneError
from tvm_ext.cost import RooflinePolicy
from tvm_ext.hardware.machine_model import MachineModel
from tvm_ext.kernel_tuner import session as sessions
from tvm_ext.kernel_tuner import stages
from tvm_ext.kernel_tuner.pruning import PruneStats
from tvm_ext.kernel_tuner.remote import unknown_runner_warning
from tvm_ext.measurement.measure import Measurement
from tvm_ext.records.logs import log_folder
from tvm_ext.workloads.kernels import Workload


@dataclass(frozen=True)
class TuneResult:
    """The tuned module with its independent measurement and how the search went."""

    mod: "tvm_api.IRModule"
    measurement: Measurement
    trace: str
    stats: Mapping[str, object]
    binding: str
    source: stages.Source  # "search", or "hand schedule" when the seed won
    work_dir: str | None  # MetaSchedule's working directory, when kept (logs in <work_dir>/logs)
    log_folder: str | None  # the frozen log this tune added its records to, if log_dir was given
    measured_on: str = "this host"  # where every time of the tune was measured


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
    machine: MachineModel | None = None,
):
    """Tune a PrimFunc, single-function IRModule or suite Workload for ``target`` (default the
    host CPU). (A model goes to :func:`~tvm_ext.model_pipeline.model_tuner.tune_model`;
    ``tvm_ext.tune`` decides which.)

    The policy (default :class:`~tvm_ext.cost.RooflinePolicy`) ranks candidates. A proven lower
    bound drops every candidate that cannot beat the best time measured so far before it is
    built: the policy's own bound when it proves one, else the roofline's (a learned or
    service policy ranks, the roofline still prunes). The library's hand schedule, when one
    exists (and ``hand_schedule`` is left True), is measured first: it is the initial cut and
    a seed, and the result is never slower than it. Measurement uses the target's
    ``num-cores`` threads; the winner is parity-checked and measured again.

    ``runner`` measures the candidates (default this host). With
    :func:`~tvm_ext.kernel_tuner.remote.rpc_runner` every measurement runs on the devices behind its
    tracker: the candidates, the hand schedule and the winner; the bound then uses
    ``machine`` (the devices' :class:`~tvm_ext.hardware.machine_model.MachineModel`), else a model
    probed on one device once per key and cached. ``machine`` also overrides this host's model.
    When candidates were sent and none could be measured (no device, every build failing),
    a :class:`~tvm_ext.base.errors.TuneError` says how many failed and why; ``stats["failed"]``
    counts failures of a tune that did measure.

    With ``log_dir`` (e.g. ``"tuning_logs"``) the records join the frozen log
    ``<log_dir>/<target key>/<workload key>/`` (see :mod:`tvm_ext.records.logs`); an existing
    log of the same workload seeds the search and tightens the initial cut. The log is written
    atomically at the end, and also when the tune is interrupted or its policy fails.

    MetaSchedule works in ``work_dir`` (its database and ``logs/meta_schedule.log``); a given
    ``work_dir`` is kept, a temporary one is always removed.
    """
    stages.checked_trials(trials)
    unknown_runner_warning(runner)
    task = sessions.prepare(mod, target, workload, machine=machine, runner=runner)
    policy, bound_policy = policies(policy)
    folder = log_folder(log_dir, task.target, task.func) if log_dir is not None else None
    stats = PruneStats()
    with sessions.open_session(task, work_dir, runner) as session:
        seeded, chosen = run_stages(task, session, folder, (policy, bound_policy), stats,
                                    trials=trials, batch=batch, rng_seed=seed, audit=audit,
                                    progress=progress, use_hand=hand_schedule)  # fmt: skip
        summary = _summary(stats, seeded, session, chosen)
        kept = session.work_dir if session.kept else None
    sessions.refresh_machine(task.target, machine, runner)
    return TuneResult(chosen.sch.mod, chosen.measurement, str(chosen.sch.trace), summary,
                      chosen.cost.binding, chosen.source, kept,
                      str(folder) if folder is not None else None, task.where)  # fmt: skip


def run_stages(task, session, folder, policy_pair, stats: PruneStats, *, trials: int,
               batch: int, rng_seed: int | None, audit: bool = False, progress: bool = True,
               use_hand: bool = True):  # fmt: skip
    """seed -> search -> select -> persist for one task in an open session (a kernel tune's
    own, or one a model tune keeps open across its batches); returns (seed, selection).
    ``policy_pair`` is :func:`policies`' (ranking policy, bound policy); ``folder`` the
    frozen log (None: none). What was measured is kept in the log when the search fails."""
    policy, bound_policy = policy_pair
    seeded = stages.seed(task, session, folder, use_hand=use_hand)
    try:
        stages.search(task, session, seeded, stats, policy=policy, bound_policy=bound_policy,
                      trials=trials, batch=batch, rng_seed=rng_seed, audit=audit,
                      progress=progress)  # fmt: skip
    except (KeyboardInterrupt, PolicyError, TuneError):
        if folder is not None:  # every record measured so far is kept
            stages.persist(folder, task, session, policy, stats, None)
        raise
    failed: list = []  # traces of records that failed parity in select
    try:
        chosen = stages.select(task, session, seeded, bound_policy, failed)
    except TuneError:  # every candidate tried failed parity: the records are kept, marked
        if folder is not None:
            stages.persist(folder, task, session, policy, stats, None, failed)
        raise
    if folder is not None:
        stages.persist(folder, task, session, policy, stats, chosen, failed)
    return seeded, chosen


def policies(policy):
    """(ranking policy, bound policy): the policy's own bound when it proves one, else the
    roofline's behind it."""
    policy = policy if policy is not None else RooflinePolicy()
    return policy, policy if getattr(policy, "proves_bounds", False) else RooflinePolicy()


def _summary(stats: PruneStats, seeded: stages.Seed, session, chosen) -> Mapping[str, object]:
    return MappingProxyType(
        stats.as_dict()
        | {
            "seconds": time.perf_counter() - session.started,
            "hand_s": seeded.hand_s if seeded.hand is not None else None,
            "first_measured_s": stats.first_measured_s,
            "hand_measured_s": seeded.ready_after_s,
            "batches": list(stats.batches),
            # How close the winner came to its proven bound (1.0 = at the bound; None: no bound).
            "envelope_fraction": chosen.cost.envelope_fraction(chosen.measurement.seconds),
        }
    )
