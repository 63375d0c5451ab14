"""How often basic blocks of a built kernel run relative to each other, where the machine
code says so: counted single-block loops and the blocks an entry function runs once.

The machine code does not state loop trip counts, but LLVM's counted loops say them in a
form that can be read exactly (:func:`trip_count`), and the blocks of a function the module
never calls itself that lie on no cycle of its control flow run at most once per call
(:func:`run_once`). :func:`groups` turns the first into groups of blocks whose runs go
together, which :mod:`tvm_ext.built_code.machine_blocks` prices as one.
"""

from __future__ import annotations

import re

from tvm_ext.built_code.asm_text import (
    READS_LAST_OPERAND,
    Block,
    entry_functions,
    gpr,
    split_operands,
)

# Instructions that write general registers they do not name last (or at all).
_IMPLICIT = ("call", "mul", "div", "idiv", "cq", "cd", "cw", "rep", "movs", "stos", "lods",
             "scas", "cmps", "xchg", "cmpxchg", "xadd", "push", "pop", "cpuid", "rdtsc",
             "syscall", "enter", "leave", "loop")  # fmt: skip
_NO_WRITE = READS_LAST_OPERAND + ("j",)
_STEP = re.compile(r"^(add|sub|inc|dec)([lq])$")
_IMM = re.compile(r"^\$(-?\d+)$")
_SUFFIX_BITS = {"l": 32, "q": 64}


def _writes(mnemonic: str, ops: list[str], reg: str) -> bool:
    """Whether an instruction may write the general register ``reg`` (its 64-bit name)."""
    if mnemonic.startswith(_IMPLICIT) or (mnemonic.startswith("imul") and len(ops) == 1):
        return True
    if not ops or mnemonic.startswith(_NO_WRITE):
        return False
    dest = gpr(ops[-1])
    return dest is not None and dest[0] == reg


def _start(block: Block, reg: str) -> int | None:
    """The value ``block`` leaves in general register ``reg`` when its last write of it is a
    constant (``mov $v``, or ``xor`` of it with itself), as a 64-bit pattern; else None."""
    for mnemonic, operands in reversed(block.code):
        ops = split_operands(operands)
        if not _writes(mnemonic, ops, reg):
            continue
        if mnemonic.startswith("xor") and len(ops) == 2 and ops[0] == ops[1]:
            return 0
        imm = _IMM.match(ops[0]) if len(ops) == 2 else None
        width = gpr(ops[-1])[1]
        if mnemonic in ("movl", "movq", "movabsq") and imm and width in (32, 64):
            return int(imm.group(1)) % (1 << width)  # movl zero-extends, movq sign-extends
        return None
    return None


def _step(mnemonic: str, ops: list[str], width: int) -> int | None:
    """The constant an ``add``/``sub``/``inc``/``dec`` of ``width`` bits adds, else None."""
    match = _STEP.match(mnemonic)
    if match is None or _SUFFIX_BITS[match.group(2)] != width:
        return None
    if match.group(1) in ("inc", "dec"):
        return 1 if match.group(1) == "inc" else -1
    imm = _IMM.match(ops[0]) if len(ops) == 2 else None
    if imm is None:
        return None
    return int(imm.group(1)) * (1 if match.group(1) == "add" else -1)


