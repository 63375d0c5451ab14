"""Two processes tuning into the same log directory at once lose no record (slow)."""

import json
import subprocess
import sys

import pytest

from tvm_ext.records.logs import find_logs, read_manifest

CHILD = """
import sys
from tvm_ext import kernels as K
from tvm_ext.search.tuner import tune
tune(K.matmul(32, 32, 32).func, trials=8, batch=8, seed=int(sys.argv[2]), log_dir=sys.argv[1],
     progress=False)
"""


@pytest.mark.slow
def test_two_tunes_into_one_log_lose_nothing(tmp_path):
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(seed)]) for seed in (1, 2)
    ]
    assert all(p.wait(timeout=600) == 0 for p in procs)
    (folder,) = find_logs(tmp_path)
    lines = (folder / "database_tuning_record.json").read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line is whole JSON
    manifest = read_manifest(folder)
    assert manifest["tunes"] == 2 and manifest["records"] == len(records)
    # Each tune measured its hand schedule plus at least one candidate of its own.
    assert len({json.dumps(r[1][0]) for r in records}) >= 3
