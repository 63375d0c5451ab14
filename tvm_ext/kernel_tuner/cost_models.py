"""A cost policy as MetaSchedule's cost model: to rank its candidates
(:class:`PolicyCostModel`), or to warm-start its online XGB model (:class:`WarmStartModel`,
:func:`pretrained_xgb_model`). The admissible cut is :mod:`tvm_ext.kernel_tuner.pruning`'s.
"""

from __future__ import annotations

import numpy as np

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import PolicyError
from tvm_ext.cost.features import CandidateFeatures, features
from tvm_ext.cost.policy import Cost, hard_constraints, validated_coefficients, validated_cost
from tvm_ext.cost.training_data import ReplayedLog, log_folders
from tvm_ext.kernel_tuner.prune_stats import PruneStats

ms = tvm_api.ms
derived_object = tvm_api.derived_object


class Pricer:
    """Prices MetaSchedule candidates with a policy; its first failure is kept on ``stats``."""

    def __init__(self, policy, target, machine, workload, stats: PruneStats | None = None):
        self.policy, self.target, self.workload, self.stats = policy, target, workload, stats
        self.coeffs = validated_coefficients(policy, machine)

    def __call__(self, candidate) -> Cost:
        return self.price(candidate)[1]

    def price(self, candidate) -> tuple[CandidateFeatures, Cost]:
        """The candidate's features and its validated cost."""
        feats = features(
            candidate.sch,
            self.target,
            self.workload,
            stores=bool(getattr(self.policy, "needs_store_features", False)),
        )
        try:
            return feats, validated_cost(
                self.policy, feats, self.coeffs, hard_constraints(feats, self.target)
            )
        except PolicyError as err:
            if self.stats is not None and self.stats.policy_error is None:
                self.stats.policy_error = err
            raise


@derived_object
class PolicyCostModel(ms.cost_model.PyCostModel):
    """A cost policy as MetaSchedule's cost model: predicts ``1 / score_s`` (higher is better);
    an infeasible candidate predicts 0. It ranks; it learns nothing from measurements."""

    def __init__(self, policy, target, machine, workload=None, stats: PruneStats | None = None):
        super().__init__()
        self.pricer = Pricer(policy, target, machine, workload, stats)

    def load(self, path: str) -> None:  # stateless: nothing to load
        pass

    def save(self, path: str) -> None:
        pass

    def update(self, context, candidates, results) -> None:
        pass

    def predict(self, context, candidates) -> np.ndarray:
        scores = np.zeros(len(candidates), dtype="float64")
        for i, cand in enumerate(candidates):
            cost = self.pricer(cand)
            scores[i] = 0.0 if not cost.feasible else 1.0 / max(cost.score_s, 1e-12)
        return scores


def _ranks(values) -> np.ndarray:
    """Ranks in [0, 1] (higher value, higher rank); ties share their mean rank."""
    values = np.asarray(values, dtype="float64")
    if len(values) < 2:
        return np.ones(len(values))
    order = values.argsort(kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values), dtype="float64")
    for v in np.unique(values):  # average ties
        tied = values == v
        ranks[tied] = ranks[tied].mean()
    return ranks / (len(values) - 1)


@derived_object
class WarmStartModel(ms.cost_model.PyCostModel):
    """A trained policy (e.g. :class:`~tvm_ext.cost.XGBoostPolicy`) as the warm start of
    MetaSchedule's online XGB model.

    Stock MetaSchedule scores candidates at random until its model has seen ``handoff``
    (100) measurements of the task. Here the trained policy scores them instead; from then on
    the score is the mean of the two models' ranks, and every measurement still trains the
    online model as in a stock tune.
    """

    def __init__(self, policy, target, machine, workload=None, online=None, handoff: int = 100):
        super().__init__()
        self.pricer = Pricer(policy, target, machine, workload)
        cores = int(target.attrs["num-cores"]) if target.kind.name == "llvm" else 1
        self.online = (
            online
            if online is not None
            else ms.cost_model.XGBModel(num_tuning_cores=max(cores, 1), num_warmup_samples=handoff)
        )
        self.handoff, self.seen = handoff, 0

    def load(self, path: str) -> None:
        self.online.load(path)

    def save(self, path: str) -> None:
        self.online.save(path)

    def update(self, context, candidates, results) -> None:
        self.online.update(context, candidates, results)
        self.seen += len(candidates)

    def predict(self, context, candidates) -> np.ndarray:
        prior = np.array(
            [1.0 / max(self.pricer(c).score_s, 1e-12) for c in candidates], dtype="float64"
        )
        if self.seen < self.handoff:
            return prior
        online = np.asarray(self.online.predict(context, candidates), dtype="float64")
        return (_ranks(prior) + _ranks(online)) / 2.0


def pretrained_xgb_model(log_dirs, *, exclude=(), num_tuning_cores: int = 1):
    """MetaSchedule's own ``XGBModel`` updated first with the records of ``log_dirs`` (one
    update per workload, as its per-workload normalization expects), skipping the workload
    keys in ``exclude``: stock MetaSchedule warm-started from past measurements."""

    model = ms.cost_model.XGBModel(num_tuning_cores=num_tuning_cores)
    for folder in log_folders(log_dirs):
        if folder.name in exclude:
            continue
        log_ = ReplayedLog(folder)
        measured = [(o, s) for o, s, sch, _ in log_.entries if sch is not None]
        if not measured:
            continue
        cands = log_.measure_candidates([o for o, _ in measured])
        results = [ms.runner.RunnerResult([float(s)], None) for _, s in measured]
        model.update(log_.context, cands, results)
    return model
