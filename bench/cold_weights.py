"""Hot vs cold weights: what a model's weight-bound kernels lose when their weights come from
memory, as they do in the model, rather than from the cache, as they do when timed alone.

A compiled model runs each kernel once per call, between other kernels, on weights that have
left the caches since (a model's weights are many times the LLC: resnet18 45 MB, BERT 340 MB),
while ``tvm_ext.measure`` and the tuner time a kernel on the same weights call after call.

Per model of the suite (``tvm_ext.build_suite``): the ``--top`` functions of most weight bytes
whose rule schedule repacks at least ``--min-weight-mb`` of weights. Each is built as the model
runs it (weights taken as repacked: ``tvm_api.without_weight_repack``) and parity checked first
(``tvm_ext.measure`` against the unscheduled function). Then it is timed with its weights hot
(one set, call after call) and cold (sets of random weights in turn, together at least
``COLD_LLC_MULTIPLE`` times the machine model's LLC, so each call finds its set evicted). Each
time is a median of ``--repeat`` samples (``time_callable``), hot and cold interleaved, the
best of ``--rounds`` rounds kept. ``cold / hot`` is what memory costs on top of the FMAs;
``cold x floor`` is the cold time over the proven floor (``tvm_ext.cost.floor_s``).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/cold_weights.py \
        [--models resnet18,resnet50,bert] [--top 3] [--no-readme]
"""

from __future__ import annotations

from _unpin import rerun_unpinned  # noqa: E402

rerun_unpinned()  # before numpy loads OpenBLAS

import argparse  # noqa: E402
import itertools  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from _common import time_callable, write_section  # noqa: E402
from tvm_ext.cost import floor_s  # noqa: E402
from tvm_ext.schedules.rules import schedule_func  # noqa: E402

import tvm_ext  # noqa: E402
from tvm_ext.base import tvm_api  # noqa: E402
from tvm_ext.base.op_count import algorithm_flops  # noqa: E402
from tvm_ext.base.tvm_api import physical_cores  # noqa: E402
from tvm_ext.hardware.machine import host_machine  # noqa: E402
from tvm_ext.hardware.target import host_target, target_cores, target_cpu  # noqa: E402
from tvm_ext.model_pipeline.compile import ModelSource, bind_and_lower  # noqa: E402

COLD_LLC_MULTIPLE = 3  # weight sets in turn: at least this many times the LLC, in bytes


def weight_kernels(name: str, size: str, target, min_bytes: float, top: int):
    """(FLOPs, name, unscheduled PrimFunc, rules' schedule, rule, weight bytes) of the ``top``
    functions of the suite model ``name`` whose schedule repacks ``min_bytes`` of weights or
    more: the most weight bytes first, then the most FLOPs."""
    model = tvm_ext.build_suite(name, size)
    lowered = bind_and_lower(ModelSource.of(model, None, None, None), target)
    found = []
    for gv, func in lowered.functions.items():
        if not isinstance(func, tvm_api.PrimFunc):
            continue
        func = func.with_attr("global_symbol", gv.name_hint)
        sch, rule = schedule_func(func, target)
        if "layout_rewrite_preproc" not in sch.mod.script():
            continue
        weight = _weight_bytes(func)
        if weight >= min_bytes:
            found.append((algorithm_flops(func) or 0, gv.name_hint, func, sch, rule, weight))
    found.sort(key=lambda k: (-k[5], -k[0]))
    return found[:top]


def _layout_free(func) -> set[int]:
    return {int(i) for i in func.attrs.get("layout_free_buffers", [])}


def _weight_bytes(func) -> int:
    """The bytes of the function's layout-free parameters (its weights)."""
    free = _layout_free(func)
    specs = tvm_api.param_specs(func)
    return sum(
        int(np.prod(s)) * np.dtype(d).itemsize for i, (s, d) in enumerate(specs) if i in free
    )


def hot_and_cold(sch, target, llc_bytes: int, args) -> tuple[float, float, int]:
    """(hot seconds, cold seconds, weight sets) of the schedule built as the model runs it."""
    stripped = tvm_api.without_weight_repack(sch.mod)
    func = tvm_api.main_func(stripped)
    lib = tvm_api.build(stripped, target)
    specs = tvm_api.param_specs(func)
    free = _layout_free(func)
    rng = np.random.default_rng(0)

    def tensor(shape, dtype):
        return tvm_api.tensor(rng.standard_normal(shape).astype(dtype), tvm_api.cpu(0))

    sets = max(2, int(np.ceil(COLD_LLC_MULTIPLE * llc_bytes / max(_weight_bytes(func), 1))))
    fixed = [tensor(s, d) for s, d in specs]
    rotated = [[tensor(s, d) if i in free else fixed[i] for i, (s, d) in enumerate(specs)]
               for _ in range(sets)]  # fmt: skip
    turn = itertools.cycle(rotated)
    kernel = lib[lib.entry_name]
    hot, cold = [], []
    with tvm_api.threads(target_cores(target)):
        for _ in range(args.rounds):
            hot.append(time_callable(lambda: kernel(*fixed), args.min_ms / 1e3, args.repeat))
            cold.append(time_callable(lambda: kernel(*next(turn)), args.min_ms / 1e3, args.repeat))
    return min(hot), min(cold), sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet18,resnet50,bert")
    parser.add_argument("--size", default="full")
    parser.add_argument("--top", type=int, default=3)
    parser.add_argument("--min-weight-mb", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--min-ms", type=float, default=100)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    target = host_target(num_cores=physical_cores())
    machine = host_machine(target)
    rows = []
    for name in args.models.split(","):
        found = weight_kernels(name, args.size, target, args.min_weight_mb * 1e6, args.top)
        for flops, kernel, func, sch, rule, weight in found:
            tvm_ext.measure(sch, None, target, reference=func, weights_repacked_once=True)
            hot, cold, sets = hot_and_cold(sch, target, machine.llc_bytes, args)
            floor = floor_s(func, target, machine=machine)
            print(f"{name} {kernel[:60]:60s} hot {hot * 1e6:9.1f} us  cold {cold * 1e6:9.1f} us"
                  f"  x{cold / hot:.2f} ({sets} sets)", flush=True)  # fmt: skip
            rows.append({
                "model": f"{name} ({args.size})",
                "kernel": kernel[:60],
                "rule": rule,
                "weights MB": weight / 1e6,
                "hot us": hot * 1e6,
                "cold us": cold * 1e6,
                "cold / hot": cold / hot,
                "hot GFLOP/s": flops / hot / 1e9,
                "cold x floor": cold / floor if floor else None,
            })  # fmt: skip
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    if not args.no_readme:
        header = (
            "### Hot vs cold weights (`bench/cold_weights.py`)\n\n"
            "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/cold_weights.py"
            f" --models {args.models}`\n\n"
            f"The {args.top} weight-repacking kernels of most weight bytes per model, as the "
            "model runs them (weights repacked once), parity checked first, then timed with "
            "one set of weights call after call (hot) and with sets of weights in turn, together "
            f"{COLD_LLC_MULTIPLE}x the LLC (cold, as a model's kernels meet them); best of "
            f"{args.rounds} interleaved rounds, {target_cores(target)} threads, "
            f"`-mcpu={target_cpu(target)}`. cold x floor: cold time over the proven floor."
        )
        write_section("cold-weights", header, table)


if __name__ == "__main__":
    main()
