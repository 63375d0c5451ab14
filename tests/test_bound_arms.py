"""Each arm of the roofline bound on crafted TIR: its closed form, a case where it binds and one
where it must not, a run that does not beat it, and the frozen corpus of measured candidates.

The machine models here are built from ISA facts alone (probes that read absurdly low peaks and
high latencies, infinite bandwidths unless a memory arm is under test): the bound must then
rest on the ISA tables, and no probe is run.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest
from tvm_ext.cost import RooflinePolicy, evaluate, features
from tvm_ext.cost.policy import validated_coefficients
from tvm_ext.cost.roofline import MAX_LOCKSTEP

import tvm_ext
from tvm_ext import kernels as K
from tvm_ext import measure
from tvm_ext.base import tvm_api
from tvm_ext.hardware import isa
from tvm_ext.hardware.machine_model import Figure, MachineModel
from tvm_ext.hardware.target import lanes_for, target_cores, target_cpu
from tvm_ext.records.logs import apply_trace

CORPUS = pathlib.Path(__file__).parent / "data" / "bound_corpus" / "corpus.json"
te = tvm_api.te


def isa_machine(cpu: str, cores: int, lanes: int, *, llc_bw=math.inf, l2=1 << 20, llc=32 << 20):
    """A machine model whose probes are useless (1 FLOP/s, 1 s per FMA step): every compute
    and chain figure of the bound then comes from the ISA tables."""
    peaks = {d: Figure(1.0, "user") for d in ("float32", "int8", "bfloat16")}
    bw = {"llc": Figure(llc_bw, "user"), "dram": Figure(math.inf, "user")}
    return MachineModel(cpu, cores, peaks, bw, llc + l2, l2, lanes, Figure(1.0, "user"))


@pytest.fixture(scope="module")
def target():
    return tvm_ext.host_target()


@pytest.fixture(scope="module")
def model(target):
    return isa_machine(target_cpu(target), target_cores(target), lanes_for(target, 32))


def _bound(obj, target, model, workload=None):
    return evaluate(RooflinePolicy(), obj, target, machine=model, workload=workload)


def _func(tensors):
    return te.create_prim_func(tensors)


def test_isa_tables():
    # Zen 4 runs a 512-bit FMA through both 256-bit halves: 16 FMA lanes a cycle, not 32.
    assert isa.fma_lanes_per_cycle("znver4", 16) == 16 == isa.fma_lanes_per_cycle("znver4", 8)
    assert isa.fma_lanes_per_cycle("znver5", 16) == 32
    assert isa.fma_lanes_per_cycle("znver3", 8) == 16
    # An unnamed CPU may be a Skymont (four 128-bit FMA pipes): narrow vectors get four pipes.
    assert isa.fma_lanes_per_cycle("some-future-cpu", 4) == 16
    assert isa.fma_lanes_per_cycle("some-future-cpu", 1) == 4
    assert isa.reorder_window("some-future-cpu") == isa.MAX_REORDER_WINDOW


def test_coefficients_rest_on_isa_facts_not_on_a_low_probe():
    policy = RooflinePolicy()
    low = isa_machine("znver5", 2, 16)
    k = validated_coefficients(policy, low)
    ceiling = isa.fp32_peak_ceiling("znver5", 2, 16)
    assert k["lane_flop"] == pytest.approx(2 * 16 / ceiling)
    assert k["chain_step"] == pytest.approx(isa.fma_latency_floor_s("znver5"))
    # A probe above the table (a stale table) can only loosen the bound.
    fast = low.with_overrides({"peak.float32": 10 * ceiling, "fma_latency": 1e-12})
    k2 = validated_coefficients(policy, fast)
    assert k2["lane_flop"] == pytest.approx(2 * 16 / (10 * ceiling * policy.slack))
    assert k2["flop_cycle_s"] < k["flop_cycle_s"] and k2["chain_step"] < k["chain_step"]


def test_compute_arm_takes_no_cap_from_narrow_explicit_vectors(target, model):
    """Must not cap: a matmul vectorized 4 lanes wide by TVM may still run wider, since x86
    instruction selection joins vector operations whose results it concatenates (the
    violation hunt, seed 7: 8-lane multiply-adds ran as 16-lane zmm FMAs, 5 % under the
    8-lane bound; that candidate is in the frozen corpus). Stage 1 prices full width; stage 2
    reads the width the code has and binds at it."""
    from tvm_ext.cost.post_build import evaluate_built

    w = K.matmul(64, 64, 64)
    sch = tvm_api.Schedule(w.func)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    j0, j1 = sch.split(j, [None, 4])
    sch.reorder(i, j0, k, j1)
    sch.vectorize(j1)
    policy = RooflinePolicy()
    (block,) = [b for b in features(sch, target, w).blocks if b.reduction_length > 1]
    assert block.explicit_lanes == 4 and block.lanes_bound == model.vector_lanes
    stage1, stage2, code = evaluate_built(policy, sch, target, machine=model, workload=w)
    # From the ISA facts alone (not the policy's own helpers): the CPU's fp32 ceiling at full
    # width on the cores the block uses; at stage 2, the FMA pipes each completing the code's
    # lanes (up to the datapath's) a cycle at the top boost clock.
    cpu, lanes = model.cpu, model.vector_lanes
    assert stage1.arms["compute"] == pytest.approx(
        w.flops / isa.fp32_peak_ceiling(cpu, block.cores_used, lanes)
    )
    if code.fp_lanes < lanes:  # the code kept narrower vectors: stage 2 says so
        narrow = isa.fp32_peak_ceiling(cpu, block.cores_used, code.fp_lanes)
        assert stage2.lower_bound_s >= w.flops / narrow * (1 - 1e-9)
    assert measure(sch, w, target, repeat=3).min_seconds >= stage2.lower_bound_s


def test_compute_arm_prices_pipes_not_flops(target, model):
    """A block of an FMA and an add (3 FLOPs) needs one FMA slot and one FP slot: 2 FLOPs'
    worth of pipe time. Counting 3 would overstate it."""
    n = 1 << 16
    a, b, c, e = (te.placeholder((n,), "float32", name=x) for x in "abce")
    d = te.compute((n,), lambda i: a[i] * b[i] + c[i] + e[i], name="d")
    func = _func([a, b, c, e, d])
    (block,) = features(func, target).blocks
    assert (block.flops_per_instance, block.muls_per_instance, block.ops_per_instance) == (3, 1, 2)
    cost = _bound(func, target, model)
    # Two FLOPs' worth of FMA-pipe time per instance at the CPU's fp32 ceiling (ISA facts).
    ceiling = isa.fp32_peak_ceiling(model.cpu, block.cores_used, model.vector_lanes)
    assert cost.arms["compute"] == pytest.approx(n * 2 / ceiling)
    assert measure(func, None, target, reference=func, repeat=3).min_seconds >= cost.lower_bound_s


def _transpose(n: int):
    a = te.placeholder((n, n), "float32", name="A")
    b = te.compute((n, n), lambda i, j: a[j, i], name="B")
    return _func([a, b])


def test_issue_arm_binds_on_a_copy(target, model):
    """Binds: ``B[i, j] = A[j, i]`` has no arithmetic; the run of its outer loop (the inner one
    is within the unroll reach) touches every element of A and B: at best one vector a slot,
    at most ``LOAD_BYTES_PER_CYCLE`` / ``STORE_BYTES_PER_CYCLE`` bytes a cycle, less what the
    registers held before the run."""
    n = 512
    func = _transpose(n)
    (block,) = features(func, target).blocks
    vlen = lanes_for(target, 32)
    assert block.mem_runs == 1
    assert block.load_slots == n * n // vlen - isa.REGISTER_BYTES // (4 * vlen)
    assert block.load_bytes == block.store_bytes == 4 * n * n - isa.REGISTER_BYTES
    cost = _bound(func, target, model)
    stores = isa.stores_per_cycle(model.cpu)
    cycles = max(block.load_slots / isa.LOADS_PER_CYCLE, block.store_slots / stores,
                 block.load_bytes / isa.LOAD_BYTES_PER_CYCLE)  # fmt: skip
    assert cost.binding == "issue"
    assert cost.arms["issue"] == pytest.approx(cycles / isa.max_boost_hz(model.cpu))
    assert measure(func, None, target, reference=func, repeat=3).min_seconds >= cost.lower_bound_s


def test_issue_arm_lets_registers_and_vectors_off(target, model):
    """Must not bind: a run that fits in the registers costs nothing, and a register-tiled
    matmul touches few elements per multiply-add. (It does bind an element-wise add.)"""
    n = 512
    a, b = (te.placeholder((n, n), "float32", name=x) for x in "AB")
    c = te.compute((n, n), lambda i, j: a[i, j] + b[i, j], name="C")
    add = _bound(_func([a, b, c]), target, model)
    assert add.binding == "issue"  # two loads per add: the ports, not the pipes, bind
    small = _bound(K.matmul(8, 8, 8).func, target, model)
    assert "issue" not in small.arms
    w = K.matmul(256, 256, 256)
    tiled = _bound(_register_tiled(w), target, model, w)
    assert tiled.binding == "compute" and tiled.arms["issue"] < tiled.arms["compute"]


def _tiled_transpose(n: int, fuse: bool):
    """The transpose tiled 8 x 8 rows by 64 columns; ``fuse``: its two outer tile loops fused
    into one, as MetaSchedule does (the indices then take ``fused // 8`` and ``fused % 8``)."""
    sch = tvm_api.Schedule(_transpose(n))
    i, j = sch.get_loops(sch.get_sblock("B"))
    i0, i1, i2 = sch.split(i, [None, 8, 8])
    j0, j1 = sch.split(j, [None, 64])
    sch.reorder(i0, j0, i1, i2, j1)
    if fuse:
        sch.fuse(i0, j0)
    return sch


def test_issue_arm_reads_through_nonlinear_loops_outside_the_run(target, model):
    """Binds the same: a loop outside the run (here the fused tile loop) enters the indices
    through ``//`` and ``%``, but only as a term of its own, constant through each run: the
    run's elements are the unfused schedule's, moved. Must not count: an index where ``//``
    mixes the run's own variable with the body's (a fused-then-split loop), whose set of
    elements may change shape from run to run."""
    n = 512
    plain, fused = (features(_tiled_transpose(n, f), target).blocks[0] for f in (False, True))
    assert fused.mem_runs == plain.mem_runs == 64  # 8 x 8 tiles of the outer loops
    assert fused.load_slots == plain.load_slots > 0
    assert fused.store_bytes == plain.store_bytes > 0
    cost = _bound(_tiled_transpose(n, True), target, model)
    assert cost.arms["issue"] == pytest.approx(_bound(_tiled_transpose(n, False), target,
                                                      model).arms["issue"])  # fmt: skip
    sch = _tiled_transpose(n, True)
    assert measure(sch, None, target, reference=_transpose(n), repeat=3).min_seconds >= (
        cost.lower_bound_s
    )
    mixed = tvm_api.Schedule(_transpose(n))
    i, j = mixed.get_loops(mixed.get_sblock("B"))
    mixed.split(mixed.fuse(i, j), [None, 64])  # v_i = (f0 * 64 + f1) // 512
    (block,) = features(mixed, target).blocks
    assert block.load_slots == block.store_slots == 0


def _register_tiled(w):
    sch = tvm_api.Schedule(w.func)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, 4])
    j0, j1 = sch.split(j, [None, 16])
    sch.reorder(i0, j0, k, i1, j1)
    sch.parallel(i0)
    sch.vectorize(j1)
    return sch


