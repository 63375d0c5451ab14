"""Reading a built kernel's optimized LLVM IR (as TVM 0.27's LLVM prints it): its functions,
their operations, and the buffers their pointers may point into.

Buffers are told apart by their base pointer: a function argument, an ``alloca``, a call's
result, or a pointer loaded from a constant offset of one of these (TVM passes buffers to a
parallel body in a closure struct); two accesses may alias unless their bases differ, and a
base this reader cannot name aliases everything. TVM declares its buffers ``noalias``
(``tirx.noalias``), so distinct bases are distinct buffers. A construct the reader does not
know makes it more conservative, never less (an unknown pointer aliases everything; an
operand it cannot parse is not a value move). What the IR says about reduction chains is
:mod:`tvm_ext.built_code.ir_chains`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FUNC = re.compile(r"^define\b[^@]*@(\"[^\"]+\"|[\w.$-]+)\(")
# An instruction that defines a value (its name, the rest); a value's name.
DEFINITION = re.compile(r"^\s*(%[\w.$-]+|%\"[^\"]+\")\s*=\s*(.*)$")
VALUE = re.compile(r"%[\w.$-]+|%\"[^\"]+\"")
FP_TYPE = re.compile(r"<(\d+)\s+x\s+(?:half|bfloat|float|double)>|\b(?:half|bfloat|float|double)\b")
_PHI_VALUE = re.compile(r"\[\s*([^,\]]+),")
_FLAGS = ("fast", "reassoc", "nnan", "ninf", "nsz", "arcp", "contract", "afn")
UNKNOWN = frozenset({("?", None)})
_LABEL = re.compile(r"^[\w.$-]+:(\s|$)")
_GLOBAL = re.compile(r"@([\w.$-]+)")


@dataclass
class Op:
    """One operation: its opcode, the elements of its first FP type, its operands."""

    opcode: str
    lanes: int
    operands: list[str]
    text: str
    block: int = 0  # the basic block it is in (numbered in text order)

    @property
    def values(self) -> list[str]:
        """The operands whose values it passes on or computes with (a select's condition
        is not one of them)."""
        return self.operands[1:] if self.opcode == "select" else self.operands


def _lanes(text: str) -> int:
    """Elements of the first floating-point type in ``text`` (0: none)."""
    m = FP_TYPE.search(text)
    if m is None:
        return 0
    return int(m.group(1)) if m.group(1) else 1


def _operands(opcode: str, rest: str) -> list[str]:
    if opcode == "phi":
        return [v.strip() for v in _PHI_VALUE.findall(rest) if v.strip().startswith("%")]
    if opcode == "call":
        return VALUE.findall(rest.split("(", 1)[-1])
    return VALUE.findall(rest)


_BYTES = {"i8": 1, "i16": 2, "i32": 4, "i64": 8, "ptr": 8, "half": 2, "bfloat": 2,
          "float": 4, "double": 8}  # fmt: skip
_GEP = re.compile(
    r"^getelementptr(?:\s+(?:inbounds|nuw|nusw|inrange\(\S+\)))*\s+(.+?),\s*ptr\s+([^\s,]+)\s*,?\s*(.*)$"
)
_VEC_TYPE = re.compile(r"^<(\d+)\s+x\s+(\w+)>$")


def _size(type_text: str) -> int | None:
    if type_text in _BYTES:
        return _BYTES[type_text]
    m = _VEC_TYPE.match(type_text)
    if m is not None and m.group(2) in _BYTES:
        return int(m.group(1)) * _BYTES[m.group(2)]
    return None


def _gep_bytes(text: str, base: str) -> int | None:
    """The constant byte offset of a one-index ``getelementptr`` off ``base`` (None: a
    variable index, or a type this reader does not size)."""
    m = _GEP.match(text)
    if m is None or m.group(2) != base:
        return None
    indices = [i.strip() for i in m.group(3).split(",") if i.strip()]
    size = _size(m.group(1).strip())
    if size is None or len(indices) != 1:
        return None
    words = indices[0].split()
    if len(words) != 2 or not re.fullmatch(r"-?\d+", words[1]):
        return None
    return size * int(words[1])


def has_unknown(roots) -> bool:
    for root in roots:
        if root == "?" or (isinstance(root, tuple) and has_unknown([root[1]])):
            return True
    return False


def _parse(body: list[str]) -> dict[str, Op]:
    ops: dict[str, Op] = {}
    stores = block = 0
    for line in body:
        line = re.split(r",\s*!", line, maxsplit=1)[0]  # metadata attachments
        if _LABEL.match(line):
            block += 1
            continue
        m = DEFINITION.match(line)
        if m is not None:
            name, rest = m.groups()
        elif line.strip().startswith("store "):
            name, rest = f"%<store{stores}>", line.strip()
            stores += 1
        else:
            continue
        words = rest.split()
        if words and words[0] in ("tail", "musttail", "notail"):
            words = words[1:]
        opcode = words[0] if words else ""
        typed = " ".join(w for w in words[1:] if w not in _FLAGS)
        ops[name] = Op(opcode, _lanes(typed), _operands(opcode, typed), " ".join(words), block)
    return ops


def _widen(keys) -> frozenset:
    """One key per root: a root reached at several offsets may be anywhere in its buffer
    (this also ends the fixpoint on a pointer advanced around a loop)."""
    by_root: dict = {}
    for root, off in keys:
        by_root[root] = off if by_root.get(root, off) == off else None
    return frozenset(by_root.items())


class Function:
    """One function of the module: its operations by name, its parameters, the globals it
    refers to, and what its pointers may point into."""

    def __init__(self, args: list[str], body: list[str]):
        self.args = set(args)
        self.refs = [r for line in body for r in _GLOBAL.findall(line.split(", !", 1)[0])]
        self.ops = _parse(body)
        self._bases: dict[str, frozenset] | None = None
        self._user_map: dict[str, list[str]] | None = None
        self._loaded: dict | None = None

    def _base_of(self, op: Op, name: str, known: dict) -> frozenset:
        def of(operand: str) -> frozenset:
            if operand in self.args:
                return frozenset({(operand, 0)})
            if operand not in self.ops:
                return UNKNOWN  # a global, or a name this reader did not parse
            return known.get(operand, frozenset())  # not reached yet (a loop's back edge)

        if op.opcode == "getelementptr":
            if not op.operands:
                return UNKNOWN
            step = _gep_bytes(op.text, op.operands[0])
            return frozenset((root, off + step if off is not None and step is not None else None)
                             for root, off in of(op.operands[0]))  # fmt: skip
        if op.opcode in ("bitcast", "addrspacecast", "phi", "select", "freeze"):
            out: set = set()
            for operand in op.values:
                out |= of(operand)
            return frozenset(out)
        if op.opcode == "load":  # a pointer read from memory: named by where it was read
            if not op.operands:
                return UNKNOWN
            return frozenset((("*", root, off), 0) for root, off in of(op.operands[-1]))
        if op.opcode in ("alloca", "call"):
            return frozenset({(name, 0)})
        return UNKNOWN

    def bases(self) -> dict[str, frozenset]:
        """For every value, the buffers it may point into, as ``(root, byte offset)`` pairs
        (offset None: anywhere). Roots are an argument, an ``alloca``, a call's result, or
        ``("*", root, offset)`` for a pointer loaded from a known place; ``"?"``: a pointer
        this reader cannot name, which aliases everything. A fixpoint over the function (phis
        reach back around loops)."""
        if self._bases is None:
            known: dict[str, frozenset] = {}
            changed = True
            while changed:
                changed = False
                for name, op in self.ops.items():
                    new = _widen(self._base_of(op, name, known) | known.get(name, frozenset()))
                    if new != known.get(name):
                        known[name], changed = new, True
            self._bases = known
        return self._bases

    def where(self, op: Op) -> frozenset:
        """The buffers a load (last operand) or a store (second operand) accesses."""
        index = 1 if op.opcode == "store" else -1
        if len(op.operands) < (2 if op.opcode == "store" else 1):
            return UNKNOWN
        pointer = op.operands[index]
        if pointer in self.args:
            return frozenset({(pointer, 0)})
        return self.bases().get(pointer, UNKNOWN) or UNKNOWN

    @staticmethod
    def may_alias(a: frozenset, b: frozenset) -> bool:
        """Two accesses may touch the same memory unless every pair of roots differs (a root
        is a whole buffer: offsets inside it are not compared)."""
        roots_a = {root for root, _ in a}
        roots_b = {root for root, _ in b}
        return has_unknown(roots_a) or has_unknown(roots_b) or bool(roots_a & roots_b)

    def users(self) -> dict[str, list[str]]:
        """For every value, the operations that take it as a value operand (a store: the
        value it stores)."""
        if self._user_map is None:
            users: dict[str, list[str]] = {}
            for name, op in self.ops.items():
                operands = op.operands[:1] if op.opcode == "store" else op.values
                for v in operands:
                    users.setdefault(v, []).append(name)
            self._user_map = users
        return self._user_map

    def root_name(self, root) -> str:
        """The buffer a root is, by the name TVM gave its pointer (a parameter, an
        allocation's result, or every load of a pointer from the same place: TVM names the
        buffers a parallel body reads from its closure); ``"?"`` when it has no single name."""
        if isinstance(root, tuple) and root and root[0] == "*":
            if self._loaded is None:  # every pointer load's name, by where it reads from
                self._loaded = {}
                for n, op in self.ops.items():
                    if op.opcode == "load":
                        for r, _ in self.bases().get(n, ()):
                            self._loaded.setdefault(r, set()).add(n)
            names = self._loaded.get(root, set())
        elif isinstance(root, str) and root != "?":
            names = {root}
        else:
            names = set()
        if len(names) != 1:
            return "?"
        name = next(iter(names)).lstrip("%").strip('"')
        return name if name and not name.isdigit() else "?"


def function_bodies(text: str) -> dict[str, tuple[list[str], list[str]]]:
    """The module's defined functions: name -> (parameter names, body lines)."""
    out, name, args, body = {}, None, [], []
    for line in text.splitlines():
        if name is None:
            m = _FUNC.match(line)
            if m is not None:
                name, body = m.group(1), []
                args = VALUE.findall(line[m.end() :])
            continue
        if line.startswith("}"):
            out[name] = (args, body)
            name = None
            continue
        body.append(line)
    return out


def functions(text: str) -> dict[str, "Function"]:
    """The module's defined functions, parsed."""
    return {name: Function(args, body) for name, (args, body) in function_bodies(text).items()}
