"""The dataset, the service and learned policies, the held-out protocol and warm starts."""

from __future__ import annotations

import json
import math
import pathlib
import shutil

import numpy as np
import pytest
from tvm_ext.cost import (
    CandidateFeatures,
    ServicePolicy,
    ServiceProfile,
    XGBoostPolicy,
    calibrate,
    dataset,
    evaluate,
    features,
)
from tvm_ext.cost.heldout import evaluate_policies, ranking_metrics, workload_folds
from tvm_ext.cost.policy import validated_cost
from tvm_ext.cost.training_data import ReplayedLog, feature_columns, read_frame

from tvm_ext import host_target, kernels
from tvm_ext.base.errors import CorruptLog, DatasetError, ModelFileError, PolicyError

DATA = pathlib.Path(__file__).resolve().parents[1] / "tuning_logs" / "dataset"
SMALL = "matmul_M128_N128_K128_float32"


def _folder(key: str) -> pathlib.Path:
    found = sorted(DATA.glob(f"*/{key}"))
    assert found, f"the shipped dataset lacks {key}"
    return found[0]


@pytest.fixture(scope="module")
def data():
    """The shipped dataset's rows as the frozen held-out run priced them (``policies/``):
    ``dataset(DATA)`` derives them again in ~35 s, and tests/test_heldout.py checks that two
    logs re-price to exactly these rows (the slow tier every log)."""
    return read_frame(DATA / "policies" / "dataset.csv.gz")


@pytest.fixture(scope="module")
def subset(data):
    keep = sorted(data["workload"].unique())[::3]
    return data[data["workload"].isin(keep)].reset_index(drop=True)


def _copy_log(key: str, dest: pathlib.Path) -> pathlib.Path:
    folder = dest / "llvm-test" / key
    shutil.copytree(_folder(key), folder, ignore=shutil.ignore_patterns("features-*", ".lock"))
    return folder


def test_shipped_dataset_is_large_and_clean(data):
    assert data["workload"].nunique() >= 12
    assert data["kernel"].nunique() >= 5
    assert len(data) >= 2000
    assert (data["status"] == "ok").all() and (data["seconds"] > 0).all()
    cols = feature_columns(data)
    for prefix in ("f_", "rf_log_", "ms_mean_", "ms_max_"):
        assert any(c.startswith(prefix) for c in cols), prefix
    # One row per record: measurement order is unique within a workload.
    assert not data.duplicated(["workload", "order"]).any()


def test_dataset_keeps_failures_apart_and_matches_its_cache(tmp_path, data, monkeypatch, machine):
    folder = _copy_log(SMALL, tmp_path)
    records = folder / "database_tuning_record.json"
    first = json.loads(records.read_text().splitlines()[0])
    first[1][1] = [1e10]  # how MetaSchedule records a failed run
    with records.open("a") as f:
        f.write(json.dumps(first) + "\n")
    full = dataset(folder, include_failed=True, cache=False, machine=machine)
    failed = full[full["status"] == "failed"]
    assert len(failed) == 1 and math.isnan(failed["seconds"].iloc[0])
    measured = dataset(folder, cache=False, machine=machine)
    assert len(measured) == len(full) - 1 and measured["seconds"].notna().all()
    # Replaying the log gives the shipped rows (machine-independent columns).
    shipped = data[data["workload"] == SMALL].sort_values("order").reset_index(drop=True)
    cols = [c for c in feature_columns(shipped) if c.startswith(("f_", "ms_"))]
    np.testing.assert_allclose(
        measured[cols].to_numpy(float), shipped[cols].to_numpy(float), rtol=1e-6
    )
    # The cache is written to the cache directory (never into the log), read back identically.
    monkeypatch.setenv("TVM_EXT_CACHE_DIR", str(tmp_path / "cache"))
    first_load = dataset(folder, machine=machine)  # the session's model: no second probe
    assert not list(folder.glob("features-*")) and len(list(tmp_path.rglob("features-*"))) == 1
    np.testing.assert_allclose(
        dataset(folder, machine=machine)[cols].to_numpy(float), first_load[cols].to_numpy(float)
    )


