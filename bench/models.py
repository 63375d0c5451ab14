"""Zoo models end to end: TVM untuned vs ours vs torch eager vs torch.compile, one run.

Every contender runs the same weights on the same threads (the physical cores); TVM builds
and torch are parity-checked against the numpy reference before they are timed; contenders
are timed in interleaved rounds (a noisy neighbour hits each alike) and the median kept.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/models.py \
        [--quick] [--models mlp,encoder] [--batches 1,2] [--no-torch-compile] [--no-readme]

OpenBLAS reads OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE when it loads: set, they can pin numpy's
and torch's kernels to another core type than this CPU's. The script re-runs itself without
them if it finds them, and prints which BLAS kernel it ran (threadpoolctl).
"""

from __future__ import annotations

import sys

from _unpin import rerun_unpinned  # noqa: E402

rerun_unpinned()  # before numpy loads OpenBLAS

import argparse  # noqa: E402
import functools  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import pandas as pd  # noqa: E402
from _common import (  # noqa: E402
    ROOT_README,
    add_timing_args,
    blas_report,
    cpu_name,
    time_callable,
    write_section,
    write_text,
)
from threadpoolctl import threadpool_limits  # noqa: E402

import tvm_ext  # noqa: E402
from tvm_ext import models  # noqa: E402
from tvm_ext.base import tvm_api  # noqa: E402
from tvm_ext.base.tvm_api import physical_cores  # noqa: E402
from tvm_ext.hardware.target import target_cpu  # noqa: E402
from tvm_ext.model_pipeline.compile import compile_untuned  # noqa: E402
from tvm_ext.workloads.models_torch import onnxruntime_callable, torch_callable  # noqa: E402

COLUMNS = ["TVM untuned", "ours", "torch eager", "torch.compile", "onnxruntime"]


