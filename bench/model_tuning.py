"""Tuning a whole model: ours (rule seeds, bound-led task scheduler) vs stock ``tune_relax``.

Both arms tune the same lowered module (``tvm_ext.compile``'s lowering: weights bound and
folded, fused, weights marked for repacking; so the same tasks), with the same total trials,
seed and threads, each in a fresh process, one at a time. Stock is
``ms.relax_integration.tune_relax`` with its defaults (gradient task scheduler, XGB cost
model, evolutionary search, stock rules) except: trials per iteration = ours' batch (its
default 64 hands a small budget to the first tasks only), a 120 s builder timeout (the default
30 s kills builds while fresh workers import every tensor intrinsic) and a runner on the
physical cores. Both builds fold the weight repacking at compile time, are checked against
the numpy reference and timed the same way. Ours also runs at 0 trials (the rules alone).
torch eager runs the same weights on the same threads, in its own process.

Budgets are trials per task on average (total = that x the number of tasks).

    .venv/bin/python bench/model_tuning.py [--quick] [--models encoder,decoder] \
        [--size full] [--per-task 8,32] [--batch 16] [--seed 0] [--no-readme]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

ARMS = ("ours", "stock")


def _model(name: str, size: str):
    from tvm_ext import models

    return models.build(name, size, batch=1)


def latency_s(compiled, cores: int) -> float:
    """The one timer of every arm (ours, stock, the rules alone, torch): a Python loop over a
    ready call, median of 7 samples of >= 100 ms, the caller's BLAS workers parked first."""
    from tvm_ext.base import tvm_api
    from tvm_ext.base.host_threads import settle
    from tvm_ext.measurement.measure import time_callable

    call = compiled.ready_call()
    settle()
    with tvm_api.threads(cores):
        return time_callable(call, 0.1, 7)


def run_ours(model, target, trials: int, batch: int, seed: int) -> dict:
    import tvm_ext

    with tempfile.TemporaryDirectory(prefix="bench-model-ours-") as logs:  # no earlier logs
        r = tvm_ext.tune(model, target, trials=trials, batch=batch, seed=seed, log_dir=logs,
                         progress=False)  # fmt: skip
    return {
        "latency_s": latency_s(r.compiled, int(target.attrs["num-cores"])),
        "tune_s": r.seconds,
        "trials": r.trials,
        "floor_s": r.floor_s,
        "tasks": len(r.tasks),
        "retired": int(r.tasks["retired"].sum()),
        "below_floor": int(r.tasks["below_floor"].sum()),
        "history": r.history[["trials", "task", "estimate_s"]].to_dict(orient="records"),
        "trials_per_task": dict(zip(r.tasks["name"], (int(t) for t in r.tasks["trials"]))),
    }


def run_stock(model, target, trials: int, batch: int, seed: int) -> dict:
    from tvm_ext.model_pipeline.stock import tune_model_stock

    with tempfile.TemporaryDirectory(prefix="bench-model-stock-") as work:
        r = tune_model_stock(model, target, work, trials=trials, batch=batch, seed=seed)
    cores = int(target.attrs["num-cores"])
    return {"latency_s": latency_s(r.compiled, cores), "tune_s": r.seconds, "trials": trials,
            "tasks": r.tasks, "tasks_tuned": r.tasks_tuned}  # fmt: skip


def run_torch(model, cores: int) -> dict:
    from threadpoolctl import threadpool_limits

    from tvm_ext.measurement.measure import time_callable
    from tvm_ext.workloads.models_torch import torch_eager  # the zoo in torch, parity-checked

    try:
        run = torch_eager(model, cores)
    except ImportError as err:
        return {"latency_s": None, "skipped": f"torch not installed ({err.name})"}
    with threadpool_limits(cores):
        return {"latency_s": time_callable(run, 0.1, 7)}


def child(args) -> None:
    """One arm in this fresh process; its result as JSON to ``args.out``."""
    from tvm_ext import host_target

    target = host_target()
    model = _model(args.model, args.size)
    if args.arm == "torch":
        result = run_torch(model, int(target.attrs["num-cores"]))
    elif args.arm == "ours":
        result = run_ours(model, target, args.trials, args.batch, args.seed)
    else:
        result = run_stock(model, target, args.trials, args.batch, args.seed)
    with open(args.out, "w") as f:
        f.write(json.dumps(result, default=float))


