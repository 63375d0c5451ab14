"""Stage 2's chain width: how many outputs one step of a reduction chain carries in the built
code, read off the optimized LLVM IR (``tvm_ext.built_code.llvm_ir`` reads it,
``tvm_ext.built_code.ir_chains`` finds the chains), and the dependency arm it narrows
(cost/chain_arms.py: ``dependency@chain``)."""

import numpy as np
from tvm_ext.cost import RooflinePolicy, features
from tvm_ext.cost.chain_arms import chain_widths
from tvm_ext.cost.post_build import evaluate_built

from tvm_ext import kernels as K
from tvm_ext import measure
from tvm_ext.base import tvm_api
from tvm_ext.built_code.ir_chains import Chains, chain_facts
from tvm_ext.built_code.llvm_ir import functions
from tvm_ext.built_code.machine_code import CodeFacts, read_assembly, read_module

# --- the reader, on IR text ---------------------------------------------------------------

SCALAR_SUM = """\
define private i32 @__tvm_parallel_lambda(i32 %task_id, ptr readonly captures(none) %0) {
entry:
  %X = load ptr, ptr %0, align 8
  %g = getelementptr inbounds nuw i8, ptr %0, i64 8
  %Y = load ptr, ptr %g, align 8
  br label %body
body:
  %acc = phi float [ 0.000000e+00, %entry ], [ %next, %body ]
  %i = phi i64 [ 0, %entry ], [ %i.next, %body ]
  %p = getelementptr inbounds float, ptr %X, i64 %i
  %x = load float, ptr %p, align 4, !tbaa !5
  %next = fadd float %acc, %x, !dbg !7
  %i.next = add nuw nsw i64 %i, 1
  %done = icmp eq i64 %i.next, 1024
  br i1 %done, label %exit, label %body
exit:
  store float %next, ptr %Y, align 4
  ; the normalize step: wide, but it reads inputs only and writes a buffer nothing reads back
  %v = load <16 x float>, ptr %X, align 64
  %w = call <16 x float> @llvm.fmuladd.v16f32(<16 x float> %v, <16 x float> %v, <16 x float> %v)
  %o = getelementptr inbounds nuw i8, ptr %0, i64 16
  %Z = load ptr, ptr %o, align 8
  store <16 x float> %w, ptr %Z, align 64
  ret i32 0
}
"""


def test_a_register_chain_counts_its_own_width_not_the_widest_operation():
    facts = chain_facts(SCALAR_SUM)
    assert facts.add_lanes == 1 and facts.max_lanes == 0
    assert facts.unfused and not facts.reassociates
    # The same chain vectorized over 16 outputs: 16 lanes a step.
    wide = SCALAR_SUM.replace("phi float [ 0.000000e+00,", "phi <16 x float> [ zeroinitializer,")
    wide = wide.replace("fadd float %acc, %x", "fadd <16 x float> %acc, %x")
    assert chain_facts(wide).add_lanes == 16
    # A reassociating step voids the chain facts.
    assert chain_facts(SCALAR_SUM.replace("fadd float", "fadd reassoc float")).reassociates


def test_closure_fields_are_told_apart_and_chains_named_by_their_buffer():
    """TVM passes a parallel body its buffers in a closure struct: ``getelementptr i8, ptr
    %0, i64 8`` and so on. Fields at different offsets are different buffers: the wide
    normalize step reading another field (offset 24) carries no chain (it did when the offsets
    were not read: every field but the first aliased every other). The chain is named by the
    buffer it is stored to (the closure load's name); one never stored counts under "?"."""
    other = SCALAR_SUM.replace(
        "%v = load <16 x float>, ptr %X, align 64",
        "%wf = getelementptr inbounds nuw i8, ptr %0, i64 24\n  %W = load ptr, ptr %wf, align 8"
        "\n  %v = load <16 x float>, ptr %W, align 64",
    )
    facts = chain_facts(other)
    assert facts.add_lanes == 1
    # (no launch order here: the body's facts are the module's "serial" ones)
    assert facts.serial_buffers == (("Y", 1, 0),)
    kept = other.replace("store float %next, ptr %Y, align 4", "%use = fmul float %next, %next")
    assert chain_facts(kept).serial_buffers == (("?", 1, 0),)