def test_chain_arm_binds_on_a_long_dot_product(target, model):
    """Binds: four rows of 65536 dependent FMAs, one after the other; scalar (the reduction
    cannot be vectorized without reassociation)."""
    m, k = 4, 1 << 16
    w = K.matmul(m, 1, k)
    cost = _bound(w.func, target, model, w)
    assert cost.binding == "dependency"
    assert cost.arms["dependency"] >= k * isa.fma_latency_floor_s(model.cpu) * (1 - 1e-12)
    assert measure(w.func, w, target, repeat=3).min_seconds >= cost.lower_bound_s


@pytest.mark.parametrize("op", ["max", "min"])
def test_chain_arm_prices_a_max_or_min_reduction_at_its_latency(target, model, op):
    """Binds: four rows of 65536 dependent maxes (or mins), a softmax's row max unsplit: each
    step waits for the one before (TVM emits a compare and a select, which LLVM does not
    reassociate without no-NaN flags: a scalar ``vmaxss`` chain), at least the max step's
    latency. A run is no faster (Zen 5, under load: 155 us against an 11.3 us bound)."""
    m, k = 4, 1 << 16
    a = te.placeholder((m, k), "float32", name="A")
    r = te.reduce_axis((0, k), name="r")
    reduce = te.max if op == "max" else te.min
    func = _func([a, te.compute((m,), lambda i: reduce(a[i, r], axis=r), name="M")])
    (block,) = [b for b in features(func, target).blocks if b.name == "M"]
    assert block.chain_op == "max" and block.segment_length == k
    cost = _bound(func, target, model)
    step = validated_coefficients(RooflinePolicy(), model)["max_step"]
    assert cost.arms["dependency"] >= k * step * (1 - 1e-12)
    # Binds: here a max step's floor (1 cycle, Zen 2/3) equals a scalar max's issue slot, so
    # the compute arm ties it; nothing else is higher.
    assert cost.lower_bound_s == pytest.approx(cost.arms["dependency"])
    assert measure(func, None, target, reference=func, repeat=3).min_seconds >= cost.lower_bound_s


