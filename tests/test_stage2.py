"""Stage 2 of the cut: facts read off the built machine code, the bound they prove, the cut
between build and run, and a tune that reports both stages."""

import time

import pytest
from tvm_ext.cost import RooflinePolicy, features
from tvm_ext.cost.code_arms import ARM, why_no_arm
from tvm_ext.cost.post_build import evaluate_built

from tvm_ext import kernels as K
from tvm_ext import measure
from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.built_code.machine_code import read_assembly
from tvm_ext.hardware.isa import fp32_peak_ceiling
from tvm_ext.hardware.target import lanes_for
from tvm_ext.kernel_tuner.builder import PersistentBuilder
from tvm_ext.kernel_tuner.progress import ProgressCallback
from tvm_ext.kernel_tuner.pruning import POST_BUILD_PRUNED, PruneStats, PruningSearch
from tvm_ext.records.logs import read_manifest

ms = tvm_api.ms
W = K.matmul(64, 64, 64)


def _naive():
    """No schedule at all: k innermost, a reduction LLVM may not vectorize without fast-math."""
    return tvm_api.Schedule(W.func)


def _vectorized(lanes=16):
    """The output row split by ``lanes`` and vectorized inside the reduction loop."""
    sch = tvm_api.Schedule(W.func)
    block = sch.get_sblock("C")
    i, j, k = sch.get_loops(block)
    j0, j1 = sch.split(j, [None, lanes])
    sch.reorder(i, j0, k, j1)
    sch.vectorize(j1)
    return sch


def _code(sch, host):
    return read_assembly(tvm_api.assembly(tvm_api.build(tvm_api.as_module(sch), host)))


# --- the reader, on assembly text ---------------------------------------------------------

ASM = """\
\t.type\tmain_compute_,@function
main_compute_:
\tvbroadcastss\t(%rdi), %zmm0
\tvfmadd231ps\t(%rsi){1to16}, %zmm1, %zmm2
\tvfmadd231ss\t%xmm3, %xmm4, %xmm5
\tvmovups\t%zmm2, (%rdx)
\tvmovups\t%zmm7, 64(%rsp)
\tvmovups\t(%rcx), %zmm6
\tcallq\tTVMBackendParallelLaunch@PLT
\tretq
"""


def test_reader_widths_classes_and_calls():
    code = read_assembly(ASM)
    assert code.fp_lanes == 16 and code.widest_register == "zmm"
    assert code.fma_only and code.fma == 2 and code.fp_arith == 2
    assert code.vector_loads == 3 and code.vector_stores == 2 and code.spills == 1
    assert code.calls == ("TVMBackendParallelLaunch@PLT",) and code.unknown_calls == ()
    assert code.functions == ("main_compute_",) and not code.dot
    # A scalar FMA is one lane, whatever register holds it; an add is no FMA.
    scalar = read_assembly("\tvfmadd231ss\t%xmm3, %xmm4, %xmm5\n\tvaddss\t%xmm1, %xmm2, %xmm3\n")
    assert scalar.fp_lanes == 1 and not scalar.fma_only
    assert read_assembly("\tvmulps\t%ymm1, %ymm2, %ymm3\n").fp_lanes == 8
    assert read_assembly("\tvaddps\t%xmm1, %xmm2, %xmm3\n").fp_lanes == 4
    # Moves, shuffles and logic do no arithmetic: they never widen the figure.
    assert read_assembly("\tvxorps\t%zmm0, %zmm0, %zmm0\n\tvmulss\t%xmm1, %xmm1, %xmm1\n")\
        .fp_lanes == 1  # fmt: skip