MEMORY_CHAIN = """\
define internal fastcc i32 @main_compute_(ptr noalias align 64 %A, ptr noalias align 64 %C) {
entry:
  br label %body
body:
  %k = phi i64 [ 0, %entry ], [ %k.next, %body ]
  %c = load <8 x float>, ptr %C, align 32
  %pa = getelementptr inbounds float, ptr %A, i64 %k
  %a = load <8 x float>, ptr %pa, align 32
  %s = fadd <8 x float> %c, %a
  store <8 x float> %s, ptr %C, align 32
  %k.next = add nuw nsw i64 %k, 1
  %done = icmp eq i64 %k.next, 64
  br i1 %done, label %exit, label %body
exit:
  ret i32 0
}
"""


def test_an_accumulator_kept_in_memory_is_a_chain_and_other_buffers_are_not():
    # C is loaded, added to and stored back: the step carries 8 outputs.
    assert chain_facts(MEMORY_CHAIN).add_lanes == 8
    # The sum stored to a buffer nothing reads: no chain through memory.
    apart = MEMORY_CHAIN.replace("%c = load <8 x float>, ptr %C", "%c = load <8 x float>, ptr %pa")
    assert chain_facts(apart).add_lanes == 0
    # A pointer the reader cannot name may alias the accumulator: counted.
    unknown = apart.replace("ptr %pa, align 32\n  %s", "ptr %q, align 32\n  %s")
    unknown = unknown.replace("%a = load", "%q = inttoptr i64 %k to ptr\n  %a = load")
    assert chain_facts(unknown).add_lanes == 8


MAX_AND_LAUNCH = """\
define internal fastcc i32 @main_compute_(ptr %A) {
entry:
  %r1 = call i32 %launch(ptr nonnull @__tvm_parallel_lambda.7, ptr %A, i32 0)
  %r2 = call i32 %launch(ptr nonnull @__tvm_parallel_lambda, ptr %A, i32 0)
  ret i32 0
}

define private i32 @__tvm_parallel_lambda(i32 %task_id, ptr %0) {
entry:
  br label %body
body:
  %m = phi float [ 0xC7EFFFFFE0000000, %entry ], [ %m.next, %body ]
  %x = load float, ptr %0, align 4
  %gt = fcmp ogt float %m, %x
  %m.next = select i1 %gt, float %m, float %x
  br i1 %gt, label %exit, label %body
exit:
  ret i32 0
}

define private i32 @__tvm_parallel_lambda.7(i32 %task_id, ptr %0) {
entry:
  br label %body
body:
  %acc = phi <4 x float> [ zeroinitializer, %entry ], [ %next, %body ]
  %x = load <4 x float>, ptr %0, align 16
  %next = call <4 x float> @llvm.fmuladd.v4f32(<4 x float> %x, <4 x float> %x, <4 x float> %acc)
  %d = extractelement <4 x float> %next, i64 0
  %z = fcmp oeq float %d, 0.000000e+00
  br i1 %z, label %exit, label %body
exit:
  ret i32 0
}
"""


def test_max_chains_and_the_launch_order_of_parallel_bodies():
    facts = chain_facts(MAX_AND_LAUNCH)
    assert (facts.add_lanes, facts.max_lanes) == (4, 1)
    assert not facts.unfused  # the only add-class step is a multiply-add
    # Parallel bodies in the order the serial code launches them (.7 first), then the serial
    # code's own widths.
    assert facts.regions == ((4, 0), (0, 1)) and facts.serial == (0, 0)


