"""The analytic roofline policy: a proven lower bound on a CPU candidate's run time.

Every arm is a time no run of the candidate can beat, given the decisions it has taken; the
bound is the largest arm, and the arm that sets it is reported as ``binding``:

- ``compute``: each block's arithmetic (its distinct instances only: LLVM may hoist
  recomputation a loop nest asks for) at the machine's peak rate per core and lane for the
  candidate's dtype (int8/bf16 at their dot-product peaks), on the
  cores its parallel loops can occupy (``P / ceil(P / cores)``) and the lanes it has or that
  LLVM could still give it (any spatial loop with at most 1024 inner iterations may be
  unrolled and vectorized: shared/bound-study.md), summed over blocks (they share the units);
- ``memory.llc`` / ``memory.dram``: the compulsory bytes (every parameter once) at the
  bandwidth of the level they cannot fit above (none when they fit in L2: warm-cache runs);
- ``dependency``: a multiply-add reduction without fast-math runs its steps in order; each
  output's ``L`` steps take ``L`` FMA latencies, and at most the outputs updated inside the
  innermost reduction loop, times the lanes LLVM could vectorize them over, times what a
  512-entry reorder window holds of the next ones, are in flight; the largest block's chain.

The machine's figures are probed on a shared host, where a probe can read low; the bound
scales them by ``slack`` (default 1.25: peaks and bandwidths up, latency down) so that it
stays a bound. ``score_s`` ranks with expected rather than optimistic facts (the lanes the
schedule asked for; LLVM's own 8-lane vectors otherwise).
"""

from __future__ import annotations

import math
from types import MappingProxyType
from typing import Mapping, Sequence

from tvm_ext.facts.machine import MachineModel, host_machine
from tvm_ext.facts.target import as_target, host_target

from .features import CandidateFeatures, features
from .policy import Cost, ExecutionCostPolicy

REORDER_WINDOW = 512
AUTO_VECTOR_LANES = 8  # LLVM's own loop vectorizer emits ymm (8 fp32 lanes) here


