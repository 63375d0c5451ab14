"""Two processes tuning into the same log directory at once lose no record (slow)."""

import json
import subprocess
import sys

import pytest

from tvm_ext.records.logs import RECORDS_FILE, find_logs, read_manifest

CHILD = """
import sys
from tvm_ext import kernels as K
from tvm_ext.kernel_tuner.tuner import tune
tune(K.matmul(32, 32, 32).func, trials=8, batch=8, seed=int(sys.argv[2]), log_dir=sys.argv[1],
     progress=False, work_dir=sys.argv[3])
"""


def _records(path) -> list[str]:
    """The records of a database file, each as canonical JSON (every line must be whole)."""
    lines = path.read_text().splitlines()
    return [json.dumps(json.loads(line), sort_keys=True) for line in lines if line.strip()]


@pytest.mark.slow
def test_two_tunes_into_one_log_lose_nothing(tmp_path, machine):
    # `machine`: the session probe is taken before the children start (they read its cache),
    # not by both children at once, each slowing the other's probe.
    logs = tmp_path / "logs"
    works = [tmp_path / f"work-{seed}" for seed in (1, 2)]
    procs = [
        subprocess.Popen([sys.executable, "-c", CHILD, str(logs), str(seed), str(work)])
        for seed, work in zip((1, 2), works)
    ]
    assert all(p.wait(timeout=600) == 0 for p in procs)
    (folder,) = find_logs(logs)
    merged = _records(folder / RECORDS_FILE)
    # Each tune's own database (kept in its work dir) holds every record it measured (and,
    # if it started after the other finished, the records it was seeded with).
    own = [set(_records(work / RECORDS_FILE)) for work in works]
    assert all(len(records) >= 2 for records in own)  # its hand schedule and a candidate
    lost = (own[0] | own[1]) - set(merged)
    assert not lost, f"{len(lost)} record(s) of the two tunes are missing from the log"
    assert len(merged) == len(set(merged)) == len(own[0] | own[1])  # no duplicate, no stray
    manifest = read_manifest(folder)
    assert manifest["tunes"] == 2 and manifest["records"] == len(merged)
