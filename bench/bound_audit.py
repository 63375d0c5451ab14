"""Violation hunt: MetaSchedule's own candidates, measured, against the roofline lower bound.

For each workload, candidates are drawn from MetaSchedule's design space with its stock
sampling (``PostOrderApply`` over the CPU rules of ``tvm_ext.kernel_tuner.space.design_space``, then
``ReplayTrace``: every sampling decision re-drawn at random, the stock post-processors applied;
no ranking of ours). Each distinct candidate is built for this host, checked against numpy and
timed (the minimum over repeats, with the target's cores as threads), in a child process per
workload (a crashing candidate is recorded and skipped). Bounds are computed afterwards from
each candidate's trace, so ``--rebound`` re-prices a saved run with the current policy.

    .venv/bin/python bench/bound_audit.py [--per-workload 55] [--quick] [--no-readme]
    .venv/bin/python bench/bound_audit.py --rebound bench/bound_audit.json [--freeze-corpus 30]

Per workload it reports: candidates, violations (measured < bound), min/median/max of
measured/bound, the share a cut at the workload's best measured time would drop (bound >=
best), and how often each arm binds. Raw rows (workload, trace, bound, arms, measured) go to
``bench/bound_audit.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
RAW = HERE / "bound_audit.json"
CORPUS = HERE.parent / "tests" / "data" / "bound_corpus" / "corpus.json"

# name -> (suite kernel, positional args, keyword args)
WORKLOADS = {
    "matmul 256^3": ("matmul", (256, 256, 256), {}),
    "matmul 16x512x512 (skinny)": ("matmul", (16, 512, 512), {}),
    "batch_matmul 8x64x128x64": ("batch_matmul", (8, 64, 128, 64), {}),
    "conv2d 1x16x28x28 f16 k3": ("conv2d", (1, 16, 28, 28, 16), {"padding": 1}),
    "layernorm 256x1024": ("layernorm", (256, 1024), {}),
    "softmax 256x1024": ("softmax", (256, 1024), {}),
    # u8 x s8 -> i32: priced at its input dtype's rate, not its int32 output's
    "matmul u8s8 256^3": ("matmul", (256, 256, 256), {"dtype": "uint8"}),
}
# name -> (zoo model, words of the task's name): a task of a model as the model tuner finds it
# (weights marked layout-free: MetaSchedule's candidates repack them, and the runner times
# them without that repacking, as the compiled model runs them), checked against its own
# unscheduled function.
MODEL_TASKS = {
    "resnet conv3x3 (model task)": ("resnet", ("conv2d",)),
    "encoder attention scores (model task)": ("encoder", ("matmul1_multiply1",)),
    "encoder layer_norm (model task)": ("encoder", ("layer_norm",)),
}
# name -> (rows, columns): the GELU a torch-exported BERT runs as a kernel of its own
# (x * 0.5 * (1 + erf(x / sqrt 2)), erf as TVM's fast_erf polynomial, which TE writes with its
# clamped input inlined at every use: the walker counted each copy and read high before
# commit 7604c1e), checked against its own unscheduled function.
GELU_TASKS = {"gelu 384x3072 fast_erf (BERT's)": (384, 3072)}


def gelu_func(rows: int, cols: int):
    """BERT's exported GELU (see :data:`GELU_TASKS`) as a PrimFunc."""
    from tvm import te, topi

    x = te.placeholder((rows, cols), "float32", name="x")
    erf = topi.fast_erf(te.compute(x.shape, lambda i, j: x[i, j] * 0.70710677, name="scaled"))
    out = te.compute(x.shape, lambda i, j: x[i, j] * 0.5 * (1.0 + erf[i, j]), name="gelu")
    return te.create_prim_func([x, out])


def workload(name):
    """A suite Workload, or None for a model task (see :func:`subject`)."""
    from tvm_ext import kernels

    if name in MODEL_TASKS or name in GELU_TASKS:
        return None
    kernel, args, kwargs = WORKLOADS[name]
    return kernels.SUITE[kernel](*args, **kwargs)


def subject(name):
    """(function, Workload or None) the audit samples and times under ``name``."""
    if name in GELU_TASKS:
        return gelu_func(*GELU_TASKS[name]), None
    w = workload(name)
    return (w.func, w) if w is not None else (model_task(name), None)


