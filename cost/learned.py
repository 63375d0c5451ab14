"""The learned policy: gradient-boosted trees that predict a candidate's run time.

:class:`XGBoostPolicy` is trained on a :func:`~tvm_ext.cost.dataset` frame. Its inputs are our
candidate facts (``f_*``), the roofline policy's arms (``rf_log_*``) and MetaSchedule's
per-store summary (``ms_*``); its label is how far above its roofline bound a candidate ran,
``log10(seconds / bound)``, so one model carries over between workloads of different sizes
(a workload's absolute time is the bound's business, the residual the trees'). The predicted
time is ``bound * 10**prediction``: seconds, not MetaSchedule's normalized score.

Saved and loaded as JSON (XGBoost's own JSON model inside ours, with the feature names, the
seed, the training parameters and provenance); never pickled. It ranks; it never prunes.
"""

from __future__ import annotations

import datetime
import json
import math
import pathlib
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np

from tvm_ext.base.errors import DatasetError, ModelFileError, PolicyError

from .features import CandidateFeatures
from .policy import Cost, ExecutionCostPolicy, read_policy_file
from .roofline import RooflinePolicy
from .training_data import check_training_data, feature_columns, numeric_features, store_columns

MODEL_SCHEMA = 1
MIN_TRAINING_ROWS = 50
DEFAULT_PARAMS = {
    "objective": "reg:squarederror",
    "max_depth": 6,
    "eta": 0.05,
    "subsample": 0.8,
    "colsample_bytree": 0.5,
    "min_child_weight": 2,
    "nthread": 1,  # deterministic, and it never competes with a measurement
}
ROUNDS = 400


class XGBoostPolicy(ExecutionCostPolicy):
    """Predicted seconds from boosted trees over candidate facts (see the module docstring)."""

    name = "xgboost"
    proves_bounds = False
    basis = RooflinePolicy.basis
    #: The candidate's features must include MetaSchedule's per-store summary.
    needs_store_features = True

    def __init__(self, booster, columns: Sequence[str], *, seed: int, params, provenance):
        self.booster = booster
        self.columns = tuple(columns)
        self.seed = int(seed)
        self.params = MappingProxyType(dict(params))
        self.provenance = MappingProxyType(dict(provenance))
        self._roofline = RooflinePolicy()

    def __repr__(self) -> str:
        rows = self.provenance.get("rows", "?")
        return f"XGBoostPolicy(seed={self.seed}, trained on {rows} rows)"

    # -- training --------------------------------------------------------------------------
    @classmethod
    def train(
        cls, data, *, seed: int = 0, params: Mapping | None = None, rounds: int = ROUNDS
    ) -> "XGBoostPolicy":
        """Fit the model to the measured rows of ``data`` with an explicit ``seed``."""
        import xgboost as xgb  # lazy: xgboost costs ~0.4 s to import

        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"seed={seed!r} must be an int")
        data = check_training_data(data, MIN_TRAINING_ROWS, ("rf_log_bound",))
        data = data[np.isfinite(data["rf_log_bound"].astype(float))].reset_index(drop=True)
        if len(data) < MIN_TRAINING_ROWS:
            raise DatasetError(
                f"{len(data)} rows have a roofline bound; at least {MIN_TRAINING_ROWS} needed"
            )
        columns = feature_columns(data)
        x = data[columns].to_numpy(dtype="float64")
        y = np.log10(data["seconds"].to_numpy(dtype="float64")) - data["rf_log_bound"].to_numpy(
            dtype="float64"
        )
        params = dict(DEFAULT_PARAMS, **(params or {}), seed=seed)
        booster = xgb.train(params, xgb.DMatrix(x, label=y, feature_names=columns), rounds)
        provenance = {
            "trained": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "rows": len(data),
            "rounds": rounds,
            "workloads": sorted(set(data["workload"])),
            "cpu_models": sorted({str(m) for m in data.get("cpu_model", [])}),
            "targets": sorted({str(m) for m in data.get("target", [])}),
            "label": "log10(seconds / roofline lower bound)",
        }
        return cls(booster, columns, seed=seed, params=params, provenance=provenance)

    # -- prediction ------------------------------------------------------------------------
    def predict_rows(self, data) -> np.ndarray:
        """Predicted seconds for each row of a dataset frame."""
        absent = [c for c in self.columns if c not in data.columns]
        if absent:
            raise DatasetError(f"the rows lack {len(absent)} model inputs, e.g. {absent[0]}")
        x = data[list(self.columns)].to_numpy(dtype="float64")
        residual = self.booster.inplace_predict(x)
        return 10.0 ** (data["rf_log_bound"].to_numpy(dtype="float64") + residual)

    def coefficients(self, limits, basis: Sequence[str], prior) -> Mapping[str, float]:
        return self._roofline.coefficients(limits, basis, prior)

    def cost(self, candidate: CandidateFeatures, coefficients: Mapping[str, float]) -> Cost:
        if candidate.target_kind != "llvm":
            raise PolicyError(
                f"XGBoostPolicy was trained on CPU records, not {candidate.target_kind} ones",
                policy="XGBoostPolicy(xgboost)",
            )
        if candidate.store_features is None:
            raise PolicyError(
                "XGBoostPolicy needs MetaSchedule's per-store features: derive the candidate "
                "with features(..., stores=True)",
                policy="XGBoostPolicy(xgboost)",
            )
        bound = self._roofline.cost(candidate, coefficients)
        if bound.lower_bound_s is None or bound.lower_bound_s <= 0:
            raise PolicyError(
                "XGBoostPolicy predicts time relative to the roofline bound, and this "
                f"candidate has none ({dict(candidate.missing)})",
                policy="XGBoostPolicy(xgboost)",
            )
        row = numeric_features(candidate, bound) | store_columns(candidate.store_features)
        x = np.array([[row.get(c, math.nan) for c in self.columns]], dtype="float64")
        residual = float(self.booster.inplace_predict(x)[0])
        seconds = bound.lower_bound_s * 10.0**residual
        return Cost(seconds, None, "learned", MappingProxyType({"learned": seconds}))

    # -- persistence -----------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "schema": MODEL_SCHEMA,
            "kind": "tvm_ext.XGBoostPolicy",
            "seed": self.seed,
            "columns": list(self.columns),
            "params": dict(self.params),
            "provenance": dict(self.provenance),
            "booster": json.loads(bytes(self.booster.save_raw("json")).decode()),
        }

    def save(self, path) -> None:
        pathlib.Path(path).write_text(json.dumps(self.to_json()))

    @classmethod
    def load(cls, path) -> "XGBoostPolicy":
        import xgboost as xgb  # lazy: xgboost costs ~0.4 s to import

        required = ("seed", "columns", "params", "booster")
        data = read_policy_file(path, "XGBoostPolicy", MODEL_SCHEMA, required)
        booster = xgb.Booster()
        try:
            booster.load_model(bytearray(json.dumps(data["booster"]).encode()))
        except xgb.core.XGBoostError as err:
            raise ModelFileError(f"{path}: XGBoost cannot load the booster: {err}") from err
        if booster.num_features() != len(data["columns"]):
            raise ModelFileError(
                f"{path}: the booster has {booster.num_features()} inputs but "
                f"{len(data['columns'])} column names"
            )
        return cls(
            booster,
            data["columns"],
            seed=data["seed"],
            params=data["params"],
            provenance=data.get("provenance", {}),
        )
