"""Build the cost-model dataset: stock MetaSchedule search over the suite at several shapes.

Each workload is tuned in a fresh process, one at a time (never two tunings at once), by
plain MetaSchedule (evolutionary search with its own online XGB model; the first batches
are close to random, later ones model-guided, so the records span slow and fast
candidates). Every measured candidate lands in a frozen log under
``tuning_logs/dataset/<target key>/<workload key>/``; the fastest record is parity-checked
against numpy before its figure goes into the manifest. ``tvm_ext.cost.dataset`` reads the
logs back into one row per candidate.

    .venv/bin/python bench/build_dataset.py [--trials 144] [--only KEY ...]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time

from _child import child_json

ROOT = pathlib.Path(__file__).resolve().parents[1] / "tuning_logs" / "dataset"

# (kernel, args, kwargs): 18 workloads across the six kernel kinds, small enough that one
# measurement takes well under a second.
WORKLOADS = [
    ("matmul", (128, 128, 128), {}),
    ("matmul", (256, 256, 256), {}),
    ("matmul", (128, 512, 64), {}),
    ("matmul", (512, 128, 256), {}),
    ("matmul", (64, 1024, 128), {}),
    ("matmul", (256, 64, 512), {}),
    ("matmul", (384, 384, 96), {}),
    ("batch_matmul", (4, 128, 128, 64), {}),
    ("batch_matmul", (8, 64, 96, 64), {}),
    ("conv2d", (1, 16, 28, 28, 16), {"padding": 1}),
    ("conv2d", (1, 32, 14, 14, 32), {"padding": 1}),
    ("conv2d", (1, 8, 56, 56, 16), {"padding": 1}),
    ("softmax", (256, 1024), {}),
    ("softmax", (512, 256), {}),
    ("layernorm", (256, 1024), {}),
    ("layernorm", (128, 768), {}),
    ("rmsnorm", (256, 1024), {}),
    ("rmsnorm", (512, 512), {}),
]


def make_workload(spec):
    from tvm_ext import kernels

    kernel, args, kwargs = spec
    return kernels.SUITE[kernel](*args, **kwargs)


def run_one(index: int, trials: int, batch: int, seed: int) -> dict:
    """Tune workload ``index`` in this process and freeze its records; returns a summary."""
    from tvm_ext import host_target
    from tvm_ext.kernel_tuner.session import prepare
    from tvm_ext.kernel_tuner.stages import best_in
    from tvm_ext.kernel_tuner.stock import metaschedule_search
    from tvm_ext.measurement.measure import measure
    from tvm_ext.records.logs import log_folder, make_manifest, merge_into_log, run_seconds

    started = time.perf_counter()
    w, target = make_workload(WORKLOADS[index]), host_target()
    cores = int(target.attrs["num-cores"])
    work_dir = tempfile.mkdtemp(prefix="tvm-ext-dataset-")
    database = metaschedule_search(w.func, target, work_dir, trials=trials, batch=batch, seed=seed)
    best = best_in(prepare(w, target, with_machine=False), database)
    result = measure(best, w, target)  # parity first: raises ParityError on a wrong kernel
    records = database.get_all_tuning_records()
    failed = sum(1 for r in records if run_seconds(r.run_secs) is None)
    manifest = make_manifest(
        w.func,
        target,
        threads=cores,
        policy="MetaSchedule XGBModel (online, cold start)",
        stats={"generated": len(records), "dropped": 0, "measured": len(records) - failed},
        seconds=result.seconds,
        gflops=result.gflops,
        max_rel_error=result.max_rel_error,
        workload=w,
    )
    folder = log_folder(ROOT, target, w.func)
    merge_into_log(folder, pathlib.Path(work_dir), manifest)
    return {
        "workload": w.key,
        "records": len(records),
        "failed": failed,
        "best_gflops": result.gflops,
        "wall_s": time.perf_counter() - started,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=144)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", type=int, help="indices into WORKLOADS")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        summary = run_one(args.one, args.trials, args.batch, args.seed)
        pathlib.Path(args.out).write_text(json.dumps(summary))
        return
    for index in args.only if args.only is not None else range(len(WORKLOADS)):
        cmd = [sys.executable, __file__, "--one", str(index)]
        cmd += ["--trials", str(args.trials), "--batch", str(args.batch)]
        cmd += ["--seed", str(args.seed)]
        print(child_json(cmd, env=os.environ | {"PYTHONUNBUFFERED": "1"}), flush=True)


if __name__ == "__main__":
    main()
