"""Seconds from calling ``tvm_ext.tune`` in a fresh process to the first candidate measured.

Runs a fresh interpreter per sample (nothing cached in-process), tunes matmul 128^3 for one
batch, and reports when the hand schedule (the first candidate, measured by tune itself) and
the first MetaSchedule batch were measured.

    .venv/bin/python bench/startup.py [--samples 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CHILD = r"""
import json, time
t0 = time.perf_counter()
import tvm_ext
from tvm_ext import kernels as K
from tvm_ext.kernel_tuner.tuner import tune
t1 = time.perf_counter()
r = tune(K.matmul(128, 128, 128).func, trials=16, batch=16, seed=0, progress=False)
print(json.dumps({"import_s": t1 - t0, "first_batch_s": r.stats["first_measured_s"],
                  "hand_s": r.stats["hand_measured_s"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for _ in range(args.samples):
        out = (
            subprocess.run(
                [sys.executable, "-c", CHILD], capture_output=True, text=True, check=True
            )
            .stdout.strip()
            .splitlines()[-1]
        )
        rows.append(json.loads(out))
        print(rows[-1], flush=True)
    for key in ("import_s", "hand_s", "first_batch_s"):
        print(f"{key:14s} median {statistics.median(r[key] for r in rows):.2f} s")


if __name__ == "__main__":
    main()