TWO_ACCUMULATORS = """\
define internal fastcc i32 @main_compute_(ptr noalias %A, ptr noalias %C) {
entry:
  br label %body
body:
  %a0 = phi float [ 0.000000e+00, %entry ], [ %n0, %body ]
  %a1 = phi float [ 0.000000e+00, %entry ], [ %n1, %body ]
  %k = phi i64 [ 0, %entry ], [ %k.next, %body ]
  %p = getelementptr inbounds float, ptr %A, i64 %k
  %x = load float, ptr %p, align 4
  %n0 = fadd float %a0, %x
  %n1 = fadd float %a1, %x
  %k.next = add nuw nsw i64 %k, 1
  %done = icmp eq i64 %k.next, 64
  br i1 %done, label %exit, label %body
exit:
  store float %n0, ptr %C, align 4
  ret i32 0
}
"""

STRAIGHT_THROUGH_MEMORY = """\
define internal fastcc i32 @main_compute_(ptr noalias %A, ptr noalias %C) {
entry:
  %c = load float, ptr %C, align 4
  %x = load float, ptr %A, align 4
  %s1 = fadd float %c, %x
  %s2 = fadd float %s1, %x
  %s3 = fadd float %s2, %x
  store float %s3, ptr %C, align 4
  ret i32 0
}
"""


def test_one_accumulator_at_a_time():
    # One scalar accumulator around its loop; one straight chain through memory.
    assert Chains(functions(SCALAR_SUM)["__tvm_parallel_lambda"]).one_at_a_time("add")
    facts = chain_facts(SCALAR_SUM)  # no serial code launches it: the order is unknown
    assert facts.single == () and facts.regions == ()
    # ... so the "serial" facts are the whole module's, and claim nothing about interleaving
    assert facts.serial == (1, 0) and facts.serial_single == (False, False)
    assert chain_facts(STRAIGHT_THROUGH_MEMORY).serial_single == (True, False)
    # Two accumulators in one loop: their chains run side by side.
    assert chain_facts(TWO_ACCUMULATORS).serial_single == (False, False)
    # Two chains interleaved in one straight-line block.
    both = STRAIGHT_THROUGH_MEMORY.replace("%s2 = fadd float %s1, %x", "%s2 = fadd float %c, %x")
    assert chain_facts(both).serial_single == (False, False)
    # Two accumulators stored to two buffers are two blocks' chains (a sum and a sum of
    # squares in one loop): each runs one accumulator at a time. Stored to one buffer, they
    # may be two outputs of one block side by side.
    store_n1 = "  store float %n1, ptr %A, align 4\n  ret i32 0"
    apart = TWO_ACCUMULATORS.replace("  ret i32 0", store_n1)
    assert chain_facts(apart).serial_single == (True, False)
    together = apart.replace("store float %n1, ptr %A", "store float %n1, ptr %C")
    assert chain_facts(together).serial_single == (False, False)


def test_a_chain_that_stayed_a_loop():
    assert Chains(functions(SCALAR_SUM)["__tvm_parallel_lambda"]).looped("add")
    assert not Chains(functions(STRAIGHT_THROUGH_MEMORY)["main_compute_"]).looped("add")
    assert chain_facts(STRAIGHT_THROUGH_MEMORY).serial_looped == (False, False)


def _row_sum_per_column(k: int, unroll: bool):
    """``B[i, j] = A[i, j] / sum_r A[i, r]`` with the row sum recomputed for each j (8 x 64
    outputs), the sum's loop unrolled by TVM or left to LLVM."""
    from tvm import te

    a = te.placeholder((8, k), "float32", name="A")
    r = te.reduce_axis((0, k), name="r")
    total = te.compute((8,), lambda i: te.sum(a[i, r], axis=r), name="S")
    b = te.compute((8, 64), lambda i, j: a[i, j] / total[i], name="B")
    func = te.create_prim_func([a, b])
    sch = tvm_api.Schedule(func)
    sch.compute_at(sch.get_sblock("S"), sch.get_loops(sch.get_sblock("B"))[1])
    if unroll:
        sch.unroll(sch.get_loops(sch.get_sblock("S"))[-1])
    return func, sch


