"""Produce the frozen tuning logs shipped in ``tuning_logs/`` (the bench's shapes).

Each workload is tuned with ``tvm_ext.kernel_tuner.tuner`` (default roofline policy, seed 0) for
``--trials`` trials on this host, and its records and manifest land in
``tuning_logs/<target key>/<workload key>/``.

    .venv/bin/python bench/freeze_logs.py [--trials 32]
"""

from __future__ import annotations

import argparse
import pathlib

from tvm_ext import host_target
from tvm_ext import kernels as K
from tvm_ext.kernel_tuner.tuner import tune

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tuning_logs"
WORKLOADS = [
    K.matmul(256, 256, 32),
    K.matmul(512, 512, 512),
    K.matmul(1024, 1024, 1024),
    K.matmul(64, 4096, 512),
    K.matmul(2048, 64, 64),
    K.matmul(1024, 1024, 1024, "bfloat16"),
    K.matmul(2048, 2048, 2048, "bfloat16"),
    K.conv2d(1, 64, 56, 56, 64, 3, 3, 1, 1),
    K.softmax(4096, 1024),
    K.layernorm(4096, 1024),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=32)
    args = parser.parse_args()
    target = host_target()
    for w in WORKLOADS:
        r = tune(w.func, target, trials=args.trials, seed=0, log_dir=ROOT, progress=False)
        m = r.measurement
        print(
            f"{w.key:45s} {m.gflops:8.1f} GFLOP/s  {r.source:13s} dropped "
            f"{r.stats['dropped']:3d}  -> {r.log_folder}",
            flush=True,
        )


if __name__ == "__main__":
    main()
