"""The same hand schedule built for the generic llvm target and for ``host_target()``.

Both are measured in one run, interleaved (generic, host, generic, host, ...) so a noisy
neighbour hits both alike; the ratio of medians is what the right target is worth.

    .venv/bin/python bench/host_vs_generic.py [--size 512] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics

from tvm_ext.schedules.teaching.lecture import lecture_cpu_matmul

from tvm_ext import generic_target, host_target, kernels, measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    w = kernels.matmul(args.size, args.size, args.size)
    sch = lecture_cpu_matmul(w)
    targets = {"generic": generic_target(), "host": host_target()}
    times = {name: [] for name in targets}
    for _ in range(args.rounds):
        for name, target in targets.items():
            times[name].append(measure(sch, w, target).seconds)
    host = targets["host"]
    print(
        f"lecture CPU schedule, matmul {args.size}^3 fp32, {host.attrs['num-cores']} threads, "
        f"host mcpu={host.attrs['mcpu']}"
    )
    for name in targets:
        t = statistics.median(times[name])
        print(f"  {name:8s} {t * 1e3:8.3f} ms  {w.flops / t / 1e9:8.1f} GFLOP/s")
    ratio = statistics.median(times["generic"]) / statistics.median(times["host"])
    print(f"  host_target() is {ratio:.2f}x faster than the generic target")


if __name__ == "__main__":
    main()
