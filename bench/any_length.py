"""Any sequence length, prefill: the suite's language models compiled once with a symbolic
length vs compiled once per length, beside onnxruntime and torch eager, side by side in one
run.

Per model (``tvm_ext.build_suite(name, size, max_seq=...)``, seeded random weights): ours
symbolic is one executable for every length (``torch.export`` with a ``Dim``); ours static is
one executable compiled for each length; onnxruntime runs one graph exported with a dynamic
sequence axis; torch eager runs the module. Every contender is checked against torch eager
at every length before it is timed. One timer for all: a Python loop over a ready call
(median of ``--repeat`` samples of at least ``--min-ms``), in interleaved rounds, the median
kept; ours is called through its VM entry with its arguments placed on the device once, as
onnxruntime's feeds are.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/any_length.py \
        [--models bert,llama] [--lengths 16,128,384] [--size full] [--no-readme]

Not here yet: the decode step against a KV cache (issue 35's item 3).
"""

from __future__ import annotations

import os
import sys

_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if any(v in os.environ for v in _PINS):  # before numpy loads OpenBLAS: re-run without them
    env = {k: v for k, v in os.environ.items() if k not in _PINS}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import argparse  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from _common import (  # noqa: E402
    as_numpy,
    blas_report,
    cpu_name,
    onnx_export,
    onnxruntime_session,
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

CONTENDERS = ["ours symbolic", "ours static", "onnxruntime", "torch eager"]


def _ours(compiled, ids):
    entry, arguments = compiled.vm[compiled.entry], compiled.arguments([ids])
    return lambda: entry(*arguments)


def bench_model(name: str, args, cores: int, target, log, folder) -> list[dict]:
    torch = torch_libraries.torch()
    torch.set_num_threads(cores)
    lengths = [int(n) for n in args.lengths.split(",")]
    started = time.perf_counter()
    model = tvm_ext.build_suite(name, args.size, seq=min(lengths), max_seq=max(lengths))
    symbolic = tvm_ext.compile(model, target)
    log(f"{name}: symbolic compile {time.perf_counter() - started:.0f} s, bounds {symbolic.bounds}")
    module = model.torch_module
    path = onnx_export(module, [torch.from_numpy(np.array(model.inputs[0]))],
                       f"{folder}/{name}.onnx", dynamic_axes={"input_ids": {1: "seq"}})  # fmt: skip
    session = onnxruntime_session(path, cores)
    feed = session.get_inputs()[0].name
    rows = []
    rng = np.random.default_rng(0)
    for n in lengths:
        ids = rng.integers(0, 1000, (1, n)).astype(np.int64)
        started = time.perf_counter()
        static = tvm_ext.compile(tvm_ext.build_suite(name, args.size, seq=n), target)
        log(f"{name} at {n}: static compile {time.perf_counter() - started:.0f} s")
        tensor = torch.from_numpy(ids)

        def eager(tensor=tensor):
            with torch.inference_mode():
                return module(tensor)

        calls = {
            "ours symbolic": _ours(symbolic, ids),
            "ours static": _ours(static, ids),
            "onnxruntime": lambda ids=ids: session.run(None, {feed: ids})[0],
            "torch eager": eager,
        }
        reference = as_numpy(eager())
        errors = {
            k: check_parity([as_numpy(c())], [reference], f"{name} {k} at {n}")[1]
            for k, c in calls.items()
        }
        times = {k: [] for k in calls}
        for _ in range(args.rounds):
            for contender, call in calls.items():
                time.sleep(args.pause)  # the previous contender's spinning workers park
                with threadpool_limits(cores), tvm_api.threads(cores):
                    times[contender].append(time_callable(call, args.min_ms / 1e3, args.repeat))
        med = {k: statistics.median(v) for k, v in times.items()}
        log("  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in med.items()))
        row = {"model": f"{name} ({args.size})", "length": n}
        row.update({f"{k} ms": med[k] * 1e3 for k in CONTENDERS})
        row["symbolic / static"] = med["ours symbolic"] / med["ours static"]
        row["symbolic vs onnxruntime"] = med["onnxruntime"] / med["ours symbolic"]
        row["symbolic vs torch eager"] = med["torch eager"] / med["ours symbolic"]
        row["max rel error"] = max(errors.values())
        rows.append(row)
    return rows


def main() -> None:
    cores = physical_cores()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,llama", help="comma-separated names")
    parser.add_argument("--lengths", default="16,128,384", help="prefill lengths")
    parser.add_argument("--size", default="full", choices=("full", "small"))
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--repeat", type=int, default=5, help="timed samples per round")
    parser.add_argument("--min-ms", type=int, default=200, help="minimum ms per sample")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between contenders")
    parser.add_argument("--no-readme", action="store_true", help="do not update bench/README.md")
    parser.add_argument("--note", default="", help="a sentence for the README (e.g. load)")
    args = parser.parse_args()
    target = host_target(num_cores=cores)

    def log(message: str) -> None:
        print(message, flush=True)

    log(f"CPU {cpu_name()}, LLVM mcpu={target_cpu(target)}, {cores} threads; BLAS: {blas_report()}")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            rows.extend(bench_model(name, args, cores, target, log, folder))
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    if args.no_readme:
        return
    command = "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/any_length.py"
    extra = " ".join(shlex.quote(a) for a in sys.argv[1:])
    header = f"### Any length, prefill (`bench/any_length.py`)\n\n`{command} {extra}`".replace(
        " `", "`"
    )
    header += (
        f"\n\nBatch 1, {cores} threads for every contender (`-mcpu={target_cpu(target)}`), "
        "seeded random weights, parity against torch eager first at every length. Ours "
        "symbolic: one executable for every length; ours static: one per length; onnxruntime: "
        "one graph with a dynamic sequence axis. One timer for all: a Python loop over a "
        f"ready call, median of {args.repeat} samples of >= {args.min_ms} ms, {args.rounds} "
        f"interleaved rounds. BLAS: {blas_report()}. {args.note}"
    )
    write_section("any-length", header, table)


if __name__ == "__main__":
    main()
