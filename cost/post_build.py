"""Stage 2 of the admissible cut: a lower bound read off the built machine code.

Stage 1 (:class:`~tvm_ext.cost.roofline.RooflinePolicy`) bounds a candidate from its TIR,
before it is built; it must assume every loop LLVM could vectorize runs at the machine's full
vector width. After the build, the code says which width it uses
(:func:`tvm_ext.facts.machine_code.read_assembly`), and a candidate whose arithmetic is all
128-bit or scalar gets a bound 4 to 16 times higher. The stage-2 bound is the largest of
stage 1's arms, the arm below, and the policy's own arms recomputed with the code's width
(``<arm>@<W>lanes``, see the end); it is never below the stage-1 bound.

The arm ``machine_code.compute``, and why no run of the candidate can beat it
------------------------------------------------------------------------------
Let ``W`` be the most elements any floating-point arithmetic instruction of the built module
processes (``CodeFacts.fp_lanes``: an instruction we do not know to be free of arithmetic
counts, so ``W`` cannot read low). Then:

1. Every FLOP the candidate's TIR counts (stage 1's per-block count of distinct instances,
   the same numbers stage 1 prices) is done by a floating-point arithmetic instruction of this
   module: the kernel is floating point (``float32``/``float64``/``float16``), no block is
   tensorized, the code holds no dot-product instruction (VNNI, AVX512-BF16, AMX: several
   multiply-adds per lane), no vector integer arithmetic wider than ``W`` (it could compute a
   counted expression), and it calls nothing but its own functions and TVM's runtime
   (threads, workspaces) or ``memcpy``/``memset``, and no indirect call could reach anything
   else (:mod:`tvm_ext.facts.machine_code`). Otherwise stage 2 adds no arm: a call to
   ``expf`` (softmax without fast math) may do arithmetic we cannot see.
2. An instruction does at most ``W`` lanes; an FMA counts 2 FLOPs a lane, any other
   arithmetic instruction (multiply, add, min/max, divide, ...) 1.
3. A core completes at most :func:`~tvm_ext.facts.isa.fma_lanes_per_cycle` ``(cpu, W)``
   multiply or FMA lanes per cycle at ``W``-wide vectors (``FMA_PIPES`` pipes, each at most
   its datapath wide: Zen 4 runs a 512-bit FMA through two 256-bit halves, so a ``ymm`` FMA
   still issues at 2 a cycle; a CPU the tables do not name may be an E-core with four
   128-bit pipes) and issues at most ``FP_PIPES`` floating-point arithmetic instructions in
   all (:mod:`tvm_ext.facts.isa`). So a core does at most ``2 x fma_lanes_per_cycle`` FLOPs a
   cycle when every arithmetic instruction is an FMA or a multiply, else at most that plus
   ``(FP_PIPES - FMA_PIPES) x W`` (the remaining pipes filled with adds).
4. No core clocks above the fastest boost of its microarchitecture's fastest part
   (:func:`tvm_ext.facts.isa.max_boost_hz`, keyed by the machine model's CPU name).
5. A block's FLOPs are shared among at most the cores its parallel loops can occupy (stage 1's
   ``cores_used``: TVM's runtime splits a parallel loop of extent P statically over the
   threads, so ``P / ceil(P / cores)``), and blocks run one after the other on the same
   cores, so their times add.

Hence ``sum over blocks of FLOPs_b / (cores_used_b x per-cycle FLOPs x max boost)`` is no
more than the time of any run. No figure here is probed: nothing a busy host does can make
the arm read high.

The ports' arms (``machine_code.loads``, ``.load_bytes``, ``.stores``, ``.store_bytes``,
``.vector_ops``)
---------------------------------------------------------------------------------------------
Under 1.'s premises every counted FLOP is done by an arithmetic instruction of the module, and
so inside one of its basic blocks. :func:`tvm_ext.facts.machine_blocks.block_costs` reads, per
block, the most FLOPs one run of it can do (its capacity: arithmetic at 2.'s count; logic and
compares, which could carry out a sign operation or a max, at 16-bit lanes) and what the run
asks of the core: load slots (a gather under an all-ones mask one per element), bytes loaded by
full-width vector loads, store slots and bytes, and instructions that occupy a vector pipe. A
single-block counted loop whose trip count the code states is priced with the block that
enters it (and the one it exits to, when nothing else enters either); the blocks an entry
function runs at most once per call are set apart, with their capacity ``once_cap``
(:mod:`tvm_ext.facts.asm_loops`). Whatever blocks run how often, a core that does ``F``
counted FLOPs asks at least ``per_flop x (F - once_cap)`` of each, with ``per_flop`` the
smallest demand-to-capacity ratio over those groups (the docstring of
:mod:`tvm_ext.facts.machine_blocks`). A core serves at most
:func:`tvm_ext.facts.isa.port_limits` of each per cycle (four loads, 128 bytes loaded, two
stores, 128 bytes stored, four computing vector instructions on any core the tables name; a
gather's elements each take a load slot) at no more than the fastest boost; the busiest core
takes its blocks' shares as in 5. So ``per_flop x (sum over blocks of F_b / cores_used_b -
once_cap) / (limit x max boost)`` bounds every run. Only what the code shows is counted: a
load or store of unknown width counts no bytes; moves between registers and zeroing idioms (a
renamer may eliminate them) and instructions whose pipe differs by core (conversions, inserts,
extracts, broadcasts, gathers, mask instructions) count no pipe. A general-register ``xor``/
``and``/``or``/``bt*`` with a float's sign mask (a FLOP done outside the vector unit) voids
the arms. They read a hot loop that is load-bound (a spilled register tile reloaded every
step, a column gathered element by element) where ``machine_code.compute`` sees only FMAs.

The dependency arm at the code's chain width
-------------------------------------------
The policy's dependency arm lets one step of a reduction chain carry up to ``max_lanes``
outputs, as many as LLVM could vectorize. The module's optimized LLVM IR shows the widest
operation that can be a step of a sum/multiply-add chain and of a max/min chain
(:func:`tvm_ext.facts.ir_chains.chain_facts`, whose docstring argues why no machine step of
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

The phases with the built code's arms (``phases@code``)
------------------------------------------------------
The policy's ``phases`` arm (parallel bodies run one after the other: the sum over phases of
each phase's largest arm) with each phase's stage-2 arms beside its stage-1 ones, each
computed over that phase's blocks alone (:func:`phases_arm`): every arm here is a sum or a
maximum over blocks of what those blocks do themselves, so it bounds the phase's stretch of
time.

The policy's arms at the code's width
-------------------------------------
Under the same premises no instruction of the candidate does arithmetic on more than ``W``
lanes, which is what :class:`~tvm_ext.cost.roofline.RooflinePolicy` reads its ``max_lanes``
coefficient as (its per-block compute arm prices ``min(lanes, max_lanes)`` at the pipes'
datapath width; its dependency arm lets a chain carry at most ``max_lanes`` outputs). So
``policy.arms(features, {**coefficients, "max_lanes": W})`` are bounds too, each kept (as
``<arm>@<W>lanes``) when it is above stage 1's. They are used only when every block's FLOPs
were counted: the policy's fallback for uncounted blocks scales the register-wide peak by
``max_lanes / vector_lanes``, which a core with a datapath narrower than its registers does
not obey.
"""

