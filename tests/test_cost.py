"""Candidate features, the policy contract, and the roofline bound on hand-checkable kernels."""

import math
from types import MappingProxyType

import pytest
from tvm_ext.cost import (
    Cost,
    ExecutionCostPolicy,
    RooflinePolicy,
    evaluate,
    features,
    hard_constraints,
)
from tvm_ext.schedules.teaching.lecture import lecture_cpu_matmul

from tvm_ext import kernels as K
from tvm_ext import measure
from tvm_ext import schedules as S
from tvm_ext.base.errors import PolicyError


def test_features_closed_forms(host):
    w = K.matmul(64, 48, 32)
    f = features(w.func, host)
    assert f.flops == 2 * 64 * 48 * 32 and f.flops_exact
    assert f.bytes["dram"][0] == w.min_bytes
    (block,) = f.blocks
    assert block.instances == 64 * 48 * 32 and block.flops_per_instance == 2
    assert block.reduction_length == 32 and block.cores_used == 1.0
    assert block.explicit_lanes == 1 and f.vector_lanes == 1
    # Without the workload the same counts come from the TIR alone.
    g = features(w.func.without_attr(K.WORKLOAD_ATTR), host)
    assert g.flops == f.flops and g.bytes["dram"][0] == w.min_bytes


def test_features_see_schedule_decisions(host):
    w = K.matmul(64, 64, 64)
    f = features(lecture_cpu_matmul(w), host)  # 32x32 tiles: i0 has extent 2, parallel
    update = [b for b in f.blocks if b.reduction_length > 1][0]
    assert update.parallel_extent == 2 and update.cores_used == min(2.0, f.cores)
    assert update.explicit_lanes == 32 and f.vector_lanes == 32
    # Inside the innermost reduction loop (k1) only the vectorized j1 (32) remains.
    assert update.reduction_length == 64 and update.independent_outputs == 32


def test_unavailable_facts_are_absent_not_zero(host):
    from tvm_ext.schedules.hand import matmul_vnni

    from tvm_ext import host_target

    w = K.matmul(64, 64, 64, "uint8")
    # Features are static: a VNNI CPU's schedule is inspected on any host (this one when it
    # has VNNI, else a Cascade Lake described by its target).
    vnni = host if matmul_vnni.applies(w, host) else host_target(mcpu="cascadelake", num_cores=2)
    assert matmul_vnni.applies(w, vnni)
    f = features(S.schedule(w, vnni), vnni)
    tensorized = [b for b in f.blocks if b.tensorized]
    # The uint8 schedule of a VNNI CPU is tensorized: a dropped tensorization is a failure.
    assert tensorized, "the uint8 schedule of a VNNI CPU is not tensorized"
    assert all(b.flops is None for b in tensorized)
    assert f.bytes["dram"][1] is None and "bytes" in f.missing
    assert f.flops == w.flops  # the workload attribute still gives exact FLOPs


