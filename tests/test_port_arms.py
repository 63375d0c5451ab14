"""Stage 2's port arms: what each block of the built code asks of the core per FLOP it can do
(loads, bytes loaded, stores, bytes stored, vector-pipe instructions), counted loops read off
the machine code, the blocks an entry runs once, and the bound they give on built modules."""

import pytest
from tvm_ext.cost import RooflinePolicy, features
from tvm_ext.cost.code_arms import ARM, core_flops, port_arms
from tvm_ext.cost.post_build import evaluate_built

from tvm_ext import kernels as K
from tvm_ext import measure
from tvm_ext import schedules as S
from tvm_ext.base import tvm_api
from tvm_ext.built_code.asm_loops import groups, run_once, trip_count
from tvm_ext.built_code.asm_text import Block, basic_blocks, instruction
from tvm_ext.built_code.machine_blocks import RESOURCES, block_costs, block_demand
from tvm_ext.built_code.machine_code import read_assembly
from tvm_ext.hardware.isa import max_boost_hz, port_limits
from tvm_ext.hardware.target import lanes_for

LOADS, LOAD_BYTES, STORES, STORE_BYTES, VECTOR_OPS = range(len(RESOURCES))


def _instructions(text: str):
    return [instruction(line.strip()) for line in text.strip().splitlines()]


def _demand(text: str):
    cap, use, sign = block_demand(_instructions(text))
    return cap, dict(zip(RESOURCES, use)), sign


# --- one block's demand ------------------------------------------------------------------------


def test_a_gather_under_an_all_ones_mask_takes_a_load_slot_per_element():
    cap, use, _ = _demand("""
        kxnorb\t%k0, %k0, %k1
        vgatherqps\t(%r8,%zmm3,4), %ymm5 {%k1}
        vgatherqps\t(%r8,%zmm2,4), %ymm6 {%k1}
        vfmadd132ps\t-15360(%r15,%r13,8){1to16}, %zmm4, %zmm5
    """)
    # The first gather clears k1: the second one's mask is no longer known to be all ones.
    assert use["loads"] == 8 + 1 + 1 and cap == 32
    assert use["load_bytes"] == 0  # a broadcast memory operand reads 4 bytes, counted as none
    assert use["vector_ops"] == 1  # the FMA; gathers' pipes differ by core: none counted
    cap, use, _ = _demand("""
        vpcmpeqd\t%ymm2, %ymm2, %ymm2
        vgatherdps\t%ymm2, (%rax,%ymm1,4), %ymm0
        vmulps\t%ymm0, %ymm3, %ymm3
    """)
    assert use["loads"] == 8 and cap == 8  # AVX2: the mask is a vector register
    assert _demand("vscatterdps\t%zmm1, (%rax,%zmm2,4) {%k1}")[1]["stores"] == 1  # mask unknown
    byte_mask = "kxnorb\t%k0, %k0, %k1\nvgatherdps\t(%r8,%zmm3,4), %zmm5 {%k1}"
    assert _demand(byte_mask)[1]["loads"] == 8  # kxnorb sets 8 of the 16 lanes


def test_moves_idioms_and_widths():
    cap, use, _ = _demand("""
        vxorps\t%xmm4, %xmm4, %xmm4
        vmovaps\t%zmm1, %zmm2
        vmovups\t(%rdi), %zmm0
        vaddps\t64(%rdi), %zmm0, %zmm0
        vaddss\t(%rsi), %xmm1, %xmm1
        vmovups\t%zmm0, (%rdx)
        vmovups\t%zmm0, 64(%rdx) {%k1}
        vinsertf64x4\t$1, %ymm5, %zmm6, %zmm5
        vpermps\t%zmm1, %zmm2, %zmm3
    """)
    assert use["loads"] == 3 and use["load_bytes"] == 64 + 64  # the scalar add's 4: none
    assert use["stores"] == 2 and use["store_bytes"] == 64  # the masked store's: none
    # The adds and the permute; the zeroing idiom, the move and the insert take no pipe.
    assert use["vector_ops"] == 3
    assert cap == 16 + 1