def _split_reduction(w):
    """The Zen 5 violation of issue 16: 16 parallel row blocks, loops k_0 (8), i_2 (16),
    j (256), k_1 (32): each output's 256 steps run as 8 segments of 32."""
    sch = tvm_api.Schedule(w.func)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i2 = sch.split(i, [16, 16])
    k0, k1 = sch.split(k, [8, 32])
    sch.reorder(i0, k0, i2, j, k1)
    sch.parallel(i0)
    return sch


def test_chain_arm_counts_segments_of_split_reductions(target, model):
    """Must not bind: the chain is cut into segments of 32 with every other output's segments
    between them; the window overlaps many segments, so the arm stays under the compute arm
    (the old arm, from the whole length of 256, read 131 us against a 124 us run)."""
    w = K.matmul(256, 256, 256)
    sch = _split_reduction(w)
    (block,) = [b for b in features(sch, target, w).blocks if b.reduction_length > 1]
    assert (block.reduction_length, block.segment_length, block.independent_outputs) == (256, 32, 1)
    assert block.chain_op == "fma" and block.body_instances == 32
    cost = _bound(sch, target, model, w)
    policy = RooflinePolicy()
    k = validated_coefficients(policy, model)
    steps = 256**3 / block.cores_used / block.lanes_bound
    group = MAX_LOCKSTEP * 32
    hops = math.floor(steps / (k["reorder_window"] + 2 * group))
    assert cost.arms["dependency"] == pytest.approx(k["chain_step"] * 32 * hops)
    assert cost.arms["dependency"] < cost.arms["compute"]
    assert measure(sch, w, target, repeat=5).min_seconds >= cost.lower_bound_s


