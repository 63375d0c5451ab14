"""The frozen held-out figures (``tuning_logs/dataset/policies/``) against a re-run of the
protocol on a slice of the shipped dataset, and ``tvm-ext evaluate-policies`` itself.

The slice is one fold of the frozen run: its workloads are held out and every policy is fitted
on the other folds' rows, exactly as in the full run, so its per-workload figures must match
the frozen ones. The protocol re-runs on the priced rows the frozen run wrote
(``dataset.csv.gz``); that those rows are what the logs give, priced with the frozen machine
model, is checked by re-pricing two logs here and every log in the slow tier. The service
policy's figures depend on the cache sizes of the machine that froze them (recorded in the
frozen profile); the rest depend only on the priced columns and the seed."""

from __future__ import annotations

import json
import math
import pathlib
import shutil

import numpy as np
import pandas as pd
import pytest
from tvm_ext.cost import ServiceProfile, XGBoostPolicy, dataset, heldout
from tvm_ext.cost.training_data import read_frame

from tvm_ext.commands.cli import DATASET_FILE
from tvm_ext.hardware.machine_model import MachineModel

DATA = pathlib.Path(__file__).resolve().parents[1] / "tuning_logs" / "dataset"
FROZEN = DATA / "policies"
FOLD = 3  # the frozen run's fold 3: softmax x2 and a batch_matmul (476 candidates)
STOCK = ("metaschedule-xgb (online)", "metaschedule-xgb (warm)")


@pytest.fixture(scope="module")
def frozen():
    return json.loads((FROZEN / "heldout.json").read_text())


@pytest.fixture(scope="module")
def frozen_machine():
    """The machine model that priced the frozen run's roofline columns (its probed bandwidths
    and cache sizes): a fresh probe on any host reads a little differently."""
    return MachineModel.from_json(json.loads((FROZEN / "machine.json").read_text()))


@pytest.fixture(scope="module")
def data():
    """The rows the frozen run evaluated (checked against the logs by the two tests below)."""
    return read_frame(FROZEN / DATASET_FILE)


REPRICED = (
    "conv2d_N1_C16_H28_W28_F16_KH3_KW3_stride1_padding1_float32",
    "softmax_M512_N256_float32",
)


def _check_priced_rows(data, frozen_machine, workloads) -> None:
    """The frozen rows of ``workloads`` are their logs' rows priced again with the frozen
    machine model, not from a cache another test may have priced on this host."""
    for key in workloads:
        (folder,) = DATA.glob(f"*/{key}")
        fresh = dataset(folder, machine=frozen_machine, cache=False)
        kept = data[data["workload"] == key].reset_index(drop=True)
        assert len(kept) == len(fresh) > 0, key
        pd.testing.assert_frame_equal(
            kept[fresh.columns], fresh, check_dtype=False, rtol=1e-9, obj=key
        )


def test_frozen_rows_are_two_logs_priced_again(data, frozen_machine):
    _check_priced_rows(data, frozen_machine, REPRICED)


@pytest.mark.slow
def test_frozen_rows_are_every_log_priced_again(data, frozen_machine):
    _check_priced_rows(data, frozen_machine, sorted(data["workload"].unique()))


def _run_fold(data, frozen, machine, monkeypatch, log_dirs):
    """The protocol's own code over the frozen run's fold ``FOLD`` alone."""
    folds = heldout.workload_folds(data["workload"], frozen["folds"], frozen["seed"])
    frozen_folds = {r["workload"]: r["fold"] for r in frozen["per_workload"]}
    assert {w: i for i, f in enumerate(folds) for w in f} == frozen_folds  # same partition
    monkeypatch.setattr(heldout, "workload_folds", lambda names, k, seed=0: [folds[FOLD]])
    per, _, fitted = heldout.evaluate_policies(
        data, log_dirs, k=frozen["folds"], seed=frozen["seed"], machine=machine
    )
    return folds[FOLD], per, fitted


