"""Reading LLVM's x86-64 assembly (AT&T syntax) as text: instructions, operands, registers,
basic blocks and the labels and functions the code refers to.

Shared by :mod:`tvm_ext.built_code.machine_code` (module-wide facts) and
:mod:`tvm_ext.built_code.machine_blocks` (what each block asks of the core).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Register width in bits.
REG_BITS = {"xmm": 128, "ymm": 256, "zmm": 512}
_REG = re.compile(r"\b([xyz]mm)\d+\b")
_DECORATION = re.compile(r"\{[^}]*\}")
# Element type of a floating-point instruction, from its suffix.
_FP_SUFFIX = (("ps", 32, True), ("pd", 64, True), ("ph", 16, True), ("ss", 32, False),
              ("sd", 64, False), ("sh", 16, False))  # fmt: skip
# Stems (after the leading "v" and before the suffix) that do no floating-point arithmetic.
_NO_ARITH = ("mov", "broadcast", "shuf", "perm", "unpck", "blend", "xor", "and", "or",
             "extract", "insert", "gather", "scatter", "compress", "expand", "cmp", "cvt",
             "ucomi", "comi", "test", "fpclass", "maskmov")  # fmt: skip
# Legacy SSE (no VEX prefix: CPUs without AVX) arithmetic; every other FP form starts with "v".
_SSE_ARITH = re.compile(r"^(add|sub|mul|div|sqrt|max|min|rcp|rsqrt|round|hadd|hsub|addsub|dp)"
                        r"(ps|pd|ss|sd)$")  # fmt: skip
FP_STEM_X87 = re.compile(r"^f(add|sub|subr|mul|div|divr|sqrt)p?$")
# FMA stems (after the "v"): two FLOPs a lane.
FMA_STEMS = ("fmadd", "fmsub", "fnmadd", "fnmsub")
# Instructions that read but never write their last operand.
READS_LAST_OPERAND = ("cmp", "test", "bt", "vcmp", "vucomi", "vcomi", "ucomi", "comi", "vptest",
                      "ptest", "vtestp")  # fmt: skip
# Float conversion routines TVM emits into a module (float16 <-> float32/64, by bits): a
# conversion is no FLOP in the TIR's count, and they clear sign bits in general registers.
CONVERSION_HELPERS = frozenset({"__truncsfhf2", "__truncdfhf2", "__extendhfsf2",
                                "__gnu_h2f_ieee", "__gnu_f2h_ieee", "__truncsfbf2"})  # fmt: skip
_LABEL_REF = re.compile(r"\.L[\w$.]+")
_NAME = re.compile(r"\.?[A-Za-z_$][\w$.@]*")
# General registers: every width's name -> (64-bit name, width).
_GPR: dict[str, tuple[str, int]] = {}
for _names in (("rax", "eax", "ax", "al"), ("rbx", "ebx", "bx", "bl"), ("rcx", "ecx", "cx", "cl"),
               ("rdx", "edx", "dx", "dl"), ("rsi", "esi", "si", "sil"),
               ("rdi", "edi", "di", "dil"), ("rbp", "ebp", "bp", "bpl"),
               ("rsp", "esp", "sp", "spl")):  # fmt: skip
    _GPR.update({name: (_names[0], bits) for name, bits in zip(_names, (64, 32, 16, 8))})
for _n in range(8, 16):
    _GPR.update({f"r{_n}{s}": (f"r{_n}", bits) for s, bits in zip(("", "d", "w", "b"),
                                                                   (64, 32, 16, 8))})  # fmt: skip


def vector_registers(operands: str) -> list[str]:
    """The kinds (``xmm``/``ymm``/``zmm``) of the vector registers an operand text names."""
    return _REG.findall(operands)


def vector_bits(operands: str) -> int:
    """Bits of the widest vector register an operand text names (0: none)."""
    return max((REG_BITS[r] for r in _REG.findall(operands)), default=0)


def gpr(operand: str) -> tuple[str, int] | None:
    """(64-bit name, width) of a general register operand (``%ebx`` -> ``("rbx", 32)``)."""
    text = operand.strip()
    return _GPR.get(text[1:]) if text.startswith("%") else None


def fp_elements(mnemonic: str, operands: str) -> tuple[int, str] | None:
    """(elements, stem) of a floating-point SSE/AVX instruction, else None."""
    if mnemonic.startswith("v"):
        body = mnemonic[1:]
    elif _SSE_ARITH.match(mnemonic):
        body = mnemonic
    else:
        return None
    # AT&T prints an explicit width on some memory forms ("vcvtps2phx", "...psy"): drop it.
    for suffix, bits, packed in _FP_SUFFIX:
        for tail in (suffix, suffix + "x", suffix + "y", suffix + "z"):
            if body.endswith(tail) and len(body) > len(tail):
                stem = body[: -len(tail)]
                if not packed:
                    return 1, stem
                return (vector_bits(operands) or 128) // bits, stem
    return None


def no_arith(stem: str) -> bool:
    """Whether an FP instruction's stem names one that does no arithmetic (a move, shuffle,
    logic, compare, conversion, ...)."""
    return stem.startswith(_NO_ARITH) or stem.endswith(("movs", "mov"))


def split_operands(operands: str) -> list[str]:
    """AT&T operands split at the commas outside parentheses, ``{...}`` decorations (masks,
    broadcasts, rounding) removed."""
    out, depth, cur = [], 0, []
    for ch in _DECORATION.sub("", operands):
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


def instruction(line: str) -> tuple[str, str]:
    """(mnemonic in lower case, operand text) of one instruction line."""
    mnemonic, _, operands = line.partition("\t") if "\t" in line else line.partition(" ")
    return mnemonic.strip().lower(), operands.strip()


def _lines(text: str):
    """(line without comment, the section it is in) for each non-empty line; a module starts
    in ``.text``."""
    section = ".text"
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(".section"):
            parts = line.replace(",", " ").split()
            section = parts[1] if len(parts) > 1 else section
        elif line.startswith((".text", ".data", ".bss")):
            section = line.split()[0]
        yield line, section


def _is_label(line: str) -> bool:
    return line.endswith(":") and " " not in line and "\t" not in line


def label_refs(text: str) -> dict[str, int]:
    """How often each local label is referred to by the code or by data other than debug
    information (jumps, jump tables, addresses taken). A label nothing refers to is no place
    control can enter but by falling through (LLVM marks debug line ranges with such)."""
    refs: dict[str, int] = {}
    for line, section in _lines(text):
        if section.startswith(".debug") or _is_label(line):
            continue
        for ref in _LABEL_REF.findall(line):
            refs[ref] = refs.get(ref, 0) + 1
    return refs


def function_names(text: str) -> set[str]:
    """The labels a ``.type <name>,@function`` directive declares functions (local ones too)."""
    out = set()
    for line, _ in _lines(text):
        if line.startswith(".type") and "@function" in line:
            out.add(line.split(None, 1)[1].split(",")[0].strip())
    return out


def entry_functions(text: str, functions: set[str]) -> set[str]:
    """Those of ``functions`` nothing in the module calls, jumps to or takes the address of
    (code, or data other than debug information): only the runtime calls them, once for each
    call of the kernel."""
    named: set[str] = set()
    for line, section in _lines(text):
        if section.startswith(".debug") or _is_label(line):
            continue
        if line.startswith(".") and not line.startswith((".quad", ".long", ".word", ".set")):
            continue
        named.update(n.split("@")[0] for n in _NAME.findall(line))
    return {f for f in functions if f not in named}


@dataclass
class Block:
    """One basic block: the labels it starts at, its instructions (mnemonic, operands), and
    the function it is in."""

    labels: tuple[str, ...]
    code: list[tuple[str, str]]
    function: str


def basic_blocks(text: str) -> tuple[list[Block], dict[str, int]]:
    """The module's basic blocks in text order, and :func:`label_refs`. Only code sections
    (``.text...``) hold blocks. A function's label or a local label something refers to starts
    a block; a jump, return or trap ends one. The
    bodies of :data:`CONVERSION_HELPERS` are left out."""
    refs = label_refs(text)
    named = function_names(text)
    blocks: list[Block] = []
    labels: list[str] = []
    code: list[tuple[str, str]] = []
    function = ""

    def close():
        nonlocal labels, code
        if (code or labels) and function not in CONVERSION_HELPERS:
            blocks.append(Block(tuple(labels), code, function))
        labels, code = [], []

    for line, section in _lines(text):
        if not section.startswith(".text"):
            continue  # data: constants, jump tables, debug information
        if _is_label(line):
            name = line[:-1]
            starts_function = name in named or not name.startswith(".L")
            if not starts_function and not refs.get(name):
                continue  # nothing enters here but by falling through
            if code or starts_function:
                close()
            if starts_function:  # TVM's parallel bodies are local: .L__tvm_parallel_lambda
                function = name
            labels.append(name)
            continue
        if line.startswith("."):
            continue
        code.append(instruction(line))
        if code[-1][0].startswith(("j", "ret", "ud2")):
            close()
    close()
    return blocks, refs
