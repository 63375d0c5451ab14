"""Any sequence length: the suite's language models compiled once with a symbolic length vs
compiled once per length, beside onnxruntime and torch eager, side by side in one run;
prefill at several lengths, then Llama's decode step against KV caches of several lengths.

Per model (``tvm_ext.build_suite(name, size, max_seq=...)``, seeded random weights): ours
symbolic is one executable for every length (``torch.export`` with a ``Dim``); ours static is
one executable compiled for each length; onnxruntime runs one graph exported with a dynamic
sequence axis; torch eager runs the module. Every contender is checked against torch eager
at every length before it is timed. One timer for all: a Python loop over a ready call
(median of ``--repeat`` samples of at least ``--min-ms``), in interleaved rounds, the median
kept; ours is called through its VM entry with its arguments placed on the device once, as
onnxruntime's feeds are.

Decode (``tvm_ext.build_decode``): one token against a cache of ``n`` tokens from a real
prefill, the same four contenders running the same step graph (ours static: one executable
per cache length; onnxruntime: the step exported with a dynamic cache axis); its hidden
state and the cache's new row checked against torch eager's before timing. Ours runs in a
``tvm_ext.DecodeSession``, which also writes the new row into its cache buffer in place (the
peers return it); tokens per second is one over the step's time.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/any_length.py \
        [--models bert,llama] [--lengths 16,128,384] [--caches 128,1024] [--size full] \
        [--no-readme]
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


def _ours(compiled, *inputs):
    entry, arguments = compiled.vm[compiled.entry], compiled.arguments(list(inputs))
    return lambda: entry(*arguments)


def _outputs(out) -> list[np.ndarray]:
    """Every output of a contender's call (a tuple, a list, a TVM array, one tensor)."""
    if isinstance(out, (list, tuple)) or type(out).__name__ == "Array":
        return [as_numpy(o) for o in out]
    return [as_numpy(out)]


def _race(calls: dict, reference: list, label: str, args, cores: int) -> tuple[dict, float]:
    """Parity of every contender against ``reference`` first, then interleaved rounds of the
    one timer: ({contender: median seconds}, worst relative error)."""
    errors = [
        check_parity(_outputs(call()), reference, f"{label} {contender}")[1]
        for contender, call in calls.items()
    ]
    times = {k: [] for k in calls}
    for _ in range(args.rounds):
        for contender, call in calls.items():
            time.sleep(args.pause)  # the previous contender's spinning workers park
            with threadpool_limits(cores), tvm_api.threads(cores):
                times[contender].append(time_callable(call, args.min_ms / 1e3, args.repeat))
    return {k: statistics.median(v) for k, v in times.items()}, max(errors)


def _ratios(med: dict) -> dict:
    """The ratios the tables show: ours symbolic against ours static and the peers."""
    ours = med["ours symbolic"]
    return {
        "symbolic / static": ours / med["ours static"],
        "symbolic vs onnxruntime": med["onnxruntime"] / ours,
        "symbolic vs torch eager": med["torch eager"] / ours,
    }


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
        med, error = _race(calls, _outputs(eager()), f"{name} at {n}", args, cores)
        log("  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in med.items()))
        row = {"model": f"{name} ({args.size})", "length": n}
        row.update({f"{k} ms": med[k] * 1e3 for k in CONTENDERS})
        rows.append(row | _ratios(med) | {"max rel error": error})
    return rows


def bench_decode(args, cores: int, target, log, folder) -> list[dict]:
    """Llama's decode step at each cache length of ``--caches`` (see the module docstring)."""
    from tvm_ext.workloads.decode import cache_inputs, prefill_cache

    torch = torch_libraries.torch()
    torch.set_num_threads(cores)
    caches = [int(n) for n in args.caches.split(",")]
    started = time.perf_counter()
    model = tvm_ext.build_decode(args.size, cache=min(caches), max_cache=max(2048, *caches))
    symbolic = tvm_ext.DecodeSession(tvm_ext.compile(model, target))
    log(f"llama decode: symbolic compile {time.perf_counter() - started:.0f} s")
    module, llama = model.torch_module, model.torch_module.inner
    example = [torch.from_numpy(np.array(a)) for a in model.inputs]
    axes = {"input_ids": {}} | {f"past_{j}": {0: "n"} for j in range(len(example) - 1)}
    session = onnxruntime_session(
        onnx_export(module, example, f"{folder}/llama_decode.onnx", dynamic_axes=axes), cores
    )
    names = [i.name for i in session.get_inputs()]
    rows = []
    rng = np.random.default_rng(1)
    for n in caches:
        ids = rng.integers(0, llama.config.vocab_size, (1, n + 1)).astype(np.int64)
        token, cache = ids[:, n:], prefill_cache(llama, ids[:, :n])
        inputs = [token, *cache_inputs(cache)]
        started = time.perf_counter()
        static = tvm_ext.compile(tvm_ext.build_decode(args.size, cache=n, symbolic=False), target)
        static = tvm_ext.DecodeSession(static)
        log(f"llama decode at {n}: static compile {time.perf_counter() - started:.0f} s")
        for ours in (symbolic, static):
            ours.prefill(cache)
        tensors = [torch.from_numpy(a) for a in inputs]

        def eager(tensors=tensors):
            with torch.inference_mode():
                return module(*tensors)

        feeds = dict(zip(names, inputs))
        calls = {
            "ours symbolic": symbolic.ready_step(token),
            "ours static": static.ready_step(token),
            "onnxruntime": lambda feeds=feeds: session.run(None, feeds),
            "torch eager": eager,
        }
        med, error = _race(calls, _outputs(eager()), f"llama decode at {n}", args, cores)
        log("  ".join(f"{k} {v * 1e3:.3f} ms" for k, v in med.items()))
        row = {"model": f"llama decode ({args.size})", "cache": n}
        row.update({f"{k} tokens/s": 1 / med[k] for k in CONTENDERS})
        rows.append(row | _ratios(med) | {"max rel error": error})
    return rows


def main() -> None:
    cores = physical_cores()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert,llama", help="comma-separated names")
    parser.add_argument("--lengths", default="16,128,384", help="prefill lengths")
    parser.add_argument("--caches", default="128,1024", help="decode cache lengths ('' none)")
    parser.add_argument("--size", default="full", choices=("full", "small"))
    add_timing_args(parser)
    args = parser.parse_args()
    target = host_target(num_cores=cores)

    def log(message: str) -> None:
        print(message, flush=True)

    log(f"CPU {cpu_name()}, LLVM mcpu={target_cpu(target)}, {cores} threads; BLAS: {blas_report()}")
    rows, decode = [], []
    with tempfile.TemporaryDirectory() as folder:
        for name in filter(None, args.models.split(",")):
            rows.extend(bench_model(name, args, cores, target, log, folder))
        if args.caches:
            decode = bench_decode(args, cores, target, log, folder)
    table, steps = pd.DataFrame(rows), pd.DataFrame(decode)
    print(table.to_string(index=False))
    print(steps.to_string(index=False))
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
    if rows:
        write_section("any-length", header, table)
    if decode:
        write_section(
            "any-length-decode",
            "### Any length, decode (`bench/any_length.py`)\n\nLlama's decode step "
            "(`tvm_ext.build_decode`): one token against a KV cache of `cache` tokens from a "
            "real prefill, the cache read in place (every contender runs the same step graph; "
            "ours in a `tvm_ext.DecodeSession`, which also writes the token's row into its "
            "cache buffer); same command, threads, parity check and timer as the table above; "
            "tokens per second is one over the step's median time.",
            steps,
        )


if __name__ == "__main__":
    main()
