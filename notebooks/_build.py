"""Write the notebooks from their cell sources (kept here so diffs stay readable).

    .venv/bin/python notebooks/_build.py            # write the .ipynb files (no outputs)
    .venv/bin/python notebooks/_build.py --execute  # and run them in full mode, keeping outputs
    .venv/bin/python notebooks/_build.py 03         # only the notebooks whose names start so
"""

from __future__ import annotations

import pathlib
import sys

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = pathlib.Path(__file__).resolve().parent

SETUP = '''import os, pathlib
QUICK = os.environ.get("TVM_EXT_NOTEBOOK_QUICK") == "1"  # CI runs small shapes
FIGURES = pathlib.Path("figures"); FIGURES.mkdir(exist_ok=True)
import tvm_ext
from tvm_ext import kernels, measure, schedules, host_target, cuda_target
from tvm_ext.records.logs import cpu_model
target = host_target()
print(f"{cpu_model()} ({target.attrs['mcpu']}), {target.attrs['num-cores']} threads, quick={QUICK}")'''

MINILAB = [
    new_markdown_cell("""# Scheduling one kernel three ways

**Goal.** Take one matmul and schedule it for the CPU, for a GPU, and onto a hardware dot
instruction; for each, report the three numbers that matter — parity against numpy, GFLOP/s,
and % of the machine's peak — with a note naming the roofline bound the schedule chases.
(The lecture's mini-lab, on TVM 0.27 with `tvm_ext`.)"""),
    new_code_cell(SETUP),
    new_markdown_cell("""## The kernel
`C[i, j] = sum_k A[i, k] * B[k, j]`, defined in TE; the workload carries its numpy reference
and its FLOP count."""),
    new_code_cell('''N = 128 if QUICK else 512
w = kernels.matmul(N, N, N)
print(w.key, f"{w.flops / 1e6:.0f} MFLOP, {w.min_bytes / 1e6:.2f} MB compulsory traffic")
print(w.func.script()[:700])'''),
    new_markdown_cell("""## The schedules
- **baseline**: the nest as written;
- **cpu**: the lecture's tile → cache_write local → vectorize → parallel, and the library's
  register-blocked micro-kernel over packed B panels;
- **gpu**: block/thread binding with *cooperative* shared-memory staging (every thread copies
  one vector of each tile), register tiles and a double-buffered K loop;
- **tensorized**: uint8 x int8 onto AVX512-VNNI `vpdpbusd` and bf16 onto AVX512-BF16
  `vdpbf16ps` where the CPU has them (WMMA on a GPU)."""),
    new_code_cell('''import tvm
from tvm_ext.schedules.teaching.lecture import lecture_cpu_matmul
gpu = cuda_target("sm_90")
w8 = kernels.matmul(N, N, N, "uint8")
from tvm_ext.schedules.hand import matmul_bf16, matmul_vnni
wb = kernels.matmul(N, N, N, "bfloat16")
rows = {
    "baseline (naive)": (w, w.func, target),
    "cpu (lecture)": (w, lecture_cpu_matmul(w), target),
    "cpu (library)": (w, schedules.schedule(w, target), target),
    "gpu (shared + registers)": (w, schedules.schedule(w, gpu), gpu),
}
if matmul_vnni.applies(w8, target):
    rows["tensorized (VNNI u8s8)"] = (w8, schedules.schedule(w8, target), target)
if matmul_bf16.applies(wb, target):
    rows["tensorized (AVX512-BF16)"] = (wb, schedules.schedule(wb, target), target)
src = tvm.tirx.build(rows["gpu (shared + registers)"][1].mod, target=gpu).imports[0].inspect_source()
body = src[src.index('extern "C" __global__'):]
for line in body.splitlines():
    if "__shared__" in line or "__syncthreads" in line or "__global__" in line:
        print(line.strip()[:110])'''),
    new_markdown_cell("""## Correctness, then speed
Every row is checked against the numpy reference before it is timed; a GPU schedule is timed
only where a GPU is present."""),
    new_code_cell('''import pandas as pd
from tvm_ext.cost import RooflinePolicy, evaluate
have_gpu = tvm.cuda(0).exist
records = []
for name, (wl, obj, tgt) in rows.items():
    if tgt.kind.name == "cuda" and not have_gpu:
        records.append({"schedule": name, "parity": "not run (no GPU)", "GFLOP/s": None,
                        "% peak": None, "bound": "n/a"})
        continue
    m = measure(obj, wl, tgt, repeat=5)
    cost = evaluate(RooflinePolicy(), obj, tgt, workload=wl)
    records.append({"schedule": name, "parity": f"ok ({m.max_rel_error:.1e})",
                    "GFLOP/s": round(m.gflops, 1), "% peak": round(100 * m.peak_fraction, 1),
                    "bound": cost.binding, "bound s": cost.lower_bound_s, "measured s": m.seconds})
table = pd.DataFrame(records)
table'''),
    new_markdown_cell("""## What each row chases
The note is computed from the roofline policy's binding arm and how close the run came to it."""),
    new_code_cell('''def note(r):
    if r["bound"] == "n/a":
        return "the fp32 CUDA-core roof; its numbers need a GPU."
    gap = r["measured s"] / r["bound s"]
    what = {"compute": "the vector FMA (or dot-product) roof at the lanes and cores it uses",
            "dependency": "the FMA latency of its serial reduction chains",
            "issue": "the instructions its loop body issues per cycle",
            "memory.llc": "last-level-cache bandwidth", "memory.dram": "DRAM bandwidth"}.get(r["bound"], r["bound"])
    return f"bound by {what}; {gap:.1f}x above that bound."
for _, r in table.iterrows():
    print(f"{r['schedule']:26s} {note(r)}")'''),
    new_markdown_cell("""## The cache cliff
GFLOP/s of the lecture schedule against its output tile: the local accumulator is
`tile x tile` floats; past the L1 data cache it spills, and speed falls off."""),
    new_code_cell('''import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
sizes = (8, 16, 32) if QUICK else (4, 8, 16, 32, 64, 128, 256)
sweep = schedules.tile_sweep(w, target, sizes=sizes, repeat=3)
cliff = sweep.loc[sweep["gflops"].diff().idxmin()] if len(sweep) > 1 else sweep.iloc[0]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(sweep["tile"], sweep["gflops"], "o-")
ax.axvline(cliff["tile"], color="red", ls="--", label=f"cliff: tile {int(cliff['tile'])} "
           f"({int(cliff['acc_bytes']) // 1024} KiB accumulator)")
ax.set_xscale("log", base=2); ax.set_xlabel("tile"); ax.set_ylabel("GFLOP/s"); ax.legend()
ax.set_title(f"lecture schedule, matmul {N}^3, {target.attrs['mcpu']}")
fig.tight_layout(); fig.savefig(FIGURES / "tile_sweep.png", dpi=120)
sweep'''),
]