def torch_contenders(model, cores: int, use_compile: bool):
    """{name: callable} for torch eager and torch.compile, parity-checked; skips say why."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return {}, {"torch eager": "torch not installed (pip install -e '.[bench]')"}
    found, skipped = {}, {}
    kinds = {"torch eager": False, "torch.compile": True} if use_compile else {"torch eager": False}
    if not use_compile:
        skipped["torch.compile"] = "--no-torch-compile"
    for name, compile_ in kinds.items():
        try:
            found[name] = torch_callable(model, cores, compile_)
        except ValueError as err:  # parity
            skipped[name] = str(err)
        except Exception as err:  # inductor needs a C++ toolchain and more; report, go on
            skipped[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
    return found, skipped


def onnxruntime_contender(model, cores: int):
    """{"onnxruntime": callable} when onnxruntime (and onnx) are installed and its export and
    parity pass, else {} and the reason."""
    try:
        with tempfile.TemporaryDirectory() as folder:
            return {"onnxruntime": onnxruntime_callable(model, cores, folder)}, {}
    except ImportError as err:
        return {}, {"onnxruntime": f"not installed ({err.name}: pip install onnxruntime onnx)"}
    except Exception as err:  # export or session failure: report, go on
        return {}, {"onnxruntime": f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"}


def bench_one(name, batch, args, target, cores, log):
    """One zoo model at one batch: compile, parity, interleaved rounds; returns the table row,
    the rule table of ours and the skipped contenders with their reasons."""
    model = models.build(name, args.size, batch=batch)
    tvm = {"TVM untuned": compile_untuned(model, target), "ours": tvm_ext.compile(model, target)}
    log(
        f"{model.key}: compiled (untuned {tvm['TVM untuned'].compile_seconds:.1f} s, ours "
        f"{tvm['ours'].compile_seconds:.1f} s); rules: {tvm['ours'].applied.share_by_rule()}"
    )
    peers, skipped = torch_contenders(model, cores, args.torch_compile)
    ort_peer, ort_skip = onnxruntime_contender(model, cores)
    peers.update(ort_peer)
    skipped.update(ort_skip)
    for contender, reason in skipped.items():
        log(f"{model.key}: {contender} skipped: {reason}")
    # One timer for every contender: a Python loop over a ready call (ours: the VM entry with
    # its arguments placed), the same samples, rounds and statistic (bench/README.md).
    for compiled in tvm.values():  # parity against the numpy reference before any timing
        if not compiled.checked:
            compiled.check()
    calls = {k: compiled.ready_call() for k, compiled in tvm.items()} | peers
    times = {k: [] for k in calls}
    for _ in range(args.rounds):
        for k, fn in calls.items():
            time.sleep(args.pause)  # let the previous contender's spinning workers park
            with threadpool_limits(cores), tvm_api.threads(cores):
                times[k].append(time_callable(fn, args.min_ms / 1e3, args.repeat))
    med = {k: statistics.median(v) for k, v in times.items()}
    best_peer = min((med[k] for k in peers), default=None)
    row = {"model": f"{name} ({args.size})", "batch": batch, "MFLOP": model.flops / 1e6}
    row.update({f"{k} ms": med[k] * 1e3 if k in med else None for k in COLUMNS})
    row["ours vs untuned"] = med["TVM untuned"] / med["ours"]
    eager = med.get("torch eager")
    row["ours vs torch eager"] = eager / med["ours"] if eager else None
    row["ours vs best peer"] = best_peer / med["ours"] if best_peer else None
    row["ours GFLOP/s"] = model.flops / med["ours"] / 1e9
    log("  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in med.items()))
    return row, tvm["ours"].applied.table().assign(model=model.key), skipped


def parse_args(cores: int) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(models.ZOO), help="comma-separated names")
    parser.add_argument("--batches", default=f"1,{cores}", help="batch sizes (default 1,cores)")
    parser.add_argument("--size", default="full", choices=models.SIZES)
    add_timing_args(parser, rounds=5, repeat=7, min_ms=100)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 3 short repeats")
    parser.add_argument("--no-torch-compile", dest="torch_compile", action="store_false")
    parser.add_argument("--tables", action="store_true", help="print each model's rule table")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.repeat, args.min_ms, args.pause = 2, 3, 20, 0.1
    return args


def readme_header(args, cores: int, mcpu: str, skips: dict[str, set[str]]) -> str:
    flags = shlex.join(a for a in sys.argv[1:] if a not in ("--no-readme", "--note", args.note))
    skipped = "; ".join(f"{k}: {', '.join(sorted(v))}" for k, v in skips.items())
    return (
        f"### Models: the zoo end to end ({cores} threads each, ms per call, median of "
        f"{args.rounds} interleaved rounds; LLVM mcpu={mcpu})\n\n"
        f"BLAS: {blas_report()}. Skipped: {skipped or 'none'}.\n{args.note}\n\n"
        f"`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/models.py {flags}`"
    )


def readable(table: pd.DataFrame) -> pd.DataFrame:
    """Times and ratios to 3 significant digits (an MLP call is microseconds)."""
    out = table.copy()
    for column in out.columns:
        if column.endswith(" ms") or column.startswith("ours"):
            out[column] = [_three_digits(v) for v in out[column]]
    out["MFLOP"] = [_three_digits(v) for v in out["MFLOP"]]
    return out


def _three_digits(v: float) -> str:
    if v != v:  # NaN: a skipped contender
        return ""
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def main() -> None:
    cores = physical_cores()
    args = parse_args(cores)
    target = tvm_ext.host_target()
    log = functools.partial(print, flush=True)
    log(f"CPU {cpu_name()}, LLVM mcpu={target_cpu(target)}, {cores} threads; BLAS: {blas_report()}")
    rows, tables, skips, shares = [], [], {}, {}
    for name in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            row, table, skipped = bench_one(name, batch, args, target, cores, log)
            shares.setdefault(name, table.groupby("rule")["share"].sum().to_dict())  # batch 1
            rows.append(row)
            tables.append(table)
            for k, reason in skipped.items():
                skips.setdefault(k, set()).add(reason)
    log(f"BLAS after the runs (torch's own included): {blas_report()}")
    result = pd.DataFrame(rows).dropna(axis=1, how="all")  # a skipped contender's column
    pd.set_option("display.width", 200)
    print(result.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    if args.tables:
        print(pd.concat(tables).to_string(index=False))
    if not args.no_readme:
        write_section("models", readme_header(args, cores, target_cpu(target), skips),
                      readable(result), disable_numparse=True)  # fmt: skip
        if args.size == "full" and set(args.models.split(",")) == set(models.ZOO):
            summary = readme_summary(result, shares, args, cores, target_cpu(target))
            write_text("zoo-summary", summary, ROOT_README)


def readme_summary(result: pd.DataFrame, shares: dict, args, cores: int, mcpu: str) -> str:
    """The README's paragraph on the zoo: each model's ratios at every batch run and which rule
    took its FLOPs (``tests/test_readme_claims.py`` checks the shares against the rules)."""
    batches = " / ".join(f"batch {b}" for b in dict.fromkeys(result["batch"]))
    ratios = []
    for name, rows in result.groupby("model", sort=False):
        untuned = " / ".join(f"{v:.3g}x" for v in rows["ours vs untuned"])
        eager = " / ".join(f"{v:.3g}x" for v in rows["ours vs torch eager"])
        peer = " / ".join(f"{v:.3g}x" for v in rows["ours vs best peer"])
        ratios.append(f"{name.split(' ')[0]} {untuned}, {eager} and {peer}")
    rules = []
    for name, by_rule in shares.items():
        parts = [(r, 100 * v) for r, v in by_rule.items() if round(100 * v, 2) > 0]
        parts.sort(key=lambda x: -x[1])
        rules.append(f"{name}: " + ", ".join(f"`{r}` {v:.2f} %" for r, v in parts))
    fallback = any(by_rule.get("fallback") for by_rule in shares.values())
    return (
        f"Latest ({cpu_name()} `{mcpu}`, {cores} threads each; `bench/models.py`, whose table "
        f"and command are in `bench/README.md`): rules only, no tuning, at {batches}, ours vs "
        f"TVM untuned, vs torch eager and vs the best peer: {'; '.join(ratios)}. "
        + ("Some PrimFunc of the zoo fell to the fallback rule. " if fallback else
           "Every PrimFunc of the zoo is taken by a specific rule (none by the fallback). ")
        + f"FLOPs by rule: {'; '.join(rules)}."
    )  # fmt: skip


if __name__ == "__main__":
    main()