def test_dataset_refuses_corrupt_logs(tmp_path):
    folder = _copy_log(SMALL, tmp_path)
    with (folder / "database_tuning_record.json").open("a") as f:
        f.write('[0, ["not a trace"\n')
    with pytest.raises(CorruptLog, match="line"):
        dataset(folder, cache=False)
    with pytest.raises(Exception, match="no tuning log"):
        dataset(tmp_path / "nothing")


def test_calibrated_profile_round_trips(subset, tmp_path):
    profile = calibrate(subset)
    coeffs = profile.coefficients()
    assert all(math.isfinite(v) and v >= 0 for v in coeffs.values())
    assert any(v > 0 for v in coeffs.values())
    assert profile.provenance["rows"] > 0 and profile.provenance["workloads"]
    path = tmp_path / "profile.json"
    profile.save(path)
    loaded = ServiceProfile.load(path)
    assert loaded.coefficients() == coeffs and loaded.capacity == profile.capacity
    w = kernels.matmul(64, 64, 64)
    target = host_target()
    a = evaluate(ServicePolicy(profile), w.func, target, workload=w)
    b = evaluate(ServicePolicy(loaded), w.func, target, workload=w)
    assert a.score_s == b.score_s > 0 and a.lower_bound_s is None  # ranks, never bounds


def test_service_policy_refuses_unavailable_facts(subset):
    profile = calibrate(subset)
    policy = ServicePolicy(profile)
    cand = CandidateFeatures.from_dict(json.loads(subset["features_json"].iloc[0]))
    blind = CandidateFeatures.from_dict(
        cand.to_dict() | {"blocks": [], "missing": {"blocks": "call to my_intrinsic"}}
    )
    coeffs = policy.coefficients(None, policy.basis, None)
    with pytest.raises(PolicyError, match="my_intrinsic"):
        validated_cost(policy, blind, coeffs)
    no_bytes = CandidateFeatures.from_dict(cand.to_dict() | {"bytes": {"dram": None}})
    with pytest.raises(PolicyError, match="memory traffic"):
        validated_cost(policy, no_bytes, coeffs)


@pytest.mark.parametrize(
    "content, match",
    [
        ("{not json", "cannot read"),
        ('{"kind": "something else"}', "not a tvm_ext ServiceProfile"),
        ('{"kind": "tvm_ext.ServiceProfile", "schema": 99}', "schema"),
        ('{"kind": "tvm_ext.ServiceProfile", "schema": 1, "capacity": 2}', "lacks"),
    ],
)
def test_profile_file_errors(tmp_path, content, match):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(ModelFileError, match=match):
        ServiceProfile.load(path)


def test_profile_rejects_negative_price(subset, tmp_path):
    data = calibrate(subset).to_json() | {"dram_byte_s": -1.0}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ModelFileError, match="dram_byte_s"):
        ServiceProfile.load(path)


def test_calibrate_needs_data(subset):
    with pytest.raises(DatasetError, match="at least"):
        calibrate(subset.head(3))
    with pytest.raises(DatasetError, match="features_json"):
        calibrate(subset.drop(columns=["features_json"]))


def test_xgboost_seed_and_json_round_trip(subset, tmp_path):
    a = XGBoostPolicy.train(subset, seed=0, rounds=40)
    b = XGBoostPolicy.train(subset, seed=0, rounds=40)
    c = XGBoostPolicy.train(subset, seed=1, rounds=40)
    pa, pb, pc = (p.predict_rows(subset) for p in (a, b, c))
    assert np.array_equal(pa, pb)
    assert not np.array_equal(pa, pc)  # subsampling depends on the seed
    assert np.all(pa > 0) and np.all(np.isfinite(pa))
    path = tmp_path / "model.json"
    a.save(path)
    assert json.loads(path.read_text())["kind"] == "tvm_ext.XGBoostPolicy"  # JSON, no pickle
    loaded = XGBoostPolicy.load(path)
    assert np.array_equal(loaded.predict_rows(subset), pa)
    assert loaded.seed == 0 and loaded.columns == a.columns


def test_xgboost_prices_a_live_candidate_like_its_dataset_row(subset, tmp_path):
    policy = XGBoostPolicy.train(subset, seed=0, rounds=40)
    folder = _copy_log(SMALL, tmp_path)
    rows = dataset(folder, cache=False)  # priced with this machine's model, like evaluate()
    log = ReplayedLog(folder)
    order, _, sch, _ = next(e for e in log.entries if e[2] is not None)
    live = evaluate(policy, sch, log.target, workload=log.workload)
    row = rows[rows["order"] == order]
    assert live.lower_bound_s is None and live.binding == "learned"
    assert live.score_s == pytest.approx(float(policy.predict_rows(row)[0]), rel=1e-5)


