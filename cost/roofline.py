"""The analytic roofline policy: a proven lower bound on a CPU candidate's run time.

Every arm is a time no run of the candidate can beat, given the decisions it has taken; the
bound is the largest arm, and the arm that sets it is reported as ``binding``. The hardware
facts are those of :mod:`tvm_ext.hardware.isa` for the machine model's CPU (the LLVM CPU name):
upper limits over every part of that microarchitecture, at its fastest boost clock, so that
a busy host cannot make them read low. Only the memory arms rest on probes (see there).

- ``compute``: each block's distinct instances (LLVM may hoist recomputation) need their
  multiplies on the FMA pipes (``FMA_PIPES`` a cycle) and all their floating-point
  instructions, every multiply-add pair fused, on the FP pipes (``FP_PIPES`` a cycle; twice
  that on a CPU the tables do not name, :func:`~tvm_ext.hardware.isa.port_limits`); each
  pipe does at most the FMA datapath's lanes per pass. The lanes are the full width for
  any vector code (TVM's own vectors narrower than a register may be joined by instruction
  selection: ``cost/walk._possible_lanes``) and for scalar code LLVM could still vectorize
  (any spatial loop with at most 1024 inner iterations: ``tests/test_llvm_reach.py``); else
  one. A
  block runs on the cores its parallel loops can occupy (``P / ceil(P / cores)``); blocks
  share the pipes, so their times add. The arithmetic is priced at the dtype the candidate's
  parameters allow the fastest (:func:`tvm_ext.cost.features.pricing_dtype`: a u8 x s8 -> i32
  matmul at the int8 rate, not its output's) by :func:`dtype_speedup`.
- ``issue``: every distinct element a run of the loop just outside the compiler's unroll
  reach (see ``cost/walk.py``) touches goes through a load or store port in that run, but
  what the registers carried in (at most ``REGISTER_BYTES``); a port slot moves at most one
  vector of consecutive elements; at most ``LOADS_PER_CYCLE`` loads of
  ``LOAD_BYTES_PER_CYCLE`` bytes and ``STORES_PER_CYCLE`` stores of ``STORE_BYTES_PER_CYCLE``
  bytes issue per cycle (twice each on a CPU the tables do not name). Blocks that share the
  run loop may share loads: the largest of them counts; separate run loops add.
- ``memory.llc`` / ``memory.dram``: the compulsory bytes (every parameter once) beyond what
  every core's L2 (resp. the whole chip) can hold move through the LLC (resp. DRAM), at its
  probed bandwidth times ``slack``. These are the only probe-based arms: what protects them
  is that only the bytes that cannot stay in the caches are charged (a warm-cache run keeps
  the rest), the probe is the best of several streaming kernels, and the slack (1.25).
- ``dependency``: see :meth:`RooflinePolicy._chain`.
- ``phases``: with blocks in more than one phase (each outermost parallel loop is a parallel
  body TVM launches on its own; the code outside them is one more), the sum over phases of
  the largest of the ``compute``, ``issue`` and ``dependency`` arms of that phase's blocks
  alone (:meth:`RooflinePolicy.phase_arms`). TVM's CPU runtime runs a parallel body to its
  end before the launch returns (``TVMBackendParallelLaunch`` joins every task), and the
  bodies are separate functions that LLVM cannot move code between; so the phases take
  disjoint stretches of time, each at least its own arms (each of these arms bounds a set of
  blocks by their own work: a sum or a maximum over them), and the run at least their sum.
  The memory arms count the whole candidate's compulsory bytes and stay outside.

``score_s`` ranks with expected rather than optimistic facts (the lanes the schedule asked
for; LLVM's own 8-lane vectors otherwise).
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import Mapping, Sequence

from tvm_ext.cost.policy import validated_coefficients

from tvm_ext.hardware import isa
from tvm_ext.hardware.machine import host_machine
from tvm_ext.hardware.machine_model import MachineModel
from tvm_ext.hardware.target import as_target, host_target

from .features import CandidateFeatures, features
from .policy import Cost, ExecutionCostPolicy

AUTO_VECTOR_LANES = 8  # LLVM's own loop vectorizer emits ymm (8 fp32 lanes) here
# LLVM runs at most this many copies of a loop body side by side (the vectorizer's interleave,
# at most 4 on x86, times the unroller's count on the vector loop): 16 seen for the smallest
# reduction bodies built for Zen 3-5, 8 for Intel's (tests/test_llvm_reach.py pins it on this
# LLVM; 8 was an argument from the interleave and unroll limits that the sweep broke).
MAX_LOCKSTEP = 16
_FLOAT = ("float16", "float32", "float64", "bfloat16")


def _per_byte(figure, slack: float) -> float:
    """Seconds per byte at a bandwidth figure times ``slack``; 0 (no arm) when provisional."""
    return 0.0 if figure.provisional else 1.0 / (figure.value * slack)


def dtype_speedup(dtype: str, k: Mapping[str, float]) -> float:
    """How many times the fp32 FMA rate a ``dtype`` candidate's arithmetic may run at, at most
    (a bound prices it this fast). 8-bit ints: the probe's dot-product ratio (VNNI 4x, AMX
    32x), and never under 4x: without VNNI, ``vpmaddubsw`` and plain byte arithmetic still
    fill a register with four times the fp32 lanes. 16-bit types: twice the fp32 lanes
    (AVX512-FP16, ``vpmaddwd``), or the probe's bf16 ratio (AMX) where higher. Everything else
    (fp32, int32, 64-bit types) at most the fp32 lane rate."""
    if dtype in ("int8", "uint8", "bool"):
        return max(k["int8_speedup"], 4.0)
    if dtype == "bfloat16":
        return max(k["bf16_speedup"], 2.0)
    if dtype in ("float16", "int16", "uint16"):
        return 2.0
    return 1.0


class RooflinePolicy(ExecutionCostPolicy):
    """Roofline lower bound with compute, issue, memory and dependency-chain arms (CPUs)."""

    name = "roofline"
    proves_bounds = True
    basis = (
        "lane_flop",
        "llc_byte",
        "dram_byte",
        "chain_step",
        "add_step",
        "max_step",
        "on_chip_bytes",
        "l2_bytes",
        "max_lanes",
        "int8_speedup",
        "bf16_speedup",
        "cycle_s",
        "flop_cycle_s",
        "fma_pipes",
        "datapath_lanes",
        "narrow_fma_lanes",
        "reorder_window",
        "stores_per_cycle",
        "loads_per_cycle",
        "load_bytes_per_cycle",
        "store_bytes_per_cycle",
        "fp_pipes",
    )

    def __init__(self, slack: float = 1.25):
        if not isinstance(slack, (int, float)) or not slack >= 1.0 or math.isinf(slack):
            raise ValueError(f"slack={slack!r} must be a finite number >= 1")
        self.slack = float(slack)

    def coefficients(
        self, limits: MachineModel | None, basis: Sequence[str], prior: Mapping[str, float] | None
    ) -> Mapping[str, float]:
        """Seconds per lane-FLOP, per byte per level, per chain step and per cycle; sizes and
        pipe widths. The fp32 peak is the ISA ceiling of the CPU, or the probe times ``slack``
        where that is higher (a stale table can only loosen the bound); a chain step is the
        ISA latency floor, or the probe over ``slack`` where that is lower."""
        if limits is None:  # no model of this device (a GPU): no bound, rank by FLOPs alone
            return {name: 0.0 for name in self.basis} | {
                "max_lanes": 1.0,
                "int8_speedup": 1.0,
                "bf16_speedup": 1.0,
                "fma_pipes": 1.0,
                "datapath_lanes": 1.0,
            }
        lanes, cpu, s = int(limits.vector_lanes), limits.cpu, self.slack
        ceiling = isa.fp32_peak_ceiling(cpu, limits.cores, lanes)
        peak = max(ceiling, limits.peak("float32") * s)
        cycle = 1.0 / isa.max_boost_hz(cpu)
        known = isa.named(cpu)
        ports = isa.port_limits(cpu)
        return {
            "lane_flop": limits.cores * lanes / peak,
            # A provisional bandwidth (its probes disagreed: it may read low by more than the
            # slack covers, or a kernel beat it) bounds nothing: no memory arm rests on it.
            "llc_byte": _per_byte(limits.bandwidth["llc"], s),
            "dram_byte": _per_byte(limits.bandwidth["dram"], s),
            "chain_step": min(isa.fma_latency_floor_s(cpu), limits.fma_latency.value / s),
            "add_step": isa.fadd_latency_floor_s(cpu),
            "max_step": isa.fmax_latency_floor_s(cpu),
            "on_chip_bytes": float(limits.llc_bytes),
            "l2_bytes": float(limits.l2_bytes),
            "max_lanes": float(lanes),
            # Dot-product instructions (VNNI, AVX512-BF16, AMX) beat the fp32 FMA rate: a
            # candidate of those dtypes is priced at its dtype's peak, whatever its code uses.
            "int8_speedup": limits.peak("int8") / limits.peak("float32"),
            "bf16_speedup": limits.peak("bfloat16") / limits.peak("float32"),
            "cycle_s": cycle,
            "flop_cycle_s": cycle * ceiling / peak,  # shorter when a probe beat the table
            "fma_pipes": float(isa.FMA_PIPES),
            "datapath_lanes": float(isa.fma_datapath_lanes(cpu, lanes)),
            "narrow_fma_lanes": 0.0 if known else 16.0,  # an unnamed CPU may be a Skymont
            "reorder_window": float(isa.reorder_window(cpu)),
            # The ports of the CPU's own table; a CPU the tables do not name may be a later
            # core with wider ports (isa.port_limits doubles them, at stage 1 as at stage 2).
            "stores_per_cycle": float(ports[2]),
            "loads_per_cycle": float(ports[0]),
            "load_bytes_per_cycle": float(ports[1]),
            "store_bytes_per_cycle": float(ports[3]),
            "fp_pipes": float(ports[4]),
        }

    def arms(self, c: CandidateFeatures, k: Mapping[str, float]) -> dict[str, float]:
        """Every arm's time in seconds (optimistic facts: each is a lower bound)."""
        arms: dict[str, float] = {}
        if k["lane_flop"] > 0 and c.flops is not None:
            arms["compute"] = self._compute(c, k, optimistic=True)
        issue = self._issue(c, k)
        if issue:
            arms["issue"] = issue
        arms.update(self._memory(c, k))
        chain = self._chain(c, k)
        if chain is not None:
            arms["dependency"] = chain
        phases = self.phase_arms(c, k)
        if len(phases) > 1:
            arms["phases"] = sum(max(a.values(), default=0.0) for a in phases.values())
        return arms

    def phase_arms(self, c: CandidateFeatures, k: Mapping[str, float]) -> dict[int, dict]:
        """Per phase (``BlockFacts.region``; -1: the code outside every parallel body), the
        ``compute``, ``issue`` and ``dependency`` arms of its blocks alone (compute only where
        each of them was counted: the whole-candidate fallback is not a phase's)."""
        groups: dict[int, list] = {}
        for b in c.blocks:
            groups.setdefault(b.region, []).append(b)
        out = {}
        for region, blocks in groups.items():
            sub = replace(c, blocks=tuple(blocks))
            arms: dict[str, float] = {}
            counted = all(b.unique_flops is not None for b in blocks)
            if counted and k["lane_flop"] > 0 and k.get("flop_cycle_s", 0) > 0:
                arms["compute"] = self._compute(sub, k, optimistic=True)
            issue = self._issue(sub, k)
            if issue:
                arms["issue"] = issue
            chain = self._chain(sub, k)
            if chain is not None:
                arms["dependency"] = chain
            out[region] = arms
        return out

    @staticmethod
    def _lane_rate(lanes: float, k: Mapping[str, float]) -> float:
        """fp32 multiply-add lanes one core completes per cycle at ``lanes``-wide vectors."""
        wide = k["fma_pipes"] * min(lanes, k["datapath_lanes"])
        return max(wide, min(k["narrow_fma_lanes"], 4.0 * lanes))

    def _compute(self, c: CandidateFeatures, k: Mapping[str, float], optimistic: bool) -> float:
        """Arithmetic time: per-block lanes and cores when every block was counted, else the
        whole candidate's FLOPs at full width on the cores of its least parallel block."""
        max_lanes = k["max_lanes"]
        speedup = dtype_speedup(c.dtype, k)
        fp_pipes = k.get("fp_pipes") or 2 * isa.FP_PIPES
        counted = [b for b in c.blocks if b.unique_flops is not None]
        if c.blocks and len(counted) == len(c.blocks) and k["flop_cycle_s"] > 0:
            total = 0.0
            for b in counted:
                if optimistic:
                    lanes = min(max(b.lanes_bound or b.possible_lanes, 1), max_lanes)
                else:
                    asked = (
                        b.explicit_lanes
                        if b.explicit_lanes > 1
                        else (AUTO_VECTOR_LANES if b.possible_lanes > 1 else 1)
                    )
                    lanes = min(asked, max_lanes)
                flops = float(b.unique_flops)
                if b.muls_per_instance is not None and b.dtype in _FLOAT and speedup == 1.0:
                    # FLOP-equivalents: a multiply takes an FMA-pipe slot (2 FLOPs' worth), any
                    # FP instruction half of one (FP_PIPES = 2 x FMA_PIPES).
                    unique = min(b.instances, b.unique_instances)
                    per = max(2 * b.muls_per_instance,
                              b.ops_per_instance * 2 * k["fma_pipes"] / fp_pipes)  # fmt: skip
                    flops = unique * per
                rate = 2.0 * self._lane_rate(lanes, k) / k["flop_cycle_s"]  # FLOP/s per core
                total += flops / (b.cores_used * rate)
            return total / speedup
        opaque = [b.cores_used for b in c.blocks if b.unique_flops is None]
        cores = max(opaque) if opaque else float(c.cores)
        return c.flops * k["lane_flop"] / (cores * max_lanes * speedup)

    @staticmethod
    def _issue(c: CandidateFeatures, k: Mapping[str, float]) -> float | None:
        """Load/store port time (see the module docstring), None without a machine model."""
        if not k.get("cycle_s"):
            return None
        groups: dict[int, float] = {}
        for b in c.blocks:
            if b.mem_runs <= 0:
                continue
            cycles = max(
                b.load_slots / (k.get("loads_per_cycle") or 2 * isa.LOADS_PER_CYCLE),
                b.load_bytes / (k.get("load_bytes_per_cycle") or 2 * isa.LOAD_BYTES_PER_CYCLE),
                b.store_slots / (k.get("stores_per_cycle") or 2 * isa.STORES_PER_CYCLE),
                b.store_bytes / (k.get("store_bytes_per_cycle") or 2 * isa.STORE_BYTES_PER_CYCLE),
            )
            t = b.mem_runs / b.cores_used * cycles * k["cycle_s"]
            groups[b.mem_group] = max(groups.get(b.mem_group, 0.0), t)
        return sum(groups.values()) or None

    @staticmethod
    def _memory(c: CandidateFeatures, k: Mapping[str, float]) -> dict[str, float]:
        """Compulsory bytes beyond the caches at the bandwidth of the level below them."""
        low = c.bytes["dram"][0] if c.bytes.get("dram") else None
        if low is None:
            return {}
        if low > k["on_chip_bytes"] and k["dram_byte"] > 0:
            return {"memory.dram": (low - k["on_chip_bytes"]) * k["dram_byte"]}
        if low > k["l2_bytes"] and k["llc_byte"] > 0:  # bytes beyond L2 pass the LLC at least
            return {"memory.llc": (low - k["l2_bytes"]) * k["llc_byte"]}
        return {}

    def _chain(self, c: CandidateFeatures, k: Mapping[str, float]) -> float | None:
        """The reduction dependency chain, the largest over blocks.

        Facts: a target without fast-math flags (nor LLVM options, ``cl-opt``, which these
        facts do not read) lets LLVM no reassociation, so an fp reduction's steps run in order
        (``CandidateFeatures.fp_reassoc``; with it, no chain is established and there is no
        arm); on a target with FMA an ``acc + x * y`` step is contracted to one FMA and takes
        at least ``MIN_FMA_LATENCY_CYCLES`` (without FMA, ``fp_contract`` false, the multiply
        leaves the chain and the step is an add); a plain add ``MIN_FADD_LATENCY_CYCLES``, a
        max or min ``MIN_FMAX_LATENCY_CYCLES``; a step starts only after its instruction is in the
        reorder window, which holds at most ``W`` instructions
        (:func:`~tvm_ext.hardware.isa.reorder_window`). A chain recomputed by loops around its
        whole segment (``chain_repeats``) runs again each time: LLVM hoists instructions out
        of loops, never a loop.

        Proof. One output's ``L`` steps take ``L`` step latencies. Beyond that, on the busiest
        core the block runs ``M = instances / cores_used / V`` vector steps (``V``: the most
        lanes it may be vectorized at). They come in groups: the segment of ``S`` steps that
        the reduction loops inside the innermost spatial loop run back to back, for the
        ``R`` outputs updated in turn inside it. The compiler may reorder anything inside the
        body it fully unrolls (``body_instances``), and when that body holds a whole group,
        run up to ``MAX_LOCKSTEP`` copies of the loop around it side by side (vectorizer
        interleave, unroll); otherwise that loop is never innermost and stays in order. So a
        group spans at most ``G = lockstep * max(R * S, body)`` steps. Walk back from the
        last step: along one output's segment (``S`` latencies, within its group), then to
        the end of an earlier segment at least ``W`` instructions before the segment's first
        step (which could not start before that one retired, so finished). One hop gains
        ``S`` latencies over at most ``W + 2 G`` steps, so the run takes at least
        ``S * floor(M / (W + 2 G))`` latencies. Instructions other than the steps only
        shorten what the window holds, so counting steps alone is optimistic.

        Segments longer than the window, one output at a time (``R = 1``, no copies side by
        side): the segments follow one another in program order, so the step ``S - W`` of a
        segment lies at least ``W`` instructions before the next segment's first step (the
        ``W`` later steps of its own segment are between them) and had finished before that
        step began. Walking back from each segment's first step to that step and along its
        own segment gains ``S - W`` latencies per segment: at least
        ``floor(M / S) * (S - W)`` latencies in all.
        """
        if c.fp_reassoc:
            return None
        worst = None
        window = k.get("reorder_window") or isa.MAX_REORDER_WINDOW
        max_lanes = k.get("max_lanes") or 1.0
        for b in c.blocks:
            if b.reduction_length <= 1 or b.tensorized or b.flops_per_instance is None:
                continue
            if b.dtype not in _FLOAT or b.segment_length <= 0:
                continue  # integer adds take one cycle: no chain worth pricing
            fma = k.get("chain_step") if c.fp_contract else k.get("add_step")
            ops = {"fma": fma, "add": k.get("add_step"), "max": k.get("max_step")}
            step = ops.get(b.chain_op)
            if not step:
                continue
            lanes = max(min(b.lanes_bound or b.possible_lanes, max_lanes), 1)
            steps = min(b.instances, b.unique_instances * b.chain_repeats) / b.cores_used / lanes
            group = b.independent_outputs * b.segment_length
            # Groups run side by side only once a group is unrolled whole (the loop around it
            # then is innermost); TVM's own vectors wider than a register split into several.
            lockstep = math.ceil(b.explicit_lanes / max_lanes)
            if group <= b.body_instances:
                lockstep *= MAX_LOCKSTEP
            group = max(lockstep, 1) * max(group, b.body_instances)
            hops = math.floor(steps / (window + 2 * group))
            t = step * max(b.reduction_length, b.segment_length * hops)
            if b.independent_outputs == 1 and lockstep <= 1 and b.segment_length > window:
                # one segment after another: each overlaps the next by at most W steps
                t = max(t, step * math.floor(steps / b.segment_length)
                        * (b.segment_length - window))  # fmt: skip
            worst = t if worst is None else max(worst, t)
        return worst

    def floor_s(self, c: CandidateFeatures, k: Mapping[str, float]) -> float | None:
        """A time no schedule of the candidate's function can beat, whatever it decides: its
        FLOPs on every core at full vector width (at the dtype's dot-product rate) and its
        compulsory bytes beyond the caches at their level's bandwidth. None when neither is
        known (no FLOP count, no machine model)."""
        arms = []
        if k["lane_flop"] > 0 and c.flops is not None:
            speedup = dtype_speedup(c.dtype, k)
            fp_pipes = k.get("fp_pipes") or 2 * isa.FP_PIPES
            flops = float(c.flops)
            counted = [b for b in c.blocks if b.muls_per_instance is not None]
            if counted and len(counted) == len(c.blocks) and speedup == 1.0:
                # The same FLOP-equivalents as the compute arm (a fused FMA + add is cheaper
                # than its 3 FLOPs), so the floor stays below every candidate's bound.
                flops = min(flops, sum(
                    min(b.instances, b.unique_instances) * max(
                        2 * b.muls_per_instance,
                        b.ops_per_instance * 2 * k["fma_pipes"] / fp_pipes)
                    for b in counted))  # fmt: skip
            arms.append(flops * k["lane_flop"] / (c.cores * k["max_lanes"] * speedup))
        arms.extend(self._memory(c, k).values())
        return max(arms) if arms else None

    def cost(self, candidate: CandidateFeatures, coefficients: Mapping[str, float]) -> Cost:
        arms = self.arms(candidate, coefficients)
        bound = max(arms.values()) if arms else None
        binding = max(arms, key=arms.get) if arms else "none"
        expected = {name: t for name, t in arms.items() if name != "phases"}
        if "compute" in arms:
            expected["compute"] = self._compute(candidate, coefficients, optimistic=False)
        if candidate.flops is not None and not expected:
            expected["flops"] = float(candidate.flops) * 1e-12  # GPU: FLOPs order the pool
        score = max(expected.values()) if expected else 0.0
        return Cost(score, bound, binding, MappingProxyType(arms))


def floor_s(func, target=None, *, machine: MachineModel | None = None, policy=None):
    """The proven floor of a function on ``target``: no schedule of it runs faster (see
    :meth:`RooflinePolicy.floor_s`); None without a FLOP count or a machine model."""

    target = as_target(target)
    if machine is None and target.kind.name == "llvm":
        machine = host_machine(host_target(num_cores=int(target.attrs["num-cores"])))
    policy = policy if policy is not None else RooflinePolicy()
    coefficients = validated_coefficients(policy, machine)
    return policy.floor_s(c=features(func, target), k=coefficients)
