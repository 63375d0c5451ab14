"""The real-model suite end to end: ours (the rules) vs torch eager vs torch.compile vs
onnxruntime, batch 1, every contender on the same threads, side by side in one run.

Each model is built once (``tvm_ext.build_suite``: torchvision / transformers, seeded random
weights); every contender runs that same torch module's weights on the same inputs and is
checked against torch eager's output before it is timed. One timer for all of them: a Python
loop over a call with its arguments ready (``time_callable``: median of ``--repeat`` samples
of at least ``--min-ms``), in interleaved rounds, the median kept. Ours is called through its
VM entry the same way (the arguments placed on the device once, as onnxruntime's feeds are).
Then ``tvm_ext.profile`` of ours: its five slowest kernels, against their proven floors.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/real_models.py \
        [--models resnet18,bert] [--size full] [--no-torch-compile] [--no-readme]
"""

from __future__ import annotations

import sys

from _unpin import rerun_unpinned  # noqa: E402

rerun_unpinned()  # before numpy loads OpenBLAS

import argparse  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from _common import (  # noqa: E402
    add_timing_args,
    as_numpy,
    blas_report,
    cpu_name,
    onnxruntime_call,
    time_callable,
    write_section,
)
from threadpoolctl import threadpool_limits  # noqa: E402

import tvm_ext  # noqa: E402
from tvm_ext.base import tvm_api  # noqa: E402
from tvm_ext.base.tvm_api import physical_cores  # noqa: E402
from tvm_ext.hardware.target import host_target, target_cpu  # noqa: E402
from tvm_ext.measurement.measure import check_parity  # noqa: E402
from tvm_ext.workloads import torch_libraries  # noqa: E402
from tvm_ext.workloads.suite import SUITE  # noqa: E402

CONTENDERS = ["ours", "torch eager", "torch.compile", "onnxruntime"]


def contenders(model, compiled, cores: int, use_compile: bool, folder):
    """{name: no-argument callable} for every contender, and {name: why skipped}."""
    torch = torch_libraries.torch()
    torch.set_num_threads(cores)
    module = model.torch_module
    inputs = [torch.from_numpy(np.array(a)) for a in model.inputs]
    calls = {"ours": compiled.ready_call()}
    skipped = {}

    def eager():
        with torch.inference_mode():
            return module(*inputs)

    calls["torch eager"] = eager
    if use_compile:
        try:
            inductor = torch.compile(module, dynamic=False)

            def compiled_call():
                with torch.inference_mode():
                    return inductor(*inputs)

            compiled_call()  # inductor compiles here
            calls["torch.compile"] = compiled_call
        except Exception as err:  # inductor needs a C++ toolchain and more; report, go on
            skipped["torch.compile"] = f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"
    else:
        skipped["torch.compile"] = "--no-torch-compile"
    try:
        calls["onnxruntime"] = onnxruntime_call(model, module, inputs, cores, folder)
    except ImportError as err:
        skipped["onnxruntime"] = f"not installed ({err.name})"
    except Exception as err:  # an export the exporter refuses: report, go on
        skipped["onnxruntime"] = f"{type(err).__name__}: {str(err).splitlines()[0][:100]}"
    return calls, skipped