def test_reader_sees_what_stage_2_must_not_bound(host):
    feats = features(W.func, host)
    assert why_no_arm(feats, read_assembly("\tvfmadd231ps\t%zmm1, %zmm2, %zmm3\n")) is None
    dot = read_assembly("\tvdpbf16ps\t%zmm1, %zmm2, %zmm3\n\tvpdpbusd\t%zmm1, %zmm2, %zmm3\n")
    assert dot.dot == ("vdpbf16ps", "vpdpbusd") and "dot-product" in why_no_arm(feats, dot)
    libm = read_assembly("\tvmulss\t%xmm1, %xmm1, %xmm1\n\tcallq\texpf@PLT\n")
    assert libm.unknown_calls == ("expf@PLT",) and "expf" in why_no_arm(feats, libm)
    # An indirect call reaches a function whose address the module takes: TVM's runtime
    # pointers are fine, any other global the code refers to may be the target.
    runtime = "\tmovq\t__TVMBackendParallelLaunch@GOTPCREL(%rip), %rax\n\tcallq\t*(%rax)\n"
    assert read_assembly(runtime).unknown_calls == ()
    other = "\tmovq\texpf@GOTPCREL(%rip), %r15\n\tcallq\t*(%r15)\n"
    assert read_assembly(runtime + other).unknown_calls == ("*expf",)
    wide_int = read_assembly("\tvmulss\t%xmm1, %xmm1, %xmm1\n\tvpaddd\t%zmm1, %zmm2, %zmm3\n")
    assert wide_int.int_lanes == 16 and why_no_arm(feats, wide_int) is not None


# --- the reader, on built modules -----------------------------------------------------------


def test_built_scalar_reduction_and_explicit_vectors(host):
    naive = _code(_naive(), host)
    # k innermost: each output is a dependent chain LLVM may not vectorize without fast-math.
    assert naive.fp_lanes == 1 and naive.fma_only and naive.fma >= 1
    vec = _code(_vectorized(16), host)
    # 16 explicit fp32 lanes: one zmm on AVX-512, two ymm on an AVX2-only CPU.
    assert vec.fp_lanes == min(16, lanes_for(host, 32)) and vec.fma_only
    narrow = _code(_vectorized(4), host)
    assert narrow.fp_lanes == 4 and narrow.widest_register == "xmm"


def test_stage_2_is_above_stage_1_and_below_the_measured_time(host, machine):
    policy = RooflinePolicy()
    cases = {"naive": _naive(), "xmm": _vectorized(4), "16 lanes": _vectorized(16),
             "hand": S.schedule(W, host)}  # fmt: skip
    for name, sch in cases.items():
        stage1, stage2, code = evaluate_built(policy, sch, host, machine=machine, workload=W)
        assert stage2.lower_bound_s >= stage1.lower_bound_s, name
        assert set(stage1.arms) <= set(stage2.arms), name
        seconds = measure(sch, W, host, repeat=3, min_repeat_ms=10).seconds
        # No slack: the arm rests on no probe, and a busy host only makes a run slower.
        assert seconds >= stage2.lower_bound_s, (name, seconds, stage2)
        if name == "naive":  # LLVM left it scalar, stage 1 had to allow full width
            assert stage2.lower_bound_s > stage1.lower_bound_s, name
            # An arm only the built code shows binds: its width (``machine_code.compute``,
            # ``@1lanes``) or its scalar chain (``dependency@chain``: k steps at the FMA
            # latency; which of them is largest depends on the CPU's tables).
            assert stage2.binding not in stage1.arms, (name, stage2)
        if name in ("naive", "xmm"):  # (stage 1 knows TVM's own 4 lanes: the arms agree)
            # One core, FMAs only: the FLOPs at the ISA's fp32 ceiling for this width.
            assert code.fma_only
            ceiling = fp32_peak_ceiling(machine.cpu, 1, code.fp_lanes)
            assert stage2.arms[ARM] == pytest.approx(W.flops / ceiling)


