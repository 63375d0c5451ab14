"""Faults during a tune: crashing, hanging and raising candidates are recorded as failed runs;
the search goes on and the log keeps every record."""

from __future__ import annotations

import functools
import json

from tvm_ext import kernels as K
from tvm_ext.base import tvm_api
from tvm_ext.records.logs import run_seconds
from tvm_ext.search.testing import faulty_run_evaluator


def test_crashing_and_hanging_candidates_are_failed_records(tmp_path, host):
    from tvm_ext.cost import dataset

    from tvm_ext.search.tuner import tune

    ms = tvm_api.meta_schedule()
    state = tmp_path / "runs"
    state.mkdir()
    plan = {1: "crash", 3: "hang", 5: "raise"}
    runner = ms.runner.LocalRunner(
        timeout_sec=5,
        f_run_evaluator=functools.partial(faulty_run_evaluator, str(state), plan),
        initializer=functools.partial(tvm_api.set_runner_threads, 2),
    )
    w = K.matmul(32, 32, 32)
    result = tune(
        w.func,
        host,
        trials=12,
        batch=6,
        seed=3,
        runner=runner,
        log_dir=tmp_path / "logs",
        progress=False,
        hand_schedule=False,
    )
    runs = len(list(state.iterdir()))
    assert runs >= 8  # the search went on past every fault
    assert result.measurement.max_rel_error < 1e-4
    records = [
        json.loads(line)
        for line in (tmp_path / "logs")
        .glob("*/*/database_tuning_record.json")
        .__next__()
        .read_text()
        .splitlines()
    ]
    failed = [r for r in records if run_seconds(r[1][1]) is None]
    assert len(records) == runs and len(failed) == len(plan)
    assert result.stats["measured"] == runs - len(plan)
    # The dataset keeps the failures apart, without a time.
    rows = dataset(tmp_path / "logs", include_failed=True, cache=False)
    assert (rows["status"] == "failed").sum() == len(plan)
    assert rows.loc[rows["status"] == "failed", "seconds"].isna().all()