def model_task(name: str):
    """The zoo model's task whose name holds every word of ``MODEL_TASKS[name]`` (the
    heaviest such), as the model tuner extracts it, at the zoo's full sizes."""
    from tvm_ext import host_target
    from tvm_ext.model_pipeline.model_tuner import prepare_model
    from tvm_ext.workloads import models

    model_name, words = MODEL_TASKS[name]
    prepared = prepare_model(models.build(model_name), host_target(), None, None, None)
    found = [f for f in prepared.found if all(w in f.name for w in words)]
    if not found:
        names = ", ".join(f.name for f in prepared.found)
        raise SystemExit(f"{name}: no task of {model_name} is named with {words}: {names}")
    return max(found, key=lambda f: f.weight).func


def kind(name: str) -> tuple[str, list, dict]:
    """(kernel, args, kwargs) recorded with each row."""
    if name in MODEL_TASKS:
        model_name, words = MODEL_TASKS[name]
        return "model task", [], {"model": model_name, "task": list(words)}
    if name in GELU_TASKS:
        return "gelu", list(GELU_TASKS[name]), {}
    kernel, args, kwargs = WORKLOADS[name]
    return kernel, list(args), kwargs


def sample(name: str, count: int, seed: int) -> list:
    """Up to ``count`` distinct candidates (trace JSON) of MetaSchedule's stock sampling."""
    from tvm_ext import host_target
    from tvm_ext.base import tvm_api
    from tvm_ext.kernel_tuner.space import design_space
    from tvm_ext.records.logs import structural_hash

    ms = tvm_api.meta_schedule("llvm")
    target = host_target()
    func, _ = subject(name)
    seen, traces = set(), []
    for round_ in range(6):  # ReplayTrace repeats itself: draw again until enough are distinct
        ctx = ms.TuneContext(
            tvm_api.as_module(func.with_attr("global_symbol", "main")),
            target=target,
            space_generator=design_space(target),
            search_strategy=ms.search_strategy.ReplayTrace(),
            task_name=name,
            rand_state=seed + 1000 * round_,
            num_threads=1,  # deterministic for a seed
        )
        ctx.pre_tuning(2 * count, 2 * count, ctx.generate_design_space())
        for cand in ctx.generate_measure_candidates() or ():
            key = structural_hash(cand.sch.mod)
            if key in seen:
                continue
            seen.add(key)
            traces.append(_plain(cand.sch.trace.as_json()))
            if len(traces) >= count:
                return traces
    return traces


def _plain(obj):
    """A trace's JSON as plain Python (TVM's containers and immediates unpacked)."""
    if isinstance(obj, (list, tuple)) or type(obj).__name__ == "Array":
        return [_plain(x) for x in obj]
    if isinstance(obj, dict) or type(obj).__name__ == "Map":
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (bool, int, float, str)) or obj is None:
        return obj
    if hasattr(obj, "value"):  # IntImm, FloatImm, StringImm
        return obj.value
    raise TypeError(f"cannot write {type(obj).__name__} of a trace as JSON")


def measure_child(name: str, traces_file: str, out: str, start: int, repeat: int) -> None:
    """Build, check and time each trace from index ``start``; one JSON line per candidate."""
    from tvm_ext import host_target
    from tvm_ext.base.errors import ParityError
    from tvm_ext.measurement.measure import measure
    from tvm_ext.records.logs import apply_trace

    target = host_target()
    func, w = subject(name)
    traces = json.loads(pathlib.Path(traces_file).read_text())
    with open(out, "a") as f:
        for i in range(start, len(traces)):
            f.write(json.dumps({"index": i, "status": "started"}) + "\n")
            f.flush()
            row = {"index": i}
            try:
                sch = apply_trace(func, traces[i])
                m = measure(sch, w, target, reference=None if w is not None else func,
                            repeat=repeat, min_repeat_ms=10,
                            weights_repacked_once=w is None)  # fmt: skip
                row.update(status="ok", measured_s=m.min_seconds, median_s=m.seconds,
                           threads=m.threads)  # fmt: skip
            except ParityError as err:
                row.update(status="parity", error=str(err)[:300])
            except Exception as err:  # noqa: BLE001  recorded per candidate, never silent
                row.update(status="failed", error=f"{type(err).__name__}: {str(err)[:300]}")
            f.write(json.dumps(row) + "\n")
            f.flush()