class RooflinePolicy(ExecutionCostPolicy):
    """Roofline lower bound with compute, memory and dependency-chain arms (CPU targets)."""

    name = "roofline"
    proves_bounds = True
    basis = (
        "lane_flop",
        "llc_byte",
        "dram_byte",
        "chain_step",
        "on_chip_bytes",
        "l2_bytes",
        "max_lanes",
        "int8_speedup",
        "bf16_speedup",
    )

    def __init__(self, slack: float = 1.25):
        if not isinstance(slack, (int, float)) or not slack >= 1.0 or math.isinf(slack):
            raise ValueError(f"slack={slack!r} must be a finite number >= 1")
        self.slack = float(slack)

    def coefficients(
        self, limits: MachineModel | None, basis: Sequence[str], prior: Mapping[str, float] | None
    ) -> Mapping[str, float]:
        """Seconds per lane-FLOP on one core, per byte per level, per chain step; sizes."""
        if limits is None:  # no model of this device (a GPU): no bound, rank by FLOPs alone
            return {
                "lane_flop": 0.0,
                "llc_byte": 0.0,
                "dram_byte": 0.0,
                "chain_step": 0.0,
                "on_chip_bytes": 0.0,
                "l2_bytes": 0.0,
                "max_lanes": 1.0,
                "int8_speedup": 1.0,
                "bf16_speedup": 1.0,
            }
        lanes = float(limits.vector_lanes)
        s = self.slack
        return {
            "lane_flop": limits.cores * lanes / (limits.peak("float32") * s),
            "llc_byte": 1.0 / (limits.bandwidth["llc"].value * s),
            "dram_byte": 1.0 / (limits.bandwidth["dram"].value * s),
            "chain_step": limits.fma_latency.value / s,
            "on_chip_bytes": float(limits.llc_bytes),
            "l2_bytes": float(limits.l2_bytes),
            "max_lanes": lanes,
            # Dot-product instructions (VNNI, AVX512-BF16, AMX) beat the fp32 FMA rate: a
            # candidate of those dtypes is priced at its dtype's peak, whatever its code uses.
            "int8_speedup": limits.peak("int8") / limits.peak("float32"),
            "bf16_speedup": limits.peak("bfloat16") / limits.peak("float32"),
        }

    def arms(self, c: CandidateFeatures, k: Mapping[str, float]) -> dict[str, float]:
        """Every arm's time in seconds (optimistic facts: each is a lower bound)."""
        arms: dict[str, float] = {}
        if k["lane_flop"] > 0 and c.flops is not None:
            arms["compute"] = self._compute(c, k, optimistic=True)
        low = c.bytes["dram"][0] if c.bytes.get("dram") else None
        if low is not None and k["llc_byte"] > 0:
            if low > k["on_chip_bytes"]:
                arms["memory.dram"] = low * k["dram_byte"]
            elif low > k["l2_bytes"]:
                arms["memory.llc"] = low * k["llc_byte"]
        chain = self._chain(c, k)
        if chain is not None:
            arms["dependency"] = chain
        return arms

    def _compute(self, c: CandidateFeatures, k: Mapping[str, float], optimistic: bool) -> float:
        """Arithmetic time: per-block lanes and cores when every block was counted, else the
        whole candidate's FLOPs at full width on the cores of its least parallel block."""
        max_lanes = k["max_lanes"]
        speedup = {
            "int8": k["int8_speedup"],
            "uint8": k["int8_speedup"],
            "bfloat16": k["bf16_speedup"],
        }.get(c.dtype, 1.0)
        counted = [b for b in c.blocks if b.unique_flops is not None]
        if c.blocks and len(counted) == len(c.blocks):
            total = 0.0
            for b in counted:
                if optimistic:
                    lanes = min(max(b.possible_lanes, b.explicit_lanes), max_lanes)
                else:
                    asked = (
                        b.explicit_lanes
                        if b.explicit_lanes > 1
                        else (AUTO_VECTOR_LANES if b.possible_lanes > 1 else 1)
                    )
                    lanes = min(asked, max_lanes)
                total += b.unique_flops * k["lane_flop"] / (b.cores_used * lanes)
            return total / speedup
        opaque = [b.cores_used for b in c.blocks if b.unique_flops is None]
        cores = max(opaque) if opaque else float(c.cores)
        return c.flops * k["lane_flop"] / (cores * max_lanes * speedup)

    def _chain(self, c: CandidateFeatures, k: Mapping[str, float]) -> float | None:
        worst = None
        for b in c.blocks:
            if b.flops_per_instance != 2 or b.reduction_length <= 1 or b.tensorized:
                continue  # only multiply-add recurrences are priced at the FMA latency
            length = b.reduction_length
            per_core = min(b.instances, b.unique_instances) / length / b.cores_used
            # LLVM may vectorize a spatial loop around the reduction (after unrolling it), so
            # one chain can carry up to possible_lanes outputs; the window overlaps the next.
            lanes = max(b.possible_lanes, 1)
            in_flight = b.independent_outputs * lanes * (1 + math.ceil(REORDER_WINDOW / length))
            t = per_core / in_flight * length * k["chain_step"]
            worst = t if worst is None else max(worst, t)
        return worst if worst is not None and k["chain_step"] > 0 else None

    def floor_s(self, c: CandidateFeatures, k: Mapping[str, float]) -> float | None:
        """A time no schedule of the candidate's function can beat, whatever it decides: its
        FLOPs on every core at full vector width (at the dtype's dot-product rate) and its
        compulsory bytes (every parameter once) at the bandwidth of the level they cannot
        fit above. None when neither is known (no FLOP count, no machine model)."""
        arms = []
        if k["lane_flop"] > 0 and c.flops is not None:
            speedup = {
                "int8": k["int8_speedup"],
                "uint8": k["int8_speedup"],
                "bfloat16": k["bf16_speedup"],
            }.get(c.dtype, 1.0)
            arms.append(c.flops * k["lane_flop"] / (c.cores * k["max_lanes"] * speedup))
        low = c.bytes["dram"][0] if c.bytes.get("dram") else None
        if low is not None and k["llc_byte"] > 0:
            if low > k["on_chip_bytes"]:
                arms.append(low * k["dram_byte"])
            elif low > k["l2_bytes"]:
                arms.append(low * k["llc_byte"])
        return max(arms) if arms else None

    def cost(self, candidate: CandidateFeatures, coefficients: Mapping[str, float]) -> Cost:
        arms = self.arms(candidate, coefficients)
        bound = max(arms.values()) if arms else None
        binding = max(arms, key=arms.get) if arms else "none"
        expected = dict(arms)
        if "compute" in arms:
            expected["compute"] = self._compute(candidate, coefficients, optimistic=False)
        if candidate.flops is not None and not expected:
            expected["flops"] = float(candidate.flops) * 1e-12  # GPU: FLOPs order the pool
        score = max(expected.values()) if expected else 0.0
        return Cost(score, bound, binding, MappingProxyType(arms))


def floor_s(func, target=None, *, machine: MachineModel | None = None, policy=None):
    """The proven floor of a function on ``target``: no schedule of it runs faster (see
    :meth:`RooflinePolicy.floor_s`); None without a FLOP count or a machine model."""
    from .policy import validated_coefficients

    target = as_target(target)
    if machine is None and target.kind.name == "llvm":
        machine = host_machine(host_target(num_cores=int(target.attrs["num-cores"])))
    policy = policy if policy is not None else RooflinePolicy()
    coefficients = validated_coefficients(policy, machine)
    return policy.floor_s(features(func, target), coefficients)