def test_a_recomputed_chain_is_charged_again_only_while_it_stays_a_loop(host, machine):
    """Stage 1 charges a recomputed chain inside the unroll reach once (it may be unrolled
    and hoisted). The built code says: a loop of 512 adds that stayed a loop runs again for
    each of the 64 columns; one TVM unrolled is straight-line code, charged once."""
    policy = RooflinePolicy()
    for unroll in (False, True):
        func, sch = _row_sum_per_column(512, unroll)
        feats = features(sch, host)
        (s_block,) = [b for b in feats.blocks if b.name == "S"]
        assert s_block.chain_repeats == 1 and s_block.loop_repeats == 64
        stage1, stage2, code = evaluate_built(policy, sch, host, machine=machine)
        (chain,) = [ch for b, ch in zip(feats.blocks, chain_widths(feats, code)) if b.name == "S"]
        assert chain.looped is (not unroll), (unroll, chain)
        if not unroll:
            assert stage2.arms["dependency@chain"] > 8 * stage1.arms["dependency"]
        seconds = measure(sch, None, host, reference=func, repeat=3).min_seconds
        assert seconds >= stage2.lower_bound_s, (unroll, seconds, stage2)


# --- per block, on built modules ----------------------------------------------------------


ROWS, COLS = 128, 1024


def _softmax(rows_vectorized: bool):
    """Softmax ROWS x COLS, each block in a parallel loop over rows of its own (a parallel body
    function each). With ``rows_vectorized`` the max and sum run 16 rows per vector, the
    reduction loop outside: each step of their chains carries 16 rows."""
    w = K.softmax(ROWS, COLS)
    sch = tvm_api.Schedule(w.func)
    for name in ("row_max", "exp", "row_sum", "softmax"):
        block = sch.get_sblock(name)
        loops = sch.get_loops(block)
        if rows_vectorized and name in ("row_max", "row_sum"):
            i0, i1 = sch.split(loops[0], [None, 16])
            sch.reorder(i0, loops[1], i1)
            sch.vectorize(i1)
            sch.parallel(i0)
        else:
            sch.parallel(loops[0])
    return w, sch


def _blocks(w):
    return [b.name for b in features(w.func, "llvm").blocks]


def test_softmax_chains_are_scalar_in_the_built_code_and_the_arm_binds(host, machine):
    w, sch = _softmax(rows_vectorized=False)
    # The suite's own softmax names its blocks so: a rename is this test's to follow, not a
    # reason to skip it.
    assert {"row_max", "row_sum"} <= set(_blocks(w)), _blocks(w)
    policy = RooflinePolicy()
    stage1, stage2, code = evaluate_built(policy, sch, host, machine=machine, workload=w)
    feats = features(sch, host, w)
    widths = dict(zip([b.name for b in feats.blocks], chain_widths(feats, code)))
    # Scalar chains, each row's run through its own loop: one accumulator at a time.
    assert widths["row_max"][:2] == (1, True) and widths["row_sum"][:2] == (1, True)
    # Stage 1 had to let a step carry 16 rows (the 1024-step row fits LLVM's unroller, so a
    # spatial loop around it could be vectorized): the code's scalar chains bound 2x higher.
    assert stage2.arms["dependency@chain"] > 2 * stage1.arms["dependency"]
    # The largest arm but the phases' sum (row max, row sum and the rest run one after the
    # other, each in its own parallel body: their arms add).
    top = max((a for a in stage2.arms if not a.startswith("phases")), key=stage2.arms.get)
    assert top == "dependency@chain" and code.chain_unfused
    assert stage2.binding == "phases@code"
    assert stage2.arms["phases@code"] > stage2.arms["dependency@chain"]
    # The bound holds on this CPU, no slack: a busy host only makes the run slower.
    seconds = measure(sch, w, host, repeat=3, min_repeat_ms=10).min_seconds
    assert seconds >= stage2.lower_bound_s, (seconds, stage2)


