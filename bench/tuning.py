"""Stock MetaSchedule vs ``tvm_ext.search.tuner``, same workloads, trial budget, seed and threads.

Each arm of each workload runs in a fresh process, one at a time (never two tunings at once):
stock is ``tune_tir`` with its defaults (evolutionary search, XGB model, stock rules) except
that its runner uses the physical cores (TVM's default is half the hardware threads) and its
builder gets a 120 s timeout (the default 30 s kills builds while fresh workers import every
tensor intrinsic). Ours is ``tvm_ext.search.tuner`` in audit mode (dropped candidates are measured
too, to count regrets). Every measured candidate of both arms is checked against our
roofline bound (a violation is a run faster than its bound).

    .venv/bin/python bench/tuning.py [--trials 64] [--batch 16] [--no-readme]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

WORKLOADS = {
    "matmul 256^3": ("matmul", (256, 256, 256)),
    "matmul 128x512x64": ("matmul", (128, 512, 64)),
    "conv2d 1x16x28x28 f16 k3": ("conv2d", (1, 16, 28, 28, 16)),
    "layernorm 256x1024": ("layernorm", (256, 1024)),
}


def _workload(name):
    from tvm_ext import kernels

    kernel, shape = WORKLOADS[name]
    extra = {"padding": 1} if kernel == "conv2d" else {}
    return kernels.SUITE[kernel](*shape, **extra)


def _records(work_dir):
    """(seconds or None) per measured trial, in measurement order, from a JSON database."""
    from tvm_ext.records.logs import read_records

    return [r.seconds for r in read_records(pathlib.Path(work_dir))]


def _bounds(work_dir, w, target):
    """Our roofline lower bound of every record of a database, in order (None for a record
    whose trace no longer applies)."""
    from tvm_ext.cost import RooflinePolicy, evaluate

    from tvm_ext.records.logs import apply_trace, read_records

    policy, bounds = RooflinePolicy(), []
    for record in read_records(pathlib.Path(work_dir)):
        try:
            sch = apply_trace(w.func, record.trace_json)  # the post-processed, built schedule
        except (RuntimeError, ValueError) as err:
            print(f"record {record.line} does not apply: {str(err).splitlines()[0]}")
            bounds.append(None)
            continue
        bounds.append(evaluate(policy, sch, target, workload=w).lower_bound_s)
    return bounds


def run_arm(arm: str, name: str, trials: int, batch: int, seed: int, out: str) -> None:
    """One tuning run in this (fresh) process; writes a JSON summary to ``out``."""
    started = time.perf_counter()
    import functools

    from tvm_ext import host_target
    from tvm_ext.base import tvm_api

    w, target = _workload(name), host_target()
    cores = int(target.attrs["num-cores"])
    work_dir = tempfile.mkdtemp(prefix=f"bench-{arm}-")
    summary = {"arm": arm, "workload": name, "trials": trials}
    if arm == "stock":
        import tvm.s_tir.meta_schedule as ms  # the stock path imports every intrinsic itself

        ms.tir_integration.tune_tir(
            tvm_api.as_module(w.func),
            target,
            work_dir,
            max_trials_global=trials,
            num_trials_per_iter=batch,
            seed=seed,
            builder=ms.builder.LocalBuilder(timeout_sec=120),
            runner=ms.runner.LocalRunner(
                initializer=functools.partial(tvm_api.set_runner_threads, cores)
            ),
        )
        summary["dropped_per_batch"] = []
        summary.update(dropped=0, regrets=0, initial_cut_dropped=0)
    else:
        from tvm_ext.search.tuner import tune

        r = tune(
            w.func,
            target,
            trials=trials,
            batch=batch,
            seed=seed,
            log_dir=work_dir,
            audit=True,
            progress=False,
        )
        st = r.stats
        summary["dropped_per_batch"] = [b["dropped"] for b in st["batches"]]
        summary.update(
            dropped=st["dropped"],
            regrets=st["regrets"],
            initial_cut_dropped=st["dropped_by_initial_cut"],
            generated=st["generated"],
            first_measured_s=st["first_measured_s"],
            violations=st["violations"],
            source=r.source,
        )
        # Without audit the dropped candidates are never measured: the measurement count and
        # the best-so-far curve hold the hand schedule (measured first) and the kept ones.
        recs = st["records"]
        summary["times"] = [st["hand_s"]] + [s for _, s, _, dropped in recs if not dropped]
        summary["audited"] = [s for _, s, _, dropped in recs if dropped]
    summary["wall_s"] = time.perf_counter() - started
    if arm == "stock":
        secs = _records(work_dir)
        bounds = _bounds(work_dir, w, target)
        summary["times"] = secs
        summary["bounds"] = bounds
        summary["violations"] = sum(
            1 for s, b in zip(secs, bounds) if s is not None and b is not None and s < b * 0.95
        )
    summary["flops"] = w.flops
    with open(out, "w") as f:
        json.dump(summary, f)


def _would_drop(times, bounds, initial_cut=float("inf")):
    """Share of a measured stream the cut would have dropped (the study's simulation): a
    candidate whose bound is >= the best time measured before it."""
    best, dropped, seen = initial_cut, 0, 0
    for t, b in zip(times, bounds):
        if b is None:
            continue
        seen += 1
        if b >= best:
            dropped += 1
        elif t is not None:
            best = min(best, t)
    return dropped / max(seen, 1)


def _curve(times):
    best, curve = float("inf"), []
    for t in times:
        if t is not None:
            best = min(best, t)
        curve.append(best)
    return curve


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--arm", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        run_arm(args.arm, args.workloads[0], args.trials, args.batch, args.seed, args.out)
        return
    import pandas as pd

    rows, curves = [], {}
    for name in args.workloads:
        res = {}
        for arm in ("stock", "ours"):
            out = tempfile.mktemp(suffix=".json")
            subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--arm",
                    arm,
                    "--out",
                    out,
                    "--trials",
                    str(args.trials),
                    "--batch",
                    str(args.batch),
                    "--seed",
                    str(args.seed),
                    "--workloads",
                    name,
                ],
                check=True,
            )
            with open(out) as f:
                res[arm] = json.load(f)
        flops = res["ours"]["flops"]
        curves[name] = {arm: _curve(r["times"]) for arm, r in res.items()}
        stock_best = curves[name]["stock"][-1]
        ours_curve = curves[name]["ours"]
        # On-device measurements ours needed to reach stock's final best (or never).
        reach = next((i + 1 for i, t in enumerate(ours_curve) if t <= stock_best * 1.0), None)
        stock = res["stock"]
        would = _would_drop(stock["times"], stock["bounds"])
        would_cut = _would_drop(stock["times"], stock["bounds"], res["ours"]["times"][0])
        for arm, r in res.items():
            measured = sum(1 for t in r["times"] if t is not None)
            rows.append(
                {
                    "workload": name,
                    "arm": arm,
                    "best GFLOP/s": flops / curves[name][arm][-1] / 1e9,
                    "measured": measured,
                    "wall s": r["wall_s"],
                    "dropped": r["dropped"],
                    "dropped per batch": " ".join(map(str, r["dropped_per_batch"])),
                    "regrets": r["regrets"],
                    "violations": r["violations"],
                    "records to stock best": reach if arm == "ours" else len(r["times"]),
                    "bound drops of stock's stream": f"{100 * would:.0f}% ({100 * would_cut:.0f}% "
                    "with the hand cut)"
                    if arm == "stock"
                    else "",
                }
            )
        print(pd.DataFrame(rows[-2:]).to_string(index=False), flush=True)
    table = pd.DataFrame(rows)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.1f}"))
    with open(os.path.join(os.path.dirname(__file__), "tuning_curves.json"), "w") as f:
        json.dump(curves, f)
    if not args.no_readme:
        sys.path.insert(0, os.path.dirname(__file__))
        from _common import write_section

        write_section(
            "tuning",
            f"### Stock MetaSchedule vs tvm_ext.search.tuner ({args.trials} trials, "
            f"batches of {args.batch}, seed {args.seed}, same threads)",
            table,
        )


if __name__ == "__main__":
    main()
