"""Facts read off a built kernel's machine code (x86-64 assembly as LLVM prints it).

A TIR-level bound cannot know which vector width the code will use: LLVM vectorizes loops
the schedule did not mark, and leaves others scalar or at 128 bits (shared/bound-study.md).
The assembly of the built module does know. :func:`read_assembly` reads, over every
function of the module:

- ``fp_lanes``: the most elements any floating-point arithmetic instruction processes
  (``zmm`` = 16 fp32 lanes, ``ymm`` = 8, ``xmm`` = 4 packed, scalar ``ss``/``sd`` = 1; fp64
  and fp16 elements counted as elements). Every instruction with a floating-point suffix
  counts unless it is known to do no arithmetic (moves, shuffles, blends, logic, compares,
  conversions, gathers): an instruction we do not know counts, so the figure cannot read low;
- ``fma_only``: whether every such instruction is an FMA or a multiply (they issue only on
  the FMA pipes) rather than an add, subtract, min/max, divide, square root, ...;
- ``dot``: dot-product instructions (VNNI ``vpdpbusd``/``vpdpwssd``, AVX512-BF16
  ``vdpbf16ps``, AMX ``tdp*``), which do several multiply-adds per lane;
- ``int_lanes``: the widest vector integer arithmetic (``vpadd``, ``vpmull``, ...);
- ``calls``: every call target; ``unknown_calls``: those that are neither a function of the
  module itself nor a TVM runtime entry or ``memcpy``/``memset`` (none of which does
  arithmetic on the kernel's tensors). Code that calls out (``expf`` from libm) may do FLOPs
  we cannot see. An indirect call (TVM calls its runtime through function pointers:
  ``movq __TVMBackendParallelLaunch@GOTPCREL(%rip), %rax; callq *(%rax)``) can only reach a
  function whose address the module itself takes (code has no other way to name one), so
  it is unknown exactly when the module refers to a global symbol outside that list;
- counts of FMA instructions, vector loads, stores and stack spills (``(%rsp)`` stores);
- ``per_flop``: per basic block, the loads, load bytes, stores, store bytes and vector-pipe
  instructions for each FLOP the block can do, the smallest over the blocks
  (:mod:`tvm_ext.built_code.machine_blocks`).

and, from the module's optimized LLVM IR (:func:`read_module`), how many elements a step of a
reduction chain processes (:mod:`tvm_ext.built_code.ir_chains`).

This is pure text reading: building and printing the module is ``tvm_api.assembly`` and
``tvm_api.llvm_ir``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, replace

from tvm_ext.built_code.asm_text import (
    FMA_STEMS,
    FP_STEM_X87,
    REG_BITS,
    fp_elements,
    instruction,
    no_arith,
    vector_registers,  # fmt: skip
)
from tvm_ext.built_code.ir_chains import chain_facts
from tvm_ext.built_code.machine_blocks import block_costs

log = logging.getLogger(__name__)

_DOT = re.compile(r"^(v?pdp(busd|bssd|wssd|wusd|wuud|bsud|buud)s?|v?dpbf16ps|v?dpph|tdp\w+)")
_INT_ARITH = re.compile(r"^vp(add|sub|mul|madd|sad|avg|min|max|abs|sll|srl|sra)")
_INT_ELEM = {"b": 8, "w": 16, "d": 32, "q": 64}
# Calls that do no arithmetic on the kernel's tensors: TVM's runtime (threads, workspaces,
# errors) and the C library's block copies. A packed call (``TVMFFIFunctionCall``, a function
# fetched with ``TVMBackendGetFuncFromEnv``) may run anything: it is not in this list.
_RUNTIME_CALL = re.compile(
    r"^_*(TVMBackend(ParallelLaunch|ParallelBarrier|AllocWorkspace|FreeWorkspace)"
    r"|TVMAPISetLastError|TVMFFIErrorSet\w*|memcpy|memset|memmove)(@PLT)?$"
)
# A global symbol the code refers to (local labels start with ".L" and never match).
_SYMBOL = re.compile(
    r"(?<![\w.$])([A-Za-z_$][\w$.]*)(?:@\w+)?\(%rip\)|(?<![\w.$])([A-Za-z_$][\w$.]*)@PLT"
)
_DIRECT = re.compile(r"^([A-Za-z_$][\w$.]*(?:@PLT)?)$")


@dataclass(frozen=True)
class CodeFacts:
    """What the machine code of one built module shows (see the module docstring)."""

    fp_lanes: int  # most elements of any FP arithmetic instruction (0: none at all)
    fma_only: bool  # every FP arithmetic instruction is an FMA or a multiply
    dot: tuple[str, ...]  # dot-product mnemonics found (empty: none)
    int_lanes: int  # most elements of any vector integer arithmetic instruction (0: none)
    calls: tuple[str, ...]  # every call target, once each
    unknown_calls: tuple[str, ...]  # calls that may do arithmetic we cannot see
    functions: tuple[str, ...]  # the module's own functions
    fma: int  # FMA instructions (static count over the module)
    fp_arith: int  # FP arithmetic instructions
    vector_loads: int  # instructions reading memory into a vector register
    vector_stores: int  # instructions writing a vector register to memory
    spills: int  # stores to the stack frame
    # The smallest demand per FLOP of capacity over the basic blocks that can do FLOPs, of
    # (loads, load bytes, stores, store bytes, vector-pipe instructions); () where no block
    # can (facts.machine_blocks). gpr_sign: a general-register sign trick was seen.
    per_flop: tuple = ()
    gpr_sign: bool = False
    once_cap: float = 0.0  # FLOPs the blocks left out of per_flop (run once a call) can do
    # From the optimized LLVM IR (facts.ir_chains.chain_facts; -1: the IR was not read): the
    # most elements a possible reduction chain step of each class processes (0: none found).
    chain_add_lanes: int = -1
    chain_max_lanes: int = -1
    chain_reassociates: bool = False  # a chain step may be reassociated: no chain facts hold
    chain_unfused: bool = False  # a multiply-add chain may step on a plain add
    chain_regions: tuple = ()  # (add, max) widths per parallel body, in launch order
    chain_serial: tuple = (-1, -1)  # (add, max) widths of the serial code
    chain_single: tuple = ()  # (add, max): chains one accumulator at a time, per body
    chain_serial_single: tuple = (False, False)  # the same for the serial code
    chain_looped: tuple = ()  # (add, max): the chains stayed loops, per body
    chain_serial_looped: tuple = (False, False)  # the same for the serial code
    chain_buffers: tuple = ()  # per body: ((buffer, add, max), ...) by the chain's buffer
    chain_serial_buffers: tuple = ()  # the same for the serial code
    chain_joinable: tuple = ()  # per body: the backend could join two vector operations
    chain_serial_joinable: bool = True  # the same for the serial code

    @property
    def widest_register(self) -> str:
        """The widest vector register FP arithmetic uses, for reports (``scalar``: none)."""
        return {16: "zmm", 8: "ymm", 4: "xmm"}.get(
            self.fp_lanes, "scalar" if self.fp_lanes <= 1 else f"{self.fp_lanes} lanes"
        )

    def to_dict(self) -> dict:
        def plain(v):
            return [plain(x) for x in v] if isinstance(v, tuple) else v

        return {k: plain(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: dict) -> "CodeFacts":
        def frozen(v):
            return tuple(frozen(x) for x in v) if isinstance(v, list) else v

        return cls(**{k: frozen(v) for k, v in data.items()})


def read_assembly(text: str) -> CodeFacts:
    """Read :class:`CodeFacts` off LLVM's x86-64 assembly of a module (AT&T syntax)."""
    functions, calls = [], []
    fp_lanes, fma_only, int_lanes = 0, True, 0
    dot: list[str] = []
    fma = fp_arith = loads = stores = spills = 0
    referenced: set[str] = set()
    indirect = False
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(".type") and "@function" in line:
            functions.append(line.split(None, 1)[1].split(",")[0].strip())
            continue
        if line.endswith(":") or line.startswith("."):
            continue
        mnemonic, operands = instruction(line)
        refs = [a or b for a, b in _SYMBOL.findall(operands)]
        referenced.update(refs)
        if mnemonic.startswith("call") or (
            mnemonic.startswith("jmp") and not operands.startswith((".L", "*"))
        ):  # a call, or a tail call (a jump to another function)
            direct = _DIRECT.match(operands)
            if direct is not None or refs:
                calls.append(direct.group(1) if direct is not None else refs[0])
            else:
                indirect = True
            continue
        if _DOT.match(mnemonic):
            dot.append(mnemonic)
            continue
        regs = vector_registers(operands)
        dest = operands.rsplit(",", 1)[-1]  # AT&T: the destination is the last operand
        if regs and "(" in dest:
            stores += 1
            spills += "(%rsp)" in dest or "(%rbp)" in dest
        elif regs and "(" in operands:
            loads += 1  # a memory source, a vector register destination (FMA operands too)
        elif mnemonic.startswith("mov") and "(%rsp)" in dest:
            spills += 1
        int_match = _INT_ARITH.match(mnemonic)
        if int_match and regs:
            reg = max(REG_BITS[r] for r in regs)
            elem = _INT_ELEM.get(mnemonic.rstrip("xyz")[-1], 8)
            int_lanes = max(int_lanes, reg // elem)
            continue
        if FP_STEM_X87.match(mnemonic):  # x87 arithmetic: scalar, not on the FMA pipes
            fp_arith, fp_lanes, fma_only = fp_arith + 1, max(fp_lanes, 1), False
            continue
        fp = fp_elements(mnemonic, operands)
        if fp is None or no_arith(fp[1]):
            continue
        elements, stem = fp
        fp_arith += 1
        fp_lanes = max(fp_lanes, elements)
        if stem.startswith(FMA_STEMS):
            fma += 1
        elif not stem.startswith("mul"):
            fma_only = False
    own = set(functions)
    costs = block_costs(text)

    def unknown(name: str) -> bool:
        return name.removesuffix("@PLT") not in own and not _RUNTIME_CALL.match(name)

    unique_calls = tuple(dict.fromkeys(calls))
    unknown_calls = [c for c in unique_calls if unknown(c)]
    if indirect:  # it reaches one of the symbols the module refers to
        unknown_calls += [f"*{r}" for r in sorted(referenced) if unknown(r)]
    return CodeFacts(
        fp_lanes=fp_lanes,
        fma_only=fma_only,
        dot=tuple(dict.fromkeys(dot)),
        int_lanes=int_lanes,
        calls=unique_calls,
        unknown_calls=tuple(dict.fromkeys(unknown_calls)),
        functions=tuple(functions),
        fma=fma,
        fp_arith=fp_arith,
        vector_loads=loads,
        vector_stores=stores,
        spills=spills,
        per_flop=costs.per_flop,
        gpr_sign=costs.gpr_sign,
        once_cap=costs.once_cap,
    )


def read_module(asm: str, ir: str | None = None) -> CodeFacts:
    """:func:`read_assembly`, plus the reduction chain facts of the module's optimized LLVM
    IR when given (:func:`tvm_ext.built_code.ir_chains.chain_facts`)."""
    code = read_assembly(asm)
    if ir is None:
        return code
    try:
        chain = chain_facts(ir)
    except Exception as err:  # noqa: BLE001  the reader abstains (no chain facts), loudly
        log.warning("chain facts not read (%s: %s): stage 2 keeps the TIR's chain allowance",
                    type(err).__name__, err)  # fmt: skip
        return code
    return replace(code, chain_add_lanes=chain.add_lanes, chain_max_lanes=chain.max_lanes,
                   chain_reassociates=chain.reassociates, chain_unfused=chain.unfused,
                   chain_regions=chain.regions, chain_serial=chain.serial,
                   chain_single=chain.single, chain_serial_single=chain.serial_single,
                   chain_looped=chain.looped, chain_serial_looped=chain.serial_looped,
                   chain_buffers=chain.buffers,
                   chain_serial_buffers=chain.serial_buffers,
                   chain_joinable=chain.joinable,
                   chain_serial_joinable=chain.serial_joinable)  # fmt: skip
