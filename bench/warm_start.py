"""Warm-started tuning on held-out workloads: trials to reach 95 % of the best known GFLOP/s.

The learned policy is trained on the dataset (``tuning_logs/dataset``) *without* the held-out
workloads; then each arm tunes each held-out workload in a fresh process, one at a time, with
the same trial budget, batch, seed and threads:

- ``stock``: plain MetaSchedule (cold online XGB model), 160 trials, run in the same session
  as the other arms; ``stock (dataset record)`` is the dataset's own record of the workload
  (the same search, seed 0, 160 trials, tuned earlier; see bench/build_dataset.py);
- ``stock + WarmStartModel(xgboost)``: the same search, our trained policy scoring candidates
  until MetaSchedule's online model has 100 measurements, then both (rank mean);
- ``stock + pretrained XGBModel``: the same search, MetaSchedule's XGB model updated first with
  the training workloads' records;
- ``tune(xgboost)``: ``tvm_ext.tune`` ranking with the trained policy (roofline bound prunes),
  without and with the hand-schedule seed; ``tune(roofline)`` without the seed, for contrast.

"Best known" is the fastest time any arm (or the dataset) measured for the workload. Trials
count on-device measurements in order (the hand schedule, when seeded, is the first); a
candidate dropped by the bound is not a trial.

    .venv/bin/python bench/warm_start.py [--trials 64] [--no-readme]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import tempfile
import time

from _child import child_json

HERE = pathlib.Path(__file__).resolve().parent
DATASET = HERE.parent / "tuning_logs" / "dataset"
STOCK_TRIALS = 160
HELD_OUT = [  # indices into build_dataset.WORKLOADS: one per kernel family
    6,  # matmul 384x384x96
    8,  # batch_matmul 8x64x96x64
    10,  # conv2d 1x32x14x14, 32 filters 3x3
    15,  # layernorm 128x768
]
ARMS = (
    "stock",
    "stock + WarmStartModel(xgboost)",
    "stock + pretrained XGBModel",
    "tune(xgboost), no hand seed",
    "tune(xgboost) + hand seed",
    "tune(roofline), no hand seed",
)


def run_arm(arm: str, index: int, trials: int, batch: int, seed: int, model: str) -> dict:
    sys.path.insert(0, str(HERE))
    from build_dataset import make_workload
    from tvm_ext.cost import XGBoostPolicy

    from tvm_ext import host_target
    from tvm_ext.hardware.machine import host_machine
    from tvm_ext.kernel_tuner.stock import metaschedule_search

    started = time.perf_counter()
    w, target = make_workload(build_dataset_workload(index)), host_target()
    machine = host_machine(target)
    work_dir = tempfile.mkdtemp(prefix="bench-warm-")
    if arm.startswith("stock"):
        from tvm_ext.kernel_tuner.cost_models import WarmStartModel, pretrained_xgb_model

        if arm == "stock":
            cost_model, trials = None, max(trials, STOCK_TRIALS)  # cold: MetaSchedule's own
        elif "WarmStartModel" in arm:
            cost_model = WarmStartModel(XGBoostPolicy.load(model), target, machine, w)
        else:
            cost_model = pretrained_xgb_model(DATASET, exclude=(w.key,))
        setup_s = time.perf_counter() - started
        metaschedule_search(
            w.func, target, work_dir, trials=trials, batch=batch, seed=seed, cost_model=cost_model
        )
        from tuning import _records  # bench/tuning.py: a JSON database's times, in order

        times = _records(work_dir)
    else:
        from tvm_ext.cost import RooflinePolicy

        from tvm_ext.kernel_tuner.tuner import tune

        policy = XGBoostPolicy.load(model) if "xgboost" in arm else RooflinePolicy()
        setup_s = time.perf_counter() - started
        r = tune(
            w.func,
            target,
            trials=trials,
            batch=batch,
            seed=seed,
            policy=policy,
            progress=False,
            hand_schedule="hand seed" in arm and "no hand" not in arm,
        )
        st = r.stats
        times = ([st["hand_s"]] if st["hand_s"] is not None else []) + [
            s for _, s, _, dropped in st["records"] if not dropped
        ]
    return {
        "arm": arm,
        "workload": w.key,
        "flops": w.flops,
        "times": times,
        "setup_s": setup_s,
        "wall_s": time.perf_counter() - started,
    }


def build_dataset_workload(index: int):
    sys.path.insert(0, str(HERE))
    from build_dataset import WORKLOADS

    return WORKLOADS[index]


def trials_to(times, target_s: float):
    """1-based index of the first measurement at or below ``target_s`` (None: never)."""
    best = math.inf
    for i, t in enumerate(times):
        if t is not None:
            best = min(best, t)
        if best <= target_s:
            return i + 1
    return None


def _dataset_curve(key: str) -> list:
    from tvm_ext.cost import dataset

    data = dataset(DATASET / "llvm-znver4-2c" / key, include_failed=True)
    data = data.sort_values("order")
    return [None if not math.isfinite(s) else float(s) for s in data["seconds"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--held-out", nargs="*", type=int, default=HELD_OUT)
    parser.add_argument("--arms", nargs="*", default=list(ARMS))
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        res = run_arm(args.arm, args.index, args.trials, args.batch, args.seed, args.model)
        pathlib.Path(args.out).write_text(json.dumps(res))
        return

    import pandas as pd
    from tvm_ext.cost import XGBoostPolicy, dataset

    from tvm_ext.records.logs import cpu_model

    sys.path.insert(0, str(HERE))
    from build_dataset import make_workload

    keys = [make_workload(build_dataset_workload(i)).key for i in args.held_out]
    data = dataset(DATASET)
    train = data[~data["workload"].isin(keys)]
    folder = tempfile.TemporaryDirectory(prefix="tvm-ext-bench-")  # removed at exit
    model = str(pathlib.Path(folder.name) / "policy.json")
    XGBoostPolicy.train(train, seed=0).save(model)
    print(
        f"policy trained on {len(train)} rows of {train['workload'].nunique()} workloads; "
        f"held out: {', '.join(keys)}",
        flush=True,
    )
    rows, curves = [], {}
    for index, key in zip(args.held_out, keys):
        results = {"stock (dataset record)": {"times": _dataset_curve(key), "wall_s": None}}
        for arm in args.arms:
            cmd = [sys.executable, __file__, "--arm", arm, "--index", str(index)]
            cmd += ["--trials", str(args.trials), "--batch", str(args.batch)]
            cmd += ["--seed", str(args.seed), "--model", model]
            results[arm] = child_json(cmd)
            print(f"{key}: {arm} done in {results[arm]['wall_s']:.0f} s", flush=True)
        flops = make_workload(build_dataset_workload(index)).flops
        best = min(t for r in results.values() for t in r["times"] if t is not None)
        goal = best / 0.95  # 95 % of the best known GFLOP/s
        curves[key] = {arm: r["times"] for arm, r in results.items()}
        stock = results.get("stock") or results["stock (dataset record)"]
        stock_n = trials_to(stock["times"], goal)
        for arm, r in results.items():
            n = trials_to(r["times"], goal)
            measured = [t for t in r["times"] if t is not None]
            rows.append(
                {
                    "workload": key,
                    "arm": arm,
                    "trials run": len(r["times"]),
                    "best GFLOP/s": flops / min(measured) / 1e9,
                    "best known GFLOP/s": flops / best / 1e9,
                    "trials to 95%": n if n is not None else f">{len(r['times'])}",
                    "vs stock": (
                        f"{n / stock_n:.2f}x" if n is not None and stock_n is not None else ""
                    ),
                    "wall s": r["wall_s"],
                }
            )
        print(pd.DataFrame(rows[-len(results) :]).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    (HERE / "warm_start_curves.json").write_text(json.dumps(curves))
    if not args.no_readme:
        from _common import write_section

        write_section(
            "warm-start",
            f"### Warm-started tuning on held-out workloads ({args.trials} trials, batches of "
            f"{args.batch}, seed {args.seed}; {cpu_model()}, 2 threads)",
            table,
        )


if __name__ == "__main__":
    main()
