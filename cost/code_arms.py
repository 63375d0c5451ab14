"""Stage 2's arms that count the built code's own instructions: its FLOPs at the widest
vector it uses (``machine_code.compute``) and, per basic block, the loads, stores and
vector-pipe instructions it needs for each FLOP (``machine_code.loads`` ...). The stage-2 cost
that assembles them is :mod:`tvm_ext.cost.post_build`.

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
   else (:mod:`tvm_ext.built_code.machine_code`). Otherwise stage 2 adds no arm: a call to
   ``expf`` (softmax without fast math) may do arithmetic we cannot see.
2. An instruction does at most ``W`` lanes; an FMA counts 2 FLOPs a lane, any other
   arithmetic instruction (multiply, add, min/max, divide, ...) 1.
3. A core completes at most :func:`~tvm_ext.hardware.isa.fma_lanes_per_cycle` ``(cpu, W)``
   multiply or FMA lanes per cycle at ``W``-wide vectors (``FMA_PIPES`` pipes, each at most
   its datapath wide: Zen 4 runs a 512-bit FMA through two 256-bit halves, so a ``ymm`` FMA
   still issues at 2 a cycle; a CPU the tables do not name may be an E-core with four
   128-bit pipes) and issues at most ``FP_PIPES`` floating-point arithmetic instructions in
   all (:mod:`tvm_ext.hardware.isa`). So a core does at most ``2 x fma_lanes_per_cycle`` FLOPs a
   cycle when every arithmetic instruction is an FMA or a multiply, else at most that plus
   ``(FP_PIPES - FMA_PIPES) x W`` (the remaining pipes filled with adds).
4. No core clocks above the fastest boost of its microarchitecture's fastest part
   (:func:`tvm_ext.hardware.isa.max_boost_hz`, keyed by the machine model's CPU name).
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
so inside one of its basic blocks. :func:`tvm_ext.built_code.machine_blocks.block_costs` reads, per
block, the most FLOPs one run of it can do (its capacity: arithmetic at 2.'s count; logic and
compares, which could carry out a sign operation or a max, at 16-bit lanes) and what the run
asks of the core: load slots (a gather under an all-ones mask one per element), bytes loaded by
full-width vector loads, store slots and bytes, and instructions that occupy a vector pipe. A
single-block counted loop whose trip count the code states is priced with the block that
enters it (and the one it exits to, when nothing else enters either); the blocks an entry
function runs at most once per call are set apart, with their capacity ``once_cap``
(:mod:`tvm_ext.built_code.asm_loops`). Whatever blocks run how often, a core that does ``F``
counted FLOPs asks at least ``per_flop x (F - once_cap)`` of each, with ``per_flop`` the
smallest demand-to-capacity ratio over those groups (the docstring of
:mod:`tvm_ext.built_code.machine_blocks`). A core serves at most
:func:`tvm_ext.hardware.isa.port_limits` of each per cycle (four loads, 128 bytes loaded, two
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
"""

from __future__ import annotations

from tvm_ext.built_code.machine_blocks import RESOURCES
from tvm_ext.built_code.machine_code import CodeFacts
from tvm_ext.hardware.isa import FMA_PIPES, FP_PIPES, fma_lanes_per_cycle, max_boost_hz, port_limits

from .features import CandidateFeatures

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