def _scalar_matmul_vector_bias(vector_update: bool):
    """``D = A @ B + bias``, each block's rows over the cores (two parallel bodies): the
    multiply-adds with k innermost (a scalar chain LLVM may not vectorize), the bias add
    explicitly 16 lanes wide; ``vector_update``: the multiply-adds vectorized over 16 columns
    too."""
    te = tvm_api.te
    m, n, k = 128, 128, 64
    a = te.placeholder((m, k), "float32", name="A")
    b = te.placeholder((k, n), "float32", name="B")
    bias = te.placeholder((n,), "float32", name="bias")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((m, n), lambda i, j: c[i, j] + bias[j], name="D")
    sch = tvm_api.Schedule(te.create_prim_func([a, b, bias, d]))
    i, j = sch.get_loops(sch.get_sblock("D"))
    sch.parallel(i)
    sch.vectorize(sch.split(j, [None, 16])[1])
    i, j, kk = sch.get_loops(sch.get_sblock("C"))
    sch.parallel(i)
    if vector_update:
        j0, j1 = sch.split(j, [None, 16])
        sch.reorder(i, j0, kk, j1)
        sch.vectorize(j1)
    return sch, m * n * k


def test_the_chain_steps_issue_slots_bound_a_scalar_reduction_beside_wider_code(host, machine):
    """Binds (``compute@chain``): the module's widest arithmetic is the 16-lane bias add, so
    ``machine_code.compute`` must allow 16 lanes; the IR of the multiply-adds' own parallel
    body shows their chain stepping one lane at a time, each step its own FMA: ``m n k`` FMAs
    shared by the cores, at most ``FMA_PIPES`` a cycle each (all on FP pipes where the CPU is
    not in the tables). Must not add anything: the same multiply-adds vectorized over 16
    columns, where stage 1 already priced their width (at its hardware ceiling)."""
    from tvm_ext.cost.chain_arms import chain_step_arm

    from tvm_ext.hardware.isa import (
        FMA_PIPES,
        FP_PIPES,
        fp32_peak_ceiling,
        max_boost_hz,
        named,
    )

    policy = RooflinePolicy()
    sch, updates = _scalar_matmul_vector_bias(False)
    stage1, stage2, code = evaluate_built(policy, sch, host, machine=machine)
    assert code.fp_lanes == min(16, lanes_for(host, 32)) and code.chain_regions[0][0] == 1
    per_cycle = FMA_PIPES if named(machine.cpu) else FP_PIPES
    cores = features(sch, host).blocks[0].cores_used  # the multiply-adds' (C's init: same)
    expected = updates / cores / per_cycle / max_boost_hz(machine.cpu)
    assert stage2.arms["compute@chain"] == pytest.approx(expected)
    # The largest arm but the phases' sum (the bias add's own parallel body adds its time) is
    # one of the chain's: its issue slots, or its steps at the FMA latency where the CPU's
    # latency makes those longer (Zen 4: 4 cycles at 5.7 GHz against two FMA pipes).
    top = max((a for a in stage2.arms if not a.startswith("phases")), key=stage2.arms.get)
    assert top in ("compute@chain", "dependency@chain"), stage2
    assert stage2.lower_bound_s > stage1.lower_bound_s
    assert stage2.lower_bound_s >= stage2.arms["compute@chain"]
    seconds = measure(sch, None, host, reference=sch.mod["main"], repeat=3).min_seconds
    assert seconds >= stage2.lower_bound_s, (seconds, stage2)
    wide, _ = _scalar_matmul_vector_bias(True)
    stage1, stage2, code = evaluate_built(policy, wide, host, machine=machine)
    assert code.chain_add_lanes == 16  # the IR's adds (two 8-lane instructions on AVX2)
    arm = chain_step_arm(features(wide, host), code, machine.cpu)
    # Stage 1 counts the multiply-adds at this width, at the larger of the hardware's fp32
    # ceiling and the slackened probe (a server die's ceiling can sit below the latter); the
    # chain arm at the ceiling's clock.
    ceiling = fp32_peak_ceiling(machine.cpu, machine.cores, machine.vector_lanes)
    peak = max(ceiling, machine.peak("float32") * policy.slack)
    assert arm <= stage1.arms["compute"] * peak / ceiling * (1 + 1e-9)
    # Nothing added, but where the ceiling is the tighter fact than stage 1's probe.
    assert "compute@chain" not in stage2.arms or peak > ceiling


# --- the cut between build and run ----------------------------------------------------------