from __future__ import annotations

import math
from dataclasses import replace
from types import MappingProxyType
from typing import Mapping, NamedTuple

from tvm_ext.base.errors import PolicyError
from tvm_ext.facts.isa import (
    FMA_PIPES,
    FP_PIPES,
    MAX_BOOST_GHZ,
    fma_lanes_per_cycle,
    max_boost_hz,
    port_limits,
)
from tvm_ext.facts.machine_blocks import RESOURCES
from tvm_ext.facts.machine_code import CodeFacts

from .features import CandidateFeatures
from .policy import Cost

ARM = "machine_code.compute"
FLOAT_DTYPES = ("float32", "float64", "float16")


def flops_per_cycle(code: CodeFacts, cpu: str) -> float:
    """The most FLOPs one core of ``cpu`` does per cycle with this code's widths and
    instruction mix (3. of the proof)."""
    adds = 0 if code.fma_only else (FP_PIPES - FMA_PIPES) * code.fp_lanes
    return 2.0 * fma_lanes_per_cycle(cpu, code.fp_lanes) + adds


def why_no_arm(c: CandidateFeatures, code: CodeFacts) -> str | None:
    """Why stage 2 cannot bound this candidate (the premises of 1.), or None when it can."""
    if c.target_kind != "llvm":
        return f"a {c.target_kind} candidate"
    if c.dtype not in FLOAT_DTYPES:
        return f"dtype {c.dtype}: its FLOPs may run in integer or dot-product instructions"
    if not c.blocks and c.flops is None:
        return "no FLOP count"
    if any(b.tensorized for b in c.blocks):
        return "a tensorized block"
    if code.dot:
        return f"dot-product instructions ({', '.join(code.dot)})"
    if code.unknown_calls:
        return f"calls {', '.join(code.unknown_calls)}"
    if code.fp_lanes < 1:
        return "no floating-point arithmetic in the code"
    if code.int_lanes > code.fp_lanes:
        return f"vector integer arithmetic {code.int_lanes} lanes wide"
    return None


