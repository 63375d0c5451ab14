"""Telamon's admissible cut in MetaSchedule's search, at two stages.

:class:`PruningSearch` wraps ``EvolutionarySearch``: every candidate the inner search proposes
is priced by the policy before it is built; one whose proven lower bound is at least the best
time measured so far for the workload (the incumbent) can never win and is dropped. Dropped
candidates are reported back to the inner search as failed runs, so its trial counter advances
and the search ends on budget; the task scheduler never receives an empty batch while the inner
search still has candidates. In audit mode the dropped candidates are measured anyway, and any
that ran faster than the incumbent at the time it was dropped (beyond the noise margin) is a
regret. Every measured candidate's time is also checked against its bound (a violation).

The cut has two stages. Stage 1 (above) prices the TIR before the build and saves the build.
Stage 2 (:class:`PostBuildCut`, attached to the builder) prices each built candidate again
with the facts of its machine code (:mod:`tvm_ext.cost.post_build`) before it is run, and
saves the run: on a device farm, the scarce device time. A candidate dropped at stage 2 is
handed to MetaSchedule as a build that produced nothing to run (its database stores it as it
stores any candidate without a time); ``stats`` and the manifest count it as dropped, never
as failed, with its bound and binding arm.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tvm_ext.base import tvm_api
from tvm_ext.built_code.machine_code import CodeFacts
from tvm_ext.cost.features import CandidateFeatures
from tvm_ext.cost.policy import Cost
from tvm_ext.cost.post_build import post_build_cost
from tvm_ext.kernel_tuner.cost_models import Pricer
from tvm_ext.kernel_tuner.prune_stats import PruneStats
from tvm_ext.records.logs import run_seconds

log = logging.getLogger(__name__)
ms = tvm_api.ms
derived_object = tvm_api.derived_object
PRUNED = "pruned: proven lower bound >= incumbent"
POST_BUILD_PRUNED = "pruned after build: the machine code's lower bound >= incumbent"


@dataclass
class Pending:
    """A candidate of the batch in flight: its features, its cost (stage 2's once built) and
    the stage that dropped it (0: none; in audit mode dropped candidates are measured too)."""

    candidate: object
    features: CandidateFeatures
    cost: Cost
    dropped: int = 0
    code: CodeFacts | None = None

    @property
    def sent_to_run(self) -> bool:
        return self.dropped != 2


class PostBuildCut:
    """Stage 2 of the cut, shared by a :class:`PruningSearch`, its clones and the builder.

    The search hands it each batch it sends to build (:meth:`expect`); the builder, having
    built a batch and read each module's machine code, asks :meth:`review` which candidates
    to withhold from the run. A candidate is withheld when its stage-2 bound
    (:func:`~tvm_ext.cost.post_build.post_build_cost`) is at least the incumbent; in audit
    mode it is counted as dropped and run anyway.
    """

    def __init__(self, stats: PruneStats, cpu: str | None, prune: bool = True,
                 audit: bool = False, policy=None, coefficients=None):  # fmt: skip
        self.stats, self.cpu, self.prune, self.audit = stats, cpu, prune, audit
        self.policy, self.coefficients = policy, coefficients  # the stage-1 bound's
        self.batch: list[Pending] = []

    @property
    def enabled(self) -> bool:
        """Whether stage 2 has a machine to bound with (a CPU model's name)."""
        return self.cpu is not None

    def expect(self, batch: list[Pending]) -> None:
        """The batch the search sends to build next."""
        self.batch = batch

    def owns(self, build_inputs) -> bool:
        """Whether ``build_inputs`` are this cut's batch (same modules, same order)."""
        return len(build_inputs) == len(self.batch) and all(
            inp.mod.same_as(p.candidate.sch.mod) for inp, p in zip(build_inputs, self.batch)
        )

    def review(self, build_inputs, code_facts) -> list[str | None] | None:
        """Per built candidate, the reason to withhold it from the run (None: run it); None
        when the batch is not this cut's. ``code_facts``: a :class:`CodeFacts` per candidate,
        None where the build failed or its code could not be read."""
        if not self.enabled or not self.owns(build_inputs):
            return None
        s, reasons = self.stats, []
        for pending, code in zip(self.batch, code_facts):
            reasons.append(None)
            if code is None:
                continue
            pending.code = code
            s.reviewed += 1
            pending.cost = post_build_cost(pending.cost, pending.features, code, self.cpu,
                                           self.policy, self.coefficients)  # fmt: skip
            bound = pending.cost.lower_bound_s
            if not self.prune or pending.dropped or bound is None or bound < s.incumbent_s:
                continue
            pending.dropped = 2
            s.drop(2, pending.cost, code)
            if s.batches:
                s.batches[-1]["dropped"] += 1
                s.batches[-1]["dropped_stage2"] = s.batches[-1].get("dropped_stage2", 0) + 1
            if not self.audit:
                s.withheld += 1
                reasons[-1] = POST_BUILD_PRUNED
        return reasons


@derived_object
class PruningSearch(ms.search_strategy.PySearchStrategy):
    """EvolutionarySearch with an admissible cut before build and after it (see the module
    docstring); ``post_build`` is stage 2, to attach to the builder
    (:meth:`~tvm_ext.kernel_tuner.builder.PersistentBuilder.attach`).

    With ``prune=False`` nothing is dropped, but every candidate is still priced and its
    measurement recorded (the same search without the cut, for comparison).
    """

    def __init__(
        self,
        inner,
        policy,
        target,
        machine,
        workload=None,
        stats: PruneStats | None = None,
        audit: bool = False,
        prune: bool = True,
        post_build: PostBuildCut | None = None,
    ):
        super().__init__()
        self.prune = prune
        if prune and not getattr(policy, "proves_bounds", False):
            raise ValueError(
                f"{type(policy).__name__} proves no lower bound: it may rank, not prune"
            )
        self.inner, self.policy, self.target = inner, policy, target
        self.machine, self.workload, self.audit = machine, workload, audit
        self.stats = stats if stats is not None else PruneStats()
        self.pricer = Pricer(policy, target, machine, workload, self.stats)
        cpu = machine.cpu if machine is not None and target.kind.name == "llvm" else None
        self.post_build = (
            post_build
            if post_build is not None
            else PostBuildCut(self.stats, cpu, prune, audit, policy, self.pricer.coeffs)
        )
        self._pending: list[Pending] = []  # the batch in flight
        self._unmeasured: list = []  # candidates cut from the batch in flight

    def _initialize_with_tune_context(self, context) -> None:
        self.inner._initialize_with_tune_context(context)

    def pre_tuning(
        self, max_trials, num_trials_per_iter, design_spaces, database=None, cost_model=None
    ) -> None:
        self.inner.pre_tuning(max_trials, num_trials_per_iter, design_spaces, database, cost_model)

    def post_tuning(self) -> None:
        self.inner.post_tuning()

    def generate_measure_candidates(self):
        while True:
            batch = self.inner.generate_measure_candidates()
            if batch is None:
                return None
            priced = [(cand, *self.pricer.price(cand)) for cand in batch]
            s = self.stats
            keep, drop = [], []
            for cand, feats, cost in priced:
                cut = (
                    self.prune
                    and cost.lower_bound_s is not None
                    and cost.lower_bound_s >= s.incumbent_s
                )
                (drop if (cut or not cost.feasible) else keep).append(Pending(cand, feats, cost))
            s.generated += len(priced)
            s.infeasible += sum(1 for p in drop if not p.cost.feasible)
            pruned = [p for p in drop if p.cost.feasible]
            for p in pruned:
                p.dropped = 1
                s.drop(1, p.cost)
            s.batches.append(
                {"generated": len(priced), "dropped": len(pruned), "incumbent_s": s.incumbent_s}
            )
            self._pending = keep + (pruned if self.audit else [])
            self._unmeasured = [p.candidate for p in drop if not (self.audit and p.dropped)]
            self.post_build.expect(self._pending)
            if self._pending:
                return [p.candidate for p in self._pending]
            # Every candidate of this batch was cut: tell the inner search they failed (so its
            # trial count advances) and ask again rather than hand over an empty batch.
            self._forward([], [])

    def _forward(self, measured, results) -> None:
        skipped = list(self._unmeasured)
        fails = [ms.runner.RunnerResult(None, PRUNED) for _ in skipped]
        self.inner.notify_runner_results(list(measured) + skipped, list(results) + fails)
        self._unmeasured = []

    def notify_runner_results(self, measure_candidates, results) -> None:
        s = self.stats
        incumbent_before = s.incumbent_s
        failures = []
        sent = 0
        for pending, result in zip(self._pending, results):
            if not pending.sent_to_run and not self.audit:
                continue  # withheld after build (stage 2): dropped, not failed
            sent += 1
            secs = run_seconds(result.run_secs)
            if secs is None:
                failures.append(failure_message(result.error_msg))
                continue
            self._record(pending, secs, incumbent_before)
        self._count_failures(failures, sent)
        self._forward(measure_candidates, results)
        self._pending = []
        self.post_build.expect([])

    def _record(self, pending: Pending, secs: float, incumbent_before: float) -> None:
        """Count one measured candidate: its bound (stage 2's when it was built and read),
        a violation, a regret, the incumbent."""
        s, cost, was_dropped = self.stats, pending.cost, bool(pending.dropped)
        s.measured += 1
        bound = cost.lower_bound_s
        s.records.append((bound, secs, cost.binding, was_dropped))
        if bound is not None and secs < bound * (1 - s.noise):
            s.violations += 1
            log.warning(
                "bound violation: measured %.3g s < lower bound %.3g s (%s)",
                secs,
                bound,
                cost.binding,
            )
        if was_dropped and secs < incumbent_before * (1 - s.noise):
            s.regrets += 1
            log.warning(
                "regret: a candidate dropped at stage %d ran %.3g s < incumbent %.3g s",
                pending.dropped,
                secs,
                incumbent_before,
            )
        if not was_dropped:
            s.incumbent_s = min(s.incumbent_s, secs)

    def _count_failures(self, failures: list[str], sent: int) -> None:
        s = self.stats
        s.failed += len(failures)
        if failures and s.first_failure is None:
            s.first_failure = failures[0]
        if s.batches:
            s.batches[-1]["failed"] = len(failures)
        if 2 * len(failures) > sent:
            log.warning(
                "%d of %d candidates of this batch failed to build or run; the first: %s",
                len(failures),
                sent,
                failures[0],
            )

    def clone(self):
        return PruningSearch(
            self.inner.clone(),
            self.policy,
            self.target,
            self.machine,
            self.workload,
            self.stats,
            self.audit,
            self.prune,
            self.post_build,
        )


def failure_message(error_msg) -> str:
    """A failed candidate's error in one line: the first line of MetaSchedule's message, and
    its last (where a traceback ends with the exception itself)."""
    lines = [line.strip() for line in str(error_msg or "no error message").splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return "no error message"
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
