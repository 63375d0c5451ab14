"""Stock MetaSchedule vs ``tvm_ext.tune``, same workloads, trial budget, seed and threads.

Each arm of each workload runs in a fresh process, one at a time (never two tunings at once):
stock is ``tune_tir`` with its defaults (evolutionary search, XGB model, stock rules) except
that its runner uses the physical cores (TVM's default is half the hardware threads) and its
builder gets a 120 s timeout (the default 30 s kills builds while fresh workers import every
tensor intrinsic). Ours is ``tvm_ext.tune`` in audit mode (dropped candidates are measured
too, to count regrets). Every measured candidate of both arms is checked against our
roofline bound (a violation is a run faster than its bound).

The cut is also replayed over stock's stream, in the order stock measured it: stage 1 (the
TIR's bound, before build) and stage 2 (the bound read off each candidate's machine code,
after build, before the run; each stock record is built again here to read it) drop a
candidate whose bound is at least the best time measured before it; their shares are
reported apart, with the regrets (a dropped candidate that ran faster than that best).

    .venv/bin/python bench/tuning.py [--trials 64] [--batch 16] [--no-readme]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

from _child import child_json

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
    """Our stage-1 and stage-2 lower bounds of every record of a database, in order (None for
    a record whose trace no longer applies or does not build), and the widest register of
    each one's arithmetic."""
    from tvm_ext.cost import RooflinePolicy
    from tvm_ext.cost.post_build import evaluate_built

    from tvm_ext.records.logs import apply_trace, read_records

    policy, bounds, bounds2, registers = RooflinePolicy(), [], [], []
    for record in read_records(pathlib.Path(work_dir)):
        try:
            sch = apply_trace(w.func, record.trace_json)  # the post-processed, built schedule
            stage1, stage2, code = evaluate_built(policy, sch, target, workload=w)
        except (RuntimeError, ValueError) as err:
            print(f"record {record.line} does not apply: {str(err).splitlines()[0]}")
            bounds.append(None), bounds2.append(None), registers.append(None)
            continue
        bounds.append(stage1.lower_bound_s)
        bounds2.append(stage2.lower_bound_s)
        registers.append(code.widest_register)
    return bounds, bounds2, registers


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

        imported = time.perf_counter()
        tvm_api.stock_intrinsics(target.kind.name)  # stock's tune_tir does this first
        summary["import_s"] = time.perf_counter() - imported
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
        from tvm_ext.kernel_tuner.tuner import tune

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
            dropped_stage1=st["dropped_stage1"],
            dropped_stage2=st["dropped_stage2"],
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
        summary["closest"] = min((t / b for b, t, *_ in recs if b and t), default=None)
        summary["times"] = [st["hand_s"]] + [s for _, s, _, dropped in recs if not dropped]
        summary["audited"] = [s for _, s, _, dropped in recs if dropped]
    summary["wall_s"] = time.perf_counter() - started - summary.get("import_s", 0.0)
    result = r if arm == "ours" else None
    summary["best_checked_s"] = _best_checked(arm, work_dir, w, target, result)
    if arm == "stock":
        secs = _records(work_dir)
        replay_started = time.perf_counter()
        bounds, bounds2, registers = _bounds(work_dir, w, target)
        summary["replay_s"] = time.perf_counter() - replay_started
        summary["times"] = secs
        summary["bounds"] = bounds
        summary["bounds2"] = bounds2
        summary["registers"] = registers
        # A violation: a run faster than its bound (the tighter, stage-2 one), beyond 5 %
        # noise; "strict": faster at all.
        pairs = [(s, b) for s, b in zip(secs, bounds2) if s is not None and b is not None]
        summary["violations"] = sum(1 for s, b in pairs if s < b * 0.95)
        summary["violations_strict"] = sum(1 for s, b in pairs if s < b)
        summary["closest"] = min((s / b for s, b in pairs), default=None)
    summary["flops"] = w.flops
    shutil.rmtree(work_dir, ignore_errors=True)  # the run's database: read, no longer needed
    with open(out, "w") as f:
        json.dump(summary, f)


def _best_checked(arm, work_dir, w, target, result):
    """The arm's best schedule timed by the one protocol (``tvm_ext.measure``: parity against
    the numpy reference, median of its repeats), not the runner's single unverified minimum:
    stock's fastest record re-applied and measured; ours, what its selection measured."""
    from tvm_ext import measure
    from tvm_ext.records.logs import apply_trace, read_records

    if result is not None:
        return result.measurement.seconds
    records = [r for r in read_records(pathlib.Path(work_dir)) if r.seconds is not None]
    if not records:
        return None
    best = min(records, key=lambda r: r.seconds)
    return measure(apply_trace(w.func, best.trace_json), w, target).seconds