def _watch(cmd: list[str], out: pathlib.Path, limit_s: float) -> int:
    """Run the child; stop it when one candidate has run for ``limit_s`` (its return code)."""
    proc = subprocess.Popen(cmd)
    seen, since = -1, time.monotonic()
    while proc.poll() is None:
        time.sleep(1.0)
        lines = out.read_text().count("\n") if out.exists() else 0
        if lines != seen:
            seen, since = lines, time.monotonic()
        elif time.monotonic() - since > limit_s:
            proc.kill()  # the child we started, by its own handle
            proc.wait()
            return -9
    return proc.returncode


def measure_all(name: str, traces: list, repeat: int, limit_s: float = 180.0) -> list[dict]:
    """Measure ``traces`` in child processes, restarting after a crash (or a candidate that
    ran for ``limit_s``) past that candidate."""
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bound-audit-"))
    (tmp / "traces.json").write_text(json.dumps(traces))
    out = tmp / "rows.jsonl"
    results: dict[int, dict] = {}
    start = 0
    try:
        while start < len(traces):
            cmd = [sys.executable, __file__, "--child", name, "--traces", str(tmp / "traces.json"),
                   "--out", str(out), "--start", str(start), "--repeat", str(repeat)]  # fmt: skip
            returncode = _watch(cmd, out, limit_s)
            started = None
            for line in out.read_text().splitlines():
                row = json.loads(line)
                if row["status"] == "started":
                    started = row["index"]
                else:
                    results[row["index"]] = row
            if returncode == 0:
                break
            crashed = started if started is not None and started not in results else start
            status = "timeout" if returncode == -9 else "crashed"
            results[crashed] = {"index": crashed, "status": status, "rc": returncode}
            start = max(results) + 1
    finally:  # also when interrupted: no folder left in /tmp
        shutil.rmtree(tmp, ignore_errors=True)
    return [results.get(i, {"index": i, "status": "missing"}) for i in range(len(traces))]


def bound_rows(rows: list[dict], machine=None, stage2: bool = False) -> list[dict]:
    """Price every measured row with the roofline policy (in place), from its trace; with
    ``stage2``, also build it and price it after the build (``stage2_bound_s``: the bound the
    cut applies before the run, read off the machine code, never below the stage-1 bound)."""
    from tvm_ext.cost import RooflinePolicy, evaluate
    from tvm_ext.cost.post_build import evaluate_built

    from tvm_ext import host_target
    from tvm_ext.hardware.machine import host_machine
    from tvm_ext.records.logs import apply_trace

    target = host_target()
    machine = machine if machine is not None else host_machine(target)
    policy, cache = RooflinePolicy(), {}
    for row in rows:
        if row["workload"] not in cache:
            cache[row["workload"]] = subject(row["workload"])
        func, w = cache[row["workload"]]
        sch = apply_trace(func, row["trace"])
        if stage2:
            cost, built, code = evaluate_built(policy, sch, target, machine=machine, workload=w)
            row["stage2_bound_s"] = built.lower_bound_s
            row["stage2_binding"] = built.binding
            row["fp_lanes"] = code.fp_lanes
        else:
            cost = evaluate(policy, sch, target, machine=machine, workload=w)
        row["bound_s"] = cost.lower_bound_s
        row["binding"] = cost.binding
        row["arms"] = dict(cost.arms)
    return rows


def probed_clock_scale(data: dict) -> float | None:
    """How much faster the bounds price the cores than the day probe found them: the top
    boost of the CPU model over the clock one dependent FMA chain ran at (taken as
    ``MIN_FMA_LATENCY_CYCLES`` cycles a step over the probed time: exact where the FMA takes 4
    cycles, as on Zen 4, Zen 5 and Intel since Skylake; on a core whose FMA takes longer the
    clock reads low and the scale high). None without a day probe."""
    from tvm_ext.hardware.isa import MIN_FMA_LATENCY_CYCLES, max_boost_hz

    probe = data.get("day_probe")
    if not probe:
        return None
    clock_hz = MIN_FMA_LATENCY_CYCLES / (probe["fma_latency_ns"] * 1e-9)
    return max_boost_hz(_priced(data)) / clock_hz


def _priced(data: dict) -> str:
    """The CPU the bounds priced: the machine model's table name (a server die's
    ``znver4+genoa``), recorded since the dies were; the LLVM name in older samples."""
    return data.get("priced_as") or data["mcpu"]


