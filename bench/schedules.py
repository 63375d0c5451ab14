"""Hand schedules vs numpy and torch, side by side in one run on the host CPU.

Every contender runs with the physical core count in threads; ours is parity-checked before
it is timed; each workload's contenders are timed in interleaved rounds and the median kept.

    .venv/bin/python bench/schedules.py [--quick] [--no-readme]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import pandas as pd
from _common import blas_report, time_callable, write_section
from threadpoolctl import threadpool_limits

from tvm_ext import host_machine, host_target, measure
from tvm_ext import kernels as K
from tvm_ext import schedules as S
from tvm_ext.base.tvm_api import physical_cores
from tvm_ext.hardware.target import target_cpu

WORKLOADS = [
    ("matmul 256x256x32", K.matmul(256, 256, 32)),
    ("matmul 512^3", K.matmul(512, 512, 512)),
    ("matmul 1024^3", K.matmul(1024, 1024, 1024)),
    ("matmul 2048^3", K.matmul(2048, 2048, 2048)),
    ("matmul 64x4096x512", K.matmul(64, 4096, 512)),
    ("matmul 2048x64x64", K.matmul(2048, 64, 64)),
    ("matmul bf16 1024^3", K.matmul(1024, 1024, 1024, "bfloat16")),
    ("matmul bf16 2048^3", K.matmul(2048, 2048, 2048, "bfloat16")),
    ("matmul u8s8 1024^3", K.matmul(1024, 1024, 1024, "uint8")),
    ("conv2d 1x64x56x56 k3 f64", K.conv2d(1, 64, 56, 56, 64, 3, 3, 1, 1)),
    ("softmax 4096x1024", K.softmax(4096, 1024)),
    ("softmax 4096x1024 poly exp", K.softmax(4096, 1024, exp="poly")),
    ("layernorm 4096x1024", K.layernorm(4096, 1024)),
]
QUICK = {"matmul 256x256x32", "matmul 512^3", "conv2d 1x64x56x56 k3 f64", "softmax 4096x1024"}


def numpy_peer(w):
    """A numpy implementation of ``w`` or None where numpy has none (conv2d, bf16 matmul)."""
    a = w.inputs(0)
    if w.name == "matmul" and w.dtype == "float32":
        return lambda: a[0] @ a[1]
    if w.name == "softmax":

        def softmax():
            e = np.exp(a[0] - a[0].max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True)

        return softmax
    if w.name == "layernorm":

        def layernorm():
            mu = a[0].mean(axis=-1, keepdims=True)
            return (a[0] - mu) / np.sqrt(a[0].var(axis=-1, keepdims=True) + 1e-5) * a[1] + a[2]

        return layernorm
    return None


def torch_peer(w):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(physical_cores())
    a = w.inputs(0)
    if w.name == "matmul" and w.dtype in ("float32", "bfloat16"):
        dt = torch.float32 if w.dtype == "float32" else torch.bfloat16
        x, y = (torch.from_numpy(v.astype(np.float32)).to(dt) for v in a[:2])
        return lambda: x @ y
    if w.name == "matmul" and w.dtype == "uint8":
        return None  # torch has no fast CPU u8 x s8 -> s32 matmul outside quantized ops
    x = torch.from_numpy(np.ascontiguousarray(a[0]))
    if w.name == "conv2d":
        wt = torch.from_numpy(a[1])
        return lambda: torch.nn.functional.conv2d(x, wt, padding=w.args["padding"])
    if w.name == "softmax":
        return lambda: torch.softmax(x, dim=-1)
    if w.name == "layernorm":
        g, b = torch.from_numpy(a[1]), torch.from_numpy(a[2])
        return lambda: torch.nn.functional.layer_norm(x, (w.args["N"],), g, b, 1e-5)
    return None


def run(quick: bool) -> pd.DataFrame:
    target, cores = host_target(), physical_cores()
    machine = host_machine(target)
    rows = []
    for label, w in WORKLOADS:
        if quick and label not in QUICK:
            continue
        ours = {"ours": (w, S.schedule(w, target))}
        if w.dtype == "bfloat16":  # the tensorized kernel against our own fp32 one, same shape
            w32 = getattr(K, w.name)(**{**w.args, "dtype": "float32"})
            ours["ours fp32"] = (w32, S.schedule(w32, target))
        peers = {"numpy": numpy_peer(w), "torch": torch_peer(w)}
        times = {**{k: [] for k in ours}, **{k: [] for k, v in peers.items() if v is not None}}
        for _ in range(3):  # interleaved rounds: a noisy neighbour hits every contender alike
            # OpenMP/OpenBLAS workers spin for a while after each call: let them park first.
            for name, (wk, sch) in ours.items():
                time.sleep(0.5)
                times[name].append(measure(sch, wk, target, repeat=5).seconds)
            for name, fn in peers.items():
                if fn is not None:
                    time.sleep(0.5)
                    with threadpool_limits(cores):
                        times[name].append(time_callable(fn))
        med = {k: statistics.median(v) for k, v in times.items()}
        gf = {k: w.flops / t / 1e9 for k, t in med.items()}
        best_peer = max((v for k, v in gf.items() if k in peers), default=None)
        rows.append(
            {
                "workload": label,
                "ours GFLOP/s": gf["ours"],
                "% peak": 100 * gf["ours"] * 1e9 / machine.peak(w.dtype),
                "numpy": gf.get("numpy"),
                "torch": gf.get("torch"),
                "ours / best peer": gf["ours"] / best_peer if best_peer else None,
                "ours / our fp32": gf["ours"] / gf["ours fp32"] if "ours fp32" in gf else None,
            }
        )
        print(f"{label:28s} " + "  ".join(f"{k} {v:8.1f}" for k, v in gf.items()), flush=True)
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="four workloads only")
    parser.add_argument("--no-readme", action="store_true", help="do not update bench/README.md")
    args = parser.parse_args()
    mcpu = target_cpu(host_target())
    print(f"LLVM mcpu={mcpu}; BLAS: {blas_report()}", flush=True)
    table = run(args.quick)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    if not args.no_readme:
        cores = physical_cores()
        flags = " --quick" if args.quick else ""
        write_section(
            "schedules",
            f"### Hand schedules vs numpy and torch ({cores} threads each, "
            f"GFLOP/s, median of 3 interleaved rounds; LLVM mcpu={mcpu})\n\n"
            f"BLAS: {blas_report()}.\n\n"
            "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python "
            f"bench/schedules.py{flags}`",
            table,
        )


if __name__ == "__main__":
    main()
