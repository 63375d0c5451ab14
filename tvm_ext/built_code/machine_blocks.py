"""What the blocks of a built kernel's machine code ask of the core, per FLOP they can do.

A stage-2 bound that counts only arithmetic (``machine_code.compute``) cannot see a hot loop
that needs a load for every FMA, or gathers a column element by element. For every basic block
``B`` (:mod:`tvm_ext.built_code.asm_text`: entered only at its top, left only at its bottom, so each
time it runs all of its instructions run) :func:`block_demand` counts

- ``cap``: the most FLOPs one run of ``B`` can do: every floating-point arithmetic instruction
  (``vfmadd``/``vmulps``/``vaddss``/``vmaxps``/x87 ``fadd``...) at its lanes, twice for an FMA
  or a dot product (``vdpps``); every logic instruction (a FLOP the TIR counts may be done as
  a sign operation: ``x * -1`` by ``xor``, ``fabs`` by ``and``) and every compare (a ``max``
  may be done as a compare and a blend) at as many lanes as its register has 16-bit elements.
  Moves, shuffles, blends, conversions do no counted FLOP (a select or a cast is free in the
  count: :mod:`tvm_ext.cost.walk`);
- ``loads``: load slots: one per instruction that reads memory (a memory source folded into
  an arithmetic instruction is one), one per element of a gather whose mask the block set to
  all ones before it (under any other mask: one);
- ``load_bytes``: bytes read by unmasked full-width vector loads and packed arithmetic memory
  sources, whose width the register names (any other load: 0);
- ``stores`` and ``store_bytes``: the same for instructions that write memory (a scatter's
  elements as a gather's; a full-width vector store's bytes);
- ``vector_ops``: instructions that occupy a vector execution pipe: every instruction on a
  vector register but a load, a store, a register-to-register move or a zeroing idiom (which a
  renamer may eliminate), a conversion, an insert or extract, a broadcast, a transfer to or
  from a general register, a mask-register instruction or a gather (whose pipes differ by
  core: counting none is safe).

Blocks whose runs go together are priced as one group (:func:`tvm_ext.built_code.asm_loops.groups`:
a counted loop with the block that enters it and the one it exits to), and the blocks of an
entry function that run at most once per call (:func:`tvm_ext.built_code.asm_loops.run_once`: the
argument checks) are set apart with their capacity, ``once_cap``. :func:`block_costs` keeps,
per resource, the smallest ratio ``demand / cap`` over the groups with ``cap > 0``
(:attr:`BlockCosts.per_flop`).

Why it bounds a run: if every FLOP the candidate's TIR counts is done by an instruction counted
in some block's ``cap`` (the premises of ``machine_code.compute`` in
:mod:`tvm_ext.cost.code_arms`, and no general-register sign trick, :attr:`BlockCosts.gpr_sign`),
then a core that does ``F`` of the counted FLOPs runs groups with ``sum_G n_G cap_G >= F -
once_cap``, and so asks ``sum_G n_G demand_G >= per_flop x (F - once_cap)`` of each resource,
whichever groups ran how often.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tvm_ext.built_code.asm_loops import groups, run_once
from tvm_ext.built_code.asm_text import (
    FMA_STEMS,
    FP_STEM_X87,
    READS_LAST_OPERAND,
    basic_blocks,
    fp_elements,
    no_arith,  # fmt: skip
    split_operands,
)
from tvm_ext.built_code.asm_text import vector_bits as _bits

RESOURCES = ("loads", "load_bytes", "stores", "store_bytes", "vector_ops")
# Instructions that touch no memory slot or pipe we count, whatever their operands say.
_SKIP = ("lea", "nop", "prefetch", "push", "pop", "call", "ret", "j", "ud2", "int3", "endbr")
# Vector instructions that move data without computing on it, or whose pipes differ by core.
_MOVES = ("vmov", "movap", "movup", "movs", "movd", "movq", "movdq", "vbroadcast", "vpbroadcast",
          "vgather", "vpgather", "vscatter", "vpscatter", "vmaskmov", "vpmaskmov", "vextract",
          "vinsert", "vcvt", "cvt", "vpmov", "vpextr", "vpinsr", "vmovmsk", "vptest", "vtestp",
          "vcomi", "vucomi", "k")  # fmt: skip
_FULL_MOVE = re.compile(r"^v?mov(aps|ups|apd|upd|dqa|dqu|dqa32|dqa64|dqu8|dqu16|dqu32|dqu64)$")
_GATHER = re.compile(r"^v(p?gather|p?scatter)[dq](ps|pd|d|q)$")
_ELEM_BITS = {"ps": 32, "pd": 64, "d": 32, "q": 64}
# Idioms a renamer may carry out with no pipe: a register xor/sub/andn/compared with itself.
_IDIOM = re.compile(r"^v?(xorp[sd]|pxor[dq]?|psub[bwdq]|pcmpeq[bwdq]|pcmpgt[bwdq]|andnp[sd]|"
                    r"pandn[dq]?)$")  # fmt: skip
_ALL_ONES = re.compile(r"^(kxnor[bwdq]|v?pcmpeq[bwdq])$")
_MASK_LANES = {"b": 8, "w": 16, "d": 32, "q": 64}  # kxnorb sets 8 mask bits, clears the rest
# Vector instructions that may carry out a counted FLOP without arithmetic.
_SIGN_OR_COMPARE = re.compile(r"^v?p?(and|andn|or|xor)(ps|pd|d|q)?$|^vpternlog[dq]$|^v?p?cmp")
# A float's sign bit, or all but it, as an immediate: fneg/fabs done in general registers.
_SIGN_IMM = re.compile(r"^\$(-2147483648|2147483647|2147483648|-9223372036854775808|"
                       r"9223372036854775807|0x80000000|0x7fffffff|0x8000000000000000|"
                       r"0x7fffffffffffffff)$")  # fmt: skip
_SCALAR = ("ss", "sd", "sh")


@dataclass(frozen=True)
class BlockCosts:
    """The smallest per-FLOP demand of each resource over a module's groups of blocks."""

    per_flop: tuple[float, ...]  # in the order of RESOURCES; () where no block can do a FLOP
    gpr_sign: bool  # a general-register xor/and/or/bt* with a float sign mask was seen
    once_cap: float = 0.0  # FLOPs the blocks that run at most once per call can do, in all