REPLAY = [
    new_markdown_cell("""# Replaying a frozen tuning log

**Goal.** Use a tuned schedule later without searching again, and trust it: the log's
provenance is checked, parity is re-checked, and the time is measured afresh beside the
recorded one. A tampered log is refused with an error that says what differs."""),
    new_code_cell(SETUP),
    new_markdown_cell("## The shipped logs"),
    new_code_cell('''import pathlib
from tvm_ext.commands.report import report
from tvm_ext.records.logs import find_logs
from tvm_ext.hardware.machine import host_machine
ROOT = pathlib.Path(tvm_ext.__file__).resolve().parent.parent / "tuning_logs"  # the repo's logs
report(ROOT, host_machine())'''),
    new_markdown_cell("""## Replay one: no search, parity, a fresh time
On another CPU than the one that froze the log, replay needs `allow_other_target=True`."""),
    new_code_cell('''import warnings
from tvm_ext.kernel_tuner.replayer import replay
name = "matmul_M256_N256_K32_float32" if QUICK else "matmul_M512_N512_K512_float32"
folder = next(p for p in find_logs(ROOT) if p.name == name)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    r = replay(folder, allow_other_target=True, repeat=5)
for wmsg in caught:
    print("warning:", wmsg.message)
print(f"parity ok (max rel error {r.measurement.max_rel_error:.1e})")
import pandas as pd
pd.DataFrame([{"": "recorded", "GFLOP/s": r.recorded["best_gflops"], "when": r.recorded["date"],
               "cpu": r.recorded["cpu_model"]},
              {"": "replayed", "GFLOP/s": r.measurement.gflops, "when": "now", "cpu": cpu_model()}])'''),
    new_markdown_cell("## A tampered copy is refused, saying why"),
    new_code_cell('''import json, shutil, tempfile
from tvm_ext.base.errors import CorruptLog, WorkloadMismatch


def refused(log, expected, says):
    """Replay ``log``: it must be refused with ``expected``, saying ``says`` (else this cell
    fails, and so does the notebook test)."""
    try:
        replay(log, allow_other_target=True)
    except expected as err:
        assert says in str(err), err
        print(type(err).__name__, "->", err)
    else:
        raise AssertionError(f"replay accepted {log}; expected {expected.__name__}")


tmp = pathlib.Path(tempfile.mkdtemp()) / folder.name
shutil.copytree(folder, tmp)
manifest = json.loads((tmp / "manifest.json").read_text())
manifest["structural_hash"] = "0" * 16  # as if the kernel had changed since it was tuned
(tmp / "manifest.json").write_text(json.dumps(manifest))
refused(tmp, WorkloadMismatch, "different workload")
lines = (tmp / "database_tuning_record.json").read_text().splitlines()
(tmp / "database_tuning_record.json").write_text("\\n".join(lines + [lines[0][:40]]))
manifest["structural_hash"] = json.loads((folder / "manifest.json").read_text())["structural_hash"]
(tmp / "manifest.json").write_text(json.dumps(manifest))
refused(tmp, CorruptLog, f"line {len(lines) + 1}")  # the torn line, by number
shutil.rmtree(tmp.parent)  # the scratch copy, not left behind'''),
]

