"""Stage 2's arms on reduction chains as the built code runs them: each block's chain width,
accumulators and loops read off the optimized LLVM IR (:mod:`tvm_ext.built_code.ir_chains`), the
policy's dependency arm recomputed with them (``dependency@chain``) and the chain steps' own
issue slots (``compute@chain``). The stage-2 cost that assembles them is
:mod:`tvm_ext.cost.post_build`; the premises named ``1.`` are those of
:mod:`tvm_ext.cost.code_arms`.

The dependency arm at the code's chain width
-------------------------------------------
The policy's dependency arm lets one step of a reduction chain carry up to ``max_lanes``
outputs, as many as LLVM could vectorize. The module's optimized LLVM IR shows the widest
operation that can be a step of a sum/multiply-add chain and of a max/min chain
(:func:`tvm_ext.built_code.ir_chains.chain_facts`, whose docstring argues why no machine step of
the chain is wider); the arms recomputed with those widths (``chain_lanes_add``,
``chain_lanes_max``) are kept as ``<arm>@chain`` where they rose. This needs none of 1.'s
premises about calls or dtypes: it counts the chain's own steps, which are the module's own
operations. When a multiply-add chain may step on a plain ``fadd`` (the backend might not fuse
it) the step is priced at an add's latency. A chain step that allows reassociation
(fast-math flags) voids it.

The chain steps' issue slots (``compute@chain``)
-----------------------------------------------
Each distinct instance of a reduction block of class ``add`` (``acc + x`` or ``acc + x * y``)
is one step of its output's chain (a chain recomputed by a loop around it that the code shows
stayed a loop runs its steps again each time, as for the dependency arm). Every such step is
one of the possible chain steps the IR reader counts, and is carried out by its own machine
instruction (no x86 instruction does two dependent adds; merging two steps into one would
reassociate, which voids the facts), of at most the step width ``w`` the reader found for the
block's class in the block's parallel body. So the block issues at least ``steps / w``
instructions, each taking a floating-point pipe's issue slot (at most ``FP_PIPES`` a cycle on
a core); when every add-class step of the module is an ``llvm.fmuladd``/``llvm.fma``
(``chain_unfused`` false) on a CPU the tables name (all have FMA3, so the backend selects each
as one FMA) they need the FMA pipes (at most ``fma_lanes_per_cycle(cpu, w)`` fp32 lanes a
cycle; other dtypes at most ``FMA_PIPES`` instructions). The busiest core takes a block's
share ``1 / cores_used``; the blocks' slots on one kind of pipe add up; the clock is the
fastest boost. This arm counts the chains' own instructions, so calls elsewhere in the module
(``expf``) do not void it: it bounds the candidate whose arithmetic the code runs narrower in
the reduction than elsewhere (a vector write-back around a scalar multiply-add, say), where
``machine_code.compute`` must take the module's widest instruction.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Mapping, NamedTuple

from tvm_ext.built_code.machine_code import CodeFacts
from tvm_ext.hardware.isa import (
    FMA_PIPES,
    FP_PIPES,
    fma_lanes_per_cycle,
    max_boost_hz,
    named,
)

from .code_arms import FLOAT_DTYPES
from .features import CandidateFeatures


class BuiltChain(NamedTuple):
    """How the built code runs one block's reduction chain (see :func:`chain_widths`)."""

    lanes: int  # the most outputs one step carries (0: not known)
    single: bool  # its function's chains of that class run one accumulator at a time
    looped: bool  # its function's chains of that class stayed loops (none can be hoisted)


def chain_widths(c: CandidateFeatures, code: CodeFacts) -> list[BuiltChain]:
    """Per block of ``c``, how the built code runs its reduction chain
    (:class:`~.ir_chains.ChainFacts`). A block reads its own parallel body function
    when the module has exactly one per parallel region of the TIR (``BlockFacts.region``, in
    launch order), else the module's widest step of its class (and nothing more). In its own
    body, the steps whose chain is stored to its own buffer, or to one the IR does not name as
    another block's (every real step of its chain is stored to its buffer in the end), when
    there are any (:func:`_own_width`); else all the body's steps of its class."""
    unknown = BuiltChain(0, False, False)
    if code.chain_add_lanes < 0 or code.chain_reassociates:
        return [unknown] * len(c.blocks)
    regions = {b.region for b in c.blocks if b.region >= 0}
    per_region = regions == set(range(len(code.chain_regions)))
    known = per_region and len(code.chain_single) == len(code.chain_looped) == len(
        code.chain_regions
    )
    by_buffer = per_region and len(code.chain_buffers) == len(code.chain_regions)
    outputs = {b.output for b in c.blocks if b.output}
    joins = len(code.chain_joinable) == len(code.chain_regions)
    anywhere = not joins or code.chain_serial_joinable or any(code.chain_joinable)
    out = []
    for b in c.blocks:
        cls = 1 if b.chain_op == "max" else 0
        widest, single, looped = (code.chain_add_lanes, code.chain_max_lanes)[cls], False, False
        joinable = anywhere
        if per_region:
            own = (code.chain_regions[b.region] if b.region >= 0 else code.chain_serial)[cls]
            if by_buffer and b.output:
                own = _own_width(b, cls, outputs, code) or own
            widest = own if own >= 1 else widest  # none found there: the module's widest
            if joins and own >= 1:
                joinable = bool(code.chain_joinable[b.region] if b.region >= 0
                                else code.chain_serial_joinable)  # fmt: skip
            if known and own >= 1:
                inside = b.region >= 0
                single = bool((code.chain_single[b.region] if inside
                               else code.chain_serial_single)[cls])  # fmt: skip
                looped = bool((code.chain_looped[b.region] if inside
                               else code.chain_serial_looped)[cls])  # fmt: skip
        if widest > 1 and joinable:  # a vector step may have been joined with another
            widest = max(widest, code.fp_lanes)
        out.append(BuiltChain(max(widest, 0), single, looped))
    return out


