"""A study, not an arm: how much tighter ``machine_code.compute`` would be if it counted the
lanes the optimized LLVM IR computes with instead of the assembly's register width.

MetaSchedule often vectorizes by 2 (or 7, or 12): the IR computes on ``<2 x float>``, the
backend widens that to an ``xmm`` register and the assembly shows 4-lane FMAs, half of them
idle. The IR's width would be the tighter count, but only if the backend never fuses narrow
operations back into one wider instruction. It does fuse the halves of a wider vector (seed-0
batch_matmul #24: ``<4 x float>`` fmuladds on ``shufflevector`` halves of ``<8 x float>``
phis run as ``ymm`` FMAs), so a computing operation here counts the widest vector connected to
its operands or result through data movement (shuffles, inserts, extracts, phis, bitcasts,
selects, stores). Whether that rule holds for everything LLVM's x86 codegen may merge is not
established; the package does not use it.

    .venv/bin/python bench/ir_lanes_study.py bench/bound_audit.json

Rebuilds each measured candidate of the audit JSON on this host and prints, over them, the
stage-2 median measured/bound and the same with the IR-width arm, its violations and how many
candidates it tightens.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
COMPUTING = {"fadd", "fsub", "fmul", "fdiv", "frem", "fneg", "add", "sub", "mul", "udiv",
             "sdiv", "urem", "srem", "shl", "lshr", "ashr", "and", "or", "xor", "fcmp",
             "icmp", "select", "call"}  # fmt: skip
MOVING = {"shufflevector", "insertelement", "extractelement", "phi", "bitcast", "freeze",
          "select"}  # fmt: skip
_VECTOR = re.compile(r"<(\d+)\s+x\s+")


def ir_lanes(text: str) -> int:
    """The most elements any computing operation of the module may work on (see the module
    docstring); 0 when it has none."""
    from tvm_ext.built_code.llvm_ir import DEFINITION, VALUE, function_bodies

    if "vscale" in text:
        return 1 << 20
    best = 0
    for _, body in function_bodies(text).values():
        parent: dict[str, str] = {}

        def find(x: str) -> str:
            parent.setdefault(x, x)
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        width: dict[str, int] = {}
        computing: list[tuple[int, list[str]]] = []
        for line in body:
            line = re.split(r",\s*!", line, maxsplit=1)[0]  # metadata attachments
            m = DEFINITION.match(line)
            rest = m.group(2) if m else line.strip()
            words = [w for w in rest.split() if w not in ("tail", "musttail", "notail")]
            if not words:
                continue
            lanes = max([int(n) for n in _VECTOR.findall(rest)] or [1])
            names = VALUE.findall(rest)
            if m:
                width[m.group(1)] = lanes
            if words[0] in MOVING and m:
                for name in names:
                    parent[find(name)] = find(m.group(1))
            if words[0] == "store" and names:
                width[names[0]] = max(width.get(names[0], 1), lanes)
            if words[0] in COMPUTING:
                computing.append((lanes, ([m.group(1)] if m else []) + names))
        component: dict[str, int] = {}
        for value, lanes in width.items():
            root = find(value)
            component[root] = max(component.get(root, 1), lanes)
        for lanes, values in computing:
            best = max(best, lanes, *(component.get(find(v), 1) for v in values))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("audit", help="a bench/bound_audit.py JSON")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    import bound_audit
    from tvm_ext.cost import RooflinePolicy
    from tvm_ext.cost.post_build import evaluate_built

    from tvm_ext import host_target
    from tvm_ext.base import tvm_api
    from tvm_ext.hardware.machine import host_machine
    from tvm_ext.records.logs import apply_trace

    printed = {}
    print_ir = tvm_api.llvm_ir

    def keep(lib):  # the IR stage 2 reads, kept for the study
        printed["ir"] = print_ir(lib)
        return printed["ir"]

    tvm_api.llvm_ir = keep
    data = json.loads(pathlib.Path(args.audit).read_text())
    target = host_target()
    machine = host_machine(target)
    old, new, tightened, cache = [], [], 0, {}
    for row in data["rows"]:
        if row.get("status") != "ok" or not row.get("stage2_bound_s"):
            continue
        w = cache.setdefault(row["workload"], bound_audit.workload(row["workload"]))
        sch = apply_trace(w.func, row["trace"])
        _, built, code = evaluate_built(RooflinePolicy(), sch, target, machine=machine, workload=w)
        lanes, arm = ir_lanes(printed["ir"]), built.arms.get("machine_code.compute")
        bound = built.lower_bound_s
        if arm and 0 < lanes < code.fp_lanes:  # the arm is linear in the lanes on znver5
            bound = max(bound, arm * code.fp_lanes / lanes)
            tightened += bound > built.lower_bound_s * 1.0001
        old.append(row["measured_s"] / built.lower_bound_s)
        new.append(row["measured_s"] / bound)
    print(f"{len(old)} candidates: stage-2 median {statistics.median(old):.2f}, with IR lanes "
          f"{statistics.median(new):.2f}; within 3x {100 * sum(q <= 3 for q in old) / len(old):.1f}"
          f" -> {100 * sum(q <= 3 for q in new) / len(new):.1f} %; tightened {tightened}; "
          f"violations {sum(q < 1 for q in new)}; closest {min(new):.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