POLICIES = [
    new_markdown_cell("""# Cost policies: a proven bound, what it explains, what it prunes

**Goal.** See the roofline policy at work on one tuning run: every measured candidate against
its proven lower bound (coloured by the arm that sets it), and the best-so-far curve of one
search's candidates with the admissible cut and without it; then how the calibrated
service policy and the learned XGBoost policy rank candidates of workloads they never saw,
against the roofline and MetaSchedule's own model."""),
    new_code_cell(SETUP),
    new_markdown_cell("""## The kernel and one audited tuning run
Audit mode measures even the candidates the cut drops, so every point below was measured."""),
    new_code_cell('''from tvm_ext.kernel_tuner.tuner import tune
from tvm_ext.cost import RooflinePolicy
w = kernels.matmul(128, 128, 128) if QUICK else kernels.matmul(256, 256, 256)
trials = 16 if QUICK else 64
audited = tune(w.func, target, trials=trials, batch=16, seed=0, audit=True, progress=False)
recs = audited.stats["records"]  # (lower bound s, measured s, binding arm, dropped)
print(f"{w.key}: {len(recs)} candidates measured, {audited.stats['dropped']} dropped by the cut, "
      f"{audited.stats['regrets']} regrets, {audited.stats['violations']} bound violations")
assert audited.stats["violations"] == 0 and audited.stats["regrets"] == 0  # what the text claims'''),
    new_markdown_cell("""## The roofline chart
Each point is one candidate: its proven lower bound against its measured time. The bound is
the one the cut applied last: stage 2's, read off the built code (its vector widths and how its
reduction chains run), for every candidate that was built. Every point must lie above the
diagonal (a point below it would be a bound violation)."""),
    new_code_cell('''import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
def family(arm):  # stage 2's arms read the built code: "machine_code.compute", "<arm>@..."
    if arm.startswith("machine_code"):
        return "compute (machine code)"
    return arm.split("@")[0] + (" (built code)" if "@" in arm else "")
families = sorted({family(a) for b, _, a, _ in recs if b})
fig, ax = plt.subplots(figsize=(6, 4.5))
for i, name in enumerate(families):
    pts = [(b * 1e6, t * 1e6) for b, t, a, _ in recs if b and family(a) == name]
    ax.scatter(*zip(*pts), s=14, color=f"C{i}", label=f"binding: {name} ({len(pts)})")
lo = min(min(b, t) for b, t, _, _ in recs if b) * 1e6
hi = max(max(b, t) for b, t, _, _ in recs if b) * 1e6
ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="measured = bound")
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("proven lower bound (us)"); ax.set_ylabel("measured (us)")
ax.set_title(f"{w.key} on {target.attrs['mcpu']}: {len(recs)} candidates"); ax.legend(fontsize=8)
fig.tight_layout(); fig.savefig(FIGURES / "roofline_candidates.png", dpi=120)
closest = min(t / b for b, t, _, _ in recs if b)
print(f"closest candidate: {closest:.2f}x above its bound")
assert closest >= 1 - audited.stats["noise"], "a point below the diagonal: a bound violation"'''),
    new_markdown_cell("""## The same chart over MetaSchedule's own candidates
Our tuner's candidates all use full-width FMAs, so they share one bound: the compute floor.
MetaSchedule's own random samples (the violation hunt, `bench/bound_audit.py`: stock
`ReplayTrace` sampling, each candidate measured on the machine named in the title) spread
out: scalar and 128-bit code, serial reduction chains. Each point is one candidate's stage-2
bound against its measured time; the dotted line is 3x the bound."""),
    new_code_cell('''import json
root = pathlib.Path(tvm_ext.__file__).resolve().parents[1]
audit = json.loads((root / "bench" / "bound_audit.json").read_text())
rows = [r for r in audit["rows"] if r.get("status") == "ok" and r.get("stage2_bound_s")]
points = {r["workload"]: [] for r in rows}
for r in rows:
    points[r["workload"]].append((r["stage2_bound_s"] * 1e6, r["measured_s"] * 1e6))
fig, ax = plt.subplots(figsize=(6.5, 4.5))
for i, (name, pts) in enumerate(points.items()):
    ax.scatter(*zip(*pts), s=10, color=f"C{i}", label=name)
lo = min(min(p) for pts in points.values() for p in pts)
hi = max(max(p) for pts in points.values() for p in pts)
ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="measured = bound")
ax.plot([lo, hi], [3 * lo, 3 * hi], "k:", lw=1, label="3x the bound")
ax.set_xscale("log"); ax.set_yscale("log")
ax.set_xlabel("stage-2 lower bound (us)"); ax.set_ylabel("measured (us)")
ax.set_title(f"{len(rows)} stock candidates on {audit['mcpu']} ({audit['date'][:10]})", fontsize=10)
ax.legend(fontsize=7); fig.tight_layout(); fig.savefig(FIGURES / "audit_bounds.png", dpi=120)
ratios = sorted(r["measured_s"] / r["stage2_bound_s"] for r in rows)
print(f"violations: {sum(x < 1 for x in ratios)}, "
      f"median measured/bound {ratios[len(ratios) // 2]:.2f}, "
      f"within 3x: {sum(x <= 3 for x in ratios) / len(ratios):.0%}")
assert not any(x < 1 for x in ratios), "the frozen audit holds a violation"'''),
    new_markdown_cell("""## Best so far, with and without the cut
One audited search on a layernorm, read twice. Audit mode measures even the candidates the cut
drops, so the same stream of candidates gives both curves: every measurement (no cut), and
only those the cut lets through (stage 1 before the build, stage 2 after it). A layernorm's
bounds spread (serial reduction chains, parallel bodies run one after the other), so the cut
has something to drop, mostly at stage 2, where the code shows how its chains run. The cut is
admissible: both curves end at the same best, the cut's with fewer on-device measurements."""),
    new_code_cell('''wl = kernels.layernorm(64, 256) if QUICK else kernels.layernorm(256, 1024)
run = tune(wl.func, target, trials=trials, batch=16, seed=0, audit=True, progress=False)
def curve(records, keep):
    best, out = run.stats["hand_s"] or float("inf"), []
    for bound, t, _, dropped in records:
        if t is not None and keep(dropped):
            best = min(best, t)
            out.append(wl.flops / best / 1e9)
    return out
every = curve(run.stats["records"], lambda dropped: True)
passed = curve(run.stats["records"], lambda dropped: not dropped)
s1, s2 = run.stats["dropped_stage1"], run.stats["dropped_stage2"]
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(range(1, len(every) + 1), every, label=f"no cut ({len(every)} measured)")
ax.plot(range(1, len(passed) + 1), passed, "--",
        label=f"admissible cut ({len(passed)} measured; dropped: stage 1 {s1}, stage 2 {s2})")
ax.set_xlabel("on-device measurements"); ax.set_ylabel("best GFLOP/s so far")
ax.set_title(f"{wl.key}: one audited search of {trials} trials", fontsize=9)
ax.legend(fontsize=8); fig.tight_layout(); fig.savefig(FIGURES / "best_so_far.png", dpi=120)
print({"measured (no cut, cut)": (len(every), len(passed)), "dropped (stage 1, stage 2)": (s1, s2),
       "best GFLOP/s (no cut, cut)": (round(max(every), 1), round(max(passed), 1)),
       "regrets": run.stats["regrets"], "violations": run.stats["violations"]})
# Both curves end at the same best (within the audit's noise margin): the cut is admissible.
assert max(passed) >= max(every) * (1 - run.stats["noise"]) and run.stats["regrets"] == 0'''),
    new_markdown_cell("""## Policy comparison on held-out workloads
The shipped dataset (`tuning_logs/dataset`: plain MetaSchedule runs over the suite at many
shapes) is split by workload, never by row. For each fold the service profile is calibrated
and the XGBoost policy trained on the other folds; every policy then ranks the held-out
workloads' candidates. MetaSchedule's own XGB model is scored twice: as it runs in a stock tune
(cold, learning online from the held-out workload's own records, random until 100
measurements) and warm-started from the training folds. Quick mode uses four workloads."""),
    new_code_cell('''import json, pathlib
from tvm_ext.cost import dataset
from tvm_ext.cost.heldout import evaluate_policies
from tvm_ext.cost.training_data import log_folders
logs = pathlib.Path(tvm_ext.__file__).resolve().parents[1] / "tuning_logs" / "dataset"
folders = sorted(log_folders(logs), key=lambda f: f.name)
if QUICK:
    folders = folders[::5]
data = dataset(folders)  # priced on this machine (about a minute for all 18 logs), then cached
folds = 2 if QUICK else 6
per_workload, summary, fitted = evaluate_policies(data, folders, k=folds, seed=0)
print(f"{len(data)} measured candidates of {data['workload'].nunique()} workloads, "
      f"{folds} folds by workload")
summary.round(3)'''),
    new_markdown_cell("""Per held-out workload (pairwise ranking accuracy), and the frozen result that
`tvm-ext evaluate-policies --out tuning_logs/dataset/policies` wrote with the shipped model."""),
    new_code_cell('''print(per_workload.pivot(index="workload", columns="policy", values="pairwise").round(2)
      .to_string())
frozen = json.loads((logs / "policies" / "heldout.json").read_text())
print(f"\\nfrozen ({frozen['date'][:10]}, {frozen['cpu_model']}, {frozen['dataset']['rows']} rows):")
import pandas as pd
pd.DataFrame(frozen["summary"]).round(3)'''),
]

