"""The counters of one tune's cut (shared by a search, its clones, the post-build cut and the
cost model that prices candidates), and what they add up to."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tvm_ext.base.errors import PolicyError
from tvm_ext.built_code.machine_code import CodeFacts
from tvm_ext.cost.policy import Cost


@dataclass
class PruneStats:
    """Counters shared by a search and its clones (``tune_tir`` runs a clone)."""

    incumbent_s: float = math.inf  # best time measured so far (or the initial cut)
    initial_cut_s: float = math.inf  # the hand schedule's time, if one was measured first
    noise: float = 0.05  # relative margin for regrets and violations
    generated: int = 0
    dropped: int = 0  # both stages
    dropped_stage1: int = 0  # before build (the TIR's bound)
    dropped_stage2: int = 0  # after build, before the run (the machine code's bound)
    dropped_by_initial_cut: int = 0  # dropped while the incumbent was still the initial cut
    withheld: int = 0  # dropped at stage 2 and not run (all of them, unless in audit mode)
    reviewed: int = 0  # built candidates whose machine code stage 2 read
    measured: int = 0
    failed: int = 0  # sent to be built and run, and failed (build error, crash, timeout, ...)
    first_failure: str | None = None  # the first failure's message
    infeasible: int = 0
    regrets: int = 0
    violations: int = 0
    batches: list = field(default_factory=list)  # per batch: generated, dropped, incumbent
    records: list = field(default_factory=list)  # (lower bound, measured s, binding, dropped)
    # Every dropped candidate: stage, bound, binding arm, the incumbent it was cut at (and at
    # stage 2 the widest register of its arithmetic).
    dropped_records: list = field(default_factory=list)
    first_measured_s: float | None = None  # seconds from the tune's start to the first result
    # A PolicyError raised inside a MetaSchedule callback reaches the caller as a plain
    # RuntimeError (the FFI keeps the message, not the type): the first one is kept here, on
    # the object the search, its clones and the cost model share, and re-raised as itself.
    policy_error: PolicyError | None = None

    def as_dict(self) -> dict:
        keys = (
            "generated",
            "dropped",
            "dropped_stage1",
            "dropped_stage2",
            "dropped_by_initial_cut",
            "withheld",
            "reviewed",
            "measured",
            "failed",
            "infeasible",
            "regrets",
            "violations",
        )
        return {k: getattr(self, k) for k in keys} | {
            "incumbent_s": self.incumbent_s,
            "initial_cut_s": self.initial_cut_s,
            "noise": self.noise,  # the margin regrets and violations are counted beyond
            "records": list(self.records),
            "dropped_records": list(self.dropped_records),
        }

    def drop(self, stage: int, cost: Cost, code: CodeFacts | None = None) -> None:
        """Count one candidate dropped at ``stage`` (1 or 2) and keep its bound and arm."""
        self.dropped += 1
        if stage == 1:
            self.dropped_stage1 += 1
        else:
            self.dropped_stage2 += 1
        if self.incumbent_s == self.initial_cut_s:
            self.dropped_by_initial_cut += 1
        entry = {"stage": stage, "bound_s": cost.lower_bound_s, "binding": cost.binding,
                 "incumbent_s": self.incumbent_s}  # fmt: skip
        if code is not None:
            entry["register"] = code.widest_register
        self.dropped_records.append(entry)