def test_a_chain_vectorized_over_rows_is_not_narrowed(host, machine):
    w, sch = _softmax(rows_vectorized=True)
    # The suite's own softmax names its blocks so: a rename is this test's to follow, not a
    # reason to skip it.
    assert {"row_max", "row_sum"} <= set(_blocks(w)), _blocks(w)
    stage1, stage2, code = evaluate_built(RooflinePolicy(), sch, host, machine=machine,
                                          workload=w)  # fmt: skip
    feats = features(sch, host, w)
    widths = {b.name: chain.lanes for b, chain in zip(feats.blocks, chain_widths(feats, code))}
    assert widths["row_max"] >= 8 and widths["row_sum"] >= 8
    seconds = measure(sch, w, host, repeat=3, min_repeat_ms=10).min_seconds
    assert seconds >= stage2.lower_bound_s


def test_a_block_reads_the_steps_stored_to_its_own_buffer():
    """In one parallel body, a row sum's scalar chain and a 16-lane chain of its rfactor
    partials (``row_sum.rf``, numbered ``row_sum.rf1`` by LLVM): each block gets its own
    buffer's width. A step whose buffer is not named, or whose name could be two blocks'
    buffers, may be any block's: it counts for each."""
    from dataclasses import replace as _replace

    from tvm_ext.cost.features import BlockFacts

    def block(name, output):
        return BlockFacts(name, 1024, 1, "float32", 1.0, 1, 1, 16, 1, 1024, 1, chain_op="add",
                          region=0, output=output, segment_length=1024)  # fmt: skip

    feats = features(K.matmul(4, 4, 4).func, "llvm")
    feats = _replace(feats, blocks=(block("rf", "row_sum.rf"), block("sum", "row_sum")))
    code = _replace(read_assembly(""), fp_lanes=16, chain_add_lanes=16, chain_max_lanes=0,
                    chain_regions=((16, 0),), chain_single=((True, False),),
                    chain_looped=((True, False),),
                    chain_buffers=((("row_sum", 1, 0), ("row_sum.rf1", 16, 0)),))  # fmt: skip
    assert [w.lanes for w in chain_widths(feats, code)] == [16, 1]
    # An unnamed vector step may be either block's, and may have been joined with another
    # into the code's widest instruction (16 lanes here): both blocks read 16.
    unnamed = _replace(code, chain_buffers=((("row_sum", 1, 0), ("?", 4, 0)),))
    assert [w.lanes for w in chain_widths(feats, unnamed)] == [16, 16]
    # "row_sum1" could be LLVM's numbering of "row_sum" or a buffer of that name: both count.
    twice = _replace(feats, blocks=feats.blocks + (block("other", "row_sum1"),))
    both = _replace(code, chain_buffers=((("row_sum1", 1, 0), ("row_sum.rf", 16, 0)),))
    assert [w.lanes for w in chain_widths(twice, both)] == [16, 1, 1]
    apart = _replace(code, chain_buffers=((("row_sum1", 1, 0), ("row_sum", 0, 0)),))
    assert [w.lanes for w in chain_widths(twice, apart)][1:] == [1, 1]


def test_code_facts_round_trip_with_chain_widths():
    code = read_module("\tvaddss\t%xmm1, %xmm2, %xmm3\n", MAX_AND_LAUNCH)
    assert code.chain_regions == ((4, 0), (0, 1)) and code.chain_max_lanes == 1
    back = CodeFacts.from_dict(code.to_dict())
    assert back == code and isinstance(back.chain_regions[0], tuple)
    # Facts written before the IR was read (older logs) load with the chain widths unknown.
    old = {k: v for k, v in code.to_dict().items() if not k.startswith("chain_")}
    assert CodeFacts.from_dict(old).chain_add_lanes == -1
    unread = chain_widths(features(K.softmax(8, 16).func, "llvm"), CodeFacts.from_dict(old))
    assert not any(chain.lanes or chain.single or chain.looped for chain in unread)
    assert np.isfinite(back.fp_lanes)


