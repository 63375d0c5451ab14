"""Interleaved A/B of hand-schedule configs for one workload (how the defaults were chosen).

Each config is built once and parity-checked; then every config is timed in turn, ``--rounds``
times, so a noisy neighbour hits all of them alike; the median of the rounds is printed.

    .venv/bin/python bench/ab_configs.py "K.conv2d(1, 64, 56, 56, 64, 3, 3, 1, 1)" \\
        '{}' '{"axis": "x", "fb": 4, "xt": 56, "lanes": 8}'

``{}`` is the rule's default config; other configs override its fields.
"""

from __future__ import annotations

import argparse
import json
import statistics

from tvm_ext import host_target
from tvm_ext import kernels as K
from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.measurement.measure import verify


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workload", help='a kernels expression, e.g. "K.matmul(256, 256, 32)"')
    parser.add_argument("configs", nargs="+", help="JSON objects of config overrides")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    w = eval(args.workload, {"K": K})  # noqa: S307  (a benchmark's own command line)
    target = host_target()
    print(w.key, "default:", S.default_config(w, target))
    dev = tvm_api.cpu()
    libs = []
    for text in args.configs:
        sch = S.schedule(w, target, **json.loads(text))
        verify(sch, w, target)
        libs.append((text, tvm_api.build(sch.mod, target)))
    tensors = [tvm_api.tensor(a, dev) for a in w.inputs(0)]  # every parameter, outputs included
    times = {text: [] for text, _ in libs}
    with tvm_api.threads(tvm_api.physical_cores()):
        for _ in range(args.rounds):
            for text, lib in libs:
                ev = lib.time_evaluator(lib.entry_name, dev, number=1, repeat=5, min_repeat_ms=30)
                times[text].append(statistics.median(ev(*tensors).results))
    for text, _ in libs:
        seconds = statistics.median(times[text])
        print(f"  {text:50s} {w.flops / seconds / 1e9:8.1f} GFLOP/s  ({seconds * 1e3:.3f} ms)")


if __name__ == "__main__":
    main()
