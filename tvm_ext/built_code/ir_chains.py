"""Reduction chains in a built kernel's optimized LLVM IR: how many outputs a step carries.

The TIR-level dependency arm (``RooflinePolicy._chain``) must let one step of a reduction
chain carry as many outputs as a vector register has lanes: LLVM may vectorize a spatial loop
around the reduction. After the build the module's optimized IR says what it did.
:func:`chain_facts` reads, per reduction class, the most elements any *possible chain step*
processes:

- class ``add`` (a sum, ``acc + x``, and a multiply-add, ``acc + x * y``): ``fadd``,
  ``fsub`` (InstCombine may write ``acc + -x`` as ``acc - x``), ``llvm.fmuladd``/``llvm.fma``
  and ``llvm.vector.reduce.fadd``;
- class ``max`` (``max``/``min``): ``llvm.maxnum``/``minnum``/``maximum``/``minimum``,
  ``llvm.vector.reduce.fmax``/``fmin`` and a ``select`` whose condition is an ``fcmp`` (TVM
  lowers ``max(a, b)`` to ``a > b ? a : b``).

An operation is a possible chain step when an operand carries the value of an earlier step
of its class: it traces back (through value moves: ``phi``, ``select``, ``bitcast``,
``shufflevector``, ``insertelement``, ``extractelement``, ``freeze``, ``fneg``, FP
conversions) to an operation of the class (the accumulator kept in a register), or to a load
from a buffer the same function stores such a value to (the accumulator kept in memory).
Buffers, and whether two accesses may alias, are :mod:`tvm_ext.built_code.llvm_ir`'s (by base
pointer; a base it cannot name aliases everything).

Why the width bounds the outputs one machine step carries: the previous step's result is
the operand that makes a step a step, so every step of every reduction of the class is
among the operations counted. LLVM vectorizes in IR passes (LoopVectorize, SLPVectorizer)
that run before this IR is printed; instruction selection splits a vector wider than the
target's registers and never turns scalar arithmetic into vector arithmetic (it has no SLP),
so a scalar chain step stays one element. It may join *vector* operations of a basic block
whose results it concatenates into one wider operation (the x86 combine of concatenated
operations: in the violation hunt a TVM 8-lane multiply-add pair ran as one 16-lane zmm FMA
while this IR showed only 8-lane ones). So a vector chain step is read as running up to the
widest floating-point instruction of the built code (``CodeFacts.fp_lanes``, from the
assembly), unless its function has no two operations the backend could join
(``joinable``): ``cost/chain_arms.chain_widths`` does. Joining needs two vector operations of
one kind in one basic block (instruction selection sees one block at a time) neither of which
needs the other's result (one instruction cannot feed itself); a chain's own steps each
extend the one before, so a function whose blocks hold one chain each (a reduction loop over
one accumulator vector) keeps its steps at their own width. ``reassociates`` is set when any
such operation allows reassociation (``reassoc``/``fast`` flags): then the chain's order is not
fixed and nothing here applies.

``single`` (per function and class): the class's chain steps, grouped by the buffers their
chains are stored to (a reduction block writes its own output; steps whose buffer cannot be
named form one group with all the others), have per group one start (a step none of whose
operands moves another step's value), at most one loop-carried accumulator (``phi``), and in
every basic block one chain, each step extending the one before it. Then no two outputs of
one block have their chains interleaved in program order (two blocks' chains may be: to
either block's arm the other's steps are other instructions), nor can the backend interleave
them: the
x86 backend reorders instructions only within a basic block (its machine scheduler; it does
not software-pipeline loops), and this IR is after every loop transformation (LLVM's default
pipeline neither interchanges loops nor unrolls-and-jams them). A vector step carries its
lanes' outputs together: that is one chain of vector steps.

``looped`` (per function and class): every chain step extends an accumulator carried around a
loop by a ``phi``: the reduction stayed a loop. LLVM's loop-invariant code motion moves
instructions out of a loop, never a loop: such a chain, recomputed inside a loop around it,
runs again each time.

``unfused``: some possible chain step of class ``add`` is a plain ``fadd``/``fsub`` or an
ordered ``llvm.vector.reduce.fadd`` (which the backend expands into plain adds); the x86
backend may still fuse a plain add with a multiply (an FMA), or not: a multiply-add chain's
step may then take only an add's latency, and run on any floating-point pipe. Without it,
every add-class step is an ``llvm.fmuladd``/``llvm.fma``, which the x86 backend of a CPU with
FMA3 selects as one FMA instruction.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tvm_ext.built_code.llvm_ir import FP_TYPE, Function, Op, functions, has_unknown

_MOVES = ("phi", "select", "bitcast", "shufflevector", "insertelement", "extractelement",
          "freeze", "fneg", "fpext", "fptrunc", "addrspacecast")  # fmt: skip
_ADD_CALL = re.compile(r"@llvm\.(fmuladd|fma|vector\.reduce\.fadd)\.")
_MAX_CALL = re.compile(r"@llvm\.(maxnum|minnum|maximum|minimum|vector\.reduce\.f(max|min))\.")
_LAMBDA = "__tvm_parallel_lambda"  # TVM's name for a parallel loop's body function


@dataclass(frozen=True)
class ChainFacts:
    """Per reduction class, the most elements any possible chain step processes (0: no such
    step in the module; see the module docstring)."""

    add_lanes: int
    max_lanes: int
    reassociates: bool
    unfused: bool
    # (add, max) widths of each parallel body function in the order the module launches them,
    # and of the rest of the module (the serial code).
    regions: tuple[tuple[int, int], ...] = ()
    serial: tuple[int, int] = (0, 0)
    # Per parallel body (same order) and for the serial code: for (add, max), whether the
    # function's chains run one accumulator at a time (``Chains.one_at_a_time``).
    single: tuple[tuple[bool, bool], ...] = ()
    serial_single: tuple[bool, bool] = (False, False)
    # The same for ``Chains.looped``: the chains stayed loops (none became straight-line
    # code that LICM could hoist out of a loop around it).
    looped: tuple[tuple[bool, bool], ...] = ()
    serial_looped: tuple[bool, bool] = (False, False)
    # Per parallel body (same order) and for the serial code: ``(buffer, add, max)`` widths of
    # the steps by the buffer their chain is stored to (``Chains.widths_by_buffer``).
    buffers: tuple[tuple[tuple[str, int, int], ...], ...] = ()
    serial_buffers: tuple[tuple[str, int, int], ...] = ()
    # Per parallel body (same order) and for the serial code: whether instruction selection
    # could join two of its vector operations into one wider instruction (``Chains.joinable``).
    joinable: tuple[bool, ...] = ()
    serial_joinable: bool = True


def _class(op: Op, ops: dict[str, Op]) -> str | None:
    if op.opcode in ("fadd", "fsub"):
        return "add"
    if op.opcode == "call":
        if _ADD_CALL.search(op.text):
            return "add"
        if _MAX_CALL.search(op.text):
            return "max"
        return None
    if op.opcode == "select" and op.lanes:
        cond = ops.get(op.operands[0]) if op.operands else None
        if cond is not None and cond.opcode == "fcmp":
            return "max"
    return None


class Chains:
    """The reduction chains of one :class:`~tvm_ext.built_code.llvm_ir.Function`."""

    def __init__(self, fn: Function):
        self.fn, self.ops = fn, fn.ops
        self.classes = {n: _class(op, self.ops) for n, op in self.ops.items()}
        self._carry: dict[str, set[str]] = {}
        self._dest: dict[str, dict[str, set]] = {}
        self._steps: dict[str, list[Op]] = {}

    def carriers(self, cls: str) -> set[str]:
        """Values that may hold the result of a class-``cls`` operation: the operations
        themselves, value moves of such values, and loads from a buffer such a value is
        stored to. A fixpoint (a store may come after the load it feeds, around a loop)."""
        if cls in self._carry:
            return self._carry[cls]
        carry: set[str] = self._carry.setdefault(cls, set())
        stored: list[frozenset] = []
        stores_seen: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, op in self.ops.items():
                if op.opcode == "store":
                    if name not in stores_seen and op.operands and op.operands[0] in carry:
                        stores_seen.add(name)
                        stored.append(self.fn.where(op))
                        changed = True
                    continue
                if name in carry:
                    continue
                if (
                    self.classes.get(name) == cls
                    or (op.opcode in _MOVES and any(o in carry for o in op.values))
                    or (
                        op.opcode == "load"
                        and any(self.fn.may_alias(self.fn.where(op), b) for b in stored)
                    )
                ):
                    carry.add(name)
                    changed = True
        return carry

    def _reaches(self, name: str, target) -> bool:
        """Whether value ``name`` is ``target`` (a name, or any of a set of names) or a value
        move of it."""
        targets = target if isinstance(target, (set, frozenset)) else {target}
        todo, seen = [name], set()
        while todo:
            v = todo.pop()
            if v in targets:
                return True
            op = self.ops.get(v)
            if v in seen or op is None or op.opcode not in _MOVES:
                continue
            seen.add(v)
            todo += op.values
        return False

    def looped(self, cls: str) -> bool:
        """Whether every class-``cls`` chain step of this function extends, through class
        operations and value moves, an accumulator carried around a loop (a ``phi`` one of
        whose incoming values is such a step's result): the chains stayed loops."""
        steps = self.steps(cls)
        carry = self.carriers(cls)
        rooted = {
            n
            for n, op in self.ops.items()
            if op.opcode == "phi" and n in carry and any(v in carry for v in op.values)
        }
        changed = bool(rooted)
        while changed:
            changed = False
            for name, op in self.ops.items():
                if name in rooted or op.opcode in ("load", "store"):
                    continue
                if (op.opcode in _MOVES or self.classes.get(name) == cls) and any(
                    v in rooted for v in op.values
                ):
                    rooted.add(name)
                    changed = True
        names = {id(op): n for n, op in self.ops.items()}
        return bool(steps) and all(names[id(op)] in rooted for op in steps)

    def _destinations(self, step: str, cls: str) -> frozenset | None:
        """The buffers (roots) the chain through ``step`` is stored to, following its value
        forward through value moves and later steps of its class; None when one of them
        cannot be named or the value is never stored."""
        if cls not in self._dest:  # every value at once: a fixpoint, users before defs
            users, dest = self.fn.users(), {}
            changed = True
            while changed:
                changed = False
                for v in reversed(list(self.ops)):
                    roots = set()
                    for u in users.get(v, ()):
                        op = self.ops[u]
                        if op.opcode == "store":
                            roots |= {root for root, _ in self.fn.where(op)}
                        elif op.opcode in _MOVES or self.classes.get(u) == cls:
                            roots |= dest.get(u, set())
                    if roots != dest.get(v, set()):
                        dest[v], changed = roots, True
            self._dest[cls] = dest
        roots = self._dest[cls].get(step)
        if not roots or has_unknown(roots):
            return None
        return frozenset(roots)

    def _phis_behind(self, names, carry) -> set[str]:
        """The loop-carried accumulators (phis that carry a step's value) the operands of
        ``names`` move."""
        found, todo, seen = set(), [v for n in names for v in self.ops[n].values], set()
        while todo:
            v = todo.pop()
            op = self.ops.get(v)
            if v in seen or op is None or op.opcode not in _MOVES:
                continue
            seen.add(v)
            if op.opcode == "phi" and v in carry:
                found.add(v)
            todo += op.values
        return found

    def _one_chain(self, group: list[str], carry) -> bool:
        """One start, at most one loop-carried accumulator, and in every basic block the
        group's steps each extending the one before."""
        others = set(group)
        starts = sum(not any(self._reaches(o, others) for o in self.ops[s].values) for s in group)
        if starts > 1 or len(self._phis_behind(group, carry)) > 1:
            return False
        by_block: dict[int, list[str]] = {}
        for step in group:
            by_block.setdefault(self.ops[step].block, []).append(step)
        for seq in by_block.values():
            for before, step in zip(seq, seq[1:]):
                if not any(self._reaches(o, before) for o in self.ops[step].values):
                    return False
        return True

    def one_at_a_time(self, cls: str) -> bool:
        """Whether every chain of class ``cls`` in this function advances one accumulator
        at a time in program order (see :class:`ChainFacts`). Steps are grouped by the
        buffers their chains are stored to (a reduction block writes its own output buffer;
        two blocks' chains may interleave without either's outputs interleaving); each group
        must have one chain start, at most one loop-carried accumulator, and in every basic
        block its steps must each extend the one before. A chain whose buffer cannot be
        named puts every step in one group."""
        names = {id(op): n for n, op in self.ops.items()}
        steps = [names[id(op)] for op in self.steps(cls)]
        if not steps:
            return False
        carry = self.carriers(cls)
        dests = [self._destinations(s, cls) for s in steps]
        if any(d is None for d in dests):
            return self._one_chain(steps, carry)
        groups: list[tuple[set, list[str]]] = []  # (roots, steps), merged where roots meet
        for step, roots in zip(steps, dests):
            joined = [g for g in groups if g[0] & roots]
            if len(joined) == 1:  # the common case: extend it in place
                joined[0][0].update(roots)
                joined[0][1].append(step)
                continue
            merged = (set(roots).union(*(g[0] for g in joined)),
                      [x for g in joined for x in g[1]] + [step])  # fmt: skip
            groups = [g for g in groups if not g[0] & roots] + [merged]
        position = {step: i for i, step in enumerate(steps)}
        return all(self._one_chain(sorted(g, key=position.get), carry) for _, g in groups)

    def widths_by_buffer(self, cls: str) -> dict[str, int]:
        """The widest possible chain step of class ``cls`` per buffer its chain is stored to
        (``_destinations``), by name; a step whose buffers cannot all be named counts under
        ``"?"`` (it may be any block's)."""
        names = {id(op): n for n, op in self.ops.items()}
        out: dict[str, int] = {}
        for op in self.steps(cls):
            roots = self._destinations(names[id(op)], cls)
            keys = {"?"} if roots is None else {self.fn.root_name(r) for r in roots}
            for key in keys:
                out[key] = max(out.get(key, 0), _step_lanes(op))
        return out

    def joinable(self) -> bool:
        """Whether instruction selection could join two vector floating-point operations of
        this function into one wider instruction: some basic block holds two of the same
        kind (opcode, and callee for a call) neither of which depends on the other. The
        backend selects one basic block at a time and cannot merge an operation with one that
        needs its result, nor scalar operations (it has no SLP). Without such a pair every
        vector operation runs as instructions carrying at most its own lanes."""
        kinds: dict[tuple[int, str], int] = {}  # (block, kind) -> bit mask of ops seen
        ancestors: dict[str, int] = {}  # op -> bit mask of the vector FP ops it depends on
        bit: dict[str, int] = {}
        for name, op in self.ops.items():
            deps = 0
            if op.opcode != "phi":  # a phi's operands come from other blocks (or iterations)
                for v in op.operands:
                    other = self.ops.get(v)
                    if other is not None and other.block == op.block:
                        deps |= ancestors.get(v, 0) | bit.get(v, 0)
            ancestors[name] = deps
            if op.lanes < 2 or not _arithmetic(op):
                continue
            bit[name] = 1 << len(bit)
            key = (op.block, op.text.split("(", 1)[0] if op.opcode == "call" else op.opcode)
            seen = kinds.get(key, 0)
            if seen & ~deps:  # an earlier op of its kind it does not depend on
                return True
            kinds[key] = seen | bit[name]
        return False

    def steps(self, cls: str) -> list[Op]:
        """The possible chain steps of class ``cls`` in this function: its operations with an
        operand that may hold an earlier one's result."""
        if cls not in self._steps:
            carry = self.carriers(cls)
            self._steps[cls] = [op for name, op in self.ops.items()
                                if self.classes.get(name) == cls
                                and any(o in carry for o in op.values)]  # fmt: skip
        return self._steps[cls]


def chain_facts(text: str) -> ChainFacts:
    """:class:`ChainFacts` of a module's optimized LLVM IR (``inspect_source("ll")``)."""
    widths: dict[str, tuple[int, int]] = {}
    reassoc = unfused = False
    parsed = {n: Chains(fn) for n, fn in functions(text).items()}
    single = {n: (fn.one_at_a_time("add"), fn.one_at_a_time("max")) for n, fn in parsed.items()}
    looped = {n: (fn.looped("add"), fn.looped("max")) for n, fn in parsed.items()}
    for name, fn in parsed.items():
        lanes = []
        for cls in ("add", "max"):
            steps = fn.steps(cls)
            lanes.append(max((_step_lanes(op) for op in steps), default=0))
            for op in steps:
                plain = op.opcode in ("fadd", "fsub") or "reduce.fadd" in op.text
                unfused |= cls == "add" and plain
                words = op.text.split()
                reassoc |= "reassoc" in words or "fast" in words
        widths[name] = (lanes[0], lanes[1])
    lambdas = {n for n in parsed if n.startswith(_LAMBDA)}
    order: list[str] = []  # parallel bodies in launch order (first reference in serial code)
    for name, fn in parsed.items():
        if name not in lambdas:
            order += [r for r in fn.fn.refs if r in lambdas and r not in order]
    ordered = set(order) == lambdas
    # Unordered bodies (not expected from TVM): any block may be in any of them, so the
    # "serial" facts are the whole module's and nothing is claimed about interleaving.
    serial = [w for n, w in widths.items() if n not in lambdas or not ordered]
    none = (False, False)
    by_buffer = {n: _by_buffer([fn]) for n, fn in parsed.items()}
    serial_fns = [fn for n, fn in parsed.items() if n not in lambdas or not ordered]
    return ChainFacts(
        add_lanes=max((w[0] for w in widths.values()), default=0),
        max_lanes=max((w[1] for w in widths.values()), default=0),
        reassociates=reassoc,
        unfused=unfused,
        regions=tuple(widths[n] for n in order) if ordered else (),
        serial=(max((w[0] for w in serial), default=0), max((w[1] for w in serial), default=0)),
        single=tuple(single[n] for n in order) if ordered else (),
        serial_single=_serial_only(parsed, lambdas, single) if ordered else none,
        looped=tuple(looped[n] for n in order) if ordered else (),
        serial_looped=_serial_only(parsed, lambdas, looped) if ordered else none,
        buffers=tuple(by_buffer[n] for n in order) if ordered else (),
        serial_buffers=_by_buffer(serial_fns),
        joinable=tuple(parsed[n].joinable() for n in order) if ordered else (),
        serial_joinable=any(fn.joinable() for fn in serial_fns),
    )


def _by_buffer(fns) -> tuple[tuple[str, int, int], ...]:
    """``(buffer, add, max)`` widths of the steps of these functions by buffer (see
    ``Chains.widths_by_buffer``), sorted by name."""
    add: dict[str, int] = {}
    mx: dict[str, int] = {}
    for fn in fns:
        for table, cls in ((add, "add"), (mx, "max")):
            for name, lanes in fn.widths_by_buffer(cls).items():
                table[name] = max(table.get(name, 0), lanes)
    return tuple((n, add.get(n, 0), mx.get(n, 0)) for n in sorted(set(add) | set(mx)))


def _serial_only(parsed, lambdas, facts) -> tuple[bool, bool]:
    """A per-function fact of the serial code: it holds when one function holds all its
    chains of the class and the fact holds there."""
    out = []
    for cls, index in (("add", 0), ("max", 1)):
        holders = [n for n, fn in parsed.items() if n not in lambdas and fn.steps(cls)]
        out.append(len(holders) == 1 and facts[holders[0]][index])
    return (out[0], out[1])


_FP_ARITH = ("fadd", "fsub", "fmul", "fdiv", "frem")


def _arithmetic(op: Op) -> bool:
    """Floating-point arithmetic an instruction carries out: the binary operators, calls of
    LLVM's intrinsics and any other call (a vector math call), and selects (``max``)."""
    return op.opcode in _FP_ARITH or op.opcode in ("call", "select")


def _step_lanes(op: Op) -> int:
    """Elements one operation processes: a vector reduction counts its vector's elements."""
    if op.opcode == "call" and "vector.reduce" in op.text:
        widths = [int(n) for n in FP_TYPE.findall(op.text) if n]
        return max(widths, default=1)
    return max(op.lanes, 1)