def core_flops(c: CandidateFeatures) -> float | None:
    """The FLOPs the busiest core must do (5. of the proof): each block's counted FLOPs over
    the cores its parallel loops can occupy, summed; None without a count."""
    counted = [b for b in c.blocks if b.unique_flops is not None]
    if c.blocks and len(counted) == len(c.blocks):
        return sum(b.unique_flops / b.cores_used for b in counted)
    if c.flops is None:
        return None
    opaque = [b.cores_used for b in c.blocks if b.unique_flops is None]
    return c.flops / (max(opaque) if opaque else float(c.cores))


def machine_code_arm(c: CandidateFeatures, code: CodeFacts, cpu: str) -> float | None:
    """Seconds no run of the built candidate can beat (the module docstring's proof), or None
    when its premises do not hold (:func:`why_no_arm`)."""
    if why_no_arm(c, code) is not None:
        return None
    work = core_flops(c)
    return None if work is None else work / (flops_per_cycle(code, cpu) * max_boost_hz(cpu))


def port_arms(c: CandidateFeatures, code: CodeFacts, cpu: str) -> dict[str, float]:
    """The ports' arms (``machine_code.loads``, ``.load_bytes``, ``.stores``,
    ``.store_bytes``, ``.vector_ops``: see the module docstring), empty when their premises
    do not hold."""
    if not code.per_flop or code.gpr_sign or why_no_arm(c, code) is not None:
        return {}
    work = core_flops(c)
    if work is None:
        return {}
    work = max(0.0, work - code.once_cap)  # the blocks that run once may do these on a core
    hz = max_boost_hz(cpu)
    return {f"machine_code.{name}": ratio * work / (limit * hz)
            for name, ratio, limit in zip(RESOURCES, code.per_flop, port_limits(cpu))
            if ratio > 0}  # fmt: skip


def capped_arms(policy, c: CandidateFeatures, code: CodeFacts,
                coefficients: Mapping[str, float]) -> dict[str, float]:  # fmt: skip
    """The policy's arms recomputed with ``max_lanes`` = the code's width (see the module
    docstring), named ``<arm>@<W>lanes``; empty when the premises do not hold."""
    arms = getattr(policy, "arms", None)
    lanes = coefficients.get("max_lanes")
    counted = c.blocks and all(b.unique_flops is not None for b in c.blocks)
    if arms is None or not lanes or not counted or code.fp_lanes >= lanes:
        return {}
    if why_no_arm(c, code) is not None:
        return {}
    capped = arms(c, {**coefficients, "max_lanes": float(code.fp_lanes)})
    return {f"{name}@{code.fp_lanes}lanes": value for name, value in capped.items()}


class BuiltChain(NamedTuple):
    """How the built code runs one block's reduction chain (see :func:`chain_widths`)."""

    lanes: int  # the most outputs one step carries (0: not known)
    single: bool  # its function's chains of that class run one accumulator at a time
    looped: bool  # its function's chains of that class stayed loops (none can be hoisted)


