"""The held-out protocol: how well each policy ranks candidates of workloads it never saw.

Workloads (never rows) are split into ``k`` folds; for each fold the service profile is
calibrated and the XGBoost policy trained on the other folds' rows, then every policy scores
the held-out workloads' candidates:

- ``roofline``: its ``score_s`` (no training);
- ``service``: :func:`~tvm_ext.cost.calibrate` on the training folds;
- ``xgboost``: :class:`~tvm_ext.cost.XGBoostPolicy` trained on the training folds;
- ``metaschedule-xgb (online)``: MetaSchedule's own ``XGBModel`` as it runs in a stock tune:
  cold, updated batch by batch with the held-out workload's records in measurement order;
  each candidate is scored by the model as it stood before its batch was measured (random
  scores until 100 measurements, as stock MetaSchedule does);
- ``metaschedule-xgb (warm)``: the same ``XGBModel`` updated first with the training folds'
  records (the warm start), then scoring the held-out candidates.

Per held-out workload: pairwise ranking accuracy over the pairs of candidates whose measured
times differ by more than ``tie`` (5 %: less is within run-to-run noise here; a predicted tie
counts half), top-1 and
top-5 recall of the best candidate (whether the measured best is among the policy's top k),
and the median relative error of predicted seconds where the policy predicts seconds. The
summary averages workloads equally.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
from tqdm import tqdm
from tvm_ext.cost.training_data import ReplayedLog, log_folders

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import DatasetError
from tvm_ext.hardware.machine import host_machine

from .features import CandidateFeatures
from .learned import XGBoostPolicy
from .service import ServicePolicy, calibrate
from .training_data import check_training_data

TIE = 0.05
POLICIES = (
    "roofline",
    "service",
    "xgboost",
    "metaschedule-xgb (online)",
    "metaschedule-xgb (warm)",
)
STOCK_WARMUP = 100  # XGBModel's num_warmup_samples default: random scores before that


def workload_folds(workloads, k: int, seed: int = 0) -> list[list[str]]:
    """Split workload keys into ``k`` folds, deterministically for a seed."""
    names = sorted(set(workloads))
    if k < 2 or k > len(names):
        raise DatasetError(f"{len(names)} workloads cannot make {k} held-out folds (2..n)")
    random.Random(seed).shuffle(names)
    return [sorted(names[i::k]) for i in range(k)]


def ranking_metrics(seconds, predicted, *, higher_is_better: bool = False, tie: float = TIE):
    """Pairwise accuracy, top-1/top-5 recall of ``predicted`` against measured ``seconds``."""
    t = np.asarray(seconds, dtype="float64")
    p = np.asarray(predicted, dtype="float64")
    if higher_is_better:
        p = -p
    i, j = np.triu_indices(len(t), k=1)
    distinct = np.abs(np.log(t[i] / t[j])) > math.log1p(tie)
    i, j = i[distinct], j[distinct]
    # A tie in the prediction orders nothing: it counts as a coin flip (half a pair).
    predicted_order = np.sign(p[i] - p[j])
    agree = np.where(predicted_order == 0, 0.5, np.sign(t[i] - t[j]) == predicted_order)
    order = np.argsort(p, kind="stable")
    best = int(np.argmin(t))
    return {
        "pairwise": float(agree.mean()) if len(i) else math.nan,
        "pairs": int(len(i)),
        "top1": float(best in order[:1]),
        "top5": float(best in order[:5]),
    }


def _median_rel_error(seconds, predicted) -> float:
    t = np.asarray(seconds, dtype="float64")
    return float(np.median(np.abs(np.asarray(predicted) - t) / t))


class _StockCandidates:
    """MetaSchedule measure candidates of dataset rows, replayed once from their logs."""

    def __init__(self, log_dirs):

        self.folders = {f.name: f for f in log_folders(log_dirs)}  # workload key -> folder
        self.logs: dict = {}

    def get(self, workload: str, orders):

        if workload not in self.logs:
            self.logs[workload] = ReplayedLog(self.folders[workload])
        log = self.logs[workload]
        return log.context, log.measure_candidates(orders)


def _runner_results(seconds):
    ms = tvm_api.meta_schedule()
    return [ms.runner.RunnerResult([float(s)], None) for s in seconds]


def _stock_model():
    ms = tvm_api.meta_schedule()
    return ms.cost_model.XGBModel(num_tuning_cores=1, num_warmup_samples=STOCK_WARMUP)


def _stock_online(stock: _StockCandidates, rows, batch: int, seed: int) -> np.ndarray:
    """Scores of a cold XGBModel updated batch by batch (``rows`` in measurement order)."""
    np.random.seed(seed)  # XGBModel's scores before warm-up are numpy random numbers
    model = _stock_model()
    context, cands = stock.get(rows["workload"].iloc[0], rows["order"])
    secs = rows["seconds"].to_numpy()
    scores = np.empty(len(cands))
    for start in range(0, len(cands), batch):
        part = slice(start, start + batch)
        scores[part] = model.predict(context, cands[part])
        model.update(context, cands[part], _runner_results(secs[part]))
    return scores


def _stock_warm(stock: _StockCandidates, train, test_groups, seed: int) -> dict:
    np.random.seed(seed)
    model = _stock_model()
    for workload, rows in train.groupby("workload"):
        context, cands = stock.get(workload, rows["order"])
        model.update(context, cands, _runner_results(rows["seconds"].to_numpy()))
    out = {}
    for workload, rows in test_groups:
        rows = rows.sort_values("order")
        context, cands = stock.get(workload, rows["order"])
        out[workload] = np.asarray(model.predict(context, cands))
    return out


def _service_seconds(policy: ServicePolicy, rows, machine) -> np.ndarray:
    coeffs = policy.coefficients(machine, policy.basis, None)
    out = []
    for text in rows["features_json"]:
        cand = CandidateFeatures.from_dict(json.loads(text))
        out.append(policy.cost(cand, coeffs).score_s)
    return np.asarray(out)


def evaluate_policies(
    data,
    log_dirs=None,
    *,
    k: int = 6,
    seed: int = 0,
    batch: int = 16,
    machine=None,
    progress: bool = False,
):
    """Run the held-out protocol; returns ``(per_workload, summary, fitted)`` where
    ``fitted`` holds the service profile and XGBoost policy calibrated on *all* rows (the
    frozen calibration to ship). The MetaSchedule rows need the logs (``log_dirs``) to
    replay candidates; without them those rows are left out."""
    import pandas as pd  # lazy: pandas adds ~0.3 s to `import tvm_ext`

    data = check_training_data(data, 50, ("features_json", "rf_log_score", "order"))
    machine = machine if machine is not None else host_machine()
    folds = workload_folds(data["workload"], k, seed)
    stock = _StockCandidates(log_dirs) if log_dirs is not None else None
    rows_out = []
    iterator = folds
    if progress:
        iterator = tqdm(folds, desc="held-out folds")
    for fold, held in enumerate(iterator):
        train = data[~data["workload"].isin(held)]
        test = data[data["workload"].isin(held)]
        service = ServicePolicy(calibrate(train, machine=machine))
        learned = XGBoostPolicy.train(train, seed=seed)
        groups = list(test.groupby("workload"))
        warm = _stock_warm(stock, train, groups, seed) if stock is not None else {}
        for workload, rows in groups:
            rows = rows.sort_values("order")
            secs = rows["seconds"].to_numpy()
            preds = {
                "roofline": (10.0 ** rows["rf_log_score"].to_numpy(dtype="float64"), False),
                "service": (_service_seconds(service, rows, machine), False),
                "xgboost": (learned.predict_rows(rows), False),
            }
            if stock is not None:
                preds["metaschedule-xgb (online)"] = (_stock_online(stock, rows, batch, seed), True)
                preds["metaschedule-xgb (warm)"] = (warm[workload], True)
            for name, (pred, is_score) in preds.items():
                m = ranking_metrics(secs, pred, higher_is_better=is_score)
                rows_out.append(
                    {
                        "fold": fold,
                        "workload": workload,
                        "policy": name,
                        "candidates": len(rows),
                        **m,
                        "median rel. error": math.nan
                        if is_score
                        else _median_rel_error(secs, pred),
                    }
                )
    per_workload = pd.DataFrame(rows_out)
    summary = (
        per_workload.groupby("policy", sort=False)
        .agg(
            workloads=("workload", "nunique"),
            pairwise=("pairwise", "mean"),
            top1=("top1", "mean"),
            top5=("top5", "mean"),
            median_rel_error=("median rel. error", "median"),
        )
        .reset_index()
    )
    fitted = {
        "service_profile": calibrate(data, machine=machine),
        "xgboost": XGBoostPolicy.train(data, seed=seed),
    }
    return per_workload, summary, fitted