def test_sign_logic_and_compares_count_as_capacity_general_register_sign_tricks_are_flagged():
    cap, _, sign = _demand("""
        vxorps\t.LCPI0_0(%rip), %zmm1, %zmm2
        vcmpltps\t%zmm1, %zmm2, %k1
    """)
    assert cap == 32 + 32 and not sign  # a negation, a max done as compare and blend
    assert _demand("xorl\t$-2147483648, %eax")[2]
    assert _demand("btcq\t$63, %rax")[2]
    assert not _demand("andl\t$127, %eax")[2]


# --- counted loops and the blocks that run once ------------------------------------------------


def _block(text: str, labels=()):
    return Block(tuple(labels), _instructions(text), "f")


LOOP = ".LBB0_3"


def _loop(tail: str):
    return _block("vfmadd231ps\t(%rsi), %zmm1, %zmm0\n" + tail, [LOOP])


@pytest.mark.parametrize(
    "init, tail, trips",
    [
        ("movq\t$-252, %rbx", "addq\t$4, %rbx\njne\t.LBB0_3", 63),
        ("movl\t$-252, %ebx", "addl\t$4, %ebx\njne\t.LBB0_3", 63),
        ("xorl\t%eax, %eax", "incq\t%rax\ncmpq\t$64, %rax\njne\t.LBB0_3", 64),
        ("xorl\t%eax, %eax", "addq\t$16, %rax\ncmpq\t$100, %rax\njb\t.LBB0_3", 7),
        ("movl\t$10, %ecx", "decl\t%ecx\njne\t.LBB0_3", 10),
        # movl zero-extends: a 64-bit count up from 2^32 - 252 does not stop at 63
        ("movl\t$-252, %ebx", "addq\t$4, %rbx\njne\t.LBB0_3", None),
        ("movq\t%rdi, %rbx", "addq\t$4, %rbx\njne\t.LBB0_3", None),  # no constant start
        ("movq\t$-252, %rbx", "addq\t$4, %rbx\naddq\t$4, %rbx\njne\t.LBB0_3", None),  # two steps
        ("movq\t$-252, %rbx", "callq\tf@PLT\naddq\t$4, %rbx\njne\t.LBB0_3", None),  # a call
        ("movq\t$-252, %rbx", "addq\t$4, %rbx\njne\t.LBB0_9", None),  # not its own label
        ("movq\t$-250, %rbx", "addq\t$4, %rbx\njne\t.LBB0_3", None),  # never exactly zero
    ],
)
def test_trip_count(init, tail, trips):
    assert trip_count(_loop(tail), _block(init)) == trips


KERNEL = """\
\t.type\tmain_compute_,@function
main_compute_:
\tvbroadcastss\t(%rsi), %zmm2
\tmovq\t$-252, %rbx
\tvfmadd213ps\t%zmm0, %zmm1, %zmm2
.Ltmp7:
.LBB0_3:
\tvmovss\t(%rcx), %xmm3
\tvinsertps\t$16, 256(%rcx), %xmm3, %xmm3
\tvinsertps\t$32, 512(%rcx), %xmm3, %xmm3
\tvinsertps\t$48, 768(%rcx), %xmm3, %xmm3
\tvfmadd231ps\t(%r14){1to4}, %xmm3, %xmm2
\taddq\t$4, %rbx
\tjne\t.LBB0_3
\tvmovups\t%xmm2, (%rdx)
\tretq
\t.section\t.debug_loc,"",@progbits
\t.quad\t.Ltmp7-.Lfunc_begin0
"""
ENTRY = """\
\t.type\t__tvm_ffi_main,@function
__tvm_ffi_main:
\tcallq\tmain_compute_
\tretq
"""
CHECKING_ENTRY = """\
\t.type\t__tvm_ffi_main,@function
__tvm_ffi_main:
\tvpxor\t.LCPI0_1(%rip), %ymm0, %ymm0
\tvptest\t%ymm0, %ymm0
\tjne\t.LBB0_9
\tcallq\tmain_compute_
.LBB0_9:
\tretq
"""