def _would_drop(times, bounds, bounds2=None, initial_cut=float("inf")):
    """The cut replayed over a measured stream (the study's simulation): a candidate whose
    stage-1 bound is >= the best time kept before it is dropped at stage 1, else one whose
    stage-2 bound is, at stage 2. Returns (stage-1 share, stage-2 share, regrets): a regret is
    a dropped candidate that ran faster than the best it was cut at."""
    bounds2 = bounds2 if bounds2 is not None else [None] * len(bounds)
    best, dropped1, dropped2, regrets, seen = initial_cut, 0, 0, 0, 0
    for t, b, b2 in zip(times, bounds, bounds2):
        if b is None:
            continue
        seen += 1
        if b >= best or (b2 is not None and b2 >= best):
            dropped1 += b >= best
            dropped2 += b < best
            regrets += t is not None and t < best
        elif t is not None:
            best = min(best, t)
    return dropped1 / max(seen, 1), dropped2 / max(seen, 1), regrets


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

    started, load = time.strftime("%Y-%m-%d %H:%M", time.gmtime()), os.getloadavg()
    rows, curves, closest = [], {}, (float("inf"), "")
    for name in args.workloads:
        res = {}
        for arm in ("stock", "ours"):
            res[arm] = child_json(
                [
                    sys.executable,
                    __file__,
                    "--arm",
                    arm,
                    "--trials",
                    str(args.trials),
                    "--batch",
                    str(args.batch),
                    "--seed",
                    str(args.seed),
                    "--workloads",
                    name,
                ],
            )
        flops = res["ours"]["flops"]
        for arm, r in res.items():
            if r.get("closest") and r["closest"] < closest[0]:
                closest = (r["closest"], f"{name}, {arm}")
        curves[name] = {arm: _curve(r["times"]) for arm, r in res.items()}
        stock_best = curves[name]["stock"][-1]
        ours_curve = curves[name]["ours"]
        # On-device measurements ours needed to reach stock's final best (or never).
        reach = next((i + 1 for i, t in enumerate(ours_curve) if t <= stock_best * 1.0), None)
        stock = res["stock"]
        s1, s2, regrets = _would_drop(stock["times"], stock["bounds"], stock["bounds2"])
        h1, h2, hand_regrets = _would_drop(
            stock["times"], stock["bounds"], stock["bounds2"], res["ours"]["times"][0]
        )
        replay = (
            f"{100 * (s1 + s2):.0f}% = {100 * s1:.0f}% + {100 * s2:.0f}%, {regrets} regrets "
            f"({100 * (h1 + h2):.0f}% = {100 * h1:.0f}% + {100 * h2:.0f}%, {hand_regrets} "
            "regrets with the hand cut)"
        )
        widths = " ".join(
            f"{reg}:{stock['registers'].count(reg)}"
            for reg in ("zmm", "ymm", "xmm", "scalar")
            if stock["registers"].count(reg)
        )
        print(f"{name}: stock's arithmetic registers {widths}; replay {stock['replay_s']:.0f} s")
        for arm, r in res.items():
            measured = sum(1 for t in r["times"] if t is not None)
            rows.append(
                {
                    "workload": name,
                    "arm": arm,
                    "best GFLOP/s": flops
                    / (r.get("best_checked_s") or curves[name][arm][-1])
                    / 1e9,
                    "measured": measured,
                    "wall s": r["wall_s"],
                    "dropped (stage 1+2)": f"{r['dropped']} ({r['dropped_stage1']}+"
                    f"{r['dropped_stage2']})"
                    if arm == "ours"
                    else "0",
                    "dropped per batch": " ".join(map(str, r["dropped_per_batch"])),
                    "regrets": r["regrets"],
                    "violations": r["violations"],
                    "records to stock best": reach if arm == "ours" else len(r["times"]),
                    "bound drops of stock's stream (stage 1 + stage 2)": replay
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
            f"### Stock MetaSchedule vs tvm_ext.kernel_tuner.tuner ({args.trials} trials, "
            f"batches of {args.batch}, seed {args.seed}, same threads)\n\n"
            f"Run {started} - {time.strftime('%H:%M', time.gmtime())} UTC, load average "
            f"{load[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end. Stage 2 (the "
            "bound read off the built code) is replayed over stock's stream by rebuilding each "
            f"of its records. The closest any measured candidate came to its bound: "
            f"{closest[0]:.2f}x ({closest[1]}): no noise margin below that would change the "
            'violation count. "best GFLOP/s": each arm\'s best schedule timed by '
            "`tvm_ext.measure` (parity first, median of its repeats; stock's fastest record "
            "re-applied), not the runner's single minimum. Stock's \"wall s\" leaves out its "
            "import of every tensor intrinsic (timed apart). "
            f"`.venv/bin/python bench/tuning.py {' '.join(sys.argv[1:])}`",
            table,
        )


if __name__ == "__main__":
    main()