def test_xgboost_refusals(subset, tmp_path):
    policy = XGBoostPolicy.train(subset, seed=0, rounds=10)
    w = kernels.matmul(64, 64, 64)
    cand = features(w.func, host_target(), w)  # no per-store features
    with pytest.raises(PolicyError, match="per-store"):
        validated_cost(policy, cand, policy.coefficients(None, policy.basis, None))
    path = tmp_path / "m.json"
    policy.save(path)
    data = json.loads(path.read_text())
    path.write_text(path.read_text()[:1000])
    with pytest.raises(ModelFileError, match="cannot read"):
        XGBoostPolicy.load(path)
    path.write_text(json.dumps(data | {"columns": data["columns"][:5]}))
    with pytest.raises(ModelFileError, match="inputs"):
        XGBoostPolicy.load(path)
    path.write_text(json.dumps(data | {"schema": 7}))
    with pytest.raises(ModelFileError, match="schema"):
        XGBoostPolicy.load(path)
    with pytest.raises(DatasetError):
        XGBoostPolicy.train(subset.head(10), seed=0)
    with pytest.raises(TypeError, match="seed"):
        XGBoostPolicy.train(subset, seed="0")


def test_ranking_metrics():
    t = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert ranking_metrics(t, t) == {"pairwise": 1.0, "pairs": 15, "top1": 1.0, "top5": 1.0}
    rev = ranking_metrics(t, t[::-1])
    assert rev["pairwise"] == 0.0 and rev["top1"] == 0.0 and rev["top5"] == 0.0
    assert ranking_metrics(t, [1.0] * 6)["pairwise"] == 0.5  # a predicted tie is a coin flip
    # Pairs within 5 % are noise, not ranked.
    assert ranking_metrics([1.0, 1.01, 2.0], [2.0, 1.0, 3.0])["pairs"] == 2
    # Scores (higher is better) rank the other way.
    assert ranking_metrics(t, [1 / x for x in t], higher_is_better=True)["pairwise"] == 1.0


def test_workload_folds_never_split_a_workload():
    names = [f"w{i}" for i in range(7)] * 3
    folds = workload_folds(names, 3, seed=0)
    flat = [w for fold in folds for w in fold]
    assert sorted(flat) == sorted(set(names)) and len(flat) == len(set(flat))
    assert folds == workload_folds(names, 3, seed=0)
    with pytest.raises(DatasetError):
        workload_folds(names, 8)


@pytest.mark.slow  # ~19 s; the protocol is also run, and checked, by test_heldout's command test
def test_evaluate_policies_on_held_out_workloads(data):
    keep = sorted(data["workload"].unique())[:3]
    small = data[data["workload"].isin(keep)]
    per, summary, fitted = evaluate_policies(small, DATA, k=3, seed=0)
    assert set(summary["policy"]) == {
        "roofline",
        "service",
        "xgboost",
        "metaschedule-xgb (online)",
        "metaschedule-xgb (warm)",
    }
    assert (summary["workloads"] == 3).all()
    assert per["pairwise"].between(0, 1).all() and per["top5"].isin([0.0, 1.0]).all()
    assert per.groupby("workload")["fold"].nunique().eq(1).all()
    assert isinstance(fitted["service_profile"], ServiceProfile)
    assert isinstance(fitted["xgboost"], XGBoostPolicy)