def _compare(per, frozen, held, policies) -> None:
    expected = [r for r in frozen["per_workload"] if r["workload"] in held]
    expected = [r for r in expected if r["policy"] in policies]
    assert len(expected) == len(held) * len(policies)
    for want in expected:
        got = per[(per["workload"] == want["workload"]) & (per["policy"] == want["policy"])]
        assert len(got) == 1, (want["workload"], want["policy"])
        got = got.iloc[0]
        where = f"{want['workload']} / {want['policy']}"
        assert int(got["candidates"]) == want["candidates"] and int(got["pairs"]) == want["pairs"]
        for key in ("pairwise", "top1", "top5", "median rel. error"):
            a, b = float(got[key]), float(want[key])
            assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9), (
                where,
                key,
                a,
                b,
            )


def test_frozen_held_out_figures_match_a_rerun_of_one_fold(data, frozen, frozen_machine,
                                                           monkeypatch):  # fmt: skip
    """Roofline, service and XGBoost rows of one fold (the stock MetaSchedule rows replay
    every training log: the slow tier checks them)."""
    assert frozen["dataset"]["rows"] == len(data)
    assert frozen["dataset"]["workloads"] == sorted(data["workload"].unique())
    held, per, fitted = _run_fold(data, frozen, frozen_machine, monkeypatch, None)
    _compare(per, frozen, held, ("roofline", "service", "xgboost"))
    # The models fitted on every row are the frozen ones.
    shipped = XGBoostPolicy.load(FROZEN / "xgboost_policy.json")
    np.testing.assert_allclose(
        fitted["xgboost"].predict_rows(data), shipped.predict_rows(data), rtol=1e-6
    )
    profile = ServiceProfile.load(FROZEN / "service_profile.json")
    coefficients = fitted["service_profile"].coefficients()
    assert coefficients.keys() == profile.coefficients().keys()
    for unit, value in profile.coefficients().items():
        assert coefficients[unit] == pytest.approx(value, rel=1e-6, abs=1e-30), unit
    assert fitted["service_profile"].capacity == profile.capacity


@pytest.mark.slow
def test_frozen_stock_model_figures_match_a_rerun_of_one_fold(data, frozen, frozen_machine,
                                                              monkeypatch):  # fmt: skip
    held, per, _ = _run_fold(data, frozen, frozen_machine, monkeypatch, DATA)
    _compare(per, frozen, held, ("roofline", "service", "xgboost", *STOCK))


def test_evaluate_policies_command_writes_what_the_protocol_computes(data, tmp_path, machine):
    """``tvm-ext evaluate-policies`` on two shipped logs: its files hold the protocol's
    figures for those logs, and the calibration and model it writes load and are the fits
    on every row."""
    from tvm_ext.cost import calibrate

    from tvm_ext.commands import cli

    keep = sorted(data["workload"].unique())[::9]  # two logs: two folds
    logs = tmp_path / "logs"
    for key in keep:
        (src,) = DATA.glob(f"*/{key}")
        shutil.copytree(src, logs / src.parent.name / key, ignore=shutil.ignore_patterns(".lock"))
    out = tmp_path / "out"
    argv = ["evaluate-policies", "--logs", str(logs), "--folds", "2", "--no-stock"]
    assert cli.main([*argv, "--out", str(out)]) == 0
    written = json.loads((out / "heldout.json").read_text())
    # The command prices its dataset with this host's machine model: so does the check.
    small = dataset(logs, machine=machine, cache=False)
    per, summary, _ = heldout.evaluate_policies(small, None, k=2, seed=0, machine=machine)
    assert written["folds"] == 2 and written["dataset"]["workloads"] == keep
    assert written["dataset"]["rows"] == len(small)
    assert {r["policy"] for r in written["summary"]} == {"roofline", "service", "xgboost"}
    assert written["per_workload"] == json.loads(
        json.dumps(per.to_dict(orient="records"), default=float)
    )
    assert (out / "heldout.md").read_text().count("\n") == len(summary) + 2
    model = XGBoostPolicy.load(out / "xgboost_policy.json")
    np.testing.assert_allclose(
        model.predict_rows(small), XGBoostPolicy.train(small, seed=0).predict_rows(small)
    )
    profile = ServiceProfile.load(out / "service_profile.json")
    assert profile.coefficients() == calibrate(small, machine=machine).coefficients()