MODELS = [
    new_markdown_cell("""# A whole model on the CPU: rules that read the IR, then tuning

**Goal.** Take a model as a TVM user has it (a Relax module from `relax.frontend.nn`), compile
it for the host CPU with every kernel scheduled by the package's IR rules (TVM has no CPU
default schedule: an untuned build runs naive loops), and compare it with TVM's untuned build
and torch eager on the same threads. Every build is checked against the model's numpy
reference before it is timed."""),
    new_code_cell(SETUP),
    new_markdown_cell("""## Which rule took each kernel
`tvm_ext.compile` lowers the model (fast-math transcendentals, legalize, fuse, weights bound
so weight-only work folds away), then `tvm_ext.schedules.apply` hands each PrimFunc to the
first rule that recognises its pattern: `contraction` (matmul/conv-like with their fused
prologue and epilogue), `staged` (several reductions in one function, as attention),
`rows` (softmax/layernorm-like reductions along an axis), `injective`, and the `fallback`."""),
    new_code_cell('''from tvm_ext import models
size = "small" if QUICK else "full"
decoder = models.build("decoder", size)
ours = tvm_ext.compile(decoder, target)
table = ours.applied.table()
table["MFLOP"] = table["flops"] * table["calls"] / 1e6
print(f"{decoder.key}: {len(table)} kernels, share of FLOPs by rule:",
      {k: round(v, 4) for k, v in ours.applied.share_by_rule().items()})
table[["name", "rule", "calls", "MFLOP", "share"]].round(4)'''),
    new_markdown_cell("""## Coverage over the zoo
Share of each model's FLOPs by the rule that took it (the fallback should take none)."""),
    new_code_cell('''import pandas as pd
coverage, compiled = {}, {}
for name in models.ZOO:
    m = models.build(name, size)
    compiled[name] = (m, tvm_ext.compile(m, target))
    coverage[m.key] = compiled[name][1].applied.share_by_rule()
assert all(not share.get("fallback") for share in coverage.values()), coverage  # takes none
pd.DataFrame(coverage).T.fillna(0.0).round(4)'''),
    new_markdown_cell("""## Latency: TVM untuned vs ours (rules, no tuning) vs torch eager
Batch 1, the target's threads for all; parity against numpy first (a failure raises)."""),
    new_code_cell('''from tvm_ext.measurement.measure import time_callable
from tvm_ext.workloads.models_torch import torch_eager
from tvm_ext.model_pipeline.compile import compile_untuned
threads = int(target.attrs["num-cores"])
rows = []
for name, (m, ours_m) in compiled.items():
    row = {"model": m.key, "MFLOP": m.flops / 1e6}
    row["TVM untuned ms"] = compile_untuned(m, target).time(repeat=3, min_repeat_ms=20).seconds * 1e3
    row["ours ms"] = ours_m.time(repeat=5, min_repeat_ms=50).seconds * 1e3
    try:
        row["torch eager ms"] = time_callable(torch_eager(m, threads), 0.05, 5) * 1e3
    except ImportError:
        row["torch eager ms"] = float("nan")  # torch not installed
    rows.append(row)
latency = pd.DataFrame(rows)
latency["ours vs untuned"] = latency["TVM untuned ms"] / latency["ours ms"]
latency["ours vs torch"] = latency["torch eager ms"] / latency["ours ms"]
latency.round(3)'''),
    new_code_cell('''import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(6.5, 3.5))
cols = ["TVM untuned ms", "ours ms", "torch eager ms"]
latency.set_index("model")[cols].plot.bar(ax=ax, logy=True, rot=0)
ax.set_ylabel(f"ms per call ({threads} threads, log)")
ax.set_title(f"zoo at batch 1, {target.attrs['mcpu']}")
fig.tight_layout(); fig.savefig(FIGURES / "models_latency.png", dpi=120)'''),
    new_markdown_cell("""## Where the time goes: a torch model, kernel by kernel
A model users bring: torchvision's `resnet18` from the real-model suite
(`tvm_ext.build_suite`, seeded weights; `tvm_ext.from_torch` underneath), compiled with the
rules, then `tvm_ext.profile`: every call the VM makes, timed through its instrument, against
the latency measured without it. The chart puts each of the slowest kernels' time per call
beside its proven floor (`tvm_ext.cost.floor_s`: no schedule of it runs faster here): the
longer the gap, the more a better schedule can win. This is the rules issue's work list."""),
    new_code_cell('''from tvm_ext.workloads.suite import build_suite
net = build_suite("resnet18", size)
prof = tvm_ext.profile(tvm_ext.compile(net, target), min_seconds=0.5 if QUICK else 2.0)
print(f"{net.key}: {prof.latency.seconds * 1e3:.2f} ms end to end; the timed calls sum to "
      f"{100 * prof.timed_s / prof.latency.seconds:.0f} % of it over {prof.runs} runs")
table = prof.table()
table.head(12).round(3)'''),
    new_code_cell('''kern = table[table["kind"] == "kernel"].head(15)
fig, ax = plt.subplots(figsize=(7.5, 4.5))
y = list(range(len(kern)))
ax.barh(y, kern["per_call_us"], label="time per call")
ax.barh(y, kern["floor_us"], label="proven floor", alpha=0.8)
ax.set_yticks(y)
ax.set_yticklabels([f"{n[:40]} ({r})" for n, r in zip(kern["name"], kern["rule"])], fontsize=7)
ax.invert_yaxis(); ax.set_xscale("log"); ax.set_xlabel("us per call (log)"); ax.legend()
ax.set_title(f"{net.key}: slowest kernels against their floors, {target.attrs['mcpu']}")
fig.tight_layout(); fig.savefig(FIGURES / "profile_resnet18.png", dpi=120)'''),
]

