"""Every kernel of a model under the rules against the same function unscheduled (issue 31:
"no kernel slower than the same function unscheduled, at any size the suite uses").

Per model of the suite (``tvm_ext.build_suite(name, size)``), its functions as ``compile``
lowers them (weights bound, fused, before any schedule: ``model_pipeline.compile.
bind_and_lower``): each is scheduled by the rules (``schedule_func``) and both it and the
unscheduled function are timed alone by ``tvm_ext.measure`` (parity against the unscheduled
build on random inputs first; median of ``--repeat`` runs, best of ``--rounds`` interleaved
rounds; the target's threads). Left out, and counted in the table: a function of more than
``--max-flops`` FLOPs (unscheduled, a model's big matmuls run for seconds; the rules' tiles
on them are measured by ``bench/real_models.py``), one whose schedule repacks a weight (its
time includes the repack, which the compiled model runs once at compile time) and one whose
random inputs give no comparable output (indices out of range, a root of a negative mean:
``ParityError`` on both sides). ``slowest`` is the kernel of 1 us or more with the least
unscheduled / rules ratio; ``slower`` counts kernels under 1 / ``SLOWER_MARGIN`` and by more
than ``SLOWER_US`` (noise allowances: a 0-d cast runs in tens of nanoseconds, the call's own
cost).

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/unscheduled.py \
        [--models resnet18,mobilenet_v2,gpt2,llama] [--no-readme]
"""

from __future__ import annotations

from _unpin import rerun_unpinned  # noqa: E402

rerun_unpinned()  # before numpy loads OpenBLAS

import argparse  # noqa: E402

import pandas as pd  # noqa: E402
from _common import write_section  # noqa: E402
from tvm_ext.schedules.rules import schedule_func  # noqa: E402

import tvm_ext  # noqa: E402
from tvm_ext.base import tvm_api  # noqa: E402
from tvm_ext.base.errors import ParityError  # noqa: E402
from tvm_ext.base.op_count import algorithm_flops  # noqa: E402
from tvm_ext.base.tvm_api import physical_cores  # noqa: E402
from tvm_ext.hardware.target import host_target, target_cores, target_cpu  # noqa: E402
from tvm_ext.model_pipeline.compile import ModelSource, bind_and_lower  # noqa: E402
from tvm_ext.workloads.suite import SUITE  # noqa: E402

SLOWER_MARGIN = 1.05
SLOWER_US = 0.5


def kernels(name: str, size: str, target):
    """(name, unscheduled PrimFunc) of every function of the suite model ``name``."""
    model = tvm_ext.build_suite(name, size)
    lowered = bind_and_lower(ModelSource.of(model, None, None, None), target)
    for gv, func in lowered.functions.items():
        if isinstance(func, tvm_api.PrimFunc):
            yield gv.name_hint, func.with_attr("global_symbol", gv.name_hint)


def compare(func, target, args) -> tuple[str, float, float] | str:
    """(rule, rules' seconds, unscheduled seconds), or why the function is left out."""
    flops = algorithm_flops(func) or 0
    if flops > args.max_flops:
        return "big"
    sch, rule = schedule_func(func, target)
    if "layout_rewrite_preproc" in sch.mod.script():
        return "repacks a weight"
    times = {"rules": [], "unscheduled": []}
    try:
        for _ in range(args.rounds):
            for arm, obj in (("rules", sch), ("unscheduled", func)):
                r = tvm_ext.measure(obj, None, target, reference=func, repeat=args.repeat)
                times[arm].append(r.seconds)
    except ParityError:
        return "no comparable output"
    return rule, min(times["rules"]), min(times["unscheduled"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SUITE))
    parser.add_argument("--size", default="full")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-flops", type=float, default=2e8)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    target = host_target(num_cores=physical_cores())
    rows = []
    for name in args.models.split(","):
        timed, left, worst = [], {}, None
        for kernel, func in kernels(name, args.size, target):
            got = compare(func, target, args)
            if isinstance(got, str):
                left[got] = left.get(got, 0) + 1
                continue
            rule, ours, plain = got
            timed.append((plain / ours, ours - plain))
            line = f"{name} {kernel[:70]:70s} {rule:12s} {ours * 1e6:9.1f} us"
            print(f"{line} unscheduled {plain * 1e6:9.1f} us  x{plain / ours:.2f}", flush=True)
            if max(ours, plain) >= 1e-6 and (worst is None or plain / ours < worst[1]):
                worst = (f"{kernel[:60]} ({rule})", plain / ours, ours, plain)
        rows.append({
            "model": f"{name} ({args.size})",
            "kernels timed": len(timed),
            "left out": ", ".join(f"{n} {why}" for why, n in sorted(left.items())) or "-",
            "slower than unscheduled": sum(
                r < 1 / SLOWER_MARGIN and late > SLOWER_US * 1e-6 for r, late in timed
            ),
            "slowest kernel (1 us or more)": worst[0] if worst else "-",
            "its us": worst[2] * 1e6 if worst else None,
            "unscheduled us": worst[3] * 1e6 if worst else None,
            "x unscheduled": worst[1] if worst else None,
        })  # fmt: skip
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    if not args.no_readme:
        header = (
            "### Every kernel vs unscheduled (`bench/unscheduled.py`)\n\n"
            "`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/unscheduled.py"
            f" --models {args.models}`\n\n"
            f"Each function of the model as `compile` lowers it, scheduled by the rules and "
            f"unscheduled, timed alone by `tvm_ext.measure` (parity first, best of {args.rounds} "
            f"interleaved rounds, {target_cores(target)} threads, `-mcpu={target_cpu(target)}`). "
            "Left out: functions past the FLOP cap (the big matmuls, in the real-models "
            "table), schedules that repack a weight, random inputs with no comparable output. "
            f"x unscheduled: unscheduled time over ours; slower: under 1/{SLOWER_MARGIN} and by "
            f"more than {SLOWER_US} us."
        )
        write_section("unscheduled", header, table)


if __name__ == "__main__":
    main()
