"""Load: many tunes back to back in one process keep memory bounded and leave no files."""

from __future__ import annotations

import os
import tempfile

import psutil
import pytest

from tvm_ext import kernels as K


@pytest.mark.slow
@pytest.mark.own_workers  # the tune's whole lifecycle, its workers started and stopped each time
def test_back_to_back_tunes_do_not_leak(tmp_path, host, monkeypatch):
    from tvm_ext.kernel_tuner.tuner import tune

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # ours and every worker process's temp files
    monkeypatch.setattr(tempfile, "tempdir", None)
    workloads = [
        K.matmul(64, 64, 64),
        K.softmax(64, 256),
        K.layernorm(64, 256),
        K.conv2d(1, 8, 14, 14, 8, padding=1),
        K.rmsnorm(64, 256),
    ]
    process = psutil.Process()
    rss = []
    for round_ in range(2):
        for i, w in enumerate(workloads):
            r = tune(w.func, host, trials=8, batch=8, seed=i, progress=False)
            assert r.measurement.max_rel_error < 1e-3 and r.work_dir is None
            rss.append(process.memory_info().rss)
    growth_mb = (rss[-1] - rss[len(workloads) - 1]) / 2**20
    # The second round repeats the first: its memory must not keep climbing.
    assert growth_mb < 150, f"RSS grew {growth_mb:.0f} MiB over the second round: {rss}"
    left = sorted(os.listdir(scratch))
    assert not left, f"temporary files left behind: {left[:10]}"