def bench_one(name: str, args, cores: int, log, folder):
    started = time.perf_counter()
    model = tvm_ext.build_suite(name, args.size)
    compiled = tvm_ext.compile(model, host_target(num_cores=cores))
    shares = {k: round(v, 3) for k, v in compiled.applied.share_by_rule().items()}
    log(f"{model.key}: built and compiled in {time.perf_counter() - started:.0f} s "
        f"(compile {compiled.compile_seconds:.0f} s); FLOP share by rule: {shares}")  # fmt: skip
    calls, skipped = contenders(model, compiled, cores, args.torch_compile, folder)
    reference = model.reference()
    errors = {}
    for contender, call in calls.items():  # parity first
        errors[contender] = check_parity([as_numpy(call())], [reference], f"{name} {contender}")[1]
    times = {k: [] for k in calls}
    for _ in range(args.rounds):
        for contender, call in calls.items():
            time.sleep(args.pause)  # the previous contender's spinning workers park
            with threadpool_limits(cores), tvm_api.threads(cores):
                times[contender].append(time_callable(call, args.min_ms / 1e3, args.repeat))
    med = {k: statistics.median(v) for k, v in times.items()}
    peers = [med[k] for k in calls if k != "ours"]
    row = {"model": f"{name} ({args.size})", "MFLOP": model.flops / 1e6}
    row.update({f"{k} ms": med[k] * 1e3 if k in med else None for k in CONTENDERS})
    row["ours vs onnxruntime"] = med["onnxruntime"] / med["ours"] if "onnxruntime" in med else None
    row["ours vs torch eager"] = med["torch eager"] / med["ours"]
    row["ours vs best peer"] = min(peers) / med["ours"] if peers else None
    row["max rel error"] = max(errors.values())
    log("  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in med.items()))
    result = tvm_ext.profile(compiled, min_seconds=args.profile_seconds)
    slow = [
        {
            "model": name,
            "kernel": r.name,
            "rule": r.rule,
            "ms per run": r.per_run_s * 1e3,
            "share": r.share,
            "GFLOP/s": r.gflops,
            "x floor": r.x_floor,
        }  # fmt: skip
        for r in result.slowest(5)
    ]
    log(f"{name}: profile sums to {100 * result.timed_s / result.latency.seconds:.0f} % of "
        f"{result.latency.seconds * 1e3:.2f} ms")  # fmt: skip
    return row, slow, skipped


def main() -> None:
    cores = physical_cores()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SUITE), help="comma-separated names")
    parser.add_argument("--size", default="full", choices=("full", "small"))
    add_timing_args(parser)
    parser.add_argument("--profile-seconds", type=float, default=2.0)
    parser.add_argument("--no-torch-compile", dest="torch_compile", action="store_false")
    args = parser.parse_args()
    target = host_target(num_cores=cores)

    def log(message: str) -> None:
        print(message, flush=True)

    log(f"CPU {cpu_name()}, LLVM mcpu={target_cpu(target)}, {cores} threads; BLAS: {blas_report()}")
    rows, slowest, skips = [], [], {}
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            row, slow, skipped = bench_one(name, args, cores, log, folder)
            rows.append(row)
            slowest.extend(slow)
            for contender, why in skipped.items():
                skips.setdefault(contender, set()).add(f"{name}: {why}")
    log(f"BLAS after the runs (torch's own included): {blas_report()}")
    table, kernels = pd.DataFrame(rows), pd.DataFrame(slowest)
    print(table.to_string(index=False))
    print(kernels.to_string(index=False))
    if args.no_readme:
        return
    command = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/real_models.py"
    extra = " ".join(shlex.quote(a) for a in sys.argv[1:])
    header = f"### Real models (`bench/real_models.py`)\n\n`{command} {extra}`".replace(" `", "`")
    header += (
        f"\n\nBatch 1, {cores} threads for every contender (`-mcpu={target_cpu(target)}`), "
        "seeded random weights, parity against torch eager first (max rel error column). One "
        "timer for all: a Python loop over a ready call, median of "
        f"{args.repeat} samples of >= {args.min_ms} ms, {args.rounds} interleaved rounds. "
        f"BLAS: {blas_report()}. Skipped: {skips or 'none'}. {args.note}"
    )
    write_section("real-models", header, table)
    write_section(
        "real-models-kernels",
        "### The five slowest kernels of ours per real model (`tvm_ext.profile`)\n\n"
        "Per run, with the rule that scheduled each, its GFLOP/s and its time over its proven "
        "floor (`tvm_ext.cost.floor_s`).",
        kernels,
    )


if __name__ == "__main__":
    main()