def trip_count(loop: Block, before: Block) -> int | None:
    """How many times ``loop`` runs each time control falls into it from ``before``, when
    ``loop`` is a single-block counted loop; None when that cannot be read.

    ``loop`` must end in a conditional jump back to its own label right after the instruction
    that sets the flags: the ``add``/``sub``/``inc``/``dec`` of a counter (going round while it
    is not zero: ``jne``), or a ``cmp $K`` of a counter that one such step of a constant moves
    earlier in the block (``jne``; ``jb``/``jl`` counting up). Nothing else in the block may
    write the counter (no call, no instruction writing registers it does not name), and the
    last write of it in ``before`` is a constant. The counter's value at every pass is then
    known, in the width the loop computes it, and so is the pass at which the jump falls
    through."""
    code = loop.code
    if len(code) < 2 or not code[-1][0].startswith("j") or code[-1][1] not in loop.labels:
        return None
    jcc = code[-1][0]
    flags = split_operands(code[-2][1])
    cmp = code[-2][0] in ("cmpl", "cmpq") and len(flags) == 2 and _IMM.match(flags[0])
    counter = gpr(flags[-1]) if flags else None
    if counter is None or counter[1] not in (32, 64):
        return None
    reg, width = counter
    writers = [(i, m, split_operands(o)) for i, (m, o) in enumerate(code[:-1])
               if _writes(m, split_operands(o), reg)]  # fmt: skip
    if len(writers) != 1 or (not cmp and writers[0][0] != len(code) - 2):
        return None
    _, mnemonic, ops = writers[0]
    step = _step(mnemonic, ops, width)
    start = _start(before, reg)
    if step is None or step == 0 or start is None or gpr(ops[-1])[1] != width:
        return None
    mod = 1 << width
    start %= mod
    if cmp and jcc in ("jb", "jl") and step > 0:  # up to K: unsigned or signed
        lo, hi = start, int(flags[0][1:]) % mod
        if jcc == "jl":
            lo, hi = (v - mod if v >= mod // 2 else v for v in (lo, hi))
        trips = max(1, -(-(hi - lo) // step))
        return trips if lo + trips * step < (mod // 2 if jcc == "jl" else mod) else None
    if jcc not in ("jne", "jnz"):
        return None
    target = int(flags[0][1:]) % mod if cmp else 0
    distance = (target - start) % mod if step > 0 else (start - target) % mod
    if distance == 0 or distance % abs(step):
        return None
    trips = distance // abs(step)
    return trips if trips <= 1 << 31 else None


def falls_into(block: Block, next_labels: tuple[str, ...]) -> bool:
    """Whether every run of ``block`` goes on into the next block (no jump, return or trap at
    its end, or a ``jmp`` to the next block's label)."""
    if not block.code:
        return True
    mnemonic, operands = block.code[-1]
    if mnemonic.startswith("jmp"):
        return operands in next_labels
    return not mnemonic.startswith(("j", "ret", "ud2"))


def groups(blocks: list[Block], refs: dict[str, int], skip: frozenset[int] = frozenset()):
    """The blocks as groups whose runs go together, ``[(block, times), ...]``.

    A single-block counted loop ``F`` that the block before it ``P`` falls into runs ``t``
    times for every run of ``P`` (:func:`trip_count`): the group ``[(P, 1), (F, t)]``. When
    nothing but ``F``'s own back edge jumps to ``F`` and nothing jumps to the block after it
    ``E`` (so ``F`` runs only from ``P``, and ``E`` only as ``F`` exits), the group takes
    ``(E, 1)`` too and ``F`` is no group alone; else ``F`` is also a group alone (its runs
    from elsewhere). A block is in one group at most. The counts of any run split into whole
    groups, each run of ``P`` with its followers, and the rest, so a resource's total over a
    run is at least the smallest demand-to-capacity ratio over the groups times the capacity
    the run used. The blocks numbered in ``skip`` are in no group (the caller prices them)."""
    used: set[int] = set(skip)
    out = []
    for i in range(1, len(blocks)):
        loop, before = blocks[i], blocks[i - 1]
        if i - 1 in used or i in used or i + 1 in skip or before.function != loop.function:
            continue
        if not falls_into(before, loop.labels):
            continue
        trips = trip_count(loop, before)
        if trips is None:
            continue
        group = [(before, 1), (loop, trips)]
        used |= {i - 1, i}
        entered_once = sum(refs.get(label, 0) for label in loop.labels) == 1 and all(
            label.startswith(".L") for label in loop.labels
        )
        after = blocks[i + 1] if i + 1 < len(blocks) else None
        exit_only = (after is not None and after.function == loop.function
                     and i + 1 not in used and not after.labels)  # fmt: skip
        if entered_once and exit_only:
            group.append((after, 1))
            used.add(i + 1)
        else:
            out.append([(loop, 1)])
        out.append(group)
    out += [[(b, 1)] for i, b in enumerate(blocks) if i not in used]
    return out


def _successors(blocks: list[Block]) -> list[list[int]] | None:
    """Per block of one function, the blocks control can go to next; None when a jump is
    indirect (a jump table: any block might follow)."""
    where = {label: i for i, b in enumerate(blocks) for label in b.labels}
    out = []
    for i, b in enumerate(blocks):
        mnemonic, operands = b.code[-1] if b.code else ("", "")
        nxt = [i + 1] if i + 1 < len(blocks) else []
        if mnemonic.startswith("j"):
            if operands.startswith("*"):
                return None
            target = [where[operands]] if operands in where else []
            out.append(target if mnemonic.startswith("jmp") else target + nxt)
        elif mnemonic.startswith(("ret", "ud2")):
            out.append([])
        else:
            out.append(nxt)
    return out


def in_cycles(blocks: list[Block]) -> set[int] | None:
    """The blocks of one function that lie on a cycle of its control flow (in a loop); None
    when that cannot be told (an indirect jump)."""
    succ = _successors(blocks)
    if succ is None:
        return None
    cyclic: set[int] = set()
    for start in range(len(blocks)):  # on a cycle: it can reach itself
        seen: set[int] = set()
        todo = list(succ[start])
        while todo:
            i = todo.pop()
            if i == start:
                cyclic.add(start)
                break
            if i not in seen:
                seen.add(i)
                todo.extend(succ[i])
    return cyclic


def run_once(blocks: list[Block], text: str) -> frozenset[int]:
    """The blocks (numbers in ``blocks``) that run at most once per call of the kernel: those
    on no cycle of the control flow (:func:`in_cycles`) of an entry function
    (:func:`~tvm_ext.built_code.asm_text.entry_functions`): the entry runs once per call, and each
    of its runs passes such a block at most once. They hold the argument checks (a dtype
    compared with vector logic)."""
    once: set[int] = set()
    for name in entry_functions(text, {b.function for b in blocks}):
        index = [i for i, b in enumerate(blocks) if b.function == name]
        cyclic = in_cycles([blocks[i] for i in index])
        if cyclic is not None:
            once |= {i for n, i in enumerate(index) if n not in cyclic}
    return frozenset(once)