def _row_sum_scaled(m: int, n: int, k: int):
    """``B[i, j] = A[i, j] / sum_r A[i, r]``: (its function, the row sum recomputed per j)."""
    a = te.placeholder((m, k), "float32", name="A")
    r = te.reduce_axis((0, k), name="r")
    s = te.compute((m,), lambda i: te.sum(a[i, r], axis=r), name="S")
    b = te.compute((m, n), lambda i, j: a[i, j] / s[i], name="B")
    func = _func([a, b])
    sch = tvm_api.Schedule(func)
    sch.compute_at(sch.get_sblock("S"), sch.get_loops(sch.get_sblock("B"))[1])
    return func, sch


def test_chain_arm_runs_recomputed_chains_again(target, model):
    """Binds: a row sum (a chain of 2048 dependent adds, beyond the unroll reach, so no two
    rows' chains run side by side) recomputed for each of 64 outputs runs 64 times; each
    chain, longer than the reorder window, overlaps the next by at most ``W`` steps (the
    one-segment-at-a-time walk, above the hop walk here). Must not: computed once per row,
    its chains are 64 times fewer."""
    func, sch = _row_sum_scaled(8, 64, 2048)
    (sum_block,) = [b for b in features(sch, target).blocks if b.name == "S"]
    assert sum_block.chain_op == "add" and sum_block.chain_repeats == 64
    assert sum_block.segment_length == 2048 and sum_block.body_instances == 1
    cost = _bound(sch, target, model)
    assert cost.binding == "dependency"
    k = validated_coefficients(RooflinePolicy(), model)
    steps = 8 * 64 * 2048 / sum_block.cores_used / sum_block.lanes_bound
    window = k["reorder_window"]
    hops = math.floor(steps / (window + 2 * 2048))
    walk = math.floor(steps / 2048) * (2048 - window)
    assert walk > 2048 * hops
    assert cost.arms["dependency"] == pytest.approx(k["add_step"] * walk)
    once = _bound(func, target, model)
    assert once.arms["dependency"] <= cost.arms["dependency"] / 8
    assert measure(sch, None, target, reference=func, repeat=3).min_seconds >= cost.lower_bound_s