def _arith_flops(mnemonic: str, operands: str) -> float:
    """FLOPs one arithmetic instruction can do (0: not floating-point arithmetic)."""
    if FP_STEM_X87.match(mnemonic):
        return 1.0
    fp = fp_elements(mnemonic, operands)
    if fp is None or no_arith(fp[1]):
        return 0.0
    return float(fp[0] * (2 if fp[1].startswith(FMA_STEMS + ("dp",)) else 1))


def _gpr_sign(mnemonic: str, ops: list[str]) -> bool:
    """A general-register instruction that may flip or clear a float's sign bit."""
    if not ops:
        return False
    if re.match(r"^(xor|and|or)[bwlq]?$", mnemonic):
        return _SIGN_IMM.match(ops[0]) is not None
    return re.match(r"^bt[crs][wlq]?$", mnemonic) is not None and ops[0] in ("$31", "$63")


def _gather(mnemonic: str, operands: str, ops: list[str], ones: dict[str, int],
            use: list[float]):  # fmt: skip
    """Count a gather's or scatter's slots into ``use``; False when it is neither."""
    match = _GATHER.match(mnemonic)
    if match is None:
        return False
    scatter = match.group(1).endswith("scatter")
    mask = re.search(r"\{(%k\d+)\}", operands)
    mask_reg = mask.group(1) if mask else (ops[0] if len(ops) == 3 else "")  # AVX2: a vector
    elements = _bits(ops[0] if scatter else ops[-1]) // _ELEM_BITS[match.group(2)]
    use[2 if scatter else 0] += max(min(elements, ones.get(mask_reg, 1)), 1)
    ones.pop(mask_reg, None)  # a gather clears its mask as it completes
    ones.pop(ops[-1], None)
    return True


def block_demand(code) -> tuple[float, list[float], bool]:
    """(cap, demand in the order of :data:`RESOURCES`, gpr_sign) of one block's instructions
    (see the module docstring)."""
    cap = 0.0
    use = [0.0] * len(RESOURCES)
    sign = False
    ones: dict[str, int] = {}  # mask registers set to all ones (how many lanes), not written since
    for mnemonic, operands in code:
        if mnemonic.startswith(_SKIP):
            continue
        ops = split_operands(operands)
        if _gather(mnemonic, operands, ops, ones, use):
            continue
        width = _bits(operands)
        dest = ops[-1] if ops else ""
        mem = [i for i, op in enumerate(ops) if "(" in op]
        writes_mem = (
            bool(mem) and mem[-1] == len(ops) - 1 and not mnemonic.startswith(READS_LAST_OPERAND)
        )
        if "(" not in dest:  # a register written: no longer a known all-ones mask
            if len(ops) == 3 and ops[0] == ops[1] and _ALL_ONES.match(mnemonic):
                ones[dest] = _MASK_LANES.get(mnemonic[-1], 64) if mnemonic.startswith("k") else 64
                continue
            ones.pop(dest, None)
        if mnemonic.startswith("k"):
            continue
        flops = _arith_flops(mnemonic, operands)
        full = width and "{%k" not in operands and "{1to" not in operands
        if writes_mem:
            use[2] += 1
            use[3] += width // 8 if full and _FULL_MOVE.match(mnemonic) else 0
        elif mem:
            use[0] += 1
            packed = flops and not mnemonic.endswith(_SCALAR)
            use[1] += width // 8 if full and (_FULL_MOVE.match(mnemonic) or packed) else 0
        if not width:
            sign = sign or _gpr_sign(mnemonic, ops)
            cap += flops  # x87 arithmetic
            continue
        if _IDIOM.match(mnemonic) and len(ops) >= 2 and ops[0] == ops[1]:  # zeroing
            continue
        cap += flops or (width // 16 if _SIGN_OR_COMPARE.match(mnemonic) else 0)
        if not (mnemonic.startswith(_MOVES) or writes_mem):
            use[4] += 1
    return cap, use, sign


def block_costs(text: str) -> BlockCosts:
    """:class:`BlockCosts` of a module's x86-64 assembly (AT&T syntax, as LLVM prints it)."""
    blocks, refs = basic_blocks(text)
    demand = [block_demand(b.code) for b in blocks]
    number = {id(b): i for i, b in enumerate(blocks)}
    once = run_once(blocks, text)
    best: list[float] | None = None
    for group in groups(blocks, refs, once):
        cap = sum(demand[number[id(b)]][0] * times for b, times in group)
        if cap <= 0:
            continue
        ratio = [sum(demand[number[id(b)]][1][r] * times for b, times in group) / cap
                 for r in range(len(RESOURCES))]  # fmt: skip
        best = ratio if best is None else [min(a, b) for a, b in zip(best, ratio)]
    return BlockCosts(
        per_flop=tuple(best) if best is not None else (),
        gpr_sign=any(d[2] for d in demand),
        once_cap=sum(demand[i][0] for i in once),
    )