def spawn(arm: str, model: str, size: str, trials: int, batch: int, seed: int, env) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    cmd = [sys.executable, __file__, "--child", arm, "--model", model, "--size", size,
           "--trials", str(trials), "--batch", str(batch), "--seed", str(seed),
           "--out", out]  # fmt: skip
    try:  # the child's chatter (MetaSchedule's tables) is shown only when it fails
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(done.stdout[-3000:], done.stderr[-3000:], sep="\n", file=sys.stderr)
            raise RuntimeError(f"{arm} on {model} ({trials} trials) failed: {done.returncode}")
        with open(out) as f:
            return json.load(f)
    finally:
        os.unlink(out)


def count_tasks(model_name: str, size: str) -> int:
    """The number of tasks both arms tune (in a child: this process never loads TVM)."""
    code = (
        "import tvm_ext; from tvm_ext import models; from tvm_ext.base import tvm_api;"
        "from tvm_ext.model_pipeline.compile import ModelSource, bind_and_lower;"
        f"m = models.build({model_name!r}, {size!r}); t = tvm_ext.host_target();"
        "s = ModelSource.of(m, None, None, None);"
        "print(len(tvm_api.ms.relax_integration.extract_tasks(bind_and_lower(s, t), t)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return int(out.stdout.strip().splitlines()[-1])


def bench_model(name: str, args, env, log) -> tuple[list[dict], str]:
    tasks = count_tasks(name, args.size)
    budgets = [p * tasks for p in args.per_task]
    log(f"{name} ({args.size}): {tasks} tasks; budgets {budgets} trials")
    torch = spawn("torch", name, args.size, 0, args.batch, args.seed, env)
    ours0 = spawn("ours", name, args.size, 0, args.batch, args.seed, env)
    log(f"  rules alone: {ours0['latency_s'] * 1e3:.3f} ms; torch eager: {torch['latency_s']}")
    rows, runs = [], {0: ours0}
    for per_task, total in zip(args.per_task, budgets):
        arm = {a: spawn(a, name, args.size, total, args.batch, args.seed, env) for a in ARMS}
        runs[total] = arm["ours"]
        o, s = arm["ours"], arm["stock"]
        log(f"  {total} trials: ours {o['latency_s'] * 1e3:.3f} ms in {o['tune_s']:.0f} s, "
            f"stock {s['latency_s'] * 1e3:.3f} ms in {s['tune_s']:.0f} s "
            f"({s['tasks_tuned']}/{s['tasks']} tasks tuned)")  # fmt: skip
        t_ms = torch["latency_s"] * 1e3 if torch.get("latency_s") else None
        rows.append({
            "model": f"{name} ({args.size})", "tasks": tasks, "trials/task": per_task,
            "trials": total, "ours ms": o["latency_s"] * 1e3, "stock ms": s["latency_s"] * 1e3,
            "stock/ours": s["latency_s"] / o["latency_s"], "ours tune s": o["tune_s"],
            "stock tune s": s["tune_s"], "stock tasks tuned": s["tasks_tuned"],
            "ours retired": o["retired"], "rules alone ms": ours0["latency_s"] * 1e3,
            "floor ms": o["floor_s"] * 1e3 if o["floor_s"] else None,
            "torch eager ms": t_ms, "torch/ours": t_ms / (o["latency_s"] * 1e3) if t_ms else None,
        })  # fmt: skip
    final = rows[-1]["stock ms"] / 1e3
    reached = [(b, r) for b, r in sorted(runs.items()) if r["latency_s"] <= final]
    if reached:
        b, r = reached[0]
        note = (f"{name}: ours reached stock's final latency ({final * 1e3:.3f} ms, "
                f"{budgets[-1]} trials, {rows[-1]['stock tune s']:.0f} s) at {b} trials "
                f"in {r['tune_s']:.0f} s")  # fmt: skip
    else:
        note = f"{name}: ours did not reach stock's final latency ({final * 1e3:.3f} ms)"
    log("  " + note)
    return rows, note


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="encoder,decoder")
    parser.add_argument("--size", default="full", choices=("full", "small"))
    parser.add_argument("--per-task", default="8,32", help="trials per task on average")
    parser.add_argument("--batch", type=int, default=16, help="trials per batch (both arms)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="small size, 1 and 2 per task")
    parser.add_argument("--note", default="", help="a sentence for the README (e.g. load)")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--child", choices=(*ARMS, "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--trials", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.size, args.per_task, args.batch = "small", "1,2", 8
    args.per_task = [int(p) for p in str(args.per_task).split(",")]
    return args


RESULTS = pathlib.Path(__file__).with_name("model_tuning.json")


def merged_results(models: dict, cpu: str, mcpu: str) -> dict:
    """This run's models over the results kept in ``RESULTS`` (per model: its rows, note,
    command, load), so models benchmarked in separate runs share one README table; results of
    another CPU (its name and LLVM's: "AMD EPYC" is a Zen 4 and a Zen 5) or an older timing
    protocol are dropped (every table names one CPU and one timer)."""
    kept = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    kept = {
        k: v for k, v in kept.items()
        if (v.get("cpu"), v.get("mcpu"), v.get("timer")) == (cpu, mcpu, TIMER) and k not in models
    }  # fmt: skip
    return kept | models


TIMER = "time_callable over a ready call, median of 7 samples of >= 100 ms"


def host_mcpu() -> str:
    """LLVM's name for this host's CPU (in a child: this process never loads TVM)."""
    code = "import tvm_ext; print(tvm_ext.host_target().attrs['mcpu'])"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    args = parse_args()
    if args.child:
        args.arm = args.child
        return child(args)
    import pandas as pd
    import psutil
    from _common import cpu_name, write_section
    from _unpin import PINS

    cores = psutil.cpu_count(logical=False) or os.cpu_count()
    env = os.environ | {"TVM_NUM_THREADS": str(cores), "PYTHONUNBUFFERED": "1"}
    env = {k: v for k, v in env.items() if k not in PINS}  # the child tunes at its best

    def log(*a):
        print(*a, flush=True)

    log(f"CPU {cpu_name()}, {cores} threads, load {os.getloadavg()[0]:.2f}")
    flags = shlex.join(a for a in sys.argv[1:] if a not in ("--note", args.note))
    started, ran, mcpu = time.perf_counter(), {}, host_mcpu()
    for name in args.models.split(","):
        load = os.getloadavg()[0]
        rows, note = bench_model(name, args, env, log)
        ran[f"{name} ({args.size})"] = {
            "rows": rows, "note": note, "cpu": cpu_name(), "threads": cores,
            "command": f".venv/bin/python bench/model_tuning.py {flags}",
            "remark": args.note, "load": [load, os.getloadavg()[0]],
            "date": time.strftime("%Y-%m-%d"), "seed": args.seed, "batch": args.batch,
            "mcpu": mcpu, "timer": TIMER,
        }  # fmt: skip
    this_run = pd.DataFrame([row for r in ran.values() for row in r["rows"]])
    print(this_run.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    log(f"bench wall time {time.perf_counter() - started:.0f} s; load {os.getloadavg()[0]:.2f}")
    if not args.no_readme:
        results = merged_results(ran, cpu_name(), mcpu)
        RESULTS.write_text(json.dumps(results, indent=1, default=float) + "\n")
        table = pd.DataFrame([row for r in results.values() for row in r["rows"]])
        header = (
            f"### Tuning a whole model: ours vs stock `tune_relax` ({cores} threads, same "
            "trials, seed and batch per model; each arm a fresh process)\n\n"
            f"`{mcpu}`. Every latency (ours tuned, stock tuned, the rules alone, torch eager) by "
            f"one timer: {TIMER}.\n\n"
            + "\n".join(
                f"- {r['note']} ({r['date']}, seed {r['seed']}, batch {r['batch']}, load "
                f"{r['load'][0]:.1f} -> {r['load'][1]:.1f}; `{r['command']}`) {r['remark']}"
                for r in results.values()
            )
        )
        write_section("model-tuning", header, table)
    log(f"CPU {cpu_name()}")


if __name__ == "__main__":
    main()