def test_a_counted_loop_is_priced_with_the_block_that_enters_it_and_the_one_it_exits_to():
    text = ENTRY + KERNEL
    blocks, refs = basic_blocks(text)
    kernel = [b.labels for b in blocks if b.function == "main_compute_"]
    assert kernel == [("main_compute_",), (".LBB0_3",), ()]  # .Ltmp7 (debug only): no block
    together = [g for g in groups(blocks, refs) if len(g) > 1]
    assert [[(b.labels, n) for b, n in g] for g in together] == [
        [(("main_compute_",), 1), ((".LBB0_3",), 63), ((), 1)]
    ]
    assert not any(g == [(blocks[2], 1)] for g in groups(blocks, refs))  # runs only from there
    # The entering block of one FMA, alone, would give 1 load per 32 FLOPs; the loop 5 per 8.
    loads, cap = 1 + 63 * 5, 32 + 63 * 8
    assert block_costs(text).per_flop[LOADS] == pytest.approx(loads / cap)
    # A second way into the loop: it is also a group alone, and the exit block stays apart.
    jumped = ENTRY.replace("\tretq\n", "\tjmp\t.LBB0_3\n") + KERNEL
    blocks, refs = basic_blocks(jumped)
    alone = sorted(g[0][0].labels for g in groups(blocks, refs) if len(g) == 1)
    assert alone == [(), (".LBB0_3",), ("__tvm_ffi_main",)]  # the exit, the loop, the entry


def test_the_blocks_an_entry_runs_once_are_set_apart():
    text = CHECKING_ENTRY + KERNEL
    blocks, _ = basic_blocks(text)
    once = run_once(blocks, text)
    assert {blocks[i].function for i in once} == {"__tvm_ffi_main"}  # main_compute_ is called
    costs = block_costs(text)
    assert costs.once_cap == 16  # the dtype check's xor: 256 bits of 16-bit lanes
    assert costs.per_flop == block_costs(ENTRY + KERNEL).per_flop  # it sets no ratio
    looped = CHECKING_ENTRY.replace("__tvm_ffi_main:\n", "__tvm_ffi_main:\n.LBB0_1:\n")
    looped = looped.replace("\tretq\n", "\tjmp\t.LBB0_1\n")
    assert block_costs(looped + KERNEL).once_cap == 0  # on a cycle: it may run many times


def test_a_local_parallel_body_is_its_own_function_and_data_holds_no_blocks():
    """TVM names its parallel bodies with local labels (``.L__tvm_parallel_lambda``): one
    declared a function by ``.type`` is one, so its straight-line code is not the entry's
    (which runs once per call: the body runs once per task of every launch)."""
    text = """\
\t.section\t.rodata.cst4,"aM",@progbits,4
.LCPI0_0:
\t.long\t0x80000000
\t.text
\t.type\t__tvm_ffi_main,@function
__tvm_ffi_main:
\tvxorps\t.LCPI0_0(%rip), %xmm0, %xmm1
\tleaq\t.L__tvm_parallel_lambda(%rip), %rdi
\tcallq\tTVMBackendParallelLaunch@PLT
\tretq
\t.type\t.L__tvm_parallel_lambda,@function
.L__tvm_parallel_lambda:
\tvmovups\t(%rsi), %zmm1
\tvfmadd231ps\t(%rdx), %zmm1, %zmm2
\tvmovups\t%zmm2, (%rcx)
\tretq
"""
    blocks, _ = basic_blocks(text)
    functions = [(b.function, len(b.code)) for b in blocks]
    assert functions == [("__tvm_ffi_main", 4), (".L__tvm_parallel_lambda", 4)]
    costs = block_costs(text)
    assert costs.once_cap == 8  # the entry's xor (16-bit lanes); the body stays in the ratios
    assert costs.per_flop[LOADS] == pytest.approx(2 / 32)


