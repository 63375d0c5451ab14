"""What stage 2 costs in the builder: per audit candidate, the LLVM build, printing the
assembly and the optimized IR, reading them (``read_module``: the code and chain facts), and
the stage-2 pricing, against stage 1's pricing. Reads the candidates of a saved violation hunt
(``bench/bound_audit.json``); measures nothing on the device.

    .venv/bin/python bench/stage2_cost.py [--per-workload 4] [--audit bench/bound_audit.json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import bound_audit  # noqa: E402  (the audit's workloads by name)
from tvm_ext.cost import RooflinePolicy, features  # noqa: E402
from tvm_ext.cost.policy import evaluate, validated_coefficients  # noqa: E402
from tvm_ext.cost.post_build import post_build_cost  # noqa: E402

from tvm_ext import host_target  # noqa: E402
from tvm_ext.base import tvm_api  # noqa: E402
from tvm_ext.built_code.machine_code import read_module  # noqa: E402
from tvm_ext.hardware.machine import host_machine  # noqa: E402
from tvm_ext.records.logs import apply_trace, cpu_model  # noqa: E402

STEPS = ("stage 1", "build", "print code", "read code", "stage 2")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-workload", type=int, default=4)
    parser.add_argument("--audit", default=str(pathlib.Path(__file__).parent / "bound_audit.json"))
    args = parser.parse_args()
    audit = json.loads(pathlib.Path(args.audit).read_text())
    target = host_target()
    machine = host_machine(target)
    policy = RooflinePolicy()
    coefficients = validated_coefficients(policy, machine)
    chosen: dict[str, list] = {}
    for row in audit["rows"]:
        picked = chosen.setdefault(row["workload"], [])
        if row.get("status") == "ok" and len(picked) < args.per_workload:
            picked.append(row)
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    for name, rows in chosen.items():
        w = bound_audit.workload(name)
        for row in rows:
            sch = apply_trace(w.func, row["trace"])
            marks = [time.perf_counter()]
            stage1 = evaluate(policy, sch, target, machine=machine, workload=w)
            marks.append(time.perf_counter())
            lib = tvm_api.build_for_tuning(tvm_api.as_module(sch), target)
            marks.append(time.perf_counter())
            asm, ir = tvm_api.assembly(lib), tvm_api.llvm_ir(lib)
            marks.append(time.perf_counter())
            code = read_module(asm, ir)
            marks.append(time.perf_counter())
            post_build_cost(stage1, features(sch, target, w), code, machine.cpu, policy,
                            coefficients)  # fmt: skip
            marks.append(time.perf_counter())
            for step, a, b in zip(STEPS, marks, marks[1:]):
                times[step].append(b - a)
    print(f"{cpu_model()} ({target.attrs['mcpu']}), {sum(map(len, chosen.values()))} candidates "
          f"of {args.audit}; ms per candidate, median (max):")  # fmt: skip
    for step, values in times.items():
        print(f"  {step:10s} {statistics.median(values) * 1e3:7.1f} ({max(values) * 1e3:.1f})")


if __name__ == "__main__":
    main()