def summarize(rows: list[dict], clock_scale: float | None = None):
    """Per workload and overall; with ``clock_scale`` (:func:`probed_clock_scale`), also the
    stage-2 median had every bound been priced at the clock the day probe read: a diagnostic
    of how much of the gap is the clock, not a bound (the cut never uses it)."""
    import numpy as np
    import pandas as pd

    out = []
    groups = {name: [r for r in rows if r["workload"] == name] for name in dict.fromkeys(
        r["workload"] for r in rows)}  # fmt: skip
    groups["all"] = rows
    measured = [r for r in rows if r.get("status") == "ok" and r.get("bound_s")]
    best = {}
    for r in measured:
        best[r["workload"]] = min(best.get(r["workload"], float("inf")), r["measured_s"])
    for name, group in groups.items():
        ok = [r for r in group if r.get("status") == "ok" and r.get("bound_s")]
        if not ok:
            continue
        ratio = np.array([r["measured_s"] / r["bound_s"] for r in ok])
        cut = np.mean([r["bound_s"] >= best[r["workload"]] for r in ok])
        arms = pd.Series([r["binding"] for r in ok]).value_counts()
        row = {
            "workload": name,
            "candidates": len(ok),
            "failed": sum(1 for r in group if r.get("status") != "ok"),
            "violations": int(np.sum(ratio < 1.0)),
            "min measured/bound": ratio.min(),
            "median": float(np.median(ratio)),
            "max": ratio.max(),
            "cut at best drops %": 100 * cut,
            "binding arms": ", ".join(f"{a} {n}" for a, n in arms.items()),
        }
        if all(r.get("stage2_bound_s") for r in ok):  # priced after build too
            two = np.array([r["measured_s"] / r["stage2_bound_s"] for r in ok])
            row["stage 2 violations"] = int(np.sum(two < 1.0))
            row["stage 2 min"] = two.min()
            row["stage 2 median"] = float(np.median(two))
            row["stage 2 within 3x %"] = 100 * float(np.mean(two <= 3.0))
            if clock_scale:  # every arm scaled, the bandwidth arms too: a ratio no higher
                row["stage 2 median at probed clock"] = float(np.median(two)) / clock_scale
            row["stage 2 cut at best drops %"] = 100 * np.mean(
                [r["stage2_bound_s"] >= best[r["workload"]] for r in ok]
            )
            binding = pd.Series([r.get("stage2_binding") or r["binding"] for r in ok])
            row["stage 2 binding arms"] = ", ".join(
                f"{a} {n}" for a, n in binding.value_counts().items()
            )
        out.append(row)
    return pd.DataFrame(out)