def chain_widths(c: CandidateFeatures, code: CodeFacts) -> list[BuiltChain]:
    """Per block of ``c``, how the built code runs its reduction chain
    (:class:`~tvm_ext.facts.ir_chains.ChainFacts`). A block reads its own parallel body function
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
    fused = cpu in MAX_BOOST_GHZ and not code.chain_unfused
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


_PER_BLOCK = ("compute", "issue", "dependency", ARM)  # arms that bound a set of blocks alone


def phases_arm(policy, c: CandidateFeatures, code: CodeFacts, cpu: str,
               coefficients: Mapping[str, float]) -> float | None:  # fmt: skip
    """The policy's ``phases`` arm with each phase's stage-2 arms beside its stage-1 arms: the
    sum over phases (parallel bodies; the serial code) of the largest arm of that phase's
    blocks alone (see ``phases`` in :mod:`tvm_ext.cost.roofline`: the phases take disjoint
    stretches of time). Each stage-2 arm here is a sum or a maximum over blocks, so it bounds
    any set of blocks by their own work; None with fewer than two phases."""
    phase_arms = getattr(policy, "phase_arms", None)
    if phase_arms is None:
        return None
    stage1 = phase_arms(c, coefficients)
    if len(stage1) < 2:
        return None
    chains = chain_widths(c, code)
    total = 0.0
    for region, arms in stage1.items():
        index = [i for i, b in enumerate(c.blocks) if b.region == region]
        sub = replace(c, blocks=tuple(c.blocks[i] for i in index))
        own = [chains[i] for i in index]
        best = max(arms.values(), default=0.0)
        if all(b.unique_flops is not None for b in sub.blocks):
            best = max(best, machine_code_arm(sub, code, cpu) or 0.0,
                       *port_arms(sub, code, cpu).values())  # fmt: skip
            capped = capped_arms(policy, sub, code, coefficients)
            best = max([best] + [t for name, t in capped.items()
                                 if name.split("@")[0] in _PER_BLOCK])  # fmt: skip
        best = max(best, chain_step_arm(sub, code, cpu, own) or 0.0)
        best = max([best] + list(chain_arms(policy, sub, code, coefficients, own).values()))
        total += best
    return total


def post_build_cost(
    stage1: Cost,
    c: CandidateFeatures,
    code: CodeFacts,
    cpu: str,
    policy=None,
    coefficients: Mapping[str, float] | None = None,
) -> Cost:
    """The stage-2 cost: stage 1's arms, :data:`ARM` and (with ``policy`` and its
    ``coefficients``) the policy's arms at the code's width; the bound is their maximum, so it
    is never below stage 1's. Without a stage-1 bound (no machine model) nothing changes."""
    if stage1.lower_bound_s is None:
        return stage1
    new = {}
    arm = machine_code_arm(c, code, cpu)
    if arm is not None:
        new[ARM] = arm
    new |= port_arms(c, code, cpu)
    steps = chain_step_arm(c, code, cpu)
    if steps is not None and steps > stage1.arms.get("compute", 0.0):
        new["compute@chain"] = steps
    if policy is not None and coefficients is not None:
        narrowed = capped_arms(policy, c, code, coefficients)
        narrowed |= chain_arms(policy, c, code, coefficients)
        phases = phases_arm(policy, c, code, cpu, coefficients)
        if phases is not None:
            narrowed["phases@code"] = phases
        for name, value in narrowed.items():
            if value > stage1.arms.get(name.split("@")[0], 0.0):
                new[name] = value
    for name, value in new.items():  # a policy's number is checked, never clamped
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
            label = type(policy).__name__ if policy is not None else "post_build"
            raise PolicyError(
                f"{label} stage-2 arm {name}={value!r}: must be a finite number >= 0",
                policy=label,
            )
    if not new:
        return stage1
    arms = dict(stage1.arms) | new
    top = max(new, key=new.get)
    bound = max(stage1.lower_bound_s, new[top])
    binding = top if new[top] > stage1.lower_bound_s else stage1.binding
    return Cost(stage1.score_s, bound, binding, MappingProxyType(arms), stage1.violations)


def evaluate_built(policy, sch, target=None, *, machine=None, workload=None):
    """Both stages for one schedule: build it for ``target`` as MetaSchedule's builder does,
    read its machine code; returns (stage-1 cost, stage-2 cost, :class:`CodeFacts`)."""
    from tvm_ext.base import tvm_api
    from tvm_ext.facts.machine import host_machine
    from tvm_ext.facts.machine_code import read_module
    from tvm_ext.facts.target import as_target, host_target

    from .features import features
    from .policy import evaluate, validated_coefficients

    target = as_target(target)
    if machine is None and target.kind.name == "llvm":
        machine = host_machine(host_target(num_cores=int(target.attrs["num-cores"])))
    stores = bool(getattr(policy, "needs_store_features", False))
    feats = features(sch, target, workload, stores=stores)
    stage1 = evaluate(policy, feats, target, machine=machine)
    lib = tvm_api.build_for_tuning(tvm_api.as_module(sch), target)
    code = read_module(tvm_api.assembly(lib), tvm_api.llvm_ir(lib))
    if machine is None:
        return stage1, stage1, code
    coefficients = validated_coefficients(policy, machine)
    stage2 = post_build_cost(stage1, feats, code, machine.cpu, policy, coefficients)
    return stage1, stage2, code