def test_a_reader_failure_abstains_and_never_fails_the_build(monkeypatch, caplog):
    import tvm_ext.built_code.machine_code as mc

    def broken(text):
        raise IndexError("an IR construct the reader trips on")

    monkeypatch.setattr(mc, "chain_facts", broken)
    code = mc.read_module("\tvaddss\t%xmm1, %xmm2, %xmm3\n", MAX_AND_LAUNCH)
    assert code.fp_lanes == 1 and code.chain_add_lanes == -1  # assembly facts kept
    assert "chain facts not read (IndexError" in caplog.text


# The same function head and entry block as SCALAR_SUM; a loop of two 2-lane steps.
TWO_LANE_CHAIN = (
    SCALAR_SUM[: SCALAR_SUM.index("body:\n")]
    + """\
body:
  %acc = phi <2 x float> [ zeroinitializer, %entry ], [ %s2, %body ]
  %i = phi i64 [ 0, %entry ], [ %i.next, %body ]
  %p = getelementptr inbounds float, ptr %X, i64 %i
  %x = load <2 x float>, ptr %p, align 8
  %s1 = call <2 x float> @llvm.fmuladd.v2f32(<2 x float> %x, <2 x float> %x, <2 x float> %acc)
  %s2 = call <2 x float> @llvm.fmuladd.v2f32(<2 x float> %x, <2 x float> %x, <2 x float> %s1)
  %i.next = add nuw nsw i64 %i, 2
  %done = icmp eq i64 %i.next, 1024
  br i1 %done, label %exit, label %body
exit:
  store <2 x float> %s2, ptr %Y, align 8
  ret i32 0
}
"""
)


def test_vector_steps_keep_their_width_unless_the_backend_could_join_two():
    """Instruction selection joins two vector operations into one wider instruction only
    within a basic block and only when neither needs the other's result: one chain of 2-lane
    steps stays 2 lanes a step even where the code's widest instruction is wider; a second,
    independent chain in the same block (two accumulators side by side) may be joined with
    it, and the step is then read at the code's widest instruction (the violation the hunt
    found: 8-lane pairs run as 16-lane zmm FMAs)."""
    (fn,) = functions(TWO_LANE_CHAIN).values()
    assert not Chains(fn).joinable()
    facts = chain_facts(TWO_LANE_CHAIN)
    # (no serial code launches it: the body counts as serial code)
    assert facts.serial_joinable is False and facts.add_lanes == 2
    second = TWO_LANE_CHAIN.replace(
        "%s2 = call <2 x float> @llvm.fmuladd.v2f32(<2 x float> %x, <2 x float> %x, "
        "<2 x float> %s1)",
        "%s2 = call <2 x float> @llvm.fmuladd.v2f32(<2 x float> %x, <2 x float> %x, "
        "<2 x float> %acc)",
    )
    assert second != TWO_LANE_CHAIN
    (fn,) = functions(second).values()
    assert Chains(fn).joinable() and chain_facts(second).serial_joinable
    # Scalar operations are never joined (the backend has no SLP).
    scalar = TWO_LANE_CHAIN.replace("<2 x float>", "float").replace("v2f32", "f32")
    scalar = scalar.replace("%s1)", "%acc)")  # two independent scalar steps
    (fn,) = functions(scalar).values()
    assert not Chains(fn).joinable()

    # Through chain_widths: a matmul's update chain read at 2 lanes when nothing can be
    # joined, at the code's widest (16) when something can.
    w = K.matmul(8, 8, 8)
    c = features(w.func, "llvm")
    base = CodeFacts(fp_lanes=16, fma_only=True, dot=(), int_lanes=0, calls=(),
                     unknown_calls=(), functions=(), fma=1, fp_arith=1, vector_loads=0,
                     vector_stores=0, spills=0, chain_add_lanes=2, chain_max_lanes=0,
                     chain_serial=(2, 0))  # fmt: skip
    update = [i for i, b in enumerate(c.blocks) if b.chain_op][0]
    alone = base.__class__(**{**base.__dict__, "chain_serial_joinable": False})
    assert chain_widths(c, alone)[update].lanes == 2
    assert chain_widths(c, base)[update].lanes == 16  # joinable (the default: unknown)