def _own_width(b, cls: int, outputs: set[str], code: CodeFacts) -> int:
    """The widest step of block ``b``'s class among the steps of its parallel body whose chain
    is stored to ``b``'s own buffer, or to a buffer the IR does not name as exactly one of the
    candidate's blocks' (``"?"``, a name no block writes, or one that could be two: the step
    may be ``b``'s); 0 when none is (``b``'s chain was then not found by buffer). LLVM keeps
    TVM's buffer names but makes them unique in a function with a number at the end
    (``row_sum.rf1``): a name is a buffer's when it is that name, possibly so numbered."""
    table = code.chain_buffers[b.region] if b.region >= 0 else code.chain_serial_buffers

    def owner(name: str) -> str | None:
        found = {o for o in outputs if name == o or (name.startswith(o)
                                                     and name[len(o):].isdigit())}  # fmt: skip
        return found.pop() if len(found) == 1 else None

    widths = [row[1 + cls] for row in table if owner(row[0]) in (b.output, None)]
    return max(widths, default=0)


def _as_built(b, chain: BuiltChain):
    """Block ``b``'s facts as the built code runs its chain: at most ``chain.lanes`` lanes a
    step; one output vector at a time with no copies of its loop side by side (``single``);
    run again for each repeat around it (``looped``: nothing hoisted it)."""
    if chain.lanes < 1 or not b.chain_op:
        return b
    b = replace(b, lanes_bound=min(b.lanes_bound or b.possible_lanes, chain.lanes))
    if chain.single:
        b = replace(b, independent_outputs=1, body_instances=0)
    if chain.looped:
        b = replace(b, chain_repeats=max(b.chain_repeats, b.loop_repeats))
    return b


def chain_step_arm(c: CandidateFeatures, code: CodeFacts, cpu: str,
                   chains: list[BuiltChain] | None = None) -> float | None:  # fmt: skip
    """Seconds the reduction chains' own instructions take to issue (``compute@chain`` in
    the module docstring), or None when no add-class chain's width is known. ``chains``: the
    blocks' :func:`chain_widths`, when already read (of the whole candidate)."""
    fused = named(cpu) and not code.chain_unfused
    fma_cycles = fp_cycles = 0.0
    chains = chain_widths(c, code) if chains is None else chains
    for b, chain in zip(c.blocks, chains):
        if chain.lanes < 1 or b.chain_op not in ("add", "fma") or b.reduction_length <= 1:
            continue
        if b.tensorized or b.dtype not in FLOAT_DTYPES:
            continue
        repeats = _as_built(b, chain).chain_repeats
        steps = min(b.instances, b.unique_instances * repeats) / b.cores_used
        instructions = steps / chain.lanes
        fp_cycles += instructions / FP_PIPES
        if fused and b.chain_op == "fma":
            per_cycle = (fma_lanes_per_cycle(cpu, chain.lanes) / chain.lanes
                         if b.dtype == "float32" else FMA_PIPES)  # fmt: skip
            fma_cycles += instructions / per_cycle
    cycles = max(fma_cycles, fp_cycles)
    return cycles / max_boost_hz(cpu) if cycles > 0 else None


def chain_arms(policy, c: CandidateFeatures, code: CodeFacts, coefficients: Mapping[str, float],
               chains: list[BuiltChain] | None = None) -> dict[str, float]:  # fmt: skip
    """The policy's ``dependency`` arm recomputed with each block's chain as the built code
    runs it (:func:`chain_widths`, or ``chains`` when already read), named
    ``dependency@chain`` (:func:`post_build_cost` keeps it where it rose above stage 1's);
    empty when the IR was not read, a chain step may be reassociated, or the code narrows
    nothing."""
    arms = getattr(policy, "arms", None)
    chains = chain_widths(c, code) if chains is None else chains
    if arms is None or not any(chain.lanes for chain in chains):
        return {}
    blocks = tuple(_as_built(b, chain) for b, chain in zip(c.blocks, chains))
    k = dict(coefficients)
    if code.chain_unfused and k.get("add_step"):
        # a multiply-add chain may step on a plain add: price its step as an add's
        k["chain_step"] = min(k.get("chain_step") or math.inf, k["add_step"])
    after = arms(replace(c, blocks=blocks), k).get("dependency")
    return {} if after is None else {"dependency@chain": after}