def test_held_out_workloads_are_scored_only_by_policies_that_never_saw_them(data, monkeypatch):
    """Every trained part of the protocol (calibration, XGBoost, the warm-started stock model)
    is fitted, per fold, on rows of the other folds' workloads only; the last fit of each (the
    shipped model) is on everything."""
    from tvm_ext.cost import heldout

    keep = sorted(data["workload"].unique())[:4]
    small = data[data["workload"].isin(keep)]
    seen = {"calibrate": [], "xgboost": [], "warm": []}
    real_calibrate, real_train = heldout.calibrate, XGBoostPolicy.train

    def calibrate_spy(train, **kw):
        seen["calibrate"].append(set(train["workload"]))
        return real_calibrate(train, **kw)

    def train_spy(train, **kw):
        seen["xgboost"].append(set(train["workload"]))
        return real_train(train, rounds=20, **{k: v for k, v in kw.items() if k != "rounds"})

    def warm_spy(stock, train, groups, seed):
        seen["warm"].append(set(train["workload"]))
        return {w: np.zeros(len(rows)) for w, rows in groups}  # no replay: only who trains

    monkeypatch.setattr(heldout, "calibrate", calibrate_spy)
    monkeypatch.setattr(heldout.XGBoostPolicy, "train", staticmethod(train_spy))
    monkeypatch.setattr(heldout, "_StockCandidates", lambda log_dirs: object())
    monkeypatch.setattr(heldout, "_stock_online", lambda stock, rows, b, s: np.zeros(len(rows)))
    monkeypatch.setattr(heldout, "_stock_warm", warm_spy)
    per, _, _ = evaluate_policies(small, DATA, k=2, seed=0)
    everything = set(keep)
    scored = per.groupby("fold")["workload"].agg(set).to_dict()
    assert sorted(scored) == [0, 1] and set().union(*scored.values()) == everything
    for part in ("calibrate", "xgboost", "warm"):
        per_fold = seen[part][:2]
        assert len(per_fold) == 2, part
        for fold, trained_on in enumerate(per_fold):
            held = scored[fold]
            assert not trained_on & held, f"{part} of fold {fold} saw {trained_on & held}"
            assert trained_on == everything - held, part  # and every other workload
    # The shipped fits (after the folds) use every workload.
    assert seen["calibrate"][2:] == [everything] and seen["xgboost"][2:] == [everything]


def test_tune_ranks_with_a_learned_policy(subset, tmp_path):
    from tvm_ext.kernel_tuner.tuner import tune

    policy = XGBoostPolicy.train(subset, seed=0, rounds=30)
    path = tmp_path / "m.json"
    policy.save(path)
    w = kernels.matmul(64, 64, 64)
    r = tune(
        w.func,
        host_target(),
        trials=8,
        batch=8,
        seed=0,
        policy=XGBoostPolicy.load(path),
        progress=False,
        hand_schedule=False,
        log_dir=tmp_path / "logs",
    )
    assert r.measurement.max_rel_error < 1e-4 and r.stats["measured"] > 0
    assert r.source == "search" and r.stats["hand_s"] is None
    manifest = json.loads(pathlib.Path(r.log_folder, "manifest.json").read_text())
    assert manifest["policy"] == "XGBoostPolicy"


def test_warm_start_models(subset):
    from tvm_ext.base.tvm_api import meta_schedule
    from tvm_ext.hardware.machine import host_machine
    from tvm_ext.kernel_tuner.cost_models import WarmStartModel, pretrained_xgb_model

    ms = meta_schedule()
    policy = XGBoostPolicy.train(subset, seed=0, rounds=20)
    log = ReplayedLog(_folder(SMALL))
    measured = [(o, s) for o, s, sch, _ in log.entries if sch is not None][:40]
    cands = log.measure_candidates([o for o, _ in measured])
    machine = host_machine()  # this host's model (the log's CPU may be one this host can't run)
    model = WarmStartModel(policy, log.target, machine, log.workload, handoff=20)
    before = model.predict(log.context, cands)
    expected = [
        1 / evaluate(policy, c.sch, log.target, machine=machine, workload=log.workload).score_s
        for c in cands
    ]
    np.testing.assert_allclose(before, expected, rtol=1e-6)  # the trained policy, no noise
    results = [ms.runner.RunnerResult([s], None) for _, s in measured[:20]]
    model.update(log.context, cands[:20], results)
    after = model.predict(log.context, cands)
    assert np.all((after >= 0) & (after <= 1)) and not np.allclose(after, before)
    # MetaSchedule's own model, warm-started from the log's records, ranks those candidates as
    # they measured; a cold model scores at random (about half of the pairs right).
    stock = pretrained_xgb_model(_folder(SMALL))
    warm = ranking_metrics([s for _, s in measured], stock.predict(log.context, cands),
                           higher_is_better=True)  # fmt: skip
    assert warm["pairwise"] >= 0.8, warm