def _sum_then_scale(one_body: bool):
    """``B = A / rowsum(A)`` over 8 rows of 4096, rows split over the cores: the row sums in
    their own parallel body, then the division in another; ``one_body``: the sum computed
    inside the division's row loop, one parallel body for both."""
    func, _ = _row_sum_scaled(8, 4096, 4096)
    sch = tvm_api.Schedule(func)
    if one_body:
        sch.compute_at(sch.get_sblock("S"), sch.get_loops(sch.get_sblock("B"))[0])
    else:
        sch.parallel(sch.get_loops(sch.get_sblock("S"))[0])
    sch.parallel(sch.get_loops(sch.get_sblock("B"))[0])
    return func, sch


def test_phases_add_the_arms_of_parallel_bodies_run_one_after_the_other(target, model):
    """Binds: the row sums (a chain per row) run to their end before the division starts
    (TVM joins every task of a parallel body before the launch returns), so the bound is the
    chain arm of the first body plus the largest arm of the second. Must not: in one parallel
    body the two blocks' work may overlap, and no ``phases`` arm is claimed."""
    policy = RooflinePolicy()
    k = validated_coefficients(policy, model)
    func, sch = _sum_then_scale(False)
    feats = features(sch, target)
    assert sorted(b.region for b in feats.blocks if b.name in ("S", "B")) == [0, 1]
    phases = policy.phase_arms(feats, k)
    assert set(phases) >= {0, 1} and "dependency" in phases[0]
    cost = _bound(sch, target, model)
    assert cost.binding == "phases"
    assert cost.arms["phases"] == pytest.approx(sum(max(a.values()) for a in phases.values()))
    assert cost.arms["phases"] > max(v for name, v in cost.arms.items() if name != "phases")
    assert measure(sch, None, target, reference=func, repeat=3).min_seconds >= cost.lower_bound_s
    _, fused = _sum_then_scale(True)
    assert {b.region for b in features(fused, target).blocks} == {0}
    assert "phases" not in _bound(fused, target, model).arms


def test_a_short_recomputed_chain_may_run_once(target, model):
    """Must not charge the repeats: a row sum of 64 steps lies inside the unroll reach, so it
    may become straight-line code (TVM's unroll pragma, LLVM's full unroll) that LLVM hoists
    whole out of the j loop around it. Found by the audit: a stock softmax candidate whose
    row sum was recomputed per column ran in 247 us against a 321 us stage-2 chain bound
    that charged the 1024 repeats."""
    func, sch = _row_sum_scaled(8, 64, 64)
    (sum_block,) = [b for b in features(sch, target).blocks if b.name == "S"]
    assert sum_block.chain_op == "add" and sum_block.chain_repeats == 1
    unrolled = tvm_api.Schedule(func)
    unrolled.compute_at(unrolled.get_sblock("S"), unrolled.get_loops(unrolled.get_sblock("B"))[1])
    unrolled.unroll(unrolled.get_loops(unrolled.get_sblock("S"))[-1])
    (sum_block,) = [b for b in features(unrolled, target).blocks if b.name == "S"]
    assert sum_block.chain_repeats == 1
    cost = _bound(unrolled, target, model)
    seconds = measure(unrolled, None, target, reference=func, repeat=3).min_seconds
    assert seconds >= cost.lower_bound_s


def test_issue_arm_does_not_charge_a_body_that_may_be_hoisted(target, model):
    """Must not: a row sum of 1024 loads recomputed for each of 64 columns lies inside the
    unroll reach, and the loop that repeats it touches none of its variables, so LLVM may
    hoist the whole straight-line body out of it (found by the tuning bench: a stock
    layernorm ran in 123 us against a 274 us issue arm that charged every repeat)."""
    func, sch = _row_sum_scaled(8, 64, 1024)
    (sum_block,) = [b for b in features(sch, target).blocks if b.name == "S"]
    assert sum_block.mem_runs == 8  # once per row: the 64 repeats may collapse
    assert sum_block.load_slots <= 1024 / 16 * 2  # one row's loads, not 64 of them
    cost = _bound(sch, target, model)
    seconds = measure(sch, None, target, reference=func, repeat=3).min_seconds
    assert seconds >= cost.lower_bound_s