def test_cuda_features(host):
    from tvm_ext import cuda_target

    t = cuda_target()
    f = features(S.schedule(K.matmul(128, 128, 128), t), t)
    cfg = S.default_config(K.matmul(128, 128, 128), t)
    assert f.threads_per_block == cfg.threads and f.thread_blocks == (128 // cfg.bm) ** 2
    assert f.shared_bytes == 2 * 4 * (cfg.bm * cfg.bk + cfg.bk * cfg.bn)  # two stages
    assert hard_constraints(f, t) == ()


def test_roofline_bound_holds_and_is_not_vacuous(host, machine):
    """Between two independent figures: no run beats the bound, and the bound is at least the
    function's proven floor (its FLOPs on every core at full width, at the ISA ceiling of the
    CPU, and its compulsory bytes beyond the caches), so a bound that collapsed towards zero
    would fail too.

    Timing margin: none. The compute and chain arms rest on ISA facts (the fastest boost clock
    and pipe counts of the CPU, tvm_ext/facts/isa.py), which no run can beat however loaded
    the host; measurement noise only lengthens a run."""
    from tvm_ext.cost import floor_s

    policy = RooflinePolicy()
    cases = [K.matmul(128, 128, 128), K.softmax(64, 256), K.conv2d(1, 8, 14, 14, 8, 3, 3, 1, 1)]
    cases.append(K.matmul(128, 128, 128, "uint8"))  # tensorized onto VNNI where the CPU has it
    cases.append(K.matmul(96, 80, 64, "bfloat16"))  # onto AVX512-BF16 where the CPU has it
    for w in cases:
        floor = floor_s(w.func, host, machine=machine, policy=policy)
        assert floor is not None and floor > 0
        for obj in (w.func, S.schedule(w, host)):
            cost = evaluate(policy, obj, host, machine=machine)
            m = measure(obj, w, host, repeat=3)
            assert cost.lower_bound_s >= floor * (1 - 1e-9), (w.key, cost, floor)
            assert m.seconds >= cost.lower_bound_s, (w.key, cost, m.seconds)


def test_roofline_arms_by_hand(host, machine):
    # Naive matmul: one core; the compute arm is flops at peak per lane-core with 16 lanes.
    w = K.matmul(64, 64, 64)
    policy = RooflinePolicy(slack=1.0)
    k = policy.coefficients(machine, policy.basis, None)
    arms = evaluate(policy, w.func, host, machine=machine).arms
    lanes = machine.vector_lanes
    assert arms["compute"] == pytest.approx(w.flops * k["lane_flop"] / lanes)
    assert "memory.dram" not in arms  # 48 KiB fits on chip


class NaNPolicy(RooflinePolicy):
    name = "nan-policy"

    def cost(self, candidate, coefficients):
        return Cost(float("nan"), None, "compute")


class BadCoefficients(RooflinePolicy):
    name = "bad-coeffs"

    def coefficients(self, limits, basis, prior):
        return {**super().coefficients(limits, basis, prior), "lane_flop": -1.0}


class RaisingPolicy(RooflinePolicy):
    name = "raising"

    def cost(self, candidate, coefficients):
        raise RuntimeError("boom")


class BoundWithoutProof(ExecutionCostPolicy):
    name = "liar"
    basis = ()

    def coefficients(self, limits, basis, prior):
        return {}

    def cost(self, candidate, coefficients):
        return Cost(1.0, 0.5, "x")


@pytest.mark.parametrize(
    "policy,match",
    [
        (NaNPolicy(), r"NaNPolicy\(nan-policy\) returned score_s=nan"),
        (BadCoefficients(), r"BadCoefficients\(bad-coeffs\) returned coefficient lane_flop=-1.0"),
        (RaisingPolicy(), r"RaisingPolicy\(raising\).cost failed: RuntimeError\('boom'\)"),
        (BoundWithoutProof(), r"does not declare proves_bounds"),
    ],
)
def test_invalid_policy_outputs_raise_policy_error(policy, match, host, machine):
    with pytest.raises(PolicyError, match=match) as info:
        evaluate(policy, K.matmul(8, 8, 8).func, host, machine=machine)
    assert info.value.policy.startswith(type(policy).__name__)


def test_user_can_override_one_hook(host, machine):
    class Doubled(RooflinePolicy):
        def cost(self, candidate, coefficients):
            c = super().cost(candidate, coefficients)
            return Cost(2 * c.score_s, c.lower_bound_s, c.binding, c.arms)

    w = K.matmul(32, 32, 32)
    a = evaluate(RooflinePolicy(), w.func, host, machine=machine)
    b = evaluate(Doubled(), w.func, host, machine=machine)
    assert b.score_s == pytest.approx(2 * a.score_s) and b.lower_bound_s == a.lower_bound_s


def test_hard_constraints_are_not_waived_by_scores():
    from tvm_ext.cost.features import CandidateFeatures

    from tvm_ext import cuda_target

    t = cuda_target()
    f = CandidateFeatures(
        "cuda",
        1,
        1,
        True,
        "float32",
        MappingProxyType({}),
        (),
        None,
        None,
        None,
        None,
        threads_per_block=2048,
        thread_blocks=1,
        shared_bytes=100_000,
        local_bytes=0,
    )
    broken = hard_constraints(f, t)
    assert len(broken) == 2 and "threads per block" in broken[0]
    assert not Cost(0.0, None, "x", violations=broken).feasible


def test_slack_must_keep_a_bound(host, machine):
    for bad in (0.5, math.inf, math.nan, "2"):
        with pytest.raises(ValueError, match=f"slack={bad!r}"):
            RooflinePolicy(slack=bad)
    # Slack only loosens: it raises probed peaks and bandwidths and shortens probed latencies,
    # never below the ISA facts; with twice the slack no arm grows.
    w = K.matmul(64, 64, 64)
    one = evaluate(RooflinePolicy(1.0), w.func, host, machine=machine)
    two = evaluate(RooflinePolicy(2.0), w.func, host, machine=machine)
    assert set(one.arms) == set(two.arms) and one.arms
    for arm, value in one.arms.items():
        assert two.arms[arm] <= value * (1 + 1e-12), arm
    assert two.lower_bound_s <= one.lower_bound_s * (1 + 1e-12)


def test_evaluate_prices_features_already_derived_as_it_prices_the_function(host, machine):
    """``evaluate`` on CandidateFeatures is the same cost as on the function they were derived
    from; a policy that needs the store summary refuses features derived without it."""
    from tvm_ext.cost import XGBoostPolicy

    w = K.layernorm(64, 256)
    feats = features(w.func, host, w)
    direct = evaluate(RooflinePolicy(), w.func, host, machine=machine, workload=w)
    assert evaluate(RooflinePolicy(), feats, host, machine=machine) == direct
    with pytest.raises(PolicyError, match="store features"):
        evaluate(XGBoostPolicy.__new__(XGBoostPolicy), feats, host, machine=machine)