class ScriptedSearch:
    def __init__(self, batches):
        self.batches, self.notified = list(batches), []

    def generate_measure_candidates(self):
        return self.batches.pop(0) if self.batches else None

    def notify_runner_results(self, candidates, results):
        self.notified.append(list(results))

    def clone(self):
        return self


def test_builder_withholds_what_the_machine_code_rules_out(host, machine):
    policy = RooflinePolicy()
    naive, hand = _naive(), S.schedule(W, host)
    n1, n2, _ = evaluate_built(policy, naive, host, machine=machine, workload=W)
    _, h2, _ = evaluate_built(policy, hand, host, machine=machine, workload=W)
    incumbent = n2.lower_bound_s * 0.99  # above stage 1's bound of the naive one: stage 2 cuts
    assert n1.lower_bound_s < incumbent and h2.lower_bound_s < incumbent
    args = ms.arg_info.ArgInfo.from_prim_func(W.func)
    cands = [ms.search_strategy.MeasureCandidate(s, args) for s in (naive, hand)]
    stats = PruneStats(incumbent_s=incumbent, initial_cut_s=incumbent)
    inner = ScriptedSearch([cands])
    search = PruningSearch(inner, policy, host, machine, W, stats)
    batch = search.generate_measure_candidates()
    assert len(batch) == 2 and stats.dropped == 0
    builder = PersistentBuilder(workers=1)
    try:
        builder.attach(search.post_build)
        built = builder.build([ms.builder.BuilderInput(c.sch.mod, host) for c in batch])
    finally:
        builder.shutdown()
    assert built[0].artifact_path is None and built[0].error_msg == POST_BUILD_PRUNED
    assert built[1].error_msg is None and built[1].artifact_path
    results = [ms.runner.RunnerResult(None, POST_BUILD_PRUNED),
               ms.runner.RunnerResult([incumbent / 2], None)]  # fmt: skip
    search.notify_runner_results(batch, results)
    assert (stats.dropped, stats.dropped_stage1, stats.dropped_stage2) == (1, 0, 1)
    assert stats.withheld == 1 and stats.failed == 0 and stats.measured == 1
    assert stats.reviewed == 2
    (record,) = stats.dropped_records
    assert record["stage"] == 2 and record["register"] == "scalar"
    assert record["binding"] == n2.binding and n2.binding not in n1.arms  # a stage-2 arm
    assert record["bound_s"] == pytest.approx(n2.lower_bound_s)
    assert len(inner.notified[0]) == 2  # the inner search hears of both: its trials advance
    bar = ProgressCallback(2, W.flops, stats, time.perf_counter(), enabled=True)
    bar.record(results)
    assert "failed=0" in bar.bar.postfix and "dropped=1 (0+1)" in bar.bar.postfix
    bar.close()


def test_tiny_tune_reports_both_stages(tmp_path, host):
    from tvm_ext.kernel_tuner.tuner import tune

    result = tune(K.matmul(64, 64, 32), host, trials=12, batch=12, seed=3, log_dir=tmp_path,
                  progress=False, audit=True)  # fmt: skip
    st = result.stats
    # Stage 2 read the machine code of every candidate it was sent (audit: all were run).
    assert st["reviewed"] >= st["measured"] >= 1
    assert st["dropped"] == st["dropped_stage1"] + st["dropped_stage2"]
    assert st["dropped"] == len(st["dropped_records"])
    for record in st["dropped_records"]:
        assert record["stage"] in (1, 2) and record["bound_s"] >= record["incumbent_s"]
    # Audit: the dropped were measured too. No stage-2 bound is above a measured time, no
    # run beat its bound (violations) and none the cut dropped would have won (regrets).
    for bound, secs, binding, _ in st["records"]:
        if binding == ARM:
            assert secs >= bound
    assert st["violations"] == 0 and st["regrets"] == 0, st
    manifest = read_manifest(tmp_path / result.log_folder.split(str(tmp_path) + "/", 1)[1])
    assert manifest["trials"]["dropped_stage2"] == st["dropped_stage2"]
    assert len(manifest["dropped_candidates"]) == st["dropped"]