def test_memory_arm_charges_only_what_the_caches_cannot_hold(target):
    """Binds: an axpy of 3 x 4 MiB with a 1 MiB L2 moves the 11 MiB beyond it through the LLC;
    must not: one that fits in L2 has no memory arm."""
    cpu, cores, lanes = target_cpu(target), target_cores(target), lanes_for(target, 32)
    m = isa_machine(cpu, cores, lanes, llc_bw=100e9, l2=1 << 20)
    policy = RooflinePolicy()
    big, small = K.axpy(1 << 20), K.axpy(1 << 14)
    cost = evaluate(policy, big.func, target, machine=m, workload=big)
    assert cost.binding == "memory.llc"
    assert cost.arms["memory.llc"] == pytest.approx((big.min_bytes - (1 << 20)) / (100e9 * 1.25))
    assert "memory.llc" not in evaluate(policy, small.func, target, machine=m, workload=small).arms


def _corpus():
    if not CORPUS.exists():
        pytest.fail(f"{CORPUS} is missing: bench/bound_audit.py --freeze-corpus writes it")
    return json.loads(CORPUS.read_text())


def test_frozen_corpus_bounds_hold_on_the_recorded_cpu():
    """Every frozen candidate's recorded time is at least its bound, recomputed from its trace
    for the CPU and core count it was measured on, with that machine's recorded model (only the
    memory arms read its probes; compute and chains rest on the ISA tables)."""
    data = _corpus()
    target = tvm_ext.host_target(mcpu=data["mcpu"], num_cores=data["cores"])
    machine = MachineModel.from_json(data["machine"])
    policy = RooflinePolicy()
    assert len(data["candidates"]) >= 20
    below = []
    for cand in data["candidates"]:
        w = K.SUITE[cand["kernel"]](*cand["args"], **cand["kwargs"])
        sch = apply_trace(w.func, cand["trace"])
        bound = evaluate(policy, sch, target, machine=machine, workload=w).lower_bound_s
        assert bound is not None and bound > 0
        if cand["measured_s"] < bound:
            below.append((cand["workload"], cand["measured_s"], bound))
    assert not below, below


def test_frozen_corpus_holds_after_the_build():
    """The same candidates priced at stage 2: each is built for the recorded CPU (LLVM
    cross-compiles; nothing runs here), its machine code and IR read, and the bound they prove
    must stay at or below the time recorded on that CPU."""
    from tvm_ext.cost.post_build import evaluate_built

    data = _corpus()
    target = tvm_ext.host_target(mcpu=data["mcpu"], num_cores=data["cores"])
    machine = MachineModel.from_json(data["machine"])
    policy = RooflinePolicy()
    staged = [c for c in data["candidates"] if c.get("stage2_bound_s")]
    assert len(staged) >= 20
    below, raised = [], 0
    for cand in staged:
        w = K.SUITE[cand["kernel"]](*cand["args"], **cand["kwargs"])
        sch = apply_trace(w.func, cand["trace"])
        stage1, stage2, _ = evaluate_built(policy, sch, target, machine=machine, workload=w)
        assert stage2.lower_bound_s >= stage1.lower_bound_s
        raised += stage2.lower_bound_s > stage1.lower_bound_s
        if cand["measured_s"] < stage2.lower_bound_s:
            below.append((cand["workload"], cand["measured_s"], stage2.lower_bound_s,
                          stage2.binding))  # fmt: skip
    assert not below, below
    assert raised >= len(staged) // 4  # stage 2 decides something on this corpus


def test_issue_arm_counts_distinct_offsets_and_blocks_as_unique_does():
    """The issue arm's counting of a run's distinct elements and aligned vector blocks (a mask
    over the offsets' range, or ``unique`` when the range is sparse) against numpy's
    ``unique`` on random sets, steps (negative, zero, overlapping, disjoint) and widths."""
    import numpy as np
    from tvm_ext.cost.traffic import distinct_counts

    rng = np.random.default_rng(0)
    for _ in range(2000):
        base = np.unique(rng.integers(0, rng.integers(1, 20000), rng.integers(1, 200)))
        step, count = int(rng.integers(-300, 300)), int(rng.integers(1, 50))
        vlen = int(rng.choice([1, 2, 4, 8, 16, 32]))
        run = np.unique((base[None, :] + step * np.arange(count)[:, None]).ravel())
        assert distinct_counts(base, step, count, vlen) == (len(run), len(np.unique(run // vlen)))