TUNE_MODEL = [
    new_markdown_cell("""# Tuning a whole model: the proven bound decides where the trials go

**Goal.** Tune every kernel of a model under one trial budget. Every task starts from its IR
rule's schedule (so nothing is left naive, even at 0 trials); each next batch of trials goes to
the task whose *bound-limited* gain is largest: weight x min(recent improvement, incumbent -
proven floor). A task within 1.25x of its floor is retired. The model's proven floor (sum of
weight x floor) is drawn under the curves: no schedule the search could reach runs faster."""),
    new_code_cell(SETUP),
    new_code_cell('''import tempfile, shutil
import pandas as pd
from tvm_ext import models
from tvm_ext.model_pipeline.model_tuner import describe
name, size = ("mlp", "small") if QUICK else ("decoder", "full")
TRIALS, BATCH = (16, 8) if QUICK else (64, 16)  # bench/model_tuning.py runs 80-320
model = models.build(name, size)
logs = tempfile.mkdtemp(prefix="nb-model-logs-")
ours = tvm_ext.tune(model, target, trials=TRIALS, batch=BATCH, seed=0, log_dir=logs,
                    progress=False)
print(describe(ours))
shown = ours.tasks.copy()
for c in [c for c in shown.columns if c.endswith("_s")]:
    shown[c.removesuffix("_s") + " ms"] = shown.pop(c) * 1e3
shown.round(4)'''),
    new_markdown_cell("""## Where the budget went, and why
Each batch's task and the sum over tasks of weight x best time (the kernels' share of one
model run, from the measured incumbents) against trials spent; the proven floor below."""),
    new_code_cell('''import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
h = ours.history
per_task = (h.dropna(subset=["task"]).assign(n=h["trials"].diff().fillna(0))
            .pivot_table(index="trials", columns="task", values="n", aggfunc="sum")
            .fillna(0).cumsum())
fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.8))
if len(per_task):
    per_task.plot.area(ax=a1, legend=len(per_task.columns) <= 8)
a1.set_xlabel("trials spent"); a1.set_ylabel("trials per task (cumulative)")
a1.set_title("where the trials went")
a2.plot(h["trials"], h["estimate_s"] * 1e3, "o-", label="ours: sum of weight x task best")
if ours.floor_s:
    a2.axhline(ours.floor_s * 1e3, color="k", ls="--", label="proven floor")
a2.set_xlabel("trials spent"); a2.set_ylabel("ms per model run"); a2.legend()
fig.tight_layout(); fig.savefig(FIGURES / "model_trials.png", dpi=120)
h.tail(10)'''),
    new_markdown_cell("""## Against stock `tune_relax` at the same budgets
Stock MetaSchedule's model tuning (gradient task scheduler, XGB model, stock rules) on the
same lowered module, same threads and seed; a task it never measured keeps its naive loops.
Every point is a build whose parity was checked, timed end to end."""),
    new_code_cell('''from tvm_ext.model_pipeline.stock import tune_model_stock
budgets = [TRIALS] if QUICK else [TRIALS // 4, TRIALS // 2, TRIALS]
rows = [{"arm": "ours (rules, 0 trials)", "trials": 0,
         "ms": tvm_ext.compile(model, target).time().seconds * 1e3}]
for n in budgets:
    work = tempfile.mkdtemp(prefix="nb-stock-")
    stock = tune_model_stock(model, target, work, trials=n, batch=BATCH, seed=0)
    shutil.rmtree(work, ignore_errors=True)
    rows.append({"arm": "stock tune_relax", "trials": n, "ms": stock.compiled.time().seconds * 1e3,
                 "tasks tuned": f"{stock.tasks_tuned}/{stock.tasks}", "tune s": stock.seconds})
    if n != TRIALS:
        mine = tvm_ext.tune(model, target, trials=n, batch=BATCH, seed=0, progress=False)
    else:
        mine = ours
    rows.append({"arm": "ours", "trials": n, "ms": mine.latency.seconds * 1e3,
                 "tasks tuned": f"{len(mine.tasks)}/{len(mine.tasks)}", "tune s": mine.seconds})
table = pd.DataFrame(rows)
fig, ax = plt.subplots(figsize=(6, 3.8))
for arm, g in table[table["trials"] > 0].groupby("arm"):
    ax.plot(g["trials"], g["ms"], "o-", label=arm)
ax.axhline(rows[0]["ms"], color="gray", ls=":", label="ours at 0 trials (rules)")
if ours.floor_s:
    ax.axhline(ours.floor_s * 1e3, color="k", ls="--", label="proven floor")
ax.set_xlabel("trials"); ax.set_ylabel("end-to-end ms (measured)"); ax.set_yscale("log")
ax.legend(); fig.tight_layout(); fig.savefig(FIGURES / "model_vs_stock.png", dpi=120)
shutil.rmtree(logs, ignore_errors=True)
table.round(3)'''),
]

NOTEBOOKS = {"01_schedule_three_ways.ipynb": MINILAB, "02_cost_policies.ipynb": POLICIES,
             "03_replay.ipynb": REPLAY, "04_models.ipynb": MODELS,
             "05_tune_a_model.ipynb": TUNE_MODEL}


def main() -> None:
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__.strip())
        return
    execute = "--execute" in sys.argv
    only = [a for a in sys.argv[1:] if not a.startswith("--")]  # e.g. "02": rebuild that one
    for name, cells in NOTEBOOKS.items():
        if only and not any(name.startswith(o) for o in only):
            continue
        nb = new_notebook(cells=cells, metadata={"kernelspec": {
            "name": "python3", "display_name": "Python 3", "language": "python"}})
        if execute:
            from nbclient import NotebookClient

            NotebookClient(nb, timeout=900, resources={"metadata": {"path": str(HERE)}}).execute()
        nbformat.write(nb, HERE / name)
        print("wrote", name)


if __name__ == "__main__":
    main()