# --- the arms on built modules -----------------------------------------------------------------

W = K.matmul(64, 64, 64)


def _columns(lanes=16):
    """Vectorized down a column of A (stride K): the vector is assembled element by element
    (a gather, or a load and an insert per element) for every FMA."""
    sch = tvm_api.Schedule(W.func)
    i, j, k = sch.get_loops(sch.get_sblock("C"))
    i0, i1 = sch.split(i, [None, lanes])
    sch.reorder(i0, j, k, i1)
    sch.vectorize(i1)
    return sch


def test_the_loads_arm_binds_a_column_gather_and_holds(host, machine):
    stage1, stage2, code = evaluate_built(RooflinePolicy(), _columns(), host, machine=machine,
                                          workload=W)  # fmt: skip
    arms = port_arms(features(_columns(), host, W), code, machine.cpu)
    seconds = measure(_columns(), W, host, repeat=3).seconds
    assert seconds >= stage2.lower_bound_s, (seconds, stage2)  # no slack: no probe in it
    if lanes_for(host, 32) < 16:
        # AVX2: LLVM assembles the column with vinsertps and peels the reduction's first
        # step (2 FMAs on one broadcast load); the arm takes the least loads per FLOP of any
        # loop group, so that block's, and stays below the FMAs' arm (weaker, still safe).
        assert arms["machine_code.loads"] > 0 and stage2.binding == "compute", stage2
        return
    assert stage2.binding == "machine_code.loads", stage2
    assert arms["machine_code.loads"] > 2 * stage2.arms[ARM] > 0
    assert stage2.lower_bound_s > stage1.lower_bound_s
    # At least one load per element of every vector multiplied, on one core.
    per_flop = code.per_flop[LOADS]
    assert per_flop >= 0.5 - 1e-9
    work = core_flops(features(_columns(), host, W)) - code.once_cap
    limit = port_limits(machine.cpu)[LOADS]
    assert arms["machine_code.loads"] == pytest.approx(
        per_flop * work / (limit * max_boost_hz(machine.cpu)))  # fmt: skip


def test_the_port_arms_do_not_bind_a_register_tiled_matmul(host, machine):
    sch = S.schedule(W, host)
    _, stage2, code = evaluate_built(RooflinePolicy(), sch, host, machine=machine, workload=W)
    arms = {k: v for k, v in stage2.arms.items() if k.startswith("machine_code.")}
    # The loads arm abstains where some loop group of the built code runs FMAs on registers
    # alone (AVX2's 64 x 64 x 64 tiles: no load per FLOP to count).
    assert ARM in arms and (lanes_for(host, 32) < 16 or "machine_code.loads" in arms)
    assert max(v for k, v in arms.items() if k != ARM) < arms[ARM]
    assert not stage2.binding.startswith("machine_code.") or stage2.binding == ARM
    seconds = measure(sch, W, host, repeat=3).seconds
    assert seconds >= stage2.lower_bound_s, (seconds, stage2)


def test_the_port_arms_abstain_where_their_premises_fail(host):
    feats = features(_columns(), host, W)
    assert port_arms(feats, read_assembly(ENTRY + KERNEL), "znver5")
    sign = read_assembly(ENTRY.replace("\tretq", "\txorl\t$-2147483648, %eax\n\tretq") + KERNEL)
    assert sign.gpr_sign and port_arms(feats, sign, "znver5") == {}
    libm = read_assembly(ENTRY.replace("\tretq", "\tcallq\texpf@PLT\n\tretq") + KERNEL)
    assert port_arms(feats, libm, "znver5") == {}
    # A CPU the tables do not name may be a later core with wider ports.
    assert port_limits("some-future-cpu") == tuple(2 * x for x in port_limits("znver5"))