def freeze_corpus(data: dict, count: int) -> None:
    """Each workload's row closest to its bound (the larger of both stages'), the next closest
    up to half of ``count``, and a spread of the rest, with everything a test needs to
    recompute each bound without probing (see tests/test_bound_arms.py)."""
    ok = [r for r in data["rows"] if r.get("status") == "ok" and r.get("bound_s")]
    ok.sort(key=lambda r: r["measured_s"] / max(r["bound_s"], r.get("stage2_bound_s") or 0))
    firsts = list({r["workload"]: r for r in reversed(ok)}.values())  # each workload's closest
    closest = firsts + [r for r in ok if r not in firsts][: max(count // 2 - len(firsts), 0)]
    rest = [r for r in ok if r not in closest]
    step = max(len(rest) // max(count - len(closest), 1), 1)
    chosen = closest + rest[::step][: count - len(closest)]
    corpus = {
        "about": "Frozen MetaSchedule candidates with their measured minimum time; each "
        "measured_s must be at least the roofline bound recomputed on the recorded CPU.",
        "source": "bench/bound_audit.py",
        "cpu_model": data["cpu_model"],
        "mcpu": data["mcpu"],
        "cores": data["cores"],
        "machine": data["machine"],
        "load_average": data.get("load_average"),
        "date": data["date"],
        "candidates": [
            {
                k: r[k]
                for k in (
                    "workload",
                    "kernel",
                    "args",
                    "kwargs",
                    "trace",
                    "measured_s",
                    "bound_s",
                    "binding",
                    "stage2_bound_s",
                    "stage2_binding",
                )
                if k in r
            }  # fmt: skip
            for r in chosen
        ],
    }
    if CORPUS.exists():  # candidates kept for a violation they once showed stay frozen
        kept = json.loads(CORPUS.read_text()).get("candidates", [])
        corpus["candidates"] += [c for c in kept if c.get("regression")]
    CORPUS.parent.mkdir(parents=True, exist_ok=True)
    CORPUS.write_text(json.dumps(corpus, indent=1))
    print(f"froze {len(chosen)} candidates into {CORPUS}")


def day_probe(target) -> dict:
    """This host's fp32 peak (GFLOP/s) and FMA latency (ns) as it runs now."""
    from tvm_ext.base import tvm_api
    from tvm_ext.hardware.machine_probes import best_compute
    from tvm_ext.hardware.target import target_cores

    cores = target_cores(target)
    with tvm_api.threads(cores):
        peak, latency = best_compute(target, cores)
    return {"fp32_peak_gflops": round(peak / 1e9, 1), "fma_latency_ns": round(latency * 1e9, 3)}


def _day_probe_text(data: dict) -> str:
    probe = data.get("day_probe")
    if not probe:
        return ""
    return (
        f"The host at the start of the run: fp32 peak {probe['fp32_peak_gflops']} GFLOP/s, "
        f"FMA latency {probe['fma_latency_ns']} ns (the bounds price `{_priced(data)}`'s "
        "fastest part at its top clock, so ratios move with the host's speed).\n\n"
    )


def samples_table():
    """One row per saved audit (``bench/bound_audit*.json``), from the bounds stored in it."""
    import re

    import pandas as pd

    rows = []
    for path in sorted(HERE.glob("bound_audit*.json")):
        data = json.loads(path.read_text())
        table = summarize(data["rows"], probed_clock_scale(data))
        overall = table[table["workload"] == "all"].iloc[0].to_dict()
        seed = re.search(r"--seed (\d+)", data.get("command", ""))
        rows.append({
            "file": path.name,
            "seed": int(seed[1]) if seed else 0,
            "CPU": f"{data.get('cpu_model', '?')} `{_priced(data) if 'mcpu' in data else '?'}`",
            "measured": data.get("date", "?"),
            "priced": data.get("priced", "when measured"),
            "candidates": overall["candidates"],
            "violations": overall["violations"],
            "stage 2 violations": overall.get("stage 2 violations"),
            "stage 2 median": overall.get("stage 2 median"),
            "stage 2 within 3x %": overall.get("stage 2 within 3x %"),
            "stage 2 cut at best drops %": overall.get("stage 2 cut at best drops %"),
            "stage 2 median at probed clock": overall.get("stage 2 median at probed clock"),
        })  # fmt: skip
    return pd.DataFrame(rows)


def write_samples(no_readme: bool) -> None:
    sys.path.insert(0, str(HERE))
    from _common import write_section

    table = samples_table()
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    total = int(table["candidates"].sum())
    violations = int(table["violations"].sum() + table["stage 2 violations"].fillna(0).sum())
    if not no_readme:
        write_section(
            "bound-audit-samples",
            "### Every saved audit sample (`bench/bound_audit.py --samples`)\n\n"
            f"{len(table)} samples, {total} candidates, {violations} violations at either "
            "stage, each as it was priced (the `priced` column: re-priced with `--rebound`, "
            "or when measured). Seed 0 is the sample the arms were designed on; every other "
            "seed is a fresh sample. Samples measured before 2026-12-02 read high: until then "
            "a parity check's numpy reference left an OpenBLAS worker spinning through the "
            'timing (`tvm_ext/base/host_threads.py` now parks it). "at probed clock": the '
            "stage-2 median had every bound been priced at the clock the day probe read "
            "(empty without a day probe).",
            table,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-workload", type=int, default=55)
    parser.add_argument("--quick", action="store_true", help="4 candidates per workload")
    parser.add_argument(
        "--seed", type=int, default=0,
        help="sampling seed (TVM's generator takes 0 and 1 as the same seed: use 0 or >= 2)",
    )  # fmt: skip
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workloads", nargs="*", default=[*WORKLOADS, *MODEL_TASKS, *GELU_TASKS])
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--rebound", help="re-price a saved run (JSON) instead of measuring")
    parser.add_argument("--freeze-corpus", type=int, default=0, metavar="N")
    parser.add_argument(
        "--stage2", action="store_true", help="also build each candidate and price it after build"
    )
    parser.add_argument("--out", default=str(RAW))
    parser.add_argument(
        "--samples", action="store_true",
        help="summarize every saved audit (bench/bound_audit*.json) as it was priced, one row each",
    )  # fmt: skip
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--traces", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        measure_child(args.child, args.traces, args.out, args.start, args.repeat)
        return
    if args.samples:
        write_samples(args.no_readme)
        return
    from tvm_ext import host_target
    from tvm_ext.hardware.machine import host_machine
    from tvm_ext.hardware.target import target_cores, target_cpu

    sys.path.insert(0, str(HERE))
    from _common import cpu_name, write_section

    target = host_target()
    if args.rebound:
        data = json.loads(pathlib.Path(args.rebound).read_text())
        data["priced"] = f"bounds recomputed {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    else:
        count = 4 if args.quick else args.per_workload
        data = {
            "cpu_model": cpu_name(),
            "mcpu": target_cpu(target),
            "priced_as": host_machine(target).cpu,
            "cores": target_cores(target),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "command": " ".join(sys.argv),
            "repeat": args.repeat,
            "load_average": {"start": os.getloadavg()},
            # How fast the host ran that day: the bounds price the fastest part of the CPU
            # model at its top clock, so ratios move with the host (best of 3 probes each).
            "day_probe": day_probe(target),
            "rows": [],
        }
        for name in args.workloads:
            started = time.perf_counter()
            traces = sample(name, count, args.seed)
            kernel, pos, kw = kind(name)
            for trace, res in zip(traces, measure_all(name, traces, args.repeat)):
                res.update(workload=name, kernel=kernel, args=pos, kwargs=kw, trace=trace)
                data["rows"].append(res)
            print(f"{name}: {len(traces)} candidates in {time.perf_counter() - started:.0f} s",
                  flush=True)  # fmt: skip
        data["load_average"]["end"] = os.getloadavg()
        pathlib.Path(args.out).write_text(json.dumps(data))  # the measurements, before pricing
    machine = host_machine(target)
    data["machine"] = machine.to_json()
    bound_rows([r for r in data["rows"] if r.get("status") == "ok"], machine, args.stage2)
    pathlib.Path(args.out).write_text(json.dumps(data))
    table = summarize(data["rows"], probed_clock_scale(data))
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    if args.freeze_corpus:
        freeze_corpus(data, args.freeze_corpus)
    if not args.no_readme:
        load = data["load_average"]
        write_section(
            "bound_audit",
            f"### Roofline bound vs MetaSchedule's own candidates (stock ReplayTrace sampling, "
            f"{data['cores']} threads, min of {data.get('repeat', args.repeat)} timed repeats; "
            f"LLVM CPU `{data['mcpu']}`; load average {load['start'][0]:.1f} at the start, "
            f"{load.get('end', load['start'])[0]:.1f} at the end)\n\n"
            + _day_probe_text(data)
            + f"Measured with `{data['command']}`"
            + (f" ({data['priced']} with `--rebound`)" if data.get("priced") else "")
            + '. measured/bound < 1 is a violation; "cut at best" is the share of candidates '
            "whose bound is at least the workload's best measured time; failed: a build, run or "
            'parity failure, or a candidate stopped after minutes of one run. "stage 2" '
            "columns (with `--stage2`): the bound after the build, read off the machine code "
            "(the widest floating-point instruction; per basic block, the load and store "
            "slots and bytes and the vector-pipe instructions it needs for each FLOP it can "
            "do, a counted loop priced with the blocks around it: `machine_code.loads`, "
            "`.load_bytes`, `.stores`, `.store_bytes`, `.vector_ops`) and the optimized LLVM "
            "IR (each "
            "reduction chain's width by the buffer it is stored to, one accumulator at a time "
            "or not, still a loop or not), which the cut applies before the run. `phases`: "
            "the parallel bodies run one after the other, their arms add (`@code`: with the "
            'built code\'s arms). "at probed clock": the stage-2 median had every bound been '
            "priced at the clock the day probe read instead of the CPU model's top boost (a "
            "diagnostic of how much of the gap is the clock; not a bound, the cut never uses "
            "it). Bounds are recomputed from each candidate's trace, so a re-priced table holds "
            "the same measurements.",
            table,
        )


if __name__ == "__main__":
    main()
