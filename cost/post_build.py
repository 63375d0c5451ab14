"""Stage 2 of the admissible cut: a lower bound read off the built machine code.

Stage 1 (:class:`~tvm_ext.cost.roofline.RooflinePolicy`) bounds a candidate from its TIR,
before it is built; it must assume every loop LLVM could vectorize runs at the machine's full
vector width. After the build, the code says which width it uses
(:func:`tvm_ext.built_code.machine_code.read_assembly`), and a candidate whose arithmetic is all
128-bit or scalar gets a bound 4 to 16 times higher. The stage-2 bound is the largest of
stage 1's arms, the arms counting the code's own instructions
(:mod:`tvm_ext.cost.code_arms`), those on its reduction chains (:mod:`tvm_ext.cost.chain_arms`),
and the policy's own arms recomputed with the code's width
(``<arm>@<W>lanes``, see the end); it is never below the stage-1 bound.

The phases with the built code's arms (``phases@code``)
------------------------------------------------------
The policy's ``phases`` arm (parallel bodies run one after the other: the sum over phases of
each phase's largest arm) with each phase's stage-2 arms beside its stage-1 ones, each
computed over that phase's blocks alone (:func:`phases_arm`): every arm here is a sum or a
maximum over blocks of what those blocks do themselves, so it bounds the phase's stretch of
time.

The policy's arms at the code's width
-------------------------------------
Under the same premises no instruction of the candidate does arithmetic on more than ``W``
lanes, which is what :class:`~tvm_ext.cost.roofline.RooflinePolicy` reads its ``max_lanes``
coefficient as (its per-block compute arm prices ``min(lanes, max_lanes)`` at the pipes'
datapath width; its dependency arm lets a chain carry at most ``max_lanes`` outputs). So
``policy.arms(features, {**coefficients, "max_lanes": W})`` are bounds too, each kept (as
``<arm>@<W>lanes``) when it is above stage 1's. They are used only when every block's FLOPs
were counted: the policy's fallback for uncounted blocks scales the register-wide peak by
``max_lanes / vector_lanes``, which a core with a datapath narrower than its registers does
not obey.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import Mapping

from tvm_ext.cost.features import features
from tvm_ext.cost.policy import evaluate, validated_coefficients

from tvm_ext.base import tvm_api
from tvm_ext.base.errors import PolicyError
from tvm_ext.built_code.machine_code import CodeFacts, read_module
from tvm_ext.hardware.machine import host_machine
from tvm_ext.hardware.target import as_target, host_target

from .chain_arms import chain_arms, chain_step_arm, chain_widths
from .code_arms import ARM, machine_code_arm, port_arms, why_no_arm
from .features import CandidateFeatures
from .policy import Cost


def capped_arms(policy, c: CandidateFeatures, code: CodeFacts,
                coefficients: Mapping[str, float]) -> dict[str, float]:  # fmt: skip
    """The policy's arms recomputed with ``max_lanes`` = the code's width (see the module
    docstring), named ``<arm>@<W>lanes``; empty when the premises do not hold."""
    arms = getattr(policy, "arms", None)
    lanes = coefficients.get("max_lanes")
    counted = c.blocks and all(b.unique_flops is not None for b in c.blocks)
    if arms is None or not lanes or not counted or code.fp_lanes >= lanes:
        return {}
    if why_no_arm(c, code) is not None:
        return {}
    capped = arms(c, {**coefficients, "max_lanes": float(code.fp_lanes)})
    return {f"{name}@{code.fp_lanes}lanes": value for name, value in capped.items()}


_PER_BLOCK = ("compute", "issue", "dependency", ARM)  # arms that bound a set of blocks alone


def phases_arm(policy, c: CandidateFeatures, code: CodeFacts, cpu: str,
               coefficients: Mapping[str, float]) -> float | None:  # fmt: skip
    """The policy's ``phases`` arm with each phase's stage-2 arms beside its stage-1 arms: the
    sum over phases (parallel bodies; the serial code) of the largest arm of that phase's
    blocks alone (see ``phases`` in :mod:`tvm_ext.cost.roofline`: the phases take disjoint
    stretches of time). Each stage-2 arm here is a sum or a maximum over blocks, so it bounds
    any set of blocks by their own work; None with fewer than two phases."""
    phase_arms = getattr(policy, "phase_arms", None)
    if phase_arms is None:
        return None
    stage1 = phase_arms(c, coefficients)
    if len(stage1) < 2:
        return None
    chains = chain_widths(c, code)
    total = 0.0
    for region, arms in stage1.items():
        index = [i for i, b in enumerate(c.blocks) if b.region == region]
        sub = replace(c, blocks=tuple(c.blocks[i] for i in index))
        own = [chains[i] for i in index]
        best = max(arms.values(), default=0.0)
        if all(b.unique_flops is not None for b in sub.blocks):
            best = max(best, machine_code_arm(sub, code, cpu) or 0.0,
                       *port_arms(sub, code, cpu).values())  # fmt: skip
            capped = capped_arms(policy, sub, code, coefficients)
            best = max([best] + [t for name, t in capped.items()
                                 if name.split("@")[0] in _PER_BLOCK])  # fmt: skip
        best = max(best, chain_step_arm(sub, code, cpu, own) or 0.0)
        best = max([best] + list(chain_arms(policy, sub, code, coefficients, own).values()))
        total += best
    return total


def post_build_cost(
    stage1: Cost,
    c: CandidateFeatures,
    code: CodeFacts,
    cpu: str,
    policy=None,
    coefficients: Mapping[str, float] | None = None,
) -> Cost:
    """The stage-2 cost: stage 1's arms, :data:`ARM` and (with ``policy`` and its
    ``coefficients``) the policy's arms at the code's width; the bound is their maximum, so it
    is never below stage 1's. Without a stage-1 bound (no machine model) nothing changes."""
    if stage1.lower_bound_s is None:
        return stage1
    new = {}
    arm = machine_code_arm(c, code, cpu)
    if arm is not None:
        new[ARM] = arm
    new |= port_arms(c, code, cpu)
    steps = chain_step_arm(c, code, cpu)
    if steps is not None and steps > stage1.arms.get("compute", 0.0):
        new["compute@chain"] = steps
    if policy is not None and coefficients is not None:
        narrowed = capped_arms(policy, c, code, coefficients)
        narrowed |= chain_arms(policy, c, code, coefficients)
        phases = phases_arm(policy, c, code, cpu, coefficients)
        if phases is not None:
            narrowed["phases@code"] = phases
        for name, value in narrowed.items():
            if value > stage1.arms.get(name.split("@")[0], 0.0):
                new[name] = value
    for name, value in new.items():  # a policy's number is checked, never clamped
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            label = type(policy).__name__ if policy is not None else "post_build"
            raise PolicyError(
                f"{label} stage-2 arm {name}={value!r}: must be a finite number >= 0",
                policy=label,
            )
    if not new:
        return stage1
    arms = dict(stage1.arms) | new
    top = max(new, key=new.get)
    bound = max(stage1.lower_bound_s, new[top])
    binding = top if new[top] > stage1.lower_bound_s else stage1.binding
    return Cost(stage1.score_s, bound, binding, MappingProxyType(arms), stage1.violations)


def evaluate_built(policy, sch, target=None, *, machine=None, workload=None):
    """Both stages for one schedule: build it for ``target`` as MetaSchedule's builder does,
    read its machine code; returns (stage-1 cost, stage-2 cost, :class:`CodeFacts`)."""

    target = as_target(target)
    if machine is None and target.kind.name == "llvm":
        machine = host_machine(host_target(num_cores=int(target.attrs["num-cores"])))
    stores = bool(getattr(policy, "needs_store_features", False))
    feats = features(sch, target, workload, stores=stores)
    stage1 = evaluate(policy, feats, target, machine=machine)
    lib = tvm_api.build_for_tuning(tvm_api.as_module(sch), target)
    code = read_module(tvm_api.assembly(lib), tvm_api.llvm_ir(lib))
    if machine is None:
        return stage1, stage1, code
    coefficients = validated_coefficients(policy, machine)
    stage2 = post_build_cost(stage1, feats, code, machine.cpu, policy, coefficients)
    return stage1, stage2, code
